"""The tape a trace records on, and the keys traces are cached under.

:class:`TraceTape` is the thread's tape while ``tg.trace`` runs a function
once, eagerly: it keeps every value, records comparisons of traced values
(so a replay recomputes masks), and turns every read of a traced value by
Python or NumPy into a guard -- the record's truth or exact value
(``guards``), or a NumPy call to run again on the replayed values
(``calls``: a :class:`_Call` whose traced arguments are ``_Slot`` records).
``_signature`` splits a call's arguments into traced inputs (float arrays,
tensors, floats) and static ones, keyed by type and value (``_typed``;
objects hashed by identity by their attributes too, ``_State``).
"""
import types
import warnings

import numpy as np

from ..kernels import codes as C
from ..kernels import replay as RK
from ..kernels._views import SMALL
from ..ops.elementwise import broadcast_params
from ..core import registry as R
from ..core.registry import REGISTRY, register
from ..core.tape import NO_COMPACTION, Tape
from ..core.tensor import Tensor, _node, _plain

_CMP = {np.less: RK.LESS, np.less_equal: RK.LESS_EQUAL, np.greater: RK.GREATER,
        np.greater_equal: RK.GREATER_EQUAL, np.equal: RK.EQUAL, np.not_equal: RK.NOT_EQUAL}
for _f, _sub in _CMP.items():
    if C.code(C.K_NONE, _sub) not in REGISTRY:  # doctest collection imports twice
        register(_f.__name__.title().replace("_", ""), C.K_NONE, _sub)
_CMP = {f: C.code(C.K_NONE, s) for f, s in _CMP.items()}


class TraceTape(Tape):
    """The tape a trace records on: it keeps every value, never resets or
    compacts, records comparisons, and turns Python reads of traced values
    into guards."""

    keeps_freed_values = True  # see tape_liveness._Liveness
    keeps_float32 = False  # see tape.Tape

    tracing = True

    def __init__(self):
        super().__init__()
        self.hold = self.tok          # a live holder: the tape never resets
        self.check_at = NO_COMPACTION  # ... nor compacts (record ids must stay)
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
        """``bool(t)``, ``float(t)``, ...: a replay must give the same truth
        (``truth``) or value.  A detached traced value (``float(t.detach())``,
        what the conversion error of a traced tensor suggests) is guarded too:
        it is the same record's value."""
        r = self.traced(t)
        if r is None:
            r = self.source(t)
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

