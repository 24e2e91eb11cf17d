"""NumPy's statistics on tensors, as composites of differentiable ops:
``median``, ``quantile`` / ``percentile`` (every method NumPy has),
``cov``, ``corrcoef``, ``polyfit`` and ``histogram``.

An order statistic is a sort followed by a gather, so the gradient of a
quantile goes to the one or two sorted elements it interpolates between
(weights ``1 - g`` and ``g``), as PyTorch and JAX give it; a slice that holds
a NaN gives NaN, as NumPy's.  The positions and weights are NumPy's own
formulas, evaluated on plain numbers; the values equal NumPy's.
"""
import operator
import warnings

import numpy as np

from ..core.tensor import Tensor, _plain
from . import composite as K
from . import elementwise as E
from . import matrix as L
from . import reductions as Rd
from . import shape as S
from .composite import _t
from .guarded import on_values


def _refuse(who, **given):
    for name, (value, default) in given.items():
        if value is not default and not (default is None and value is None):
            raise TypeError(f"{who}({name}=...) is not supported on tensors; "
                            f"leave {name} at its default ({default!r})")


def _as_float(a):
    """a as a tensor of floats (integers and booleans become float64, as
    NumPy's quantiles compute them)."""
    a = _t(a)
    if a.dtype.kind == "c":
        raise TypeError("a must be an array of real numbers")
    return a if a.dtype.kind == "f" else S.astype(a, np.float64)


def _to_front(a, axis, who):
    """``a`` with the reduced axes moved to the front and merged into one,
    and the shape a ``keepdims`` result takes."""
    if axis is None:
        return S.reshape(a, (-1,)), (1,) * a.ndim
    axes = Rd.normalize_axis(axis, a.ndim, who)
    rest = [i for i in range(a.ndim) if i not in axes]
    moved = S.transpose(a, list(axes) + rest) if list(axes) + rest != list(range(a.ndim)) else a
    n = int(np.prod([a.shape[i] for i in axes]))
    kept = tuple(1 if i in axes else a.shape[i] for i in range(a.ndim))
    return S.reshape(moved, (n,) + tuple(a.shape[i] for i in rest)), kept


def _keep(out, lead, kept):
    """Reshape a result of shape ``lead + rest`` to ``lead + kept``."""
    return S.reshape(out, tuple(lead) + kept)


# -- quantiles ---------------------------------------------------------------------------
def _virtual_index(n, q, method):
    """NumPy's virtual index of quantile ``q`` among ``n`` sorted values."""
    def hyndman_fan(alpha, beta):
        return n * q + (alpha + q * (1 - alpha - beta)) - 1

    def boundaries(index, take_previous):
        previous = np.floor(index)
        gamma = index - previous
        out = np.where(take_previous(gamma, index), previous, previous + 1).astype(np.intp)
        out[out < 0] = 0
        return out

    return {
        "inverted_cdf": lambda: boundaries(n * q - 1, lambda g, _: g == 0),
        "averaged_inverted_cdf": lambda: n * q - 1,
        "closest_observation": lambda: boundaries(
            n * q - 1 - 0.5, lambda g, i: (g == 0) & (np.floor(i) % 2 == 1)),
        "interpolated_inverted_cdf": lambda: hyndman_fan(0, 1),
        "hazen": lambda: hyndman_fan(0.5, 0.5),
        "weibull": lambda: hyndman_fan(0, 0),
        "linear": lambda: (n - 1) * q,
        "median_unbiased": lambda: hyndman_fan(1 / 3.0, 1 / 3.0),
        "normal_unbiased": lambda: hyndman_fan(3 / 8.0, 3 / 8.0),
        "lower": lambda: np.floor((n - 1) * q).astype(np.intp),
        "higher": lambda: np.ceil((n - 1) * q).astype(np.intp),
        "midpoint": lambda: 0.5 * (np.floor((n - 1) * q) + np.ceil((n - 1) * q)),
        "nearest": lambda: np.around((n - 1) * q).astype(np.intp),
    }[method]()


METHODS = ("inverted_cdf", "averaged_inverted_cdf", "closest_observation",
           "interpolated_inverted_cdf", "hazen", "weibull", "linear", "median_unbiased",
           "normal_unbiased", "lower", "higher", "midpoint", "nearest")


