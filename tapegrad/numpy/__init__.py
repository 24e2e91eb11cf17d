"""``tapegrad.numpy``: NumPy's namespace, differentiable.

``import tapegrad.numpy as np`` gives every name of NumPy's.  A function
given tensors returns tensors that carry the gradient; given plain arrays it
returns NumPy's own result.  Lists and tuples that hold tensors are built
into one tensor first, so ``np.array([t1, t2])``, ``np.mean([x, x + 2])``,
``np.r_[t, 0.0]``, ``np.c_[a, t]`` and ``np.append(t, [t2, 1.0])`` are
differentiable (NumPy's own ``np.array`` would drop the gradient).

Ufuncs (``np.sin``, ``np.add``, ...), dtypes, classes, constants and
submodules other than ``linalg`` and ``fft`` are NumPy's own objects;
``np.random`` is ``numpy.random``.  ``import tapegrad`` does not import this
module.

Examples
--------
>>> import tapegrad as tg
>>> import tapegrad.numpy as np
>>> def f(x):
...     return np.sum(np.array([np.sin(x), x ** 2, 1.0]))
>>> float(tg.grad(f)(0.0))
1.0
"""
import builtins as _builtins
import sys as _sys

import numpy as _np
import numpy.random as random  # noqa: F401  (np.random is NumPy's)

from .. import ops as _ops  # noqa: F401  (registers the NumPy protocol)
from ..core.tensor import tensor as _tensor
from . import _wrap
from ._wrap import build as _build
from ._wrap import holds_tensor as _holds
from ._wrap import is_tensor as _is_tensor

_sys.modules[__name__ + ".random"] = random

__version__ = _np.__version__


def _astype(t, dtype):
    if dtype is None:
        return t
    return t.astype(dtype)


def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    """``numpy.array``; a tensor, or nested lists/tuples holding tensors, give
    a tensor (stacked: differentiable in every tensor in it)."""
    if not _holds(object):
        kw = {} if like is None else {"like": like}
        return _np.array(object, dtype=dtype, copy=copy, order=order, subok=subok,
                         ndmin=ndmin, **kw)
    out = _build(object)
    if dtype is not None and _np.dtype(dtype) != out.dtype:
        out = out.astype(dtype)
    elif copy and out is object:
        out = out.copy()
    if out.ndim < ndmin:
        out = out.reshape((1,) * (ndmin - out.ndim) + tuple(out.shape))
    return out


def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    """``numpy.asarray``; a tensor is returned as it is (``dtype`` casts it),
    nested lists/tuples holding tensors give a tensor."""
    if not _holds(a):
        kw = {} if like is None else {"like": like}
        if device is not None:
            kw["device"] = device
        return _np.asarray(a, dtype=dtype, order=order, copy=copy, **kw)
    out = _build(a)
    if dtype is not None and _np.dtype(dtype) != out.dtype:
        out = out.astype(dtype)
    elif copy and out is a:
        out = out.copy()
    return out


def _as_same(fn):
    def conv(a, dtype=None, *args, **kwargs):
        if _holds(a):
            return _astype(_build(a), dtype)
        return fn(a, dtype, *args, **kwargs)
    conv.__name__ = conv.__qualname__ = fn.__name__
    conv.__doc__ = (f"``numpy.{fn.__name__}``; a tensor (or lists/tuples holding tensors) "
                    f"gives a tensor: tensors have no memory layout to choose.")
    return conv


asanyarray = _as_same(_np.asanyarray)
ascontiguousarray = _as_same(_np.ascontiguousarray)
asfortranarray = _as_same(_np.asfortranarray)


# -- r_ and c_ ------------------------------------------------------------------------
class _Concatenator:
    """``np.r_`` / ``np.c_``: NumPy's index-expression concatenation; with a
    tensor among the pieces, the pieces are concatenated as tensors."""

    def __init__(self, plain, axis, ndmin, trans1d):
        self._plain, self._axis, self._ndmin, self._trans1d = plain, axis, ndmin, trans1d

    def __len__(self):
        return 0

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if not _builtins.any(map(_holds, items)):
            return self._plain[key]
        axis, ndmin, trans1d = self._axis, self._ndmin, self._trans1d
        pieces = []
        for k, item in enumerate(items):
            if isinstance(item, str):
                if k != 0:
                    raise ValueError("np.r_/np.c_: a directive string must come first")
                if item in ("r", "c"):
                    raise ValueError(
                        "np.r_['r'] / np.r_['c'] build np.matrix objects, which tensors do not "
                        "have; write np.atleast_2d(np.r_[...]) (or its transpose) instead")
                fields = [int(f) for f in item.split(",")]
                axis = fields[0]
                if len(fields) > 1:
                    ndmin = fields[1]
                if len(fields) > 2:
                    trans1d = fields[2]
                continue
            if isinstance(item, slice):
                piece = self._plain[item]  # arange / linspace of plain numbers
            elif _holds(item):
                piece = _build(item)
            else:
                piece = _np.asarray(item)
            pieces.append(_expand(piece, ndmin, trans1d))
        return concatenate(pieces, axis=axis)


