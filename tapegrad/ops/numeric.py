"""More of NumPy, as composites of differentiable ops: rotations, appends,
differences and integrals, polynomials, 1-D convolution and interpolation,
``real`` / ``imag`` / ``conj`` / ``angle`` of real tensors, ``partition``,
``linspace`` / ``geomspace`` between tensor endpoints, and NumPy 2's
``dtype=`` / ``casting=`` keywords of the joining functions.

Each is differentiable because its pieces are; values equal NumPy's (the
tests compare them, and the gradients against central differences, first
and second order).  Indices that depend on values (``interp``'s bins) are
computed on plain values, which a trace guards.
"""
import operator

import numpy as np

from ..tensor import Tensor, _plain
from . import elementwise as E
from . import reductions as Rd
from . import shape as S
from .composite import _t, hstack, vstack
from .guarded import on_values
from .matrix import matmul


def _shape(a):
    return np.shape(a._data if isinstance(a, Tensor) else a)


def _ndim(a):
    return len(_shape(a))


def _take(a, axis, start=None, stop=None, step=None):
    """``a[..., start:stop:step, ...]`` on ``axis``."""
    key = [slice(None)] * _ndim(a)
    key[axis] = slice(start, stop, step)
    return S.getitem(a, tuple(key))


def _axis(axis, ndim, who):
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"{who}: axis {axis} is out of bounds for array of "
                                      f"dimension {ndim}")
    return axis % ndim


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
        return E.positive(a)
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


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """``numpy.diff``: the ``n``-th forward difference along ``axis``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.diff(tg.tensor([1.0, 4.0, 9.0]), prepend=0.0)
    tensor([1.0, 3.0, 5.0])
    """
    a = _t(a)
    if n == 0:
        return a
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = _axis(axis, a.ndim, "diff")
    parts = []
    for extra in (prepend, append):
        if extra is np._NoValue:
            parts.append(None)
            continue
        if _ndim(extra) == 0:
            shape = list(a.shape)
            shape[axis] = 1
            extra = S.broadcast_to(_t(extra), tuple(shape))
        parts.append(extra)
    if parts[0] is not None or parts[1] is not None:
        a = S.concatenate([p for p in (parts[0], a, parts[1]) if p is not None], axis=axis)
    for _ in range(n):
        a = _take(a, axis, 1, None) - _take(a, axis, None, -1)
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """``numpy.ediff1d``: differences of the flattened array, with values
    to put before and after."""
    d = diff(S.ravel(_t(ary)))
    parts = ([S.ravel(_t(to_begin))] if to_begin is not None else []) + [d] + \
        ([S.ravel(_t(to_end))] if to_end is not None else [])
    return S.concatenate(parts, axis=0) if len(parts) > 1 else d


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """``numpy.trapezoid``: the trapezoidal rule along ``axis``,
    differentiable in ``y`` and in the sample points ``x``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.trapezoid(tg.tensor([1.0, 2.0, 3.0]), dx=0.5)
    tensor(2.0)
    """
    y = _t(y)
    nd = y.ndim
    axis = _axis(axis, nd, "trapezoid")
    if x is None:
        d = dx
    else:
        d = diff(x, axis=-1 if _ndim(x) == 1 else axis)
        if _ndim(d) == 1 and nd > 1:
            shape = [1] * nd
            shape[axis] = -1
            d = S.reshape(d, shape)
    mid = _take(y, axis, 1, None) + _take(y, axis, None, -1)
    return Rd.sum(d * mid / 2.0, axis=axis)


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


# -- 1-D convolution --------------------------------------------------------------
def _check_1d(a, v, who):
    if _ndim(a) != 1 or _ndim(v) != 1:
        raise ValueError(f"{who}: object too deep for desired array (1-D inputs only)")
    if _shape(a)[0] == 0:
        raise ValueError(f"{who}: a cannot be empty")
    if _shape(v)[0] == 0:
        raise ValueError(f"{who}: v cannot be empty")


