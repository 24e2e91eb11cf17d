"""Complex arguments to tg.grad, tg.value_and_grad, tg.vjp, tg.jacobian,
tg.jacfwd, tg.jvp, tg.hvp and tg.hessian.

Gradients follow PyTorch's convention, dL/dRe + 1j dL/dIm: checked against
central differences of the real and imaginary parts in float64, against
torch.autograd where PyTorch is installed, and by a descent step; jvp's
tangents are directional derivatives, checked against central differences
along the complex direction.  Hessians of complex arguments are over their
(real, imaginary) pairs, checked against central differences of tg.grad in
each part; hvp's products against those Hessians and against tg.jvp of
tg.grad.  Complex outputs of second-order transforms raise a TypeError that
says what to do instead.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

H = 1e-6
RNG = np.random.default_rng(22)
W = RNG.normal(size=4) + 1j * RNG.normal(size=4)


def _c(*shape, seed=0):
    r = np.random.default_rng(seed)
    return r.normal(size=shape) + 1j * r.normal(size=shape)


def loss(z, x=None):
    """A real, non-holomorphic loss of a complex z (and optionally a real x)."""
    u = np.exp(z * 0.3) + z * W[: z.shape[-1]]
    out = (np.abs(u) ** 2).sum() + np.real(z * np.conj(z[::-1])).sum() + np.imag(z ** 2).sum()
    if x is not None:
        out = out + (np.sin(x) * np.real(z)).sum()
    return out


def numeric_grad(fn, args, k):
    """Central differences of the real fn in argument k: d/dRe + 1j d/dIm
    for a complex argument, d/dx for a real one."""
    a = np.asarray(args[k])
    units = [1.0, 1j] if np.iscomplexobj(a) else [1.0]
    g = np.zeros(a.shape, complex if len(units) == 2 else float)
    for unit in units:
        part = np.zeros(a.shape)
        for i in np.ndindex(a.shape):
            up = [np.array(v, dtype=complex if np.iscomplexobj(v) else float) for v in args]
            dn = [v.copy() for v in up]
            up[k][i] += H * unit
            dn[k][i] -= H * unit
            part[i] = (float(np.asarray(fn(*up))) - float(np.asarray(fn(*dn)))) / (2 * H)
        g = g + unit * part
    return g


def _np_loss(z, x=None):
    return loss(z, x)  # loss is written with NumPy functions: it runs on arrays too


# -- grad, value_and_grad --------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4,), (2, 3), ()])
def test_grad_against_central_differences(shape):
    z = _c(*shape, seed=1)
    f = loss if shape else (lambda z: np.abs(np.exp(z * 0.3) + z * (1 - 2j)) ** 2
                            + np.imag(z ** 2))
    g = tg.grad(f)(z)
    assert type(g) is np.ndarray and g.dtype == np.complex128 and g.shape == z.shape
    np.testing.assert_allclose(g, numeric_grad(f, [z], 0), rtol=1e-6, atol=1e-7)


def test_argument_kinds_give_the_same_gradient():
    z = _c(4, seed=2)
    want = tg.grad(loss)(z)
    for arg in (tg.tensor(z), ComplexTensor(tg.tensor(z.real), tg.tensor(z.imag)),
                list(z)):
        np.testing.assert_allclose(tg.grad(loss)(arg), want, rtol=1e-12)
    # a Python complex number: a 0-d complex128 gradient
    f = lambda z: np.abs(z * (2 - 1j) + 1) ** 2  # noqa: E731
    g = tg.grad(f)(0.5 + 0.25j)
    assert g.shape == () and g.dtype == np.complex128
    np.testing.assert_allclose(g, numeric_grad(f, [np.array(0.5 + 0.25j)], 0), rtol=1e-6)


def test_function_receives_a_complex_tensor_of_fresh_leaves():
    seen = []

    def f(z):
        seen.append(z)
        return (np.abs(z) ** 2).sum()
    z = _c(3)
    tg.grad(f)(z)
    (t,) = seen
    assert isinstance(t, ComplexTensor) and t.shape == (3,)
    assert t.real.is_leaf and t.imag.is_leaf and t.real is not t.imag
    np.testing.assert_array_equal(t.detach().numpy(), z)
    z0 = z.copy()
    tg.grad(lambda z: (np.abs(z) ** 2).sum())(z)
    np.testing.assert_array_equal(z, z0)  # the argument is not written


def test_value_and_grad_and_mixed_argnums():
    z, x = _c(4, seed=3), np.random.default_rng(3).normal(size=4)
    v, (gz, gx) = tg.value_and_grad(loss, argnums=(0, 1))(z, x)
    assert isinstance(v, float)
    np.testing.assert_allclose(v, _np_loss(z, x), rtol=1e-12)
    assert gz.dtype == np.complex128 and gx.dtype == np.float64
    np.testing.assert_allclose(gz, numeric_grad(_np_loss, [z, x], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gx, numeric_grad(_np_loss, [z, x], 1), rtol=1e-6, atol=1e-7)
    # only the real one, and the real one first
    gx2 = tg.grad(loss, argnums=1)(z, x)
    np.testing.assert_allclose(gx2, gx, rtol=1e-12)
    g2 = tg.grad(lambda x, z: loss(z, x), argnums=(0, 1))(x, z)
    np.testing.assert_allclose(g2[0], gx, rtol=1e-12)
    np.testing.assert_allclose(g2[1], gz, rtol=1e-12)
    # two complex arguments
    f = lambda a, b: (np.abs(a * b + a) ** 2).sum()  # noqa: E731
    a, b = _c(3, seed=4), _c(3, seed=5)
    ga, gb = tg.grad(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, numeric_grad(f, [a, b], 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gb, numeric_grad(f, [a, b], 1), rtol=1e-6, atol=1e-7)


def test_a_gradient_step_lowers_the_loss():
    z = _c(4, seed=6)
    before = float(_np_loss(z))
    z1 = z - 1e-3 * tg.grad(loss)(z)
    assert float(_np_loss(z1)) < before
    # and a few hundred steps on |z - c|^2 reach c
    c = _c(4, seed=7)
    step = tg.grad(lambda z: (np.abs(z - c) ** 2).sum())
    for _ in range(60):
        z = z - 0.25 * step(z)
    np.testing.assert_allclose(z, c, atol=1e-8)


def test_unused_complex_argument_gives_zeros():
    z, x = _c(3, seed=8), np.array([1.0, 2.0])
    gz, gx = tg.grad(lambda z, x: (x ** 2).sum(), argnums=(0, 1))(z, x)
    assert gz.dtype == np.complex128 and gz.shape == (3,)
    np.testing.assert_array_equal(gz, np.zeros(3, complex))
    np.testing.assert_allclose(gx, 2 * x)
    # a constant function of a complex argument
    assert tg.grad(lambda z: np.array(3.0))(z).tolist() == [0j, 0j, 0j]
    # only the real part used: the imaginary gradient is exactly zero
    g = tg.grad(lambda z: (np.real(z) ** 2).sum())(z)
    np.testing.assert_array_equal(g, 2 * z.real + 0j)
    np.testing.assert_array_equal(g.imag, 0.0)


def test_real_arguments_are_unchanged():
    x = np.array([1.0, 2.0], np.float32)
    g = tg.grad(lambda x: (x ** 2).sum())(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, [2.0, 4.0])
    J = tg.jacobian(lambda x: x * 3.0)(np.ones(2))
    assert J.dtype == np.float64
    np.testing.assert_array_equal(J, 3 * np.eye(2))


# -- vjp -------------------------------------------------------------------------------------
def test_vjp_real_output():
    z = _c(4, seed=9)
    out, fn = tg.vjp(lambda z: np.abs(z * W) ** 2, z)
    np.testing.assert_allclose(out, np.abs(z * W) ** 2, rtol=1e-12)
    c = np.random.default_rng(9).normal(size=4)
    (g,) = fn(c)
    want = numeric_grad(lambda z: (c * np.abs(z * W) ** 2).sum(), [z], 0)
    assert g.dtype == np.complex128
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7)
    with pytest.raises(TypeError, match="output is real, so the cotangent must be real"):
        fn(c + 1j)


def test_vjp_complex_output_is_the_gradient_of_re_conj_c_out():
    z, x = _c(4, seed=10), np.random.default_rng(10).normal(size=4)

    def f(z, x):
        return np.exp(z) * np.conj(z) + x * 1j

    out, fn = tg.vjp(f, z, x)
    assert isinstance(out, np.ndarray) and out.dtype == np.complex128
    np.testing.assert_allclose(out, f(z, x), rtol=1e-12)
    c = _c(4, seed=11)
    gz, gx = fn(c)

    def real_loss(z, x):
        y = f(z, x)
        return (c.real * y.real + c.imag * y.imag).sum()
    np.testing.assert_allclose(gz, numeric_grad(real_loss, [z, x], 0), rtol=1e-6, atol=1e-7)
    assert gx.dtype == np.float64
    np.testing.assert_allclose(gx, numeric_grad(real_loss, [z, x], 1), rtol=1e-6, atol=1e-7)
    # a batch of cotangents: one vector sweep, the same rows
    cs = np.stack([c, _c(4, seed=12), np.ones(4)])
    bz, bx = fn(cs)
    assert bz.shape == (3, 4) and bx.shape == (3, 4)
    for k in range(3):
        rz, rx = fn(cs[k])
        np.testing.assert_allclose(bz[k], rz, rtol=1e-12)
        np.testing.assert_allclose(bx[k], rx, rtol=1e-12)
    # a real cotangent of a complex output: imaginary part zero
    np.testing.assert_allclose(fn(c.real)[0], fn(c.real + 0j)[0], rtol=1e-12)


def test_vjp_output_is_the_argument_itself():
    z = _c(3, seed=13)
    out, fn = tg.vjp(lambda z: z, z)
    c = _c(3, seed=14)
    np.testing.assert_allclose(fn(c)[0], c)


# -- jacobian --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["auto", "reverse", "forward"])
def test_jacobian_rows_are_gradients(mode):
    z, x = _c(3, seed=15), np.random.default_rng(15).normal(size=2)

    def f(z, x):
        y = np.abs(z * 2 + 1j) ** 2
        return np.concatenate([y, (np.real(z) * x[0]).sum()[None], np.imag(z * z).sum()[None]
                               + x[1], y * x[0]])
    Jz, Jx = tg.jacobian(f, argnums=(0, 1), mode=mode)(z, x)
    m = f(z, x).shape[0]
    assert Jz.shape == (m, 3) and Jz.dtype == np.complex128 and Jx.dtype == np.float64
    for i in range(m):
        row = lambda z, x: f(z, x)[i]  # noqa: E731
        np.testing.assert_allclose(Jz[i], numeric_grad(row, [z, x], 0), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(Jx[i], numeric_grad(row, [z, x], 1), rtol=1e-6, atol=1e-7)


def test_jacobian_unused_complex_argument():
    J = tg.jacobian(lambda z, x: x * 2.0, argnums=(0, 1))(_c(2), np.ones(3))
    assert J[0].shape == (3, 2) and J[0].dtype == np.complex128
    np.testing.assert_array_equal(J[0], 0)


# -- errors ----------------------------------------------------------------------------------
# -- second order and forward Jacobians of complex arguments ---------------------------------
def _pairs(z):
    """A complex array as its real layout z.shape + (2,): [..., 0] real, [..., 1] imaginary."""
    return np.stack([np.real(z), np.imag(z)], -1)


def _unpair(v):
    return v[..., 0] + 1j * v[..., 1]


def _hessian_fd(f, z):
    """The Hessian over z's (re, im) pairs by central differences of tg.grad."""
    v0 = _pairs(z).ravel()
    g = lambda v: _pairs(tg.grad(f)(_unpair(v.reshape(z.shape + (2,))))).ravel()  # noqa: E731
    cols = [(g(v0 + H * e) - g(v0 - H * e)) / (2 * H) for e in np.eye(v0.size)]
    return np.array(cols).T.reshape(z.shape + (2,) + z.shape + (2,))


