"""scipy.special's functions on tensors: values against SciPy (when it is
installed; tapegrad never imports it), routing of SciPy's ufuncs through
``__array_ufunc__``, closed-form derivatives, and the error that names
SciPy's module."""
import math
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.kernels import special as KS
from tapegrad.kernels.coverage import as_python

from oracle import check_hvp, check_vjp, leaf

RNG = np.random.default_rng(20261203)
WIDE = np.concatenate([RNG.uniform(-30, 30, 4000), 10 ** RNG.uniform(-12, 5, 1000),
                       -(10 ** RNG.uniform(-12, 5, 1000)),
                       [0.0, -0.0, 1.0, 2.0, 0.5, -0.5, 1e-300, np.inf, -np.inf, np.nan]])


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(all="ignore"):
        r = np.abs(a - b) / np.maximum(np.abs(b), 1e-300)
    return np.where(same, 0.0, np.where(np.isfinite(r), r, np.inf))


def _scipy():
    return pytest.importorskip("scipy.special")


# name -> (tapegrad function, inputs, relative tolerance, absolute tolerance)
VALUES = {
    "erf": (tg.erf, WIDE, 1e-15, 0.0),
    "erfc": (tg.erfc, WIDE[np.abs(WIDE) < 26.0], 1e-13, 0.0),  # beyond: SciPy flushes to 0
    "erfinv": (tg.erfinv, np.concatenate([RNG.uniform(-1, 1, 4000), 1 - 10 ** RNG.uniform(-16, 0, 500),
                                          10 ** RNG.uniform(-300, 0, 500),
                                          [1.0, -1.0, 0.0, 2.0, -1.5, np.nan]]), 1e-14, 0.0),
    "gammaln": (tg.gammaln, WIDE, 1e-13, 1e-15),
    # positive x and the poles; negative x: against mpmath below (SciPy's own
    # values lose up to 1e-12 there, near the zeros between the poles)
    "digamma": (tg.digamma, np.concatenate([WIDE[WIDE > 0], [0.0, -0.0, -1.0, -2.0, np.inf,
                                                              -np.inf, np.nan]]), 1e-13, 1e-15),
    "i0e": (tg.i0e, WIDE, 1e-14, 0.0),
    "i1e": (tg.i1e, WIDE, 1e-14, 0.0),
    # the tails' condition number grows as x^2: rounding x / sqrt(2) alone costs
    # x^2 eps (in SciPy as here)
    "log_ndtr": (tg.log_ndtr, np.concatenate([WIDE[WIDE < 37.0], -(10 ** RNG.uniform(0, 10, 500))]),
                 lambda x: 1e-14 + 3e-16 * np.minimum(x * x, 1e4), 1e-300),
    "ndtr": (tg.ndtr, WIDE, lambda x: 1e-14 + 3e-16 * np.minimum(x * x, 1e4), 1e-300),
    # (SciPy flushes expit below -709 to 0; tapegrad keeps the subnormals)
    "expit": (tg.expit, np.concatenate([WIDE, RNG.uniform(-800, 800, 500)]), 1e-15, 1e-300),
    "log_expit": (tg.log_expit, np.concatenate([WIDE, RNG.uniform(-800, 800, 500)]), 1e-14, 0.0),
    "logit": (tg.logit, np.concatenate([RNG.uniform(0, 1, 4000), 10 ** RNG.uniform(-300, 0, 500),
                                        0.5 + 10 ** RNG.uniform(-15, -1, 200),
                                        [0.0, 1.0, 0.5, 2.0, -1.0, np.nan]]), 1e-14, 0.0),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_match_scipy(name):
    special = _scipy()
    fn, x, rtol, atol = VALUES[name]
    ref = getattr(special, name)(x)
    got = fn(tg.tensor(x)).numpy()
    assert got.dtype == ref.dtype
    err = _rel(got, ref)
    if callable(rtol):
        rtol = rtol(np.nan_to_num(x))
    bad = err > rtol + atol / np.maximum(np.abs(ref), 1e-300)
    assert not bad.any(), (x[bad][:5], got[bad][:5], ref[bad][:5])


@pytest.mark.parametrize("name", ["xlogy", "xlog1py"])
def test_binary_values_match_scipy(name):
    special = _scipy()
    x = np.array([0.0, 0.0, 0.0, 0.0, 1.5, -2.0, 3.0, 0.0, 1.0])
    y = np.array([0.0, -1.0, 2.0, np.inf, 0.5, 3.0, 0.0, np.nan, -1.0])
    with np.errstate(all="ignore"):
        ref = getattr(special, name)(x, y)
        got = getattr(tg, name)(tg.tensor(x), tg.tensor(y)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-15)


def test_digamma_near_its_positive_root_keeps_relative_accuracy():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    x = 1.4616321449683622 + np.concatenate([np.linspace(-0.1, 0.1, 41), [1e-10, -1e-13, 0.0]])
    ref = np.array([float(mpmath.digamma(mpmath.mpf(float(v)))) for v in x])
    assert _rel(tg.digamma(tg.tensor(x)).numpy(), ref).max() < 1e-14


def test_digamma_of_negative_arguments():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    x = -RNG.uniform(0, 30, 300)
    x = x[np.abs(x - np.round(x)) > 1e-3]
    ref = np.array([float(mpmath.digamma(mpmath.mpf(float(v)))) for v in x])
    np.testing.assert_allclose(tg.digamma(tg.tensor(x)).numpy(), ref, rtol=2e-13, atol=1e-15)


def test_polygammas_match_scipy():
    special = _scipy()
    x = np.concatenate([RNG.uniform(-20, 30, 2000), 10 ** RNG.uniform(-8, 5, 500)])
    x = x[np.abs(x - np.round(x)) > 1e-3]
    tri = np.array([KS.trigamma(v) for v in x])
    tetra = np.array([KS.tetragamma(v) for v in x])
    assert _rel(tri, special.polygamma(1, x)).max() < 1e-13
    # psi'' cancels near its zeros at negative x: absolute error there
    np.testing.assert_allclose(tetra, special.polygamma(2, x), rtol=1e-11, atol=1e-13)


def test_the_kernels_run_the_same_as_python():
    # the registry's check and the interpreted tier run these as Python
    for fn, args in [(KS.digamma, (-2.5,)), (KS.trigamma, (0.3,)), (KS.tetragamma, (-0.7,)),
                     (KS.erfinv, (0.99,)), (KS.ive, (3, -25.0)), (KS.log_ndtr, (-30.0,)),
                     (KS.gammaln, (-3.0,)), (KS.d2_log_ndtr, (-12.0,))]:
        assert as_python(fn)(*args) == pytest.approx(fn(*args), rel=1e-15, abs=0.0)


def test_closed_form_derivatives():
    x = leaf([-1.3, 0.2, 0.7, 2.5])
    tg.erf(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 / np.sqrt(np.pi) * np.exp(-x.numpy() ** 2),
                               rtol=1e-15)
    u = leaf([-0.9, 0.1, 0.6])
    y = tg.erfinv(u)
    y.sum().backward()
    np.testing.assert_allclose(u.grad.numpy(), np.sqrt(np.pi) / 2 * np.exp(y.numpy() ** 2),
                               rtol=1e-14)
    # d/dx log Gamma at 1 is -Euler's gamma; d/dx psi at 1 is pi^2 / 6
    g = leaf([1.0])
    (tg.gammaln(g) + tg.digamma(g)).sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), [-0.5772156649015329 + np.pi ** 2 / 6], rtol=1e-14)
    H = tg.hessian(lambda t: tg.gammaln(t).sum())(np.array([1.0, 2.0]))
    np.testing.assert_allclose(np.diag(H), [np.pi ** 2 / 6, np.pi ** 2 / 6 - 1], rtol=1e-14)
    # i0e at 0: i0e'(0) = 0 (the mean of the one-sided slopes -1, 1), i1e'(0) = 1/2
    z = leaf([0.0])
    (tg.i0e(z) + tg.i1e(z)).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0.5], rtol=1e-15)


