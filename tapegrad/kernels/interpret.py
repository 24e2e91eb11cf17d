"""The interpreted tier: a kernel's own source, run as Python, until compiling it pays.

A kernel that is neither compiled in this process nor in the cache costs
seconds to compile on its first call, however little work that call does:
the first gradient of a three-element example paid for the whole sweep.
Each ``@kernel`` therefore starts interpreted -- its source runs as plain
Python over the same tape arrays (the raw addresses the compiled code reads
become NumPy views through ctypes), the kernels it calls run as Python too,
and so do the op families the compiled loops would reach through their
tables -- and is compiled once interpreting it has cost about what a
compilation costs (:data:`BUDGET_ENV` seconds, default :data:`BUDGET`), or
at once when one call's work is estimated to exceed what is left of that
budget.  That is the ski-rental rule -- rent until the rent paid reaches
the price of buying -- with a budget at the low end of what a compilation
costs (one to fifteen seconds per kernel and its families on a 2-core
machine), so that a long loop reaches compiled speed soon, while a program
that only ever does small work never compiles at all.

A kernel compiled already is always called compiled; one found in the
cache is loaded by the same rule, with the price of loading it
(:data:`LOAD_BUDGET`) for the price of compiling it.  What interpreting a
kernel the cache does not hold has cost counts across processes: each
process starts that kernel's budget with what earlier runs spent on it
beyond the price of a load -- what the kernel, cached, would have saved
them (kept beside the cache: kernels/ledger.py) -- so a script whose runs
each interpret it for most of a second compiles it in the run where the
sum reaches the budget; a load is paid by every process again, so its
budget stays per process, and runs of small work add nothing.  Numba
itself is imported only when the first kernel must run compiled
(kernels/_numba.py).
Interpreted kernels hold the GIL: threads that sweep at once run one at a
time until the kernels are compiled.

Both tiers run the same source on the same memory and compute the same
bits (tests/test_interpret.py checks every op and loop of one against the
other, the interpreted side in a process that compiles nothing;
tests/test_same_bits.py whole gradients); the interpreted tier only swaps
the few names that exist in compiled code alone (``numba.carray``, the
intrinsics that call through a function pointer) for Python equivalents,
and the functions compiled code takes from the C library for the same
functions (kernels/libm.py: ``np.exp``, ``math.log1p``, ``np.power``, ...
of each element through libm, as compiled code calls them, where NumPy's
vector loops differ from libm in the last bit; returning inf and NaN where
compiled code does, where Python's ``math`` would raise) and for
kernels/vecmath.py's ``exp_v``, ``log_v`` and ``tanh_v`` (their array
forms: the same operations on whole arrays).  The element loops of the
elementwise, sum and gather (indexing, views) VJPs also have whole-array
forms (:func:`array_form`): the same scalar rules applied to whole arrays,
in the same order, so a first gradient over a million elements runs at
NumPy's speed with nothing compiled.  Float32 tapes agree too: NumPy
would keep ``float32 * 1.0`` float32 where Numba widens it to float64, so
the copies' float literals and float globals are float64 NumPy scalars
(:func:`_typed_literals`), and the rule switches, whose results Numba
types float64 (one return type for all their branches), return float64
(:func:`returns_float64`).  Kernel sources write a power as ``np.power``
(or products), never ``**`` (Numba turns ``x ** 3`` into multiplications,
Python into a call of ``pow``), and widen with ``np.float64(x)``, never
``float(x)`` (which Numba leaves float32).

What stays apart: a Numba that vectorises libm calls through Intel's SVML
(installed with ``icc_rt``: set ``NUMBA_DISABLE_INTEL_SVML=1`` for the
tiers to agree), and a platform whose C library ``ctypes`` cannot find
(then Python's ``math`` stands in for ``hypot`` and ``lgamma``).  Eager
code is not a tier of the kernels: its forward values are NumPy's own
(``np.exp`` of the array), a traced function's replay computes them with
the kernels' functions, so ``ft(x)`` and ``f(x)``, and their gradients,
may differ in the last bit (calling libm per element in eager code would
cost 70-100 ns an element on every forward).

``TAPEGRAD_INTERPRET=0`` compiles every kernel on its first call;
``TAPEGRAD_INTERPRET=force`` interprets every kernel that is not compiled
yet, whatever the work (for tests and debugging: slow on large arrays);
neither reads nor adds to the seconds of earlier processes, and
``TAPEGRAD_INTERPRET_LEDGER=0`` keeps every process's budget its own.
"""
import contextlib
import ctypes
import os
import threading
import time
import types

