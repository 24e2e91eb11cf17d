"""Scalar special functions for the elementwise rules (``rules.py``): the
error function's inverse, the digamma function and its first two
derivatives, exponentially scaled modified Bessel functions of integer
order, and the log of the normal distribution function.

Written for float64 and accurate to about 1e-14 relative (the tests compare
them with SciPy's values when SciPy is installed; tapegrad never imports
it).  The methods are the textbook ones:

* digamma, trigamma, tetragamma: the recurrence ``psi(x) = psi(x + 1) - 1/x``
  up to ``x >= 12``, then the asymptotic (Stirling) series in the Bernoulli
  numbers; negative arguments by the reflection formulas; around digamma's
  positive root a Taylor series whose coefficients ``psi^(k)(x0) / k!`` were
  computed once at 40 digits (so that values near the root keep their
  relative accuracy);
* ``ive(n, x) = exp(-|x|) I_n(x)``: the power series for ``|x| <= 20``
  (all terms positive, no cancellation), Hankel's asymptotic expansion
  beyond (its smallest term is below ``exp(-2|x|)``);
* ``erfinv``: Winitzki's closed-form approximation, refined by Halley
  steps on ``erf(y) - x`` (``erfc(y) - (1 - |x|)`` for ``|x| > 0.5``, where
  ``1 - |x|`` is exact);
* ``log_ndtr``: ``log(erfc(-x / sqrt 2) / 2)`` (``log1p`` of the upper tail
  for ``x > 0``) and below ``x = -10`` the asymptotic series of Mills'
  ratio, ``log Phi(x) = -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 +
  3/x^4 - ...)``.

Every function takes and returns a float; none divides by zero or calls a
``math`` function outside its domain, so their sources also run as plain
Python (``coverage.as_python``, the interpreted tier).
"""
import math

import numpy as np

from . import codes as C
from ._jit import inline, inner, kernel
from .unhandled import unhandled

_INF = math.inf
_NAN = math.nan
_PI = math.pi
_TWO_PI_CUBED = 2.0 * (_PI * _PI * _PI)
_SQRT_PI = math.sqrt(math.pi)
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

#: Bernoulli numbers B_2, B_4, ..., B_18
_BERNOULLI = np.array([1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0,
                       -691.0 / 2730.0, 7.0 / 6.0, -3617.0 / 510.0, 43867.0 / 798.0])
#: below this the polygamma functions step up by their recurrence
_ASYMPTOTIC = 12.0

#: digamma's positive root, as a sum of two floats, and psi^(k)(x0) / k!
#: for k = 1..17 (computed at 40 digits with mpmath)
_ROOT_HI = 1.4616321449683622
_ROOT_LO = 9.549995429965697e-17
_ROOT_TAYLOR = np.array([
    0.9676722454476212, -0.4427631689835921, 0.258499760955651, -0.16394270544240652,
    0.10782405069126237, -0.07219956125645471, 0.04880428816414311, -0.03316112647484736,
    0.022597648232218104, -0.01542476590494896, 0.010538791616612175,
    -0.007204534386356869, 0.004926781395729853, -0.003369801655439328,
    0.002305126326734928, -0.0015769367714301972, 0.0010788252019162967])
_ROOT_RADIUS = 0.1


@inline
def _is_pole(x):
    return x <= 0.0 and x == math.floor(x)


@inline
def _reduced(x):
    """``x - round(x)``, exact, in [-0.5, 0.5]: sin, tan and cos of ``pi``
    times it carry the periodic factors of the reflection formulas without
    the rounding of ``pi * x`` for large ``|x|``."""
    return x - math.floor(x + 0.5)