def test_hessian_of_a_complex_argument_is_over_its_real_and_imaginary_parts():
    z = _c(3, seed=16)
    Hm = tg.hessian(loss)(z)
    assert Hm.shape == (3, 2, 3, 2) and Hm.dtype == np.float64
    np.testing.assert_allclose(Hm, _hessian_fd(loss, z), rtol=1e-6, atol=1e-6)
    H2 = tg.hessian(lambda z: (np.abs(z) ** 2).sum())(z)
    np.testing.assert_allclose(H2.reshape(6, 6), 2 * np.eye(6), atol=1e-12)
    # the same numbers from a complex tensor argument and from the sparse paths
    np.testing.assert_allclose(tg.hessian(loss)(tg.tensor(z)), Hm, rtol=1e-12)
    sp = tg.sparse_hessian(loss)(z)
    np.testing.assert_allclose(sp.toarray(), Hm.reshape(6, 6), rtol=1e-12, atol=1e-12)
    rows, cols = tg.hessian_sparsity(lambda z: (np.abs(z[1:] * z[:-1]) ** 2).sum())(z)
    dense = tg.hessian(lambda z: (np.abs(z[1:] * z[:-1]) ** 2).sum())(z).reshape(6, 6)
    pattern = np.zeros((6, 6), bool)
    pattern[rows, cols] = True
    assert not (dense[~pattern] != 0).any() and pattern[0, 3] and not pattern[0, 4]


