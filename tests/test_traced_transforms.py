"""tg.grad / tg.value_and_grad of a traced function at plain arrays run the
trace's own replay and reverse sweep; they must give what the general path
gives (the call recorded on the tape as one op, then swept), which runs
whenever a tensor is among the arguments.  Oracles: that general path, the
eager function and central differences."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
import tapegrad.transforms.functional as F
from tapegrad.core.tape import current

RNG = np.random.default_rng(7)
A, B, C = RNG.uniform(-1, 1, 6), RNG.uniform(-1, 1, 6), RNG.uniform(0.5, 2, 6)


def _f(a, b, c):
    return (3 * a + 2 * b * b + np.log(c) * np.sin(a)).sum()


def _general(ft, argnums):
    """The general path: a wrapper without the traced function's shortcut,
    which calls it on the transform's leaves (a traced call on the tape)."""
    return tg.value_and_grad(lambda *xs: ft(*xs), argnums=argnums)


def _fd(fn, args, i, h=1e-6):
    x = np.array(args[i], dtype=np.float64)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up, dn = x.copy(), x.copy()
        up[k] += h
        dn[k] -= h
        au, ad = list(args), list(args)
        au[i], ad[i] = up, dn
        g[k] = (float(fn(*au)) - float(fn(*ad))) / (2 * h)
    return g


