"""Traced functions: :class:`TracedFunction` (``tg.trace``, ``tg.compile``)
and :class:`LoadedFunction` (``tg.load``, a pickle without the Python code).

A traced function keeps its traces (one :class:`~tapegrad.tracing.replay._Replay`
per branch combination seen, up to ``MAX_TRACES`` per input signature, for
the ``cache_size`` signatures used last: :data:`MAX_SIGNATURES` unless
``tg.trace``/``tg.compile`` were given another), replays the one whose
guards hold, and traces again when none does.  Its
methods run the transforms over the replay: ``grad`` and ``grad_batch``
the replay's reverse sweep, ``vjp`` and ``jacobian``
``functional.replay_reverse``, ``jvp`` ``forward``'s tangent sweep, ``hvp``
and ``hessian`` ``second``'s passes; those that take tangents (``jvp``,
``hvp``, ``hessian``, ``sparse_hessian``) are in
:mod:`tapegrad.tracing.tangents`, a base class of ``TracedFunction``.

Saving and pickling go through :mod:`tapegrad.tracing.files.io`, which sits above
this module (it builds the functions it loads): it binds the functions
called here into ``files`` when it is imported, and :mod:`tapegrad.tracing.api`
imports it.
"""
import math
import os
import pickle
import types
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..core.tensor import Bindings
from .replay import _LOCK, _Replay
from .tape import _signature
from .tangents import _TangentMethods


#: the tape-file functions saving and pickling call (``save``,
#: ``function_state``, ``npz_bytes``, ``from_bytes``): tracing/files/io.py binds
#: them when it is imported, so that this module never imports the module above it
files = Bindings("tapegrad.tracing.files.io is not imported ({name} is not bound): "
                 "use tg.trace / tg.compile, or import tapegrad.tracing.api")

#: a TracedFunction warns once when it has retraced this many times
RETRACE_WARNING = 10
#: traces kept per signature (one per branch combination seen, most recent first)
MAX_TRACES = 8
#: input signatures (shapes, dtypes, static arguments) a traced function keeps
#: traces for by default: past it, the least recently used signature's traces
#: are dropped, and a later call with it traces again (``cache_size=`` of
#: ``tg.trace`` and ``tg.compile`` sets it per function)
MAX_SIGNATURES = 64


def _cache_size(n):
    if n is None:
        return MAX_SIGNATURES
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"tapegrad: cache_size is a positive int (signatures kept), not {n!r}")
    return n