# -- digamma and its derivatives -------------------------------------------------------
@inner
def _digamma_positive(x):
    d = (x - _ROOT_HI) - _ROOT_LO
    if abs(d) < _ROOT_RADIUS:
        s = 0.0
        for k in range(_ROOT_TAYLOR.size - 1, -1, -1):
            s = (s + _ROOT_TAYLOR[k]) * d
        return s
    acc = 0.0
    while x < _ASYMPTOTIC:
        acc -= 1.0 / x
        x += 1.0
    z = 1.0 / (x * x)
    s = 0.0
    for k in range(_BERNOULLI.size - 1, -1, -1):
        s = (s + _BERNOULLI[k] / (2.0 * (k + 1))) * z
    return acc + math.log(x) - 0.5 / x - s


@inner
def digamma(x):
    """psi(x) = d/dx log Gamma(x); -inf at +0, +inf at -0, NaN at the
    negative integers and at -inf (as SciPy)."""
    if x != x or x == -_INF:
        return _NAN
    if x == _INF:
        return _INF
    if x <= 0.0:
        if x == 0.0:
            return -_INF if math.copysign(1.0, x) > 0.0 else _INF
        if x == math.floor(x):
            return _NAN
        # psi(x) = psi(1 - x) - pi cot(pi x)
        return _digamma_positive(1.0 - x) - _PI / math.tan(_PI * _reduced(x))
    return _digamma_positive(x)


@inner
def _trigamma_positive(x):
    acc = 0.0
    while x < _ASYMPTOTIC:
        acc += 1.0 / (x * x)
        x += 1.0
    z = 1.0 / (x * x)
    s = 0.0
    for k in range(_BERNOULLI.size - 1, -1, -1):
        s = (s + _BERNOULLI[k]) * z
    return acc + (1.0 + 0.5 / x + s) / x


@inner
def trigamma(x):
    """psi'(x); +inf at the poles 0, -1, -2, ..."""
    if x != x or x == -_INF:
        return _NAN
    if x == _INF:
        return 0.0
    if _is_pole(x):
        return _INF
    if x < 0.0:
        # psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x)
        s = math.sin(_PI * _reduced(x))
        return (_PI * _PI) / (s * s) - _trigamma_positive(1.0 - x)
    return _trigamma_positive(x)


@inner
def _tetragamma_positive(x):
    acc = 0.0
    while x < _ASYMPTOTIC:
        acc -= 2.0 / (x * x * x)
        x += 1.0
    z = 1.0 / (x * x)
    s = 0.0
    for k in range(_BERNOULLI.size - 1, -1, -1):
        s = (s + (2.0 * k + 3.0) * _BERNOULLI[k]) * z
    return acc - (1.0 + 1.0 / x + s) / (x * x)


@inner
def tetragamma(x):
    """psi''(x); NaN at the poles (its sign changes across them)."""
    if x != x or x == -_INF:
        return _NAN
    if x == _INF:
        return -0.0
    if _is_pole(x):
        return _NAN
    if x < 0.0:
        # psi''(x) = psi''(1 - x) - 2 pi^3 cos(pi x) / sin^3(pi x)
        r = _reduced(x)
        s = math.sin(_PI * r)
        return _tetragamma_positive(1.0 - x) - _TWO_PI_CUBED * math.cos(_PI * r) / (s * s * s)
    return _tetragamma_positive(x)