#: convolve: the largest Toeplitz matrix (elements) it builds, and the
#: shorter operand's length up to which it sums shifted copies instead
TOEPLITZ_MAX = 1 << 22
SHIFTS_MAX = 64


def convolve(a, v, mode="full"):
    """``numpy.convolve`` of two 1-D sequences (``mode`` 'full', 'same' or
    'valid'), differentiable in both.

    With a short operand (at most ``SHIFTS_MAX`` elements) or a Toeplitz
    matrix that would pass ``TOEPLITZ_MAX`` elements the full convolution is
    a sum of one shifted, scaled copy of the longer sequence per element of
    the shorter (``min(len(a), len(v))`` elementwise records); otherwise one
    gather (the shifted copies of the longer sequence as the rows of a
    Toeplitz matrix) and one matrix-vector product.  Measured, forward and
    backward: 1e5 samples with 31 taps 22 ms by shifts (57 ms by the
    matrix); 1e3 with 1e3, 24 ms by the matrix (74 ms by shifts).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.convolve(tg.tensor([1.0, 2.0, 3.0]), [0.0, 1.0, 0.5])
    tensor([0.0, 1.0, 2.5, 4.0, 1.5])
    """
    _check_1d(a, v, "convolve")
    n, m = _shape(a)[0], _shape(v)[0]
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"mode must be one of 'full', 'same', or 'valid' (got {mode!r})")
    long, short = (_t(a), _t(v)) if n >= m else (_t(v), _t(a))
    big, small = max(n, m), min(n, m)
    if small > SHIFTS_MAX and (big + small - 1) * small <= TOEPLITZ_MAX:
        # rows k of the Toeplitz matrix: long[k - j] for j < small (0 outside)
        padded = S.pad(long, ((small - 1, small - 1),))
        idx = np.arange(big + small - 1)[:, None] + (small - 1 - np.arange(small))[None, :]
        full = matmul(padded[idx], short)
    else:
        full = None
        for k in range(small):
            term = S.pad(long * short[k], ((k, small - 1 - k),))
            full = term if full is None else full + term
    if mode == "full":
        return full
    if mode == "same":
        start = (small - 1) // 2
        return full[start:start + big]
    return full[small - 1:big]


def correlate(a, v, mode="valid"):
    """``numpy.correlate`` of two real 1-D sequences: ``convolve(a, v[::-1],
    mode)``, and for a ``v`` longer than ``a`` the reverse of
    ``correlate(v, a, mode)``, as NumPy computes it (the two differ in the
    centring of 'same').

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.correlate(tg.tensor([1.0, 2.0, 3.0]), [0.0, 1.0, 0.5])
    tensor([3.5])
    """
    _check_1d(a, v, "correlate")
    if _shape(a)[0] < _shape(v)[0]:
        return S.flip(convolve(v, S.flip(_t(a), 0), mode), 0)
    return convolve(a, S.flip(_t(v), 0), mode)


# -- interpolation and differences on grids ----------------------------------------
def interp(x, xp, fp, left=None, right=None, period=None):
    """``numpy.interp``: piecewise-linear interpolation, differentiable in
    ``x``, ``fp`` and the sample points ``xp`` (and tensor ``left`` / ``right``).

    The bins are found on the values (``np.searchsorted``, a guard in a
    trace); within a bin the value is ``fp[i] + (x - xp[i]) * slope``, so the
    derivative in ``x`` is the bin's slope (at a sample point, the slope of
    the bin to its right).

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([0.25, 1.5], requires_grad=True)
    >>> y = tg.interp(x, [0.0, 1.0, 2.0], [0.0, 2.0, 3.0])
    >>> y
    tensor([0.5, 2.5], grad_fn=<WhereBackward>)
    >>> y.sum().backward()
    >>> x.grad
    tensor([2.0, 1.0])
    """
    if period is not None:
        raise TypeError("interp(period=...) is not supported on tensors; reduce x "
                        "modulo the period and extend xp, fp by one period instead")
    # NumPy computes (and returns) float64 whatever the inputs' dtypes
    xt, xpt, fpt = (S.astype(v, np.float64) if v.dtype != np.float64 else v
                    for v in (_t(x), _t(xp), _t(fp)))
    if xpt.ndim != 1 or fpt.ndim != 1:
        raise ValueError("object too deep for desired array (xp and fp must be 1-D)")
    n = xpt.shape[0]
    if n != fpt.shape[0]:
        raise ValueError("fp and xp are not of the same length.")
    if n == 0:
        raise ValueError("array of sample points is empty")
    lo_val = fpt[0] if left is None else left
    hi_val = fpt[-1] if right is None else right
    if n == 1:
        inside = fpt[0] + 0.0 * xt
    else:
        j = on_values(np.searchsorted, xpt, xt, side="right")
        j = np.clip(np.asarray(j) - 1, 0, n - 2)
        x0, x1 = xpt[j], xpt[j + 1]
        f0, f1 = fpt[j], fpt[j + 1]
        inside = f0 + (xt - x0) * ((f1 - f0) / (x1 - x0))
        # NumPy gives fp[-1] exactly at xp[-1]
        inside = E.where(E.equal(xt, xpt[-1]), fpt[-1], inside)
    out = E.where(E.less(xt, xpt[0]), lo_val, inside)
    return E.where(E.greater(xt, xpt[-1]), hi_val, out)


