"""The elementwise complex ops, as real recorded ops on the parts: + - * /,
``**``, exp, log and their variants, the trigonometric and hyperbolic
functions and their inverses, sqrt, square, reciprocal, sign, abs, conj,
real, imag, angle, and ``prod`` (products of halves, level by level).

Each takes complex operands (a :class:`~tapegrad.ops.complex_core.ComplexTensor`,
a complex number or array) or real ones and returns a ``ComplexTensor``, or
a real tensor for abs, real, imag and angle.  Kept apart from the class
(:mod:`~tapegrad.ops.complex_core`) and from the linear functions
(:mod:`~tapegrad.ops.complex_linear`): this is the complex arithmetic itself,
one formula per function; :mod:`~tapegrad.ops.complex_tensor` maps the
ufuncs to them and includes this module's namespace.
"""
import numbers

import numpy as np

from ..core.tensor import Tensor
from . import reductions as Rd
from . import elementwise as E
from .complex_core import ComplexTensor, _as_z, _split, _z
from .guarded import on_values


# -- NumPy's values where the formulas give none --------------------------------------------------
def _finite(re, im):
    """Whether every element of both parts is finite (a sum of finite
    numbers is never NaN; one that overflows only takes the slow path)."""
    return bool(np.isfinite(np.add.reduce(re, None) + np.add.reduce(im, None)))


def _nonfinite(*parts):
    bad = ~np.isfinite(parts[0])
    for p in parts[1:]:
        bad = bad | ~np.isfinite(p)
    return bad


def _numpy_values(np_fn, re, im, bad):
    """``np_fn`` of the complex numbers ``re + 1j im`` where ``bad`` holds, as
    a (2,) + shape float array (zeros elsewhere).  The complex array is built
    part by part: ``1j * inf`` would make a NaN real part."""
    shape = np.shape(bad)
    z = np.empty(shape, np.result_type(np.asarray(re).dtype, np.asarray(im).dtype,
                                       np.complex64))
    z.real, z.imag = np.broadcast_to(re, shape), np.broadcast_to(im, shape)
    re, im = np.zeros(shape), np.zeros(shape)
    with np.errstate(all="ignore"):
        v = np_fn(z[bad])
    re[bad], im[bad] = v.real, v.imag
    return np.stack([re, im])


def _special(np_fn):
    """An elementwise op that gives NumPy's value (``np_fn``'s) wherever the
    formula's result has an infinite or NaN part.

    The formulas on the parts are exact for finite values, but infinities
    meet there as ``inf - inf`` or ``0 * inf`` (NaN) where NumPy's complex
    functions, following C99's Annex G, give a number: ``exp(inf + 0j)`` is
    ``inf + 0j``, ``arctan(inf j)`` is ``pi / 2``.  Those elements take
    NumPy's value as a constant (no gradient: the derivative at an infinite
    point is no number); in a trace both the positions and the values are
    guards, so a replay that meets other special values traces again.
    """
    def wrap(fn):
        def op(z):
            z = _as_z(z)
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                out = fn(z)
            # an infinite or NaN input that the formula carried to a finite
            # value has met no inf - inf or 0 * inf: its limit is right
            if on_values(_finite, out.real, out.imag):
                return out
            bad = on_values(_nonfinite, out.real, out.imag)
            v = on_values(lambda a, b, m: _numpy_values(np_fn, a, b, m), z.real, z.imag, bad)
            return _z(E.where(bad, v[0], out.real), E.where(bad, v[1], out.imag))
        op.__name__, op.__qualname__, op.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        op.__wrapped__ = fn
        UFUNCS[np_fn] = op
        return op
    return wrap


#: NumPy ufunc -> its complex function, for each function defined with ``_special``
UFUNCS = {}


# -- elementwise -------------------------------------------------------------------------------
def _fit(im, like):
    """``im`` broadcast to the shape of the real part ``like``."""
    shape = np.shape(getattr(like, "_data", like))
    if np.shape(getattr(im, "_data", im)) != shape:
        im = E.add(im, np.zeros(shape))
    return im


