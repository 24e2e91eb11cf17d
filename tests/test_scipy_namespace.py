"""``tapegrad.scipy.special`` and ``tapegrad.scipy.stats`` against SciPy.

One row per function (special) or per distribution (stats).  Each row is
checked for: its value against SciPy's own function at many points, edge
points included (support boundaries, outside the support, invalid
parameters, inf, NaN), broadcast together as SciPy broadcasts; its gradient
in every float argument against float64 central differences of SciPy's
function; its second derivatives (``tg.hessian``) against central
differences of tapegrad's gradient; and ``create_graph=True`` (the gradient
of a gradient) against that Hessian.
"""
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg

sp = pytest.importorskip("scipy.special")
st = pytest.importorskip("scipy.stats")

from tapegrad.scipy import special as S  # noqa: E402
from tapegrad.scipy import stats as ST  # noqa: E402

INF, NAN = np.inf, np.nan


def _value(y):
    return y.numpy() if isinstance(y, tg.Tensor) else np.asarray(y)


def assert_matches(ours, ref, rtol=1e-13, atol=0.0):
    """Same shape, NaN and inf where SciPy has them, close elsewhere."""
    ours, ref = _value(ours), np.asarray(ref, dtype=float)
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=atol)


# -- derivatives: one generic check for a row ---------------------------------------------------
def _fd(F, z, h=1e-6, w=1.0):
    """Central differences of ``sum(w * F(z))`` at z, float64: the difference
    is taken element by element before the sum, so that large terms that
    do not depend on z[i] add no rounding."""
    g = np.empty_like(z)
    for i in range(z.size):
        e = np.zeros_like(z)
        e[i] = h * max(1.0, abs(z[i]))
        g[i] = np.sum(w * (np.asarray(F(z + e)) - np.asarray(F(z - e)))) / (2 * e[i])
    return g


def check_derivatives(ours, theirs, args, diff, hessian=True, rtol=1e-6, atol=1e-8):
    """Gradient of ``sum(w * ours(*args))`` in the arguments at positions
    ``diff`` against central differences of SciPy's ``theirs``; Hessian
    against central differences of that gradient; the gradient of
    ``<gradient, v>`` (create_graph=True) against ``H v``.  With
    ``hessian=False`` (an op tg.hessian does not reach) the last is checked
    against central differences of ``<gradient, v>``."""
    args = [np.asarray(a, dtype=float) if i in diff else a for i, a in enumerate(args)]
    shape = np.shape(theirs(*args))
    w = np.linspace(0.7, 1.3, int(np.prod(shape))).reshape(shape)

    def unpack(z):
        full, o = list(args), 0
        for i in diff:
            n = args[i].size
            full[i] = z[o:o + n].reshape(args[i].shape)
            o += n
        return full

    z0 = np.concatenate([args[i].ravel() for i in diff])

    def F(z):
        return tg.sum(ours(*unpack(z)) * w)

    g = tg.grad(F)(z0)
    want = _fd(lambda z: theirs(*unpack(z)), z0, w=w)
    np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)
    v = np.linspace(0.5, 1.5, z0.size)
    x = tg.tensor(z0, requires_grad=True)
    (gx,) = tg.autograd.grad(F(x), x, create_graph=True)
    (hv,) = tg.autograd.grad(tg.sum(gx * v), x)
    if hessian:
        H = tg.hessian(F)(z0)
        Hfd = np.stack([_fd(lambda z, i=i: tg.grad(F)(z)[i], z0, 1e-5) for i in range(z0.size)])
        np.testing.assert_allclose(H, Hfd, rtol=rtol, atol=atol)
        np.testing.assert_allclose(hv.numpy(), H @ v, rtol=1e-10, atol=1e-12)
    else:
        np.testing.assert_allclose(hv.numpy(), _fd(lambda z: tg.grad(F)(z) @ v, z0, 1e-5),
                                   rtol=rtol, atol=atol)


