"""Second derivatives (tg.hessian, tg.hvp): closed forms, symmetry, batched
directions, finite differences of tg.grad for every op in the gradient table
(so new ops are covered automatically), float32, errors."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.transforms.second import passes as S

from op_cases import CASES, _SinCos

#: ops with no second-order rule: tg.hessian / tg.hvp raise NotImplementedError
#: (Function has no forward rule at all; the table's user ops are defined
#: without second_derivative=, and the message says to pass it)
NO_SECOND = {
    "Function": "no forward-mode",
}


def rosen(x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def rosen_hessian(x):
    n = x.size
    H = np.zeros((n, n))
    d = np.zeros(n)
    d[:-1] += 1200.0 * x[:-1] ** 2 - 400.0 * x[1:] + 2.0
    d[1:] += 200.0
    H[np.arange(n), np.arange(n)] = d
    i = np.arange(n - 1)
    H[i, i + 1] = H[i + 1, i] = -400.0 * x[:-1]
    return H


def _fd_hvp(f, arrays, ts, eps=1e-5):
    """Central differences of tg.grad along the tangents, per input."""
    g = tg.grad(f, argnums=tuple(range(len(arrays))))
    plus = g(*[a + eps * t for a, t in zip(arrays, ts)])
    minus = g(*[a - eps * t for a, t in zip(arrays, ts)])
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


# -- closed forms ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [10, 100])
def test_rosenbrock_hessian_matches_closed_form(n):
    x = np.random.default_rng(n).uniform(-1.5, 1.5, n)
    H = tg.hessian(rosen)(x)
    assert H.shape == (n, n)
    np.testing.assert_allclose(H, rosen_hessian(x), rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(H, H.T)


def test_hvp_matches_finite_differences_of_grad():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((6, 4))

    def f(x, b):
        z = np.tanh(A @ x + b)
        return (tg.logsumexp(z * x.sum()) + (x ** 3).sum() / (1.0 + b @ b)).sum()

    x, b = rng.standard_normal(4), rng.standard_normal(6)
    tx, tb = rng.standard_normal(4), rng.standard_normal(6)
    (gx, gb), (hx, hb) = tg.hvp(f, (x, b), (tx, tb))
    ex, eb = _fd_hvp(f, [x, b], [tx, tb])
    np.testing.assert_allclose(hx, ex, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hb, eb, rtol=1e-6, atol=1e-6)
    rx, rb = tg.grad(f, argnums=(0, 1))(x, b)
    np.testing.assert_allclose(gx, rx, rtol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12)


def test_hessian_is_symmetric_and_matches_hvp():
    rng = np.random.default_rng(2)
    W = rng.standard_normal((5, 5))

    def f(x):
        return (tg.softmax(W @ np.sin(x)) * np.exp(x / 3)).sum() + tg.prod(x * x + 1.0)

    x = rng.standard_normal(5)
    H = tg.hessian(f)(x)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)
    _, (hv,) = tg.hvp(f, (x,), (np.eye(5),))  # a batch of 5 directions
    np.testing.assert_allclose(hv, H, rtol=1e-12, atol=1e-12)
    v = rng.standard_normal(5)
    _, (h1,) = tg.hvp(f, (x,), (v,))
    np.testing.assert_allclose(h1, H @ v, rtol=1e-10, atol=1e-12)


def test_hessian_with_several_argnums_and_shapes():
    def f(a, c, b):
        return (a ** 2 * b[None, :]).sum() * c + (a @ b).prod()

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(3)
    H = tg.hessian(f, argnums=(0, 2))(a, 1.5, b)
    assert H[0][0].shape == (2, 3, 2, 3) and H[0][1].shape == (2, 3, 3)
    assert H[1][0].shape == (3, 2, 3) and H[1][1].shape == (3, 3)
    np.testing.assert_allclose(H[0][1], np.moveaxis(H[1][0], 0, -1), rtol=1e-12)
    t = [rng.standard_normal(a.shape), rng.standard_normal(b.shape)]
    ea, eb = _fd_hvp(lambda a, b: f(a, 1.5, b), [a, b], t)
    ha = np.tensordot(H[0][0], t[0], 2) + H[0][1] @ t[1]
    hb = np.tensordot(H[1][0], t[0], 2) + H[1][1] @ t[1]
    np.testing.assert_allclose(ha, ea, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hb, eb, rtol=1e-6, atol=1e-6)


def test_hessian_in_chunks_equals_one_pass(monkeypatch):
    x = np.random.default_rng(4).uniform(-1, 1, 30)
    H = tg.hessian(rosen)(x)
    monkeypatch.setattr(S, "HESSIAN_BYTES", 1)  # one direction per pass
    np.testing.assert_array_equal(tg.hessian(rosen)(x), H)


def test_float32_inputs():
    x = np.random.default_rng(5).uniform(-1, 1, 10).astype(np.float32)
    H = tg.hessian(rosen)(x)
    assert H.dtype == np.float32
    np.testing.assert_allclose(H, rosen_hessian(x.astype(np.float64)), rtol=1e-4, atol=1e-3)
    (g,), (hv,) = tg.hvp(rosen, (x,), (np.ones(10, np.float32),))
    assert g.dtype == hv.dtype == np.float32


def test_constant_and_linear_functions():
    x = np.arange(3.0)
    np.testing.assert_array_equal(tg.hessian(lambda x: (2 * x).sum())(x), np.zeros((3, 3)))
    np.testing.assert_array_equal(tg.hessian(lambda x: np.float64(1.0))(x), np.zeros((3, 3)))


def test_errors():
    x = np.arange(3.0)
    with pytest.raises(TypeError, match="one number"):
        tg.hessian(lambda x: x * x)(x)
    with pytest.raises(ValueError, match="tangent"):
        tg.hvp(rosen, (x,), (np.ones(4),))
    with pytest.raises(NotImplementedError, match="no forward-mode"):
        tg.hessian(lambda x: _SinCos.apply(x, 1.0)[0].sum())(x)
    t = tg.tensor([1.0], requires_grad=True)
    (g,) = tg.autograd.grad((t * t).sum(), t, create_graph=True)
    with pytest.raises(NotImplementedError, match="no forward-mode"):  # second order only
        tg.autograd.grad(_SinCos.apply(g, 1.0)[0].sum(), t, create_graph=True)[0].sum().backward()


def test_graph_is_freed_after_hessian():
    from tapegrad.core.tape import current
    tg.hessian(rosen)(np.ones(5))
    tape = current()
    assert tape.n == 0 or tape.all_freed or bool(tape.freed[:tape.n].any())


# -- every op in the registry ---------------------------------------------------------------
def _weights(shape, k):
    return (np.arange(1, int(np.prod(shape)) + 1, dtype=float).reshape(shape) * 0.1) ** k


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_hvp_matches_finite_differences(name):
    strategy, fn = CASES[name]

    @settings(max_examples=8, deadline=None)
    @given(case=strategy, seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        shapes, domains, params = case
        rng = np.random.default_rng(seed)
        arrays = [d(rng, s) for d, s in zip(domains, shapes)]

        def f(*xs):
            y = fn(*xs, **params)
            w = _weights(np.shape(y), 1)
            # the square makes linear ops' Hessians nonzero too: it checks
            # that the tangent adjoints pass through each op's VJP
            return (w * y).sum() + 0.25 * (_weights(np.shape(y), 0.5) * y * y).sum()

        ts = [rng.standard_normal(a.shape) for a in arrays]
        if name in NO_SECOND:
            with pytest.raises(NotImplementedError, match=NO_SECOND[name]):
                tg.hvp(f, tuple(arrays), tuple(ts))
            return
        grads, hvs = tg.hvp(f, tuple(arrays), tuple(ts))
        expect = _fd_hvp(f, arrays, ts)
        for h, e in zip(hvs, expect):
            scale = 1.0 + np.abs(e).max(initial=0.0)
            np.testing.assert_allclose(h, e, rtol=1e-5, atol=1e-5 * scale)
        # a batch of directions through one pass: the same numbers as one
        # direction at a time
        p = 17
        batch = [np.concatenate([t[None], rng.standard_normal((p - 1,) + t.shape)]) for t in ts]
        _, hb = tg.hvp(f, tuple(arrays), tuple(batch), batched=True)
        for h, b in zip(hvs, hb):
            np.testing.assert_allclose(b[0], h, rtol=1e-10, atol=1e-10)

    run()


def test_no_second_list_names_only_ops_in_the_table():
    assert set(NO_SECOND) <= set(CASES)


# -- the compiled second-order sweep's branches (kernels/hvp.py) -----------------------
def _fd_hessian(f, x, eps=1e-5):
    """The Hessian by central differences of tg.grad, column by column."""
    g = tg.grad(f)
    cols = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = eps
        cols.append((g(x + e.reshape(x.shape)) - g(x - e.reshape(x.shape))).ravel() / (2 * eps))
    return np.array(cols).T.reshape(x.shape + x.shape)


SWEEP_CASES = {
    # broadcasting binary ops with index maps (odometer) on both operands
    "outer_broadcast": (lambda x: (x[:3].reshape(3, 1) * tg.sin(x[3:]).reshape(1, 4)).sum(), 7),
    "broadcast_div": (lambda x: (x.reshape(2, 3) / (1.5 + x[:3] ** 2)).sum(), 6),
    # one tensor as both operands: both terms land on one adjoint
    "self_mul": (lambda x: (x * x * x).sum(), 4),
    "self_pow": (lambda x: ((1.1 + x * x) ** (1.1 + x * x)).sum(), 3),
    # a one-element operand broadcast against a full one
    "scalar_operand": (lambda x: (x[1:] * x[0] + tg.arctan2(x[1:], 1.0 + x[0] ** 2)).sum(), 5),
    # partial reductions and means feeding nonlinear ops
    "axis_sum": (lambda x: (tg.exp(0.3 * x.reshape(3, 2)).sum(axis=0) ** 2).sum(), 6),
    "mean_keepdims": (lambda x: (tg.log1p(x.reshape(2, 3) ** 2).mean(axis=1, keepdims=True)
                                 * x.reshape(2, 3)).sum(), 6),
    # gathers: repeated indices accumulate, filled-in zeros (pad) skip
    "repeated_index": (lambda x: (x[[0, 0, 2, 1, 2]] ** 3).sum(), 3),
    "pad_transpose": (lambda x: (tg.pad(x.reshape(2, 2), 1).T ** 2 * tg.tanh(x).sum()).sum(), 4),
    # records left to Python between compiled runs: matmul, where, concatenate,
    # split (multi-output), softmax, cumprod
    "mixed_fallbacks": (lambda x: (tg.tanh(x.reshape(2, 3) @ x.reshape(3, 2)).sum()
                                   + tg.where(x > 0.0, x ** 2, tg.sin(x)).sum()
                                   + (tg.concatenate([x, x ** 2]) ** 2).sum()
                                   + sum((s ** 3).sum() for s in tg.split(x, 3))
                                   + (tg.softmax(x) * x).sum()
                                   + tg.cumprod(1.0 + 0.1 * x ** 2).sum()), 6),
    # the root is a slot of a multi-output op
    "root_is_a_slot": (lambda x: tg.unbind((x ** 2).sum(axis=0) * x[0])[1], (3, 2)),
}


@pytest.mark.parametrize("name", sorted(SWEEP_CASES))
def test_compiled_sweep_branches_match_finite_differences(name):
    f, shape = SWEEP_CASES[name]
    x = np.random.default_rng(7).uniform(0.2, 1.2, shape)
    H = tg.hessian(f)(x)
    expect = _fd_hessian(f, x)
    scale = 1.0 + np.abs(expect).max()
    np.testing.assert_allclose(H, expect, rtol=1e-6, atol=1e-6 * scale)
    n = x.size
    np.testing.assert_allclose(H.reshape(n, n), H.reshape(n, n).T, rtol=1e-10,
                               atol=1e-12 * scale)


def test_records_independent_of_the_inputs_get_nothing_written():
    # c depends only on a constant: its adjoints are never touched, and the
    # Hessian is the same as with c folded in
    c = np.linspace(0.5, 1.5, 4)
    f1 = lambda x: (tg.exp(tg.tensor(c) * 2.0) * x ** 3).sum()  # noqa: E731
    f2 = lambda x: (np.exp(c * 2.0) * x ** 3).sum()  # noqa: E731
    x = np.array([0.3, -0.2, 1.1, 0.7])
    np.testing.assert_allclose(tg.hessian(f1)(x), tg.hessian(f2)(x), rtol=1e-14)


# -- decompositions: second-order rules at chosen shapes ----------------------------------
def _fd_check(f, arrays, seed=0, rtol=1e-5):
    """tg.hvp against central differences of tg.grad along random tangents,
    and the batched pass against one direction."""
    rng = np.random.default_rng(seed)
    ts = [rng.standard_normal(np.shape(a)) for a in arrays]
    _, hvs = tg.hvp(f, tuple(arrays), tuple(ts))
    for h, e in zip(hvs, _fd_hvp(f, arrays, ts)):
        scale = 1.0 + np.abs(e).max(initial=0.0)
        np.testing.assert_allclose(h, e, rtol=rtol, atol=rtol * scale)
    batch = [np.stack([t, rng.standard_normal(t.shape), rng.standard_normal(t.shape)])
             for t in ts]
    _, hb = tg.hvp(f, tuple(arrays), tuple(batch), batched=True)
    for h, b in zip(hvs, hb):
        np.testing.assert_allclose(b[0], h, rtol=1e-10, atol=1e-10)


def _spread(rng, shape):
    """Well-separated singular values in [1, 3] and random singular vectors."""
    m, n = shape[-2:]
    k = min(m, n)
    U = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
    V = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
    return (U * np.linspace(1.0, 3.0, k)) @ np.swapaxes(V, -1, -2)


def _spd(rng, shape):
    b = rng.uniform(-1, 1, shape)
    return b @ np.swapaxes(b, -1, -2) + shape[-1] * np.eye(shape[-1])


def _symm(a):
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def _w(shape):
    return np.cos(np.arange(int(np.prod(shape))).reshape(shape))


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_cholesky_and_eigh_second_order(shape):
    a = _spd(np.random.default_rng(10), shape)
    _fd_check(lambda a: (_w(shape) * np.linalg.cholesky(_symm(a)) ** 2).sum(), [a])
    # sign-free in the eigenvectors, with distinct eigenvalues
    _fd_check(lambda a: (np.linalg.eigh(_symm(a))[0] ** 3).sum()
              + (_w(shape) * np.linalg.eigh(_symm(a))[1] ** 2).sum(), [a], seed=1)
    # eigenvalues alone, and eigenvectors alone: one slot without gradient
    _fd_check(lambda a: tg.logsumexp(tg.linalg.eigvalsh(_symm(a))), [a], seed=2)
    _fd_check(lambda a: (_w(shape) * np.linalg.eigh(_symm(a))[1] ** 2).sum(), [a], seed=3)


@pytest.mark.parametrize("shape", [(4, 2), (3, 3), (2, 4), (2, 3, 2)])
@pytest.mark.parametrize("mode", ["reduced", "r", "complete"])
def test_qr_second_order(shape, mode):
    if mode == "complete" and shape[-2] > shape[-1]:
        pytest.skip("not differentiable in Q there (first order raises too)")
    a = _spread(np.random.default_rng(11), shape)

    def f(a):
        if mode == "r":  # R alone: Q's slot gets no gradient
            return (np.linalg.qr(a, mode) ** 3).sum()
        Q, R = np.linalg.qr(a, mode)
        return (_w(Q.shape) * Q).sum() + (R ** 3).sum() + (Q @ R * a).sum()

    _fd_check(f, [a])


@pytest.mark.parametrize("shape", [(4, 2), (3, 3), (2, 4), (2, 3, 2)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_second_order(shape, full_matrices):
    a = _spread(np.random.default_rng(12), shape)
    k = min(shape[-2:])

    def f(a):
        U, S, Vh = np.linalg.svd(a, full_matrices=full_matrices)
        U, Vh = U[..., :k], Vh[..., :k, :]
        # invariant to the signs of singular-vector pairs
        return ((S ** 3).sum() + (_w(U.shape) * U ** 2).sum() + (_w(Vh.shape) * Vh ** 2).sum()
                + (_w(shape) * ((U * S[..., None, :]) @ Vh) ** 2).sum()
                + (_w(shape) * (U @ Vh)).sum())

    _fd_check(f, [a])
    _fd_check(lambda a: (tg.linalg.svdvals(a) ** 2 * np.arange(1.0, k + 1)).sum(), [a])
    _fd_check(lambda a: (_w(shape[:-1] + (k,)) * np.linalg.svd(a, False)[0] ** 2).sum(),
              [a], seed=4)  # U alone


def test_svd_hermitian_second_order():
    a = _spd(np.random.default_rng(13), (3, 3))
    a = a + np.diag([0.0, 3.0, 7.0])  # eigenvalues well apart

    def f(a):
        U, S, Vh = np.linalg.svd(_symm(a), hermitian=True)
        return (S ** 2).sum() + (_w(U.shape) * U ** 2).sum() + (_w(a.shape) * (U @ Vh)).sum()

    _fd_check(f, [a])


@pytest.mark.parametrize("shape", [(4, 2), (3, 3), (2, 4), (2, 3, 2)])
def test_pinv_second_order(shape):
    a = _spread(np.random.default_rng(14), shape)
    _fd_check(lambda a: (_w(shape[:-2] + shape[:-3:-1]) * np.linalg.pinv(a) ** 2).sum(), [a])


@pytest.mark.parametrize("m,n", [(5, 3), (3, 3), (2, 4)])
@pytest.mark.parametrize("matrix_b", [False, True])
def test_lstsq_second_order(m, n, matrix_b):
    rng = np.random.default_rng(15)
    a = _spread(rng, (m, n))
    b = rng.standard_normal((m, 2) if matrix_b else (m,))

    def f(a, b):
        x, res, rank, s = np.linalg.lstsq(a, b, rcond=None)
        out = (_w(x.shape) * x ** 2).sum() + (x ** 3).sum()
        return out + (res ** 2).sum() if res.size else out  # residuals when m > n

    _fd_check(f, [a, b])
    _fd_check(lambda b: (np.linalg.lstsq(a, b, rcond=None)[0] ** 2).sum(), [b], seed=1)
    if m > n:
        _fd_check(lambda a: (np.linalg.lstsq(a, b, rcond=None)[1] ** 2).sum(), [a], seed=2)


def test_decompositions_hessian_is_symmetric_and_float32_works():
    rng = np.random.default_rng(16)
    a = _spread(rng, (3, 3)) + 3.0 * np.eye(3)

    def f(a):
        s = _symm(a @ a.T)
        return ((np.linalg.cholesky(s) ** 2).sum() + tg.linalg.svdvals(a).prod()
                + (np.linalg.pinv(a) ** 2).sum() + (np.linalg.qr(a, "r") ** 2).sum()
                + tg.linalg.eigvalsh(s).max())

    H = tg.hessian(f)(a).reshape(9, 9)
    np.testing.assert_allclose(H, H.T, rtol=1e-8, atol=1e-8 * np.abs(H).max())
    H32 = tg.hessian(f)(a.astype(np.float32))
    assert H32.dtype == np.float32
    np.testing.assert_allclose(H32.reshape(9, 9), H, rtol=2e-3, atol=2e-3 * np.abs(H).max())


# -- user elementwise ops with a second derivative ----------------------------------------
def _sp_d(x, y):
    return 1.0 / (1.0 + math.exp(-x))


def _sp_d2(x, y):
    s = 1.0 / (1.0 + math.exp(-x))
    return s * (1.0 - s)


@tg.elementwise(derivative=_sp_d, second_derivative=_sp_d2)
def _softplus2(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@tg.elementwise(derivative=lambda x: 3.0 * x * x, second_derivative=lambda x: 6.0 * x)
def _cube(x):
    return x * x * x


@tg.elementwise(derivative=lambda a, b, y: (math.sin(b), a * math.cos(b) + 2.0 * b),
                second_derivative=lambda a, b, y: (0.0, math.cos(b),
                                                   -a * math.sin(b) + 2.0))
def _a_sin_b2(a, b):
    return a * math.sin(b) + b * b


@tg.elementwise(derivative=lambda a, b, y: (b * y, a * y),
                second_derivative=lambda a, b, y: (b * b * y, y + a * b * y, a * a * y))
def _exp_ab(a, b):
    return math.exp(a * b)


def test_user_unary_hessian_matches_closed_form():
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    H = tg.hessian(lambda x: (_softplus2(x) * np.arange(1.0, 5.0)).sum())(x)
    s = 1.0 / (1.0 + np.exp(-x))
    np.testing.assert_allclose(H, np.diag(np.arange(1.0, 5.0) * s * (1 - s)), rtol=1e-12)
    # second_derivative(x) form, inside a larger graph
    np.testing.assert_allclose(tg.hessian(lambda x: tg.exp(_cube(x)).sum())(x[:2] * 0.5),
                               tg.hessian(lambda x: tg.exp(x ** 3).sum())(x[:2] * 0.5),
                               rtol=1e-12)


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)),
                                   ((), (4,)), ((3, 1), (3, 2))])
def test_user_binary_hessian_broadcasts(sa, sb):
    rng = np.random.default_rng(17)
    a, b = rng.uniform(-1, 1, sa), rng.uniform(-1, 1, sb)

    def f(a, b):
        y = _a_sin_b2(a, b) + _exp_ab(tg.tanh(a), b)
        return (y * y * _w(y.shape)).sum()

    _fd_check(f, [a, b])
    # a constant operand, and one tensor as both operands
    _fd_check(lambda a: (_a_sin_b2(a, np.ones(sb)) ** 2).sum(), [a], seed=1)
    _fd_check(lambda b: (_exp_ab(b, b) * _w(sb)).sum(), [b], seed=2)


def test_user_op_float32():
    x = np.array([0.3, -1.2, 2.0], np.float32)
    H = tg.hessian(lambda x: (_a_sin_b2(x, x[::-1]) ** 2).sum())(x)
    assert H.dtype == np.float32
    H64 = tg.hessian(lambda x: (_a_sin_b2(x, x[::-1]) ** 2).sum())(x.astype(np.float64))
    np.testing.assert_allclose(H, H64, rtol=1e-5, atol=1e-5)


def _opaque_sq_derivative(x, y):
    return 2.0 * x.real    # an attribute: Numba compiles it, tapegrad cannot derive it


def test_user_op_without_second_derivative_says_how_to_add_one():
    @tg.elementwise(derivative=_opaque_sq_derivative)
    def sq(x):
        return x * x

    x = np.array([1.0, 2.0])
    assert np.allclose(tg.grad(lambda x: sq(x).sum())(x), 2 * x)  # first order still fine
    with pytest.raises(NotImplementedError, match=r"sq .*second_derivative="):
        tg.hessian(lambda x: sq(x).sum())(x)
    # not reached by the Hessian's directions: no error
    assert tg.hessian(lambda x: (x ** 3).sum() + sq(tg.tensor([1.0])).sum())(x).shape == (2, 2)


def test_second_derivative_arity_and_compile_errors():
    with pytest.raises(TypeError, match="second derivative of f must take"):
        tg.elementwise(lambda x: x, lambda x: 1.0, second_derivative=lambda x, y, z: 0.0,
                       name="f")
    with pytest.raises(TypeError, match="triple"):
        tg.elementwise(lambda a, b: a * b, lambda a, b, y: (b, a),
                       second_derivative=lambda a, b: 0.0)
    with pytest.raises(TypeError, match="second derivative must be a function"):
        tg.elementwise(lambda x: x, lambda x: 1.0, second_derivative=2.0)

    @tg.elementwise(derivative=lambda x: 1.0, second_derivative=lambda x: object())
    def ident(x):
        return x

    import gc
    import weakref

    from oracle import in_fresh_thread

    def attempt():
        # on a thread of its own: a tape no other test has left tensors on
        seen = []

        def f(x):
            seen.append(weakref.ref(x))
            return ident(x * x).sum()

        try:
            tg.hessian(f)(np.ones(2))
            raise AssertionError("no error")
        except TypeError as e:
            assert "could not compile ident's second derivative" in str(e)
        # Numba caches the failure's traceback; compiled on a helper thread, its
        # frames do not pin the failed pass's graph, so the next op resets the
        # tape (which drops the leaf)
        gc.collect()
        tg.tensor([1.0], requires_grad=True) * 2.0
        assert seen[0]() is None

    in_fresh_thread(attempt)


# -- zero-size batch axes ------------------------------------------------------------------
@pytest.mark.parametrize("shapes", [((0, 2, 3), (0, 3, 4)), ((1, 2, 3), (0, 3, 4)),
                                    ((0, 2, 3), (1, 3, 4))])
@pytest.mark.parametrize("how", ["einsum", "ellipsis", "matmul", "at"])
def test_products_with_empty_batch_axes_give_empty_results(shapes, how):
    prod = {"einsum": lambda a, b: np.einsum("bij,bjk->bik", a, b),
            "ellipsis": lambda a, b: np.einsum("...ij,...jk->...ik", a, b),
            "matmul": np.matmul, "at": lambda a, b: a @ b}[how]

    def f(a, b):
        return (tg.sin(prod(a, b)) ** 2).sum()

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    ta, tb = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    assert f(a, b) == 0.0  # plain NumPy: an empty product, an empty sum
    # f is 0 everywhere near (a, b): its gradient and Hessian are zero
    g, hv = tg.hvp(f, (a, b), (ta, tb))
    for got, x in zip(g + hv, (a, b, a, b)):
        assert got.shape == x.shape
        np.testing.assert_array_equal(got, np.zeros(x.shape))
    ga, gb = tg.grad(f, argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(ga, np.zeros(a.shape))
    np.testing.assert_array_equal(gb, np.zeros(b.shape))
    H = tg.hessian(f, argnums=(0, 1))(a, b)
    assert H[0][1].shape == a.shape + b.shape and not np.any(H[0][1])
