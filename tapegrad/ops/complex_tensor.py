"""Complex tensors bound together: :class:`ComplexTensor` (``tg.tensor`` of
complex data, ``tg.complex``) with its operators, NumPy-named methods and
the NumPy protocol.

The class and its operand helpers are :mod:`~tapegrad.ops.complex_core`,
the elementwise ops :mod:`~tapegrad.ops.complex_math`, the linear and
bilinear functions of the parts :mod:`~tapegrad.ops.complex_linear`; this
module's namespace includes the three.  It sits above them and binds what
needs the ops into the class (as :mod:`~tapegrad.ops.methods` binds the ops
to ``Tensor``), so that the ops can build complex tensors without an import
cycle: the operators (``_OPERATORS``, the same ops a real ``Tensor`` uses
when it meets a complex operand, ``tensor_operator``), ``conj``, ``sum``,
``mean``, ``prod``, ``var``, ``std``, and ``__array_ufunc__`` / ``__array_function__``
dispatching through ``UFUNCS`` and ``FUNCTIONS`` (which fft.py and the
complex linear algebra extend).  ``tg.tensor`` of complex data comes here
through ``tensor.bound``.
"""
import numpy as np

from ..core.tensor import bound
from . import composite as K
from . import elementwise as E
from . import reductions as Rd
from . import shape as S
from .complex_core import (_COMPLEX_SCALARS, ComplexTensor, _as_z, _equal,  # noqa: F401
                           _not_ordered, _real_tensor, _split, _z, complex, is_complex)
from .complex_linear import (_bilinear, _einsum, _linear, _linear_fn, _multi_dot,  # noqa: F401
                             _part, matmul)
from . import complex_math as CM
from .complex_math import (absolute, add, angle, conj, divide, imag, multiply, negative, positive,
                           power, prod, real, sin, subtract)  # noqa: F401

#: numpy function -> handler for calls with a ComplexTensor (fft.py adds its own)
FUNCTIONS = {}


def _unsupported(name):
    raise TypeError(
        f"tapegrad: {name} is not supported on complex tensors. Supported: + - * / **, "
        f"float_power, {', '.join(sorted(f.__name__ for f in CM.UFUNCS))}, sinc, abs, conj, "
        "real, imag, angle, sum, mean, prod, var, std, max, min, real_if_close, "
        "matmul/dot/einsum, cross, numpy.linalg (inv, solve, det, slogdet, cholesky, eigh, eig, "
        "svd, qr, pinv, lstsq, norm, tensorinv, tensorsolve), reshape, transpose, split, diag, "
        "indexing and numpy.fft; for anything else, work on the real tensors z.real and z.imag")


# -- the NumPy protocol's tables ---------------------------------------------------------------
UFUNCS = {
    **CM.UFUNCS,  # the elementwise functions of complex_math.py, by their ufunc
    np.add: add, np.subtract: subtract, np.multiply: multiply, np.divide: divide,
    np.power: power, np.negative: negative, np.positive: positive,
    np.conjugate: conj, np.absolute: absolute, np.matmul: matmul,
    np.equal: _equal, np.not_equal: lambda a, b: ~_equal(a, b),
    np.less: _not_ordered, np.less_equal: _not_ordered, np.greater: _not_ordered,
    np.greater_equal: _not_ordered,
}

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


# -- ComplexTensor's methods that call the ops ------------------------------------------------
def _sum(self, axis=None, keepdims=False):
    return _linear(Rd.sum, self, axis=axis, keepdims=keepdims)