def add(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    re = E.add(ar, br)
    im = ai if bi is None else bi if ai is None else E.add(ai, bi)
    return _z(re, _fit(im, re))


def subtract(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    re = E.subtract(ar, br)
    if bi is None:
        im = ai
    elif ai is None:
        im = E.negative(bi) if isinstance(bi, Tensor) else -np.asarray(bi)
    else:
        im = E.subtract(ai, bi)
    return _z(re, _fit(im, re))


def multiply(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    if ai is None:
        return _z(E.multiply(ar, br), E.multiply(ar, bi))
    if bi is None:
        return _z(E.multiply(ar, br), E.multiply(ai, br))
    re = E.subtract(E.multiply(ar, br), E.multiply(ai, bi))
    im = E.add(E.multiply(ar, bi), E.multiply(ai, br))
    return _z(re, im)


def _abs2(re, im):
    return E.add(E.multiply(re, re), E.multiply(im, im))


def _divisor(br, bi):
    """``(br / s, bi / s, (br**2 + bi**2) / s)`` with ``s = max(|br|,
    |bi|)`` (1 where both are 0): a divisor's parts scaled to at most 1, so
    that ``|b|**2`` neither overflows nor underflows where the quotient is a
    normal number (``(1e-200 + 1e-200j) / 1e-200j``, ``1 / (1e200 + 1e200j)``).
    The quotient does not depend on s, so its derivative is the quotient's."""
    s = E.maximum(E.absolute(br), E.absolute(bi))
    s = E.where(E.equal(s, 0.0), 1.0, s)
    cr, ci = E.divide(br, s), E.divide(bi, s)
    return cr, ci, E.multiply(_abs2(cr, ci), s)


@_special(np.reciprocal)
def reciprocal(z):
    zr, zi = _split(z)
    cr, ci, d = _divisor(zr, zi)
    return _z(E.divide(cr, d), E.negative(E.divide(ci, d)))


def divide(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    if bi is None:
        return _z(E.divide(ar, br), E.divide(ai, br))
    cr, ci, d = _divisor(br, bi)
    if ai is None:
        return _z(E.divide(E.multiply(ar, cr), d), E.negative(E.divide(E.multiply(ar, ci), d)))
    re = E.divide(E.add(E.multiply(ar, cr), E.multiply(ai, ci)), d)
    im = E.divide(E.subtract(E.multiply(ai, cr), E.multiply(ar, ci)), d)
    return _z(re, im)


@_special(np.exp)
def exp(z):
    z = _as_z(z)
    m = E.exp(z.real)
    return _z(E.multiply(m, E.cos(z.imag)), E.multiply(m, E.sin(z.imag)))


@_special(np.log)
def log(z):
    z = _as_z(z)
    return _z(E.log(E.hypot(z.real, z.imag)), E.arctan2(z.imag, z.real))


@_special(np.sin)
def sin(z):
    z = _as_z(z)
    return _z(E.multiply(E.sin(z.real), E.cosh(z.imag)),
              E.multiply(E.cos(z.real), E.sinh(z.imag)))


@_special(np.cos)
def cos(z):
    z = _as_z(z)
    return _z(E.multiply(E.cos(z.real), E.cosh(z.imag)),
              E.negative(E.multiply(E.sin(z.real), E.sinh(z.imag))))


@_special(np.sinh)
def sinh(z):
    z = _as_z(z)
    return _z(E.multiply(E.sinh(z.real), E.cos(z.imag)),
              E.multiply(E.cosh(z.real), E.sin(z.imag)))


@_special(np.cosh)
def cosh(z):
    z = _as_z(z)
    return _z(E.multiply(E.cosh(z.real), E.cos(z.imag)),
              E.multiply(E.sinh(z.real), E.sin(z.imag)))


@_special(np.tan)
def tan(z):
    # (sin 2x + i sinh 2y) / (cos 2x + cosh 2y), divided through by cosh 2y so
    # that a large |y| gives tanh's limit, not inf / inf
    z = _as_z(z)
    x2, y2 = E.multiply(z.real, 2.0), E.multiply(z.imag, 2.0)
    r = _sech(y2)
    d = E.add(E.multiply(E.cos(x2), r), 1.0)
    return _z(E.divide(E.multiply(E.sin(x2), r), d), E.divide(E.tanh(y2), d))


@_special(np.tanh)
def tanh(z):
    # (sinh 2x + i sin 2y) / (cosh 2x + cos 2y), divided through by cosh 2x
    z = _as_z(z)
    x2, y2 = E.multiply(z.real, 2.0), E.multiply(z.imag, 2.0)
    r = _sech(x2)
    d = E.add(E.multiply(E.cos(y2), r), 1.0)
    return _z(E.divide(E.tanh(x2), d), E.divide(E.multiply(E.sin(y2), r), d))


def _sech(t):
    """``1 / cosh(t)`` as ``2 e / (1 + e^2)`` with ``e = exp(-|t|)``: no
    overflow, in the value or in the derivatives (``1 / cosh`` would
    backpropagate ``0 * inf`` far from the real axis)."""
    e = E.exp(E.negative(E.absolute(t)))
    return E.divide(E.multiply(e, 2.0), E.add(E.multiply(e, e), 1.0))


@_special(np.exp2)
def exp2(z):
    return exp(multiply(_as_z(z), np.log(2.0)))


@_special(np.expm1)
def expm1(z):
    # Re: expm1(x) cos y - 2 sin^2(y / 2), accurate near 0 where exp(z) - 1 cancels
    z = _as_z(z)
    s = E.sin(E.multiply(z.imag, 0.5))
    re = E.subtract(E.multiply(E.expm1(z.real), E.cos(z.imag)),
                    E.multiply(E.multiply(s, s), 2.0))
    return _z(re, E.multiply(E.exp(z.real), E.sin(z.imag)))


@_special(np.log1p)
def log1p(z):
    # log|1 + z| = log1p(2x + x^2 + y^2) / 2, accurate near 0
    z = _as_z(z)
    x, y = z.real, z.imag
    q = E.add(E.multiply(x, E.add(x, 2.0)), E.multiply(y, y))
    return _z(E.multiply(E.log1p(q), 0.5), E.arctan2(y, E.add(x, 1.0)))


@_special(np.log2)
def log2(z):
    return multiply(log(z), 1.0 / np.log(2.0))


@_special(np.log10)
def log10(z):
    return multiply(log(z), 1.0 / np.log(10.0))


def _times_i(z):
    return ComplexTensor(E.negative(z.imag), z.real)


def _times_minus_i(z):
    return ComplexTensor(z.imag, E.negative(z.real))


@_special(np.arctanh)
def arctanh(z):
    # cuts on the real axis beyond +-1, as NumPy's
    z = _as_z(z)
    return multiply(subtract(log1p(z), log1p(-z)), 0.5)


@_special(np.arctan)
def arctan(z):
    return _times_minus_i(arctanh(_times_i(_as_z(z))))


@_special(np.arcsinh)
def arcsinh(z):
    # log1p(z + z^2 / (sqrt(z^2 + 1) + 1)): no cancellation near 0; for
    # Re z < 0 the odd symmetry (a guarded mask) avoids the cancellation of
    # z + sqrt(z^2 + 1)
    z = _as_z(z)
    neg = on_values(lambda a: np.signbit(a), z.real)
    if neg.any():
        s = np.where(neg, -1.0, 1.0)
        return multiply(_arcsinh_right(multiply(z, s)), s)
    return _arcsinh_right(z)


def _arcsinh_right(z):
    z2 = multiply(z, z)
    return log1p(add(z, divide(z2, add(sqrt(add(z2, 1.0)), 1.0))))


@_special(np.arcsin)
def arcsin(z):
    return _times_minus_i(arcsinh(_times_i(_as_z(z))))


@_special(np.arccos)
def arccos(z):
    return subtract(np.pi / 2, arcsin(z))


@_special(np.arccosh)
def arccosh(z):
    z = _as_z(z)
    return log(add(z, multiply(sqrt(add(z, 1.0)), sqrt(subtract(z, 1.0)))))


@_special(np.sign)
def sign(z):
    """``z / |z|`` (0 at 0), NumPy's complex sign."""
    z = _as_z(z)
    nz = on_values(lambda a, b: (a != 0) | (b != 0), z.real, z.imag)
    m = absolute(z)
    if nz.all():
        return divide(z, m)
    safe = E.where(nz, m, 1.0)
    return _z(E.where(nz, E.divide(z.real, safe), 0.0), E.where(nz, E.divide(z.imag, safe), 0.0))


@_special(np.sqrt)
def sqrt(z):
    # polar form: no mask, so nothing to guard in a trace; the branch cut
    # follows the sign of the imaginary part's zero as NumPy's does
    z = _as_z(z)
    r = E.sqrt(E.hypot(z.real, z.imag))
    half = E.multiply(E.arctan2(z.imag, z.real), 0.5)
    return _z(E.multiply(r, E.cos(half)), E.multiply(r, E.sin(half)))


@_special(np.square)
def square(z):
    return multiply(z, z)


def power(a, b):
    if type(a) is ComplexTensor and isinstance(b, numbers.Integral) and not isinstance(b, bool) \
            and abs(int(b)) <= 16:
        n = int(b)
        if n == 0:
            return _z(np.ones(a.shape), None)
        result, base, k = None, a, abs(n)
        while k:
            if k & 1:
                result = base if result is None else multiply(result, base)
            k >>= 1
            if k:
                base = multiply(base, base)
        return reciprocal(result) if n < 0 else result
    if type(a) is ComplexTensor and isinstance(b, numbers.Real):
        r = E.hypot(a.real, a.imag)
        th = E.multiply(E.arctan2(a.imag, a.real), float(b))
        m = E.power(r, float(b))
        return _z(E.multiply(m, E.cos(th)), E.multiply(m, E.sin(th)))
    return exp(multiply(b, log(_as_z(a))))


def negative(z):
    return -_as_z(z)


def positive(z):
    return _as_z(z)


def conj(z):
    if type(z) is not ComplexTensor:
        return np.conj(z)
    return ComplexTensor(z.real, E.negative(z.imag))


def absolute(z):
    """``|z|`` as a real tensor; its gradient at 0 is 0, as PyTorch's (|z|^2
    losses meet exact zeros: an FFT's empty bins)."""
    if type(z) is not ComplexTensor:
        return np.abs(z)
    re, im = z.real, z.imag
    # the mask is guarded in a trace (a replay where it changes traces again)
    nz = on_values(lambda a, b: (a != 0) | (b != 0), re, im)
    if nz.all():
        return E.hypot(re, im)
    return E.where(nz, E.hypot(E.where(nz, re, 1.0), E.where(nz, im, 0.0)), 0.0)


def real(z):
    return z.real if type(z) is ComplexTensor else np.real(z)


def imag(z):
    return z.imag if type(z) is ComplexTensor else np.imag(z)


def angle(z, deg=False):
    if type(z) is not ComplexTensor:
        return np.angle(z, deg=deg)
    a = E.arctan2(z.imag, z.real)
    return E.multiply(a, 180.0 / np.pi) if deg else a


def prod(z, axis=None, keepdims=False):
    """``numpy.prod`` of a complex tensor: products of halves, level by level
    (no division, so zeros are fine; second order as the products')."""
    z = _as_z(z)
    if axis is None:
        out = _prod_last(z.ravel())
        return out.reshape((1,) * z.ndim) if keepdims else out
    axes = Rd.normalize_axis(axis if isinstance(axis, numbers.Integral) else tuple(axis),
                             z.ndim, "prod")
    rest = [a for a in range(z.ndim) if a not in axes]
    moved = z.transpose(*(rest + list(axes)))
    shape = tuple(z.shape[a] for a in rest)
    out = _prod_last(moved.reshape(shape + (-1,)))
    if keepdims:
        out = out.reshape(tuple(1 if a in axes else z.shape[a] for a in range(z.ndim)))
    return out


def _prod_last(z):
    """The product over the last axis."""
    m = z.shape[-1]
    if m == 0:
        return _z(np.ones(z.shape[:-1]), None)
    while m > 1:
        h = m // 2
        head = multiply(z[..., :h], z[..., h:2 * h])
        if m % 2:
            head = ComplexTensor(_concat_last(head.real, z.real[..., 2 * h:]),
                                 _concat_last(head.imag, z.imag[..., 2 * h:]))
        z, m = head, (m + 1) // 2
    return z[..., 0]


def _concat_last(a, b):
    from .shape import concatenate
    return concatenate([a, b], axis=-1)
