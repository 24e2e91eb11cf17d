"""tg.grad and tg.value_and_grad of complex arguments inside an enclosing
differentiation: tg.grad(tg.grad(f)) with the inner argument complex and
the outer real or complex, mixed real/complex arguments, tg.jacobian and
backward() through an inner complex gradient, a ComplexTensor argument
that requires grad.

Second derivatives are checked against central differences of tg.grad in
float64 along the real and the imaginary directions, and Hessian-vector
products against torch.autograd.grad(..., create_graph=True) where PyTorch
is installed.  The transforms that do not nest raise saying what to do.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

H = 1e-6


def _c(*shape, seed=0):
    r = np.random.default_rng(seed)
    return r.normal(size=shape) + 1j * r.normal(size=shape)


def _r(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


def _num(L, args, k):
    """Central differences of the real function L in argument k:
    d/dRe + 1j d/dIm for a complex argument, d/dx for a real one."""
    a = np.asarray(args[k])
    cplx = np.iscomplexobj(a)
    g = np.zeros(a.shape, complex if cplx else float)
    for unit in ([1.0, 1j] if cplx else [1.0]):
        for j in np.ndindex(a.shape):
            hi, lo = list(args), list(args)
            hi[k] = a.copy()
            lo[k] = a.copy()
            hi[k][j] += H * unit
            lo[k][j] -= H * unit
            d = (float(np.asarray(L(*hi))) - float(np.asarray(L(*lo)))) / (2 * H)
            g[j] += d * (1 if unit == 1.0 else 1j)
    return g


def _plain(v):
    return v.detach().numpy() if isinstance(v, (tg.Tensor, ComplexTensor)) else np.asarray(v)


# real losses of complex arguments (written with NumPy names)
FUNCTIONS = {
    "abs2_sin_re": lambda z: (np.abs(z) ** 2 * np.sin(np.real(z))).sum(),
    "abs_cube": lambda z: np.abs(z ** 3).sum(),
    "exp_log": lambda z: np.real(np.exp(0.3 * z) * np.log(z)).sum() + np.imag(z * z).sum(),
    "angle_tanh": lambda z: (np.angle(z) * np.imag(np.tanh(0.5 * z))).sum(),
    "matmul": lambda z: (np.abs(np.array([[1.0, 2j], [0.5, -1.0]]) @ z) ** 2).sum(),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_second_derivative_complex_over_complex(name):
    """tg.grad of a real function of tg.grad(f)(z), against central differences
    of tg.grad(f) along both directions of every element."""
    f = FUNCTIONS[name]
    z0 = _c(2, seed=1) + 0.5
    c = _c(2, seed=2)

    def L(z):
        return np.real(tg.grad(f)(z) * c).sum()
    got = tg.grad(L)(z0)
    assert got.dtype == np.complex128 and got.shape == z0.shape
    np.testing.assert_allclose(got, _num(L, [z0], 0), rtol=1e-6, atol=1e-7)


def test_second_derivative_of_a_complex_scalar():
    f = lambda z: np.abs(z) ** 4 + np.real(z ** 3)  # noqa: E731
    z0 = 0.7 - 0.4j

    def L(z):
        g = tg.grad(f)(z)
        return np.real(g) + 2 * np.imag(g)
    np.testing.assert_allclose(tg.grad(L)(z0), _num(L, [np.array(z0)], 0), rtol=1e-6)


def test_inner_complex_outer_real():
    """The outer argument is real, the inner complex one a function of it (a
    ComplexTensor whose parts require grad)."""
    x0 = _r(3, seed=3)

    def L(x):
        z = x * (1 + 2j) + np.exp(1j * x)
        g = tg.grad(lambda z: (np.abs(z) ** 2 * np.cos(np.imag(z))).sum())(z)
        return (np.real(g) * x).sum() + np.imag(g).sum()
    got = tg.grad(L)(x0)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _num(L, [x0], 0), rtol=1e-6, atol=1e-7)


def test_inner_real_outer_complex():
    """The inner argument is real, the complex one the enclosing transform
    differentiates a fixed (connected) argument of the inner function."""
    y0 = _r(3, seed=4)

    def L(z):
        g = tg.grad(lambda y, z: np.real(np.exp(z * y) * np.conj(z)).sum())(y0, z)
        return (g * g).sum()
    z0 = _c(3, seed=5) * 0.5
    got = tg.grad(L)(z0)
    np.testing.assert_allclose(got, _num(L, [z0], 0), rtol=1e-6, atol=1e-7)


def test_mixed_real_and_complex_arguments():
    """Inner and outer both differentiate a complex and a real argument."""
    def f(z, x):
        return (np.abs(z * x + 1) ** 2).sum() + np.real(np.sin(z) * x).sum()

    def L(z, x):
        gz, gx = tg.grad(f, argnums=(0, 1))(z, x)
        return (np.real(gz) * np.imag(gz)).sum() + (gx ** 2).sum() + np.real(gz * gx).sum()
    z0, x0 = _c(3, seed=6), _r(3, seed=7)
    gz, gx = tg.grad(L, argnums=(0, 1))(z0, x0)
    assert gz.dtype == np.complex128 and gx.dtype == np.float64
    np.testing.assert_allclose(gz, _num(L, [z0, x0], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gx, _num(L, [z0, x0], 1), rtol=1e-6, atol=1e-7)
    # the outer transform differentiates only one of them
    np.testing.assert_allclose(tg.grad(L, argnums=1)(z0, x0), gx, rtol=1e-12)
    np.testing.assert_allclose(tg.grad(L, argnums=0)(z0, x0), gz, rtol=1e-12)


def test_inner_differentiates_a_subset():
    """The inner transform differentiates the real argument only; the complex
    one is a connected constant of it."""
    def L(z, x):
        gx = tg.grad(lambda x, z: (np.abs(z - x) ** 3).sum())(x, z)
        return (gx * np.arange(1.0, 4.0)).sum()
    z0, x0 = _c(3, seed=8), _r(3, seed=9)
    gz, gx = tg.grad(L, argnums=(0, 1))(z0, x0)
    np.testing.assert_allclose(gz, _num(L, [z0, x0], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gx, _num(L, [z0, x0], 1), rtol=1e-6, atol=1e-7)


def test_value_and_grad_nested():
    f = FUNCTIONS["abs2_sin_re"]
    z0 = _c(2, seed=10)

    def L(z):
        value, g = tg.value_and_grad(f)(z)
        nested = isinstance(z, ComplexTensor)  # inside tg.grad(L), not in _num
        assert isinstance(value, tg.Tensor) == nested and (type(g) is ComplexTensor) == nested
        return value * 3 + np.real(g).sum()
    np.testing.assert_allclose(tg.grad(L)(z0), _num(L, [z0], 0), rtol=1e-6, atol=1e-7)


def test_jacobian_of_an_inner_complex_gradient():
    """tg.jacobian of the real part of tg.grad(f): the (complex) Hessian rows,
    several cotangents through the nested record at once."""
    f = FUNCTIONS["abs_cube"]
    z0 = _c(3, seed=11) + 0.3
    for part in (np.real, np.imag):
        J = tg.jacobian(lambda z: part(tg.grad(f)(z)))(z0)
        assert J.shape == (3, 3) and J.dtype == np.complex128
        for i in range(3):
            np.testing.assert_allclose(
                J[i], _num(lambda z: part(tg.grad(f)(z))[i], [z0], 0), rtol=1e-6, atol=1e-7)


def test_complex_tensor_that_requires_grad_backward():
    """tg.grad of a ComplexTensor that requires grad, then backward(): the
    gradient of a loss of the gradient reaches the tensor."""
    f = FUNCTIONS["exp_log"]
    z0 = _c(3, seed=12) + 1.0
    zt = tg.tensor(z0, requires_grad=True)
    g = tg.grad(f)(zt)
    assert type(g) is ComplexTensor and g.requires_grad
    np.testing.assert_allclose(g.detach().numpy(), tg.grad(f)(z0), rtol=1e-12)
    (np.abs(g) ** 2).sum().backward()
    L = lambda z: (np.abs(tg.grad(f)(z)) ** 2).sum()  # noqa: E731
    np.testing.assert_allclose(zt.grad.numpy(), _num(L, [z0], 0), rtol=1e-6, atol=1e-7)


def test_one_part_requires_grad():
    """A ComplexTensor of a real tensor being differentiated and a constant."""
    x0 = _r(2, seed=13)

    def L(x):
        z = tg.complex(x, np.array([0.5, -1.5]))
        return np.imag(tg.grad(lambda z: (np.abs(z) ** 3).sum())(z) * (1 + 1j)).sum()
    np.testing.assert_allclose(tg.grad(L)(x0), _num(L, [x0], 0), rtol=1e-6, atol=1e-7)


# -- PyTorch ---------------------------------------------------------------------------------
TORCH = {
    "abs2_sin_re": (lambda m, z, w: (m.abs(z) ** 2 * m.sin(m.real(z))).sum()),
    "abs_cube": (lambda m, z, w: m.abs(z ** 3).sum()),
    "re_z_conj_w": (lambda m, z, w: m.real(z * m.conj(w)).sum() + (m.abs(z * w) ** 2).sum()),
    "exp_mix": (lambda m, z, w: m.real(m.exp(z * 0.4) * m.conj(m.sin(w))).sum()),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_hessian_vector_products_against_pytorch(name):
    torch = pytest.importorskip("torch")
    fn = TORCH[name]
    z0, w0 = _c(3, seed=14) + 0.2, _c(3, seed=15)
    vz, vw = _c(3, seed=16), _c(3, seed=17)

    class T:  # the functions, spelled for torch
        abs, sin, real, conj, exp = (torch.abs, torch.sin, torch.real, torch.conj, torch.exp)

    zt = torch.tensor(z0, requires_grad=True)
    wt = torch.tensor(w0, requires_grad=True)
    gz, gw = torch.autograd.grad(fn(T, zt, wt), (zt, wt), create_graph=True, allow_unused=True)
    gw = torch.zeros_like(wt) if gw is None else gw

    def pair(g, v):  # sum(Re g Re v + Im g Im v)
        return (g.real * v.real + g.imag * v.imag).sum()
    outer = pair(gz, torch.tensor(vz)) + pair(gw, torch.tensor(vw))
    hz, hw = torch.autograd.grad(outer, (zt, wt), allow_unused=True)
    hw = torch.zeros_like(wt) if hw is None else hw

    def L(z, w):
        gz, gw = tg.grad(lambda z, w: fn(np, z, w), argnums=(0, 1))(z, w)
        return (np.real(gz) * vz.real + np.imag(gz) * vz.imag).sum() + (
            np.real(gw) * vw.real + np.imag(gw) * vw.imag).sum()
    got_z, got_w = tg.grad(L, argnums=(0, 1))(z0, w0)
    np.testing.assert_allclose(got_z, hz.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_w, hw.numpy(), rtol=1e-10, atol=1e-12)
    # the first derivatives too
    g1 = tg.grad(lambda z, w: fn(np, z, w), argnums=(0, 1))(z0, w0)
    np.testing.assert_allclose(g1[0], gz.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(g1[1], gw.detach().numpy(), rtol=1e-12)


def test_backward_against_pytorch():
    torch = pytest.importorskip("torch")
    z0 = _c(4, seed=18) + 0.5
    zt = torch.tensor(z0, requires_grad=True)
    (g,) = torch.autograd.grad((torch.abs(zt) ** 3).sum(), zt, create_graph=True)
    (torch.abs(g * zt) ** 2).sum().backward()
    mine = tg.tensor(z0, requires_grad=True)
    g = tg.grad(lambda z: (np.abs(z) ** 3).sum())(mine)
    (np.abs(g * mine) ** 2).sum().backward()
    np.testing.assert_allclose(mine.grad.numpy(), zt.grad.numpy(), rtol=1e-10)


# -- what does not nest ------------------------------------------------------------------------
def test_transforms_that_do_not_nest_say_what_to_do():
    z0 = _c(2, seed=19)
    hint = r"Only tg\.grad and tg\.value_and_grad nest"
    cases = {
        "vjp": lambda z: tg.vjp(lambda u: np.abs(u).sum(), z),
        "jacobian": lambda z: tg.jacobian(lambda u: np.abs(u))(z),
        "jvp": lambda z: tg.jvp(lambda u: np.abs(u).sum(), (z,), (z.detach(),)),
        "hessian": lambda z: tg.hessian(lambda u: np.abs(u).sum())(z),
    }
    for who, call in cases.items():
        with pytest.raises(NotImplementedError, match=rf"^{who}: argument 0 .*{hint}"):
            tg.grad(lambda z: np.real(call(z)[0] if who == "vjp" else call(z)).sum())(z0)
    zt = tg.tensor(z0, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"^vjp: .*x\.detach\(\)"):
        tg.vjp(lambda u: np.abs(u).sum(), zt)
    # the inner function must still return a real number
    with pytest.raises(TypeError, match="one real output"):
        tg.grad(lambda z: np.real(tg.grad(lambda u: u * u)(z)).sum())(z0)
