"""``tapegrad.scipy.stats``: ``scipy.stats``'s distributions on tensors,
differentiable.

SciPy's distributions convert their arguments with ``np.asarray``, which no
protocol can intercept.  These take the same arguments -- the quantile, the
shape parameters positionally or by name, then ``loc`` and ``scale`` (``loc``
only, for the discrete ones) -- broadcast them together as SciPy does and
return SciPy's values as tensors: ``-inf`` (log) or 0 outside the support,
NaN where a parameter is invalid (``scale <= 0``, ``a <= 0``, ``p > 1``,
...).  They are built from tapegrad's differentiable ops, so they are
differentiable in the quantile and in every float parameter, to second order
(``tg.hessian``, ``tg.hvp``, ``create_graph=True``) and in a trace.

========================  ===========================================  =====================
distribution              arguments                                    methods
========================  ===========================================  =====================
``norm``                  ``x, loc=0, scale=1``                        logpdf pdf cdf logcdf
                                                                       sf logsf ppf
``t``                     ``x, df, loc=0, scale=1``                    logpdf pdf
``gamma``                 ``x, a, loc=0, scale=1``                     logpdf pdf
``beta``                  ``x, a, b, loc=0, scale=1``                  logpdf pdf
``lognorm``               ``x, s, loc=0, scale=1``                     logpdf pdf cdf logcdf
                                                                       sf logsf ppf
``expon``                 ``x, loc=0, scale=1``                        logpdf pdf cdf logcdf
                                                                       sf logsf ppf
``uniform``               ``x, loc=0, scale=1``                        logpdf pdf cdf logcdf
                                                                       sf logsf ppf
``multivariate_normal``   ``x, mean=None, cov=1``                      logpdf pdf
``poisson``               ``k, mu, loc=0``                             logpmf pmf
``binom``                 ``k, n, p, loc=0``                           logpmf pmf
``nbinom``                ``k, n, p, loc=0``                           logpmf pmf
========================  ===========================================  =====================

The distribution functions of ``t``, ``gamma`` and ``beta`` are not here:
their derivatives in the shape parameters have no closed form among
tapegrad's ops.  The discrete distributions' ``k`` and ``loc``, and
``binom``'s ``n``, take integer values; the gradients they receive are
those of the log-pmf's formula, not derivatives of the distribution.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> from tapegrad.scipy import stats
>>> x = tg.tensor([0.5, 2.0], requires_grad=True)
>>> a = tg.tensor(2.0, requires_grad=True)
>>> lp = stats.gamma.logpdf(x, a, scale=1.5).sum()
>>> round(float(lp.detach()), 6)
-3.288527
>>> da, dx = tg.autograd.grad(lp, [a, x])
>>> np.round(dx.numpy(), 6)      # (a - 1) / x - 1 / scale
array([ 1.333333, -0.166667])
>>> round(float(da), 6)            # sum(log(x / scale)) - 2 psi(a)
-1.656499
"""
import math

import numpy as np

import tapegrad as tg
from tapegrad.ops.guarded import on_values

from .special import betaln, both, ndtri, quiet, tensor, tensors

