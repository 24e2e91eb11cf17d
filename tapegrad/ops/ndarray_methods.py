"""More of ``ndarray``'s methods on ``Tensor``: the index and predicate
methods (``argmax``, ``argsort``, ``all``, ``nonzero``, ...), whose plain
results carry no gradient and are guarded in a trace as ``np.argmax(t)``
is; ``round``; the in-place ``sort`` and ``fill``; ``flat``; and the
complex-number views of a real tensor (``real``, ``imag``, ``conj``).

Bound by ``ops/methods.py``.
"""
import numpy as np

from ..core.tensor import Tensor
from .views import ViewOf, note_read_only
from . import composite as K
from . import elementwise as E
from . import numeric as N
from . import shape as S


#: ``copy_``'s in-place write (``ops/methods.py`` binds it: that module binds
#: these methods, so this one does not import it)
_assign = [None]


def _no_out(out, who):
    if out is not None:
        raise TypeError(f"Tensor.{who}(out=...) is not supported: tensors cannot write "
                        f"into arrays; drop out= and use the returned value")


def _plain_fn(np_fn):
    """The handler ``np_fn(t)`` already has (numpy_api ``_plain_values``): a
    plain result computed on the values, guarded while ``tg.trace`` records."""
    from .numpy_api import HANDLED_FUNCTIONS
    return HANDLED_FUNCTIONS[np_fn]


def argmax(self, axis=None, out=None, *, keepdims=False):
    """``ndarray.argmax``: plain integer indices (no gradient), as ``np.argmax(t)``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> int(tg.tensor([1.0, 3.0, 2.0]).argmax())
    1
    """
    _no_out(out, "argmax")
    return _plain_fn(np.argmax)(self, axis=axis, keepdims=keepdims)


def argmin(self, axis=None, out=None, *, keepdims=False):
    """``ndarray.argmin``: plain integer indices (no gradient)."""
    _no_out(out, "argmin")
    return _plain_fn(np.argmin)(self, axis=axis, keepdims=keepdims)


def argsort(self, axis=-1, kind=None, order=None, *, stable=None):
    """``ndarray.argsort``: a plain integer array (no gradient)."""
    if order is not None:
        raise TypeError("Tensor.argsort: order= (structured arrays) is not supported on tensors")
    return _plain_fn(np.argsort)(self, axis=axis, kind=kind, stable=stable)


def all(self, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    """``ndarray.all``: a plain bool (array), as ``np.all(t)``."""
    _no_out(out, "all")
    return _plain_fn(np.all)(self, axis=axis, keepdims=keepdims, where=where)


def any(self, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    """``ndarray.any``: a plain bool (array), as ``np.any(t)``."""
    _no_out(out, "any")
    return _plain_fn(np.any)(self, axis=axis, keepdims=keepdims, where=where)


def nonzero(self):
    """``ndarray.nonzero``: a tuple of plain integer arrays, one per axis."""
    return _plain_fn(np.nonzero)(self)


def round(self, decimals=0, out=None):  # noqa: A001
    """``ndarray.round``: :func:`tapegrad.round`; piecewise constant, so its
    gradient is zero."""
    _no_out(out, "round")
    return E.round(self, decimals)


def sort(self, axis=-1, kind=None, order=None, *, stable=None):
    """``ndarray.sort``: sorts the tensor in place and returns None.

    A recorded write, as ``t[...] = np.sort(t, axis)``: the gradient reaching
    the sorted tensor flows back through the sorting permutation to the
    values it had.  As every in-place update, refused on a leaf that
    requires grad while grad mode is on.

    Examples
    --------
    >>> import tapegrad as tg
    >>> t = tg.tensor([3.0, 1.0, 2.0])
    >>> t.sort()
    >>> t
    tensor([1.0, 2.0, 3.0])
    """
    if axis is None:
        raise TypeError("Tensor.sort: axis=None is not supported (as ndarray.sort); "
                        "sort a flattened copy, t.ravel() or np.sort(t, axis=None)")
    if self.ndim == 0:
        raise np.exceptions.AxisError(
            f"Tensor.sort: axis {axis} is out of bounds for a tensor of dimension 0")
    new = K.sort(self, axis, kind, order, stable=stable)
    _assign[0](self, new)


def fill(self, value):
    """``ndarray.fill``: every element becomes ``value``, in place; returns
    None (``fill_`` is the PyTorch spelling, which returns the tensor)."""
    if np.ndim(value._data if isinstance(value, Tensor) else value) != 0:
        raise ValueError("Tensor.fill: the value must be a single number; "
                         "use t[...] = values to write an array")
    _assign[0](self, value)


class FlatIter:
    """``t.flat``: the tensor's elements in C order, as ``ndarray.flat``.

    Reading ``t.flat[k]`` indexes ``t.ravel()``; writing ``t.flat[k] = v``
    writes into t at those elements (a recorded write in a graph, as
    ``t[i] = v``).
    """

    __slots__ = ("base",)

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return self.base.size

    def __iter__(self):
        return iter(S.ravel(self.base))

    def __getitem__(self, key):
        return S.getitem(S.ravel(self.base), key)

    def __setitem__(self, key, value):
        t = self.base
        if isinstance(key, Tensor):
            key = key._data
        if isinstance(key, tuple):
            raise IndexError("Tensor.flat takes one index: an int, a slice, "
                             "an integer array or a boolean mask")
        positions = np.arange(t.size)[key]
        if np.size(positions) == 0:
            return
        if t.ndim == 0:
            t[()] = value
            return
        t[np.unravel_index(positions, t.shape)] = value

    def __repr__(self):
        return f"<flat iterator of {self.base!r}>"


def _flat(self):
    return FlatIter(self)


def _real(self):
    """``t.real``: a real tensor's real part is the tensor itself (NumPy's
    ``a.real is a`` for a real array); writes through it reach t."""
    return N.real(self)


def _set_real(self, value):
    self[...] = value


def _imag(self):
    """``t.imag``: zeros of t's shape and dtype, without gradient (NumPy's
    read-only zeros for a real array: a write into them raises)."""
    out = N.imag(self)
    if isinstance(out, Tensor):
        note_read_only(out, ViewOf("imag", np.imag, N.imag, (), writeable=False))
    return out


def _set_imag(self, value):
    raise TypeError("a real tensor has no imaginary part to set (as NumPy's "
                    "'array does not have imaginary part to set'); make a complex one "
                    "with tg.complex(t, imag)")


def conj(self):
    """``ndarray.conj``: a real tensor's conjugate is the tensor itself, as
    NumPy returns a real array itself."""
    return N.real(self)


METHODS = {"argmax": argmax, "argmin": argmin, "argsort": argsort, "all": all, "any": any,
           "nonzero": nonzero, "round": round, "sort": sort, "fill": fill,
           "conj": conj, "conjugate": conj}
PROPERTIES = {"flat": property(_flat), "real": property(_real, _set_real),
              "imag": property(_imag, _set_imag)}
