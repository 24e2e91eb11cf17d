"""``create_graph=True`` through prod and cumprod over inputs with zero
entries (products of the other elements, no division): third and fourth
derivatives against central differences of the compiled first gradient,
and against PyTorch where it is installed."""
import numpy as np
import pytest

import tapegrad as tg
from test_create_graph import _flat_f, _third

RNG = np.random.default_rng(5)

Z1 = np.array([[0.0, 1.2, -0.7], [0.5, 0.0, 0.0]])       # one zero, two zeros in a row
Z0 = np.array([[0.8, 1.2], [0.0, 0.9], [0.5, 0.0]])

CASES = {
    "prod axis 1": ((2, 3), Z1, lambda m, a: m.prod(a, 1)),
    "prod axis 0": ((3, 2), Z0, lambda m, a: m.prod(a, 0) * a[0]),
    "prod all": ((2, 3), Z1 + np.array([[0, 0, 0], [0, 0.9, 1.1]]),
                 lambda m, a: m.prod(a) * a),
    "cumprod axis 1": ((2, 3), Z1, lambda m, a: m.cumprod(a, 1)),
    "cumprod axis 0": ((3, 2), Z0, lambda m, a: m.cumprod(a, 0) * a),
}


def _tg_f(f):
    return lambda a: f(tg, a)


def _fd_third(F, z, v, w, e=1e-4):
    """grad_z (w . H(z) v) by central differences of the compiled first gradient
    (the functions are polynomials: the differences are accurate)."""
    g = tg.grad(F)

    def hv(p):
        return w @ (g(p + e * v) - g(p - e * v)) / (2 * e)
    I = np.eye(z.size)
    return np.array([(hv(z + e * I[i]) - hv(z - e * I[i])) / (2 * e) for i in range(z.size)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_third_order_with_zeros_matches_central_differences(name):
    shape, z, f = CASES[name]
    F = _flat_f(_tg_f(f), [shape])
    z = z.reshape(-1)
    v, w = RNG.uniform(-1, 1, z.size), RNG.uniform(-1, 1, z.size)
    got = _third(F, z, v, w)
    want = _fd_third(F, z, v, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("name", ["prod axis 1", "cumprod axis 1"])
def test_fourth_order_with_zeros_matches_differences_of_the_third(name):
    shape, z, f = CASES[name]
    F = _flat_f(_tg_f(f), [shape])
    z = z.reshape(-1)
    v, w, u = (RNG.uniform(-1, 1, z.size) for _ in range(3))
    # moving only the nonzero entries keeps the differences on the formula
    # over zeros (moving a zero to 1e-5 would take y / x, whose higher
    # derivatives cancel catastrophically there)
    u = u * (z != 0)

    def third(p):
        return _third(F, p, v, w)
    x = tg.tensor(z, requires_grad=True)
    (g,) = tg.autograd.grad(F(x), x, create_graph=True)
    (h,) = tg.autograd.grad((g * v).sum(), x, create_graph=True)
    (t,) = tg.autograd.grad((h * w).sum(), x, create_graph=True)
    (q,) = tg.autograd.grad((t * u).sum(), x)
    e = 1e-5
    want = (third(z + e * u) - third(z - e * u)) / (2 * e)
    np.testing.assert_allclose(q.numpy() @ u, want @ u, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["prod axis 1", "cumprod axis 1"])
def test_fourth_order_with_zeros_matches_torch(name):
    torch = pytest.importorskip("torch")
    shape, z, f = CASES[name]

    def run(m, x, mk):
        y = f(m, x.reshape(shape))
        y = (y * y * y).sum()
        for k in range(4):
            (g,) = m.autograd.grad(y, x, create_graph=k < 3)
            y = (g * mk(np.linspace(0.5, 1.5, z.size))).sum()
        return g
    got = run(tg, tg.tensor(z.reshape(-1), requires_grad=True), lambda a: a).numpy()
    want = run(torch, torch.tensor(z.reshape(-1), requires_grad=True), torch.tensor)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_third_order_with_zeros_matches_torch(name):
    torch = pytest.importorskip("torch")
    shape, z, f = CASES[name]
    F = _flat_f(_tg_f(f), [shape])
    v, w = RNG.uniform(-1, 1, z.size), RNG.uniform(-1, 1, z.size)
    got = _third(F, z.reshape(-1), v, w)

    def Ft(x):
        out = f(torch, x.reshape(shape)).reshape(-1)
        wt = torch.linspace(0.5, 1.5, out.numel(), dtype=torch.float64)
        return (out * wt).sum() + (out ** 3 * wt).sum() / 3.0
    x = torch.tensor(z.reshape(-1), dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(Ft(x), x, create_graph=True)
    (h,) = torch.autograd.grad((g * torch.tensor(v)).sum(), x, create_graph=True)
    (t,) = torch.autograd.grad((h * torch.tensor(w)).sum(), x)
    np.testing.assert_allclose(got, t.numpy(), rtol=1e-10, atol=1e-12)


def test_non_leaf_input_over_zeros():
    x = tg.tensor(np.array([0.0, 2.0, 3.0]), requires_grad=True)
    h = x * 1.0
    (gh,) = tg.autograd.grad(tg.prod(h) ** 2, h, create_graph=True)   # 2 p * others
    np.testing.assert_allclose(gh.numpy(), [0.0, 0.0, 0.0])
    (gx,) = tg.autograd.grad(gh[0], x)          # d/dx 2 p (x1 x2) = 2 (x1 x2)^2 e0
    np.testing.assert_allclose(gx.numpy(), [72.0, 0.0, 0.0])


def test_a_long_cumprod_over_zeros_stops_at_second_order():
    # the zero-safe formula takes n^2 elements along the scanned axis: past
    # its bound the gradient is the second-order node, whose own backward
    # (the compiled second order) has no rule over zeros either: it says so
    z = np.linspace(0.5, 1.5, 3000)
    z[7] = 0.0
    x = tg.tensor(z, requires_grad=True)
    (g,) = tg.autograd.grad(tg.cumprod(x, 0).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), tg.grad(lambda t: tg.cumprod(t, 0).sum())(z))
    with pytest.raises(NotImplementedError, match="cumprod over an array with zero entries"):
        tg.autograd.grad(g[:3].sum(), x)
    with pytest.raises(NotImplementedError, match="cumprod over an array with zero entries"):
        tg.autograd.grad(g[:3].sum(), x, create_graph=True)