__all__ = ["beta", "binom", "expon", "gamma", "lognorm", "multivariate_normal", "nbinom",
           "norm", "poisson", "t", "uniform"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2PI = math.log(2.0 * math.pi)
_LN2 = math.log(2.0)
_NAN, _INF = math.nan, math.inf


def _integral(x):
    return tg.floor(x) == x


def _log1mexp(y):
    """``log(1 - exp(-y))`` for ``y >= 0``, accurate at both ends."""
    small = y <= _LN2
    return tg.where(small, tg.log(-tg.expm1(-tg.where(small, y, _LN2))),
                    tg.log1p(-tg.exp(-tg.where(small, _LN2, y))))


# -- the distributions' formulas, standardized (loc 0, scale 1) ------------------------------
# Each function receives y inside the support (outside it a harmless value
# that the caller masks), and the shape parameters as tensors.
class _Norm:
    name, shapes, low, high, safe = "norm", (), -_INF, _INF, 0.0

    @staticmethod
    def valid():
        return True

    @staticmethod
    def logpdf(y):
        return -0.5 * y * y - _HALF_LOG_2PI

    @staticmethod
    def cdf(y):
        return tg.ndtr(y)

    @staticmethod
    def logcdf(y):
        return tg.log_ndtr(y)

    @staticmethod
    def sf(y):
        return tg.ndtr(-y)

    @staticmethod
    def logsf(y):
        return tg.log_ndtr(-y)

    @staticmethod
    def ppf(q):
        return ndtri(q)


class _T:
    name, shapes, low, high, safe = "t", ("df",), -_INF, _INF, 0.0

    @staticmethod
    def valid(df):
        return df > 0

    @staticmethod
    def logpdf(y, df):
        # gammaln((df + 1) / 2) - gammaln(df / 2) - log(pi) / 2 as -betaln(1/2, df/2):
        # no cancellation of large gammaln values at large df; df = inf is the normal
        finite = tg.abs(df) < _INF
        d = tg.where(finite, df, 1.0)
        student = (-0.5 * tg.log(d) - betaln(0.5, 0.5 * d)
                   - 0.5 * (d + 1.0) * tg.log1p(y * y / d))
        return tg.where(finite, student, _Norm.logpdf(y))


class _Gamma:
    name, shapes, low, high, safe = "gamma", ("a",), 0.0, _INF, 1.0

    @staticmethod
    def valid(a):
        return a > 0

    @staticmethod
    def logpdf(y, a):
        return tg.xlogy(a - 1.0, y) - y - tg.gammaln(a)


class _Beta:
    name, shapes, low, high, safe = "beta", ("a", "b"), 0.0, 1.0, 0.5

    @staticmethod
    def valid(a, b):
        return both(a > 0, b > 0)

    @staticmethod
    def logpdf(y, a, b):
        return tg.xlogy(a - 1.0, y) + tg.xlog1py(b - 1.0, -y) - betaln(a, b)


class _Lognorm:
    name, shapes, low, high, safe = "lognorm", ("s",), 0.0, _INF, 1.0

    @staticmethod
    def valid(s):
        return s > 0

    @staticmethod
    def logpdf(y, s):
        zero = y <= 0  # y == 0: the density's limit 0 (not a NaN of inf - inf)
        ly = tg.log(tg.where(zero, 1.0, y))
        z = ly / s
        return tg.where(zero, -_INF, -tg.log(s) - _HALF_LOG_2PI - ly - 0.5 * z * z)

    @staticmethod
    def cdf(y, s):
        return tg.ndtr(tg.log(y) / s)

    @staticmethod
    def logcdf(y, s):
        return tg.log_ndtr(tg.log(y) / s)

    @staticmethod
    def sf(y, s):
        return tg.ndtr(-tg.log(y) / s)

    @staticmethod
    def logsf(y, s):
        return tg.log_ndtr(-tg.log(y) / s)

    @staticmethod
    def ppf(q, s):
        return tg.exp(s * ndtri(q))


class _Expon:
    name, shapes, low, high, safe = "expon", (), 0.0, _INF, 1.0

    @staticmethod
    def valid():
        return True

    @staticmethod
    def logpdf(y):
        return -y

    @staticmethod
    def cdf(y):
        return -tg.expm1(-y)

    @staticmethod
    def logcdf(y):
        return _log1mexp(y)

    @staticmethod
    def sf(y):
        return tg.exp(-y)

    @staticmethod
    def logsf(y):
        return -y

    @staticmethod
    def ppf(q):
        return -tg.log1p(-q)


class _Uniform:
    name, shapes, low, high, safe = "uniform", (), 0.0, 1.0, 0.5

    @staticmethod
    def valid():
        return True

    @staticmethod
    def logpdf(y):
        return 0.0 * y

    @staticmethod
    def cdf(y):
        return y

    @staticmethod
    def logcdf(y):
        return tg.log(y)

    @staticmethod
    def sf(y):
        return 1.0 - y

    @staticmethod
    def logsf(y):
        return tg.log1p(-y)

    @staticmethod
    def ppf(q):
        return q


class _Poisson:
    name, shapes = "poisson", ("mu",)

    @staticmethod
    def valid(mu):
        return mu >= 0

    @staticmethod
    def high(mu):
        return _INF

    @staticmethod
    def logpmf(k, mu):
        return tg.xlogy(k, mu) - tg.gammaln(k + 1.0) - mu


class _Binom:
    name, shapes = "binom", ("n", "p")

    @staticmethod
    def valid(n, p):
        return both(both(n >= 0, _integral(n)), both(p >= 0, p <= 1))

    @staticmethod
    def high(n, p):
        return n

    @staticmethod
    def logpmf(k, n, p):
        # log C(n, k) = -log(n + 1) - betaln(n - k + 1, k + 1): betaln keeps
        # its precision at large n, where gammaln(n + 1) - ... would cancel;
        # exactly 0 at k = 0 and k = n
        j = tg.where(k <= n - k, k, n - k)
        comb = tg.where(j == 0, 0.0, -tg.log1p(n) - betaln(n - j + 1.0, j + 1.0))
        return comb + tg.xlogy(k, p) + tg.xlog1py(n - k, -p)


class _Nbinom:
    name, shapes = "nbinom", ("n", "p")

    @staticmethod
    def valid(n, p):
        return both(n > 0, both(p > 0, p <= 1))

    @staticmethod
    def high(n, p):
        return _INF

    @staticmethod
    def logpmf(k, n, p):
        # log(gamma(n + k) / (gamma(n) k!)) = -log(n + k) - betaln(n, k + 1),
        # exactly 0 at k = 0
        comb = tg.where(k == 0, 0.0, -tg.log(n + k) - betaln(n, k + 1.0))
        return comb + n * tg.log(p) + tg.xlog1py(k, -p)


# -- the generic methods: arguments, loc/scale, support, invalid parameters --------------------
def _parse(dist, method, args, kwargs, names_after):
    """SciPy's argument convention: the quantile, the shape parameters, then
    ``loc`` (and ``scale``); positionally or by keyword."""
    where = f"tapegrad.scipy.stats.{dist.name}.{method}"
    if not args:
        raise TypeError(f"{where}() missing its first argument (the point at which to "
                        "evaluate)")
    names = dist.shapes + names_after
    first = "q" if method == "ppf" else ("x" if "scale" in names_after else "k")
    x, rest = args[0], args[1:]
    if len(rest) > len(names):
        raise TypeError(f"{where}() takes at most {len(names) + 1} positional arguments "
                        f"({', '.join((first,) + names)}), got {len(args)}")
    vals = dict(zip(names, rest))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"{where}() got an unexpected keyword argument {k!r} (its "
                            f"parameters: {', '.join(names)})")
        if k in vals:
            raise TypeError(f"{where}() got multiple values for argument {k!r}")
        vals[k] = v
    missing = [n for n in dist.shapes if n not in vals]
    if missing:
        raise TypeError(f"{where}() missing the shape parameter"
                        f"{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    vals.setdefault("loc", 0.0)
    if "scale" in names_after:
        vals.setdefault("scale", 1.0)
    x, *params = tensors(x, *(vals[n] for n in names))
    return x, params


def _finish(value, ok, *args):
    """NaN where a parameter is invalid; the broadcast shape of all arguments."""
    out = value if ok is True else tg.where(ok, value, _NAN)
    shape = np.broadcast_shapes(*(a.shape for a in args))
    return out if out.shape == shape else tg.broadcast_to(out, shape)


# the value of each method below and above the support
_OUTSIDE = {"logpdf": (-_INF, -_INF), "cdf": (0.0, 1.0), "logcdf": (-_INF, 0.0),
            "sf": (1.0, 0.0), "logsf": (0.0, -_INF)}


def _continuous(dist, method):
    def run(*args, **kwargs):
        x, params = _parse(dist, method, args, kwargs, ("loc", "scale"))
        shapes, loc, scale = params[:-2], params[-2], params[-1]
        ok = both(dist.valid(*shapes), scale > 0) if shapes else scale > 0
        s = tg.where(scale > 0, scale, 1.0)
        if method == "ppf":
            inside = both(x >= 0, x <= 1)
            q = tg.where(inside, x, 0.5)
            y = tg.where(inside, loc + s * dist.ppf(q, *shapes), _NAN)
            return _finish(y, ok, x, *params)
        y = (x - loc) / s
        below, above = y < dist.low, y > dist.high
        inside = tg.where(below, False, tg.where(above, False, True))
        ys = tg.where(inside, y, dist.safe)
        kind = "logpdf" if method == "pdf" else method
        value = getattr(dist, kind)(ys, *shapes)
        if kind == "logpdf":
            value = value - tg.log(s)
        lo, hi = _OUTSIDE[kind]
        value = tg.where(below, lo, tg.where(above, hi, value))
        if method == "pdf":
            value = tg.exp(value)
        return _finish(value, ok, x, *params)
    return run


def _discrete(dist, method):
    def run(*args, **kwargs):
        k, params = _parse(dist, method, args, kwargs, ("loc",))
        shapes, loc = params[:-1], params[-1]
        x = k - loc
        inside = both(both(x >= 0, x <= dist.high(*shapes)), _integral(x))
        xs = tg.where(inside, x, 0.0)
        value = tg.where(x != x, _NAN, tg.where(inside, dist.logpmf(xs, *shapes), -_INF))
        if method == "pmf":
            value = tg.exp(value)
        return _finish(value, dist.valid(*shapes), k, *params)
    return run


_WHAT = {"logpdf": "the log of the probability density", "pdf": "the probability density",
         "cdf": "the distribution function", "logcdf": "the log of the distribution function",
         "sf": "the survival function (1 - cdf)", "logsf": "the log of the survival function",
         "ppf": "the quantile function (the inverse of cdf)",
         "logpmf": "the log of the probability mass", "pmf": "the probability mass"}

#: a call of each method in its example, and the SciPy call to compare with
_EXAMPLE_ARGS = {"norm": "x, loc=0.5, scale=2.0", "t": "x, 3.5, loc=0.5, scale=2.0",
                 "gamma": "x, 2.5, loc=-0.5, scale=2.0", "beta": "x, 2.5, 1.5, scale=3.0",
                 "lognorm": "x, 0.8, scale=2.0", "expon": "x, loc=-0.5, scale=2.0",
                 "uniform": "x, loc=-1.0, scale=3.0", "poisson": "k, 3.5",
                 "binom": "k, 5, 0.3", "nbinom": "k, 2.5, 0.4"}


def _doc(dist, method, signature):
    q = "q" if method == "ppf" else ("k" if method in ("logpmf", "pmf") else "x")
    data = "[0.1, 0.5, 0.9]" if method == "ppf" else (
        "[0.0, 1.0, 3.0]" if q == "k" else "[0.5, 1.0, 2.5]")
    args = _EXAMPLE_ARGS[dist.name].replace("x,", f"{q},").replace("k,", f"{q},")
    scipy_args = args.replace(q, q + ".numpy()", 1)
    return f"""{_WHAT[method].capitalize()} of the {dist.name} distribution
    (``scipy.stats.{dist.name}.{method}({signature})``), as a tensor.

    Broadcasts its arguments together as SciPy does; differentiable in
    ``{q}`` and in every float parameter.

    Examples
    --------
    >>> import numpy as np, scipy.stats, tapegrad as tg
    >>> from tapegrad.scipy import stats
    >>> {q} = tg.tensor({data}, requires_grad=True)
    >>> y = stats.{dist.name}.{method}({args})
    >>> np.allclose(y.numpy(), scipy.stats.{dist.name}.{method}({scipy_args}))
    True
    >>> y.sum().backward()
    >>> {q}.grad.shape
    (3,)
    """


class _Distribution:
    """A distribution's methods under SciPy's names (``tapegrad.scipy.stats.norm``, ...)."""

    def __init__(self, dist, methods, discrete=False):
        self.name = dist.name
        after = "loc=0" if discrete else "loc=0, scale=1"
        for m in methods:
            q = "q" if m == "ppf" else ("k" if discrete else "x")
            signature = ", ".join((q,) + dist.shapes + (after,))
            fn = quiet((_discrete if discrete else _continuous)(dist, m))
            fn.__name__ = m
            fn.__qualname__ = f"{dist.name}.{m}"
            fn.__module__ = __name__
            fn.__doc__ = _doc(dist, m, signature)
            setattr(self, m, fn)
        self.__doc__ = (f"The {dist.name} distribution: "
                        f"{', '.join(methods)} as ``scipy.stats.{dist.name}``'s.")

    def __repr__(self):
        return f"<tapegrad.scipy.stats.{self.name}>"


_CONTINUOUS_ALL = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf")
norm = _Distribution(_Norm, _CONTINUOUS_ALL)
t = _Distribution(_T, ("logpdf", "pdf"))
gamma = _Distribution(_Gamma, ("logpdf", "pdf"))
beta = _Distribution(_Beta, ("logpdf", "pdf"))
lognorm = _Distribution(_Lognorm, _CONTINUOUS_ALL)
expon = _Distribution(_Expon, _CONTINUOUS_ALL)
uniform = _Distribution(_Uniform, _CONTINUOUS_ALL)
poisson = _Distribution(_Poisson, ("logpmf", "pmf"), discrete=True)
binom = _Distribution(_Binom, ("logpmf", "pmf"), discrete=True)
nbinom = _Distribution(_Nbinom, ("logpmf", "pmf"), discrete=True)


# -- the multivariate normal ------------------------------------------------------------------
def _mvn_parameters(mean, cov):
    """SciPy's reading of ``mean`` and ``cov``: the dimension from ``mean``
    (or ``cov``), a scalar ``cov`` times the identity, a 1-d one the
    diagonal, a 2-d one its lower triangle (as SciPy's ``eigh(lower=True)``)."""
    cov = tensor(1.0 if cov is None else cov)
    if mean is None:
        dim = 1 if cov.ndim < 2 else cov.shape[0]
        mean = tensor(np.zeros(dim))
    else:
        mean = tensor(mean)
        dim = mean.size
    if dim == 1:
        if mean.size != 1 or cov.size != 1:
            raise ValueError(f"multivariate_normal: the dimension is 1 (from mean, or from a "
                             f"cov of fewer than 2 dimensions when mean is None), but mean has "
                             f"{mean.size} and cov {cov.size} entries; pass mean to set the "
                             "dimension")
        mean, cov = mean.reshape(1), cov.reshape(1, 1)
    if mean.ndim != 1 or mean.shape[0] != dim:
        raise ValueError(f"multivariate_normal: mean must be a vector of length {dim}, "
                         f"got shape {mean.shape}")
    if cov.ndim == 0:
        cov = cov * np.eye(dim)
    elif cov.ndim == 1:
        if cov.shape[0] != dim:
            raise ValueError(f"multivariate_normal: a 1-d cov is the diagonal and must have "
                             f"length {dim} (the length of mean), got {cov.shape[0]}")
        cov = tg.diag(cov)
    elif cov.ndim == 2:
        if cov.shape != (dim, dim):
            raise ValueError(f"multivariate_normal: cov must be {dim} x {dim} (mean has length "
                             f"{dim}), got shape {cov.shape}")
        cov = tg.tril(cov) + tg.transpose(tg.tril(cov, -1))
    else:
        raise ValueError(f"multivariate_normal: cov must be at most 2-d, got {cov.ndim} "
                         "dimensions")
    return dim, mean, cov


def _positive_definite(c):
    try:
        np.linalg.cholesky(c)
    except np.linalg.LinAlgError:
        return False
    return True


class _MultivariateNormal:
    """The multivariate normal distribution (``scipy.stats.multivariate_normal``):
    ``logpdf`` and ``pdf``, and frozen with ``multivariate_normal(mean, cov)``.

    ``x`` has the components on its last axis (a 1-d ``x`` is one point, or
    with ``dim == 1`` a batch of points), ``mean`` is a vector, ``cov`` a
    scalar (times the identity), a vector (the diagonal) or a matrix, of
    which only the lower triangle is read, as SciPy does; the result is
    squeezed as SciPy's.  Differentiable in ``x``, ``mean`` and ``cov``
    (the gradient in a matrix ``cov`` lies on its lower triangle, each
    off-diagonal entry carrying both of its symmetric halves: that is the
    gradient of SciPy's function, which reads the lower triangle only).
    ``cov`` must be positive definite (``allow_singular=True`` is not
    supported).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.stats import multivariate_normal
    >>> x = tg.tensor([[0.5, -1.0], [1.0, 0.0]], requires_grad=True)
    >>> cov = tg.tensor([[2.0, 0.3], [0.3, 1.0]], requires_grad=True)
    >>> lp = multivariate_normal.logpdf(x, mean=[0.0, 0.5], cov=cov)
    >>> np.round(lp.numpy(), 6)
    array([-3.522685, -2.632633])
    >>> lp.sum().backward()
    >>> np.round(cov.grad.numpy(), 6)
    array([[-0.218607,  0.      ],
           [-0.915956,  0.544462]])
    """

    def __init__(self, frozen=None):
        self._frozen = frozen  # (mean, cov) of a frozen distribution

    def __call__(self, mean=None, cov=1, allow_singular=False):
        _no_singular(allow_singular)
        return _MultivariateNormal((mean, cov))

    def logpdf(self, x, mean=None, cov=1, allow_singular=False):
        """The log of the density at ``x`` (``scipy.stats.multivariate_normal.logpdf``).

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> from tapegrad.scipy.stats import multivariate_normal
        >>> m = tg.tensor([0.0, 1.0], requires_grad=True)
        >>> lp = multivariate_normal.logpdf([0.5, 0.5], mean=m, cov=[1.0, 2.0])
        >>> round(float(lp.detach()), 6)
        -2.371951
        >>> lp.backward()
        >>> np.round(m.grad.numpy(), 6)
        array([ 0.5 , -0.25])
        """
        _no_singular(allow_singular)
        if self._frozen is not None:
            mean, cov = self._frozen
        return _mvn_logpdf(x, mean, cov)

    def pdf(self, x, mean=None, cov=1, allow_singular=False):
        """The density at ``x`` (``scipy.stats.multivariate_normal.pdf``).

        Examples
        --------
        >>> import numpy as np
        >>> from tapegrad.scipy.stats import multivariate_normal
        >>> round(float(multivariate_normal.pdf([0.0, 0.0], cov=[[1.0, 0.5], [0.5, 1.0]])), 6)
        0.183776
        """
        return tg.exp(self.logpdf(x, mean, cov, allow_singular))

    def __repr__(self):
        return ("<tapegrad.scipy.stats.multivariate_normal>" if self._frozen is None
                else "<tapegrad.scipy.stats.multivariate_normal, frozen>")


def _no_singular(allow_singular):
    if allow_singular:
        raise NotImplementedError("tapegrad.scipy.stats.multivariate_normal: allow_singular=True "
                                  "is not supported; cov must be positive definite")


@quiet
def _mvn_logpdf(x, mean, cov):
    dim, mean, cov = _mvn_parameters(mean, cov)
    x = tensor(x)
    if x.ndim == 0:
        x = x.reshape(1)
    elif x.ndim == 1:
        x = x.reshape(-1, 1) if dim == 1 else x.reshape(1, -1)
    if x.shape[-1] != dim:
        raise ValueError(f"multivariate_normal: x has {x.shape[-1]} components on its last axis, "
                         f"the distribution {dim}")
    if not on_values(_positive_definite, cov):
        raise ValueError("multivariate_normal: cov (its lower triangle, as SciPy reads it) is "
                         "not positive definite; allow_singular=True is not supported")
    diff = (x - mean).reshape(-1, dim)
    maha = tg.sum(tg.transpose(diff) * tg.linalg.solve(cov, tg.transpose(diff)), axis=0)
    logdet = tg.linalg.slogdet(cov)[1]
    out = (-0.5 * (dim * _LOG_2PI + logdet + maha)).reshape(x.shape[:-1])
    return tg.squeeze(out) if 1 in out.shape else out


multivariate_normal = _MultivariateNormal()

# the generated methods' examples, for pytest --doctest-modules
__test__ = {f"{d.name}.{m}": getattr(d, m)
            for d in (norm, t, gamma, beta, lognorm, expon, uniform, poisson, binom, nbinom)
            for m in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "logpmf", "pmf")
            if hasattr(d, m)}
