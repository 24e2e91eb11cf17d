"""Trace once, replay compiled: ``tg.trace(f, *args)`` and ``@tg.compile``.

Tracing runs ``f`` once, eagerly, on a private tape (a :class:`TraceTape`
installed as the thread's tape for the duration) that keeps every value.
The records it leaves are the function: a replay writes new inputs into the
input records and recomputes every other record in order in compiled code
(:mod:`tapegrad.kernels.replay`), and the ordinary reverse sweep then runs on
the replayed values.  Host records (matmul, solve, ...) are computed by NumPy
during a replay, as their VJPs are during a sweep.

What a trace fixes
------------------
* Shapes and dtypes: a call with different ones traces again (one cache
  entry per signature).  Python ints, bools, strings and tuples among the
  arguments are static: part of the signature, baked into the trace.
* Arrays and detached tensors that ``f`` closes over (or builds from the
  inputs behind tapegrad's back: ``x.numpy()``, ``x.detach()``, integer
  indices computed from values) are constants of the trace, read at trace
  time.
* Python control flow that reads a traced value -- ``bool()``, ``float()``,
  ``int()``, ``.item()`` of a tensor, an ``if`` on a comparison -- becomes a
  guard: a replay whose guard no longer holds traces again transparently
  (``ft.retraces`` counts these; a warning is issued past
  ``RETRACE_WARNING``).  Comparisons of traced tensors are records, so a
  ``where`` mask or a ``x * (x > 0)`` is recomputed by the replay; a
  comparison whose result no record consumes (it went to NumPy or Python)
  is guarded as a whole.
* Replay computes in float64 (the tape's precision); a float32 function's
  results are cast back to float32.

Saving, pickling, batches
-------------------------
``ft.save(path)`` writes every trace to one ``.npz`` of plain arrays and
``tg.load(path)`` reads it back, validated, in any process (see
:mod:`tapegrad.tapefile`); a loaded function replays but cannot trace again.
Traced functions pickle through the same arrays (with ``f`` when ``f``
pickles), so ``multiprocessing`` workers can run them.  ``ft.grad_batch(X)``
splits a batch among threads, each replaying its own copy of the trace.

Ops that cannot be replayed (``sort``, ``tg.Function``, eigh, qr, svd,
lstsq) raise ``NotImplementedError`` naming the op when traced; every trace
is also replayed once at its own inputs and compared record by record with
the eager values, so an op whose replay would differ fails loudly there.
"""
import os
import pickle
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .autograd import Adjoints
from .kernels import codes as C
from .kernels import replay as RK
from .kernels._views import SMALL
from .kernels.sweep import layout, sweep
from .ops.elementwise import broadcast_params
from .ops.registry import REGISTRY, register
from .tape import Tape, _local, _writeable
from .tensor import Tensor, _node, _plain

#: a TracedFunction warns once when it has retraced this many times
RETRACE_WARNING = 10
#: traces kept per signature (one per branch combination seen, most recent first)
MAX_TRACES = 8

_CMP = {np.less: RK.LESS, np.less_equal: RK.LESS_EQUAL, np.greater: RK.GREATER,
        np.greater_equal: RK.GREATER_EQUAL, np.equal: RK.EQUAL, np.not_equal: RK.NOT_EQUAL}
for _f, _sub in _CMP.items():
    if C.code(C.K_NONE, _sub) not in REGISTRY:  # doctest collection imports twice
        register(_f.__name__.title().replace("_", ""), C.K_NONE, _sub)
_CMP = {f: C.code(C.K_NONE, s) for f, s in _CMP.items()}

