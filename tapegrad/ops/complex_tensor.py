"""Complex tensors as pairs of real tensors.

A :class:`ComplexTensor` holds its real and imaginary parts as two real
tensors; every complex op is written as real recorded ops on those parts
(``(a + ib)(c + id) = (ac - bd) + i(ad + bc)``), and the FFTs are host
records of :mod:`tapegrad.ops.fft` taking and giving the parts.  So the
compiled sweep and its float64 kernels never see a complex number: there is
no complex specialisation to compile, and every transform that works on real
graphs (hessian, hvp, jvp, tracing) works on graphs with complex
intermediates.

Gradient convention (PyTorch's): for a real loss L of z = x + iy,
``z.grad = dL/dx + i dL/dy`` -- twice the conjugate Wirtinger derivative
dL/dz*, the direction of steepest ascent, so ``z -= lr * z.grad`` descends.
"""
import builtins
import numbers

import numpy as np

from ..tensor import Tensor, _plain, bound
from . import elementwise as E
from . import reductions as Rd
from .matrix import _einsum_sublists
from .guarded import on_values

_COMPLEX_SCALARS = (builtins.complex, np.complexfloating)

#: numpy function -> handler for calls with a ComplexTensor (fft.py adds its own)
FUNCTIONS = {}


def _unsupported(name):
    raise TypeError(
        f"tapegrad: {name} is not supported on complex tensors. Supported: + - * / **, "
        "exp, exp2, expm1, log, log2, log10, log1p, sqrt, square, reciprocal, sin, cos, tan, "
        "sinh, cosh, tanh, their inverses (arcsin ... arctanh), sign, abs, conj, real, imag, "
        "angle, sum, mean, prod, matmul/dot/einsum, numpy.linalg (inv, solve, det, slogdet, "
        "cholesky, eigh, eig, svd, qr, pinv, lstsq, norm), reshape, transpose, indexing and "
        "numpy.fft; for anything else, work on the real tensors z.real and z.imag")