# -- scipy.special ---------------------------------------------------------------------------
X_GAMMA = [0.0, -0.0, -1.0, -2.0, -0.5, -1.5, -2.3, 1e-300, 1e-5, 0.3, 1.0, 2.5, 10.0, 100.5,
           171.6, 171.7, -170.3, -200.5, INF, -INF, NAN]
X_ANY = [-INF, -30.0, -5.0, -1.0, -1e-8, 0.0, 1e-8, 0.3, 1.0, 5.0, 30.0, INF, NAN]
X_ERFCX = [-INF, -30.0, -26.5, -26.0, -5.0, -1.0, 0.0, 0.5, 1.0, 5.0, 9.99, 10.01, 26.0, 30.0,
           1e3, 1e10, 1e300, INF, NAN]
X_BESSEL = [0.0, 1e-10, 0.5, -0.5, 0.999, 1.0, 1.001, -3.0, 20.0, 700.0, 713.0, 714.0, -800.0,
            INF, -INF, NAN]
P = [-0.1, 0.0, 1e-300, 1e-20, 1e-5, 0.025, 0.5, 0.7, 1 - 1e-10, 1.0, 1.1, NAN]
X_ENTR = [-1.0, -0.0, 0.0, 1e-300, 0.3, 1.0, 5.0, 1e300, INF, -INF, NAN]
AB = np.array([1e-3, 0.5, 1.0, 3.0, 19.9, 20.0, 25.0, 0.0, -0.5, -2.5])  # SciPy exact here
A_LN, B_LN = AB[:, None], AB[None, :]
M = np.array([[1.0, 2.0, -INF], [1000.0, 1000.5, 3.0]])
BW = np.array([[2.0, -1.0, 1.0], [0.5, 0.5, -0.25]])

