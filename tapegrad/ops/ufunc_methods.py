"""The methods of NumPy's ufuncs on tensors -- ``reduce``, ``accumulate``,
``outer`` and ``at`` -- for every ufunc tapegrad differentiates.

``add.reduce`` is ``sum`` (``multiply``/``maximum``/``minimum`` are
``prod``/``max``/``min``), ``add.accumulate`` ``cumsum``,
``multiply.accumulate`` ``cumprod``; the other binary ufuncs reduce and
accumulate as NumPy defines it, one application after the other along the
axis (``subtract.reduce`` is ``a0 - a1 - a2 ...``).  ``outer`` applies the
ufunc to every pair.  ``at`` writes into the tensor in place, each index as
often as it occurs, in order (``add.at`` is a scatter-add): a recorded write
as ``t[i] = v`` is.
"""
import numpy as np

from ..core.tensor import Tensor, _plain
from . import reductions as Rd
from . import shape as S
from .composite import _t

_NO_VALUE = np._NoValue


def _refuse_out(kwargs, name):
    if kwargs.pop("out", None) is not None:
        raise TypeError(f"{name}(..., out=...) cannot write into arrays when tensors are "
                        "involved (a recorded value must not change); drop out= and use "
                        "the returned tensor")


def _left_over(kwargs, name):
    if kwargs:
        raise TypeError(f"{name}: keyword(s) {sorted(kwargs)} are not supported on tensors")


def _cast(x, dtype):
    if dtype is None:
        return _t(x)
    return S.astype(_t(x), dtype)


#: comparisons give booleans: NumPy has no float loop to reduce or accumulate them
_COMPARISONS = {np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal}
#: NumPy's reduce of these over a contiguous axis is not the left-to-right
#: application its accumulate (and the definition) gives, so no composite can
#: give NumPy's number: refused rather than different
_UNFOLDED = {np.power, np.arctan2}


def _binary(ufunc, fn, name):
    if fn is None or ufunc.nin != 2:
        raise TypeError(f"{name} is only for binary ufuncs tapegrad differentiates; "
                        "pass t.numpy() to compute it on plain values")


def _axis0(a, axis, name):
    nd = a.ndim
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(f"{name}: axis {axis} is out of bounds for array of "
                                      f"dimension {nd}")
    return axis % nd


def reduce(ufunc, fn, fast, name, array, axis=0, dtype=None, keepdims=False,
           initial=_NO_VALUE, where=True):
    """``ufunc.reduce``: the reduction's own op for add, multiply, maximum
    and minimum (any axes, ``initial``, ``where``), else the ufunc applied
    along one axis, left to right."""
    a = _cast(array, dtype)
    if fast is not None:
        kw = {}
        if initial is not _NO_VALUE and initial is not None:
            kw["initial"] = initial
        if where is not True:
            kw["where"] = where
        return fast(a, axis=axis, keepdims=keepdims, **kw)
    _binary(ufunc, fn, name)
    if ufunc in _UNFOLDED or ufunc in _COMPARISONS:
        raise TypeError(f"{name} is not supported on tensors (NumPy's value is not the "
                        f"left-to-right {ufunc.__name__} of the elements); write the loop, "
                        f"or use {ufunc.__name__}.accumulate(t, axis)[-1] along axis 0")
    if where is not True:
        raise TypeError(f"{name}(..., where=...) is supported for add, multiply, maximum "
                        "and minimum only")
    if axis is None or isinstance(axis, tuple):
        axes = range(a.ndim) if axis is None else axis
        if len(tuple(axes)) > 1:
            raise ValueError(f"reduction operation '{ufunc.__name__}' is not reorderable, "
                             "so at most one axis may be specified")
        axis = tuple(axes)[0] if len(tuple(axes)) else None
        if axis is None:
            return a
    axis = _axis0(a, axis, name)
    rows = S.unbind(S.moveaxis(a, axis, 0), 0) if a.shape[axis] else []
    if initial is not _NO_VALUE and initial is not None:
        acc = fn(_plain(np.full(a.shape[:axis] + a.shape[axis + 1:], initial, a.dtype)),
                 rows[0]) if rows else _plain(np.full(
                     a.shape[:axis] + a.shape[axis + 1:], initial, a.dtype))
        rows = rows[1:]
    elif not rows:
        raise ValueError(f"zero-size array to reduction operation {ufunc.__name__} which "
                         "has no identity")
    else:
        acc, rows = rows[0], rows[1:]
    for r in rows:
        acc = fn(acc, r)
    return S.expand_dims(acc, axis) if keepdims else acc


