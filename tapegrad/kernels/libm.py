"""The C library's functions, element by element: what the interpreted tier
(kernels/interpret.py) calls where a kernel's source names ``np.exp``,
``math.log``, ``np.power`` ...

Compiled kernels call the C library's ``exp``, ``log1p``, ``pow``, ... once
per element (Numba lowers ``np.exp`` and ``math.exp`` of a float64 to a
call of libm's ``exp``).  NumPy's own loops do not: on a machine with
AVX-512 its float64 ``exp``, ``log``, ``sin`` of an array (and even of one
NumPy scalar) run vector implementations of its own, which differ from
libm in the last bit for a few percent of the inputs.  An interpreted
kernel that called NumPy's functions therefore gave other bits than the
same kernel compiled, and a gradient changed its last bits when its kernels
compiled.  The functions here give libm's bits, on scalars and on arrays:

* through Python's ``math`` module where CPython calls libm's function of
  the same name for every ordinary argument (``exp``, ``log1p``, ``sin``,
  ``atan2``, ``pow``, ``cbrt``, ...; about 0.07 us an element on arrays);
* through ``ctypes`` where CPython computes the function itself (``hypot``,
  ``lgamma``) and for the arguments where ``math`` raises instead of
  returning libm's inf or NaN (``log(0.0)``, ``exp(1000.0)``);
* through ``ctypes``, ``expf``, ``sinf`` ..., where every argument is
  float32, as Numba calls them (about 0.3 us an element; ``cbrt`` excepted,
  which Numba computes in float64).

``logaddexp`` and ``logaddexp2`` follow the formula Numba compiles for them
(NumPy's ``npy_logaddexp``, with libm's ``exp`` and ``log1p``).  Square
roots, ``floor`` and the like are correctly rounded everywhere and stay
NumPy's.  :data:`NUMPY` and :data:`MATH` are the namespaces the interpreted
tier hands kernels in place of the ``numpy`` and ``math`` modules.
"""
import ctypes
import math
import sys
import types

import numpy as np

from . import formulas


def _c_library():
    """The C math library, as the process has loaded it (the one compiled
    code calls); ``find_library`` (a subprocess) only where the usual names
    fail."""
    if sys.platform == "win32":
        names = ["ucrtbase", "msvcrt"]
    elif sys.platform == "darwin":
        names = ["libSystem.dylib", None]
    else:
        names = ["libm.so.6", None, "find"]
    for name in names:
        try:
            if name == "find":
                from ctypes import util  # noqa: PLC0415 -- a subprocess; rarely needed
                name = util.find_library("m")
            lib = ctypes.CDLL(name)
            lib.exp  # noqa: B018 -- the library has the math functions
            return lib
        except (OSError, AttributeError, TypeError):
            continue
    return None


_LIB = []  # the library, once looked for (on the first call of a function)


def _c_function(name, nargs, ctype=ctypes.c_double):
    """libm's ``double name(double, ...)`` (``float namef(float, ...)`` for
    ``ctypes.c_float``) through ctypes, or None."""
    if not _LIB:
        _LIB.append(_c_library())
    f = getattr(_LIB[0], name, None) if _LIB[0] is not None else None
    if f is None:
        return None
    f.restype = ctype
    f.argtypes = [ctype] * nargs
    return f


def _scalar(py, c):
    """One element: ``py`` (a ``math`` function that calls libm), and libm
    itself where ``py`` raises rather than return an infinity or NaN."""
    if py is None:
        return c

    def one(*args):
        try:
            return py(*args)
        except (ValueError, OverflowError, ZeroDivisionError):
            return c(*map(float, args))
    return one


def _apply(fast, one, arrays, dtype):
    """``one`` over the elements of the broadcast ``arrays``: ``fast`` (no
    Python frame per element) until an element raises."""
    if len(arrays) == 1:
        shape = np.shape(arrays[0])
        cols = [np.asarray(arrays[0]).ravel().tolist()]
    else:
        b = np.broadcast_arrays(*[np.asarray(a) for a in arrays])
        shape = b[0].shape
        cols = [a.ravel().tolist() for a in b]
    n = len(cols[0])
    try:
        return np.fromiter(map(fast, *cols), dtype, n).reshape(shape)
    except (ValueError, OverflowError, ZeroDivisionError):
        return np.fromiter(map(one, *cols), dtype, n).reshape(shape)


def _single(args):
    """True where compiled code calls the float32 function (``expf``):
    every argument float32 (a Python float is a float64 literal to Numba)."""
    return all(getattr(a, "dtype", None) == np.float32 for a in args)


_FLOAT64 = (float, np.float64)