def test_gradients_far_in_the_tails_are_finite():
    x = leaf([-1e4, -40.0, -12.0, -9.0, 0.0, 40.0, 1e4])
    tg.log_ndtr(x).sum().backward()
    g = x.grad.numpy()
    assert np.isfinite(g).all()
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    ratio = [float(mpmath.npdf(v) / mpmath.ncdf(v)) for v in x.numpy()]  # phi / Phi
    np.testing.assert_allclose(g, ratio, rtol=1e-13)
    # the second derivative -d (x + d) below -10 from the series (x + d cancels)
    H = tg.hessian(lambda t: tg.log_ndtr(t).sum())(np.array([-40.0, -9.0]))
    np.testing.assert_allclose(np.diag(H), [-r * (v + r) for r, v in
                                            zip([float(mpmath.npdf(-40) / mpmath.ncdf(-40)),
                                                 float(mpmath.npdf(-9) / mpmath.ncdf(-9))],
                                                [-40.0, -9.0])], rtol=2e-11)
    e = leaf([-800.0, -40.0, 0.0, 40.0, 800.0])
    tg.expit(e).sum().backward()
    assert np.isfinite(e.grad.numpy()).all()
    np.testing.assert_allclose(e.grad.numpy()[2], 0.25)
    H = tg.hessian(lambda t: tg.expit(t).sum())(np.array([-800.0, 0.0, 800.0]))
    assert np.isfinite(H).all() and H[1, 1] == 0.0