# name -> (ours, SciPy's, arguments for the values, arguments for the derivatives,
#          positions of the float arguments, options)
SPECIAL = {
    "gamma": (S.gamma, sp.gamma, [X_GAMMA], [[0.7, 3.3, -0.5, -2.3]], [0], dict(rtol=2e-13)),
    "gammaln": (S.gammaln, sp.gammaln, [X_GAMMA], [[0.7, 3.3, -0.5, -2.3]], [0], {}),
    "digamma": (S.digamma, sp.digamma, [X_GAMMA[2:-4]], [[0.7, 3.3, -0.5]], [0], {}),
    "psi": (S.psi, sp.psi, [[0.7, 3.3, -0.5]], [[0.7, 3.3, -0.5]], [0], {}),
    "polygamma": (S.polygamma, sp.polygamma, [[[0], [1], [3]], [0.5, 2.0, -1.5, 30.0]],
                  [2, [0.7, 3.3, -0.5]], [1], dict(hessian=False, rtol=1e-12)),
    "betaln": (S.betaln, sp.betaln, [A_LN, B_LN], [[0.7, 2.5, 30.0], [1.5, 40.0, 0.3]], [0, 1],
               {}),
    "multigammaln": (S.multigammaln, sp.multigammaln, [[1.0001, 3.0, 4.5, 100.0], 3],
                     [[1.7, 3.5], 3], [0], {}),
    "i0": (S.i0, sp.i0, [X_BESSEL], [[0.0, 0.5, -3.0, 20.0]], [0], dict(rtol=5e-16)),
    "i1": (S.i1, sp.i1, [X_BESSEL], [[0.0, 0.5, -3.0, 20.0]], [0], dict(rtol=5e-16)),
    "i0e": (S.i0e, sp.i0e, [X_BESSEL], [[0.5, -3.0, 20.0]], [0], dict(rtol=5e-15)),
    "i1e": (S.i1e, sp.i1e, [X_BESSEL], [[0.5, -3.0, 20.0]], [0], dict(rtol=5e-15)),
    "erfcx": (S.erfcx, sp.erfcx, [X_ERFCX], [[-3.0, 0.5, 9.0, 11.0, 30.0]], [0], {}),
    "ndtri": (S.ndtri, sp.ndtri, [P], [[0.01, 0.4, 0.9]], [0], {}),
    "entr": (S.entr, sp.entr, [X_ENTR], [[0.2, 1.5, 4.0]], [0], {}),
    "erf": (S.erf, sp.erf, [X_ANY], [[-1.0, 0.3, 2.0]], [0], {}),
    "erfc": (S.erfc, sp.erfc, [X_ANY], [[-1.0, 0.3, 2.0]], [0], dict(rtol=1e-12)),
    "erfinv": (S.erfinv, sp.erfinv, [[-1.0, -0.9, 0.0, 0.3, 0.999, 1.0, 1.1, NAN]],
               [[-0.7, 0.3, 0.9]], [0], dict(rtol=1e-12)),
    "expit": (S.expit, sp.expit, [X_ANY], [[-1.0, 0.3, 2.0]], [0], {}),
    "logit": (S.logit, sp.logit, [P], [[0.1, 0.4, 0.9]], [0], {}),
    "log_expit": (S.log_expit, sp.log_expit, [X_ANY], [[-1.0, 0.3, 2.0]], [0], {}),
    "xlogy": (S.xlogy, sp.xlogy, [[[0.0], [2.0], [-1.5]], [0.0, 0.5, 3.0, INF, NAN]],
              [[0.5, 2.0], [1.5, 0.3]], [0, 1], {}),
    "xlog1py": (S.xlog1py, sp.xlog1py, [[[0.0], [2.0], [-1.5]], [-1.0, -0.5, 3.0, INF, NAN]],
                [[0.5, 2.0], [1.5, -0.3]], [0, 1], {}),
    "ndtr": (S.ndtr, sp.ndtr, [X_ANY], [[-1.0, 0.3, 2.0]], [0], {}),
    "log_ndtr": (S.log_ndtr, sp.log_ndtr, [X_ANY], [[-30.0, -1.0, 0.3, 2.0]], [0],
                 dict(rtol=1e-12)),
    "logsumexp": (S.logsumexp, sp.logsumexp, [M], [[[0.1, 0.5, -0.3], [1.0, 2.0, 0.5]]], [0],
                  {}),
    "logsumexp-b-axis": (lambda a, b: S.logsumexp(a, axis=1, b=b),
                         lambda a, b: sp.logsumexp(a, axis=1, b=b), [M, BW],
                         [[[0.1, 0.5, -0.3], [1.0, 2.0, 0.5]], BW], [0, 1], {}),
    "softmax": (lambda a: S.softmax(a, axis=1), lambda a: sp.softmax(a, axis=1), [M[:, :2]],
                [[[0.1, 0.5, -0.3], [1.0, 2.0, 0.5]]], [0], {}),
    "softmax-all": (S.softmax, sp.softmax, [M[:, :2]], [[[0.1, 0.5], [1.0, 2.0]]], [0], {}),
    "log_softmax": (lambda a: S.log_softmax(a, axis=0), lambda a: sp.log_softmax(a, axis=0),
                    [M[:, :2]], [[[0.1, 0.5, -0.3], [1.0, 2.0, 0.5]]], [0], {}),
}


@pytest.mark.parametrize("name", SPECIAL)
def test_special_values(name):
    ours, theirs, args, _, _, opts = SPECIAL[name]
    assert_matches(ours(*args), theirs(*args), rtol=opts.get("rtol", 1e-13))


@pytest.mark.parametrize("name", SPECIAL)
def test_special_derivatives(name):
    ours, theirs, _, args, diff, opts = SPECIAL[name]
    check_derivatives(ours, theirs, args, diff, hessian=opts.get("hessian", True))


def test_special_covers_scipys_names():
    base = {n.split("-")[0] for n in SPECIAL}
    assert base == set(S.__all__)
    for n in S.__all__:
        assert getattr(sp, n).__name__ in (n, "psi"), n  # SciPy's name, SciPy's function