def _positions(n, q, method):
    """``(previous, next, gamma)``: the sorted positions a quantile
    interpolates between and its weight (``gamma`` None: no interpolation,
    ``previous`` is the position)."""
    vi = np.asarray(_virtual_index(n, q, method))
    if vi.dtype.kind in "iu":
        return vi, None, None
    prev = np.array(np.floor(vi))
    nxt = np.array(prev + 1)
    above = vi >= n - 1
    prev[above] = nxt[above] = -1
    below = vi < 0
    prev[below] = nxt[below] = 0
    gamma = np.asarray(vi - prev)
    if method == "averaged_inverted_cdf":
        gamma = np.where(gamma == 0, 0.5, 1.0)
    elif method == "midpoint":
        gamma = np.where(vi % 1 == 0, 0.0, 0.5)
    return prev.astype(np.intp), nxt.astype(np.intp), gamma


def _quantile(a, q, axis, method, keepdims, weak, who):
    if method not in METHODS:
        raise ValueError(f"{method!r} is not a valid method. Use one of: {METHODS}")
    a = _as_float(a)
    # NumPy's result dtype: float32 data and a Python float q stay float32
    want = np.quantile(np.zeros(1, a.dtype), float(q) if weak else q).dtype
    if a.dtype != want:
        a = S.astype(a, want)
    x, kept = _to_front(a, axis, who)
    n = x.shape[0]
    if n == 0:
        raise ValueError(f"{who}: cannot take a quantile of an empty axis")
    srt = K.sort(x, axis=0)
    prev, nxt, gamma = _positions(n, q, method)
    lo = S.take(srt, prev, axis=0)            # q.shape + rest
    if gamma is None:
        out = lo
    else:
        hi = S.take(srt, nxt, axis=0)
        g = gamma.reshape(q.shape + (1,) * (x.ndim - 1))
        g = g.astype(want) if weak else g
        d = hi - lo
        # NumPy's lerp: from the nearer end, so that g = 0 and g = 1 give the ends exactly
        out = E.where(g >= 0.5, hi - d * (1 - g), lo + d * g)
    # a slice with a NaN sorts it last: its quantiles are NaN, as NumPy's
    last = srt[-1]
    out = E.where(E.not_equal(last, last), last, out)
    if out.dtype != want:
        out = S.astype(out, want)
    return _keep(out, q.shape, kept) if keepdims else out


