"""Second derivatives (tg.hessian, tg.hvp): closed forms, symmetry, batched
directions, finite differences of tg.grad for every op in the gradient table
(so new ops are covered automatically), float32, errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import second as S

from test_gradients import CASES

#: ops with no second-order rule: tg.hessian / tg.hvp raise NotImplementedError
#: (the message names the op; Function has no forward rule at all)
NO_SECOND = {
    "UserElementwise": "UserElementwise", "UserElementwiseBinary": "UserElementwiseBinary",
    "Function": "no forward-mode",
    "LinalgCholesky": "LinalgCholesky",
    "LinalgEigh": "LinalgEigh", "LinalgQr": "LinalgQr", "LinalgSvd": "LinalgSvd",
    "LinalgPinv": "LinalgPinv", "LinalgLstsq": "LinalgLstsq",
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
    with pytest.raises(NotImplementedError, match="LinalgCholesky"):
        tg.hessian(lambda a: np.linalg.cholesky(a).sum())(np.eye(2) * 2)
    with pytest.raises(NotImplementedError, match="tg.hessian"):
        t = tg.tensor([1.0], requires_grad=True)
        tg.autograd.grad((t * t).sum(), t, create_graph=True)


def test_graph_is_freed_after_hessian():
    from tapegrad.tape import current
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


# -- the compiled second-order sweep's branches (kernels/second.py) -----------------------
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
