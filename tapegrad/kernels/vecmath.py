"""``exp``, ``log`` and ``tanh`` of one float64 in a form LLVM vectorises.

A loop of ``np.exp`` / ``np.log`` compiles to a libm call per element,
which keeps the loop scalar: 3.6-4.3 ms per 1e6 elements against 0.8 ms for
NumPy's own vector loops.  These two are written with arithmetic and bit
casts only (``f64_bits``/``bits_f64``, kernels/_numba.py), so a loop of them
runs on vector registers: about 1.5 ms per 1e6 elements (``python
benchmarks/vecmath.py``).  Both are faithfully rounded -- within one unit in
the last place of the exact value, and the correctly rounded result for
about 98% of inputs (over 50,000 random inputs the largest error measured
against 120-bit references was 0.76 ulp); tests/test_vecmath.py checks this
and every special value (NaN, infinities, zeros, subnormal inputs and
results, overflow) against NumPy.  Neither contracts into fused multiply-adds (``fastmath`` stays off),
so every machine computes the same bits.

``tanh`` is within 1.5 ulp (1.35 the largest error measured over 50,000
inputs, 8% of results not the correctly rounded one; libm's loop measured
2.0 ulp and 31%, at 13.6 ms per 1e6 elements against 2.4 ms).

The interpreted tier (kernels/interpret.py) runs ``exp_arrays``,
``log_arrays`` and ``tanh_arrays`` (below) in their place: the branch-free
parts here on whole NumPy arrays (the same IEEE operations on every
element, so the same bits; 15-30 ms per 1e6 elements), never NumPy's own
``exp``, whose vector loops differ from these in the last bit.
"""
import math
import struct

import numpy as np

from . import interpret as _interpret
from ._jit import deferred, inline

f64_bits = deferred("f64_bits")
bits_f64 = deferred("bits_f64")

_INV_LN2 = 1.4426950408889634
# ln 2 split so that k * _LN2_HI is exact for every |k| < 2**21: the reduced
# argument x - k ln 2 keeps ~85 bits
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10
_EXP_MAX = 709.782712893384     # above: exp overflows to inf
_EXP_MIN = -745.1332191019412   # below: exp rounds to 0
_SQRT2 = 1.4142135623730951
_TWO54 = 18014398509481984.0
_MANTISSA = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000


@inline
def _exp_reduced(x):
    """``(k, t, c)`` with exp(x) = 2**k (t + c): x = k ln 2 + r with |r| <= ln 2
    / 2, exp(r) = 1 + r + r**2 p by its Taylor series to r**13 (the rest is
    below 2**-57), and 1 + r split as t plus its rounding error (carried in
    c with r's low part and the series) so that the caller rounds once."""
    kf = np.floor(x * _INV_LN2 + 0.5)
    hi = x - kf * _LN2_HI
    lo = kf * _LN2_LO
    r = hi - lo
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    t = 1.0 + hi
    e = (1.0 - t) + hi
    return kf, t, e + (r * r * p - lo)


@inline
def exp_v(x):
    """``exp(x)``: x = k ln 2 + r with |r| <= ln 2 / 2, exp(r) by its Taylor
    series to r**13 (the rest is below 2**-57 of the result), scaled by 2**k
    in two factors so that subnormal results round once."""
    xc = min(max(x, -746.0), 710.0)  # k stays in range; the ends are set below
    kf, t, c = _exp_reduced(xc)
    y = t + c
    k = np.int64(kf)
    k1 = k >> 1
    y = y * bits_f64((k1 + 1023) << 52) * bits_f64((k - k1 + 1023) << 52)
    if x > _EXP_MAX:
        y = np.inf
    if x < _EXP_MIN:
        y = 0.0
    if x != x:
        y = x
    return y


@inline
def log_v(x):
    """``log(x)``: x = 2**k m with m in [sqrt(1/2), sqrt(2)) (from the bits;
    subnormals are scaled by 2**54 first), and log(m) = log(1 + f) = 2
    atanh(s) with s = f / (2 + f), |s| < 0.1716: ``f - s (f - R)`` with R the
    series 2 (s**2/3 + ... + s**22/23), arranged as ``f - (f**2/2 - s (f**2/2
    + R))`` so that the large terms cancel exactly."""
    sub = x < 2.2250738585072014e-308
    xs = x * _TWO54 if sub else x
    b = f64_bits(xs)
    k = (b >> 52) - 1023
    m = bits_f64((b & _MANTISSA) | _ONE_BITS)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    kf = np.float64(k + (1 if big else 0) - (54 if sub else 0))
    y = _log_reduced(m, kf)
    if x == 0.0:
        y = -np.inf
    if x < 0.0 or x != x:
        y = np.nan
    if x == np.inf:
        y = np.inf
    return y