@pytest.mark.parametrize("argnums", [0, 2, (0, 1, 2), (2, 0), (1,)])
def test_same_as_the_general_path_and_the_eager_function(argnums):
    ft = tg.trace(_f, A, B, C)
    v, g = tg.value_and_grad(ft, argnums=argnums)(A, B, C)
    v0, g0 = _general(ft, argnums)(A, B, C)
    ve, ge = tg.value_and_grad(_f, argnums=argnums)(A, B, C)
    assert type(v) is float and v == v0
    assert v == pytest.approx(ve, rel=1e-14)
    gs, g0s, ges = ((x,) if not isinstance(argnums, tuple) else x for x in (g, g0, ge))
    assert isinstance(g, tuple) == isinstance(argnums, tuple)
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for n, a, b, e in zip(nums, gs, g0s, ges):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, e, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(a, _fd(_f, (A, B, C), n), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(F.grad(ft, argnums)(A, B, C) if isinstance(argnums, tuple)
                                  else F.grad(ft, argnums)(A, B, C), g)


def test_other_inputs_than_the_traced_ones_and_a_retrace():
    def f(x, y):
        if x.sum() > 0:  # a guard: the other sign traces again
            return (x * y).sum() + np.exp(x).sum()
        return (x * x * y).sum()
    ft = tg.trace(f, A, B)
    for x in (A + 2.0, A - 2.0, A * 0.5 + 3.0):
        v, g = tg.value_and_grad(ft, argnums=(0, 1))(x, B)
        v0, g0 = _general(ft, (0, 1))(x, B)
        assert v == v0
        for a, b in zip(g, g0):
            np.testing.assert_array_equal(a, b)
        for i in (0, 1):
            np.testing.assert_allclose(g[i], _fd(f, (x, B), i), rtol=1e-6, atol=1e-7)
    assert ft.retraces >= 1


def test_float32_python_float_and_numpy_scalar_arguments():
    ft = tg.trace(lambda x, s, t: (np.sin(x) * s).sum() * t, A.astype(np.float32), 1.5,
                  np.float64(0.25))
    args = (A.astype(np.float32), 1.5, np.float64(0.25))
    v, g = tg.value_and_grad(ft, argnums=(0, 1, 2))(*args)
    v0, g0 = _general(ft, (0, 1, 2))(*args)
    assert v == v0
    for a, b in zip(g, g0):
        assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert g[0].dtype == np.float32 and g[1].shape == ()


def test_static_and_integer_arguments_take_the_general_path():
    ft = tg.trace(lambda x, k: (x ** k).sum(), A, 3)
    g = tg.grad(ft)(A, 3)  # k is static (an int): x is the only input
    np.testing.assert_allclose(g, 3 * A ** 2, rtol=1e-14)
    # an integer array to differentiate: the trace would refuse it as an
    # input; the general path differentiates it as a float leaf
    ints = np.array([1, 2, 3])
    ft2 = tg.trace(lambda x: (x * x).sum(), ints.astype(float))
    np.testing.assert_array_equal(tg.grad(ft2)(ints), 2.0 * ints)


@given(st.integers(1, 7), st.integers(0, 10_000))
@settings(max_examples=25, deadline=None)
def test_random_inputs_agree_with_the_eager_gradient(n, seed):
    rng = np.random.default_rng(seed)
    a, b, c = rng.uniform(-2, 2, n), rng.uniform(-2, 2, n), rng.uniform(0.3, 3, n)
    ft = tg.trace(_f, a, b, c)
    x, y, z = rng.uniform(-2, 2, n), rng.uniform(-2, 2, n), rng.uniform(0.3, 3, n)
    v, g = tg.value_and_grad(ft, argnums=(0, 1, 2))(x, y, z)
    ve, ge = tg.value_and_grad(_f, argnums=(0, 1, 2))(x, y, z)
    assert v == pytest.approx(ve, rel=1e-13, abs=1e-13)
    for a_, e in zip(g, ge):
        np.testing.assert_allclose(a_, e, rtol=1e-12, atol=1e-13)


def test_errors_are_the_general_paths_and_leave_the_tape_alone():
    ft = tg.trace(lambda x: np.sin(x) * 2.0, A)
    keep = tg.tensor(B, requires_grad=True)
    y = (keep * keep).sum()
    n = current().n
    with pytest.raises(TypeError, match="one output number"):
        tg.grad(ft)(A)
    with pytest.raises(TypeError, match="one output number"):
        _general(ft, 0)(A)
    assert current().n >= n
    y.backward()  # the other graph still works
    np.testing.assert_allclose(keep.grad.numpy(), 2 * B)


def test_tensor_arguments_and_nesting_keep_the_general_path():
    ft = tg.trace(lambda x: (np.sin(x) * x).sum(), A)
    # grad of grad: the inner call sees tensors that require grad and takes
    # the nested path, whose second derivative of a trace is refused, never zero
    with pytest.raises(NotImplementedError, match="TracedCall"):
        tg.grad(lambda x: (tg.grad(ft)(x) * x).sum())(A)
    x = tg.tensor(A, requires_grad=True)
    v, g = tg.value_and_grad(ft)(x.detach())
    np.testing.assert_allclose(g, np.sin(A) + A * np.cos(A), rtol=1e-14)


def test_a_loaded_function(tmp_path):
    ft = tg.trace(_f, A, B, C)
    path = tmp_path / "f.tape"
    ft.save(path)
    lf = tg.load(path)
    v, g = tg.value_and_grad(lf, argnums=(0, 2))(A, B, C)
    v0, g0 = tg.value_and_grad(ft, argnums=(0, 2))(A, B, C)
    assert v == v0
    for a, b in zip(g, g0):
        np.testing.assert_array_equal(a, b)


M = RNG.uniform(-1, 1, (5, 6))


def _g(x, y):
    return np.tanh(M @ x) * y[:5] + np.sin(x[:5])


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0)])
def test_jacobian_same_as_the_general_path_and_the_eager_function(argnums):
    ft = tg.trace(_g, A, B)
    J = tg.jacobian(ft, argnums=argnums)(A, B)
    J0 = tg.jacobian(lambda *xs: ft(*xs), argnums=argnums)(A, B)
    Je = tg.jacobian(_g, argnums=argnums)(A, B)
    assert isinstance(J, tuple) == isinstance(argnums, tuple)
    Js, J0s, Jes = ((x,) if not isinstance(argnums, tuple) else x for x in (J, J0, Je))
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for n, a, b, e in zip(nums, Js, J0s, Jes):
        assert a.dtype == b.dtype and a.shape == b.shape == (5, 6)
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(a, e, rtol=1e-13, atol=1e-15)
        for i in range(6):  # a column by central differences
            h = np.zeros(6)
            h[i] = 1e-6
            xs_up, xs_dn = [A, B], [A, B]
            xs_up[n], xs_dn[n] = (A, B)[n] + h, (A, B)[n] - h
            np.testing.assert_allclose(a[:, i], (_g(*xs_up) - _g(*xs_dn)) / 2e-6,
                                       rtol=1e-6, atol=1e-8)