def test_betaln_keeps_its_precision_at_large_arguments():
    # SciPy's own betaln loses up to ~1e-10 relative here (gammaln differences);
    # the oracle is mpmath at 40 digits
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    pairs = [(1e6, 1e-3), (1e6, 0.5), (1e6, 3.0), (1e3, 0.5), (1e10, 1e6), (-0.5, 1e10),
             (-2.5, 1e6), (1e300, 1e300), (30.0, 30.0), (1e10, 2.0)]
    a, b = np.array(pairs).T
    want = [float(mp.log(abs(mp.beta(mp.mpf(x), mp.mpf(y))))) for x, y in pairs]
    assert_matches(S.betaln(a, b), want, rtol=2e-15)
    assert_matches(S.betaln(b, a), want, rtol=2e-15)


def test_erfcx_derivatives_far_out():
    # the asymptotic series of erfcx' and erfcx'' against their closed forms' leading terms
    x = np.array([1e4, 1e8, 1e150])
    g = tg.grad(lambda t: S.erfcx(t).sum())(x)
    np.testing.assert_allclose(g, -1 / (np.sqrt(np.pi) * x**2) * (1 - 1.5 / x**2), rtol=1e-15)
    H = tg.hessian(lambda t: S.erfcx(t).sum())(x[:2])
    np.testing.assert_allclose(np.diag(H), 2 / (np.sqrt(np.pi) * x[:2]**3), rtol=1e-7)
    assert np.isfinite(S.erfcx(tg.tensor([1e300])).numpy()).all()


def test_entr_and_gamma_conventions():
    x = tg.tensor([0.0, -1.0, 0.5], requires_grad=True)
    S.entr(x).sum().backward()
    assert x.grad.numpy()[0] == np.inf and x.grad.numpy()[1] == 0.0   # one-sided at 0
    assert S.gamma(-0.0).numpy() == -np.inf and S.gamma(0.0).numpy() == np.inf
    assert np.signbit(S.gamma(-200.5).numpy())                       # -0.0, as SciPy


def test_special_argument_errors():
    with pytest.raises(ValueError, match=r"greater than \(d - 1\) / 2 = 1.0"):
        S.multigammaln(np.array([3.0, 1.0]), 3)
    with pytest.raises(ValueError, match="positive integer"):
        S.multigammaln(3.0, 0)
    with pytest.raises(ValueError, match="integers >= 0"):
        S.polygamma(1.5, 2.0)
    with pytest.raises(TypeError, match="complex"):
        S.gamma(np.array([1j]))


@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, True), (1, False), ((0, 1), True)])
def test_logsumexp_return_sign(axis, keepdims):
    y, s = S.logsumexp(M, axis=axis, b=BW, keepdims=keepdims, return_sign=True)
    y2, s2 = sp.logsumexp(M, axis=axis, b=BW, keepdims=keepdims, return_sign=True)
    assert_matches(y, y2)
    np.testing.assert_array_equal(s, s2)
    y, s = S.logsumexp(M, axis=axis, keepdims=keepdims, return_sign=True)
    np.testing.assert_array_equal(s, sp.logsumexp(M, axis=axis, keepdims=keepdims,
                                                  return_sign=True)[1])


def test_float32_stays_float32():
    x = tg.tensor(np.float32([0.3, 0.7]), requires_grad=True)
    for y in (S.gamma(x), S.betaln(x, 2.0), S.i0(x), S.erfcx(x), S.ndtri(x), S.entr(x),
              ST.t.logpdf(x, 3.0, loc=0.5), ST.norm.cdf(x, scale=2.0), ST.binom.logpmf(2, 5, x)):
        assert y.dtype == np.float32


def test_traced_replay():
    def f(z):
        return (ST.t.logpdf(z, 3.5, 0.1, 1.3) + S.erfcx(z) + S.ndtri(S.expit(z)) + S.i0(z)
                + S.betaln(tg.abs(z) + 1.0, 30.0)).sum() + S.logsumexp(z, b=[1.0, 2.0, 0.5])
    x0, x1 = np.array([0.3, -0.7, 1.2]), np.array([-0.2, 0.4, 2.5])
    ft = tg.trace(f, x0)
    np.testing.assert_allclose(ft(x1), f(tg.tensor(x1)).numpy(), rtol=1e-15)
    np.testing.assert_allclose(ft.grad(x1), tg.grad(f)(x1), rtol=1e-14)
    np.testing.assert_allclose(ft.hessian(x1), tg.hessian(f)(x1), rtol=1e-13, atol=1e-14)


