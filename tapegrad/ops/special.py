"""``scipy.special``'s elementwise functions on tensors.

``scipy.special.erf(t)`` and the other ufuncs listed in
``numpy_api.SPECIAL_UFUNCS`` reach these through ``Tensor.__array_ufunc__``;
tapegrad never imports SciPy (a ufunc is taken for SciPy's only when it is
the object of that name in an already imported ``scipy.special``).

``erf``, ``erfc``, ``erfinv``, ``gammaln``, ``digamma``, ``i0e``, ``i1e`` and
``log_ndtr`` are elementwise ops of their own (``ops/elementwise.py``,
computed by ``kernels/special.py``); the functions here are composites of
differentiable ops, written so that neither their values nor their
gradients overflow: ``expit`` through ``exp(-|x|)``, ``logit`` through
``log1p`` of a ratio near 1/2, ``ndtr`` through ``erfc``.  Where a branch is
not taken its input is replaced by a harmless value first, so a ``where``
never multiplies a zero adjoint by an infinite derivative.
"""
import numpy as np

from ..core.tensor import Tensor, _plain
from . import elementwise as E
from .elementwise import (digamma, erf, erfc, erfinv, gammaln, i0e, i1e,  # noqa: F401
                          log_ndtr, psi)

_SQRT1_2 = float(np.sqrt(0.5))