class ComplexTensor:
    """A complex array that records the operations applied to it, held as
    two real tensors ``real`` and ``imag``.

    ``tg.tensor(complex_array)`` makes one, as do ``tg.complex(re, im)``,
    arithmetic with Python complex numbers or complex arrays, and
    ``np.fft.fft(t)``.  ``np.abs``, ``np.real``, ``np.imag`` and ``np.angle``
    give real tensors back.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> z = tg.tensor(np.array([1 + 2j, 3 - 1j]), requires_grad=True)
    >>> (np.abs(z) ** 2).sum().backward()
    >>> z.grad
    ctensor([2.+4.j, 6.-2.j])
    """

    __slots__ = ("real", "imag", "__weakref__")
    __array_priority__ = 2000

    def __init__(self, real, imag):
        self.real = real if isinstance(real, Tensor) else _plain(np.asarray(real, np.float64))
        self.imag = imag if isinstance(imag, Tensor) else _plain(np.asarray(imag, np.float64))

    @classmethod
    def constant(cls, value):
        a = np.asarray(value)
        # np.array, not ascontiguousarray, which makes a 0-d array 1-d
        return cls(_plain(np.array(a.real, np.float64)), _plain(np.array(a.imag, np.float64)))

    # -- properties -----------------------------------------------------------------------
    shape = property(lambda self: self.real.shape)
    ndim = property(lambda self: self.real.ndim)
    size = property(lambda self: self.real.size)
    dtype = property(lambda self: np.dtype(np.complex128))

    @property
    def requires_grad(self):
        return self.real.requires_grad or self.imag.requires_grad

    @property
    def is_leaf(self):
        return self.real.is_leaf and self.imag.is_leaf

    def requires_grad_(self, flag=True):
        self.real.requires_grad_(flag)
        self.imag.requires_grad_(flag)
        return self

    @property
    def grad(self):
        """``dL/dx + i dL/dy`` (PyTorch's convention), or None."""
        gr, gi = self.real._grad, self.imag._grad
        if gr is None and gi is None:
            return None
        z = np.zeros(self.shape)
        return ComplexTensor(z if gr is None else gr._data, z if gi is None else gi._data)

    @grad.setter
    def grad(self, value):
        if value is None:
            self.real.grad = self.imag.grad = None
            return
        v = value.numpy() if isinstance(value, ComplexTensor) else np.asarray(value)
        self.real.grad, self.imag.grad = np.real(v), np.imag(v)

    @property
    def data(self):
        return ComplexTensor(self.real.data, self.imag.data)

    @property
    def T(self):
        return ComplexTensor(self.real.T, self.imag.T)

    def numpy(self):
        """The value as a new complex128 ndarray (a copy)."""
        return np.asarray(self.real._data) + 1j * np.asarray(self.imag._data)

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad:
            raise RuntimeError("a complex tensor that requires grad was converted to a NumPy "
                               "array, which would drop its gradient; use z.detach().numpy()")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def detach(self):
        return ComplexTensor(self.real.detach(), self.imag.detach())

    def item(self):
        return complex(self.numpy().item())

    def __len__(self):
        return len(self.real)

    def __repr__(self):
        body = np.array2string(self.numpy(), separator=", ", prefix="ctensor(")
        extra = ", requires_grad=True" if self.requires_grad else ""
        return f"ctensor({body}{extra})"

    def backward(self, gradient=None, retain_graph=None):
        """Backpropagate the seed ``gradient`` (complex, of this shape): the
        gradient of the real loss ``sum(Re(conj(gradient) * z))``.  Without a
        seed a complex tensor has no gradient to start from (as in PyTorch)."""
        if gradient is None:
            raise RuntimeError("backward() of a complex tensor needs a gradient; reduce it to "
                               "a real loss first, e.g. (np.abs(z) ** 2).sum()")
        g = gradient.numpy() if isinstance(gradient, ComplexTensor) else np.asarray(gradient)
        loss = (Rd.sum(E.multiply(self.real, np.real(g).astype(np.float64)))
                + Rd.sum(E.multiply(self.imag, np.imag(g).astype(np.float64))))
        loss.backward(retain_graph=retain_graph)

    # -- arithmetic -----------------------------------------------------------------------
    def __add__(self, o):
        return add(self, o)

    def __radd__(self, o):
        return add(o, self)

    def __sub__(self, o):
        return subtract(self, o)

    def __rsub__(self, o):
        return subtract(o, self)

    def __mul__(self, o):
        return multiply(self, o)

    def __rmul__(self, o):
        return multiply(o, self)

    def __truediv__(self, o):
        return divide(self, o)

    def __rtruediv__(self, o):
        return divide(o, self)

    def __pow__(self, o):
        return power(self, o)

    def __rpow__(self, o):
        return power(o, self)

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(o, self)

    def __neg__(self):
        return ComplexTensor(E.negative(self.real), E.negative(self.imag))

    def __pos__(self):
        return self

    def __abs__(self):
        return absolute(self)

    def __iadd__(self, o):
        o = _split(o)
        self.real += o[0]
        if o[1] is not None:
            self.imag += o[1]
        return self

    def __isub__(self, o):
        o = _split(o)
        self.real -= o[0]
        if o[1] is not None:
            self.imag -= o[1]
        return self

    __lt__ = __le__ = __gt__ = __ge__ = lambda self, o: _not_ordered()
    __eq__ = lambda self, o: _equal(self, o)  # noqa: E731
    __ne__ = lambda self, o: ~_equal(self, o)  # noqa: E731
    __hash__ = object.__hash__

    def __getitem__(self, key):
        return ComplexTensor(self.real[key], self.imag[key])

    def __setitem__(self, key, value):
        re, im = _split(value)
        self.real[key] = re
        self.imag[key] = 0.0 if im is None else im

    # -- NumPy-named methods --------------------------------------------------------------
    def conj(self):
        return conj(self)

    conjugate = conj

    def sum(self, axis=None, keepdims=False):
        return _linear(Rd.sum, self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return _linear(Rd.mean, self, axis=axis, keepdims=keepdims)

    def prod(self, axis=None, keepdims=False):
        return prod(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 else shape
        return ComplexTensor(self.real.reshape(shape), self.imag.reshape(shape))

    def transpose(self, *axes):
        return ComplexTensor(self.real.transpose(*axes), self.imag.transpose(*axes))

    def ravel(self):
        return ComplexTensor(self.real.ravel(), self.imag.ravel())

    flatten = ravel

    # -- the NumPy protocol ---------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            _unsupported(f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else
                                                     f".{method}") + " with keywords" * bool(kwargs))
        fn = UFUNCS.get(ufunc)
        if fn is None:
            _unsupported(f"numpy.{ufunc.__name__}")
        return fn(*inputs)

    def __array_function__(self, func, types, args, kwargs):
        fn = FUNCTIONS.get(func)
        if fn is None:
            _unsupported(f"{getattr(func, '__module__', 'numpy')}.{func.__name__}")
        return fn(*args, **kwargs)