def test_hessian_of_a_holomorphic_real_part_gives_the_second_derivative():
    # u = Re g with g holomorphic: g'' = u_xx - 1j u_xy at each element
    z = _c(4, seed=19) * 0.7
    Hm = tg.hessian(lambda z: np.real(z * np.exp(z)).sum())(z)
    i = np.arange(4)
    np.testing.assert_allclose(Hm[i, 0, i, 0] - 1j * Hm[i, 0, i, 1], (z + 2) * np.exp(z),
                               rtol=1e-12)
    Hm[i, :, i, :] = 0.0
    assert not Hm.any()  # elementwise: no coupling between elements


def test_hessian_with_real_and_complex_argnums():
    z, x = _c(3, seed=20), np.array([0.3, -0.7, 1.1])
    Hs = tg.hessian(loss, argnums=(0, 1))(z, x)
    assert [[b.shape for b in row] for row in Hs] == [[(3, 2, 3, 2), (3, 2, 3)],
                                                     [(3, 3, 2), (3, 3)]]
    np.testing.assert_allclose(Hs[0][0], tg.hessian(loss)(z, x), rtol=1e-12)
    np.testing.assert_allclose(Hs[1][0], np.moveaxis(Hs[0][1], -1, 0), rtol=1e-12)
    gz = lambda x: _pairs(tg.grad(loss)(z, x))  # noqa: E731
    fd = np.array([(gz(x + H * e) - gz(x - H * e)) / (2 * H) for e in np.eye(3)])
    np.testing.assert_allclose(np.moveaxis(Hs[0][1], -1, 0), fd, rtol=1e-6, atol=1e-6)