def _edges(f, axis, h0, h1, hn2, hn1, edge_order):
    """The one-sided differences at both ends of ``axis``."""
    f0, f1 = _take(f, axis, 0, 1), _take(f, axis, 1, 2)
    fa, fb = _take(f, axis, -2, -1), _take(f, axis, -1, None)
    if edge_order == 1:
        return (f1 - f0) / h0, (fb - fa) / hn1
    f2, fc = _take(f, axis, 2, 3), _take(f, axis, -3, -2)
    # second-order one-sided differences (non-uniform grid in general)
    a = -(2.0 * h0 + h1) / (h0 * (h0 + h1))
    b = (h0 + h1) / (h0 * h1)
    c = -h0 / (h1 * (h0 + h1))
    first = a * f0 + b * f1 + c * f2
    a = hn1 / (hn2 * (hn2 + hn1))
    b = -(hn1 + hn2) / (hn2 * hn1)
    c = (2.0 * hn1 + hn2) / (hn1 * (hn2 + hn1))
    last = a * fc + b * fa + c * fb
    return first, last


def _gradient_1(f, axis, spacing, edge_order):
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, "
                         "at least (edge_order + 1) elements are required.")
    nd = f.ndim
    if _ndim(spacing) == 0:
        h = spacing
        interior = (_take(f, axis, 2, None) - _take(f, axis, None, -2)) / (2.0 * h)
        first, last = _edges(f, axis, h, h, h, h, edge_order)
    else:
        xs = _t(spacing)
        if xs.ndim != 1 or xs.shape[0] != n:
            raise ValueError("when 1d, distances must match the length of the "
                             "corresponding dimension")
        dx = diff(xs)
        shape = [1] * nd
        shape[axis] = -1
        h1 = S.reshape(dx[:-1], shape)
        h2 = S.reshape(dx[1:], shape)
        a = -h2 / (h1 * (h1 + h2))
        b = (h2 - h1) / (h1 * h2)
        c = h1 / (h2 * (h1 + h2))
        interior = (a * _take(f, axis, None, -2) + b * _take(f, axis, 1, -1)
                    + c * _take(f, axis, 2, None))
        hn = dx.shape[0]
        first, last = _edges(f, axis, dx[0], dx[1] if hn > 1 else dx[0],
                             dx[-2] if hn > 1 else dx[-1], dx[-1], edge_order)
    return S.concatenate([first, interior, last], axis=axis)