def accumulate(ufunc, fn, name, array, axis=0, dtype=None):
    """``ufunc.accumulate``: ``cumsum`` and ``cumprod`` for add and
    multiply, else the running application of the ufunc along ``axis``."""
    _binary(ufunc, fn, name)
    if ufunc in _COMPARISONS:
        raise TypeError(f"{name}: comparisons cannot be accumulated on tensors")
    a = _cast(array, dtype)
    if a.ndim == 0:
        raise TypeError("cannot accumulate on a scalar")
    axis = _axis0(a, axis, name)
    if ufunc is np.add:
        return Rd.cumsum(a, axis=axis)
    if ufunc is np.multiply:
        return Rd.cumprod(a, axis=axis)
    if a.shape[axis] == 0:
        return a
    rows = S.unbind(S.moveaxis(a, axis, 0), 0)
    acc = [rows[0]]
    for r in rows[1:]:
        acc.append(fn(acc[-1], r))
    out = S.stack(acc, axis=0)
    return S.moveaxis(out, 0, axis) if axis else out


def outer(ufunc, fn, name, A, B, dtype=None):
    """``ufunc.outer``: ``ufunc(A[..., None, ...], B)``, shape ``A.shape + B.shape``."""
    _binary(ufunc, fn, name)
    A, B = _cast(A, dtype), _cast(B, dtype)
    return fn(S.reshape(A, A.shape + (1,) * B.ndim), B)


def at(ufunc, fn, name, a, indices, b=None):
    """``ufunc.at``: ``a[indices] = ufunc(a[indices], b)`` in place, an index
    that occurs k times applied k times in order, as NumPy's unbuffered
    loop; returns None."""
    if fn is None:
        raise TypeError(f"tapegrad cannot differentiate {name}; pass t.numpy() to compute "
                        "it on plain values")
    if not isinstance(a, Tensor):
        raise TypeError(f"{name}: the array written into must be the tensor (an ndarray "
                        "cannot hold a recorded value); write into a tensor, or pass "
                        "b.numpy() to compute on plain values")
    if (b is None) != (ufunc.nin == 1):
        raise ValueError(f"{name}: {'a second operand b is' if ufunc.nin == 2 else 'no b is'} "
                         "needed for this ufunc")
    if isinstance(indices, Tensor):
        indices = indices._data
    elif isinstance(indices, tuple):
        indices = tuple(i._data if isinstance(i, Tensor) else i for i in indices)
    pos = np.arange(a.size, dtype=np.intp).reshape(a.shape)[indices]
    p = pos.ravel()
    if p.size == 0:
        return None
    if b is not None:
        bt = _t(b)
        bl = np.broadcast_to(np.arange(bt.size, dtype=np.intp).reshape(bt.shape),
                             pos.shape).ravel()
        bflat = S.ravel(bt)
    # which occurrence of its position each index is: the k-th occurrences of
    # all positions form one round, a gather and a scatter without repeats
    order = np.argsort(p, kind="stable")
    sp = p[order]
    start = np.r_[True, sp[1:] != sp[:-1]]
    first = np.maximum.accumulate(np.where(start, np.arange(sp.size), 0))
    rank = np.empty_like(p)
    rank[order] = np.arange(sp.size) - first
    cur = S.ravel(a)
    for r in range(int(rank.max()) + 1):
        sel = rank == r
        pr = p[sel]
        old = S.getitem(cur, pr)
        new = fn(old) if b is None else fn(old, S.getitem(bflat, bl[sel]))
        cur = S.index_put(cur, pr, new)
    a.copy_(S.reshape(cur, a.shape))
    return None


def method(ufunc, name, fn, fast, method_name, inputs, kwargs):
    """``ufunc.<method_name>(*inputs, **kwargs)`` with tensors among the inputs."""
    full = f"{name}.{method_name}"
    if (fn is None and fast is None) or ufunc.signature is not None or ufunc.nout != 1 \
            or method_name not in ("reduce", "accumulate", "outer", "at"):
        return NotImplemented  # the caller's error names the ufunc and method
    if method_name != "at":
        _refuse_out(kwargs, full)
    if method_name == "reduce":
        return reduce(ufunc, fn, fast, full, *inputs, **kwargs)
    if method_name == "accumulate":
        return accumulate(ufunc, fn, full, *inputs, **kwargs)
    if method_name == "outer":
        return outer(ufunc, fn, full, *inputs, **kwargs)
    return at(ufunc, fn, full, *inputs, **kwargs)