def test_hvp_of_complex_arguments():
    z, v = _c(3, seed=21), _c(3, seed=22)
    g, hv = tg.hvp(loss, (z,), (v,))
    assert g[0].dtype == hv[0].dtype == np.complex128
    np.testing.assert_allclose(g[0], tg.grad(loss)(z), rtol=1e-13)
    Hm = tg.hessian(loss)(z).reshape(6, 6)
    np.testing.assert_allclose(_pairs(hv[0]).ravel(), Hm @ _pairs(v).ravel(), rtol=1e-10)
    # the derivative of the gradient along v, by forward mode over tg.grad
    np.testing.assert_allclose(hv[0], tg.jvp(tg.grad(loss), (z,), (v,))[1], rtol=1e-10)
    # a batch of complex directions, a real tangent of a complex primal, a real argument
    _, hb = tg.hvp(loss, (z,), (np.stack([v, 1j * v]),))
    np.testing.assert_allclose(hb[0][0], hv[0], rtol=1e-12)
    np.testing.assert_allclose(_pairs(hb[0][1]).ravel(), Hm @ _pairs(1j * v).ravel(), rtol=1e-10)
    x = np.array([0.3, -0.7, 1.1])
    (gz, gx), (hz, hx) = tg.hvp(loss, (z, x), (v.real, np.ones(3)))
    assert gz.dtype == np.complex128 and gx.dtype == np.float64 and hx.dtype == np.float64
    Hs = tg.hessian(loss, argnums=(0, 1))(z, x)
    np.testing.assert_allclose(hx, np.einsum("ija,ja->i", Hs[1][0], _pairs(v.real))
                               + Hs[1][1].sum(1), rtol=1e-10)