# -- scipy.stats: univariate ----------------------------------------------------------------
X_REAL = [-INF, -40.0, -3.0, -0.5, 0.0, 0.5, 3.0, 40.0, INF, NAN]
X_POS = [-1.0, -0.0, 0.0, 1e-300, 0.5, 1.0, 3.0, 50.0, INF, NAN]
X_UNIT = [-0.1, 0.0, 1e-10, 0.3, 0.5, 1 - 1e-10, 1.0, 1.1, NAN]
Q = [-0.1, 0.0, 1e-300, 1e-10, 0.3, 0.5, 0.9, 1.0, 1.1, NAN]
ALL = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf")

# distribution -> (methods, x for the values, shape parameters for the values (each
# broadcast on an axis of its own), a smooth point (x, shapes..., loc, scale))
CONTINUOUS = {
    "norm": (ALL, X_REAL, [], [[0.3, -1.2], 0.2, 1.3]),
    "t": (("logpdf", "pdf"), X_REAL, [[0.5, 1.0, 3.5, 30.0, 1e6, INF, 0.0, -1.0]],
          [[0.3, -1.2], [3.5, 1.5], 0.2, 1.3]),
    "gamma": (("logpdf", "pdf"), X_POS, [[0.5, 1.0, 2.5, 30.0, 0.0, -1.0]],
              [[1.7, 0.6], [2.5, 0.8], 0.2, 1.3]),
    "beta": (("logpdf", "pdf"), X_UNIT, [[0.5, 1.0, 2.5], [0.5, 1.0, 3.0, -1.0]],
             [[0.7, 0.45], [2.5, 0.8], [1.5, 3.0], 0.1, 1.2]),
    "lognorm": (ALL, X_POS, [[0.3, 1.0, 2.5, 0.0, -1.0]], [[1.2, 2.5], [0.8, 1.4], 0.1, 1.4]),
    "expon": (ALL, X_POS + [1e-20, 800.0], [], [[1.7, 0.6], 0.2, 1.3]),
    "uniform": (ALL, X_UNIT + [1.5], [], [[0.7, 0.45], 0.1, 1.2]),
}
ROWS = [(d, m) for d, (ms, *_) in CONTINUOUS.items() for m in ms]


def _on_axes(x, shapes):
    """x on axis 0, each shape parameter on an axis of its own."""
    n = 1 + len(shapes)
    out = []
    for i, a in enumerate([x] + list(shapes)):
        s = [1] * n
        s[i] = -1
        out.append(np.reshape(np.asarray(a, float), s))
    return out


@pytest.mark.parametrize("dist,method", ROWS)
def test_continuous_values(dist, method):
    _, xs, shapes, _ = CONTINUOUS[dist]
    xs = Q if method == "ppf" else xs
    args = _on_axes(xs, shapes)
    ours, theirs = getattr(getattr(ST, dist), method), getattr(getattr(st, dist), method)
    rtol = 1e-12
    with np.errstate(all="ignore"):
        assert_matches(ours(*args), theirs(*args), rtol=rtol)
        # loc and scale by keyword, scale broadcast on a new leading axis (0 and -1: NaN)
        scale = np.array([1.7, 0.0, -1.0]).reshape((3,) + (1,) * len(args))
        assert_matches(ours(*args, loc=0.4, scale=scale), theirs(*args, loc=0.4, scale=scale),
                       rtol=rtol)
        # and positionally
        assert_matches(ours(*args, -0.3, 2.5), theirs(*args, -0.3, 2.5), rtol=rtol)


@pytest.mark.parametrize("dist,method", ROWS)
def test_continuous_derivatives(dist, method):
    point = list(CONTINUOUS[dist][3])
    if method == "ppf":
        point[0] = [0.3, 0.85]
    ours, theirs = getattr(getattr(ST, dist), method), getattr(getattr(st, dist), method)
    n = len(point)
    check_derivatives(lambda *a: ours(*a[:-2], loc=a[-2], scale=a[-1]),
                      lambda *a: theirs(*a[:-2], loc=a[-2], scale=a[-1]), point, range(n))


