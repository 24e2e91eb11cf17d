"""NumPy's array builders and rearrangements on tensors: ``meshgrid``,
``broadcast_arrays``, ``insert``, ``delete``, ``diagflat``,
``fill_diagonal`` (in place), ``piecewise``, ``apply_along_axis``, and
``numpy.fft.hfft`` / ``ihfft``.

The rearrangements are gathers: NumPy's own function run on an array of
element numbers says which input element lands where, so the layout is
NumPy's in every case it accepts, and the gradient of each output element
goes back to the element it came from.
"""
import operator

import numpy as np

from ..core.tensor import Tensor, _plain
from . import complex_tensor as Z
from . import elementwise as E
from . import fft as F
from . import shape as S
from .composite import _t
from .guarded import on_values


def _labels(shape, first=0):
    return np.arange(first, first + int(np.prod(shape)), dtype=np.intp).reshape(shape)


# -- grids -------------------------------------------------------------------------------
def broadcast_arrays(*args, subok=False):
    """``numpy.broadcast_arrays``: each argument broadcast to the common
    shape (a tensor's result a view, through which its gradient sums back).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a, b = np.broadcast_arrays(tg.tensor([1.0, 2.0]), np.array([[0.0], [1.0]]))
    >>> a.shape, b.shape
    ((2, 2), (2, 2))
    """
    shape = np.broadcast_shapes(*(np.shape(a._data if isinstance(a, Tensor) else a)
                                  for a in args))
    return tuple(a if isinstance(a, Tensor) and a.shape == shape else
                 S.broadcast_to(a, shape) if isinstance(a, Tensor) else
                 np.broadcast_to(np.asarray(a), shape) for a in args)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """``numpy.meshgrid``: ``indexing`` "xy" or "ij", ``sparse`` and ``copy``;
    a tuple of tensors, each differentiable in its coordinate vector.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> X, Y = np.meshgrid(tg.tensor([1.0, 2.0, 3.0]), tg.tensor([5.0, 6.0]))
    >>> X
    tensor([[1.0, 2.0, 3.0],
            [1.0, 2.0, 3.0]])
    """
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    nd = len(xi)
    s0 = (1,) * nd
    out = [S.reshape(_t(x), s0[:i] + (-1,) + s0[i + 1:]) for i, x in enumerate(xi)]
    if indexing == "xy" and nd > 1:
        out[0] = S.reshape(out[0], (1, -1) + s0[2:])
        out[1] = S.reshape(out[1], (-1, 1) + s0[2:])
    if not sparse:
        out = list(broadcast_arrays(*out))
    if copy:
        out = [x.copy() for x in out]
    return tuple(out)


# -- insert, delete, diagflat --------------------------------------------------------------
def _arr(arr, axis):
    arr = _t(arr)
    if axis is None:
        if arr.ndim != 1:
            arr = S.ravel(arr)
        axis = 0
    return arr, axis


def insert(arr, obj, values, axis=None):
    """``numpy.insert``: ``values`` (cast to arr's dtype, broadcast as NumPy
    broadcasts them) put before the index or indices ``obj`` along ``axis``
    (the flattened array for None); differentiable in ``arr`` and ``values``.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.insert(tg.tensor([1.0, 2.0, 3.0]), 1, tg.tensor(9.0))
    tensor([1.0, 9.0, 2.0, 3.0])
    """
    arr, axis = _arr(arr, axis)
    if isinstance(obj, Tensor):
        obj = obj._data
    v = values if isinstance(values, Tensor) else _plain(np.asarray(values, arr.dtype))
    if v.dtype != arr.dtype:
        v = S.astype(v, arr.dtype)
    # element numbers: arr's 0..n-1, values' n.. (NumPy broadcasts them as the values)
    lab = np.insert(_labels(arr.shape), obj, _labels(v.shape, arr.size), axis=axis)
    both = S.concatenate([S.ravel(arr), S.ravel(v)], axis=0)
    return S.getitem(both, lab)


def delete(arr, obj, axis=None):
    """``numpy.delete``: ``arr`` without the entries ``obj`` (an int, a
    slice, a sequence, a boolean mask) along ``axis``; a gather.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.delete(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), 0, axis=1)
    tensor([[2.0],
            [4.0]])
    """
    arr, axis = _arr(arr, axis)
    if isinstance(obj, Tensor):
        obj = obj._data
    lab = np.delete(_labels(arr.shape), obj, axis=axis)
    return S.getitem(S.ravel(arr), lab)


def diagflat(v, k=0):
    """``numpy.diagflat``: the flattened input on the k-th diagonal of a
    square matrix of zeros.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.diagflat(tg.tensor([1.0, 2.0]))
    tensor([[1.0, 0.0],
            [0.0, 2.0]])
    """
    v = _t(v)
    lab = np.diagflat(_labels(v.shape, 1), operator.index(k))
    both = S.concatenate([_plain(np.zeros(1, v.dtype)), S.ravel(v)], axis=0)
    return S.getitem(both, lab)