def _libm(name, nargs, py=None):
    """libm's ``name`` as a function of scalars or arrays: float64, or
    ``namef`` where every argument is float32, as Numba calls them (but
    ``cbrt``, which Numba computes in float64 and rounds)."""
    funcs = []  # (fast, one, c32), made at the first call

    def resolve():
        c = _c_function(name, nargs)
        if c is None:  # no C library to call: Python's math, as close as there is
            c = py if py is not None else getattr(math, name)
        c32 = _c_function(name + "f", nargs, ctypes.c_float) if name != "cbrt" else None
        funcs.append((py if py is not None else c, _scalar(py, c), c32))
        return funcs[0]

    def f(*args):
        fast, one, c32 = funcs[0] if funcs else resolve()
        if all(type(a) in _FLOAT64 for a in args):  # an element of an interpreted loop
            return np.float64(one(*args))
        if c32 is not None and _single(args):
            if all(np.ndim(a) == 0 for a in args):
                return np.float32(c32(*map(float, args)))
            return _apply(c32, c32, args, np.float32)
        dt = np.float32 if name == "cbrt" and _single(args) else np.float64
        if all(np.ndim(a) == 0 and not isinstance(a, np.ndarray) for a in args):
            return dt(one(*map(float, args)))
        return _apply(fast, one, [np.asarray(a, np.float64) for a in args], dt)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"libm's ``{name}`` of each element (``{name}f`` of float32 ones)."
    return f


# libm's function: the ``math`` function that calls it (None: CPython
# computes its own, call libm through ctypes)
_UNARY = {
    "exp": math.exp, "expm1": math.expm1, "exp2": getattr(math, "exp2", None),
    "log": math.log, "log1p": math.log1p, "log2": math.log2, "log10": math.log10,
    "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh,
    "cbrt": getattr(math, "cbrt", None), "erf": math.erf, "erfc": math.erfc,
    "lgamma": None,
}
_BINARY = {"pow": math.pow, "atan2": math.atan2, "hypot": None}

LIBM = {name: _libm(name, 1, py) for name, py in _UNARY.items()}
LIBM.update({name: _libm(name, 2, py) for name, py in _BINARY.items()})

_LOGE2 = 0.6931471805599453   # ln 2
_LOG2E = 1.4426950408889634   # 1 / ln 2


def _logaddexp_with(expf, log1pf, shift, scale):
    """``log(e**x + e**y)`` as Numba compiles it (NumPy's ``npy_logaddexp``):
    ``x + log1p(exp(y - x))`` for the larger x, ``x + shift`` when x == y,
    and NaN in, NaN out; with libm's ``exp`` and ``log1p`` (``exp2`` and
    ``log1p / ln 2`` for base 2)."""
    def one(x, y):
        if x == y:
            return x + shift
        tmp = x - y
        if tmp > 0:
            l1 = log1pf(expf(-tmp))
            return x + (l1 if scale is None else scale * l1)
        if tmp <= 0:
            l1 = log1pf(expf(tmp))
            return y + (l1 if scale is None else scale * l1)
        return tmp

    def f(x, y):
        if type(x) in _FLOAT64 and type(y) in _FLOAT64:  # an element of a loop
            return np.float64(one(float(x), float(y)))
        dt = np.float32 if _single((x, y)) else np.float64  # as Numba types it
        x, y = np.asarray(x, dt), np.asarray(y, dt)
        tmp = x - y
        big = np.where(tmp > 0, x, y)
        e = expf(np.where(tmp > 0, -tmp, tmp))
        l1 = log1pf(e)
        out = big + (l1 if scale is None else dt(scale) * l1)
        out = np.where(tmp != tmp, tmp, out)
        out = np.where(x == y, x + dt(shift), out)  # first: inf == inf
        return out if out.ndim else dt(out)
    return f


logaddexp = _logaddexp_with(LIBM["exp"], LIBM["log1p"], _LOGE2, None)
logaddexp2 = _logaddexp_with(LIBM["exp2"], LIBM["log1p"], 1.0, _LOG2E)

#: NumPy's names of the functions above: the rows of formulas.py whose
#: NumPy loop may differ from libm
_NUMPY_NAMES = {r.name: r.math for r in (*formulas.ROWS, *formulas.BINARY)
                if r.libm and r.math}
#: the binary rows of that kind without a ``math`` function: this module's
#: function of the row's name stands in for NumPy's
_OWN = {r.name: globals()[r.name] for r in formulas.BINARY if r.libm and not r.math}


def _namespace(name, base, funcs):
    mod = types.ModuleType(name, f"``{base.__name__}`` with libm's functions "
                                 "(kernels/libm.py), for interpreted kernels")
    mod.__dict__.update({k: v for k, v in vars(base).items() if not k.startswith("__")})
    mod.__dict__.update(funcs)
    mod.__getattr__ = lambda attr: getattr(base, attr)  # NumPy's lazy attributes
    return mod


#: ``numpy`` as interpreted kernels see it
NUMPY = _namespace("numpy", np, {**{k: LIBM[v] for k, v in _NUMPY_NAMES.items()}, **_OWN})
#: ``math`` as interpreted kernels see it: libm's functions, which return
#: inf and NaN as compiled code does rather than raise
MATH = _namespace("math", math, {
    **{k: getattr(np, k) for k in dir(math)
       if not k.startswith("_") and hasattr(np, k)
       and k not in ("floor", "ceil", "trunc", "isqrt", "factorial")},
    **LIBM})