def _expand(piece, ndmin, trans1d):
    """``piece`` with leading unit axes up to ``ndmin`` dimensions; the
    original axes then moved to position ``trans1d`` (NumPy's rule)."""
    nd = _np.ndim(piece)
    if nd >= ndmin:
        return piece
    shape = tuple(_np.shape(piece))
    piece = piece.reshape((1,) * (ndmin - nd) + shape)
    if trans1d != -1:
        new = ndmin - nd  # the axes added in front
        start = trans1d + new + 1 if trans1d < 0 else trans1d
        order = list(range(ndmin))
        moved = order[new:]                 # the piece's own axes
        rest = order[:new]
        order = rest[:start] + moved + rest[start:]
        piece = transpose(piece, order)
    return piece


r_ = _Concatenator(_np.r_, 0, 1, -1)
c_ = _Concatenator(_np.c_, -1, 2, 0)


def block(arrays):
    """``numpy.block``; with tensors among the blocks, assembled from
    tensors (concatenations from the innermost lists out)."""
    if not _holds(arrays):
        return _np.block(arrays)

    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) and x else 0

    top = depth(arrays)

    def nd(x):
        if isinstance(x, list):
            return _builtins.max(nd(e) for e in x)
        return _np.ndim(x)

    result_nd = _builtins.max(top, nd(arrays))

    def assemble(x, level):
        if not isinstance(x, list):
            if isinstance(x, tuple):
                raise TypeError("np.block: blocks are nested lists, not tuples")
            t = x if _is_tensor(x) else _np.asarray(x)
            if _np.ndim(t) < result_nd:
                t = t.reshape((1,) * (result_nd - _np.ndim(t)) + tuple(_np.shape(t)))
            return t
        parts = [assemble(e, level + 1) for e in x]
        return concatenate(parts, axis=-(top - level))

    return assemble(arrays, 0)


def make_diagonal(D, offset=0, axis1=0, axis2=1):
    """The array whose diagonal along ``axis1``/``axis2`` is ``D``'s last
    axis, zero elsewhere: the inverse of ``np.diagonal(A, 0, axis1, axis2)``
    (a name of autograd.numpy's; NumPy has none).  ``offset`` must be 0."""
    if offset != 0:
        raise ValueError(f"make_diagonal: offset must be 0, got {offset}")
    nd = _np.ndim(D) + 1
    a1, a2 = (int(axis1) % nd, int(axis2) % nd) if nd > 1 else (None, None)
    if a1 is None or a1 == a2:
        raise ValueError(f"make_diagonal: axis1 and axis2 must be two different axes of the "
                         f"{nd}-dimensional result, got {axis1} and {axis2}")
    n = _np.shape(D)[-1]
    D = D if _is_tensor(D) else _np.asarray(D)
    out = D[..., None] * _np.eye(n, dtype=_np.result_type(D, 0.0) if not _is_tensor(D) else None)
    return moveaxis(out, [-2, -1], sorted([a1, a2]))


# -- functions given tensors that NumPy's protocol does not route -------------------------
def _values_like(name):
    """``zeros_like``/``ones_like``/``empty_like``/``full_like`` of a tensor:
    a tensor of the same shape (no gradient flows through a constant)."""
    def fn(a, *args, **kwargs):
        ref = _build(a)
        plain = getattr(_np, name)(_np.empty(tuple(ref.shape), dtype=ref.dtype), *args, **kwargs)
        return _tensor(plain)
    return fn


#: positional indices / keyword names of parameters that are sequences of arrays
_SEQ = {
    "concatenate": (0, "arrays"), "concat": (0, "arrays"), "stack": (0, "arrays"),
    "vstack": (0, "tup"), "hstack": (0, "tup"), "dstack": (0, "tup"),
    "column_stack": (0, "tup"), "row_stack": (0, "tup"), "select": (0, 1, "condlist", "choicelist"),
    "piecewise": (1, 2, "condlist", "funclist"), "lexsort": (0, "keys"), "choose": (1, "choices"),
}
_ON_TENSORS = {n: _values_like(n) for n in ("zeros_like", "ones_like", "empty_like", "full_like")}

# the submodules first: ``from . import linalg`` would otherwise find NumPy's
# through ``__getattr__``
from . import fft, linalg  # noqa: E402,F401

__getattr__ = _wrap.namespace_getattr(__name__, _np, globals(), _SEQ, _ON_TENSORS)

# the names used above, bound now
concatenate = __getattr__("concatenate")
transpose = __getattr__("transpose")
moveaxis = __getattr__("moveaxis")


def __dir__():
    return sorted(set(dir(_np)) | {n for n in globals() if not n.startswith("_")}
                  | {"__version__"})
