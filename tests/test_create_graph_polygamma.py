"""``polygamma(n, x)`` and ``create_graph=True`` through digamma (whose
derivative is ``polygamma(1, x)``): the kernel against SciPy, derivatives
to the fourth order against central differences and PyTorch."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.special import polygamma
from test_create_graph import _fd_of_hessian, _flat_f, _third

RNG = np.random.default_rng(13)
XS = np.array([1e-3, 0.3, 1.0, 1.4616, 2.5, 7.0, 11.9, 13.0, 50.0, 1e3,
               -0.5, -1.3, -2.7, -10.2])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_polygamma_matches_scipy(n):
    sp = pytest.importorskip("scipy.special")
    np.testing.assert_allclose(polygamma(n, XS), sp.polygamma(n, XS), rtol=5e-15)


def test_polygamma_poles_and_orders():
    assert polygamma(1, np.array([0.0, -2.0])).tolist() == [np.inf, np.inf]
    assert np.isnan(polygamma(2, np.array([0.0, -2.0]))).all()
    np.testing.assert_allclose(polygamma(0, XS), tg.digamma(XS))
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="integer >= 0"):
            polygamma(bad, XS)


def _orders(m, x, f, k, mk):
    """k gradients of f, each of the last one's square sum, create_graph each time."""
    y = f(m, x)
    out = []
    for j in range(k):
        (g,) = m.autograd.grad(y, x, create_graph=j < k - 1)
        out.append(g)
        y = (g * mk(np.linspace(0.5, 1.5, g.shape[0]))).sum() + (g * g).sum()
    return out


def _digamma_f(m, x):
    lg = m.gammaln(x) if m is tg else m.lgamma(x)
    return (m.digamma(x) * x).sum() + lg.sum()


def test_digamma_four_orders_match_torch():
    torch = pytest.importorskip("torch")
    z = np.array([0.7, 1.3, 2.9, -0.4])
    got = _orders(tg, tg.tensor(z, requires_grad=True), _digamma_f, 4, lambda a: a)
    want = _orders(torch, torch.tensor(z, requires_grad=True), _digamma_f, 4, torch.tensor)
    for a, b in zip(got, want):
        # PyTorch's trigamma is good to about 5e-10 relative
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-7)


def test_polygamma_four_orders_match_torch():
    torch = pytest.importorskip("torch")
    z = np.array([0.4, 1.7, 5.5])

    def f(m, x):
        return (polygamma(2, x) if m is tg else torch.polygamma(2, x)).sum()
    got = _orders(tg, tg.tensor(z, requires_grad=True), f, 4, lambda a: a)
    want = _orders(torch, torch.tensor(z, requires_grad=True), f, 4, torch.tensor)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-7)


def test_digamma_third_order_matches_central_differences_of_the_hessian():
    F = _flat_f(lambda a: tg.digamma(a) * tg.gammaln(a + 1.0) + tg.digamma(a * a), [(3,)])
    z = np.array([0.6, 1.4, 3.1])
    v, w = RNG.uniform(-1, 1, 3), RNG.uniform(-1, 1, 3)
    np.testing.assert_allclose(_third(F, z, v, w), _fd_of_hessian(F, z, v, w), rtol=1e-6)


def test_polygamma_gradient_matches_central_differences():
    z = np.array([0.45, 2.2, -1.6])
    for n in (1, 3):
        x = tg.tensor(z, requires_grad=True)
        polygamma(n, x).sum().backward()
        e = 1e-6
        fd = (polygamma(n, z + e) - polygamma(n, z - e)) / (2 * e)
        np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6)


def test_non_leaf_input_through_digamma():
    x = tg.tensor([0.4, 1.3], requires_grad=True)
    h = x * 2.0
    (gh,) = tg.autograd.grad((tg.digamma(h) * h).sum(), h, create_graph=True)
    hv = h.numpy()
    np.testing.assert_allclose(gh.numpy(), tg.digamma(hv) + hv * polygamma(1, hv))
    (gx,) = tg.autograd.grad(gh.sum(), x)        # 2 (2 psi1(h) + h psi2(h))
    want = 2 * (2 * polygamma(1, hv) + hv * polygamma(2, hv))
    np.testing.assert_allclose(gx.numpy(), want, rtol=1e-13)