def gradient(f, *varargs, axis=None, edge_order=1):
    """``numpy.gradient``: second-order central differences inside, first- or
    second-order one-sided differences at the ends (``edge_order``), with
    scalar spacings or 1-D coordinate arrays (uniform or not); differentiable
    in ``f`` and in tensor spacings.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.gradient(tg.tensor([1.0, 4.0, 9.0, 16.0]), 2.0)
    tensor([1.5, 2.0, 3.0, 3.5])
    """
    f = _t(f)
    nd = f.ndim
    if axis is None:
        axes = list(range(nd))
    elif isinstance(axis, (tuple, list)):
        axes = [_axis(a, nd, "gradient") for a in axis]
    else:
        axes = [_axis(axis, nd, "gradient")]
    if len(set(axes)) != len(axes):
        raise ValueError("duplicate value in 'axis'")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and _ndim(varargs[0]) == 0:
        spacings = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError("invalid number of arguments")
    out = [_gradient_1(f, ax, h, edge_order) for ax, h in zip(axes, spacings)]
    return out[0] if len(out) == 1 else tuple(out)


# -- sequences between tensor endpoints ----------------------------------------------
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0,
             *, device=None):
    """``numpy.linspace``, differentiable in tensor ``start`` and ``stop``
    (scalars or arrays: the samples run along the new ``axis``).

    Examples
    --------
    >>> import tapegrad as tg
    >>> a = tg.tensor(1.0, requires_grad=True)
    >>> tg.linspace(a, 2.0, 3)
    tensor([1.0, 1.5, 2.0], grad_fn=<CatBackward>)
    """
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = _t(start), _t(stop)
    if start.dtype.kind != "f":
        start = S.astype(start, np.float64)
    div = (num - 1) if endpoint else num
    shape = np.broadcast_shapes(start.shape, stop.shape)
    start = S.broadcast_to(start, shape)
    stop = S.broadcast_to(stop, shape)
    delta = stop - start
    dt = np.result_type(start.dtype, stop.dtype, 1.0)  # float32 endpoints stay float32
    steps = np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * len(shape))
    if div > 0:
        step = delta / div
        y = steps * step + start
    else:
        step = np.nan * delta
        y = steps * delta + start
    if endpoint and num > 1:
        y = S.concatenate([y[:-1], S.expand_dims(stop, 0)], axis=0)
    if axis != 0:
        y = S.moveaxis(y, 0, axis)
    if dtype is not None:
        if np.issubdtype(dtype, np.integer):  # NumPy rounds down, not toward zero
            y = E.floor(y)
        y = S.astype(y, dtype)
    return (y, step) if retstep else y


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """``numpy.geomspace``: numbers spaced evenly on a log scale between
    tensor (real, nonzero, same-sign) ``start`` and ``stop``; the first and
    last equal ``start`` and ``stop`` exactly, as in NumPy.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.geomspace(tg.tensor(1.0), 1000.0, 4)
    tensor([1.0, 10.0, 100.0, 1000.0])
    """
    start, stop = _t(start), _t(stop)
    sv, tv = np.asarray(start._data), np.asarray(stop._data)
    if np.any(sv == 0) or np.any(tv == 0):
        raise ValueError("Geometric sequence cannot include zero")
    if np.iscomplexobj(sv) or np.iscomplexobj(tv):
        raise TypeError("geomspace: complex endpoints are not supported on tensors")
    shape = np.broadcast_shapes(start.shape, stop.shape)
    start = S.broadcast_to(start, shape)
    stop = S.broadcast_to(stop, shape)
    # both negative: the sequence of their absolute values, negated
    sign = on_values(lambda a, b: np.where((np.sign(a) == np.sign(b)) & (a < 0), -1.0, 1.0),
                     start, stop)
    if np.any(np.sign(sv) != np.sign(tv)):
        raise ValueError("geomspace: start and stop of different signs need complex "
                         "numbers, which tapegrad does not support")
    ls = E.log10(start * sign)
    le = E.log10(stop * sign)
    y = E.power(10.0, linspace(ls, le, num, endpoint=endpoint)) * sign
    if num > 0:
        parts = [S.expand_dims(start, 0), y[1:]]
        if endpoint and num > 1:
            parts = [S.expand_dims(start, 0), y[1:-1], S.expand_dims(stop, 0)]
        y = S.concatenate(parts, axis=0)
    if axis != 0:
        y = S.moveaxis(y, 0, axis)
    if dtype is not None:
        y = S.astype(y, dtype)
    return y


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