def test_t_at_large_df_and_infinite_df():
    # betaln keeps the normalising constant exact at large df; df = inf is the normal
    x = np.array([0.0, 1.0, -2.5])
    np.testing.assert_allclose(ST.t.logpdf(x, 1e20).numpy(), st.norm.logpdf(x), rtol=4e-15)
    assert_matches(ST.t.logpdf(x, INF), st.norm.logpdf(x), rtol=1e-15)
    df = tg.tensor([INF, 4.0], requires_grad=True)
    ST.t.logpdf(1.0, df).sum().backward()
    assert df.grad.numpy()[0] == 0.0 and np.isfinite(df.grad.numpy()[1])


# -- scipy.stats: discrete ------------------------------------------------------------------
DISCRETE = {
    "poisson": ([-1.0, 0.0, 1.0, 1.5, 3.0, 10.0, 200.0, NAN], [[0.0, 0.5, 3.5, 100.0, -1.0]],
                [3.0, [2.5, 0.7]], [1]),
    "binom": ([-1.0, 0.0, 1.0, 2.5, 3.0, 5.0, 30.0, 31.0, NAN],
              [[0.0, 1.0, 5.0, 30.0, 2.5, -1.0], [0.0, 0.3, 1.0, 1.5]],
              [3.0, 7.0, [0.3, 0.55]], [2]),
    "nbinom": ([-1.0, 0.0, 1.0, 2.5, 3.0, 50.0, NAN],
               [[0.5, 1.0, 2.5, 30.0, 0.0], [1e-3, 0.3, 1.0, 0.0, 1.5]],
               [3.0, [2.5, 7.0], [0.4, 0.3]], [1, 2]),
}
DROWS = [(d, m) for d in DISCRETE for m in ("logpmf", "pmf")]


