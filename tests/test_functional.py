"""Function transforms (grad, value_and_grad, vjp, jacobian, gradcheck),
tapegrad.engine.backward.grad and backward(inputs=): closed forms, finite
differences, and vector mode (p seeds in one sweep) against the same seeds
one by one for every op in the registry."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.transforms import functional as F

from oracle import close, leaf
from op_cases import CASES


def rosenbrock(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


# -- grad, value_and_grad ----------------------------------------------------------------
def test_grad_matches_closed_form():
    x = np.random.default_rng(0).uniform(-2, 2, 7)
    g = tg.grad(rosenbrock)(x)
    assert type(g) is np.ndarray and g.dtype == np.float64
    close(g, rosenbrock_grad(x), rtol=1e-13)


def test_value_and_grad_argnums_numbers_and_dtypes():
    f = lambda a, b, c: (a * b).sum() * c  # noqa: E731
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0], np.float32)
    v, (ga, gb, gc) = tg.value_and_grad(f, argnums=(0, 1, 2))(a, b, 2)
    assert v == 22.0 and isinstance(v, float)
    close(ga, 2 * b)
    assert gb.dtype == np.float32
    close(gb, 2 * a)
    close(gc, 11.0)
    # the caller's arrays are copied: untouched and still writable
    a[0] = 5.0
    assert tg.grad(f, argnums=-1)(a, b, 1.0).shape == ()


def test_grad_of_a_function_that_ignores_its_input_is_zero():
    close(tg.grad(lambda x: np.float64(3.0) + 0 * x.sum() * 0)(np.ones(3)), np.zeros(3))
    close(tg.grad(lambda x: 3.0)(np.ones(2)), np.zeros(2))


def test_grad_touches_no_tensors_grad():
    w = leaf([1.0, 2.0])
    g = tg.grad(lambda x: (x * w).sum())(np.array([3.0, 4.0]))
    close(g, [1.0, 2.0])
    assert w.grad is None


def test_grad_errors():
    with pytest.raises(TypeError, match=r"one output number.*shape \(2,\)"):
        tg.grad(lambda x: x * 2)(np.ones(2))
    with pytest.raises(ValueError, match="argnums 3"):
        tg.grad(lambda x: x.sum(), argnums=3)(np.ones(2))
    with pytest.raises(TypeError, match="real or complex numbers, got dtype <U1"):
        tg.grad(lambda x: x.sum())(np.array(["a"]))
    with pytest.raises(TypeError, match="must return a tensor or array"):
        tg.grad(lambda x: "no")(np.ones(2))


def test_value_and_grad_drives_scipy_minimize():
    optimize = pytest.importorskip("scipy.optimize")
    res = optimize.minimize(tg.value_and_grad(rosenbrock), np.zeros(5), jac=True,
                            method="BFGS")
    assert res.success
    close(res.x, np.ones(5), rtol=1e-4, atol=1e-4)


# -- vjp -------------------------------------------------------------------------------
def test_vjp_single_batched_and_repeated():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 3))
    f = lambda x, y: np.tanh(A @ x) * y  # noqa: E731
    x, y = rng.standard_normal(3), rng.standard_normal(4)
    out, vjp_fn = tg.vjp(f, x, y)
    close(out, np.tanh(A @ x) * y)
    C = rng.standard_normal((5, 4))
    gx, gy = vjp_fn(C)                      # five cotangents, one sweep
    assert gx.shape == (5, 3) and gy.shape == (5, 4)
    for k in range(5):                      # the same one by one, twice over
        for _ in range(2):
            hx, hy = vjp_fn(C[k])
            close(hx, gx[k])
            close(hy, gy[k])
    t = np.tanh(A @ x)
    close(gy, C * t)
    close(gx, (C * y * (1 - t ** 2)) @ A)


def test_vjp_cotangent_shape_error():
    _, vjp_fn = tg.vjp(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(ValueError, match=r"shape \(2,\).*\(p,\) \+ \(3,\)"):
        vjp_fn(np.ones(2))
    close(vjp_fn(np.ones(3))[0], [2.0, 2.0, 2.0])  # still usable


# -- jacobian ----------------------------------------------------------------------------
def test_jacobian_of_tanh_Ax_times_x():
    rng = np.random.default_rng(2)
    n = 30
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    x = rng.standard_normal(n)
    J = tg.jacobian(lambda x: np.tanh(A @ x) * x)(x)
    t = np.tanh(A @ x)
    close(J, np.diag(t) + ((1 - t ** 2) * x)[:, None] * A, rtol=1e-12, atol=1e-15)


def test_jacobian_shapes_argnums_and_chunks(monkeypatch):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(3)
    f = lambda a, b: np.sin(a) * b + a.sum()  # noqa: E731
    Ja, Jb = tg.jacobian(f, argnums=(0, 1))(a, b)
    assert Ja.shape == (2, 3, 2, 3) and Jb.shape == (2, 3, 3)
    monkeypatch.setattr(F, "JACOBIAN_BYTES", 16)   # one row per chunk
    Ja2, Jb2 = tg.jacobian(f, argnums=(0, 1))(a, b)
    close(Ja2, Ja)
    close(Jb2, Jb)
    expect = np.einsum("ij,ik,jl->ijkl", np.cos(a) * b, np.eye(2), np.eye(3)) + 1.0
    close(Ja, expect)


def test_jacobian_modes_and_empty_output():
    rng = np.random.default_rng(4)
    x = rng.standard_normal(3)
    f = lambda x: np.sin(np.outer(x, x)).ravel()  # noqa: E731
    Jr = tg.jacobian(f, mode="reverse")(x)
    close(tg.jacobian(f, mode="forward")(x), Jr, rtol=1e-12)
    close(tg.jacobian(f)(x), Jr, rtol=1e-12)
    assert tg.jacobian(lambda x: x[:0] * 2.0)(x).shape == (0, 3)
    with pytest.raises(ValueError, match="mode must be"):
        tg.jacobian(f, mode="sideways")


def test_jacobian_float32_and_constant_output():
    J = tg.jacobian(lambda x: x * 3.0)(np.ones(2, np.float32))
    assert J.dtype == np.float32
    close(J, 3 * np.eye(2))
    close(tg.jacobian(lambda x: np.ones(3))(np.ones(2)), np.zeros((3, 2)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_mode_equals_one_seed_at_a_time(name):
    """Every registry op: p seeds through one vector sweep give the same VJPs
    as the one-vector sweep, seed by seed (itself checked against finite
    differences in test_gradients)."""
    strategy, fn = CASES[name]

    @settings(max_examples=5, deadline=None)
    @given(case=strategy, seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        shapes, domains, params = case
        rng = np.random.default_rng(seed)
        arrays = [d(rng, s) for d, s in zip(domains, shapes)]
        leaves = [tg.tensor(a, requires_grad=True) for a in arrays]
        y = fn(*leaves, **params)
        p = 3
        seeds = rng.standard_normal((p,) + y.shape)
        batched = F.reverse([y], [seeds], leaves, retain_graph=True)
        for k in range(p):
            one = F.reverse([y], [seeds[k][None]], leaves, retain_graph=True)
            for gb, g1 in zip(batched, one):
                assert (gb is None) == (g1 is None)
                if gb is not None:
                    np.testing.assert_allclose(gb[k], g1[0], rtol=1e-12, atol=1e-12)

    run()


CONSTANT_CASES = {
    # a constant operand's adjoints are never read (all p vectors share one
    # row of them, kernels/vector.py); every VJP that writes or skips them
    "binary": lambda x, c: x * c + (c - x) / (1.0 + c ** 2),
    "where": lambda x, c: tg.where(c > 0, x, c) * x,
    "concat": lambda x, c: tg.concatenate([c, x, c]) ** 2,
    "stack": lambda x, c: tg.stack([x, c, x * c]).sum(axis=0),
    "matmul": lambda x, c: tg.tanh(np.outer(c, c) @ x) * x + x @ np.outer(c, c),
    "einsum": lambda x, c: tg.einsum("i,j->ij", c, x ** 2).ravel(),
    "solve": lambda x, c: tg.linalg.solve(np.eye(x.size) * 3.0 + np.outer(c, c), x ** 2),
    "maximum": lambda x, c: tg.maximum(x, c) + tg.minimum(c, x ** 2),
}


@pytest.mark.parametrize("name", sorted(CONSTANT_CASES))
def test_vector_mode_with_constant_operands(name):
    rng = np.random.default_rng(21)
    c = rng.standard_normal(6)
    x = rng.standard_normal(6)
    f = lambda x: CONSTANT_CASES[name](x, c)  # noqa: E731
    J = tg.jacobian(f, mode="reverse")(x)
    out = np.asarray(f(x))
    for k in range(out.size):  # one cotangent at a time: the plain sweep
        e = np.zeros(out.size)
        e[k] = 1.0
        _, vjp_fn = tg.vjp(f, x)
        np.testing.assert_allclose(J.reshape(out.size, -1)[k], vjp_fn(e.reshape(out.shape))[0],
                                   rtol=1e-12, atol=1e-13)
    # and second order (p + 1 vectors share the constants' rows too)
    g = lambda x: (CONSTANT_CASES[name](x, c) ** 2).sum()  # noqa: E731
    H = tg.hessian(g, sparse=False)(x)
    fd = np.array([(tg.grad(g)(x + 1e-6 * e) - tg.grad(g)(x - 1e-6 * e)) / 2e-6
                   for e in np.eye(6)])
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-6)


# -- tg.autograd.grad and backward(inputs=) -------------------------------------------------
def test_autograd_grad_like_pytorch():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    h = x * w                                  # a non-leaf input
    y = (h * h).sum()
    gx, gh = tg.autograd.grad(y, [x, h], retain_graph=True)
    close(gx, 2 * (x.numpy() * w.numpy()) * w.numpy())
    close(gh, 2 * h.numpy())
    assert x.grad is None and w.grad is None
    (gw,) = tg.autograd.grad([y, h.sum()], w, grad_outputs=[2.0, None])
    close(gw, 2 * 2 * h.numpy() * x.numpy() + x.numpy())
    with pytest.raises(RuntimeError, match="second time"):
        tg.autograd.grad(y, x)


def test_autograd_grad_errors():
    x, z = leaf([1.0]), leaf([2.0])
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        tg.autograd.grad(y, [x, z], retain_graph=True)
    assert tg.autograd.grad(y, [x, z], allow_unused=True, retain_graph=True)[1] is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.autograd.grad(y, [tg.tensor([1.0])], retain_graph=True)
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        tg.autograd.grad(y, x * 1.0, create_graph=True)  # a new tensor y does not use
    close(tg.autograd.grad(y, x)[0], [2.0])     # the graph survived the errors


def test_backward_inputs_restricts_accumulation():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    h = x * w
    y = (h * x).sum()
    y.backward(inputs=[w, h], retain_graph=True)
    assert x.grad is None
    close(w.grad, x.numpy() ** 2)
    close(h.grad, x.numpy())
    y.backward(inputs=[w])
    close(w.grad, 2 * x.numpy() ** 2)
    with pytest.raises(RuntimeError, match="inputs= was given but is empty"):
        (x * 2).sum().backward(inputs=[])


# -- gradcheck ---------------------------------------------------------------------------
class _WrongSin(tg.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.sin(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * np.cos(x) * np.where(np.arange(x.size) == 2, 1.5, 1.0)


def test_gradcheck_passes_and_names_the_worst_element():
    x = np.linspace(0.1, 0.9, 4)
    assert tg.gradcheck(lambda a, b: np.exp(a) * b.sum(), x, x[:2])
    with pytest.raises(tg.GradcheckError, match=r"d output\[2\] / d input\[2\].*reverse sweep"):
        tg.gradcheck(_WrongSin.apply, x)
    assert tg.gradcheck(_WrongSin.apply, x, raise_exception=False) is False


# -- sparse blocks of adjoint vectors through matmul (ops/matrix.py) -------------------------
SPARSE_CASES = {
    # unit seeds after elementwise ops: one nonzero per vector (distinct rows)
    "vector_rhs": (lambda A, x: tg.tanh(A @ x) * x[:3].sum(), (6, 5), (5,)),
    "square": (lambda A, x: tg.tanh(A @ x) * x, (5, 5), (5,)),
    "vector_lhs": (lambda A, x: tg.sin(x @ A) * 2.0, (5, 6), (5,)),
    # matrix operands: several nonzeros per vector, rows repeat (np.add.at)
    "matrix_both": (lambda A, X: tg.exp(0.1 * (A @ X)) + X.sum(), (4, 3), (3, 2)),
    "x_both_sides": (lambda A, x: (x @ A) * (A @ x), (4, 4), (4,)),
}


@pytest.mark.parametrize("name", sorted(SPARSE_CASES))
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_sparse_and_dense_matmul_products_agree(name, mode, monkeypatch):
    from tapegrad.ops import matrix as L
    f, sa, sx = SPARSE_CASES[name]
    rng = np.random.default_rng(3)
    A, x = rng.standard_normal(sa), rng.standard_normal(sx)
    jac = tg.jacobian(f, argnums=(0, 1), mode=mode)
    monkeypatch.setattr(L, "SPARSE_SHARE", 0.0)  # every block dense: one GEMM
    dense = jac(A, x)
    monkeypatch.setattr(L, "SPARSE_SHARE", 1.0)  # every block by its nonzeros
    sparse = jac(A, x)
    for d, s in zip(dense, sparse):
        np.testing.assert_allclose(s, d, rtol=1e-13, atol=1e-13)
    # and both against finite differences
    for k, (arg, d) in enumerate(zip((A, x), dense)):
        eps = 1e-6
        for j in range(arg.size):
            e = np.zeros(arg.size)
            e[j] = eps
            e = e.reshape(arg.shape)
            args_p = (A + e, x) if k == 0 else (A, x + e)
            args_m = (A - e, x) if k == 0 else (A, x - e)
            fd = (np.asarray(f(*args_p)) - np.asarray(f(*args_m))) / (2 * eps)
            np.testing.assert_allclose(d.reshape(fd.shape + (-1,))[..., j], fd,
                                       rtol=1e-6, atol=1e-7)


def test_forward_mode_through_a_nested_gradient():
    """tg.jvp / tg.jacfwd of tg.grad(f): the Hessian times the tangent, against
    tg.hessian and central differences of tg.grad; a third level too."""
    f = lambda x: (np.sin(x) * x ** 2).sum() + x[0] * x[1] ** 3   # noqa: E731
    x, d = np.array([0.3, 1.2, -0.5]), np.array([1.0, -0.5, 2.0])
    H = tg.hessian(f)(x)
    _, t = tg.jvp(tg.grad(f), (x,), (d,))
    close(t, H @ d)
    g, e = tg.grad(f), 1e-6
    np.testing.assert_allclose(t, (g(x + e * d) - g(x - e * d)) / (2 * e), rtol=1e-6)
    close(tg.jacfwd(tg.grad(f))(x), H)
    _, tv = tg.jvp(lambda x: tg.value_and_grad(f)(x)[0], (x,), (d,))
    close(tv, g(x) @ d)
    g2 = lambda x: tg.grad(lambda y: tg.grad(f)(y).sum())(x)   # noqa: E731
    _, t3 = tg.jvp(g2, (x,), (d,))
    np.testing.assert_allclose(t3, (g2(x + e * d) - g2(x - e * d)) / (2 * e), rtol=1e-6)
