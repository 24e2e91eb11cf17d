"""Trace once, replay compiled: ``tg.trace(f, *args)`` and ``@tg.compile``.

Tracing runs ``f`` once, eagerly, on a private tape (a :class:`TraceTape`
installed as the thread's tape for the duration) that keeps every value.
The records it leaves are the function: a replay writes new inputs into the
input records and recomputes every other record in order in compiled code
(:mod:`tapegrad.kernels.replay`), and the ordinary reverse sweep then runs on
the replayed values.  Host records (matmul, solve, ...) are computed by NumPy
during a replay, as their VJPs are during a sweep.

Runs of consecutive same-size elementwise records (of at least
``FUSE_MIN`` elements) are fused: forward and reverse go over them block by
block (``CHUNK`` elements, split among threads for large arrays), so the
intermediates that nothing outside the run reads never reach memory and the
reverse sweep recomputes the few its VJPs need (``_reads``).  Inputs are
read in place; gradients are handed out from the leaves' adjoint arena,
which the next call reuses once the caller has dropped them.  ``ft.jvp`` and
``ft.hvp`` replay every value and run ``tg.jvp``'s tangent sweep and
``tg.hvp``'s pass on the replay as on a tape.  ``f`` may return a tuple of
tensors (``ft.vjp`` then takes a tuple of cotangents).

What a trace fixes
------------------
* Shapes and dtypes: a call with different ones traces again (one cache
  entry per signature).  Python ints, bools, strings, tuples and other
  hashable objects among the arguments are static: part of the signature
  by type and value (``(1,)`` and ``(True,)`` are two signatures; an
  object hashed by identity is keyed on its attributes too, so a config
  object changed between calls traces again).
* Arrays and tensors that ``f`` closes over are constants of the trace,
  read at trace time.
* A traced value that leaves the tape is guarded: a replay whose guard no
  longer holds traces again transparently (``ft.retraces`` counts these; a
  warning is issued past ``RETRACE_WARNING``).  That covers Python control
  flow (``bool()``, ``float()``, ``int()``, ``.item()``, an ``if`` on a
  comparison: the truth or the exact value is checked), NumPy functions
  with plain results (``np.argmax``, ``np.argsort``, ``np.searchsorted``,
  ``np.nonzero``, ``np.isnan``, ``np.allclose``, ...: the function runs
  again on the replayed values and its result must not change), the
  indices behind ``np.sort`` and ``np.unique``, and a detached traced value
  (``x.detach()``) used as an operand (its exact value is checked).
  Comparisons of traced tensors are records, so a ``where`` mask, a
  ``x * (x > 0)`` or the NaN masks of ``nansum`` are recomputed by the
  replay without a guard; a comparison whose result no record consumes (it
  went to NumPy or Python) is guarded as a whole.
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

A trace that guards a NumPy call runs Python at every replay and cannot be
saved (``ft.save`` raises; a pickle keeps its other traces).

Ops that cannot be replayed (``tg.sort``, ``tg.Function``, eigh, qr, svd,
lstsq) raise ``NotImplementedError`` naming the op when traced; every trace
is also replayed once at its own inputs and compared record by record with
the eager values, so an op whose replay would differ fails loudly there.
"""
import math
import os
import pickle
import sys
import threading
import types
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .autograd import Adjoints
from .kernels import codes as C
from .kernels import optable
from .kernels import replay as RK
from .kernels._views import SMALL
from .kernels.sweep import layout, sweep
from .ops.elementwise import broadcast_params
from .ops import registry as R
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


#: fused segments: records of at least this many elements, at least two op records
FUSE_MIN = 4096
#: fused segments of at least this many elements split their blocks among
#: threads (the kernels release the GIL), as XLA's CPU backend splits a large
#: fused loop
PAR_MIN = 1 << 17
_NCPU = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
    os.cpu_count() or 1)
_POOL = []