@pytest.mark.parametrize("dist,method", DROWS)
def test_discrete_values(dist, method):
    ks, shapes, _, _ = DISCRETE[dist]
    args = _on_axes(ks, shapes)
    ours, theirs = getattr(getattr(ST, dist), method), getattr(getattr(st, dist), method)
    with np.errstate(all="ignore"):
        assert_matches(ours(*args), theirs(*args), rtol=1e-12, atol=1e-300)
        assert_matches(ours(*args, loc=1.0), theirs(*args, loc=1.0), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dist,method", DROWS)
def test_discrete_derivatives(dist, method):
    _, _, point, diff = DISCRETE[dist]
    ours, theirs = getattr(getattr(ST, dist), method), getattr(getattr(st, dist), method)
    check_derivatives(ours, theirs, point, diff)


def test_binom_keeps_its_precision_at_large_n():
    # log C(n, k) through betaln: no cancellation of gammaln(n + 1) - ...; what
    # remains is the cancellation between log C(n, k) and k log p + ... at
    # k = n p, about 1e-16 * n / |logpmf| relative (SciPy's: 1e-10 at 5e5)
    k, n, p = np.array([10.0, 5e5, 999_990.0]), 1e6, np.array([1e-5, 0.5, 0.99999])
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    want = [float(mp.log(mp.binomial(int(n), int(kk)) * mp.mpf(pp)**int(kk)
                         * (1 - mp.mpf(pp))**int(n - kk))) for kk, pp in zip(k, p)]
    assert_matches(ST.binom.logpmf(k, n, p), want, rtol=5e-12)


# -- scipy.stats: arguments -----------------------------------------------------------------
def test_stats_arguments_as_scipy():
    x = np.array([0.3, 1.5])
    assert_matches(ST.gamma.logpdf(x, a=2.5, scale=2.0), st.gamma.logpdf(x, a=2.5, scale=2.0))
    assert_matches(ST.beta.pdf(x / 2, 2.0, b=3.0), st.beta.pdf(x / 2, 2.0, b=3.0))
    assert_matches(ST.t.logpdf(x, 3.0, 0.5), st.t.logpdf(x, 3.0, 0.5))
    assert_matches(ST.nbinom.pmf(2, n=3.0, p=0.4, loc=1), st.nbinom.pmf(2, n=3.0, p=0.4, loc=1))
    assert_matches(ST.norm.logpdf(3), st.norm.logpdf(3))            # integers compute in float64
    with pytest.raises(TypeError, match=r"missing the shape parameter 'a'"):
        ST.gamma.logpdf(x)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'sigma'"):
        ST.norm.logpdf(x, sigma=2.0)
    with pytest.raises(TypeError, match=r"multiple values for argument 'loc'"):
        ST.norm.logpdf(x, 0.0, loc=1.0)
    with pytest.raises(TypeError, match=r"at most 4 positional"):
        ST.t.logpdf(x, 1.0, 2.0, 3.0, 4.0)


# -- scipy.stats.multivariate_normal ------------------------------------------------------
RNG = np.random.default_rng(5)
L3 = np.array([[1.2, 0.0, 0.0], [0.4, 0.9, 0.0], [-0.3, 0.2, 0.7]])
COV3 = L3 @ L3.T
COV3_UPPER_JUNK = np.tril(COV3) + np.triu(RNG.normal(size=(3, 3)), 1)  # SciPy reads the lower


@pytest.mark.parametrize("x,mean,cov", [
    (RNG.normal(size=(4, 3)), [0.1, -0.2, 0.3], COV3),
    (RNG.normal(size=(2, 2, 3)), [0.1, -0.2, 0.3], COV3_UPPER_JUNK),
    (RNG.normal(size=3), [0.1, -0.2, 0.3], COV3),                  # one point: a scalar
    (RNG.normal(size=(5, 3)), None, COV3),
    (RNG.normal(size=(5, 3)), [0.0, 1.0, 2.0], [0.5, 1.0, 2.0]),   # the diagonal
    (RNG.normal(size=(5, 3)), [0.0, 1.0, 2.0], 1.7),                # times the identity
    (RNG.normal(size=5), 0.5, 2.0),                                 # dim 1: five points
    (0.3, None, 2.0),
])
def test_multivariate_normal_values(x, mean, cov):
    for m in ("logpdf", "pdf"):
        assert_matches(getattr(ST.multivariate_normal, m)(x, mean, cov),
                       getattr(st.multivariate_normal, m)(x, mean, cov))
    frozen, sfrozen = ST.multivariate_normal(mean, cov), st.multivariate_normal(mean, cov)
    assert_matches(frozen.logpdf(x), sfrozen.logpdf(x))


def test_multivariate_normal_derivatives():
    x, mean = RNG.normal(size=(2, 3)), np.array([0.1, -0.2, 0.3])
    # in x, mean and every entry of cov (SciPy's function reads the lower triangle)
    check_derivatives(lambda *a: ST.multivariate_normal.logpdf(*a),
                      lambda *a: st.multivariate_normal.logpdf(*a),
                      [x, mean, COV3_UPPER_JUNK], [0, 1, 2])
    check_derivatives(lambda x, m, d: ST.multivariate_normal.pdf(x, m, d),
                      lambda x, m, d: st.multivariate_normal.pdf(x, m, d),
                      [x[0], mean, [0.5, 1.0, 2.0]], [0, 1, 2])


def test_multivariate_normal_errors():
    with pytest.raises(ValueError, match="not positive definite"):
        ST.multivariate_normal.logpdf([0.0, 0.0], cov=[[1.0, 0.0], [2.0, 1.0]])
    with pytest.raises(NotImplementedError, match="allow_singular"):
        ST.multivariate_normal.logpdf([0.0, 0.0], cov=np.eye(2), allow_singular=True)
    with pytest.raises(ValueError, match="3 components.*the distribution 2"):
        ST.multivariate_normal.logpdf([0.0, 0.0, 0.0], mean=[0.0, 0.0])
    with pytest.raises(ValueError, match="pass mean"):
        ST.multivariate_normal.logpdf([0.0, 0.0], cov=[1.0, 2.0])


# -- what the SciPy functions themselves say, and what is imported -----------------------
def test_scipy_functions_name_their_counterparts():
    x = tg.tensor([0.5, 1.5], requires_grad=True)
    with pytest.raises(TypeError, match=r"scipy\.special\.gamma yet\. Write "
                                        r"tapegrad\.scipy\.special\.gamma \(same arguments\)"):
        sp.gamma(x)
    calls = [(lambda: st.norm.logpdf(x), "scipy.stats.norm.logpdf"),
             (lambda: st.gamma.pdf(1.0, x), "scipy.stats.gamma.pdf"),
             (lambda: st.multivariate_normal.logpdf(x, [0.0, 0.0]),
              "scipy.stats.multivariate_normal.logpdf"),
             (lambda: sp.multigammaln(x, 2), "scipy.special.multigammaln"),
             (lambda: sp.polygamma(1, x), "scipy.special.polygamma")]
    for call, name in calls:
        with pytest.raises(RuntimeError, match=rf"{name} converts its input to NumPy.*write "
                                               rf"tapegrad\.{name} \(same arguments\)"):
            call()
    with pytest.raises(RuntimeError, match=r"norm\.logpdf \(of a frozen distribution\).*"
                                           r"write tapegrad\.scipy\.stats\.norm\.logpdf with"):
        st.norm(0.0, 2.0).logpdf(x)
    with pytest.raises(RuntimeError, match=r"scipy\.stats\.cauchy\.logpdf converts its input.*"
                                           r"no counterpart"):
        st.cauchy.logpdf(x)


def test_stats_tables_cover_every_distribution_and_method():
    methods = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "logpmf", "pmf")
    tested = {d: set(ms) for d, (ms, *_) in CONTINUOUS.items()}
    tested.update({d: {"logpmf", "pmf"} for d in DISCRETE})
    tested["multivariate_normal"] = {"logpdf", "pdf"}
    assert tested == {d: {m for m in methods if hasattr(getattr(ST, d), m)} for d in ST.__all__}