#: host ops the replay computes with NumPy: name -> forward(inputs, host info)
_HOST_FORWARD = {
    "Mm": lambda xs, h: np.matmul(*xs),
    "LinalgInv": lambda xs, h: np.linalg.inv(*xs),
    "LinalgSolve": lambda xs, h: np.linalg.solve(*xs),
    "LinalgDet": lambda xs, h: np.linalg.det(*xs),
    "LinalgSlogdet": lambda xs, h: np.linalg.slogdet(*xs)[1],
    "LinalgCholesky": lambda xs, h: np.linalg.cholesky(*xs),
    "LinalgPinv": lambda xs, h: np.linalg.pinv(xs[0], hermitian=h[0]),
    "Einsum": lambda xs, h: np.einsum(",".join(h[0]) + "->" + h[1], *xs),
}
#: how many leading entries of ``tape.host[r]`` precede the input shapes
_HOST_EXTRA = {"Mm": 0, "LinalgPinv": 1, "Einsum": 2}
#: records whose replay would silently be wrong at new inputs
_NOT_REPLAYABLE = {
    "Sort": "its index map depends on the values",
    "Function": "tg.Function runs user Python",
    "LinalgEigh": "multi-output host op", "LinalgQr": "multi-output host op",
    "LinalgSvd": "multi-output host op", "LinalgLstsq": "multi-output host op",
}


class TraceTape(Tape):
    """The tape a trace records on: it keeps every value, never resets or
    compacts, records comparisons, and turns Python reads of traced values
    into guards."""

    tracing = True

    def __init__(self):
        super().__init__()
        self.hold = self.tok          # a live holder: the tape never resets
        self.check_at = 1 << 62       # ... nor compacts (record ids must stay)
        self.derived = {}             # id(comparison result) -> (record, array)
        self.guards = {}              # record -> (kind, expected value)

    def _value(self, r, value, inputs=None):
        Tape._value(self, r, value, inputs)
        if self.size[r] > SMALL and self.rix[r] < 0:
            self.rix[r] = len(self.refs)
            self.refs.append(np.array(value, dtype=np.float64).reshape(-1))

    def traced(self, x):
        """Record of a traced value (a tensor that requires grad, or a
        comparison result), else None."""
        if isinstance(x, Tensor):
            if x._requires_grad:
                return _node(self, x)
            x = x._data
        d = self.derived.get(id(x))
        if d is not None and d[1] is x:
            return d[0]
        return None

    def constant(self, value):
        r = self.traced(value)
        return r if r is not None else Tape.constant(self, value)

    def compare(self, fn, a, b, data):
        ra, rb = self.traced(a), self.traced(b)
        if ra is None and rb is None:
            return _plain(data)
        ad = a._data if isinstance(a, Tensor) else a
        bd = b._data if isinstance(b, Tensor) else b
        ra = Tape.constant(self, ad) if ra is None else ra
        rb = Tape.constant(self, bd) if rb is None else rb
        data = np.asarray(data)  # a 0-d array, not a NumPy bool: its id must stay
        p = broadcast_params(data.shape, (np.shape(ad), np.shape(bd)), data.size) or [0]
        r = self.record(_CMP[fn], (), data, [ra, rb] + list(p))
        self.derived[id(data)] = (r, data)
        return _plain(data)

    def guard(self, t, v, truth):
        r = self.traced(t)
        if r is None:
            return
        old = self.guards.get(r)
        if truth and (old is None or old[0] == RK.G_TRUTH):
            self.guards[r] = (RK.G_TRUTH, 1.0 if v else 0.0)
        else:
            self.guards[r] = (RK.G_VALUE, None)  # the replay's own value, set later


def _is_input(a):
    if isinstance(a, Tensor):
        return a.dtype.kind == "f"
    if isinstance(a, (float, np.floating)):
        return True
    if isinstance(a, np.ndarray):
        if a.dtype.kind == "f":
            return True
        raise TypeError(f"tapegrad.trace: array arguments must be floating point, got "
                        f"dtype {a.dtype}; close over integer arrays instead")
    return False


def _signature(args):
    """(cache key, input positions, input arrays) of a call."""
    key, pos, xs = [], [], []
    for i, a in enumerate(args):
        if _is_input(a):
            d = a._data if isinstance(a, Tensor) else a
            d = np.asarray(d)
            key.append((d.shape, d.dtype.str))
            pos.append(i)
            xs.append(d)
        else:
            try:
                hash(a)
            except TypeError:
                raise TypeError(f"tapegrad.trace: argument {i} ({type(a).__name__}) is "
                                "neither a float array nor hashable; close over it") from None
            key.append(("static", type(a), a))
    return tuple(key), pos, xs