import numpy as np

from . import codes as C
from . import ledger, libm

#: seconds of interpretation per kernel after which it is compiled: about
#: what compiling one kernel with the families it reaches costs here
BUDGET = 1.0
#: the environment variable that sets the budget (``0``: always compile,
#: ``force``: always interpret)
BUDGET_ENV = "TAPEGRAD_INTERPRET"

#: the same, for a kernel the cache holds, while none has been loaded or
#: compiled in this process: the first load pays Numba's own start (about
#: 0.1 s here, whichever kernel it is), so tiny work is still interpreted
#: rather than loaded
LOAD_BUDGET = 0.05
#: once that is paid, loading a cached kernel costs about this much per byte
#: of its cache file, and at least ``LOAD_FLOOR`` (measured here, each
#: after another kernel: 2-3 ms for the 27-49 kB layout kernels, 6 ms for
#: the 239 kB sweep, 12 ms for the 340 kB fused sweep); renting a small
#: kernel for the first-load price kept it interpreted, at ten times its
#: compiled cost per call, for thousands of calls of a training loop
LOAD_PER_BYTE = 4e-8
LOAD_FLOOR = 0.002

#: estimated interpreted cost per record a kernel walks and per element it
#: touches (seconds; measured on the scalar and elementwise sweeps, with room)
PER_RECORD = 20e-6
PER_ELEMENT = 2e-6

_local = threading.local()


def _setting():
    forced = getattr(_local, "mode", None)
    if forced is not None:
        return forced
    raw = os.environ.get(BUDGET_ENV, "").strip().lower()
    if raw == "":
        return BUDGET
    if raw == "force":
        return "force"
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ValueError(f"{BUDGET_ENV}={raw!r}: expected a number of seconds, 0 (always "
                         "compile) or 'force' (always interpret)") from None


@contextlib.contextmanager
def mode(setting):
    """Within the block, on this thread: ``"force"`` interprets every kernel
    not compiled yet, ``0`` compiles on first call, a number sets the budget.

    >>> import tapegrad as tg
    >>> from tapegrad.kernels import interpret
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> with interpret.mode("force"):
    ...     (x * x).sum().backward()
    >>> x.grad
    tensor([2.0, 4.0])
    """
    old = getattr(_local, "mode", None)
    _local.mode = setting
    try:
        yield
    finally:
        _local.mode = old


# -- the names that exist in compiled code only, as Python ---------------------------

def _carray(ptr, shape, dtype):
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    dt = np.dtype(dtype)
    n = 1
    for s in shape:
        n *= s
    if n == 0:
        return np.empty(shape, dt)
    buf = (ctypes.c_char * (n * dt.itemsize)).from_address(int(ptr))
    return np.frombuffer(buf, dt).reshape(shape)


class _NumbaNames:
    """What kernels use of the ``numba`` module."""
    carray = staticmethod(_carray)


_C_DOUBLE_FNS = {}


def _c_double_fn(addr, nargs):
    key = (int(addr), nargs)
    f = _C_DOUBLE_FNS.get(key)
    if f is None:
        proto = ctypes.CFUNCTYPE(ctypes.c_double, *([ctypes.c_double] * nargs))
        f = _C_DOUBLE_FNS[key] = proto(int(addr))
    return f


