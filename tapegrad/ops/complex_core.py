"""Complex tensors as pairs of real tensors: the :class:`ComplexTensor` class.

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

This module holds what every complex op builds on: the class with its
parts, properties, gradient, conversions, indexing and shape methods, the
operand helpers (``is_complex``, ``_split``, ``_z``, ``_as_z``) and
``tg.complex``.  The ops themselves are in :mod:`~tapegrad.ops.complex_math`
(elementwise) and :mod:`~tapegrad.ops.complex_linear` (linear and bilinear
functions of the parts); :mod:`~tapegrad.ops.complex_tensor`, above them,
binds the operators, the NumPy-named methods that call them and the NumPy
protocol to the class, as :mod:`~tapegrad.ops.methods` does for ``Tensor``.
"""
import builtins
import numbers

import numpy as np

from ..core.tensor import ConcretizationError, Tensor, _concrete, _plain
from . import elementwise as E
from . import reductions as Rd

_COMPLEX_SCALARS = (builtins.complex, np.complexfloating)


class ComplexTensor:
    """A complex array that records the operations applied to it, held as
    two real tensors ``real`` and ``imag``.

    ``tg.tensor(complex_array)`` makes one, as do ``tg.complex(re, im)``,
    arithmetic with Python complex numbers or complex arrays, and
    ``np.fft.fft(t)``.  ``np.abs``, ``np.real``, ``np.imag`` and ``np.angle``
    give real tensors back.  Its operators, ``conj``, ``sum``, ``mean``,
    ``prod``, ``var``, ``std`` and the NumPy protocol are bound by
    :mod:`tapegrad.ops.complex_tensor`.

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
    # complex64 when both parts are float32 (an FFT of float32 data), else complex128
    dtype = property(lambda self: np.result_type(self.real.dtype, self.imag.dtype, np.complex64))

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
        """The value as a new ndarray of ``dtype`` (a copy).  Built part by
        part: ``re + 1j * im`` would turn ``1 + inf j`` into ``nan + inf j``."""
        re, im = np.broadcast_arrays(np.asarray(self.real._data), np.asarray(self.imag._data))
        z = np.empty(re.shape, self.dtype)
        z.real, z.imag = re, im
        return z

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad:
            raise ConcretizationError(
                "a complex tensor that requires grad was converted to a NumPy array, which "
                "would drop its gradient; use z.detach().numpy()")
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def detach(self):
        return ComplexTensor(self.real.detach(), self.imag.detach())

    def item(self):
        """The one element as a Python complex; of a tensor that requires grad
        it raises inside a transform and warns elsewhere, as ``Tensor.item``."""
        if self.requires_grad:
            _concrete(self.real if self.real._requires_grad else self.imag, "t.item()", 2)
        return builtins.complex(self.numpy().item())

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

    # -- arithmetic that needs no complex op -----------------------------------------------
    def __neg__(self):
        return ComplexTensor(E.negative(self.real), E.negative(self.imag))

    def __pos__(self):
        return self

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

    # -- shape methods ----------------------------------------------------------------------
    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 else shape
        return ComplexTensor(self.real.reshape(shape), self.imag.reshape(shape))

    def transpose(self, *axes):
        return ComplexTensor(self.real.transpose(*axes), self.imag.transpose(*axes))

    def ravel(self):
        return ComplexTensor(self.real.ravel(), self.imag.ravel())

    flatten = ravel


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


def _as_z(x):
    if type(x) is ComplexTensor:
        return x
    re, im = _split(x)
    return _z(re, im)


def _not_ordered(*args):
    raise TypeError("tapegrad: complex numbers have no order; compare np.abs(z) or z.real")


def _equal(a, b):
    (ar, ai), (br, bi) = _split(a), _split(b)
    d = lambda t: np.asarray(getattr(t, "_data", t))  # noqa: E731
    return np.logical_and(d(ar) == d(br), d(0.0 if ai is None else ai) == d(0.0 if bi is None
                                                                           else bi))
