"""``tapegrad.scipy.special``: ``scipy.special``'s names and signatures,
differentiable.

SciPy's ufuncs that tapegrad knows (``scipy.special.erf(t)``, ``expit``,
``gammaln``, ...) already record through ``__array_ufunc__``; the others,
and SciPy's Python functions (``logsumexp``, ``softmax``, ``polygamma``,
``multigammaln``), convert their input with ``np.asarray`` and cannot
record.  This module has them all under SciPy's names, with SciPy's
arguments and values, as tensors:

* the functions tapegrad has as ``tg.*`` (``erf``, ``erfc``, ``erfinv``,
  ``gammaln``, ``digamma``/``psi``, ``i0e``, ``i1e``, ``expit``, ``logit``,
  ``log_expit``, ``xlogy``, ``xlog1py``, ``ndtr``, ``log_ndtr``,
  ``softmax``, ``log_softmax``, and ``polygamma`` of
  ``tapegrad.ops.special``) are those functions, taking arrays as tensors
  and, as SciPy's, quiet about inf and NaN;
* ``gamma``, ``betaln``, ``multigammaln``, ``i0``, ``i1`` and
  ``logsumexp`` (with SciPy's ``b=`` and ``return_sign=``) are composites
  of tapegrad's differentiable ops, so every derivative reaches through
  them: backward, ``tg.grad``, ``tg.hessian``, ``tg.hvp``, ``tg.jvp``,
  ``create_graph=True`` to any order, and traced replay;
* ``erfcx``, ``ndtri`` and ``entr`` are ``tg.elementwise`` ops with their
  first and second derivatives in closed form: backward, ``tg.grad``,
  ``tg.hessian``, ``tg.hvp`` and one ``create_graph=True`` level (a
  gradient of a gradient) reach through them.  Their forward values are
  SciPy's own compiled ``erfcx`` and ``ndtri`` (SciPy is imported when one
  of the two first runs; ``entr`` needs no SciPy).

Integer inputs compute in float64, float32 stays float32 (as SciPy's
ufuncs).  ``polygamma(n >= 1, x)`` is a ``tg.Function``: ``create_graph``
reaches it to any order, ``tg.hessian`` does not.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> from tapegrad.scipy import special
>>> x = tg.tensor([0.5, 3.0], requires_grad=True)
>>> special.gamma(x).sum().backward()       # gamma'(x) = gamma(x) psi(x)
>>> np.round(x.grad.numpy(), 6)
array([-3.480231,  1.845569])
"""
import ctypes
import functools
import math
import threading

import numpy as np

import tapegrad as tg
from tapegrad.ops import special as _S
from tapegrad.ops.guarded import on_values

__all__ = ["betaln", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "expit", "gamma",
           "gammaln", "i0", "i0e", "i1", "i1e", "log_expit", "log_ndtr", "log_softmax",
           "logit", "logsumexp", "multigammaln", "ndtr", "ndtri", "polygamma", "psi",
           "softmax", "xlog1py", "xlogy"]

_LOG_PI = math.log(math.pi)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def need_scipy(what):
    """Import and return ``scipy.special``, or raise an ImportError saying
    that ``what`` needs it."""
    try:
        import scipy.special
    except ImportError as e:
        raise ImportError(f"{what} computes its values with SciPy, which is not installed: "
                          "pip install scipy") from e
    return scipy.special


def tensors(*xs):
    """:func:`tensor` of each, with Python numbers taking the floating dtype
    of the arrays and tensors among them (float32 arguments with a Python
    ``loc=0.5`` stay float32, as in NumPy 2)."""
    def weak(x):
        return isinstance(x, (int, float)) and not isinstance(x, np.generic)
    arrays = [x for x in xs if not weak(x)]
    dtype = np.result_type(*(x.dtype if isinstance(x, tg.Tensor) else np.asarray(x).dtype
                             for x in arrays)) if arrays else np.dtype(np.float64)
    if dtype.kind != "f":
        dtype = np.dtype(np.float64)
    return [tensor(np.asarray(x, dtype) if weak(x) else x) for x in xs]


def tensor(x):
    """``x`` as a floating tensor: a tensor stays (an integer one becomes
    float64), anything else becomes a float64 (or float32) tensor."""
    if isinstance(x, tg.Tensor):
        return x if x.dtype.kind == "f" else x.astype(np.float64)
    if isinstance(x, tg.ComplexTensor) or np.iscomplexobj(x):
        raise TypeError("tapegrad.scipy: complex arguments are not supported; pass the real "
                        "and imaginary parts separately")
    a = np.asarray(x)
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    return tg.from_numpy(np.array(a))  # a copy: the caller's array stays writable