class _Replay:
    """One trace: its records, value storage and adjoint layout."""

    def __init__(self, f, args):
        _, self.pos, xs = _signature(args)
        tape = TraceTape()
        had = "tape" in _local.__dict__
        prev = _local.__dict__.get("tape")
        _local.tape = tape
        try:
            leaves = [_plain(np.array(x)[()] if x.ndim == 0 else np.array(x)).requires_grad_()
                      for x in xs]
            self.leaf_rec = [_node(tape, t) for t in leaves]
            call = list(args)
            for i, t in zip(self.pos, leaves):
                call[i] = t
            out = f(*call)
        finally:
            if had:
                _local.tape = prev
            else:
                del _local.tape
            for a in tape.flipped:
                _writeable(a)
            tape.flipped.clear()
        if not isinstance(out, Tensor):
            if isinstance(out, (tuple, list, dict)):
                raise NotImplementedError(
                    "tapegrad.trace: the function must return one tensor (several "
                    "outputs are not supported yet)")
            out = _plain(np.asarray(out))
        self.in_shapes = [x.shape for x in xs]
        self.in_dtypes = [x.dtype for x in xs]
        self.out_shape = out.shape
        self.out_dtype = out._data.dtype if out._data.dtype.kind == "f" else np.dtype(np.float64)
        self.root = tape.traced(out)
        self.const_out = None if self.root is not None else np.array(out._data, np.float64)
        self.tol = (1e-6, 1e-9) if all(d == np.float64 for d in self.in_dtypes) else (1e-3, 1e-5)
        self._build(tape)
        self.lock = threading.Lock()

    # -- building ---------------------------------------------------------------------
    def _build(self, tape):
        n = self.n = tape.n
        tape.arg0[n] = tape.na
        self.op = tape.op[:n].copy()
        self.arg0 = tape.arg0[:n + 1].copy()
        self.size = tape.size[:n].copy()
        self.ip0 = tape.ip0[:n].copy()
        self.args = tape.args[:max(tape.na, 1)].copy()
        self.ip = tape.ip[:max(tape.ni, 1)].copy()
        self.fp = tape.fp[:n].copy()
        self.host = dict(tape.host)
        self._check_ops()
        self._allocate()
        self.v1[:] = tape.v1[:n]
        m = min(tape.nv, self.vals.size)
        self.vals[:m] = tape.vals[:m]
        for r, view in zip(np.flatnonzero(self.size > SMALL), self.refs):
            view[:] = np.ravel(tape.refs[tape.rix[r]])
        self.guard = np.zeros(n, np.int64)
        self.goff = np.zeros(n, np.int64)
        self.gvals = np.zeros(1)
        self._self_check(tape)

    def _allocate(self):
        """Value and adjoint storage for the records (op, size, ... set)."""
        n = self.n
        self.voff, aoff, leaf, inner, outer = layout(self.op, self.size, n, SMALL)
        self.v1 = np.zeros(n)
        mid = self.size[(self.size > 1) & (self.size <= SMALL)]
        self.vals = np.zeros(max(int(mid.sum()), 1))
        large = np.flatnonzero(self.size > SMALL)
        boff = np.zeros(large.size, np.int64)
        if large.size:
            boff[1:] = np.cumsum(self.size[large])[:-1]
        self.big = np.zeros(max(int(self.size[large].sum()), 1))
        self.rix = np.full(n, -1, np.int64)
        self.rix[large] = np.arange(large.size)
        self.refs = []
        for k, r in enumerate(large):
            self.refs.append(self.big[boff[k]:boff[k] + self.size[r]])
        self.ptrs = self.big.ctypes.data + 8 * boff
        self.faddr = np.zeros(n, np.int64)
        from .ops.custom import USER_OPS
        for r in np.flatnonzero((self.op >> C.SHIFT) == C.K_USER):
            self.faddr[r] = USER_OPS[int(self.ip[self.ip0[r]])].forward_address()
        # adjoints: leaves in a fresh arena per gradient, the rest reused
        self.A = np.empty(max(inner, 1))
        self.L = np.empty(max(outer, 1))
        self.aptr0 = aoff * 8 + np.where(leaf, self.L.ctypes.data, self.A.ctypes.data)
        self.aptr = self.aptr0.copy()
        self.reached = np.zeros(n, np.bool_)
        self.freed = np.zeros(n, np.bool_)
        self.adj = Adjoints.__new__(Adjoints)
        self.adj.voff, self.adj.off, self.adj.leaf = self.voff, aoff, leaf
        self.adj.A, self.adj.L, self.adj.size = self.A, self.L, self.size
        self.adj.aptr, self.adj.reached = self.aptr, self.reached
        self.T = (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                  self.v1, self.vals, self.voff, self.rix, self.ptrs, self.aptr, self.reached)

    @classmethod
    def from_state(cls, t):
        """A replay from a validated trace description (tapefile.parse)."""
        self = cls.__new__(cls)
        self.pos = list(t["pos"])
        self.leaf_rec = [int(r) for r in t["leaf_rec"]]
        self.in_shapes, self.in_dtypes = list(t["in_shapes"]), list(t["in_dtypes"])
        self.out_shape, self.out_dtype, self.root = t["out_shape"], t["out_dtype"], t["root"]
        self.const_out = (None if self.root is not None
                          else np.array(t["const_out"], np.float64).reshape(self.out_shape))
        self.n = int(t["op"].size)
        for name in ("op", "arg0", "size", "ip0", "args", "ip", "fp", "guard", "goff", "gvals"):
            setattr(self, name, np.array(t[name], order="C"))  # owned, writeable
        self.host = dict(t["hosts"])
        self._allocate()
        at = 0
        for r in t["held"]:
            k = int(self.size[r])
            self.view(r)[:] = t["held_vals"][at:at + k]
            at += k
        self.n_guards = int(np.count_nonzero(self.guard))
        self.lock = threading.Lock()
        return self

    def clone(self):
        """An independent copy (own value and adjoint storage) for another thread."""
        new = _Replay.__new__(_Replay)
        new.__dict__.update(self.__dict__)
        new._allocate()
        new.v1[:], new.vals[:], new.big[:] = self.v1, self.vals, self.big
        new.lock = threading.Lock()
        return new

    def _check_ops(self):
        for r in range(self.n):
            code = int(self.op[r])
            name = REGISTRY[code].name if code in REGISTRY else f"op code {code}"
            why = _NOT_REPLAYABLE.get(name)
            if why is None and code >> C.SHIFT == C.K_HOST and name not in _HOST_FORWARD:
                why = "no replay forward for this host op"
            if why is not None:
                raise NotImplementedError(
                    f"tapegrad.trace cannot replay {name} ({why}); call the function "
                    "eagerly, or keep this op outside the traced function")

    def _self_check(self, tape):
        """Replay at the trace's own inputs; every record must match eager."""
        old_v1, old_vals, old_big = self.v1.copy(), self.vals.copy(), self.big.copy()
        s = self.forward(None)
        assert s, "a replay without guards cannot fail one"
        rt, at = self.tol
        bad = None
        for new, old in ((self.v1, old_v1), (self.vals, old_vals), (self.big, old_big)):
            if not np.allclose(new, old, rtol=rt, atol=at, equal_nan=True):
                bad = True
        if bad:
            for r in range(self.n):
                if self.size[r] and not np.allclose(self.view(r), self._traced_value(
                        r, old_v1, old_vals, old_big), rtol=rt, atol=at, equal_nan=True):
                    name = REGISTRY[int(self.op[r])].name
                    raise NotImplementedError(
                        f"tapegrad.trace cannot replay {name} (record {r}) as it was "
                        "called: its replayed value differs from the eager one (e.g. "
                        "round with decimals, pad with a nonzero constant)")
        # guards: truth as eager code saw it, values as the replay computes them
        goff, gvals = [], []
        consumed = np.zeros(self.n, np.bool_)
        consumed[self.args[:self.arg0[self.n]]] = True
        for r in np.flatnonzero(((self.op >> C.SHIFT) == C.K_NONE)
                                & ((self.op & C.MASK) >= RK.CMP_FIRST) & ~consumed):
            tape.guards[int(r)] = (RK.G_VALUE, None)  # went to Python or NumPy
        at = 0
        for r, (kind, expect) in sorted(tape.guards.items()):
            v = self.view(r).copy()
            if kind == RK.G_TRUTH:
                if (v[0] != 0) != (expect != 0):
                    raise NotImplementedError(
                        f"tapegrad.trace: the replay decides a branch (record {r}) "
                        "differently from eager code (float32 rounding?)")
                v[:] = expect
            self.guard[r] = kind
            self.goff[r] = at
            gvals.append(v)
            at += v.size
        if gvals:
            self.gvals = np.concatenate(gvals)
        self.n_guards = len(gvals)

    def _traced_value(self, r, v1, vals, big):
        n = self.size[r]
        if n == 1:
            return v1[r:r + 1]
        if n <= SMALL:
            return vals[self.voff[r]:self.voff[r] + n]
        o = (self.refs[self.rix[r]].ctypes.data - self.big.ctypes.data) // 8
        return big[o:o + n]

    # -- running -----------------------------------------------------------------------
    def view(self, r):
        """Record r's value storage, flat."""
        n = self.size[r]
        if n == 1:
            return self.v1[r:r + 1]
        if n <= SMALL:
            return self.vals[self.voff[r]:self.voff[r] + n]
        return self.refs[self.rix[r]]

    def forward(self, xs):
        """Replay at inputs ``xs`` (None: as stored); False if a guard fails."""
        if xs is not None:
            for r, x in zip(self.leaf_rec, xs):
                self.view(r)[:] = x.reshape(-1)
        guard = self.guard if xs is not None else np.zeros(self.n, np.int64)
        start = 0
        while True:
            s = RK.replay(self.T, self.faddr, guard, self.goff, self.gvals, start, self.n)
            if s == -1:
                return True
            if s < -1:
                return False
            self._host_forward(s)
            if guard[s]:
                v, e = self.view(s), self.gvals[self.goff[s]:self.goff[s] + self.size[s]]
                if guard[s] == RK.G_TRUTH and (v[0] != 0) != (e[0] != 0):
                    return False
                if guard[s] == RK.G_VALUE and not np.array_equal(v, e, equal_nan=True):
                    return False
            start = s + 1

    def _host_forward(self, r):
        d = REGISTRY[int(self.op[r])]
        h = self.host[r]
        extra = _HOST_EXTRA.get(d.name, 0)
        a0, a1 = self.arg0[r], self.arg0[r + 1]
        xs = [self.view(p).reshape(shape)
              for p, shape in zip(self.args[a0:a1], h[extra:extra + a1 - a0])]
        with np.errstate(all="ignore"):
            y = np.ravel(_HOST_FORWARD[d.name](xs, h))
        if y.size != self.size[r]:  # only a loaded file can disagree
            raise ValueError(f"{d.name} (record {r}) computes {y.size} elements where "
                             f"the trace has {self.size[r]}")
        self.view(r)[:] = y

    def value(self):
        if self.root is None:
            return self.const_out.astype(self.out_dtype)
        return self.view(self.root).reshape(self.out_shape).astype(self.out_dtype)

    def backward(self, seed):
        """Gradients w.r.t. every input for the cotangent ``seed`` (flat float64),
        after a ``forward``."""
        if self.root is None:
            return [np.zeros(s, d) for s, d in zip(self.in_shapes, self.in_dtypes)]
        self.aptr[:] = self.aptr0
        self.reached[:] = False
        adj = self.adj
        adj.add(self.root, seed)
        start = self.root
        while True:
            s = sweep(self.T, self.freed, start, -1)
            if s == -1:
                break
            REGISTRY[int(self.op[s])].host_vjp(self, adj, s)
            start = s - 1
        out = []
        for r, shape, dt in zip(self.leaf_rec, self.in_shapes, self.in_dtypes):
            if self.reached[r]:
                out.append(adj[r].reshape(shape).astype(dt))
            else:
                out.append(np.zeros(shape, dt))
        return out


