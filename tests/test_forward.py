"""Forward mode (tg.jvp, tg.jacfwd, jacobian's choice of mode): closed forms,
finite differences, and J t against the reverse-mode Jacobian for every op in
the registry (the gradient table, so new ops are covered automatically);
batched tangents against the same tangents one by one; float32; errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.transforms.forward import sweep as FW
from tapegrad.kernels import codes as C
from tapegrad.core.registry import REGISTRY

from oracle import close, leaf
from op_cases import CASES

#: ops without a forward rule, and the error they raise
NO_FORWARD = {"Function": "no forward-mode"}


def _reverse_jacobians(fn, arrays):
    """Per input, ``out.shape + in.shape``: reverse mode (all m cotangents in
    one vector sweep), independent of the forward code."""
    out, vjp_fn = tg.vjp(fn, *arrays)
    m = int(np.size(out))
    if m == 0:  # an empty output (diagonal k beyond the matrix): J is empty
        return out, [np.zeros(np.shape(out) + np.shape(a)) for a in arrays]
    rows = vjp_fn(np.eye(m).reshape((m,) + np.shape(out)))
    return out, [r.reshape(np.shape(out) + np.shape(a)) for r, a in zip(rows, arrays)]


def _apply(J, t, nd_in):
    """J (out + in) times t (in), summed over the input axes."""
    return np.tensordot(J, t, axes=nd_in) if nd_in else J * t


# -- closed forms and finite differences -------------------------------------------------
def test_jvp_of_tanh_Ax_times_x_matches_closed_form():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((7, 5))
    x, t = rng.standard_normal(5), rng.standard_normal(5)
    out, tout = tg.jvp(lambda x: np.tanh(A @ x) * x[:1].sum(), (x,), (t,))
    h = np.tanh(A @ x)
    J = (1 - h ** 2)[:, None] * A * x[0] + np.outer(h, np.eye(5)[0])
    close(out, h * x[0])
    close(tout, J @ t, rtol=1e-12)
    # the function, square: J = diag(1 - h^2) A diag-x + diag(h)
    B = rng.standard_normal((5, 5))
    out, tout = tg.jvp(lambda x: np.tanh(B @ x) * x, (x,), (t,))
    h = np.tanh(B @ x)
    close(tout, ((1 - h ** 2)[:, None] * B * x[:, None] + np.diag(h)) @ t, rtol=1e-12)


def test_jvp_matches_finite_differences_on_a_composite():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((4, 3))

    def f(x, b):
        z = np.tanh(W @ x + b)
        s = tg.softmax(z * 2.0, axis=0)
        return tg.concatenate([np.cumprod(s)[::-1], tg.logsumexp(z)[None] * s.max(),
                               np.sort(np.exp(z))])

    x, b = rng.standard_normal(3), rng.standard_normal(4)
    tx, tb = rng.standard_normal(3), rng.standard_normal(4)
    out, tout = tg.jvp(f, (x, b), (tx, tb))
    eps = 1e-6

    def plain(x, b):
        return f(tg.tensor(x), tg.tensor(b)).numpy()
    num = (plain(x + eps * tx, b + eps * tb) - plain(x - eps * tx, b - eps * tb)) / (2 * eps)
    close(tout, num, rtol=1e-6, atol=1e-8)
    close(out, plain(x, b))


def test_ties_and_zeros_follow_the_reverse_conventions():
    # tied maxima share the tangent equally, as they share the gradient
    _, t = tg.jvp(lambda x: x.max(), (np.array([1.0, 1.0, 0.0]),), (np.array([1.0, 0.0, 0.0]),))
    assert t == 0.5
    # maximum of tied operands: half of each
    _, t = tg.jvp(np.maximum, (np.array([2.0]), np.array([2.0])), (np.array([1.0]), np.array([3.0])))
    close(t, [2.0])
    # cumprod with a zero: exact, no division
    x = np.array([2.0, 0.0, 3.0, 4.0])
    _, J = tg.jvp(np.cumprod, (x,), (np.eye(4),))
    _, Jr = _reverse_jacobians(np.cumprod, [x])
    close(J.T, Jr[0])
    _, t = tg.jvp(lambda x: x.prod(), (x,), (np.array([0.0, 1.0, 0.0, 0.0]),))
    assert t == 24.0


def test_inputs_used_twice_unused_constants_and_outer_tensors():
    w = leaf([1.0, 2.0, 3.0])
    pre = w * 2.0                             # recorded before jvp's inputs exist
    x, t = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, 3.0])
    _, tout = tg.jvp(lambda x, unused: x * x + pre * x + np.ones(3) * 4, (x, np.ones(2)),
                     (t, np.ones(2)))
    close(tout, (2 * x + pre.numpy()) * t)
    # an output independent of the inputs, and the input itself as the output
    out, tout = tg.jvp(lambda x: pre * 1.0, (x,), (t,))
    close(tout, np.zeros(3))
    out, tout = tg.jvp(lambda x: x, (x,), (t,))
    close(tout, t)
    out, tout = tg.jvp(lambda x: 3.0, (x,), (t,))
    assert out == 3.0 and tout == 0.0


def test_user_ops_and_linalg_closed_forms():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    dA = rng.standard_normal((4, 4))
    _, t = tg.jvp(np.linalg.inv, (A,), (dA,))
    Ai = np.linalg.inv(A)
    close(t, -Ai @ dA @ Ai, rtol=1e-10)
    _, t = tg.jvp(np.linalg.det, (A,), (dA,))
    close(t, np.linalg.det(A) * np.trace(Ai @ dA), rtol=1e-10)
    b, db = rng.standard_normal(4), rng.standard_normal(4)
    _, t = tg.jvp(np.linalg.solve, (A, b), (dA, db))
    close(t, Ai @ (db - dA @ Ai @ b), rtol=1e-10)


# -- every op in the registry: J t equals the reverse Jacobian times t ----------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_jvp_equals_reverse_jacobian_times_tangent(name):
    strategy, fn = CASES[name]

    @settings(max_examples=6, deadline=None)
    @given(case=strategy, seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        shapes, domains, params = case
        rng = np.random.default_rng(seed)
        arrays = [d(rng, s) for d, s in zip(domains, shapes)]
        f = lambda *xs: fn(*xs, **params)  # noqa: E731
        p = 3
        ts = [rng.standard_normal((p,) + a.shape) for a in arrays]
        if name in NO_FORWARD:
            with pytest.raises(NotImplementedError, match=NO_FORWARD[name]):
                tg.jvp(f, tuple(arrays), tuple(t[0] for t in ts))
            return
        out, Js = _reverse_jacobians(f, arrays)
        value, tb = tg.jvp(f, tuple(arrays), tuple(ts))   # p directions in one sweep
        close(value, out)
        assert tb.shape == (p,) + np.shape(out)
        for k in range(p):
            expect = sum(_apply(J, t[k], a.ndim) for J, t, a in zip(Js, ts, arrays))
            _, t1 = tg.jvp(f, tuple(arrays), tuple(t[k] for t in ts))
            np.testing.assert_allclose(t1, expect, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(tb[k], t1, rtol=1e-12, atol=1e-12)

    run()


def test_every_host_op_has_a_forward_rule():
    hosts = {d.name for d in REGISTRY.values() if d.code >> C.SHIFT == C.K_HOST}
    assert hosts == {REGISTRY[c].name for c in FW.HOST_JVP}


# -- jacfwd and jacobian's mode ----------------------------------------------------------------
def test_jacfwd_equals_reverse_jacobian_with_argnums():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((30, 3))

    def f(x, c, y):
        return np.tanh(A @ x) * c + np.outer(np.exp(A @ x), y).ravel()[:30]

    x, y = rng.standard_normal(3), rng.standard_normal((2,))
    Jx, Jy = tg.jacfwd(f, argnums=(0, 2))(x, 1.5, y)
    _, (Rx, Rc, Ry) = _reverse_jacobians(lambda x, c, y: f(x, c, y), [x, np.array(1.5), y])
    close(Jx, Rx, rtol=1e-12)
    close(Jy, Ry, rtol=1e-12)
    assert tg.jacfwd(f, argnums=1)(x, 1.5, y).shape == (30,)


def test_jacfwd_in_chunks_equals_one_sweep(monkeypatch):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((20, 8))
    f = lambda x: np.tanh(A @ x) * x.sum()  # noqa: E731
    x = rng.standard_normal(8)
    whole = tg.jacfwd(f)(x)
    monkeypatch.setattr(FW, "JACFWD_BYTES", 8 * 60)   # a few directions per sweep
    close(tg.jacfwd(f)(x), whole, rtol=1e-14)


def test_jacobian_uses_forward_mode_for_few_inputs(monkeypatch):
    calls = []
    real = FW.forward_jacobians
    monkeypatch.setattr(FW, "forward_jacobians",
                        lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(6)
    A = rng.standard_normal((50, 2))
    x = rng.standard_normal(2)
    J = tg.jacobian(lambda x: np.sin(A @ x))(x)
    close(J, np.cos(A @ x)[:, None] * A, rtol=1e-12)
    assert calls == [1]
    tg.jacobian(lambda x: np.sin(x[:2]))(np.ones(50))   # many inputs: reverse
    assert calls == [1]


def test_jacobian_falls_back_to_reverse_without_a_forward_rule():
    class Twice(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return np.repeat(x, 20) * 2.0

        @staticmethod
        def backward(ctx, g):
            return g.reshape(-1, 20).sum(axis=1) * 2.0

    J = tg.jacobian(Twice.apply)(np.ones(2))
    close(J, np.repeat(np.eye(2), 20, axis=0) * 2.0)
    with pytest.raises(NotImplementedError, match="Twice is a tg.Function"):
        tg.jvp(Twice.apply, (np.ones(2),), (np.ones(2),))


# -- dtypes and errors ---------------------------------------------------------------------------
def test_float32():
    x = np.array([0.5, 1.0, 2.0], np.float32)
    t = np.array([1.0, -1.0, 0.5], np.float32)
    out, tout = tg.jvp(lambda x: np.exp(x) * x, (x,), (t,))
    assert out.dtype == np.float32 and tout.dtype == np.float32
    close(tout, (np.exp(x.astype(float)) * (x + 1.0)) * t, rtol=1e-6)
    J = tg.jacfwd(lambda x: np.exp(x) * x)(x)
    assert J.dtype == np.float32
    # float64 tangents for float32 primals are fine (taken in float64)
    _, t64 = tg.jvp(lambda x: np.exp(x) * x, (x,), (t.astype(np.float64),))
    close(t64, tout)


def test_errors_are_clear():
    f = lambda x, y: x * y  # noqa: E731
    x = np.ones(3)
    with pytest.raises(ValueError, match=r"tangent 1 has shape \(2,\) but its primal has shape \(3,\)"):
        tg.jvp(f, (x, x), (x, np.ones(2)))
    with pytest.raises(TypeError, match="tangent 0 is complex but its primal is real"):
        tg.jvp(f, (x, x), (x * 1j, x))
    with pytest.raises(TypeError, match="tangents must be a tuple"):
        tg.jvp(np.sin, (x,), x)
    with pytest.raises(ValueError, match="2 primals but 1 tangents"):
        tg.jvp(f, (x, x), (x,))
    with pytest.raises(ValueError, match=r"same number p .* \[2, 4\]"):
        tg.jvp(f, (x, x), (np.ones((2, 3)), np.ones((4, 3))))
    with pytest.raises(ValueError, match=r"with batched=True, tangent 0 must have shape \(p,\)"):
        tg.jvp(np.sin, (x,), (x,), batched=True)
    with pytest.raises(ValueError, match="tangent 0 has shape"):
        tg.jvp(np.sin, (x,), (np.ones((2, 3)),), batched=False)
    with pytest.raises(NotImplementedError, match="mode='complete'"):
        tg.jvp(lambda a: np.linalg.qr(a, "complete")[1], (np.ones((3, 2)) + np.eye(3, 2),),
               (np.ones((3, 2)),))


def test_batched_tangents_of_a_scalar_primal():
    # shape (p,) against a 0-d primal: a batch, told apart by the number of axes
    out, t = tg.jvp(lambda x: x ** 3, (2.0,), (np.array([1.0, 2.0]),))
    close(t, [12.0, 24.0])
    out, t = tg.jvp(lambda x: x ** 3, (2.0,), (1.0,))
    assert t == 12.0