def _nan(*_args):
    return np.nan


#: Python stand-ins, by the name kernels import them under
STAND_INS = {
    "numba": _NumbaNames,
    # libm's functions of each element, as compiled code calls them
    "np": libm.NUMPY,
    "math": libm.MATH,
    "_voidptr": int,
    "carray": _carray,
    "load_tape": lambda tp: tp,
    "load_tape32": lambda tp: tp,
    "load_block_ctx": lambda cp: cp,
    # a table of Python families holds the functions themselves
    "call_entry": lambda f, T, r, sub: f(T, r, sub),
    "call_entry_extra": lambda f, T, r, sub, extra: f(T, r, sub, extra),
    "call_entry_ctx": lambda f, T, ctx, r, sub: f(T, ctx, r, sub),
    "call_d1": lambda addr, x: _c_double_fn(addr, 1)(float(x)),
    "call_d2": lambda addr, x, y: _c_double_fn(addr, 2)(float(x), float(y)),
    "call_d3": lambda addr, a, b, y: _c_double_fn(addr, 3)(float(a), float(b), float(y)),
    # an op switch's last branch is NaN compiled (kernels/unhandled.py)
    "unhandled": _nan,
    # kernels/vecmath.py adds its functions' whole-array forms (exp_v,
    # log_v, tanh_v) when it is imported, which is before any kernel that
    # calls them can run
}

_copies = {}

#: whole-array forms of element loops (``kernel.py_func -> function``), which
#: the interpreted tier runs in place of the loop (:func:`array_form`)
ARRAY_FORMS = {}

#: arrays with fewer elements than this run the element loop: a handful of
#: NumPy calls cost more than the loop's few iterations
ARRAY_MIN = 16

#: estimated interpreted cost per element of a record whose family has array
#: forms (seconds; NumPy's per-element cost with room for the temporaries)
PER_ARRAY_ELEMENT = 2e-8

#: the kinds of record (kernels/codes.py) whose VJPs have array forms and
#: the op codes of other kinds that have them, for the estimate
#: (:func:`_work`); the special functions' derivatives (scalar loops) run in
#: small kernels of their own (kernels/special_arrays.py), which follow the
#: same rule when they are called; tests/test_interpret.py runs one of each
#: as arrays, and one without
ARRAY_KINDS = (C.K_UNARY, C.K_SCALAR, C.K_NARY, C.K_GATHER, C.K_CONCAT)
ARRAY_CODES = tuple(C.code(C.K_REDUCE, s) for s in range(C.LOG_SOFTMAX + 1)) \
    + (C.code(C.K_SCAN, C.CUMSUM), C.code(C.K_SCAN, C.CUMPROD))

#: [ran as arrays, a rule took no arrays (element loop), not applicable here
#: (small, or a case without an array form: element loop)]
_array_calls = [0, 0, 0]


def array_form(loop):
    """Register the decorated Python function as ``loop``'s whole-array form.

    The interpreted tier calls it with the loop's arguments instead of
    running the loop element by element (2 us an element as Python, ~1000x
    NumPy's cost), so that a first gradient over large arrays runs at
    NumPy's speed without compiling.  It computes with the same scalar rules
    (``d_unary`` ...) called on whole arrays -- element by element the same
    IEEE operations, in the same order -- and writes its outputs only after
    everything is computed.  It returns ``NotImplemented`` where it does not
    apply (then the element loop runs), and a rule that cannot take arrays
    (a branch on an element's value: ``if a > b``) raises ``TypeError`` or
    ``ValueError`` before anything is written, which falls back the same
    way."""
    def register(fn):
        ARRAY_FORMS[getattr(loop, "py_func", loop)] = fn
        return fn
    return register


def _arrays_or_loop(arrays, loop):
    def run(*args):
        try:
            got = arrays(*args)
        except (TypeError, ValueError):
            _array_calls[1] += 1
            return loop(*args)
        if got is NotImplemented:
            _array_calls[2] += 1
            return loop(*args)
        _array_calls[0] += 1
        return got
    return run