def test_jacobian_float32_scalars_and_at_other_inputs():
    ft = tg.trace(lambda x, s: np.sin(x) * s, A.astype(np.float32), 2.0)
    for x in (A, A + 1.0):
        x32 = x.astype(np.float32)
        J = tg.jacobian(ft, argnums=(0, 1))(x32, 2.0)
        J0 = tg.jacobian(lambda *xs: ft(*xs), argnums=(0, 1))(x32, 2.0)
        for a, b in zip(J, J0):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-6)
        np.testing.assert_allclose(np.diag(J[0]), 2.0 * np.cos(x32), rtol=1e-6)
    assert J[0].dtype == np.float32 and J[1].shape == (6,)


def test_jacobian_of_a_tuple_output_agrees_with_the_general_path():
    ft = tg.trace(lambda x, y: (x * y, x.sum()), A, A + 1.0)
    fast = tg.jacobian(ft, argnums=(0, 1))(A, A + 1.0)
    general = tg.jacobian(lambda x, y: ft(x, y), argnums=(0, 1))(A, A + 1.0)
    own = ft.jacobian(A, A + 1.0)
    assert len(fast) == len(general) == 2
    for f, g, o in zip(fast, general, own):
        assert len(f) == len(g) == 2
        for a, b, c in zip(f, g, o):
            np.testing.assert_allclose(a, b, rtol=1e-15, atol=0)
            np.testing.assert_array_equal(a, c)
    single = tg.jacobian(ft, argnums=1)(A, A + 1.0)
    np.testing.assert_array_equal(single[0], fast[0][1])
    # forward mode keeps the general path (a traced call has no forward rule)
    with pytest.raises(NotImplementedError):
        tg.jacobian(tg.trace(lambda x: x * 2.0, A), mode="forward")(A)


def _s(x, y):
    return (np.tanh(M @ x) * y[:5]).sum() + (np.sin(x) * y).sum()


def _grad_fd(x, y, n, h=1e-5):
    """The Jacobian of the gradient in argument n, by central differences."""
    cols = []
    for i in range(6):
        e = np.zeros(6)
        e[i] = h
        up, dn = [x, y], [x, y]
        up[n], dn[n] = (x, y)[n] + e, (x, y)[n] - e
        cols.append((np.stack(tg.grad(_s, (0, 1))(*up)) - np.stack(tg.grad(_s, (0, 1))(*dn)))
                    / (2 * h))
    return np.stack(cols, axis=-1)  # (2, 6, 6): d grad_k / d arg_n[i]


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0)])
def test_hessian_of_a_traced_function(argnums):
    ft = tg.trace(_s, A, B)
    H = tg.hessian(ft, argnums=argnums)(A + 0.5, B)
    He = tg.hessian(_s, argnums=argnums)(A + 0.5, B)
    if isinstance(argnums, tuple):
        for i, n in enumerate(argnums):
            for j, m in enumerate(argnums):
                assert H[i][j].shape == (6, 6)
                np.testing.assert_allclose(H[i][j], He[i][j], rtol=1e-12, atol=1e-14)
                np.testing.assert_allclose(H[i][j], _grad_fd(A + 0.5, B, m)[n],
                                           rtol=1e-5, atol=1e-7)
    else:
        np.testing.assert_allclose(H, He, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(H, _grad_fd(A + 0.5, B, argnums)[argnums],
                                   rtol=1e-5, atol=1e-7)


def test_hvp_and_jvp_of_a_traced_function():
    ft = tg.trace(_s, A, B)
    v, w = RNG.normal(size=6), RNG.normal(size=6)
    g, hv = tg.hvp(ft, (A, B), (v, w))
    ge, hve = tg.hvp(_s, (A, B), (v, w))
    for a, e in zip(g + hv, ge + hve):
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-14)
    # a batch of directions
    V, W = RNG.normal(size=(3, 6)), RNG.normal(size=(3, 6))
    _, hv = tg.hvp(ft, (A, B), (V, W))
    _, hve = tg.hvp(_s, (A, B), (V, W))
    for a, e in zip(hv, hve):
        assert a.shape == (3, 6)
        np.testing.assert_allclose(a, e, rtol=1e-12, atol=1e-14)
    fg = tg.trace(_g, A, B)
    out, t = tg.jvp(fg, (A, B), (v, w))
    oute, te = tg.jvp(_g, (A, B), (v, w))
    np.testing.assert_allclose(out, oute, rtol=1e-14)
    np.testing.assert_allclose(t, te, rtol=1e-12, atol=1e-14)
    h = 1e-6
    np.testing.assert_allclose(t, (_g(A + h * v, B + h * w) - _g(A - h * v, B - h * w)) / (2 * h),
                               rtol=1e-6, atol=1e-8)
    _, T = tg.jvp(fg, (A, B), (V, W))
    _, Te = tg.jvp(_g, (A, B), (V, W))
    np.testing.assert_allclose(T, Te, rtol=1e-12, atol=1e-14)


