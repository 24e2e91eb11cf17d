"""More of NumPy, as composites of differentiable ops: rotations, appends,
polynomials, ``cross``, ``sinc``, ``nan_to_num``, ``real`` / ``imag`` /
``conj`` / ``angle`` of real tensors, ``partition``, one-argument
``where``, and NumPy 2's ``dtype=`` / ``casting=`` keywords of the joining
functions.  The functions of sampled data (differences, integrals,
gradients, interpolation, convolution, ``linspace`` / ``geomspace``) are
``ops/sampled.py``; this module's namespace includes them, so that the NumPy
protocol and ``tg`` find every composite here.

Each is differentiable because its pieces are; values equal NumPy's (the
tests compare them, and the gradients against central differences, first
and second order).
"""
import operator

import numpy as np

from ..core.tensor import Tensor, _plain
from . import elementwise as E
from . import shape as S
from .axis_args import _axis, _ndim, _shape
from .composite import _t, hstack, vstack
from .guarded import on_values
from .sampled import (convolve, correlate, diff, ediff1d, geomspace, gradient,  # noqa: F401
                      interp, linspace, trapezoid)


# -- shapes ---------------------------------------------------------------------
def rot90(m, k=1, axes=(0, 1)):
    """``numpy.rot90``: rotate by 90 degrees ``k`` times in the plane ``axes``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.rot90(tg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([[2.0, 4.0],
            [1.0, 3.0]])
    """
    m = _t(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    nd = m.ndim
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == nd:
        raise ValueError("Axes must be different.")
    if not (-nd <= axes[0] < nd and -nd <= axes[1] < nd):
        raise ValueError(f"Axes={axes} out of range for array of ndim={nd}.")
    k = operator.index(k) % 4
    if k == 0:
        return E.positive(m)
    if k == 2:
        return S.flip(S.flip(m, axes[0]), axes[1])
    perm = list(range(nd))
    perm[axes[0]], perm[axes[1]] = perm[axes[1]], perm[axes[0]]
    if k == 1:
        return S.transpose(S.flip(m, axes[1]), perm)
    return S.flip(S.transpose(m, perm), axes[1])


def rollaxis(a, axis, start=0):
    """``numpy.rollaxis``: move ``axis`` until it lies before ``start``."""
    a = _t(a)
    n = a.ndim
    axis = _axis(axis, n, "rollaxis")
    if start < 0:
        start += n
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(
            f"rollaxis: start={start - n if start < 0 else start} must satisfy "
            f"{-n} <= start < {n + 1}")
    if axis < start:
        start -= 1
    if axis == start:
        return S.getitem(a, Ellipsis)  # NumPy's a[...]: a view
    perm = list(range(n))
    perm.remove(axis)
    perm.insert(start, axis)
    return S.transpose(a, perm)


def dsplit(ary, indices_or_sections):
    """``numpy.dsplit``: split along the third axis (arrays of 3 or more dimensions)."""
    if _ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return S.split(ary, indices_or_sections, axis=2)


def append(arr, values, axis=None):
    """``numpy.append``: flattened for ``axis=None``, else a concatenation.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.append(tg.tensor([[1.0, 2.0]]), [3.0])
    tensor([1.0, 2.0, 3.0])
    """
    if axis is None:
        return S.concatenate([S.ravel(_t(arr)), S.ravel(_t(values))], axis=0)
    return S.concatenate([arr, values], axis=axis)


def _castable(arrays, dtype, casting, who):
    for x in arrays:
        src = x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
        if not np.can_cast(src, dtype, casting):
            raise TypeError(f"{who}: cannot cast array data from {src!r} to "
                            f"{np.dtype(dtype)!r} according to the rule {casting!r}")


def _joined(fn, who):
    def join(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
        if out is not None:
            raise TypeError(f"{who}(..., out=...) cannot write into an array when tensors "
                            "are involved; drop out= and use the returned tensor")
        arrays = list(arrays)
        if dtype is not None:
            _castable(arrays, dtype, casting, who)
            arrays = [S.astype(x, dtype) if isinstance(x, Tensor) and x.dtype != dtype
                      else x if isinstance(x, Tensor) else np.asarray(x).astype(dtype)
                      for x in arrays]
        elif casting not in ("same_kind", "unsafe"):
            kinds = [x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype for x in arrays]
            _castable(arrays, np.result_type(*kinds), casting, who)
        return fn(arrays, axis)
    return join


_concatenate = _joined(S.concatenate, "concatenate")
_stack = _joined(S.stack, "stack")


def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """``numpy.concatenate``, with NumPy 2's ``dtype=`` and ``casting=``.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.concatenate([tg.tensor([1.0]), np.array([2])], dtype=np.float32)
    tensor([1.0, 2.0], dtype=float32)
    """
    if axis is None:
        arrays = [S.ravel(_t(x)) for x in arrays]
        axis = 0
    return _concatenate(arrays, axis, out, dtype=dtype, casting=casting)


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """``numpy.stack``, with NumPy 2's ``dtype=`` and ``casting=``."""
    return _stack(arrays, axis, out, dtype=dtype, casting=casting)


def _cast_all(tup, dtype, casting, who):
    tup = list(tup)
    if dtype is None:
        return tup
    _castable(tup, dtype, casting, who)
    return [S.astype(_t(x), dtype) for x in tup]


def vstack_(tup, *, dtype=None, casting="same_kind"):
    """``numpy.vstack`` (also ``numpy.row_stack``), with ``dtype=`` and ``casting=``."""
    return vstack(_cast_all(tup, dtype, casting, "vstack"))


def hstack_(tup, *, dtype=None, casting="same_kind"):
    """``numpy.hstack``, with ``dtype=`` and ``casting=``."""
    return hstack(_cast_all(tup, dtype, casting, "hstack"))


vstack_.__name__ = vstack_.__qualname__ = "vstack"
hstack_.__name__ = hstack_.__qualname__ = "hstack"
row_stack = vstack_


# -- values ---------------------------------------------------------------------
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``numpy.nan_to_num``: NaN, +inf and -inf replaced (by default with 0
    and the largest finite numbers of the dtype); the gradient passes at the
    finite entries and is 0 at the replaced ones.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.nan_to_num(tg.tensor([np.nan, 1.0, np.inf]), posinf=9.0)
    tensor([0.0, 1.0, 9.0])
    """
    x = _t(x)
    if x.dtype.kind not in "f":
        return E.positive(x) if not copy else S.astype(x, x.dtype)
    info = np.finfo(x.dtype)
    hi = info.max if posinf is None else posinf
    lo = info.min if neginf is None else neginf
    out = E.where(E.not_equal(x, x), nan, x)
    out = E.where(E.equal(x, np.inf), hi, out)
    out = E.where(E.equal(x, -np.inf), lo, out)
    return out if out.dtype == x.dtype else S.astype(out, x.dtype)


_PI = float(np.pi)
#: Taylor coefficients of sin(t) / t in t^2, for |t| < 0.1 (error below 1e-21)
_SINC_SERIES = (1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800)


def sinc(x):
    """``numpy.sinc``: ``sin(pi x) / (pi x)``, 1 at 0.

    Near 0 it is the Taylor series (so the first and second derivatives
    there are exact: 0 and ``-pi^2 / 3``), elsewhere the quotient.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.sinc(tg.tensor([0.0, 0.5]))
    tensor([1.0, 0.63661977])
    """
    x = _t(x)
    t = _PI * x
    small = E.less(E.absolute(t), 0.1)
    ts = E.where(small, t, 0.0)
    t2 = ts * ts
    series = _SINC_SERIES[-1]
    for c in reversed(_SINC_SERIES[:-1]):
        series = series * t2 + c
    tb = E.where(small, 1.0, t)
    return E.where(small, series, E.sin(tb) / tb)



def polyval(p, x):
    """``numpy.polyval``: the polynomial with coefficients ``p`` (highest
    power first) at ``x``, by Horner's rule; differentiable in both.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.polyval([3.0, 0.0, 1.0], tg.tensor([2.0]))
    tensor([13.0])
    """
    p = _t(p)
    if p.ndim != 1:
        raise TypeError("polyval: p must be a 1-D sequence of coefficients")
    y = E.multiply(_t(x), 0.0)
    for i in range(p.shape[0]):
        y = y * x + p[i]
    return y


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """``numpy.cross``: the cross product of 3-vectors (a 2-vector's third
    component is 0; two 2-vectors give the scalar z component), broadcast
    over the other axes, differentiable in both.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.cross(tg.tensor([1.0, 0.0, 0.0]), [0.0, 1.0, 0.0])
    tensor([0.0, 0.0, 1.0])
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a = S.moveaxis(_t(a), _axis(axisa, _ndim(a), "cross"), -1)
    b = S.moveaxis(_t(b), _axis(axisb, _ndim(b), "cross"), -1)
    na, nb = a.shape[-1], b.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    a0, a1 = a[..., 0], a[..., 1]
    b0, b1 = b[..., 0], b[..., 1]
    z = a0 * b1 - a1 * b0
    if na == 2 and nb == 2:
        return z
    a2 = a[..., 2] if na == 3 else 0.0
    b2 = b[..., 2] if nb == 3 else 0.0
    x = a1 * b2 - (a2 * b1 if na == 3 else 0.0 * b1)
    y = (a2 * b0 if na == 3 else 0.0 * b0) - a0 * b2
    shape = np.broadcast_shapes(x.shape, y.shape, z.shape)
    out = S.stack([S.broadcast_to(c, shape) for c in (x, y, z)], axis=-1)
    return S.moveaxis(out, -1, _axis(axisc, len(shape) + 1, "cross"))

# -- np.where with one argument -------------------------------------------------------
def where(condition, x=np._NoValue, y=np._NoValue):
    """``numpy.where``: ``where(cond, x, y)`` differentiable in ``x`` and
    ``y`` (:func:`tapegrad.where`); ``where(cond)`` is ``np.nonzero(cond)``,
    a tuple of index arrays (plain values).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.where(tg.tensor([0.0, 2.0, 3.0]) > 1)
    (array([1, 2]),)
    """
    if x is np._NoValue and y is np._NoValue:
        return on_values(np.nonzero, condition)
    if x is np._NoValue or y is np._NoValue:
        raise ValueError("either both or neither of x and y should be given")
    return E.where(condition, x, y)



# -- the complex-number functions on real tensors ------------------------------------
def _real_tensor(x, who):
    x = _t(x)
    if x.dtype.kind == "c":
        raise TypeError(f"{who}: complex tensors are not supported; this takes real ones")
    return x


def real(val):
    """``numpy.real`` of a real tensor: the tensor itself (NumPy's real part
    of a real array is a view of all of it), derivative 1.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([1.0, -2.0])
    >>> np.real(x) is x
    True
    """
    return _real_tensor(val, "real")


def real_if_close(a, tol=100):
    """``numpy.real_if_close`` of a real tensor: the tensor itself, as NumPy
    returns a real array unchanged (a complex tensor's is in
    ``complex_tensor``).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([1.0, -2.0])
    >>> np.real_if_close(x) is x
    True
    """
    return _real_tensor(a, "real_if_close")


def imag(val):
    """``numpy.imag`` of a real tensor: zeros of its shape and dtype, a
    constant (no gradient flows through it).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.imag(tg.tensor([1.0, -2.0], requires_grad=True))
    tensor([0.0, 0.0])
    """
    x = _real_tensor(val, "imag")
    return _plain(np.zeros(_shape(x), x.dtype))


def conjugate(x):
    """``numpy.conjugate`` (``numpy.conj``) of a real tensor: a copy,
    derivative 1.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.conj(tg.tensor([1.0, -2.0], requires_grad=True))
    tensor([1.0, -2.0], grad_fn=<PositiveBackward>)
    """
    return E.positive(_real_tensor(x, "conjugate"))


def angle(z, deg=False):
    """``numpy.angle`` of a real tensor: pi (180 with ``deg=True``) where
    the sign bit is set (negative numbers and -0.0, as NumPy's
    ``arctan2(0, x)``), else 0, NaN at NaN; derivative 0 (the result is on
    the graph, as ``sign``'s is).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.angle(tg.tensor([-2.0, 0.0, 3.0]))
    tensor([3.14159265, 0.0, 0.0])
    """
    x = _real_tensor(z, "angle")
    # pi (or 180) as NumPy rounds it in the result's dtype (float16's 180 is 179.875)
    half = np.angle(np.array([-1], x.dtype), deg=deg)
    negative = E.less(E.copysign(1.0, x), 0.0)
    # sign(x) * 0 is 0 with derivative 0, and NaN at NaN
    out = E.where(negative, half[0], 0.0) + E.sign(x) * 0.0
    return out if out.dtype == half.dtype else S.astype(out, half.dtype)


# -- partition -----------------------------------------------------------------------
def _partition_index(a, kth, axis, kind):
    """Indices along ``axis`` that gather ``numpy.partition(a, kth, axis)``
    from ``a`` (of ``a.ravel()`` when ``axis`` is None): NumPy's own order,
    which ``argpartition``'s indices do not always give."""
    if axis is None:
        a, axis = np.ravel(a), -1
    p = np.partition(a, kth, axis=axis, kind=kind)
    # the k-th smallest of a and of p are the same value: match them by rank
    ra = np.argsort(a, axis=axis, kind="stable")
    rp = np.argsort(p, axis=axis, kind="stable")
    idx = np.empty_like(ra)
    np.put_along_axis(idx, rp, ra, axis=axis)
    return idx


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """``numpy.partition``: NumPy's values, in NumPy's order, differentiable
    by a gather (each output element's gradient goes to the input element
    it is); ``kth`` an int or a sequence, any axis, ``axis=None`` flattens.

    The indices are computed on the values (in a trace, a guard: a replay
    whose values order differently traces again).  ``numpy.argpartition``
    gives plain indices.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([3.0, 1.0, 2.0], requires_grad=True)
    >>> y = np.partition(x, 1)
    >>> y
    tensor([1.0, 2.0, 3.0], grad_fn=<TakeAlongAxisBackward>)
    >>> (y[0] * 10.0).backward()
    >>> x.grad
    tensor([0.0, 10.0, 0.0])
    """
    if order is not None:
        raise TypeError("partition: order= (structured arrays) is not supported on tensors")
    a = _t(a)
    idx = on_values(_partition_index, a, kth, axis, kind)
    if axis is None:
        return S.getitem(S.ravel(a), idx)
    return S.take_along_axis(a, idx, axis)