@inline
def _log_reduced(m, kf):
    """``log(2**kf m)`` for m in [sqrt(1/2), sqrt(2)): arithmetic only."""
    f = m - 1.0  # exact (Sterbenz)
    s = f / (2.0 + f)
    z = s * s
    R = 2.0 / 23.0
    R = R * z + 2.0 / 21.0
    R = R * z + 2.0 / 19.0
    R = R * z + 2.0 / 17.0
    R = R * z + 2.0 / 15.0
    R = R * z + 2.0 / 13.0
    R = R * z + 2.0 / 11.0
    R = R * z + 2.0 / 9.0
    R = R * z + 2.0 / 7.0
    R = R * z + 2.0 / 5.0
    R = R * z + 2.0 / 3.0
    R = R * z
    hfsq = 0.5 * f * f
    # k ln2_hi + f in two parts (both exact; |k ln2_hi| >= |f| unless k is 0),
    # so that the sum rounds once, at the end
    a = kf * _LN2_HI
    t = a + f
    e = (a - t) + f
    y = t + (e - (hfsq - (s * (hfsq + R) + kf * _LN2_LO)))
    return y


_HALF_LN2 = 0.34657359027997264


@inline
def _tanh_series(sa):
    """tanh(sa) for 0 <= sa <= ln 2 / 2: its odd Taylor series to sa**25."""
    z = sa * sa
    q = 1.5918905069328964e-05
    q = q * z - 3.927832388331683e-05
    q = q * z + 9.691537956929451e-05
    q = q * z - 0.00023912911424355248
    q = q * z + 0.000590027440945586
    q = q * z - 0.0014558343870513183
    q = q * z + 0.003592128036572481
    q = q * z - 0.008863235529902197
    q = q * z + 0.021869488536155203
    q = q * z - 0.05396825396825397
    q = q * z + 0.13333333333333333
    q = q * z - 0.3333333333333333
    return sa + sa * (z * q)


@inline
def _expm1_from(sc, t, c):
    """``exp - 1`` from ``_exp_reduced``'s parts, ``sc`` = 2**kf with kf >= 1."""
    return (sc * t - 1.0) + sc * c


@inline
def _expm1_twice(h):
    """``exp(2 h) - 1`` for ln 2 / 2 <= h <= 20 (then kf >= 1)."""
    kf, t, c = _exp_reduced(2.0 * h)
    return _expm1_from(bits_f64((np.int64(kf) + 1023) << 52), t, c)


@inline
def tanh_v(x):
    """``tanh(x)``: below ln 2 / 2 in magnitude its odd Taylor series to x**25
    (the rest is below 2**-56 of the result); above, ``u / (u + 2)`` with
    ``u = expm1(2|x|)`` from ``exp_v``'s reduction (k >= 1 there, so 2**k (1 +
    q) - 1 keeps its low part); 1 beyond 20.  Both branches are computed and
    one is selected, so that a loop of them vectorises."""
    a = abs(x)
    small = _tanh_series(min(a, _HALF_LN2))
    u = _expm1_twice(min(max(a, _HALF_LN2), 20.0))
    y = small if a < _HALF_LN2 else u / (u + 2.0)
    if a > 20.0:
        y = 1.0
    if x < 0.0:
        y = -y
    if a == 0.0 or x != x:
        y = x  # keeps -0.0 and NaN
    return y


# -- the same functions on NumPy arrays, for the interpreted tier ----------------------
# kernels/interpret.py runs these in place of exp_v, log_v and tanh_v: the
# branch-free parts above (their Python functions) on whole arrays, the
# branches as selections, the bit casts as views; every element goes through
# the same IEEE operations as in compiled code, so both tiers give the same
# bits.  A scalar (an interpreted element loop) takes the same path on
# Python floats.

def _py(f):
    return getattr(f, "py_func", f)


def _pow2(k):
    """2.0**k of int64 k (a normal float64) from its bits, as ``bits_f64`` makes it."""
    return ((k + 1023) << 52).view(np.float64)


#: elements per piece of a large array: the temporaries of the ~40 NumPy
#: calls stay in cache (twice as fast as whole arrays of 1e6 elements)
CHUNK = 32768