def quiet(fn):
    """``fn`` without NumPy's floating-point warnings: SciPy's functions
    return inf and NaN at their edges silently, and so do these."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    return run


def both(c, d):
    """``c and d`` of two boolean tensors (or arrays), recorded."""
    return tg.where(c, d, False)


def either(c, d):
    """``c or d`` of two boolean tensors (or arrays), recorded."""
    return tg.where(c, True, d)


def _tapegrads(fn, arrays=1):
    """tapegrad's own ``fn`` (its docstring and example), taking its first
    ``arrays`` positional arguments as :func:`tensors` and, as SciPy's
    functions, quiet about inf and NaN."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*tensors(*args[:arrays]), *args[arrays:], **kwargs)
    return run


# the functions tapegrad has as tg.*
erf, erfc, erfinv, gammaln = map(_tapegrads, (tg.erf, tg.erfc, tg.erfinv, tg.gammaln))
digamma = psi = _tapegrads(tg.digamma)
i0e, i1e, log_ndtr, ndtr = map(_tapegrads, (tg.i0e, tg.i1e, tg.log_ndtr, tg.ndtr))
expit, logit, log_expit = map(_tapegrads, (tg.expit, tg.logit, tg.log_expit))
xlogy, xlog1py = _tapegrads(tg.xlogy, 2), _tapegrads(tg.xlog1py, 2)
softmax, log_softmax = _tapegrads(tg.softmax), _tapegrads(tg.log_softmax)