def test_counterpart_list_is_tapegrad_scipy():
    from tapegrad.core.tensor import SCIPY_COUNTERPARTS
    from tapegrad.scipy import linalg as SL
    have = {f"special.{n}" for n in S.__all__} | {f"linalg.{n}" for n in SL.__all__}
    for d in ST.__all__:
        obj = getattr(ST, d)
        have |= {f"stats.{d}.{m}" for m in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf",
                                             "ppf", "logpmf", "pmf") if hasattr(obj, m)}
    assert SCIPY_COUNTERPARTS == have


def test_imports_without_scipy():
    # import tapegrad imports no SciPy; tapegrad.scipy needs it only for the
    # values of erfcx and ndtri, and says how to install it
    code = ("import sys; import tapegrad, tapegrad.scipy; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'scipy'], 'imported'; "
            "sys.modules['scipy'] = None; import numpy as np; "
            "from tapegrad.scipy import special, stats; "
            "assert np.isfinite(stats.norm.logpdf([0.5]).numpy()).all(); "
            "assert np.isfinite(special.gamma([0.5]).numpy()).all()\n"
            "try:\n    special.ndtri(0.5)\nexcept ImportError as e:\n"
            "    assert 'pip install scipy' in str(e), e\nelse:\n    raise AssertionError")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reference_example_runs():
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)\n\s*```", text, re.S)
                 if "from tapegrad.scipy import special, stats" in b)
    ns = {}
    exec(block, ns)
    x = ns["x"]

    def nll(p):
        return -st.gamma.logpdf(x, np.exp(p[0]), scale=np.exp(p[1])).sum()
    np.testing.assert_allclose(ns["g"], _fd(nll, np.zeros(2)), rtol=1e-7)
    np.testing.assert_allclose(ns["g"], [-3.6225863, -2.8], rtol=1e-7)
    np.testing.assert_allclose(ns["H"], ns["H"].T, rtol=1e-14)