def _scalar_or_array(fn_one, fn_arrays):
    def f(x):
        if np.ndim(x) == 0 and not isinstance(x, np.ndarray):
            return np.float64(fn_one(float(x)))
        x = np.asarray(x, np.float64)
        with np.errstate(all="ignore"):  # the branches not taken overflow
            if x.size <= CHUNK:
                return fn_arrays(x)
            flat = x.ravel()
            out = np.empty(flat.size)
            for i in range(0, flat.size, CHUNK):
                out[i:i + CHUNK] = fn_arrays(flat[i:i + CHUNK])
            return out.reshape(x.shape)
    f.__name__ = fn_arrays.__name__.replace("_arrays", "")
    f.__doc__ = fn_arrays.__doc__
    return f


def _exp_one(x):
    if x != x or x > _EXP_MAX or x < _EXP_MIN:
        return x if x != x else (np.inf if x > 0 else 0.0)
    kf, t, c = _py(_exp_reduced)(x)
    k = int(kf)
    k1 = k >> 1
    return (t + c) * math.ldexp(1.0, k1) * math.ldexp(1.0, k - k1)


def _exp_arrays(x):
    """``exp_v`` of every element of a float64 array, to the bit."""
    xc = np.minimum(np.maximum(np.where(x != x, 0.0, x), -746.0), 710.0)
    kf, t, c = _py(_exp_reduced)(xc)
    k = kf.astype(np.int64)
    k1 = k >> 1
    y = (t + c) * _pow2(k1) * _pow2(k - k1)
    y = np.where(x > _EXP_MAX, np.inf, y)
    y = np.where(x < _EXP_MIN, 0.0, y)
    return np.where(x != x, x, y)


def _log_one(x):
    if not x > 0.0 or x == np.inf:
        return -np.inf if x == 0.0 else (x if x == np.inf else np.nan)
    sub = x < 2.2250738585072014e-308
    b = struct.unpack("<q", struct.pack("<d", x * _TWO54 if sub else x))[0]
    k = (b >> 52) - 1023
    m = struct.unpack("<d", struct.pack("<q", (b & _MANTISSA) | _ONE_BITS))[0]
    big = m > _SQRT2
    m = m * 0.5 if big else m
    return _py(_log_reduced)(m, float(k + (1 if big else 0) - (54 if sub else 0)))


def _log_arrays(x):
    """``log_v`` of every element of a float64 array, to the bit."""
    sub = x < 2.2250738585072014e-308
    b = np.where(sub, x * _TWO54, x).view(np.int64)
    k = (b >> 52) - 1023
    m = ((b & _MANTISSA) | _ONE_BITS).view(np.float64)
    big = m > _SQRT2
    m = np.where(big, m * 0.5, m)
    kf = (k + np.where(big, 1, 0) - np.where(sub, 54, 0)).astype(np.float64)
    y = _py(_log_reduced)(m, kf)
    y = np.where(x == 0.0, -np.inf, y)
    y = np.where((x < 0.0) | (x != x), np.nan, y)
    return np.where(x == np.inf, np.inf, y)


def _tanh_one(x):
    a = abs(x)
    if a == 0.0 or x != x:
        return x
    if a > 20.0:
        y = 1.0
    elif a < _HALF_LN2:
        y = _py(_tanh_series)(a)
    else:
        kf, t, c = _py(_exp_reduced)(2.0 * a)
        u = _py(_expm1_from)(math.ldexp(1.0, int(kf)), t, c)
        y = u / (u + 2.0)
    return -y if x < 0.0 else y


def _tanh_arrays(x):
    """``tanh_v`` of every element of a float64 array, to the bit."""
    a = np.abs(x)
    small = _py(_tanh_series)(np.minimum(a, _HALF_LN2))
    kf, t, c = _py(_exp_reduced)(2.0 * np.minimum(np.maximum(np.where(a != a, 0.0, a),
                                                              _HALF_LN2), 20.0))
    u = _py(_expm1_from)(_pow2(kf.astype(np.int64)), t, c)
    y = np.where(a < _HALF_LN2, small, u / (u + 2.0))
    y = np.where(a > 20.0, 1.0, y)
    y = np.where(x < 0.0, -y, y)
    return np.where((a == 0.0) | (x != x), x, y)


exp_arrays = _scalar_or_array(_exp_one, _exp_arrays)
log_arrays = _scalar_or_array(_log_one, _log_arrays)
tanh_arrays = _scalar_or_array(_tanh_one, _tanh_arrays)

# the interpreted tier runs these under the names kernels import them by
_interpret.STAND_INS.update(exp_v=exp_arrays, log_v=log_arrays, tanh_v=tanh_arrays)