# -- fill_diagonal -------------------------------------------------------------------------
def fill_diagonal(a, val, wrap=False):
    """``numpy.fill_diagonal``: writes ``val`` (repeated as needed, as NumPy
    repeats it) into the main diagonal of tensor ``a`` in place, and returns
    None.  A write like ``a[i, i] = val``: recorded in a graph (the gradient
    reaches ``val`` and the rest of ``a``), refused on a leaf that requires
    grad, ``wrap`` as NumPy's for tall matrices.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.zeros((2, 2))
    >>> np.fill_diagonal(a, 5.0)
    >>> a
    tensor([[5.0, 0.0],
            [0.0, 5.0]])
    """
    if not isinstance(a, Tensor):
        raise TypeError("fill_diagonal: a must be the tensor to write into; to fill an "
                        "ndarray, pass plain values (val.numpy())")
    if a.ndim < 2:
        raise ValueError("array must be at least 2-d")
    end = None
    if a.ndim == 2:
        step = a.shape[1] + 1
        if not wrap:
            end = a.shape[1] * a.shape[1]
    else:
        if not np.all(np.diff(a.shape) == 0):
            raise ValueError("All dimensions of input must be of equal length")
        step = 1 + int(np.cumprod(a.shape[:-1]).sum())
    pos = np.arange(a.size)[:end:step]
    if pos.size == 0:
        return None
    key = np.unravel_index(pos, a.shape)
    if isinstance(val, Tensor):
        flat = S.ravel(val)
        if flat.size != pos.size:
            flat = S.take(flat, np.arange(pos.size) % flat.size)
        a[key] = flat
    else:
        a[key] = np.resize(np.asarray(val, a.dtype), pos.size)
    return None


# -- piecewise, apply_along_axis -------------------------------------------------------------
def piecewise(x, condlist, funclist, *args, **kw):
    """``numpy.piecewise``: each function (or constant) applied where its
    condition holds, zero elsewhere, NumPy's rules for an extra "otherwise"
    function; differentiable where the functions are.  The conditions are
    plain booleans (a tensor condition is read by value).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([-2.0, 3.0])
    >>> np.piecewise(x, [x < 0, x >= 0], [lambda v: -v, lambda v: v * v])
    tensor([2.0, 9.0])
    """
    x = _t(x)
    n2 = len(funclist)
    if np.isscalar(condlist) or (
            not isinstance(condlist[0], (list, np.ndarray, Tensor)) and x.ndim != 0):
        condlist = [condlist]
    conds = on_values(lambda *c: np.asarray(c, dtype=bool), *condlist)
    n = len(conds)
    if n == n2 - 1:
        conds = np.concatenate([conds, ~np.any(conds, axis=0, keepdims=True)], axis=0)
        n += 1
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are "
                         f"expected")
    y = _plain(np.zeros(x.shape, x.dtype))
    for cond, func in zip(conds, funclist):
        if not callable(func):
            y = S.index_put(y, cond, func._data if isinstance(func, Tensor) and
                            not func.requires_grad else func)
        else:
            vals = S.getitem(x, cond)
            if vals.size > 0:
                y = S.index_put(y, cond, func(vals, *args, **kw))
    return y


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """``numpy.apply_along_axis``: ``func1d`` called on every 1-D slice along
    ``axis`` (each a tensor), the results stacked where the axis was;
    differentiable where ``func1d`` is.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.apply_along_axis(lambda r: r[0] * r[-1], 1, tg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([2.0, 12.0])
    """
    arr = _t(arr)
    nd = arr.ndim
    axis = operator.index(axis)
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of "
                                      f"dimension {nd}")
    axis %= nd
    moved = S.moveaxis(arr, axis, -1)
    outer = moved.shape[:-1]
    if 0 in outer:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    res = [_t(func1d(moved[ind], *args, **kwargs)) for ind in np.ndindex(outer)]
    out = S.reshape(S.stack(res, axis=0), outer + res[0].shape)
    k = res[0].ndim
    perm = list(range(axis)) + list(range(len(outer), len(outer) + k)) + \
        list(range(axis, len(outer)))
    return S.transpose(out, perm) if perm != sorted(perm) else out


# -- Hermitian FFTs ------------------------------------------------------------------------
def hfft(a, n=None, axis=-1, norm=None, out=None):
    """``numpy.fft.hfft``: the real signal of a Hermitian-symmetric half
    spectrum, ``irfft(conj(a))`` with the direction of ``norm`` swapped;
    differentiable, as irfft is.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.fft.hfft(tg.tensor([1.0, 2.0, 3.0]))
    tensor([8.0, -2.0, 0.0, -2.0])
    """
    F._refuse_out(out, "hfft")
    norm = F._norm(norm, "hfft")
    if isinstance(a, Z.ComplexTensor):
        a = Z.ComplexTensor(a.real, E.negative(a.imag))
    elif not isinstance(a, Tensor):
        a = np.conjugate(np.asarray(a))
    if n is None:
        shape = a.shape if isinstance(a, (Tensor, Z.ComplexTensor)) else np.shape(a)
        n = (shape[axis] - 1) * 2
    return F.irfft(a, n, axis, norm=F._DUAL[norm])


def ihfft(a, n=None, axis=-1, norm=None, out=None):
    """``numpy.fft.ihfft``: the half spectrum of a real signal whose
    ``hfft`` it is, ``conj(rfft(a))`` with the direction of ``norm`` swapped.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.fft.ihfft(tg.tensor([8.0, -2.0, 0.0, -2.0])).real
    tensor([1.0, 2.0, 3.0])
    """
    F._refuse_out(out, "ihfft")
    norm = F._norm(norm, "ihfft")
    r = F.rfft(a, n, axis, norm=F._DUAL[norm])
    return Z.ComplexTensor(r.real, E.negative(r.imag))