@inner
def polygamma(n, x):
    """psi^(n)(x) for an integer n >= 1: ``(-1)^(n+1) n! zeta(n + 1, x)``.

    The series ``sum_k 1 / (x + k)^(n+1)`` is summed term by term up to
    ``x + k >= 12 + n`` (for any non-pole x, negative ones too: no
    reflection, whose derivatives of cot grow with n), then its tail by the
    Euler-Maclaurin (asymptotic) series ``(n-1)!/x^n (1 + n/(2x) +
    sum_j B_2j C(2j+n-1, 2j) / x^(2j))``.  At the poles: +inf for odd n
    (every term positive), NaN for even n (the sign changes across them),
    as trigamma and tetragamma."""
    if n < 1 or x != x or x == -_INF:
        return _NAN
    sign = 1.0 if n % 2 == 1 else -1.0
    if x == _INF:
        return 0.0 * sign
    if _is_pole(x):
        return _INF if n % 2 == 1 else _NAN
    fact = 1.0  # (n - 1)!
    for j in range(2, n):
        fact *= j
    acc = 0.0
    top = _ASYMPTOTIC + n
    while x < top:
        acc += 1.0 / np.power(x, float(n + 1))
        x += 1.0
    z = 1.0 / (x * x)
    s = 0.0
    binom = 1.0  # C(2j + n - 1, 2j) for j = 1.. (built up term by term)
    terms = np.empty(_BERNOULLI.size)
    for k in range(_BERNOULLI.size):
        j = k + 1
        binom *= (2.0 * j + n - 2.0) * (2.0 * j + n - 1.0) / ((2.0 * j - 1.0) * (2.0 * j))
        terms[k] = _BERNOULLI[k] * binom
    for k in range(_BERNOULLI.size - 1, -1, -1):
        s = (s + terms[k]) * z
    tail = fact / np.power(x, float(n)) * (1.0 + 0.5 * n / x + s)
    return sign * (fact * n * acc + tail)


@kernel
def polygamma_into(n, x, y):
    """``y[i] = polygamma(n, x[i])`` over flat arrays."""
    for i in range(x.size):
        y[i] = polygamma(n, np.float64(x[i]))


@inner
def gammaln(x):
    """log |Gamma(x)|; +inf at the poles (math.lgamma raises there in
    Python) and at +inf, -inf at -inf (as SciPy)."""
    if x != x or x == -_INF:
        return x
    if _is_pole(x) or x == _INF:
        return _INF
    return math.lgamma(x)


# -- exponentially scaled modified Bessel functions ------------------------------------
@inner
def ive(n, x):
    """``exp(-|x|) I_n(x)`` for an integer order ``0 <= n <= 3``."""
    if x != x:
        return x
    ax = abs(x)
    odd = n % 2 == 1
    if ax == _INF:
        val = 0.0
    elif ax <= 20.0:
        # I_n(x) = (x/2)^n sum_k (x^2/4)^k / (k! (k + n)!)
        lead = 1.0
        for j in range(1, n + 1):
            lead *= 0.5 * ax / j
        q = 0.25 * ax * ax
        term = 1.0
        s = 1.0
        k = 1
        while term > 1e-17 * s:
            term *= q / (k * (k + n))
            s += term
            k += 1
        val = lead * s * math.exp(-ax)
    else:
        # exp(-x) I_n(x) ~ (2 pi x)^(-1/2) sum_k (-1)^k prod_j (4n^2 - (2j-1)^2) / (k! (8x)^k)
        mu = 4.0 * n * n
        term = 1.0
        s = 1.0
        for k in range(1, 80):
            odd_k = 2.0 * k - 1.0
            term *= -(mu - odd_k * odd_k) / (8.0 * k * ax)
            if abs(term) < 1e-17 * abs(s):
                break
            s += term
        val = s / math.sqrt(2.0 * _PI * ax)
    return -val if odd and x < 0.0 else val


@inline
def _sign(x):
    return 1.0 if x > 0.0 else (-1.0 if x < 0.0 else 0.0)


@inner
def d_i0e(x, y):
    """d/dx exp(-|x|) I_0(x), from ``y = i0e(x)``."""
    return ive(1, x) - _sign(x) * y


@inner
def d2_i0e(x, y):
    s = _sign(x)
    return 0.5 * (y + ive(2, x)) - 2.0 * s * ive(1, x) + y


@inner
def d_i1e(x, y):
    """d/dx exp(-|x|) I_1(x), from ``y = i1e(x)``: I_1' = (I_0 + I_2) / 2."""
    return 0.5 * (ive(0, x) + ive(2, x)) - _sign(x) * y


@inner
def d2_i1e(x, y):
    # I_1'' = (3 I_1 + I_3) / 4
    s = _sign(x)
    return 0.25 * (3.0 * y + ive(3, x)) - s * (ive(0, x) + ive(2, x)) + y