def test_jacfwd_of_complex_arguments_matches_jacobian():
    z, x = _c(3, seed=23), np.array([0.5, 2.0])
    f = lambda z, x: np.abs(np.exp(z) * x[0]) + np.real(z ** 2) * x[1]  # noqa: E731
    Jf = tg.jacfwd(f, argnums=(0, 1))(z, x)
    Jr = tg.jacobian(f, argnums=(0, 1), mode="reverse")(z, x)
    assert Jf[0].dtype == np.complex128 and Jf[0].shape == (3, 3)
    np.testing.assert_allclose(Jf[0], Jr[0], rtol=1e-12)
    np.testing.assert_allclose(Jf[1], Jr[1], rtol=1e-12)


def test_second_order_of_complex_outputs_raises():
    z = _c(3, seed=24)
    with pytest.raises(TypeError, match=r"hessian: the function returned a complex value.*"
                                        r"H\[i, 0, j, 0\] - 1j \* H\[i, 0, j, 1\]"):
        tg.hessian(lambda z: (z * z).sum())(z)
    with pytest.raises(TypeError, match="hvp: the function returned a complex value"):
        tg.hvp(lambda z: (z * z).sum(), (z,), (z,))
    with pytest.raises(TypeError, match=r"jacfwd: the function returned a complex tensor.*"
                                        r"np\.real"):
        tg.jacfwd(lambda z: z * z)(z)


def test_the_suggested_real_parametrisation_works():
    z = _c(3, seed=17)
    n = z.size

    def f(v):
        w = tg.complex(v[:n], v[n:])
        return (np.abs(w * w) ** 2).sum()
    v = np.concatenate([z.real, z.imag])
    g = tg.grad(f)(v)
    np.testing.assert_allclose(g[:n] + 1j * g[n:], tg.grad(lambda z: (np.abs(z * z) ** 2).sum())(z),
                               rtol=1e-12)
    assert tg.hessian(f)(v).shape == (2 * n, 2 * n)


def test_complex_outputs_raise_where_there_is_no_convention():
    z = _c(3, seed=18)
    with pytest.raises(TypeError, match="grad requires a function with one real output.*"
                                        r"np\.abs\(z\) \*\* 2"):
        tg.grad(lambda z: (z * z).sum())(z)
    with pytest.raises(TypeError, match="jacobian: the function returned a complex tensor.*"
                                        r"np\.real\(f"):
        tg.jacobian(lambda z: z * z)(z)
    with pytest.raises(TypeError, match="jacobian: the function returned a complex tensor"):
        tg.jacobian(lambda x: x * 1j)(np.ones(2))
    with pytest.raises(TypeError, match="hessian: the function returned a complex value"):
        tg.hessian(lambda x: (x * 1j).sum())(np.ones(2))


def test_complex_argument_that_requires_grad_carries_its_derivative():
    # tg.grad nests through it (tests/test_complex_nested.py checks the numbers)
    zt = tg.tensor(_c(2), requires_grad=True)
    g = tg.grad(lambda z: (np.abs(z) ** 2).sum())(zt)
    assert type(g) is ComplexTensor and g.requires_grad
    np.testing.assert_allclose(g.detach().numpy(), 2 * zt.detach().numpy())
    g = tg.grad(lambda z: (np.abs(z) ** 2).sum())(zt.detach())
    np.testing.assert_allclose(g, 2 * zt.detach().numpy())
    # nested inside an enclosing transform, through a complex argument:
    # d/dx of d/dy |z y|^2 = 2 y |z|^2 at y = x, z = 1j (+ 0 x): 2
    g = tg.grad(lambda x: tg.grad(lambda z, y: (np.abs(z * y) ** 2).sum(), argnums=(0, 1))(
        1j + 0 * x[:1], x)[1].sum())(np.ones(1))
    np.testing.assert_allclose(g, [2.0])


