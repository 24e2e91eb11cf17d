"""Functions built from the primitive ops, in Python.

Each is differentiable because its pieces are: no registry entry, no kernel,
nothing to compile (a small core with composites on top, as tinygrad and JAX
keep it).  Their forwards match NumPy's results; the tests check both the
values and the gradients against finite differences.
"""
import numpy as np

from ..tensor import Tensor, _plain
from . import elementwise as E
from . import reductions as Rd
from . import shape as S


def _t(x):
    return x if isinstance(x, Tensor) else _plain(np.asarray(x))


def _count(a, axis):
    shape = np.shape(a._data if isinstance(a, Tensor) else a)
    axes = Rd.normalize_axis(axis, len(shape), "var")
    return int(np.prod([shape[i] for i in axes]))


def var(a, axis=None, ddof=0, keepdims=False):
    """``numpy.var`` with ``ddof``: mean squared deviation, over ``n - ddof``."""
    a = _t(a)
    d = a - Rd.mean(a, axis=axis, keepdims=True)
    return Rd.sum(d * d, axis=axis, keepdims=keepdims) / (_count(a, axis) - ddof)


def std(a, axis=None, ddof=0, keepdims=False):
    """``numpy.std``: the square root of :func:`var`."""
    return E.sqrt(var(a, axis=axis, ddof=ddof, keepdims=keepdims))


def ptp(a, axis=None, keepdims=False):
    """``numpy.ptp``: max minus min (ties share the gradient, as in max/min)."""
    return (Rd.max(a, axis=axis, keepdims=keepdims)
            - Rd.min(a, axis=axis, keepdims=keepdims))


def average(a, axis=None, weights=None, keepdims=False):
    """``numpy.average``, differentiable in ``a`` and in tensor ``weights``."""
    if weights is None:
        return Rd.mean(a, axis=axis, keepdims=keepdims)
    a = _t(a)
    w = weights if isinstance(weights, Tensor) else np.asarray(weights, dtype=float)
    if np.ndim(w) == 1 and a.ndim > 1:
        if axis is None or isinstance(axis, tuple):
            raise TypeError("average: 1-D weights need an int axis")
        shape = [1] * a.ndim
        shape[axis] = -1
        w = S.reshape(w, shape) if isinstance(w, Tensor) else w.reshape(shape)
    total = Rd.sum(S.broadcast_to(w, a.shape) if isinstance(w, Tensor)
                   else np.broadcast_to(w, a.shape), axis=axis, keepdims=keepdims)
    return Rd.sum(a * w, axis=axis, keepdims=keepdims) / total


def _nan_to(a, value):
    a = _t(a)
    return E.where(np.isnan(a._data), value, a)


def nansum(a, axis=None, keepdims=False):
    """``numpy.nansum``: NaNs count as zero and get no gradient."""
    return Rd.sum(_nan_to(a, 0.0), axis=axis, keepdims=keepdims)


def nanmean(a, axis=None, keepdims=False):
    """``numpy.nanmean``: the mean of the non-NaN elements."""
    a = _t(a)
    n = np.sum(~np.isnan(a._data), axis=axis, keepdims=keepdims)
    return nansum(a, axis=axis, keepdims=keepdims) / n


def nanmax(a, axis=None, keepdims=False):
    """``numpy.nanmax``: the maximum ignoring NaNs."""
    return Rd.max(_nan_to(a, -np.inf), axis=axis, keepdims=keepdims)


def nanmin(a, axis=None, keepdims=False):
    """``numpy.nanmin``: the minimum ignoring NaNs."""
    return Rd.min(_nan_to(a, np.inf), axis=axis, keepdims=keepdims)


def trace(a, offset=0, axis1=0, axis2=1):
    """``numpy.trace``: the sum along a diagonal."""
    return Rd.sum(S.diagonal(a, offset, axis1, axis2), axis=-1)