def _is_kernel(v):
    """A kernel, recorded (kernels/_jit.py: Deferred) or a Numba dispatcher."""
    return callable(v) and isinstance(getattr(v, "py_func", None), types.FunctionType) \
        and not isinstance(v, types.FunctionType)


#: kernels whose every result compiled code types float64 (``py_func``s)
FLOAT64_RESULTS = set()


def returns_float64(fn):
    """Declare that compiled code types every result of the kernel ``fn``
    float64: Numba gives a function one return type, the unification of
    every ``return`` in it, so a rule switch with a float64 literal in one
    branch returns float64 from all, ``return x`` of a float32 ``x``
    included.  The interpreted tier casts its results so (a float32 sweep
    then rounds where compiled code rounds)."""
    FLOAT64_RESULTS.add(getattr(fn, "py_func", fn))
    return fn


def _f64(v):
    return v.astype(np.float64, copy=False) if isinstance(v, np.ndarray) else np.float64(v)


def _float64_results(f):
    def g(*args):
        r = f(*args)
        return tuple(map(_f64, r)) if type(r) is tuple else _f64(r)
    return g


def _names(code):
    """The global names ``code`` and the functions defined in it read."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return sorted(names)


def _typed_literals(code):
    """``code`` with its float literals float64 NumPy scalars, as Numba
    types them: ``float32 * 1.0`` is float64 compiled, but float32 in
    NumPy's arithmetic with a Python float (a "weak" scalar)."""
    consts = tuple(np.float64(c) if type(c) is float else
                   _typed_literals(c) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_consts=consts)


def python_copy(fn, stand_ins=None):
    """``fn``'s source as a plain Python function whose calls of other
    kernels run their sources too, so nothing is compiled; the names of
    :data:`STAND_INS` (or ``stand_ins``) are replaced."""
    subs = STAND_INS if stand_ins is None else stand_ins
    f = getattr(fn, "py_func", fn)
    key = (f, id(subs))
    got = _copies.get(key)
    if got is not None:
        return got
    env = dict(f.__globals__)
    copy = types.FunctionType(_typed_literals(f.__code__), env, f.__name__, f.__defaults__,
                              f.__closure__)
    if f in FLOAT64_RESULTS:
        copy = _float64_results(copy)
    _copies[key] = copy
    for name in _names(f.__code__):
        if name in subs:
            env[name] = subs[name]
            continue
        v = env.get(name)
        if type(v) is float:  # a global constant, float64 to Numba too
            env[name] = np.float64(v)
            continue
        if _is_kernel(v):
            loop = python_copy(v, stand_ins)
            arrays = ARRAY_FORMS.get(v.py_func)
            env[name] = loop if arrays is None else \
                _arrays_or_loop(python_copy(arrays, stand_ins), loop)
    return copy


# -- when to interpret ---------------------------------------------------------------

#: tables of compiled families (``id(table) -> Families``): an interpreted
#: loop is handed the families' Python copies instead
TABLES = {}


#: set once a kernel has been compiled or loaded in this process (then
#: Numba's start is paid: see ``load_price``)
_warm = []


def loaded():
    """Note that a kernel has been compiled or loaded in this process."""
    if not _warm:
        _warm.append(True)


def load_price(nbytes):
    """Seconds that loading a cached kernel of ``nbytes`` bytes of cache
    costs now: the first load's price until one is paid, then its size's."""
    if not _warm:
        return LOAD_BUDGET
    return min(LOAD_BUDGET, max(LOAD_FLOOR, nbytes * LOAD_PER_BYTE))


ledger.bound.update(load_price=load_price, warm=lambda: bool(_warm))


class _State:
    __slots__ = ("spent", "cached", "before", "name")

    def __init__(self):
        self.spent = 0.0
        self.cached = None
        # seconds of earlier processes and the name they are kept under
        # (kernels/ledger.py), once read
        self.before = self.name = None