class TracedFunction(_TangentMethods):
    """A function traced once per input signature and replayed in compiled code.

    Made by :func:`trace` or :func:`compile`.  Floating-point arrays, tensors
    and Python floats among the arguments are the inputs (traced);
    other arguments are static.  Calls are serialised by a lock.

    Traces are kept for the ``cache_size`` input signatures used last
    (:data:`MAX_SIGNATURES` by default), up to ``MAX_TRACES`` per signature:
    a call with a signature whose traces were dropped traces again.

    Attributes
    ----------
    retraces : int
        How many times a guard failed and the function was traced again.
    cache_size : int
        How many signatures' traces are kept (least recently used dropped).
    evictions : int
        How many signatures' traces were dropped to keep within ``cache_size``.
    """

    def __init__(self, f, cache_size=None):
        self.f = f
        # signature -> [_Replay, ...] (most recent first); least recently used first
        self.cache = OrderedDict()
        self.cache_size = _cache_size(cache_size)
        self.evictions = 0
        self.retraces = 0
        self._warned = False
        self.__wrapped__ = f
        self.__name__ = getattr(f, "__name__", "traced")
        self.__doc__ = getattr(f, "__doc__", None)

    def _run(self, args, full=False):
        """A replay whose forward has run at ``args`` (lock held by caller)."""
        key, pos, xs = _signature(args)
        reps = self.cache.get(key)
        if reps is None:
            reps = self.cache[key] = [_Replay(self.f, args)]
            self._evict()
        else:
            self.cache.move_to_end(key)
        for k, rep in enumerate(reps):
            if rep.forward(xs, full):
                if k:
                    reps.insert(0, reps.pop(k))
                return rep, xs
        # every trace of this signature took another branch: trace again
        self.retraces += 1
        if self.retraces >= RETRACE_WARNING and not self._warned:
            self._warned = True
            warnings.warn(
                f"tapegrad: {self.__name__} was traced again {self.retraces} times because "
                "Python control flow on traced values went another way; traced functions "
                "are fast when branches are rare (use tg.where for elementwise choices)",
                RuntimeWarning, stacklevel=3)
        rep = _Replay(self.f, args)
        reps.insert(0, rep)
        del reps[MAX_TRACES:]
        if not rep.forward(xs, full):
            raise RuntimeError(f"tapegrad.trace: {self.__name__} does not take the same "
                               "branches twice at the same inputs (is it deterministic?)")
        return rep, xs

    def _evict(self):
        """Drop the least recently used signatures' traces past ``cache_size``."""
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
            self.evictions += 1

    def __call__(self, *args):
        """The function's value at ``args`` (an ndarray or NumPy scalar; a tuple
        of them for a function that returns a tuple).  Given tensors that
        require grad, the value is a tensor on their graph, whose gradient is
        the trace's (``tapegrad/tracing/call.py``)."""
        from . import call as traced_call
        if traced_call.joins_graph(args):
            return traced_call.call(self, args)
        return self._locked(args)[0]

    def _locked(self, args, seeds=None, scalar=False):
        """Value and, for each cotangent list (one entry per output) in
        ``seeds``, the gradients, under the lock (many cotangents at once go
        through ``_vector`` instead)."""
        with _LOCK:
            rep, xs = self._run(args)
            try:
                value = rep.value()
                if seeds is None:
                    return value, None
                if scalar and (rep.multi or np.size(value) != 1):
                    what = (f"a tuple of {len(value)} outputs" if rep.multi
                            else f"shape {np.shape(value)}")
                    raise RuntimeError(
                        f"grad needs a function with one output element; this one returns "
                        f"{what}: use ft.vjp(*args, cotangent)")
                return value, [rep.backward(s) for s in seeds]
            finally:
                rep.release()

    def _scalar_value_and_grad(self, args):
        """``(value, [gradient per input])`` for ``tg.grad`` and
        ``tg.value_and_grad`` of this function at plain arrays (one replay
        and its reverse sweep, as :meth:`value_and_grad`), or None when the
        function does not return one element: the transform's general path
        then raises its own error."""
        with _LOCK:
            rep, xs = self._run(args)
            try:
                value = rep.value()
                if rep.multi or np.size(value) != 1:
                    return None
                return value, rep.backward([np.ones(1)])
            finally:
                rep.release()

    @staticmethod
    def _unpack(g):
        return g[0] if len(g) == 1 else tuple(g)

    def value_and_grad(self, *args):
        """``(f(*args), gradient)`` for a function with one output element; the
        gradient is one array per input (a tuple when there are several).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x * x).sum(), np.ones(3))
        >>> v, g = ft.value_and_grad(np.array([1.0, 2.0, 3.0]))
        >>> float(v), g
        (14.0, array([2., 4., 6.]))
        """
        v, gs = self._locked(args, [[np.ones(1)]], scalar=True)
        return v, self._unpack(gs[0])

    def grad(self, *args):
        """The gradient of a one-element output w.r.t. every input.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: np.sin(x).sum(), np.zeros(2))
        >>> ft.grad(np.array([0.0, np.pi]))
        array([ 1., -1.])
        """
        return self.value_and_grad(*args)[1]

    def vjp(self, *args_and_cotangent):
        """``(f(*args), cotangentᵀ ∂f/∂inputs)``; the cotangent (last argument)
        has the output's shape, or one more leading axis for a batch of them
        (the gradients then have that leading axis too).  For a function that
        returns a tuple, the cotangent is a tuple with one entry per output
        (all batched with the same leading axis, or none).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: 3 * x, np.zeros(2))
        >>> ft.vjp(np.ones(2), np.array([[1.0, 0.0], [0.0, 2.0]]))[1]
        array([[3., 0.],
               [0., 6.]])
        >>> fm = tg.trace(lambda x: (x.sum(), 2 * x), np.zeros(2))
        >>> (total, doubled), g = fm.vjp(np.ones(2), (1.0, np.array([0.0, 1.0])))
        >>> float(total), doubled, g
        (2.0, array([2., 2.]), array([1., 3.]))
        """
        *args, ct = args_and_cotangent

        def cotangents(rep):
            if rep.multi:
                if not isinstance(ct, (tuple, list)) or len(ct) != len(rep.roots):
                    raise TypeError(
                        f"vjp: the function returns a tuple of {len(rep.roots)} outputs; "
                        f"give a tuple of as many cotangents, got {type(ct).__name__}"
                        + (f" of {len(ct)}" if isinstance(ct, (tuple, list)) else ""))
                cts = [np.asarray(c, np.float64) for c in ct]
            else:
                cts = [np.asarray(ct, np.float64)]
            if all(c.shape == s for c, s in zip(cts, rep.out_shapes)):
                batch.append(False)
                return [c.reshape(1, -1) for c in cts], 1
            ks = {c.shape[0] if c.ndim else None for c in cts}
            if (len(ks) != 1 or None in ks
                    or any(c.shape[1:] != s for c, s in zip(cts, rep.out_shapes))):
                raise ValueError(
                    f"vjp: the cotangent has shape {[c.shape for c in cts] if rep.multi else cts[0].shape}"
                    f"; the output has shape "
                    f"{rep.out_shapes if rep.multi else rep.out_shape} (a batch of "
                    "cotangents adds the same leading axis to each)")
            p = ks.pop()
            batch.append(True)
            return [c.reshape(p, -1) for c in cts], p

        batch = []
        v, rep, gs = self._vector(args, cotangents)
        gs = [g.reshape(g.shape[:1] + tuple(s)).astype(d, copy=False)
              for g, s, d in zip(gs, rep.in_shapes, rep.in_dtypes)]
        return v, self._unpack(gs if batch[0] else [g[0] for g in gs])

    def jacobian(self, *args):
        """∂f/∂x for every input x: shape ``f.shape + x.shape``, from one
        forward and one vector reverse sweep that carries all the output's
        unit seeds (``functional.replay_reverse``, as ``tg.jacobian``).  For a function that returns
        a tuple: a tuple with one such result per output.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: x * x, np.zeros(2))
        >>> ft.jacobian(np.array([1.0, 2.0]))
        array([[2., 0.],
               [0., 4.]])
        """
        _, rep, gs = self._vector(args, _unit_seeds)
        res, at = [], 0
        for shape in rep.out_shapes:
            m = math.prod(shape)
            res.append(self._unpack([
                g[at:at + m].reshape(shape + tuple(s)).astype(d, copy=False)
                for g, s, d in zip(gs, rep.in_shapes, rep.in_dtypes)]))
            at += m
        return tuple(res) if rep.multi else res[0]

    def _one_jacobian(self, args):
        """For ``tg.jacobian`` of this function at plain arrays: per output,
        one Jacobian per input, as :meth:`jacobian` computes them (a vector
        reverse sweep over the replay, where the traced call recorded as an
        op on the tape would be swept once per output element), and whether
        the function returns a tuple of outputs."""
        _, rep, gs = self._vector(args, _unit_seeds)
        res, at = [], 0
        for shape in rep.out_shapes:
            m = math.prod(shape)
            res.append([g[at:at + m].reshape(shape + tuple(s)).astype(d, copy=False)
                        for g, s, d in zip(gs, rep.in_shapes, rep.in_dtypes)])
            at += m
        return res, rep.multi

    def _vector(self, args, seeds):
        """``(value, replay, grads)`` for the p cotangents ``seeds(replay)``
        returns (``(per output a (p, size) array or None, p)``): all p
        through one compiled vector reverse sweep
        (``functional.replay_reverse``); grads holds one (p, size) float64
        array per input."""
        from ..transforms.functional import replay_reverse
        with _LOCK:
            rep, _ = self._run(args)
            try:
                value = rep.value()
                cts, p = seeds(rep)
                if rep.segs and p > 1:
                    # fused segments keep their intermediates in scratch; the
                    # vector sweep reads every record's value
                    rep.forward(None, True)
                return value, rep, replay_reverse(rep, cts, p)
            finally:
                rep.release()

    def grad_batch(self, *batches, workers=None):
        """Gradients at a batch of inputs: each argument has one more leading
        axis than the function takes, and the result too (one gradient per
        row; a tuple of such arrays when there are several inputs).

        A trace whose records all run in compiled code (no host records
        such as matmul, no fused segments, no guarded NumPy calls) computes
        every row in one compiled call (kernels/batch.py) on ``workers``
        Numba threads (default: Numba's thread count), each row's replay
        and sweep on the thread's own copy of the trace's storage.  Other
        traces split the rows among ``workers`` Python threads (default:
        every core), each replaying its own copy of the trace; the compiled
        replay and sweep release the GIL, so the threads run at once.  A
        row whose guard fails is evaluated through ``grad`` (tracing again
        if needed).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x ** 3).sum(), np.zeros(2))
        >>> ft.grad_batch(np.array([[1.0, 2.0], [3.0, 4.0]]))
        array([[ 3., 12.],
               [27., 48.]])
        """
        if not batches:
            raise TypeError("grad_batch needs at least one batch of inputs")
        batches = [np.asarray(b) for b in batches]
        if any(b.ndim == 0 for b in batches) or len({len(b) for b in batches}) != 1:
            raise ValueError("grad_batch: every argument needs the same leading (batch) "
                             f"axis; got shapes {[b.shape for b in batches]}")
        nb = len(batches[0])
        if nb == 0:
            raise ValueError("grad_batch: the batch is empty")
        with _LOCK:
            rep, _ = self._run([b[0] for b in batches])
            try:
                scalar = not rep.multi and np.size(rep.value()) == 1
            finally:
                rep.release()
            if not scalar:
                raise RuntimeError("grad_batch needs a function with one output element")
            key = _signature([b[0] for b in batches])[0]
            if rep.pos != list(range(len(batches))) or any(k[0] == "static" for k in key):
                raise TypeError("grad_batch takes array inputs only (no static arguments)")
            job = None
            if rep.batch_compiled():
                from ..kernels.batch import threads_for
                X = np.concatenate([np.asarray(b, np.float64).reshape(nb, -1) for b in batches],
                                   axis=1)
                job = rep.batch_job(X, threads_for(workers))
            else:
                workers = max(1, min(workers or os.cpu_count() or 1, nb))
                reps = [rep.clone() for _ in range(workers)]  # the cached one stays free
        outs = [np.empty((nb,) + s, d) for s, d in zip(rep.in_shapes, rep.in_dtypes)]
        if job is not None:
            run, G, left = job
            run()
            at = 0
            for o in outs:
                m = o[0].size
                o[...] = G[:, at:at + m].reshape(o.shape)
                at += m
            return self._finish(outs, [np.flatnonzero(left).tolist()], batches)
        seed = [np.ones(1)]
        missed = [[] for _ in range(workers)]

        def work(w):
            mine = reps[w]
            for i in range(w * nb // workers, (w + 1) * nb // workers):
                if mine.forward([np.asarray(b[i], np.float64) for b in batches]):
                    gs = mine.backward(seed)
                    for k, o in enumerate(outs):
                        o[i] = gs[k]
                    del gs  # let the next backward reuse the gradient arena
                else:
                    missed[w].append(i)
            mine.release()

        if workers == 1:
            work(0)
        else:
            with ThreadPoolExecutor(workers - 1) as pool:
                futs = [pool.submit(work, w) for w in range(1, workers)]
                work(0)
                for fu in futs:
                    fu.result()
        return self._finish(outs, missed, batches)

    def _finish(self, outs, missed, batches):
        """grad_batch's result, the ``missed`` rows (lists of row numbers)
        computed one by one through ``value_and_grad``."""
        for i in sorted(i for m in missed for i in m):
            # another branch: the locked path traces again (or raises, if loaded)
            gs = self.value_and_grad(*[b[i] for b in batches])[1]
            for o, g in zip(outs, gs if isinstance(gs, tuple) else [gs]):
                o[i] = g
        return self._unpack(outs)

    def save(self, path):
        """Write every trace of this function to ``path``, one ``.npz`` of plain
        arrays (no pickled code); :func:`tapegrad.load` reads it back in any
        process.

        User elementwise ops (``tg.elementwise``) are saved by name: pass them
        to ``tg.load(path, ops=[...])``.  Raises ``ValueError`` for static
        arguments other than int, bool, str and None.

        Examples
        --------
        >>> import os, tempfile, numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: np.exp(x).sum(), np.zeros(2))
        >>> path = os.path.join(tempfile.mkdtemp(), "f.npz")
        >>> ft.save(path)
        >>> float(tg.load(path)(np.zeros(2)))
        2.0
        """
        with _LOCK:
            self._check_single("saved")
            calls = sorted({c.name for reps in self.cache.values() for rep in reps
                            for c in rep.calls})
            if calls:
                raise ValueError(
                    f"tapegrad: {self.__name__} cannot be saved: a trace guards "
                    f"{', '.join('numpy.' + n for n in calls)} on traced values, which runs "
                    "Python at every replay; compute such indices outside the function and "
                    "pass them in, or keep the Python function (pickle it) instead")
            files.save(self, path)

    def __reduce__(self):
        # the traces travel as the bytes of a tape file, read back by the
        # file loader with all its checks; the Python function too when it
        # pickles (so the copy can still retrace).  Unpickling runs whatever
        # a pickle names, as any pickle: untrusted traces go through tg.load.
        f = getattr(self, "f", None)
        try:
            pickle.dumps(f)
        except Exception:
            f = None
        with _LOCK:
            self._check_single("pickled")
            # a trace that guards a Python call travels as the function, which
            # the copy traces again when called
            portable = {k: [r for r in reps if not r.calls] for k, reps in self.cache.items()}
            portable = {k: reps for k, reps in portable.items() if reps}
            if f is None and portable != self.cache:
                raise TypeError(
                    f"tapegrad: {self.__name__} cannot be pickled: a trace guards a NumPy "
                    "call on traced values (Python at every replay) and the function itself "
                    "does not pickle; define it at module level")
            stand_in = types.SimpleNamespace(cache=portable, __name__=self.__name__)
            data = files.npz_bytes(files.function_state(stand_in, user_ops=False))
        return files.from_bytes, (data, f)

    def _check_single(self, how):
        if any(rep.multi for reps in self.cache.values() for rep in reps):
            raise NotImplementedError(
                f"tapegrad: a traced function that returns a tuple cannot be {how} yet "
                "(tape files hold one output); trace one function per output to save them")

    @property
    def n_traces(self):
        """How many traces are cached, over all signatures."""
        return sum(len(v) for v in self.cache.values())

    def __repr__(self):
        return f"<tapegrad traced function {self.__name__}, {self.n_traces} trace(s)>"


def _unit_seeds(rep):
    """The cotangents of a Jacobian: a unit vector per element of every
    output, ``(per output a (p, size) array, p)``."""
    sizes = [math.prod(s) for s in rep.out_shapes]
    p, at, out = sum(sizes), 0, []
    for m in sizes:
        s = np.zeros((p, m))
        s[at + np.arange(m), np.arange(m)] = 1.0
        out.append(s)
        at += m
    return out, p


class LoadedFunction(TracedFunction):
    """A traced function read from a file or a pickle without its Python code:
    it replays its saved traces only (call :func:`tapegrad.load`)."""

    def __init__(self, name="loaded"):
        super().__init__(None)
        self.__name__ = name

    def _run(self, args, full=False):
        key, pos, xs = _signature(args)
        reps = self.cache.get(key)
        if reps is None:
            raise RuntimeError(
                f"tapegrad: the loaded function {self.__name__} has no trace for "
                f"arguments of signature {key}; it was saved for {list(self.cache)}")
        for k, rep in enumerate(reps):
            if rep.forward(xs, full):
                if k:
                    reps.insert(0, reps.pop(k))
                return rep, xs
        raise RuntimeError(
            f"tapegrad: the loaded function {self.__name__} takes another branch at these "
            "inputs than any saved trace (a guard failed) and has no Python code to "
            "trace again; save it after calling it on such inputs")