class TracedFunction:
    """A function traced once per input signature and replayed in compiled code.

    Made by :func:`trace` or :func:`compile`.  Floating-point arrays, tensors
    and Python floats among the arguments are the inputs (traced);
    other arguments are static.  Calls are serialised by a lock.

    Attributes
    ----------
    retraces : int
        How many times a guard failed and the function was traced again.
    """

    def __init__(self, f):
        self.f = f
        self.cache = {}        # signature -> [_Replay, ...], most recent first
        self.retraces = 0
        self._warned = False
        self.__wrapped__ = f
        self.__name__ = getattr(f, "__name__", "traced")
        self.__doc__ = getattr(f, "__doc__", None)

    def _run(self, args):
        """A replay whose forward has run at ``args`` (lock held by caller)."""
        key, pos, xs = _signature(args)
        reps = self.cache.get(key)
        if reps is None:
            reps = self.cache[key] = [_Replay(self.f, args)]
        for k, rep in enumerate(reps):
            if rep.forward(xs):
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
        if not rep.forward(xs):
            raise RuntimeError(f"tapegrad.trace: {self.__name__} does not take the same "
                               "branches twice at the same inputs (is it deterministic?)")
        return rep, xs

    def __call__(self, *args):
        """The function's value at ``args`` (an ndarray or NumPy scalar)."""
        return self._locked(args)[0]

    def _locked(self, args, seeds=None, scalar=False):
        lock = _LOCK
        with lock:
            rep, xs = self._run(args)
            value = rep.value()
            if seeds is None:
                return (value[()] if value.ndim == 0 else value), None
            if scalar and value.size != 1:
                raise RuntimeError(
                    f"grad needs a function with one output element; this one has shape "
                    f"{value.shape}: use ft.vjp(*args, cotangent)")
            grads = [rep.backward(s) for s in seeds]
            return (value[()] if value.ndim == 0 else value), grads

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
        v, gs = self._locked(args, [np.ones(1)], scalar=True)
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
        (the gradients then have that leading axis too).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: 3 * x, np.zeros(2))
        >>> ft.vjp(np.ones(2), np.array([[1.0, 0.0], [0.0, 2.0]]))[1]
        array([[3., 0.],
               [0., 6.]])
        """
        *args, ct = args_and_cotangent
        ct = np.asarray(ct, np.float64)
        with _LOCK:
            rep, _ = self._run(args)
            shape = rep.out_shape
        if ct.shape == shape:
            v, gs = self._locked(args, [ct.reshape(-1)])
            return v, self._unpack(gs[0])
        if ct.shape[1:] != shape:
            raise ValueError(f"vjp: the cotangent has shape {ct.shape}; the output has "
                             f"shape {shape} (a batch of cotangents adds a leading axis)")
        v, gs = self._locked(args, [c.reshape(-1) for c in ct])
        return v, self._unpack([np.stack([g[i] for g in gs]) for i in range(len(gs[0]))]
                               if gs else [])

    def jacobian(self, *args):
        """∂f/∂x for every input x: shape ``f.shape + x.shape`` (one reverse
        sweep per output element, one forward).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: x * x, np.zeros(2))
        >>> ft.jacobian(np.array([1.0, 2.0]))
        array([[2., 0.],
               [0., 4.]])
        """
        with _LOCK:
            rep, xs = self._run(args)
            m = int(np.prod(rep.out_shape))
        eye = np.eye(m)
        _, gs = self._locked(args, list(eye))
        out = [np.stack([g[i] for g in gs]).reshape(rep.out_shape + rep.in_shapes[i])
               for i in range(len(rep.in_shapes))]
        return self._unpack(out)

    def grad_batch(self, *batches, workers=None):
        """Gradients at a batch of inputs: each argument has one more leading
        axis than the function takes, and the result too (one gradient per
        row; a tuple of such arrays when there are several inputs).

        The rows are split among ``workers`` threads (default: every core),
        each replaying its own copy of the trace; the compiled replay and
        sweep release the GIL, so the threads run at once.  A row whose
        guard fails is evaluated through ``grad`` (tracing again if needed).

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
            if rep.value().size != 1:
                raise RuntimeError("grad_batch needs a function with one output element")
            key = _signature([b[0] for b in batches])[0]
            if rep.pos != list(range(len(batches))) or any(k[0] == "static" for k in key):
                raise TypeError("grad_batch takes array inputs only (no static arguments)")
            workers = max(1, min(workers or os.cpu_count() or 1, nb))
            reps = [rep.clone() for _ in range(workers)]  # the cached one stays free
        outs = [np.empty((nb,) + s, d) for s, d in zip(rep.in_shapes, rep.in_dtypes)]
        seed = np.ones(1)
        missed = [[] for _ in range(workers)]

        def work(w):
            mine = reps[w]
            for i in range(w * nb // workers, (w + 1) * nb // workers):
                if mine.forward([np.asarray(b[i], np.float64) for b in batches]):
                    for o, g in zip(outs, mine.backward(seed)):
                        o[i] = g
                else:
                    missed[w].append(i)

        if workers == 1:
            work(0)
        else:
            with ThreadPoolExecutor(workers - 1) as pool:
                futs = [pool.submit(work, w) for w in range(1, workers)]
                work(0)
                for fu in futs:
                    fu.result()
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
        from . import tapefile
        with _LOCK:
            tapefile.save(self, path)

    def __reduce__(self):
        # the traces travel as the same arrays a file holds; the Python
        # function too when it pickles (so the copy can still retrace)
        from . import tapefile
        with _LOCK:
            arrays = tapefile.function_state(self, user_ops=False)
        f = getattr(self, "f", None)
        try:
            pickle.dumps(f)
        except Exception:
            f = None
        return tapefile.from_arrays, (arrays, f, "pickled traced function")

    @property
    def n_traces(self):
        """How many traces are cached, over all signatures."""
        return sum(len(v) for v in self.cache.values())

    def __repr__(self):
        return f"<tapegrad traced function {self.__name__}, {self.n_traces} trace(s)>"


class LoadedFunction(TracedFunction):
    """A traced function read from a file or a pickle without its Python code:
    it replays its saved traces only (call :func:`tapegrad.load`)."""

    def __init__(self, name="loaded"):
        super().__init__(None)
        self.__name__ = name

    def _run(self, args):
        key, pos, xs = _signature(args)
        reps = self.cache.get(key)
        if reps is None:
            raise RuntimeError(
                f"tapegrad: the loaded function {self.__name__} has no trace for "
                f"arguments of signature {key}; it was saved for {list(self.cache)}")
        for k, rep in enumerate(reps):
            if rep.forward(xs):
                if k:
                    reps.insert(0, reps.pop(k))
                return rep, xs
        raise RuntimeError(
            f"tapegrad: the loaded function {self.__name__} takes another branch at these "
            "inputs than any saved trace (a guard failed) and has no Python code to "
            "trace again; save it after calling it on such inputs")


# One lock for all traced functions: a replay reuses its trace's value and
# adjoint storage, so two calls of one trace must not interleave.
_LOCK = threading.RLock()


def trace(f, *example_args, **kwargs):
    """Trace ``f`` at ``example_args`` and return a :class:`TracedFunction`.

    ``f`` takes float arrays (or tensors, or floats) and returns one tensor;
    it runs once, eagerly, and later calls with arguments of the same shapes
    and dtypes replay what it did in compiled code, forward and reverse.
    Arrays ``f`` closes over are constants of the trace.  Called with a
    tensor or array instead of a function, this is ``numpy.trace`` (the sum
    of a diagonal), the name tapegrad had before.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> def f(x):
    ...     return (np.sin(x) * x).sum()
    >>> ft = tg.trace(f, np.zeros(3))
    >>> v, g = ft.value_and_grad(np.array([0.0, 1.0, 2.0]))
    >>> bool(np.isclose(v, np.sin(1.0) + 2 * np.sin(2.0)))
    True
    >>> tg.trace(tg.tensor(np.eye(2)))
    tensor(2.0)
    """
    if not callable(f) or isinstance(f, (Tensor, np.ndarray)):
        from .ops.composite import trace as diagonal_trace
        return diagonal_trace(f, *example_args, **kwargs)
    if kwargs:
        raise TypeError("tapegrad.trace takes the example arguments positionally")
    ft = TracedFunction(f)
    with _LOCK:
        key, _, _ = _signature(example_args)
        ft.cache[key] = [_Replay(f, example_args)]
    return ft


def compile(f):  # noqa: A001  (the name the issue asks for)
    """Decorator: trace ``f`` on its first call for each input signature
    (shapes and dtypes) and replay it in compiled code afterwards.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> @tg.compile
    ... def f(x):
    ...     return (x ** 2).sum() if (x.sum() > 0) else -x.sum()
    >>> float(f(np.array([1.0, 2.0]))), float(f(np.array([-1.0, -2.0]))), f.retraces
    (5.0, 3.0, 1)
    >>> f.grad(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    return TracedFunction(f)