SPECIAL_COMPOSITES = {
    "expit": (lambda x: tg.expit(x), [RNG.uniform(-5, 5, (3, 2))]),
    "log_expit": (lambda x: tg.log_expit(x), [RNG.uniform(-5, 5, (4,))]),
    "logit": (lambda p: tg.logit(p), [np.array([0.05, 0.3, 0.5, 0.6, 0.8, 0.97])]),
    "ndtr": (lambda x: tg.ndtr(x), [RNG.uniform(-4, 4, (5,))]),
    "xlogy": (lambda x, y: tg.xlogy(x, y), [np.array([0.5, -1.0, 2.0]), np.array([0.3, 1.5, 2.0])]),
    "xlog1py": (lambda x, y: tg.xlog1py(x, y), [np.array([0.5, -1.0, 2.0]),
                                                np.array([-0.3, 1.5, 2.0])]),
}


@pytest.mark.parametrize("name", sorted(SPECIAL_COMPOSITES))
def test_composite_first_and_second_order(name):
    fn, arrays = SPECIAL_COMPOSITES[name]
    check_vjp(fn, arrays, np.random.default_rng(3))
    check_hvp(fn, arrays, np.random.default_rng(4))


def test_xlogy_gradients_where_x_is_zero():
    x, y = leaf([0.0, 0.0]), leaf([2.0, 0.0])
    tg.xlogy(x, y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [np.log(2.0), 0.0])
    np.testing.assert_allclose(y.grad.numpy(), [0.0, 0.0])


def test_scipy_ufuncs_dispatch_to_tapegrad():
    special = _scipy()
    x = leaf([0.2, 0.7])
    pairs = [(special.expit, tg.expit), (special.logit, tg.logit), (special.erf, tg.erf),
             (special.erfc, tg.erfc), (special.erfinv, tg.erfinv), (special.ndtr, tg.ndtr),
             (special.log_ndtr, tg.log_ndtr), (special.gammaln, tg.gammaln),
             (special.digamma, tg.digamma), (special.psi, tg.digamma), (special.i0e, tg.i0e),
             (special.i1e, tg.i1e), (special.log_expit, tg.log_expit)]
    for sfn, tfn in pairs:
        y = sfn(x)
        assert isinstance(y, tg.Tensor) and y.requires_grad, sfn
        np.testing.assert_array_equal(y.numpy(), tfn(x).numpy())
        np.testing.assert_allclose(y.numpy(), sfn(x.numpy()), rtol=1e-14)
    for sfn in (special.xlogy, special.xlog1py):
        y = sfn(x, x)
        assert isinstance(y, tg.Tensor) and y.requires_grad
        np.testing.assert_allclose(y.numpy(), sfn(x.numpy(), x.numpy()), rtol=1e-15)
        y = sfn(2.0, x)  # a tensor in either place
        assert isinstance(y, tg.Tensor) and y.requires_grad
    # second order through SciPy's names
    H = tg.hessian(lambda t: special.expit(t).sum())(np.array([0.3]))
    s = 1 / (1 + np.exp(-0.3))
    np.testing.assert_allclose(H, [[s * (1 - s) * (1 - 2 * s)]], rtol=1e-14)


def test_unsupported_scipy_ufunc_names_its_module():
    special = _scipy()
    x = leaf([0.5])
    with pytest.raises(TypeError, match=r"cannot differentiate scipy\.special\.gamma yet"):
        special.gamma(x)
    with pytest.raises(TypeError, match=r"scipy\.special\.erf\(\.\.\., out=\.\.\.\)"):
        special.erf(x, out=np.empty(1))


def test_numpy_ufunc_names_stay_numpy():
    x = leaf([0.5])
    with pytest.raises(TypeError, match=r"cannot differentiate numpy\.spacing yet"):
        np.spacing(x)