_states = {}


#: loops over the tape whose records' element work runs as arrays where the
#: families have array forms (the reverse sweep), and loops that touch no
#: element at all (graph walks); every other loop is estimated per element
ARRAY_LOOPS = set()
RECORD_LOOPS = set()


def estimate_as(loop, how):
    """Declare how :func:`_work` estimates ``loop``'s calls: ``"arrays"``
    (its element work runs as arrays where it can) or ``"records"`` (it
    walks records and touches no element)."""
    (ARRAY_LOOPS if how == "arrays" else RECORD_LOOPS).add(getattr(loop, "py_func", loop))


def _work(args, loop=None):
    """Estimated seconds to interpret a call of ``loop`` on ``args``: per
    tape record and per element of the tape's values, or per element of
    plain arrays."""
    records = elements = array_elements = 0
    loop = getattr(loop, "py_func", loop)
    for a in args:
        if isinstance(a, tuple) and len(a) >= 14 and isinstance(a[2], np.ndarray):
            if loop in RECORD_LOOPS:
                records += a[2].size
                continue
            # the tape tuple: its size column counts every record's elements,
            # its op column (a[0]) tells the records run as arrays
            # (leaves, constants and output slots: no element work)
            size = a[2]
            records += size.size
            ops = a[0][:size.size]
            kinds = ops >> C.SHIFT
            arrays = (np.isin(kinds, ARRAY_KINDS) | np.isin(ops, ARRAY_CODES)) \
                & (size >= ARRAY_MIN) & (loop in ARRAY_LOOPS)
            array_elements += int(size[arrays].sum())
            elements += int(size[~arrays & (kinds != C.K_NONE)].sum())
        elif isinstance(a, np.ndarray):
            elements += a.size
    return records * PER_RECORD + elements * PER_ELEMENT + array_elements * PER_ARRAY_ELEMENT


def _tier_args(args):
    out = []
    for a in args:
        fam = TABLES.get(id(a)) if isinstance(a, np.ndarray) else None
        out.append(fam.python_table() if fam is not None else a)
    return out


def _name(key, name):
    """The kernel's name in the ledger: ``name`` (a string, or the function
    that names it), else the function ``key``'s, as ``module.qualname``."""
    fn = key if name is None else name
    return fn if isinstance(fn, str) else f"{fn.__module__}.{fn.__qualname__}"


def run_as_python(key, in_cache, kernel, args, name=None):
    """Run ``kernel(*args)`` as Python if what ``key`` has cost so far plus
    this call's estimate stays within the budget -- compiling's, or if
    ``in_cache()`` (asked once per key: the bytes of the kernel's cache
    files, 0 if none) loading's -- ``(True, result)``; else ``(False, None)``.

    What compiling's budget counts includes the seconds earlier processes
    spent interpreting the kernel past the price of a load
    (kernels/ledger.py, under ``name``: see :func:`_name`), unless the
    setting is this thread's (:func:`mode`)."""
    setting = _setting()
    if setting == 0:
        return False, None
    st = _states.get(key)
    if st is None:
        st = _states[key] = _State()
    counted = False
    if setting != "force":
        if st.cached is None:
            st.cached = int(in_cache())
        if st.cached:
            budget, before = min(setting, load_price(st.cached)), 0.0
        else:
            counted = getattr(_local, "mode", None) is None and ledger.enabled()
            if counted and st.before is None:
                st.name = _name(key, name)
                st.before = ledger.before(st.name)
            budget, before = setting, (st.before if counted else 0.0)
        if before + st.spent + _work(args, kernel) > budget:
            if counted:
                ledger.compiled(st.name)
            return False, None
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):
        result = python_copy(kernel)(*_tier_args(args))
    dt = time.perf_counter() - t0
    st.spent += dt
    if counted:
        ledger.add(st.name, dt)
    return True, result