def _mean(self, axis=None, keepdims=False):
    return _linear(Rd.mean, self, axis=axis, keepdims=keepdims)


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, correction=None,
         **kw):
    """``numpy.var`` of a complex tensor: the real ``sum(|z - mean(z)|^2) / (n -
    ddof)``, which is the variance of the real part plus that of the imaginary
    part (``correction`` is NumPy's other name for ``ddof``)."""
    if dtype is not None or out is not None or kw:
        _unsupported("numpy.var with " + ", ".join(
            k for k, v in (("dtype", dtype), ("out", out), *kw.items()) if v is not None))
    ddof = ddof if correction is None else correction
    z = _as_z(a)
    return (K.var(z.real, axis=axis, ddof=ddof, keepdims=keepdims)
            + K.var(z.imag, axis=axis, ddof=ddof, keepdims=keepdims))


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, correction=None,
         **kw):
    """``numpy.std`` of a complex tensor: the square root of its (real) var.
    Over one element (and ``ddof=0``) it is identically 0, as is its
    derivative (the real std of each part, which handles that case)."""
    if dtype is not None or out is not None or kw:
        _unsupported("numpy.std with " + ", ".join(
            k for k, v in (("dtype", dtype), ("out", out), *kw.items()) if v is not None))
    ddof = ddof if correction is None else correction
    z = _as_z(a)
    if ddof == 0 and K._count(z.real, axis) == 1:
        return (K.std(z.real, axis=axis, keepdims=keepdims)
                + K.std(z.imag, axis=axis, keepdims=keepdims))
    return E.sqrt(_var(z, axis=axis, ddof=ddof, keepdims=keepdims))


def _extreme(name, pick):
    """``numpy.max`` / ``numpy.min`` of a complex tensor: NumPy orders complex
    numbers lexicographically (real part, then imaginary part), so the result
    is the element ``pick`` (argmax / argmin, the first of ties) selects
    along ``axis``, and its gradient goes to that element."""
    def extreme(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        if out is not None or initial is not None or where is not None:
            _unsupported(f"numpy.{name} with out, initial or where")
        z = _as_z(a)
        v = z.detach().numpy()
        getattr(np, name)(v, axis=axis)          # NumPy's errors: empty, bad axis
        if isinstance(axis, tuple):
            if len(axis) != 1:
                _unsupported(f"numpy.{name} over several axes")
            axis = axis[0]
        if axis is None:
            k = np.unravel_index(int(pick(v.ravel())), v.shape)
            re, im = z.real[k], z.imag[k]
            if keepdims:
                re, im = S.reshape(re, (1,) * v.ndim), S.reshape(im, (1,) * v.ndim)
            return ComplexTensor(re, im)
        axis = int(axis) % v.ndim
        k = np.expand_dims(pick(v, axis=axis), axis)
        re, im = S.take_along_axis(z.real, k, axis), S.take_along_axis(z.imag, k, axis)
        if not keepdims:
            re, im = S.squeeze(re, axis), S.squeeze(im, axis)
        return ComplexTensor(re, im)
    extreme.__name__ = name
    return extreme


def _real_if_close(a, tol=100):
    """``numpy.real_if_close``: the real part when every imaginary part is
    within ``tol`` machine epsilons of 0 (``tol`` > 1) or ``tol`` (else), else
    the complex tensor itself -- decided on the values, as NumPy does."""
    z = _as_z(a)
    close = np.real_if_close(z.detach().numpy(), tol=tol)
    return z.real if not np.iscomplexobj(close) else z


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


# the operators are the ops a real Tensor calls with a complex operand
for _name, _fn in _OPERATORS.items():
    setattr(ComplexTensor, _name, _fn)
ComplexTensor.__abs__ = absolute
ComplexTensor.conj = ComplexTensor.conjugate = conj
ComplexTensor.sum = _sum
ComplexTensor.mean = _mean
ComplexTensor.prod = prod
ComplexTensor.max = FUNCTIONS[np.max] = FUNCTIONS[np.amax] = _extreme("max", np.argmax)
ComplexTensor.min = FUNCTIONS[np.min] = FUNCTIONS[np.amin] = _extreme("min", np.argmin)
FUNCTIONS[np.real_if_close] = _real_if_close
ComplexTensor.var = FUNCTIONS[np.var] = _var
ComplexTensor.std = FUNCTIONS[np.std] = _std
ComplexTensor.__array_ufunc__ = __array_ufunc__
ComplexTensor.__array_function__ = __array_function__


def _from_array(a, requires_grad):
    """``tg.tensor`` of complex data."""
    z = ComplexTensor.constant(a)
    return z.requires_grad_(True) if requires_grad else z


bound.bind(complex_tensor=_from_array, complex_tensor_of=ComplexTensor)