def test_scipy_logsumexp_cannot_be_intercepted_and_says_what_to_write():
    special = _scipy()
    x = leaf([0.5, 1.0])
    # scipy.special.logsumexp is a Python function that converts with
    # np.asarray: no protocol reaches tapegrad, the conversion refuses
    for name in ("logsumexp", "softmax", "log_softmax"):
        ours = rf"tapegrad\.scipy\.special\.{name} \(same arguments\)"
        with pytest.raises(RuntimeError, match=rf"converted to a NumPy array.*scipy\.special\."
                                               rf"{name} converts its input.*write {ours}"):
            getattr(special, name)(x)
    with pytest.raises(RuntimeError, match=r"out\[i\] = t\)\. Keep it a tensor"):
        np.asarray(x)                        # no library function to name
    np.testing.assert_allclose(tg.logsumexp(x).numpy(), special.logsumexp(x.numpy()), rtol=1e-15)


def test_tapegrad_works_without_scipy():
    # (Numba imports SciPy itself when it is installed: block it altogether)
    code = ("import sys; sys.modules['scipy'] = None; import numpy as np, tapegrad as tg; "
            "t = tg.tensor([0.5, -1.5], requires_grad=True); "
            "(tg.erf(t) + tg.digamma(t) + tg.expit(t) + tg.log_ndtr(t)).sum().backward(); "
            "assert np.isfinite(t.grad.numpy()).all()")
    subprocess.run([sys.executable, "-c", code], check=True)
    import pathlib
    src = pathlib.Path(tg.__file__).parent
    for f in src.rglob("*.py"):
        if f.parent.name == "scipy":  # tapegrad.scipy may, and `import tapegrad` skips it
            continue
        assert "import scipy" not in f.read_text() and "from scipy" not in f.read_text(), f


def test_float32_stays_float32():
    x = tg.tensor(np.array([0.1, 0.5], np.float32), requires_grad=True)
    for fn in (tg.erf, tg.erfinv, tg.gammaln, tg.digamma, tg.i0e, tg.log_ndtr, tg.expit):
        y = fn(x)
        assert y.dtype == np.float32, fn
        y.sum().backward()
        assert x.grad.dtype == np.float32
        x.grad = None
    np.testing.assert_allclose(tg.erf(x).numpy(), [math.erf(0.1), math.erf(0.5)], rtol=1e-7)


def _special_mix(x):
    return (tg.erf(x) + tg.erfc(x) * tg.gammaln(x + 3.0) + tg.digamma(x + 3.0) + tg.i0e(x)
            + tg.i1e(x) + tg.log_ndtr(x) + tg.erfinv(x * 0.3) + tg.expit(x)
            + tg.logit(tg.expit(x)) + tg.xlogy(x, x * x + 1.0)).sum()


def test_traced_replay_and_tape_file(tmp_path):
    x0, x1 = np.array([0.3, -0.7, 1.2]), np.array([-0.2, 0.0, 2.5])
    f = tg.trace(_special_mix, x0)
    np.testing.assert_array_equal(f(x1), _special_mix(tg.tensor(x1)).numpy())
    np.testing.assert_allclose(f.grad(x1), tg.grad(_special_mix)(x1), rtol=1e-14)
    np.testing.assert_allclose(f.hessian(x1), tg.hessian(_special_mix)(x1), rtol=1e-13,
                               atol=1e-14)
    f.save(tmp_path / "special.npz")
    g = tg.load(tmp_path / "special.npz")
    np.testing.assert_array_equal(g(x1), f(x1))
    np.testing.assert_allclose(g.grad(x1), f.grad(x1), rtol=1e-15)


def test_forward_mode():
    x = np.array([-0.2, 0.4, 2.5])
    v = np.array([1.0, -2.0, 0.5])
    _, jv = tg.jvp(_special_mix, (x,), (v,))
    np.testing.assert_allclose(jv, tg.grad(_special_mix)(x) @ v, rtol=1e-13)


def test_nested_first_derivatives_agree_with_the_hessian():
    def f(x):
        return (tg.erf(x) * tg.digamma(x + 2.0) + tg.i1e(x) + tg.log_ndtr(x)
                + np.interp(x, [0.0, 1.0, 2.0], [0.0, 3.0, 1.0]) + np.sinc(x)).sum()
    x = np.array([0.3, 0.8, 1.4])
    H = tg.hessian(f)(x)
    t = tg.tensor(x, requires_grad=True)
    (g,) = tg.autograd.grad(f(t), t, create_graph=True)
    (h,) = tg.autograd.grad((g * np.array([1.0, 2.0, 3.0])).sum(), t)
    np.testing.assert_allclose(h.numpy(), H @ np.array([1.0, 2.0, 3.0]), rtol=1e-13)
    np.testing.assert_allclose(tg.jacobian(tg.grad(f))(x), H, rtol=1e-13, atol=1e-15)