def is_complex(x):
    """Whether ``x`` is a complex operand (ComplexTensor, complex number or array)."""
    t = type(x)
    if t is float or t is int or t is Tensor:  # the common operands, at once
        return False
    return (t is ComplexTensor or isinstance(x, _COMPLEX_SCALARS)
            or (isinstance(x, np.ndarray) and x.dtype.kind == "c"))


def _split(x):
    """``(real, imag)`` of an operand; imag is None for a real one."""
    if type(x) is ComplexTensor:
        return x.real, x.imag
    if isinstance(x, _COMPLEX_SCALARS):
        return float(x.real), float(x.imag)
    if isinstance(x, np.ndarray) and x.dtype.kind == "c":
        return np.array(x.real), np.array(x.imag)  # copies; 0-d stays 0-d
    if isinstance(x, (Tensor, numbers.Real, np.ndarray, list, tuple)):
        return x, None
    raise TypeError(f"tapegrad: cannot combine a complex tensor with {type(x).__name__}")


def complex(real, imag):
    """The complex tensor ``real + 1j * imag`` of two real tensors or arrays (which
    broadcast); its gradient reaches both.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.complex(tg.tensor([1.0]), tg.tensor([2.0]))
    ctensor([1.+2.j])
    """
    re, im = np.broadcast_arrays(np.asarray(getattr(real, "_data", real)),
                                 np.asarray(getattr(imag, "_data", imag)))
    shape = re.shape
    if np.shape(getattr(real, "_data", real)) != shape:
        real = np.broadcast_to(real, shape) if isinstance(real, Tensor) else re
    if np.shape(getattr(imag, "_data", imag)) != shape:
        imag = np.broadcast_to(imag, shape) if isinstance(imag, Tensor) else im
    return ComplexTensor(real, imag)


def _real_tensor(x):
    return x if isinstance(x, Tensor) else _plain(np.asarray(x, np.float64))


def _z(re, im):
    """A ComplexTensor of two parts; a missing imaginary part is zeros."""
    if im is None:
        im = np.zeros(np.shape(getattr(re, "_data", re)))
    return ComplexTensor(_real_tensor(re), _real_tensor(im))


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


def reciprocal(z):
    zr, zi = _split(z)
    d = _abs2(zr, zi)
    return _z(E.divide(zr, d), E.negative(E.divide(zi, d)))