def _t(x):
    return x if isinstance(x, Tensor) else _plain(np.asarray(x, dtype=float))


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))`` (``scipy.special.expit``).

    Computed from ``e = exp(-|x|) <= 1`` as ``1 / (1 + e)`` for ``x >= 0``
    and ``e / (1 + e)`` below, so nothing overflows for any ``x``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([0.0, 2.0], requires_grad=True)
    >>> y = tg.expit(x)
    >>> y.sum().backward()
    >>> x.grad
    tensor([0.25, 0.10499359])
    """
    x = _t(x)
    pos = E.greater_equal(x, 0.0)
    e = E.exp(E.where(pos, -x, x))
    p = 1.0 / (1.0 + e)
    return E.where(pos, p, e * p)


sigmoid = expit


def log_expit(x):
    """``log(expit(x)) = -log(1 + exp(-x))`` (``scipy.special.log_expit``),
    as ``-logaddexp(0, -x)``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.log_expit(tg.tensor([-800.0, 0.0]))
    tensor([-800.0, -0.69314718])
    """
    return -E.logaddexp(0.0, -_t(x))


def logit(p):
    """``log(p / (1 - p))`` (``scipy.special.logit``), the inverse of :func:`expit`.

    For ``0.25 <= p <= 0.75`` it is ``log1p((2p - 1) / (1 - p))`` (``2p - 1``
    is exact there, so values near ``p = 1/2`` keep their relative accuracy),
    elsewhere ``log(p) - log1p(-p)``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.logit(tg.tensor([0.5, 0.75]))
    tensor([0.0, 1.09861229])
    """
    p = _t(p)
    mid = E.less_equal(E.absolute(p - 0.5), 0.25)
    pm = E.where(mid, p, 0.5)
    po = E.where(mid, 0.1, p)
    return E.where(mid, E.log1p((2.0 * pm - 1.0) / (1.0 - pm)), E.log(po) - E.log1p(-po))


def xlogy(x, y):
    """``x * log(y)``, and 0 where ``x == 0`` (``scipy.special.xlogy``).

    Where ``x == 0`` the value is 0 for every ``y`` but NaN, and the
    gradient in ``y`` is 0; in ``x`` it is ``log(y)`` where that is finite
    (``0 < y < inf``), else 0.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.xlogy(tg.tensor([0.0, 2.0]), tg.tensor([0.0, 3.0]))
    tensor([0.0, 2.19722458])
    """
    x = _t(x) if not isinstance(y, Tensor) else x
    return _as_tensor(E.multiply(x, E.log(_at_zero(x, y, 0.0, 1.0))))


def xlog1py(x, y):
    """``x * log1p(y)``, and 0 where ``x == 0`` (``scipy.special.xlog1py``).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.xlog1py(tg.tensor([0.0, 2.0]), tg.tensor([-1.0, 0.5]))
    tensor([0.0, 0.81093022])
    """
    x = _t(x) if not isinstance(y, Tensor) else x
    return _as_tensor(E.multiply(x, E.log1p(_at_zero(x, y, -1.0, 0.0))))


def _at_zero(x, y, low, one):
    """y, with ``one`` where ``x == 0`` and ``y <= low`` or ``y == inf``
    (there ``x * log(y)`` would be NaN, SciPy's value is 0); NaN stays."""
    outside = E.where(E.less_equal(y, low), one, E.where(E.equal(y, np.inf), one, y))
    return E.where(E.equal(x, 0.0), outside, y)


def _as_tensor(v):
    return v if isinstance(v, Tensor) else _plain(np.asarray(v))


def ndtr(x):
    """The standard normal distribution function ``erfc(-x / sqrt(2)) / 2``
    (``scipy.special.ndtr``); both tails keep their relative accuracy.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.ndtr(tg.tensor([0.0]))
    tensor([0.5])
    """
    return 0.5 * erfc(-_SQRT1_2 * _t(x))


def _polygamma_values(n, x):
    from ..kernels.special import polygamma_into
    x = np.asarray(x, dtype=np.float64)
    y = np.empty(x.size)
    polygamma_into(int(n), np.ascontiguousarray(x).reshape(-1), y)
    return y.reshape(x.shape)


_POLYGAMMA = None


def _polygamma_function():
    """The op of ``polygamma(n >= 1, x)``: a ``tg.Function`` whose VJP is the
    next polygamma, recorded with tapegrad ops too (``vjp_ops``), so its
    gradients differentiate again under ``create_graph=True`` to any order
    (digamma's derivative is ``polygamma(1, x)``).  Made on first use:
    ``ops/function.py`` imports this package's elementwise ops."""
    global _POLYGAMMA
    if _POLYGAMMA is None:
        from .function import Function

        class Polygamma(Function):
            @staticmethod
            def forward(ctx, n, x):
                ctx.n = n
                ctx.save_for_backward(x)
                y = _polygamma_values(n, x)
                return y.astype(x.dtype) if x.dtype.kind == "f" else y

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return None, g * _polygamma_values(ctx.n + 1, x)

            @staticmethod
            def vjp_ops(ctx, u, inputs):
                (x,) = ctx.saved_tensors
                return None, u * polygamma(ctx.n + 1, inputs(1, np.ravel(x)))

        _POLYGAMMA = Polygamma
    return _POLYGAMMA


def polygamma(n, x):
    """The n-th derivative of the digamma function, ``psi^(n)(x)``
    (``scipy.special.polygamma`` for one integer ``n >= 0``); ``n = 0`` is
    :func:`digamma`.  Differentiable in ``x`` to any order, with
    ``create_graph=True`` too; reverse mode only (``tg.hessian`` and
    forward mode do not reach it).

    Poles (``x = 0, -1, -2, ...``): +inf for odd ``n``, NaN for even ``n``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.ops.special import polygamma
    >>> x = tg.tensor([1.0], requires_grad=True)
    >>> polygamma(1, x)                 # pi^2 / 6
    tensor([1.64493407], grad_fn=<PolygammaBackward>)
    >>> polygamma(1, x).backward()      # -2 zeta(3)
    >>> x.grad
    tensor([-2.40411381])
    """
    if isinstance(n, Tensor) or int(n) != n or n < 0:
        raise ValueError(f"polygamma: the order n must be an integer >= 0, got {n!r}")
    n = int(n)
    if n == 0:
        return digamma(x)
    if isinstance(x, Tensor):
        return _polygamma_function().apply(n, x)
    return _polygamma_values(n, x)  # an array, as digamma's of an array