def atleast_1d(*arys):
    """``numpy.atleast_1d``."""
    out = [S.reshape(a, (1,)) if np.ndim(a) == 0 else a for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """``numpy.atleast_2d``."""
    out = [S.reshape(a, (1,) * (2 - np.ndim(a)) + np.shape(a)) if np.ndim(a) < 2 else a
           for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """``numpy.atleast_3d`` (1-D ``(n,)`` becomes ``(1, n, 1)``, 2-D gets a last axis)."""
    def one(a):
        nd = np.ndim(a)
        if nd == 0:
            return S.reshape(a, (1, 1, 1))
        if nd == 1:
            return S.reshape(a, (1, np.shape(a)[0], 1))
        if nd == 2:
            return S.reshape(a, np.shape(a) + (1,))
        return a
    out = [one(a) for a in arys]
    return out[0] if len(out) == 1 else out


def hstack(tup):
    """``numpy.hstack``."""
    arrs = [atleast_1d(a) for a in tup]
    return S.concatenate(arrs, axis=0 if np.ndim(arrs[0]) == 1 else 1)


def vstack(tup):
    """``numpy.vstack``."""
    return S.concatenate([atleast_2d(a) for a in tup], axis=0)


def dstack(tup):
    """``numpy.dstack``."""
    return S.concatenate([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup):
    """``numpy.column_stack``."""
    cols = [S.reshape(a, (-1, 1)) if np.ndim(a) < 2 else a for a in tup]
    return S.concatenate(cols, axis=1)


def array_split(a, indices_or_sections, axis=0):
    """``numpy.array_split``: sections may differ in size."""
    return S.split(a, indices_or_sections, axis=axis, _fn=np.array_split)


def hsplit(a, indices_or_sections):
    """``numpy.hsplit``."""
    return S.split(a, indices_or_sections, axis=1 if np.ndim(a) > 1 else 0)


def vsplit(a, indices_or_sections):
    """``numpy.vsplit``."""
    return S.split(a, indices_or_sections, axis=0)


def norm(x, ord=None, axis=None, keepdims=False):
    """``numpy.linalg.norm`` for vectors (any ``ord``) and matrices
    (``None``/``'fro'``, 1, -1, inf, -inf).

    Matrix 2-norms and nuclear norms need singular values and raise
    NotImplementedError for now.  At ``x = 0`` the 2-norm's gradient is NaN
    (the function has no derivative there).
    """
    x = _t(x)
    nd = x.ndim
    if isinstance(axis, int):
        axis = (axis,)
    vector = (axis is None and (ord is None or nd == 1)) or (axis is not None and len(axis) == 1)
    if axis is None and ord is None:
        return E.sqrt(Rd.sum(x * x, keepdims=keepdims))
    if vector:
        ax = None if axis is None else axis[0]
        if ord is None or ord == 2:
            return E.sqrt(Rd.sum(x * x, axis=ax, keepdims=keepdims))
        if ord == np.inf:
            return Rd.max(E.absolute(x), axis=ax, keepdims=keepdims)
        if ord == -np.inf:
            return Rd.min(E.absolute(x), axis=ax, keepdims=keepdims)
        if ord == 0:
            return _plain(np.linalg.norm(x._data, 0, ax, keepdims))
        if ord == 1:
            return Rd.sum(E.absolute(x), axis=ax, keepdims=keepdims)
        return Rd.sum(E.absolute(x) ** ord, axis=ax, keepdims=keepdims) ** (1.0 / ord)
    r, c = (0, 1) if axis is None else axis
    if ord in (None, "fro"):
        return E.sqrt(Rd.sum(x * x, axis=(r, c), keepdims=keepdims))
    if ord in (1, -1, np.inf, -np.inf):
        summed, other = (r, c) if ord in (1, -1) else (c, r)
        s = Rd.sum(E.absolute(x), axis=summed, keepdims=True)
        pick = Rd.max if ord in (1, np.inf) else Rd.min
        out = pick(s, axis=other, keepdims=True)
        return out if keepdims else S.squeeze(out, axis=(r, c))
    raise NotImplementedError(
        f"tapegrad: matrix norm ord={ord!r} needs singular values, which are not "
        "differentiable in tapegrad yet; use ord='fro', 1 or inf")


def outer(a, b):
    """``numpy.outer`` of the flattened operands."""
    return S.reshape(a, (-1, 1)) * S.reshape(b, (1, -1))


def vdot(a, b):
    """``numpy.vdot`` for real operands: the sum of the elementwise product."""
    return Rd.sum(S.ravel(a) * S.ravel(b))


def tensordot(a, b, axes=2):
    """``numpy.tensordot``: transposes and reshapes around one matmul."""
    a, b = _t(a), _t(b)
    if isinstance(axes, int):
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([x] if isinstance(x, int) else list(x) for x in axes)
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = int(np.prod([a.shape[i] for i in ax_a]))
    a2 = S.reshape(S.transpose(a, free_a + ax_a), (-1, k))
    b2 = S.reshape(S.transpose(b, ax_b + free_b), (k, -1))
    from .linalg import matmul
    out_shape = tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b)
    return S.reshape(matmul(a2, b2), out_shape)


def inner(a, b):
    """``numpy.inner``: sums over the last axes."""
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return E.multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def kron(a, b):
    """``numpy.kron``: every product of an element of a with one of b."""
    a, b = _t(a), _t(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    ea = S.reshape(a, tuple(v for n in sa for v in (n, 1)))
    eb = S.reshape(b, tuple(v for n in sb for v in (1, n)))
    return S.reshape(ea * eb, tuple(x * y for x, y in zip(sa, sb)))


def select(condlist, choicelist, default=0):
    """``numpy.select``: the first choice whose condition holds, else default."""
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = E.where(cond, choice, out)
    return out if isinstance(out, Tensor) else _plain(np.asarray(out))