def test_second_order_errors_keep_their_meaning():
    ft = tg.trace(lambda x: np.sin(x) * 2.0, A)
    with pytest.raises(TypeError, match="one number"):
        tg.hessian(ft)(A)
    with pytest.raises(TypeError, match="one number"):
        tg.hvp(ft, (A,), (A,))
    # a static (integer) primal: the general path, whose traced call has no
    # forward rule, refuses it rather than returning a partial answer
    fk = tg.trace(lambda x, k: (x ** k).sum(), A, 2)
    with pytest.raises((NotImplementedError, TypeError)):
        tg.hvp(fk, (A, 2), (A, 0))


def test_jacobian_through_a_traced_call_inside_a_bigger_function():
    """The call recorded as an op takes all p vectors at once
    (``TracedCall.batched_backward``): the same Jacobian as one sweep per
    row, and as the eager function."""
    ft = tg.trace(_g, A, B)
    comp = lambda x, y: ft(x, y) * 2.0 + np.sin(x[:5]) * y[1:]  # noqa: E731
    eager = lambda x, y: _g(x, y) * 2.0 + np.sin(x[:5]) * y[1:]  # noqa: E731
    J = tg.jacobian(comp, argnums=(0, 1))(A, B)
    Je = tg.jacobian(eager, argnums=(0, 1))(A, B)
    for a, e in zip(J, Je):
        np.testing.assert_allclose(a, e, rtol=1e-13, atol=1e-15)
    # a batch of cotangents through tg.vjp: the vector sweep too
    out, back = tg.vjp(comp, A, B)
    C5 = RNG.normal(size=(3, 5))
    gx, gy = back(C5)
    outs, backe = tg.vjp(eager, A, B)
    ex, ey = backe(C5)
    np.testing.assert_allclose(gx, ex, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gy, ey, rtol=1e-13, atol=1e-15)


def test_jacobian_through_a_multi_output_call_with_a_static_argument():
    ft = tg.trace(lambda x, k, y: (x * y * k, (x ** 2).sum() + y[0]), A, 3, B)
    def comp(x, y):
        a, s = ft(x, 3, y)
        return a * s + x
    def eager(x, y):
        a, s = x * y * 3, (x ** 2).sum() + y[0]
        return a * s + x
    J = tg.jacobian(comp, argnums=(0, 1))(A, B)
    Je = tg.jacobian(eager, argnums=(0, 1))(A, B)
    for a, e in zip(J, Je):
        np.testing.assert_allclose(a, e, rtol=1e-13, atol=1e-14)


class _Scale(tg.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        return g * 3.0


class _BadBatch(_Scale):
    @staticmethod
    def batched_backward(ctx, g):
        return g[0] * 3.0  # drops the vectors' axis


def test_functions_with_and_without_a_batched_backward():
    J = tg.jacobian(lambda x: _Scale.apply(x) * x)(A)
    np.testing.assert_allclose(J, np.diag(6.0 * A), rtol=1e-15)
    x = tg.tensor(A, requires_grad=True)
    keep = (x * x).sum()
    with pytest.raises(RuntimeError, match="gradient of shape"):
        tg.jacobian(lambda v: _BadBatch.apply(v) * v)(A)
    keep.backward()  # another graph is untouched by the failed transform
    np.testing.assert_allclose(x.grad.numpy(), 2 * A)