def _split(fn, n, threads):
    """``fn(w, lo, hi)`` over ``0 .. n`` in ``threads`` parts cut at block
    boundaries, part 0 on this thread and the rest on a shared pool."""
    w = threads if n >= PAR_MIN else 1
    if w == 1:
        fn(0, 0, n)
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(_NCPU - 1, thread_name_prefix="tapegrad-replay"))
    cuts = [(n * i // w) // RK.CHUNK * RK.CHUNK for i in range(w)] + [n]
    futs = [_POOL[0].submit(fn, i, cuts[i], cuts[i + 1]) for i in range(1, w)]
    fn(0, cuts[0], cuts[1])
    for f in futs:
        f.result()


def _reads(kind, sub):
    """The values elementwise record ``kind, sub``'s VJP reads, a subset of
    "xaby" (kernels/optable.py): a fused segment recomputes only those
    intermediates in its reverse sweep."""
    return optable.row(kind, sub)[0]


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
        self.recorded = {}            # id(recorded value) -> (record, value)
        self.calls = []               # NumPy calls on traced values (see ``call``)

    def record(self, op, parents, value, ints=None, const=0.0, inputs=None):
        r = Tape.record(self, op, parents, value, ints, const, inputs)
        self.recorded[id(value)] = (r, value)
        return r

    def record1(self, op, parent, value, const=0.0, inputs=None):
        r = Tape.record1(self, op, parent, value, const, inputs)
        self.recorded[id(value)] = (r, value)
        return r

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

    def source(self, x):
        """Record whose replayed value ``x`` is -- a traced value, or one that
        shares a traced record's data without its gradient (``detach()``,
        ``.data``, ``.numpy()`` of a traced tensor) -- else None.  Constants
        are not sources: a replay does not change them."""
        r = self.traced(x)
        if r is not None:
            return r
        d = x._data if isinstance(x, Tensor) else x
        hit = self.recorded.get(id(d))
        if hit is None or hit[1] is not d or int(self.op[hit[0]]) == R.CONST:
            return None
        return hit[0]

    def leave(self, x):
        """``x``'s value leaves the tape for Python or NumPy (``.numpy()``,
        ``.tolist()``, an index): a replay must see the same exact value."""
        r = self.source(x)
        if r is not None:
            self.guards[r] = (RK.G_VALUE, None)

    def constant(self, value):
        r = self.traced(value)
        if r is not None:
            return r
        src = self.source(value)
        if src is not None:
            # a traced value back as a constant (detached): no gradient flows,
            # and the replay must see the same value
            self.guards[src] = (RK.G_VALUE, None)
        return Tape.constant(self, value)

    def call(self, fn, args, kwargs, exact=False):
        """``fn(*args, **kwargs)`` on plain values (tensors become arrays).

        A traced value among the arguments (tensors, items of list or tuple
        arguments, keyword values) makes the call a guard: every replay runs
        ``fn`` again on the replayed values and traces again if the result
        differs, so an index, a count or a mask computed from traced values is
        never a stale constant.  ``exact=True`` guards the traced arguments'
        exact values instead (for calls with side effects, ``np.copyto``).
        """
        slots = []

        def plain(x):
            r = self.source(x)
            d = np.asarray(x._data) if isinstance(x, Tensor) else x
            if r is None:
                return d, (np.array(d) if isinstance(d, np.ndarray) else d)
            slots.append(r)
            return d, _Slot(r, np.shape(d), np.asarray(d).dtype)

        def conv(x):
            if isinstance(x, (list, tuple)):
                pairs = [plain(v) for v in x]
                return type(x)(p[0] for p in pairs), _Seq(type(x), [p[1] for p in pairs])
            return plain(x)

        cargs = [conv(a) for a in args]
        ckw = {k: conv(v) for k, v in kwargs.items()}
        result = fn(*[c[0] for c in cargs], **{k: c[0] for k, c in ckw.items()})
        if slots:
            if exact:
                for r in slots:
                    self.guards[r] = (RK.G_VALUE, None)
            else:
                name = getattr(fn, "__name__", repr(fn))
                self.calls.append(_Call(name, fn, [c[1] for c in cargs],
                                        {k: c[1] for k, c in ckw.items()}, _snapshot(result)))
        return result

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


class _Slot:
    """A traced value among a guarded call's arguments: which record, as what."""

    __slots__ = ("rec", "shape", "dtype")

    def __init__(self, rec, shape, dtype):
        self.rec, self.shape, self.dtype = rec, shape, dtype


class _Seq:
    """A list or tuple argument of a guarded call, item by item."""

    __slots__ = ("kind", "items")

    def __init__(self, kind, items):
        self.kind, self.items = kind, items


class _Call:
    """A guarded NumPy call (``TraceTape.call``): ``fn``, its arguments with
    ``_Slot`` for traced values, and the result it gave when traced."""

    __slots__ = ("name", "fn", "args", "kwargs", "expect")

    def __init__(self, name, fn, args, kwargs, expect):
        self.name, self.fn, self.args, self.kwargs, self.expect = name, fn, args, kwargs, expect

    def records(self):
        """The records the call reads."""
        out = []
        for a in list(self.args) + list(self.kwargs.values()):
            items = a.items if isinstance(a, _Seq) else [a]
            out.extend(v.rec for v in items if isinstance(v, _Slot))
        return out

    def holds(self, view):
        """Whether ``fn`` gives the traced result on the values ``view(r)``."""
        def fill(v):
            if isinstance(v, _Slot):
                flat = view(v.rec)
                x = flat != 0 if v.dtype == np.bool_ else flat.astype(v.dtype)
                return x.reshape(v.shape)
            return np.array(v) if isinstance(v, np.ndarray) else v  # fn may write

        def arg(a):
            return a.kind(fill(v) for v in a.items) if isinstance(a, _Seq) else fill(a)

        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = self.fn(*[arg(a) for a in self.args],
                              **{k: arg(v) for k, v in self.kwargs.items()})
        except Exception:
            return False  # tracing again lets the eager call raise to the caller
        return _same(got, self.expect)


def _snapshot(v):
    """A copy of a call's result that later writes cannot change."""
    if isinstance(v, (tuple, list)):
        return type(v)(_snapshot(x) for x in v) if type(v) in (tuple, list) else \
            type(v)(*[_snapshot(x) for x in v])
    if isinstance(v, np.ndarray):
        return v.copy()
    return v


def _same(a, b):
    """Exact equality of two call results: types, shapes, dtypes, values (NaN
    equal to NaN)."""
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, (np.ndarray, np.generic)):
        if type(a) is not type(b):
            return False
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if type(a) is not type(b):
        return False
    return bool(a == b) or (isinstance(a, float) and a != a and b != b)


def _is_input(a):
    if isinstance(a, Tensor):
        if a.dtype.kind == "f":
            return True
        raise TypeError(f"tapegrad.trace: tensor arguments must be floating point, got "
                        f"dtype {a.dtype}; close over integer and boolean tensors instead")
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
            v = _typed(a, i, 0)
            if isinstance(v, _State):  # the object itself stays the third entry
                key.append(("static", type(a), a, v))
            else:
                key.append(("static", type(a), v))
    return tuple(key), pos, xs


#: objects a static argument may be that are keyed by identity alone
_BY_IDENTITY = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                types.ModuleType, type)
#: how deep a static argument's attributes are followed
_STATE_DEPTH = 4