def _q_values(q, who):
    if isinstance(q, Tensor):
        if q.requires_grad:
            raise TypeError(f"{who}: q must be plain numbers (a tensor q that requires grad "
                            "is not supported); pass q.detach()")
        q = q._data
    return q


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    """``numpy.quantile``: every method NumPy has, ``axis`` (an int, a tuple,
    None) and ``keepdims``; differentiable in ``a`` (each quantile's gradient
    goes to the one or two sorted elements it interpolates between).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([4.0, 1.0, 3.0, 2.0], requires_grad=True)
    >>> np.quantile(x, 0.5)
    tensor(2.5, grad_fn=<WhereBackward>)
    """
    _refuse("quantile", out=(out, None), weights=(weights, None),
            interpolation=(interpolation, None))
    weak = type(q) in (int, float)
    q = np.asanyarray(_q_values(q, "quantile"))
    if q.dtype.kind not in "biuf" or not (np.all(q >= 0) and np.all(q <= 1)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    return _quantile(a, q.astype(np.float64) if q.dtype.kind != "f" else q,
                     axis, method, keepdims, weak, "quantile")


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    """``numpy.percentile``: :func:`quantile` of ``q / 100``.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.percentile(tg.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), [25, 90])
    tensor([2.0, 4.6])
    """
    _refuse("percentile", out=(out, None), weights=(weights, None),
            interpolation=(interpolation, None))
    weak = type(q) in (int, float)
    q = np.true_divide(_q_values(q, "percentile"), 100)
    q = np.asanyarray(q)
    if not (np.all(q >= 0) and np.all(q <= 1)):
        raise ValueError("Percentiles must be in the range [0, 100]")
    return _quantile(a, q, axis, method, keepdims, weak, "percentile")


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """``numpy.median``: the middle sorted element, or the mean of the two
    middle ones (each gets half the gradient); NaN where a slice holds a NaN.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.median(tg.tensor([[3.0, 1.0], [2.0, 5.0]]), axis=0)
    tensor([2.5, 3.0])
    """
    _refuse("median", out=(out, None))
    a = _as_float(a)
    x, kept = _to_front(a, axis, "median")
    n = x.shape[0]
    if n == 0:
        raise ValueError("median: cannot take the median of an empty axis")
    srt = K.sort(x, axis=0)
    mid = [n // 2] if n % 2 else [n // 2 - 1, n // 2]
    out = Rd.mean(S.take(srt, np.array(mid), axis=0), axis=0)
    last = srt[-1]
    out = E.where(E.not_equal(last, last), last, out)
    return _keep(out, (), kept) if keepdims else out


# -- covariance --------------------------------------------------------------------------
def _rows(m, rowvar, dtype):
    m = _t(m)
    if m.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is None:
        dtype = np.result_type(m.dtype, np.float64)
    x = S.astype(m, dtype) if m.dtype != dtype else m
    if x.ndim < 2:
        x = S.reshape(x, (1, -1))
    if not rowvar and x.shape[0] != 1:
        x = S.transpose(x)
    return x


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """``numpy.cov``: with ``y``, ``rowvar``, ``bias``, ``ddof``, integer
    ``fweights`` and ``aweights`` (a tensor ``aweights`` is differentiable
    too); NumPy's formula, so NumPy's values.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.cov(tg.tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]))
    tensor([[1.0, -1.0],
            [-1.0, 1.0]])
    """
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    X = _rows(m, rowvar, dtype)
    if X.shape[0] == 0:
        return _plain(np.array([]).reshape(0, 0))
    if y is not None:
        X = S.concatenate([X, _rows(y, rowvar, X.dtype)], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        if isinstance(fweights, Tensor):
            fweights = fweights._data
        fweights = np.asarray(fweights, dtype=float)
        if not np.all(fweights == np.around(fweights)):
            raise TypeError("fweights must be integer")
        if fweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if fweights.shape[0] != X.shape[1]:
            raise RuntimeError("incompatible numbers of samples and fweights")
        if np.any(fweights < 0):
            raise ValueError("fweights cannot be negative")
        w = fweights
    if aweights is not None:
        aw = aweights if isinstance(aweights, Tensor) else np.asarray(aweights, dtype=float)
        if aw.ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if aw.shape[0] != X.shape[1]:
            raise RuntimeError("incompatible numbers of samples and aweights")
        if np.any(np.asarray(aw._data if isinstance(aw, Tensor) else aw) < 0):
            raise ValueError("aweights cannot be negative")
        aweights = aw
        w = aw if w is None else aw * w
    if w is None:
        avg = Rd.mean(X, axis=1)
        fact = X.shape[1] - ddof
    else:
        w_sum = Rd.sum(w) if isinstance(w, Tensor) else np.sum(w)
        avg = Rd.sum(X * w, axis=1) / w_sum
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * Rd.sum(w * aweights) / w_sum \
                if isinstance(w, Tensor) or isinstance(aweights, Tensor) \
                else w_sum - ddof * np.sum(w * aweights) / w_sum
    f = fact._data if isinstance(fact, Tensor) else fact
    if f <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
        fact = 0.0
    Xc = X - S.reshape(avg, (-1, 1))
    XT = S.transpose(Xc if w is None else Xc * w)
    c = L.matmul(Xc, XT)
    c = c * E.divide(1, fact) if isinstance(fact, Tensor) else c * np.true_divide(1, fact)
    return S.squeeze(c)


def corrcoef(x, y=None, rowvar=True, bias=np._NoValue, ddof=np._NoValue, *, dtype=None):
    """``numpy.corrcoef``: :func:`cov` normalised by the standard
    deviations, clipped to [-1, 1] as NumPy does.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.corrcoef(tg.tensor([0.0, 1.0, 2.0]), tg.tensor([1.0, 3.0, 2.0]))
    tensor([[1.0, 0.5],
            [0.5, 1.0]])
    """
    if bias is not np._NoValue or ddof is not np._NoValue:
        warnings.warn("bias and ddof have no effect and are deprecated",
                      DeprecationWarning, stacklevel=2)
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    sd = E.sqrt(S.diagonal(c))
    c = c / S.reshape(sd, (-1, 1))
    c = c / S.reshape(sd, (1, -1))
    return K.clip(c, -1, 1)


# -- polyfit -----------------------------------------------------------------------------
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """``numpy.polyfit``: the least-squares polynomial (highest power
    first), differentiable in ``x``, ``y`` and ``w``; ``full=True`` adds the
    residuals, rank, singular values and ``rcond``; ``cov=True`` (or
    ``"unscaled"``) the coefficients' covariance.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.polyfit(tg.tensor([0.0, 1.0, 2.0]), tg.tensor([1.0, 3.0, 5.0]), 1)
    tensor([2.0, 1.0])
    """
    order = operator.index(deg) + 1
    x, y = _t(x) + 0.0, _t(y) + 0.0
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if x.ndim != 1:
        raise TypeError("expected 1D vector for x")
    if x.size == 0:
        raise TypeError("expected non-empty vector for x")
    if y.ndim < 1 or y.ndim > 2:
        raise TypeError("expected 1D or 2D array for y")
    if x.shape[0] != y.shape[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = len(x) * np.finfo(x.dtype).eps
    lhs = vander(x, order)
    rhs = y
    if w is not None:
        w = _t(w) + 0.0
        if w.ndim != 1:
            raise TypeError("expected a 1-d array for weights")
        if w.shape[0] != y.shape[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * S.reshape(w, (-1, 1))
        rhs = rhs * (S.reshape(w, (-1, 1)) if rhs.ndim == 2 else w)
    scale = E.sqrt(Rd.sum(lhs * lhs, axis=0))
    lhs = lhs / scale
    c, resids, rank, s = L.lstsq(lhs, rhs, rcond)
    c = S.transpose(S.transpose(c) / scale)
    if rank != order and not full:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning,
                      stacklevel=2)
    if full:
        return c, resids, rank, s, rcond
    if cov:
        Vbase = L.inv(L.matmul(S.transpose(lhs), lhs))
        Vbase = Vbase / (S.reshape(scale, (-1, 1)) * S.reshape(scale, (1, -1)))
        if cov == "unscaled":
            fac = 1
        else:
            if len(x) <= order:
                raise ValueError("the number of data points must exceed order "
                                 "to scale the covariance matrix")
            fac = resids / (len(x) - order)
        if y.ndim == 1:
            return c, Vbase * fac
        return c, S.reshape(Vbase, Vbase.shape + (1,)) * fac
    return c


def vander(x, N=None, increasing=False):
    """``numpy.vander``: columns of powers of ``x`` (decreasing unless
    ``increasing``), made as NumPy makes them, by running products.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> np.vander(tg.tensor([2.0, 3.0]), 3)
    tensor([[4.0, 2.0, 1.0],
            [9.0, 3.0, 1.0]])
    """
    x = _t(x)
    if x.ndim != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    if N is None:
        N = x.shape[0]
    dtype = np.promote_types(x.dtype, int)
    if x.dtype != dtype:
        x = S.astype(x, dtype)
    m = x.shape[0]
    cols = [_plain(np.ones((m, min(N, 1)), dtype))]
    if N > 1:
        cols.append(Rd.cumprod(S.broadcast_to(S.reshape(x, (m, 1)), (m, N - 1)), axis=1))
    out = S.concatenate(cols, axis=1)
    return out if increasing else S.flip(out, axis=1)


# -- histogram ---------------------------------------------------------------------------
def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002
    """``numpy.histogram``: ``(hist, bin_edges)`` with NumPy's values.

    The counts are plain integer arrays (no gradient).  The bin edges are a
    tensor: when they come from the data (``bins`` a count or a rule name and
    no ``range``) they are ``linspace(a.min(), a.max(), bins + 1)`` and
    carry the gradient of the data's minimum and maximum; given edges or a
    ``range`` make constant edges.  Tensor ``weights`` make the counts a
    differentiable weighted sum, and ``density=True`` divides by the total
    and the (differentiable) bin widths.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> hist, edges = np.histogram(tg.tensor([0.0, 1.0, 1.5, 4.0]), bins=2)
    >>> hist, edges
    (array([3, 1]), tensor([0.0, 2.0, 4.0]))
    """
    from .numeric import linspace
    a = _t(a)
    wv = weights._data if isinstance(weights, Tensor) else weights
    bv = bins._data if isinstance(bins, Tensor) else bins
    counts, edges = on_values(np.histogram, a, bins=bv, range=range, weights=wv)
    flat = S.reshape(a, (-1,))
    if isinstance(bins, Tensor):
        t_edges = bins
    elif np.ndim(bv) == 1 or range is not None or a.size == 0:
        t_edges = _plain(edges)
    else:
        lo, hi = Rd.min(flat), Rd.max(flat)
        if lo._data == hi._data:
            lo, hi = lo - 0.5, hi + 0.5
        t_edges = linspace(lo, hi, len(edges), endpoint=True)
        if t_edges.dtype != edges.dtype:
            t_edges = S.astype(t_edges, edges.dtype)
    hist = counts
    if isinstance(weights, Tensor):
        # which bin each element falls in (NumPy's: the last edge is inside)
        def which(av, ev):
            i = np.searchsorted(ev, av, side="right") - 1
            i[av == ev[-1]] = len(ev) - 2
            i[(av < ev[0]) | (av > ev[-1])] = -1
            return i
        idx = on_values(which, flat, edges)
        onehot = (idx[None, :] == np.arange(len(edges) - 1)[:, None]).astype(weights.dtype)
        hist = L.matmul(onehot, S.reshape(weights, (-1,)))
    if density:
        width = S.astype(t_edges[1:] - t_edges[:-1], np.float64) \
            if isinstance(t_edges, Tensor) else np.diff(edges).astype(float)
        hist = _t(hist) / width / (Rd.sum(hist) if isinstance(hist, Tensor) else hist.sum())
    return hist, t_edges