# -- PyTorch ---------------------------------------------------------------------------------
def test_against_pytorch():
    torch = pytest.importorskip("torch")
    z, x = _c(4, seed=19), np.random.default_rng(19).normal(size=4)
    w = _c(4, seed=20)

    def f(lib, z, x):
        u = lib.exp(z * 0.3) + z * lib_w(lib)
        return ((u.abs() if lib is torch else np.abs(u)) ** 2).sum() + (
            lib.sin(x) * (z.real if lib is torch else np.real(z))).sum() + (
            (z * z).imag if lib is torch else np.imag(z * z)).sum()

    def lib_w(lib):
        return torch.tensor(w) if lib is torch else w

    zt = torch.tensor(z, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    tz, tx = torch.autograd.grad(f(torch, zt, xt), (zt, xt))
    gz, gx = tg.grad(lambda z, x: f(np, z, x), argnums=(0, 1))(z, x)
    np.testing.assert_allclose(gz, tz.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gx, tx.numpy(), rtol=1e-12, atol=1e-13)

    # vjp with a complex output and cotangent: torch.autograd.grad(grad_outputs=c)
    c = _c(4, seed=21)
    zt = torch.tensor(z, requires_grad=True)
    (tv,) = torch.autograd.grad(torch.exp(zt) * zt.conj() * torch.tensor(w), zt, torch.tensor(c))
    _, fn = tg.vjp(lambda z: np.exp(z) * np.conj(z) * w, z)
    np.testing.assert_allclose(fn(c)[0], tv.numpy(), rtol=1e-12, atol=1e-13)
    # the Jacobian of a real output of a complex argument
    TJ = torch.autograd.functional.jacobian(lambda z: (z * torch.tensor(w)).abs() ** 2,
                                            torch.tensor(z))
    J = tg.jacobian(lambda z: np.abs(z * w) ** 2)(z)
    np.testing.assert_allclose(J, TJ.numpy(), rtol=1e-12, atol=1e-13)


# -- forward mode: jvp along complex directions ---------------------------------------------
JVP_FUNCTIONS = {
    "holomorphic": lambda z: np.sin(z) * z + np.exp(z) / (z + 3.0),
    "abs and conj": lambda z: np.abs(z) ** 2 + np.conj(z) * z[..., :1],
    "real output": lambda z: (np.real(z * z) + np.angle(z)).sum(),
    "matmul": lambda z: (z[:, None] * z[None, :]) @ z,
}


@pytest.mark.parametrize("name", list(JVP_FUNCTIONS))
def test_jvp_of_complex_arguments_against_differences(name):
    f = JVP_FUNCTIONS[name]
    z, dz = _c(3, seed=31), _c(3, seed=32)
    value, t = tg.jvp(f, (z,), (dz,))
    np.testing.assert_allclose(value, f(z), rtol=1e-13)
    np.testing.assert_allclose(t, (f(z + H * dz) - f(z - H * dz)) / (2 * H), rtol=1e-6, atol=1e-8)


def test_jvp_of_a_holomorphic_function_is_its_derivative_times_dz():
    z, dz = _c(4, seed=33), _c(4, seed=34)
    _, t = tg.jvp(lambda z: z ** 3, (z,), (dz,))
    np.testing.assert_allclose(t, 3 * z ** 2 * dz, rtol=1e-13)


def test_jvp_batched_mixed_and_complex_output_of_a_real_argument():
    z, x = _c(3, seed=35), np.array([0.5, -1.0, 2.0])
    f = lambda z, x: z * x + np.exp(1j * x)                   # noqa: E731
    dzs, dxs = np.stack([_c(3, seed=36), _c(3, seed=37)]), np.ones((2, 3))
    _, T = tg.jvp(f, (z, x), (dzs, dxs))
    assert T.shape == (2, 3) and T.dtype == np.complex128
    for k in range(2):
        want = (f(z + H * dzs[k], x + H * dxs[k]) - f(z - H * dzs[k], x - H * dxs[k])) / (2 * H)
        np.testing.assert_allclose(T[k], want, rtol=1e-6, atol=1e-8)
    _, t = tg.jvp(lambda x: np.exp(1j * x), (x,), (np.ones(3),))
    np.testing.assert_allclose(t, 1j * np.exp(1j * x), rtol=1e-13)
    _, t = tg.jvp(f, (tg.tensor(z), x), (np.ones(3), np.zeros(3)))   # a real tangent of z
    np.testing.assert_allclose(t, x, rtol=1e-13)


def test_jvp_complex_tangent_of_a_real_primal_raises():
    with pytest.raises(TypeError, match="tangent 0 is complex but its primal is real"):
        tg.jvp(lambda x: x * 2.0, (np.ones(2),), (np.ones(2) * 1j,))