# -- ops with SciPy's forward and closed-form derivatives (tg.elementwise) --------------------
def _capsule(name, nargs):
    """SciPy's compiled double-precision ``name`` (from
    ``scipy.special.cython_special``) as a ctypes function that Numba calls
    from compiled code."""
    need_scipy(f"tapegrad.scipy.special.{name}")
    import scipy.special.cython_special as cs
    want = ("double (" + ", ".join(["double"] * nargs) + ", int __pyx_skip_dispatch)").encode()
    # prototypes of our own (setting restype on ctypes.pythonapi's would be global)
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
        ("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    for key in (name, f"__pyx_fuse_0{name}", f"__pyx_fuse_1{name}"):
        cap = cs.__pyx_capi__.get(key)
        if cap is not None and get_name(cap) == want:
            proto = ctypes.CFUNCTYPE(ctypes.c_double, *[ctypes.c_double] * nargs, ctypes.c_int)
            return proto(get_pointer(cap, want))
    raise ImportError(f"tapegrad.scipy.special.{name}: this SciPy's cython_special has no "
                      f"float64 {name}; upgrade SciPy (pip install -U scipy)")


def _d_erfcx(x, y):
    # erfcx' = 2 x erfcx - 2/sqrt(pi); for x > 10 the two terms cancel, so
    # the asymptotic series of erfcx differentiated term by term instead
    if x > 10.0:
        z = 1.0 / (x * x)
        c, total = 1.0, 1.0
        for n in range(1, 40):
            c *= -(2.0 * n - 1.0) * 0.5 * z
            term = c * (2.0 * n + 1.0)
            total += term
            if abs(term) < 1e-17 * abs(total):
                break
        return -0.5641895835477563 * z * total
    return 2.0 * x * y - 1.1283791670955126


def _d2_erfcx(x, y):
    # erfcx'' = 2 erfcx + 2 x erfcx' (the same series beyond 10)
    if x > 10.0:
        z = 1.0 / (x * x)
        c, total = 1.0, 2.0
        for n in range(1, 40):
            c *= -(2.0 * n - 1.0) * 0.5 * z
            term = c * (2.0 * n + 1.0) * (2.0 * n + 2.0)
            total += term
            if abs(term) < 1e-17 * abs(total):
                break
        return 0.5641895835477563 * z / x * total
    return 2.0 * y + 2.0 * x * (2.0 * x * y - 1.1283791670955126)


def _d_ndtri(p, y):
    # the inverse's derivative: 1 / phi(ndtri(p))
    return 2.5066282746310002 * math.exp(0.5 * y * y)


def _d2_ndtri(p, y):
    d = 2.5066282746310002 * math.exp(0.5 * y * y)
    return y * d * d


def _entr(x):
    if x > 0.0:
        return -x * math.log(x)
    if x == 0.0:
        return 0.0
    if x < 0.0:
        return -math.inf
    return x  # NaN


def _d_entr(x, y):
    # -(log x + 1); +inf at 0 (the one-sided derivative, as PyTorch and JAX);
    # 0 where the value is the constant -inf
    if x > 0.0:
        return -(math.log(x) + 1.0)
    if x == 0.0:
        return math.inf
    if x < 0.0:
        return 0.0
    return x


def _d2_entr(x, y):
    if x > 0.0:
        return -1.0 / x
    if x == 0.0:
        return -math.inf
    if x < 0.0:
        return 0.0
    return x


_OPS = {}
_ops_lock = threading.Lock()


def _op(name):
    """The elementwise op ``name``, made on first use (``tg.elementwise``
    compiles it on its first call)."""
    op = _OPS.get(name)
    if op is None:
        with _ops_lock:
            op = _OPS.get(name)
            if op is None:
                op = _OPS[name] = _make(name)
    return op


def _make(name):
    if name == "entr":
        return tg.elementwise(_entr, _d_entr, second_derivative=_d2_entr, name="entr")
    if name == "erfcx":
        c_erfcx = _capsule("erfcx", 1)

        def erfcx(x):
            return c_erfcx(x, 0)
        return tg.elementwise(erfcx, _d_erfcx, second_derivative=_d2_erfcx, name="erfcx")
    if name == "ndtri":
        c_ndtri = _capsule("ndtri", 1)

        def ndtri(p):
            return c_ndtri(p, 0)
        return tg.elementwise(ndtri, _d_ndtri, second_derivative=_d2_ndtri, name="ndtri")
    raise KeyError(name)


@quiet
def erfcx(x):
    """The scaled complementary error function ``exp(x**2) * erfc(x)``
    (``scipy.special.erfcx``).

    Values are SciPy's (``exp(x**2)`` is never formed: no overflow for large
    positive ``x``, where ``erfcx(x) ~ 1 / (x sqrt(pi))``; +inf below about
    -26.6).  The derivative ``2 x erfcx(x) - 2 / sqrt(pi)`` and the second
    derivative are computed from the asymptotic series for ``x > 10``, where
    those terms would cancel.  A ``tg.elementwise`` op: backward,
    ``tg.hessian``, ``tg.hvp`` and one ``create_graph=True`` level.

    Parameters
    ----------
    x : array_like or Tensor
        Real argument.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import erfcx
    >>> x = tg.tensor([0.0, 1e4], requires_grad=True)
    >>> np.round(erfcx(x).numpy() * [1, 1e4], 8)
    array([1.        , 0.56418958])
    >>> erfcx(x).sum().backward()
    >>> np.round(x.grad.numpy() * [1, 1e8], 8)
    array([-1.12837917, -0.56418958])
    """
    return _op("erfcx")(tensor(x))


@quiet
def ndtri(p):
    """The inverse of the standard normal distribution function
    (``scipy.special.ndtri``): ``ndtr(ndtri(p)) == p``.

    Values are SciPy's (accurate in both tails); -inf at 0, +inf at 1, NaN
    outside [0, 1].  Derivatives ``1 / phi(y)`` and ``y / phi(y)**2`` with
    ``y = ndtri(p)`` and ``phi`` the normal density.  A ``tg.elementwise``
    op: backward, ``tg.hessian``, ``tg.hvp`` and one ``create_graph=True``
    level.

    Parameters
    ----------
    p : array_like or Tensor
        Probabilities.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import ndtri
    >>> p = tg.tensor([0.5, 0.975], requires_grad=True)
    >>> np.round(ndtri(p).numpy(), 6)
    array([0.      , 1.959964])
    >>> ndtri(p).sum().backward()
    >>> np.round(p.grad.numpy(), 6)          # sqrt(2 pi) exp(y**2 / 2)
    array([ 2.506628, 17.110083])
    """
    return _op("ndtri")(tensor(p))


@quiet
def entr(x):
    """Elementwise entropy ``-x log(x)`` (``scipy.special.entr``): 0 at
    ``x = 0``, -inf for ``x < 0``.

    The derivative is ``-(log(x) + 1)``, +inf at 0 (the one-sided
    derivative, as PyTorch's and JAX's ``entr``), 0 for ``x < 0``; the second
    derivative ``-1 / x``.  A ``tg.elementwise`` op: backward,
    ``tg.hessian``, ``tg.hvp`` and one ``create_graph=True`` level.

    Parameters
    ----------
    x : array_like or Tensor

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import entr
    >>> p = tg.tensor([0.25, 0.75], requires_grad=True)
    >>> H = entr(p).sum()
    >>> round(float(H.detach()), 6)
    0.562335
    >>> H.backward()
    >>> np.round(p.grad.numpy(), 6)
    array([ 0.386294, -0.712318])
    """
    return _op("entr")(tensor(x))


# -- composites of differentiable ops -------------------------------------------------------
@quiet
def gamma(x):
    """The gamma function (``scipy.special.gamma``), as
    ``sign * exp(gammaln(x))``.

    Negative non-integers take the sign of ``gamma`` there (negative on
    (-1, 0), (-3, -2), ...); +inf at 0, -inf at -0.0, NaN at the negative
    integers and -inf, as SciPy.  The derivative is ``gamma(x) psi(x)``.
    Relative accuracy about ``1e-16 * |gammaln(x)|`` (``1e-13`` near the
    overflow at 171.6).

    Parameters
    ----------
    x : array_like or Tensor

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import gamma
    >>> np.round(gamma(tg.tensor([5.0, 0.5, -0.5, -1.5])).numpy(), 6)
    array([24.      ,  1.772454, -3.544908,  2.363272])
    """
    x = tensor(x)
    pole = both(x < 0, tg.floor(x) == x)
    negative = both(x < 0, tg.remainder(tg.floor(x), 2.0) == 1.0)
    mag = tg.exp(tg.gammaln(x))
    y = tg.where(x == 0, tg.copysign(mag, x), tg.where(negative, -mag, mag))
    return tg.where(pole, math.nan, y)


def _stirling_correction(z):
    """``gammaln(z) - ((z - 1/2) log z - z + log(2 pi)/2)`` for ``z >= 20``:
    five terms of Stirling's series, good to about 1e-18 there."""
    r = 1.0 / z
    r2 = r * r
    return r * (1.0 / 12 - r2 * (1.0 / 360 - r2 * (1.0 / 1260 - r2 * (1.0 / 1680
                                                                       - r2 / 1188))))


@quiet
def betaln(a, b):
    """The log of the absolute value of the beta function,
    ``log|B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)``
    (``scipy.special.betaln``).

    Where the larger argument and the sum are 20 or more it is
    ``gammaln(lo) - lo log(hi) - (hi + lo - 1/2) log1p(lo / hi) + lo``
    plus Stirling corrections, and where both arguments are, Stirling's
    series for all three ``gammaln`` in terms that do not cancel: so
    ``betaln(1e10, 2)`` and ``betaln(1e300, 1e300)`` keep full precision
    (SciPy's own loses up to about 1e-10 relative there).  +inf where an argument is 0.
    Differentiable in both arguments (``psi(a) - psi(a + b)``, ...),
    broadcasting as NumPy.

    Parameters
    ----------
    a, b : array_like or Tensor

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import betaln
    >>> a = tg.tensor([2.0, 1e10], requires_grad=True)
    >>> np.round(betaln(a, 3.0).numpy(), 6)           # log(1/12), about log(2) - 3 log(1e10)
    array([ -2.484907, -68.384406])
    >>> betaln(a, 3.0).sum().backward()
    >>> np.round(a.grad.numpy() * [1, 1e10], 6)       # psi(a) - psi(a + 3)
    array([-1.083333, -3.      ])
    """
    a, b = tensors(a, b)
    direct = tg.gammaln(a) + tg.gammaln(b) - tg.gammaln(a + b)
    # a selection, not minimum/maximum: at a tie those split the derivative
    # evenly, which is right at first order only
    order = a <= b
    lo, hi = tg.where(order, a, b), tg.where(order, b, a)
    # one large argument: Stirling's series for gammaln(hi) - gammaln(hi + lo)
    big = both(hi >= 20.0, hi + lo >= 20.0)
    lo_s, hi_s = tg.where(big, lo, 1.0), tg.where(big, hi, 20.0)
    s = hi_s + lo_s
    one = (tg.gammaln(lo_s) - lo_s * tg.log(hi_s) - (s - 0.5) * tg.log1p(lo_s / hi_s) + lo_s
           + _stirling_correction(hi_s) - _stirling_correction(s))
    # both large: Stirling's series for all three, in terms that do not cancel
    two = lo >= 20.0
    lo_2, hi_2 = tg.where(two, lo, 20.0), tg.where(two, hi, 20.0)
    s2 = lo_2 + hi_2
    both_large = (_HALF_LOG_2PI - 0.5 * tg.log(s2) - (lo_2 - 0.5) * tg.log1p(hi_2 / lo_2)
                  - (hi_2 - 0.5) * tg.log1p(lo_2 / hi_2) + _stirling_correction(lo_2)
                  + _stirling_correction(hi_2) - _stirling_correction(s2))
    value = tg.where(two, both_large, tg.where(big, one, direct))
    return tg.where(either(a == 0, b == 0), math.inf, value)


@quiet
def multigammaln(a, d):
    """The log of the multivariate gamma function of dimension ``d``,
    ``d (d - 1) / 4 log(pi) + sum_j gammaln(a - j / 2)`` for ``j = 0 ..
    d - 1`` (``scipy.special.multigammaln``).

    ``d`` is a positive integer; every ``a`` must exceed ``(d - 1) / 2``
    (a ValueError otherwise, as SciPy).  Differentiable in ``a``.

    Parameters
    ----------
    a : array_like or Tensor
    d : int

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import multigammaln
    >>> a = tg.tensor(3.0, requires_grad=True)
    >>> y = multigammaln(a, 3)
    >>> round(float(y.detach()), 6)
    2.694925
    >>> y.backward()
    >>> round(float(a.grad), 6)                   # psi(3) + psi(2.5) + psi(2)
    2.048725
    """
    if isinstance(d, tg.Tensor) or not np.isscalar(d) or int(d) != d or d < 1:
        raise ValueError(f"multigammaln: d must be a positive integer (the dimension), got {d!r}")
    d = int(d)
    a = tensor(a)
    if on_values(lambda v: bool(np.any(v <= 0.5 * (d - 1))), a):
        raise ValueError(f"multigammaln: every a must be greater than (d - 1) / 2 = "
                         f"{0.5 * (d - 1)} for d = {d}")
    total = 0.25 * d * (d - 1) * _LOG_PI
    for j in range(d):
        total = total + tg.gammaln(a - 0.5 * j)
    return total


@quiet
def i0(x):
    """The modified Bessel function of the first kind of order 0
    (``scipy.special.i0``), as ``i0e(x) * exp(|x|)`` (its power series
    below ``|x| = 1``): +inf beyond ``|x| = 713``, as SciPy.  Derivative
    ``i1(x)``.

    Parameters
    ----------
    x : array_like or Tensor

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import i0
    >>> x = tg.tensor([0.0, 1.0], requires_grad=True)
    >>> np.round(i0(x).numpy(), 6)
    array([1.      , 1.266066])
    >>> i0(x).sum().backward()
    >>> np.round(x.grad.numpy(), 6)            # i1(x)
    array([0.      , 0.565159])
    """
    x = tensor(x)
    small = tg.abs(x) < 1.0
    xs = tg.where(small, x, 0.0)
    xl = tg.where(small, 1.0, x)
    return tg.where(small, _bessel_series(xs, 0), tg.i0e(xl) * tg.exp(tg.abs(xl)))


def _bessel_series(x, order):
    """``I_order(x)`` for ``|x| < 1`` (order 0 or 1) from its power series in
    ``u = x**2 / 4``: 13 terms, smooth at 0 to every order (``i0e(x) *
    exp(|x|)`` is a product of two functions with kinks at 0 whose second
    derivatives the chain rule cannot combine there)."""
    u = 0.25 * x * x
    coef = [1.0 / (math.factorial(k) * math.factorial(k + order)) for k in range(13)]
    total = coef[-1] + 0.0 * u
    for c in reversed(coef[:-1]):
        total = total * u + c
    return total if order == 0 else 0.5 * x * total


@quiet
def i1(x):
    """The modified Bessel function of the first kind of order 1
    (``scipy.special.i1``), as ``i1e(x) * exp(|x|)`` (its power series
    below ``|x| = 1``): +-inf beyond ``|x| = 713``, as SciPy.  Derivative
    ``i0(x) - i1(x) / x`` (1/2 at 0).

    Parameters
    ----------
    x : array_like or Tensor

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import i1
    >>> x = tg.tensor([-1.0, 0.0], requires_grad=True)
    >>> np.round(i1(x).numpy(), 6)
    array([-0.565159,  0.      ])
    >>> i1(x).sum().backward()
    >>> np.round(x.grad.numpy(), 6)
    array([0.700907, 0.5     ])
    """
    x = tensor(x)
    small = tg.abs(x) < 1.0
    xs = tg.where(small, x, 0.0)
    xl = tg.where(small, 1.0, x)
    return tg.where(small, _bessel_series(xs, 1), tg.i1e(xl) * tg.exp(tg.abs(xl)))


@quiet
def polygamma(n, x):
    """The n-th derivative of the digamma function (``scipy.special.polygamma``).

    ``n`` is a non-negative integer or an array of them (broadcast against
    ``x``, as SciPy); it carries no gradient.  Differentiable in ``x``:
    ``polygamma(0, x)`` is ``digamma``; for ``n >= 1`` it is tapegrad's
    ``polygamma`` op, whose gradients differentiate again with
    ``create_graph=True`` to any order (``tg.hessian`` and forward mode do
    not reach it).

    Parameters
    ----------
    n : int or array_like of int
    x : array_like or Tensor

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import polygamma
    >>> np.round(polygamma([0, 1, 2], tg.tensor(1.5)).numpy(), 6)
    array([ 0.03649 ,  0.934802, -0.828797])
    """
    x = tensor(x)
    if isinstance(n, tg.Tensor):
        n = on_values(np.array, n)
    n = np.asarray(n)
    if n.dtype.kind == "f" and np.all(n == np.round(n)):
        n = n.astype(np.int64)
    if n.dtype.kind not in "iu" or np.any(n < 0):
        raise ValueError(f"polygamma: the order n must be integers >= 0, got {n!r}")
    if n.ndim == 0:
        return tensor(_S.polygamma(int(n), x))
    shape = np.broadcast_shapes(n.shape, x.shape)
    out = None
    for k in np.unique(n):
        v = _S.polygamma(int(k), x)
        out = v if out is None else tg.where(n == k, v, out)
    return tg.broadcast_to(out, shape) if out.shape != shape else out


@quiet
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``log(sum(b * exp(a)))`` over ``axis``, computed stably
    (``scipy.special.logsumexp``).

    Without ``b`` it is ``tg.logsumexp``.  With weights ``b`` (broadcast
    against ``a``; differentiable too) the sum may be negative: then
    ``return_sign=True`` returns ``(log|sum|, sign)`` (the sign as a plain
    array), and without it the result is NaN there, as SciPy.

    Parameters
    ----------
    a : array_like or Tensor
    axis : None, int or tuple of ints
    b : array_like or Tensor, optional
    keepdims : bool
    return_sign : bool

    Returns
    -------
    Tensor, or (Tensor, ndarray) with ``return_sign=True``

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.special import logsumexp
    >>> a = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> y, s = logsumexp(a, b=[2.0, -1.0], return_sign=True)   # log|2e - e^2|
    >>> round(float(y.detach()), 6), float(s)
    (0.669107, -1.0)
    >>> y.backward()
    >>> np.round(a.grad.numpy(), 6)
    array([-2.784422,  3.784422])
    """
    a = tensor(a)
    if b is None and not return_sign:
        return tg.logsumexp(a, axis=axis, keepdims=keepdims)
    if b is None:
        y = tg.logsumexp(a, axis=axis, keepdims=keepdims)
        return y, on_values(_sign_of_log, y)
    a, b = tensors(a, b)
    if a.shape != b.shape:
        shape = np.broadcast_shapes(a.shape, b.shape)
        a, b = tg.broadcast_to(a, shape), tg.broadcast_to(b, shape)
    # the shift only keeps exp in range: the result does not depend on it
    live = tg.where(b != 0, a, -math.inf)
    m = tg.max(live, axis=axis, keepdims=True)
    m = tg.where(tg.abs(m) < math.inf, m, 0.0)
    s = tg.sum(b * tg.exp(a - m), axis=axis, keepdims=True)
    y = tg.log(tg.abs(s)) + m
    if not keepdims:
        y = tg.squeeze(y, axis=_axes(axis, a.ndim))
        s = tg.squeeze(s, axis=_axes(axis, a.ndim))
    if return_sign:
        return y, on_values(np.sign, s)
    return tg.where(s < 0, math.nan, y)


def _sign_of_log(y):
    return np.where(np.isnan(y), np.nan, np.where(y == -np.inf, 0.0, 1.0))


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(int(k) % ndim for k in axes)