# -- the inverse error function --------------------------------------------------------
@inner
def erfinv(x):
    """The y with erf(y) = x; +-inf at +-1, NaN outside [-1, 1]."""
    if x != x:
        return x
    ax = abs(x)
    if ax >= 1.0:
        return math.copysign(_INF, x) if ax == 1.0 else _NAN
    if ax < 1e-9:  # erfinv(x) = sqrt(pi)/2 x (1 + pi x^2 / 12 + ...)
        return 0.5 * _SQRT_PI * x
    # Winitzki's approximation (relative error below 2e-3)
    a = 0.147
    ln = math.log((1.0 - ax) * (1.0 + ax))
    t = 2.0 / (_PI * a) + 0.5 * ln
    y = math.sqrt(math.sqrt(t * t - ln / a) - t)
    tail = ax > 0.5
    q = 1.0 - ax  # exact for ax in [0.5, 1]
    for _ in range(8):
        # Halley's step for f(y) = erf(y) - ax (or erfc(y) - q), f''/f' = -2y
        slope = _TWO_OVER_SQRT_PI * math.exp(-y * y)
        if tail:
            step = (q - math.erfc(y)) / slope
        else:
            step = (math.erf(y) - ax) / slope
        step = step / (1.0 + step * y)
        y -= step
        # Halley's steps converge cubically: after a step below 1e-7 y the
        # error is below 1e-20 y (checked against SciPy to 1e-14)
        if abs(step) <= 1e-7 * y:
            break
    return math.copysign(y, x)


# -- log of the standard normal distribution function ----------------------------------
_MILLS = -10.0


@inline
def _mills_tail(x):
    """``sum_{k >= 1} (-1)^k (2k - 1)!! / x^(2k)`` for ``x <= -10``: the
    asymptotic series of Phi(x) (-x) / phi(x) - 1."""
    z = 1.0 / (x * x)
    term = 1.0
    s = 0.0
    for k in range(1, 60):
        term *= -(2.0 * k - 1.0) * z
        s += term
        if abs(term) < 1e-17:
            break
    return s


@inner
def log_ndtr(x):
    """log Phi(x), Phi the standard normal distribution function."""
    if x != x:
        return x
    if x == _INF:
        return -0.0
    if x == -_INF:
        return -_INF
    if x > 0.0:
        return math.log1p(-0.5 * math.erfc(x / _SQRT2))
    if x >= _MILLS:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    return -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI + math.log1p(_mills_tail(x))


@inner
def d_log_ndtr(x):
    """phi(x) / Phi(x)."""
    if x != x:
        return x
    if x == _INF:
        return 0.0
    if x == -_INF:
        return _INF
    if x >= _MILLS:
        return _INV_SQRT_2PI * math.exp(-0.5 * x * x) / (0.5 * math.erfc(-x / _SQRT2))
    return -x / (1.0 + _mills_tail(x))


@inner
def d2_log_ndtr(x):
    """-d (x + d), d = phi(x) / Phi(x); below -10 from the series (x + d
    cancels there)."""
    if x != x:
        return x
    if x == _INF:
        return -0.0
    if x == -_INF:
        return -1.0
    if x >= _MILLS:
        d = d_log_ndtr(x)
        return -d * (x + d)
    t = _mills_tail(x)
    d = -x / (1.0 + t)
    return -d * x * t / (1.0 + t)


# -- the switch of these ops' forwards (their array forwards: special_arrays.py) -------
@inline
def f_special(sub, x):
    """The forward of the K_UNARY special-function subs at one element."""
    if sub == C.ERF:
        return math.erf(x)
    if sub == C.ERFC:
        return math.erfc(x)
    if sub == C.ERFINV:
        return erfinv(x)
    if sub == C.GAMMALN:
        return gammaln(x)
    if sub == C.DIGAMMA:
        return digamma(x)
    if sub == C.I0E:
        return ive(0, x)
    if sub == C.I1E:
        return ive(1, x)
    if sub == C.LOG_NDTR:
        return log_ndtr(x)
    return unhandled(sub)