class _State:
    """A static argument hashed by identity, keyed on its attributes too (a
    config object changed between calls must not reuse a trace)."""

    __slots__ = ("obj", "attrs")

    def __init__(self, obj, attrs):
        self.obj, self.attrs = obj, attrs

    def __eq__(self, other):
        return (isinstance(other, _State) and self.obj is other.obj
                and self.attrs == other.attrs)

    def __hash__(self):
        return hash((id(self.obj), self.attrs))


def _typed(a, i, depth):
    """Static argument ``a`` as a hashable key whose equality implies equal
    types all the way down (``1 == True`` but they are two signatures)."""
    if type(a) in (tuple, frozenset) or isinstance(a, tuple):
        items = [(type(x), _typed(x, i, depth + 1)) for x in a]
        return type(a)(items) if type(a) in (tuple, frozenset) else tuple(items)
    if (type(a).__hash__ is not object.__hash__ or isinstance(a, _BY_IDENTITY)
            or not hasattr(a, "__dict__")):
        return a
    if depth >= _STATE_DEPTH:
        raise TypeError(
            f"tapegrad.trace: static argument {i} nests objects hashed by identity more "
            f"than {_STATE_DEPTH} deep ({type(a).__name__}); pass the values it holds as "
            "arguments, or close over it (a constant of the trace)")
    attrs = []
    for name, v in sorted(vars(a).items()):
        try:
            hash(v)
        except TypeError:
            raise TypeError(
                f"tapegrad.trace: static argument {i} ({type(a).__name__}) is hashed by "
                f"identity and its attribute {name!r} is a {type(v).__name__}, which is "
                "not hashable, so a change to it could not be seen; pass the values as "
                "arguments (float arrays are traced inputs) or close over the object "
                "(a constant of the trace)") from None
        attrs.append((name, type(v), _typed(v, i, depth + 1)))
    return _State(a, tuple(attrs))


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
        self.multi = isinstance(out, (tuple, list))
        outs = list(out) if self.multi else [out]
        if isinstance(out, dict) or any(isinstance(o, (tuple, list, dict)) for o in outs):
            raise NotImplementedError(
                "tapegrad.trace: the function must return a tensor or a flat tuple of "
                f"tensors, got {type(out).__name__}" + (" with nested containers"
                                                        if self.multi else ""))
        if self.multi and not outs:
            raise ValueError("tapegrad.trace: the function returned an empty tuple")
        outs = [o if isinstance(o, Tensor) else _plain(np.asarray(o)) for o in outs]
        self.in_shapes = [x.shape for x in xs]
        self.in_dtypes = [x.dtype for x in xs]
        self.out_shapes = [o.shape for o in outs]
        self.out_dtypes = [o._data.dtype if o._data.dtype.kind == "f" else np.dtype(np.float64)
                           for o in outs]
        self.calls = list(tape.calls)
        self.roots = [tape.traced(o) for o in outs]
        self.const_outs = [None if r is not None else np.array(o._data, np.float64)
                           for r, o in zip(self.roots, outs)]
        # the single output's description (what a tape file holds)
        self.out_shape, self.out_dtype = self.out_shapes[0], self.out_dtypes[0]
        self.root, self.const_out = self.roots[0], self.const_outs[0]
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
        self.segs = []
        self._self_check(tape)
        self._plan_segments()

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
        # inputs may be read in place (see forward): the storage to go back to
        self.own_ptrs, self.own_refs, self.borrowed = self.ptrs.copy(), list(self.refs), []
        self.faddr = np.zeros(n, np.int64)
        from .ops.custom import USER_OPS
        for r in np.flatnonzero((self.op >> C.SHIFT) == C.K_USER):
            self.faddr[r] = USER_OPS[int(self.ip[self.ip0[r]])].forward_address()
        # adjoints: leaves in a fresh arena per gradient, the rest reused
        self.A = np.empty(max(inner, 1))
        self.L = np.empty(max(outer, 1))
        self.aoff, self.leaf = aoff, leaf
        self.aptr0 = aoff * 8 + np.where(leaf, self.L.ctypes.data, self.A.ctypes.data)
        self.L_refs = sys.getrefcount(self.L) + 1  # + the Adjoints' reference
        self.aptr = self.aptr0.copy()
        self.reached = np.zeros(n, np.bool_)
        self.freed = np.zeros(n, np.bool_)
        self.adj = Adjoints.__new__(Adjoints)
        self.adj.voff, self.adj.off, self.adj.leaf = self.voff, aoff, leaf
        self.adj.A, self.adj.L, self.adj.size = self.A, self.L, self.size
        self.adj.aptr, self.adj.reached = self.aptr, self.reached
        self.T = (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                  self.v1, self.vals, self.voff, self.rix, self.ptrs, self.aptr, self.reached)

    def _plan_segments(self):
        """Runs of consecutive same-size elementwise records that replay fuses
        (kernels/replay.py ``seg_forward``/``seg_backward``): per run
        ``(r0, r1, n, slot, need)``, where ``slot`` gives the block-scratch row
        of each record that nothing outside the run reads (-1: it has storage),
        and ``need`` marks those the reverse sweep must recompute."""
        n = self.n
        kind, sub = self.op >> C.SHIFT, self.op & C.MASK
        a0 = self.arg0
        fusable = np.zeros(n, np.bool_)
        passive = (kind == C.K_NONE) & (sub <= C.CONST)  # leaves and constants
        for r in np.flatnonzero(((kind == C.K_UNARY) | (kind == C.K_SCALAR)
                                 | ((kind == C.K_NARY) & (sub != C.WHERE)))
                                & (self.size >= FUSE_MIN) & (self.guard == 0)):
            ps = self.args[a0[r]:a0[r + 1]]
            fusable[r] = bool(np.all(self.size[ps] == self.size[r]))
        runs, r = [], 0
        while r < n:
            if not fusable[r]:
                r += 1
                continue
            m, e, last = self.size[r], r + 1, r
            while e < n and (passive[e] or (fusable[e] and self.size[e] == m)):
                if fusable[e]:
                    last = e
                e += 1
            if np.count_nonzero(fusable[r:last + 1]) >= 2:
                runs.append((r, last + 1, int(m)))
            r = last + 1
        self.segs = []
        if not runs:
            return
        seg_of = np.full(n, -1, np.int64)
        for i, (r0, r1, _) in enumerate(runs):
            seg_of[r0:r1] = i
        # records read from outside their run keep their storage
        outside = np.zeros(n, np.bool_)
        consumer = np.repeat(np.arange(n), np.diff(a0[:n + 1]))
        ps = self.args[:a0[n]]
        outside[ps[seg_of[ps] != seg_of[consumer]]] = True
        for r in np.flatnonzero((kind == C.K_NONE) & (sub >= RK.CMP_FIRST)):
            b = self.ip0[r]
            outside[self.ip[b:b + 2]] = True
        for r in self.roots:
            if r is not None:
                outside[r] = True
        for c in self.calls:  # guarded calls read these after the replay
            outside[c.records()] = True
        for r0, r1, m in runs:
            k = r1 - r0
            internal = fusable[r0:r1] & ~outside[r0:r1]
            slot = np.where(internal, np.cumsum(internal) - 1, -1).astype(np.int64)
            need = np.zeros(k, np.bool_)
            for r in range(r1 - 1, r0 - 1, -1):
                if not fusable[r]:
                    continue
                rd = _reads(int(kind[r]), int(sub[r]))
                ps = self.args[a0[r]:a0[r + 1]]
                wants = [ps[0]] if ("x" in rd or "a" in rd) else []
                if "b" in rd:
                    wants.append(ps[1])
                if "y" in rd and internal[r - r0]:
                    # its own VJP reads its value: recomputed, so before the
                    # test below (sin -> tanh -> exp had left sin's value stale)
                    need[r - r0] = True
                if need[r - r0]:  # recomputed: its operands are needed too
                    wants.extend(ps)
                for p in wants:
                    if r0 <= p < r1 and internal[p - r0]:
                        need[p - r0] = True
            self.segs.append((r0, r1, m, slot, need.astype(np.uint8)))
        self._seg_scratch()

    def _seg_scratch(self, threads=_NCPU):
        """Block scratch for the fused segments, one per thread."""
        rows = max([int(s[3].max()) + 1 for s in self.segs] + [1])
        self.threads = threads
        self.seg_v = [np.zeros((rows, RK.CHUNK)) for _ in range(threads)]
        self.seg_g = [np.zeros((rows, RK.CHUNK)) for _ in range(threads)]

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
        self.multi = False  # tape files hold single-output traces
        self.calls = []     # ... and no guarded Python calls (save refuses them)
        self.roots, self.out_shapes = [self.root], [self.out_shape]
        self.out_dtypes, self.const_outs = [self.out_dtype], [self.const_out]
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
        self._plan_segments()
        self.lock = threading.Lock()
        return self

    def clone(self):
        """An independent copy (own value and adjoint storage) for another thread."""
        new = _Replay.__new__(_Replay)
        new.__dict__.update(self.__dict__)
        self.release()
        new._allocate()
        new.v1[:], new.vals[:], new.big[:] = self.v1, self.vals, self.big
        if new.segs:
            new._seg_scratch(1)  # a copy runs on one of grad_batch's threads
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
        for c in self.calls:
            if not c.holds(self.view):
                raise NotImplementedError(
                    f"tapegrad.trace: numpy.{c.name} gives another result on the replayed "
                    "values than on the eager ones (float32 rounding?); call the function "
                    "eagerly")

    def _traced_value(self, r, v1, vals, big):
        n = self.size[r]
        if n == 1:
            return v1[r:r + 1]
        if n <= SMALL:
            return vals[self.voff[r]:self.voff[r] + n]
        o = (self.refs[self.rix[r]].ctypes.data - self.big.ctypes.data) // 8
        return big[o:o + n]

    # -- running -----------------------------------------------------------------------
    @property
    def na(self):
        return int(self.arg0[self.n])

    def arrays(self, adj):
        """The tape view the sweeps read (kernels/_views.py): this replay's
        values with the adjoint or tangent layout ``adj`` -- so forward.py's
        tangent sweep and second.py's hvp pass run on a replay as on a tape."""
        return (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                self.v1, self.vals, adj.voff, self.rix, self.ptrs, adj.aptr)

    def view(self, r):
        """Record r's value storage, flat."""
        n = self.size[r]
        if n == 1:
            return self.v1[r:r + 1]
        if n <= SMALL:
            return self.vals[self.voff[r]:self.voff[r] + n]
        return self.refs[self.rix[r]]

    def forward(self, xs, full=False):
        """Replay at inputs ``xs`` (None: as stored); False if a guard fails.

        Float64 C-contiguous inputs are read in place (no copy) until
        ``release``.  Fused segments keep their intermediates in block
        scratch; ``full=True`` computes every record's value into its storage
        instead, for passes that read them all (jvp, hvp).
        """
        if xs is not None:
            for r, x in zip(self.leaf_rec, xs):
                k = self.rix[r]
                if (k >= 0 and x.dtype == np.float64 and x.flags.c_contiguous
                        and x.flags.aligned):
                    flat = x.reshape(-1)
                    self.ptrs[k], self.refs[k] = flat.ctypes.data, flat
                    self.borrowed.append(k)
                else:
                    if k >= 0:
                        self.ptrs[k], self.refs[k] = self.own_ptrs[k], self.own_refs[k]
                    self.view(r)[:] = x.reshape(-1)
        guard = self.guard if xs is not None else np.zeros(self.n, np.int64)
        segs = self.segs if not full and xs is not None else ()
        start, i = 0, 0
        while True:
            stop = segs[i][0] if i < len(segs) else self.n
            s = RK.replay(self.T, self.faddr, guard, self.goff, self.gvals, start, stop)
            if s == -1:
                if i == len(segs):
                    # guarded NumPy calls: their results must not change
                    return xs is None or all(c.holds(self.view) for c in self.calls)
                r0, r1, m, slot, _ = segs[i]
                _split(lambda w, lo, hi: RK.seg_forward(self.T, r0, r1, lo, hi, slot,
                                                        self.seg_v[w]), m, self.threads)
                start, i = r1, i + 1
                continue
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

    def release(self):
        """Stop reading the caller's input arrays (back to own storage)."""
        for k in self.borrowed:
            self.ptrs[k], self.refs[k] = self.own_ptrs[k], self.own_refs[k]
        self.borrowed.clear()

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

    def outputs(self):
        """``(record or None, shape, dtype)`` of every output."""
        return list(zip(self.roots, self.out_shapes, self.out_dtypes))

    def value(self):
        """The output (a tuple for a multi-output function), after a ``forward``;
        0-d results as NumPy scalars."""
        vals = []
        for (r, shape, dt), const in zip(self.outputs(), self.const_outs):
            v = (const if r is None else self.view(r)).reshape(shape).astype(dt)
            vals.append(v[()] if v.ndim == 0 else v)
        return tuple(vals) if self.multi else vals[0]

    def backward(self, seeds):
        """Gradients w.r.t. every input for one cotangent per output (flat
        float64; None: zero), after a ``forward``.

        Float64 gradients are views of the leaves' adjoint arena, not copies.
        The next backward reuses that arena (no fresh pages to fault in) when
        the caller has let go of every gradient it handed out, and takes a new
        one otherwise: the reference count tells.
        """
        roots = [(r, s) for r, s in zip(self.roots, seeds) if r is not None and s is not None]
        if not roots:
            return [np.zeros(s, d) for s, d in zip(self.in_shapes, self.in_dtypes)]
        if sys.getrefcount(self.L) > self.L_refs:
            self.L = self.adj.L = np.empty(self.L.size)
            self.aptr0[:] = self.aoff * 8 + np.where(self.leaf, self.L.ctypes.data,
                                                     self.A.ctypes.data)
        self.aptr[:] = self.aptr0
        self.reached[:] = False
        for r, seed in roots:
            self.adj.add(r, seed)
        start = max(r for r, _ in roots)
        for r0, r1, m, slot, need in reversed(self.segs):
            if r0 > start:
                continue
            self._sweep(start, r1 - 1)
            plan = RK.seg_plan(self.T, r0, r1, slot)
            _split(lambda w, lo, hi: RK.seg_backward(self.T, r0, r1, lo, hi, slot, need, *plan,
                                                     self.seg_v[w], self.seg_g[w]),
                   m, self.threads)
            start = r0 - 1
        self._sweep(start, -1)
        out = []
        for r, shape, dt in zip(self.leaf_rec, self.in_shapes, self.in_dtypes):
            if self.reached[r]:
                out.append(self.adj[r].reshape(shape).astype(dt, copy=False))
            else:
                out.append(np.zeros(shape, dt))
        return out

    def _sweep(self, start, stop):
        """The compiled sweep over records ``start .. stop+1``, host VJPs in Python."""
        while True:
            s = sweep(self.T, self.freed, start, stop)
            if s == -1:
                return
            REGISTRY[int(self.op[s])].host_vjp(self, self.adj, s)
            start = s - 1


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

    def _run(self, args, full=False):
        """A replay whose forward has run at ``args`` (lock held by caller)."""
        key, pos, xs = _signature(args)
        reps = self.cache.get(key)
        if reps is None:
            reps = self.cache[key] = [_Replay(self.f, args)]
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

    def __call__(self, *args):
        """The function's value at ``args`` (an ndarray or NumPy scalar; a tuple
        of them for a function that returns a tuple)."""
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
        def seeds(rep):
            sizes = [math.prod(s) for s in rep.out_shapes]
            p, at, out = sum(sizes), 0, []
            for m in sizes:
                s = np.zeros((p, m))
                s[at + np.arange(m), np.arange(m)] = 1.0
                out.append(s)
                at += m
            return out, p

        _, rep, gs = self._vector(args, seeds)
        res, at = [], 0
        for shape in rep.out_shapes:
            m = math.prod(shape)
            res.append(self._unpack([
                g[at:at + m].reshape(shape + tuple(s)).astype(d, copy=False)
                for g, s, d in zip(gs, rep.in_shapes, rep.in_dtypes)]))
            at += m
        return tuple(res) if rep.multi else res[0]

    def _vector(self, args, seeds):
        """``(value, replay, grads)`` for the p cotangents ``seeds(replay)``
        returns (``(per output a (p, size) array or None, p)``): all p
        through one compiled vector reverse sweep
        (``functional.replay_reverse``); grads holds one (p, size) float64
        array per input."""
        from .functional import replay_reverse
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

    def _tangents(self, rep, args_and_t, who):
        """The tangent argument of jvp/hvp checked against the inputs, as
        ``(args, [(p, size) float64 per input], p, batched)``."""
        from . import forward as FW
        *args, ts = args_and_t
        if not isinstance(ts, (tuple, list)) and len(rep.in_shapes) == 1:
            ts = (ts,)  # one input: its tangent may come bare
        ts = FW._as_tuple(ts, "tangents")
        if len(ts) != len(rep.in_shapes):
            raise ValueError(f"{who}: {len(rep.in_shapes)} traced inputs but {len(ts)} "
                             "tangents; give one tangent per float-array argument")
        like = [types.SimpleNamespace(shape=s, dtype=d)
                for s, d in zip(rep.in_shapes, rep.in_dtypes)]
        ts, p, batch = FW._check_tangents(like, ts, None)
        return [t.reshape(p, -1) for t in ts], p, batch

    def jvp(self, *args_and_tangents):
        """``(f(*args), J t)`` by the compiled tangent sweep of ``tg.jvp`` over
        the replayed tape; ``tangents`` (the last argument) has one entry per
        float-array argument (a bare array when there is one), each of that
        argument's shape, or with one more leading axis p for a batch of p
        directions (``J t`` then has shape ``(p,) + out.shape``).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: np.sin(x) * 2, np.zeros(2))
        >>> ft.jvp(np.array([0.0, np.pi]), np.array([1.0, 1.0]))[1]
        array([ 2., -2.])
        >>> ft.jvp(np.zeros(2), np.eye(2))[1]       # a batch: the Jacobian's rows
        array([[2., 0.],
               [0., 2.]])
        """
        from . import forward as FW
        from .functional import _root_span
        *args, _ = args_and_tangents
        with _LOCK:
            rep, _ = self._run(args, full=True)
            try:
                flat, p, batch = self._tangents(rep, args_and_tangents, "jvp")
                value = rep.value()
                outs = []
                for root, shape, dt in rep.outputs():
                    t = np.zeros((p, int(np.prod(shape))))
                    if root is not None:
                        upto = _root_span(rep, root)
                        recs = [r for r in rep.leaf_rec if r < upto]
                        tan = FW._Tangents(rep, upto, np.array(recs or [root], np.int64))
                        if recs and tan.reached[root]:
                            per = max(int(tan.total), 1) * 8
                            chunk = int(max(1, min(p, FW.JACFWD_BYTES // per)))
                            for lo in range(0, p, chunk):
                                hi = min(p, lo + chunk)
                                tan.alloc(hi - lo)
                                for k, r in enumerate(rep.leaf_rec):
                                    if r < upto:
                                        tan.block(r)[...] = flat[k][lo:hi].T
                                FW._sweep(rep, tan, rep.arrays(tan) + (tan.reached,))
                                t[lo:hi] = tan.block(root).T
                    t = t.reshape((p,) + shape).astype(dt, copy=False)
                    outs.append(t if batch else t[0])
            finally:
                rep.release()
        value = value[()] if not rep.multi and value.ndim == 0 else value
        return value, (tuple(outs) if rep.multi else outs[0])

    def hvp(self, *args_and_v):
        """``(grad, hvp)`` of a function with one output element, as
        ``tg.hvp(f, args, v)`` returns them (tuples with one array per
        float-array argument), by the forward-over-reverse pass of
        ``tg.hvp`` over the replayed tape.  ``v`` (the last argument) is as
        the tangents of :meth:`jvp`: a batch of p directions gives each
        ``hvp[i]`` the shape ``(p,) + x_i.shape``.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x ** 3).sum(), np.zeros(2))
        >>> g, hv = ft.hvp(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> g[0], hv[0]
        (array([ 3., 12.]), array([6., 0.]))
        """
        from . import second
        from .functional import _root_span
        *args, _ = args_and_v
        with _LOCK:
            rep, _ = self._run(args, full=True)
            try:
                if rep.multi or int(np.prod(rep.out_shape)) != 1:
                    raise TypeError(
                        f"hvp: the function must return one number (a scalar); this one "
                        f"returned {'a tuple' if rep.multi else f'shape {rep.out_shape}'}")
                flat, p, batch = self._tangents(rep, args_and_v, "hvp")
                sizes = [int(np.prod(s)) for s in rep.in_shapes]
                if rep.root is None or rep.root in rep.leaf_rec:
                    # constant, or the output is an input: f is linear, H = 0
                    # (as tg.hvp's driver does, without a pass)
                    res = [(np.full(n, 1.0 if r == rep.root else 0.0), np.zeros((p, n)))
                           for n, r in zip(sizes, rep.leaf_rec)]
                else:
                    out = types.SimpleNamespace(_rec=rep.root)
                    leaves = [types.SimpleNamespace(size=n) for n in sizes]
                    upto = _root_span(rep, rep.root)
                    recs = [r if r < upto else None for r in rep.leaf_rec]
                    res, _ = second._hvp_pass(rep, out, leaves, recs, lambda k: flat[k], p)
            finally:
                rep.release()
        gs, hs = [], []
        for (g, hv), shape, dt in zip(res, rep.in_shapes, rep.in_dtypes):
            gs.append(np.array(g, dtype=dt).reshape(shape))
            hv = np.array(hv, dtype=dt).reshape((p,) + shape)
            hs.append(hv if batch else hv[0])
        return tuple(gs), tuple(hs)

    def hessian(self, *args):
        """The Hessian of a function with one output element at ``args``, as
        ``tg.hessian(f, argnums=...)`` over every float-array argument gives
        it: shape ``x.shape + x.shape`` for one such argument, else a tuple of
        tuples ``H[i][j]`` of shape ``x_i.shape + x_j.shape``.

        Forward-over-reverse over the replayed tape with all n unit
        directions in one pass.  The pass's layout, arenas and directions
        are kept with the trace, so a call replays the values and runs the
        two compiled sweeps -- the traced counterpart of
        ``jax.jit(jax.hessian(f))``.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x[0] ** 2) * x[1], np.zeros(2))
        >>> ft.hessian(np.array([1.0, 3.0]))
        array([[6., 2.],
               [2., 0.]])
        """
        from .second import split_blocks
        H, shapes, dtypes = self._hessian(args, False)
        rows = split_blocks(H, shapes, dtypes)
        return rows[0][0] if len(rows) == 1 else rows

    def sparse_hessian(self, *args):
        """The Hessian at ``args`` as its nonzeros, a ``tg.SparseHessian``
        over all float-array arguments' elements in order -- what
        ``tg.sparse_hessian(f, argnums=...)`` returns, with the structural
        pattern and its colouring found once, with the trace's plan.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x[:-1] * x[1:] ** 2).sum(), np.ones(4))
        >>> h = ft.sparse_hessian(np.arange(4.0))
        >>> h.rows, h.cols, h.colors
        (array([0, 1, 1, 1, 2, 2, 2, 3, 3]), array([1, 0, 1, 2, 1, 2, 3, 2, 3]), 3)
        """
        return self._hessian(args, True)[0]

    def _hessian(self, args, coo):
        """``(H or SparseHessian, input shapes, input dtypes)``."""
        from . import second
        with _LOCK:
            rep, _ = self._run(args, full=True)
            try:
                if rep.multi or math.prod(rep.out_shape) != 1:
                    raise TypeError(
                        f"hessian: the function must return one number (a scalar); this one "
                        f"returned {'a tuple' if rep.multi else f'shape {rep.out_shape}'}")
                if rep.root in rep.leaf_rec:  # the output is an input: f is linear
                    n = sum(math.prod(s) for s in rep.in_shapes)
                    H = second.SparseHessian.zero(n) if coo else np.zeros((n, n))
                else:
                    H = second.replay_hessian(rep, coo)
                return H, list(rep.in_shapes), list(rep.in_dtypes)
            finally:
                rep.release()

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
            try:
                scalar = not rep.multi and np.size(rep.value()) == 1
            finally:
                rep.release()
            if not scalar:
                raise RuntimeError("grad_batch needs a function with one output element")
            key = _signature([b[0] for b in batches])[0]
            if rep.pos != list(range(len(batches))) or any(k[0] == "static" for k in key):
                raise TypeError("grad_batch takes array inputs only (no static arguments)")
            workers = max(1, min(workers or os.cpu_count() or 1, nb))
            reps = [rep.clone() for _ in range(workers)]  # the cached one stays free
        outs = [np.empty((nb,) + s, d) for s, d in zip(rep.in_shapes, rep.in_dtypes)]
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
            self._check_single("saved")
            calls = sorted({c.name for reps in self.cache.values() for rep in reps
                            for c in rep.calls})
            if calls:
                raise ValueError(
                    f"tapegrad: {self.__name__} cannot be saved: a trace guards "
                    f"{', '.join('numpy.' + n for n in calls)} on traced values, which runs "
                    "Python at every replay; compute such indices outside the function and "
                    "pass them in, or keep the Python function (pickle it) instead")
            tapefile.save(self, path)

    def __reduce__(self):
        # the traces travel as the bytes of a tape file, read back by the
        # file loader with all its checks; the Python function too when it
        # pickles (so the copy can still retrace).  Unpickling runs whatever
        # a pickle names, as any pickle: untrusted traces go through tg.load.
        from . import tapefile
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
            data = tapefile._npz_bytes(tapefile.function_state(stand_in, user_ops=False))
        return tapefile.from_bytes, (data, f)

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