def divide(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    if bi is None:
        return _z(E.divide(ar, br), E.divide(ai, br))
    d = _abs2(br, bi)
    if ai is None:
        return _z(E.divide(E.multiply(ar, br), d), E.negative(E.divide(E.multiply(ar, bi), d)))
    re = E.divide(E.add(E.multiply(ar, br), E.multiply(ai, bi)), d)
    im = E.divide(E.subtract(E.multiply(ai, br), E.multiply(ar, bi)), d)
    return _z(re, im)


def _as_z(x):
    if type(x) is ComplexTensor:
        return x
    re, im = _split(x)
    return _z(re, im)


def exp(z):
    z = _as_z(z)
    m = E.exp(z.real)
    return _z(E.multiply(m, E.cos(z.imag)), E.multiply(m, E.sin(z.imag)))


def log(z):
    z = _as_z(z)
    return _z(E.log(E.hypot(z.real, z.imag)), E.arctan2(z.imag, z.real))


def sin(z):
    z = _as_z(z)
    return _z(E.multiply(E.sin(z.real), E.cosh(z.imag)),
              E.multiply(E.cos(z.real), E.sinh(z.imag)))


def cos(z):
    z = _as_z(z)
    return _z(E.multiply(E.cos(z.real), E.cosh(z.imag)),
              E.negative(E.multiply(E.sin(z.real), E.sinh(z.imag))))


def sinh(z):
    z = _as_z(z)
    return _z(E.multiply(E.sinh(z.real), E.cos(z.imag)),
              E.multiply(E.cosh(z.real), E.sin(z.imag)))


def cosh(z):
    z = _as_z(z)
    return _z(E.multiply(E.cosh(z.real), E.cos(z.imag)),
              E.multiply(E.sinh(z.real), E.sin(z.imag)))


def tan(z):
    # (sin 2x + i sinh 2y) / (cos 2x + cosh 2y), divided through by cosh 2y so
    # that a large |y| gives tanh's limit, not inf / inf
    z = _as_z(z)
    x2, y2 = E.multiply(z.real, 2.0), E.multiply(z.imag, 2.0)
    with np.errstate(over="ignore"):  # cosh's overflow is the limit's 1 / inf = 0
        r = E.reciprocal(E.cosh(y2))
    d = E.add(E.multiply(E.cos(x2), r), 1.0)
    return _z(E.divide(E.multiply(E.sin(x2), r), d), E.divide(E.tanh(y2), d))


def tanh(z):
    # (sinh 2x + i sin 2y) / (cosh 2x + cos 2y), divided through by cosh 2x
    z = _as_z(z)
    x2, y2 = E.multiply(z.real, 2.0), E.multiply(z.imag, 2.0)
    with np.errstate(over="ignore"):
        r = E.reciprocal(E.cosh(x2))
    d = E.add(E.multiply(E.cos(y2), r), 1.0)
    return _z(E.divide(E.tanh(x2), d), E.divide(E.multiply(E.sin(y2), r), d))


def exp2(z):
    return exp(multiply(_as_z(z), np.log(2.0)))


def expm1(z):
    # Re: expm1(x) cos y - 2 sin^2(y / 2), accurate near 0 where exp(z) - 1 cancels
    z = _as_z(z)
    s = E.sin(E.multiply(z.imag, 0.5))
    re = E.subtract(E.multiply(E.expm1(z.real), E.cos(z.imag)),
                    E.multiply(E.multiply(s, s), 2.0))
    return _z(re, E.multiply(E.exp(z.real), E.sin(z.imag)))


def log1p(z):
    # log|1 + z| = log1p(2x + x^2 + y^2) / 2, accurate near 0
    z = _as_z(z)
    x, y = z.real, z.imag
    q = E.add(E.multiply(x, E.add(x, 2.0)), E.multiply(y, y))
    return _z(E.multiply(E.log1p(q), 0.5), E.arctan2(y, E.add(x, 1.0)))


def log2(z):
    return multiply(log(z), 1.0 / np.log(2.0))


def log10(z):
    return multiply(log(z), 1.0 / np.log(10.0))


def _times_i(z):
    return ComplexTensor(E.negative(z.imag), z.real)


def _times_minus_i(z):
    return ComplexTensor(z.imag, E.negative(z.real))


def arctanh(z):
    # cuts on the real axis beyond +-1, as NumPy's
    z = _as_z(z)
    return multiply(subtract(log1p(z), log1p(-z)), 0.5)


def arctan(z):
    return _times_minus_i(arctanh(_times_i(_as_z(z))))


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


def arcsin(z):
    return _times_minus_i(arcsinh(_times_i(_as_z(z))))


def arccos(z):
    return subtract(np.pi / 2, arcsin(z))


def arccosh(z):
    z = _as_z(z)
    return log(add(z, multiply(sqrt(add(z, 1.0)), sqrt(subtract(z, 1.0)))))


def sign(z):
    """``z / |z|`` (0 at 0), NumPy's complex sign."""
    z = _as_z(z)
    nz = on_values(lambda a, b: (a != 0) | (b != 0), z.real, z.imag)
    m = absolute(z)
    if nz.all():
        return divide(z, m)
    safe = E.where(nz, m, 1.0)
    return _z(E.where(nz, E.divide(z.real, safe), 0.0), E.where(nz, E.divide(z.imag, safe), 0.0))


def sqrt(z):
    # polar form: no mask, so nothing to guard in a trace; the branch cut
    # follows the sign of the imaginary part's zero as NumPy's does
    z = _as_z(z)
    r = E.sqrt(E.hypot(z.real, z.imag))
    half = E.multiply(E.arctan2(z.imag, z.real), 0.5)
    return _z(E.multiply(r, E.cos(half)), E.multiply(r, E.sin(half)))


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


def _not_ordered(*args):
    raise TypeError("tapegrad: complex numbers have no order; compare np.abs(z) or z.real")


def _equal(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    d = lambda t: np.asarray(getattr(t, "_data", t))  # noqa: E731
    return np.logical_and(d(ar) == d(br), d(0.0 if ai is None else ai) == d(0.0 if bi is None
                                                                           else bi))


UFUNCS = {
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.divide: divide,
    np.power: power, np.negative: negative, np.positive: positive, np.exp: exp, np.log: log,
    np.sin: sin, np.cos: cos, np.sqrt: sqrt, np.square: square, np.reciprocal: reciprocal,
    np.tan: tan, np.tanh: tanh, np.sinh: sinh, np.cosh: cosh, np.exp2: exp2, np.expm1: expm1,
    np.log1p: log1p, np.log2: log2, np.log10: log10, np.arctan: arctan, np.arctanh: arctanh,
    np.arcsin: arcsin, np.arccos: arccos, np.arcsinh: arcsinh, np.arccosh: arccosh,
    np.sign: sign,
    np.conjugate: conj, np.absolute: absolute, np.matmul: None,
    np.equal: _equal, np.not_equal: lambda a, b: ~_equal(a, b),
    np.less: _not_ordered, np.less_equal: _not_ordered, np.greater: _not_ordered,
    np.greater_equal: _not_ordered,
}


# -- linear and bilinear functions of the parts -----------------------------------------------
def _part(x, k):
    """Part k (0 real, 1 imag) of an argument of a real-linear function: complex
    operands split, real data (floats) gives zeros as imag, anything else
    (axes, int indices, bool masks) passes unchanged."""
    if isinstance(x, (list, tuple)):
        return type(x)(_part(v, k) for v in x)
    if is_complex(x):
        p = _split(x)[k]
        return p
    if k == 1:
        if isinstance(x, Tensor) and x.dtype.kind == "f":
            return np.zeros(x.shape)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            return np.zeros(x.shape)
        if isinstance(x, float):
            return 0.0
    return x


def _linear(fn, *args, **kwargs):
    """``fn(re) + i fn(im)`` for a function real-linear in its data arguments."""
    re = fn(*_part(args, 0), **{k: _part(v, 0) for k, v in kwargs.items()})
    im = fn(*_part(args, 1), **{k: _part(v, 1) for k, v in kwargs.items()})
    return _z(re, im)


def _linear_fn(np_fn):
    def run(*args, **kwargs):
        return _linear(np_fn, *args, **kwargs)
    return run


def _bilinear(fn, a, b, **kwargs):
    (ar, ai), (br, bi) = _split(a), _split(b)
    rr = fn(ar, br, **kwargs)
    if ai is None and bi is None:
        return rr
    if ai is None:
        return _z(rr, fn(ar, bi, **kwargs))
    if bi is None:
        return _z(rr, fn(ai, br, **kwargs))
    re = E.subtract(rr, fn(ai, bi, **kwargs))
    im = E.add(fn(ar, bi, **kwargs), fn(ai, br, **kwargs))
    return _z(re, im)


def matmul(a, b):
    return _bilinear(np.matmul, a, b)


UFUNCS[np.matmul] = matmul


def _einsum(subscripts, *operands, **kwargs):
    if not isinstance(subscripts, str):  # the interleaved form
        subscripts, operands = _einsum_sublists((subscripts,) + operands)
    if len(operands) == 1:
        return _linear(np.einsum, subscripts, operands[0], **kwargs)
    if len(operands) == 2:
        return _bilinear(lambda x, y: np.einsum(subscripts, x, y, **kwargs), *operands)
    # multilinear: one real einsum per choice of part of each complex operand
    # (2^k for k complex operands), i^m for m imaginary parts chosen
    split = [_split(x) for x in operands]
    cplx = [k for k, (_, im) in enumerate(split) if im is not None]
    terms = ([], [])  # (sign, value) of the real and the imaginary part
    for mask in range(2 ** len(cplx)):
        picks = [p[0] for p in split]
        m = 0
        for j, k in enumerate(cplx):
            if mask >> j & 1:
                picks[k] = split[k][1]
                m += 1
        terms[m % 2].append((-1.0 if m % 4 >= 2 else 1.0,
                             np.einsum(subscripts, *picks, **kwargs)))

    def total(ts):
        out = None
        for sign, v in ts:
            out = (v if sign > 0 else E.negative(v)) if out is None else (
                E.add(out, v) if sign > 0 else E.subtract(out, v))
        return out
    re = total(terms[0])
    return re if not terms[1] else _z(re, total(terms[1]))


for _f in (np.sum, np.mean, np.reshape, np.ravel, np.transpose, np.swapaxes, np.squeeze,
           np.expand_dims, np.broadcast_to, np.moveaxis, np.flip, np.roll, np.concatenate,
           np.stack, np.hstack, np.vstack, np.diagonal, np.trace, np.take, np.cumsum, np.tril,
           np.triu, np.where, np.diff, np.atleast_1d, np.atleast_2d, np.tile, np.repeat):
    FUNCTIONS[_f] = _linear_fn(_f)
for _f in (np.dot, np.inner, np.outer, np.tensordot, np.kron, np.convolve):
    FUNCTIONS[_f] = (lambda f: lambda a, b, *args, **kw: _bilinear(
        lambda x, y: f(x, y, *args, **kw), a, b))(_f)
FUNCTIONS[np.matmul] = matmul
FUNCTIONS[np.einsum] = _einsum
FUNCTIONS[np.prod] = prod
FUNCTIONS[np.linalg.matmul] = matmul
FUNCTIONS[np.linalg.outer] = FUNCTIONS[np.outer]
FUNCTIONS[np.linalg.tensordot] = FUNCTIONS[np.tensordot]
FUNCTIONS[np.linalg.diagonal] = _linear_fn(np.linalg.diagonal)
FUNCTIONS[np.linalg.trace] = _linear_fn(np.linalg.trace)
FUNCTIONS[np.linalg.matrix_transpose] = _linear_fn(np.linalg.matrix_transpose)
# NumPy's vecdot conjugates its first argument
FUNCTIONS[np.linalg.vecdot] = lambda a, b, /, *, axis=-1: _linear(
    np.sum, multiply(conj(_as_z(a)) if is_complex(a) else a, b), axis=axis)
FUNCTIONS[np.vecdot] = FUNCTIONS[np.linalg.vecdot]
if isinstance(getattr(np, "vecdot", None), np.ufunc):  # a ufunc since NumPy 2.0
    UFUNCS[np.vecdot] = FUNCTIONS[np.linalg.vecdot]


def _multi_dot(arrays, *, out=None):
    if out is not None:
        raise TypeError("numpy.linalg.multi_dot(..., out=...) cannot write into an array "
                        "when tensors are involved; drop out=")
    result = arrays[0]
    for a in arrays[1:]:
        result = matmul(result, a)
    return result


FUNCTIONS[np.linalg.multi_dot] = _multi_dot
FUNCTIONS[np.vdot] = lambda a, b: _bilinear(np.vdot, conj(_as_z(a)).ravel(), b.ravel()
                                            if hasattr(b, "ravel") else np.ravel(b))
FUNCTIONS[np.real] = real
FUNCTIONS[np.imag] = imag
FUNCTIONS[np.angle] = angle
FUNCTIONS[np.conj] = conj
FUNCTIONS[np.shape] = lambda z: z.shape
FUNCTIONS[np.ndim] = lambda z: z.ndim
FUNCTIONS[np.size] = lambda z: z.size
FUNCTIONS[np.iscomplexobj] = lambda z: True
FUNCTIONS[np.isrealobj] = lambda z: False


# -- real tensors meeting complex operands (bound into Tensor's operators) -----------------
def tensor_operator(name):
    """The complex op of a Tensor operator ``name`` (``__mul__``...), or None."""
    return _OPERATORS.get(name)


_OPERATORS = {
    "__add__": add, "__radd__": lambda s, o: add(o, s),
    "__sub__": subtract, "__rsub__": lambda s, o: subtract(o, s),
    "__mul__": multiply, "__rmul__": lambda s, o: multiply(o, s),
    "__truediv__": divide, "__rtruediv__": lambda s, o: divide(o, s),
    "__pow__": power, "__rpow__": lambda s, o: power(o, s),
    "__matmul__": matmul, "__rmatmul__": lambda s, o: matmul(o, s),
}


def _from_array(a, requires_grad):
    """``tg.tensor`` of complex data."""
    z = ComplexTensor.constant(a)
    return z.requires_grad_(True) if requires_grad else z


bound.bind(complex_tensor=_from_array)
