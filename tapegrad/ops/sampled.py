"""NumPy's functions of sampled data, as composites of differentiable ops:
differences and integrals (``diff``, ``ediff1d``, ``trapezoid``),
``gradient`` on grids, ``interp``, 1-D ``convolve`` / ``correlate``, and
``linspace`` / ``geomspace`` between tensor endpoints (``ops/numeric.py``
re-exports them with the rest of the composites).

Indices that depend on values (``interp``'s bins) are computed on plain
values, which a trace guards.
"""
import operator

import numpy as np

from . import elementwise as E
from . import reductions as Rd
from . import shape as S
from .axis_args import _axis, _ndim, _shape, _take
from .composite import _t
from .guarded import on_values
from .matrix import matmul


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
