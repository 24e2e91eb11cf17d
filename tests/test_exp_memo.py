"""softmax and log_softmax after a large logsumexp of the same tensor take its
exponentials (tapegrad/ops/exp_memo.py): the values and gradients are those
computed without the memo, bit for bit, and right against closed forms;
the memo is never used once the value may have changed."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad.ops import exp_memo, reductions as R


@pytest.fixture
def exps(monkeypatch):
    """How many times softmax-like code computed ``exp(x - m)`` itself."""
    calls = []
    real = R._shifted_exp

    def counting(a, axis):
        calls.append(axis)
        return real(a, axis)
    monkeypatch.setattr(R, "_shifted_exp", counting)
    return calls


def _loss(X, W, axis, dtype=np.float64):
    x = tg.tensor(X.astype(dtype), requires_grad=True)
    a = tg.logsumexp(x, axis=axis)
    p = tg.softmax(x, axis=axis)
    q = tg.log_softmax(x, axis=axis)
    loss = a.sum() + (W * p).sum() + (W * W * q).sum()
    loss.backward()
    return [t.copy() for t in (p.numpy(), q.numpy(), a.numpy(), loss.numpy(), x.grad.numpy())]


def _without_memo(monkeypatch, *args):
    with monkeypatch.context() as m:
        m.setattr(R, "recall", lambda *a: None)
        return _loss(*args)


def _closed_form(X, W, axis):
    """The loss's value and gradient in plain NumPy."""
    m = X.max(axis=axis, keepdims=True)
    e = np.exp(X - m)
    s = e.sum(axis=axis, keepdims=True)
    p, lse = e / s, np.log(s) + m
    q = X - lse
    V = W * W
    loss = lse.sum() + (W * p).sum() + (V * q).sum()
    # d lse = p; d sum(W p) = p (W - sum(W p)); d sum(V q) = V - p sum(V)
    g = p + p * (W - (W * p).sum(axis=axis, keepdims=True)) + V - p * V.sum(
        axis=axis, keepdims=True)
    return loss, g


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("axis", [1, 0, (0, 1), None])
def test_shared_exponentials_give_the_same_bits(exps, monkeypatch, dtype, axis):
    rng = np.random.default_rng(3)
    X, W = rng.standard_normal((96, 64)) * 3, rng.standard_normal((96, 64))
    shared = _loss(X, W, axis, dtype)
    assert exps == [], "softmax computed the exponentials logsumexp had made"
    plain = _without_memo(monkeypatch, X, W, axis, dtype)
    assert len(exps) == 2  # softmax and log_softmax, each its own
    for u, v in zip(shared, plain):
        assert u.dtype == v.dtype and np.array_equal(u, v)
    loss, g = _closed_form(X, W, axis)
    tol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(shared[3], loss, rtol=tol)
    np.testing.assert_allclose(shared[4], g, rtol=tol, atol=tol)


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 80), cols=st.integers(1, 80), reps=st.integers(1, 3),
       axis=st.sampled_from([0, 1, -1, (0, 1), None]), scale=st.floats(0.1, 50.0),
       seed=st.integers(0, 2 ** 16))
def test_hypothesis_shapes_agree_with_the_closed_form(rows, cols, reps, axis, scale, seed):
    # at least COMPOSITE_LOGSUMEXP_MIN elements: logsumexp records its parts
    n = -(-R.COMPOSITE_LOGSUMEXP_MIN // (rows * cols))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows * n * reps, cols)) * scale
    W = rng.standard_normal(X.shape)
    got = _loss(X, W, axis)
    loss, g = _closed_form(X, W, axis)
    np.testing.assert_allclose(got[3], loss, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got[4], g, rtol=1e-8, atol=1e-8)


def _first(X):
    x = tg.tensor(X, requires_grad=True)
    return x, tg.logsumexp(x, axis=1)


def test_a_write_no_graph_records_is_seen(exps):
    X = np.random.default_rng(0).standard_normal((64, 64))
    x, _ = _first(X)
    x.data[...] = 2 * X   # unrecorded: the memo's exponentials are of X
    p = tg.softmax(x, axis=1)
    e = np.exp(2 * X - (2 * X).max(1, keepdims=True))
    np.testing.assert_allclose(p.numpy(), e / e.sum(1, keepdims=True), rtol=1e-12)
    assert len(exps) == 1


def test_a_recorded_in_place_write_is_seen(exps):
    X = np.random.default_rng(1).standard_normal((64, 64))
    x = tg.tensor(X, requires_grad=True)
    y = x * 1.0
    tg.logsumexp(y, axis=1)
    y += 1.0   # a new record for y
    y *= 2.0
    p = tg.softmax(y, axis=1)
    e = np.exp(2 * (X + 1))
    np.testing.assert_allclose(p.numpy(), e / e.sum(1, keepdims=True), rtol=1e-12)
    assert len(exps) == 1
    (p * X).sum().backward()
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all()


def test_a_new_value_for_the_leaf_is_seen(exps):
    X = np.random.default_rng(2).standard_normal((64, 64))
    x, a = _first(X)
    a.sum().backward()  # frees the graph: the exponentials are let go
    x.data = X[::-1].copy()
    tg.logsumexp(x, axis=1)
    x.data = 3 * X
    p = tg.softmax(x, axis=1)
    e = np.exp(3 * X - (3 * X).max(1, keepdims=True))
    np.testing.assert_allclose(p.numpy(), e / e.sum(1, keepdims=True), rtol=1e-12)


def test_numpy_cannot_write_the_remembered_value():
    X = np.random.default_rng(4).standard_normal((64, 64))
    x, _ = _first(X)
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[0, 0] = 5.0
    y = x * 2.0
    tg.logsumexp(y, axis=1)
    with pytest.raises(ValueError, match="read-only"):
        y.numpy()[0, 0] = 5.0


def test_other_axes_other_tensors_and_no_grad_compute_their_own(exps):
    X = np.random.default_rng(5).standard_normal((64, 80))
    x, _ = _first(X)
    p0 = tg.softmax(x, axis=0)
    e = np.exp(X - X.max(0, keepdims=True))
    np.testing.assert_allclose(p0.numpy(), e / e.sum(0, keepdims=True), rtol=1e-12)
    z = tg.tensor(X, requires_grad=True)
    tg.softmax(z, axis=1)
    with tg.no_grad():
        tg.softmax(x, axis=1)
    assert len(exps) == 3


def test_the_memo_ends_with_the_graph_and_is_per_thread(exps):
    import threading
    X = np.random.default_rng(6).standard_normal((64, 64))
    x, a = _first(X)
    seen = []
    t = threading.Thread(target=lambda: seen.append(tg.softmax(
        tg.tensor(X, requires_grad=True), axis=1).numpy()))
    t.start()
    t.join()
    assert len(exps) == 1
    a.sum().backward(retain_graph=True)  # the graph and its exponentials live on
    tg.softmax(x, axis=1)
    assert len(exps) == 1
    a.sum().backward()
    p = tg.softmax(x, axis=1)
    assert len(exps) == 2
    np.testing.assert_array_equal(p.numpy(), seen[0])


def test_a_trace_replays_softmax_from_its_own_inputs():
    def f(x):
        return tg.logsumexp(x, axis=1).sum() + (tg.softmax(x, axis=1) ** 2).sum()
    rng = np.random.default_rng(7)
    X0, X1 = rng.standard_normal((64, 64)), rng.standard_normal((64, 64)) * 2
    ft = tg.trace(f, X0)
    v, g = ft.value_and_grad(X1)
    x = tg.tensor(X1, requires_grad=True)
    ref = f(x)
    ref.backward()
    np.testing.assert_allclose(v, ref.item(), rtol=1e-12)
    np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_forget_drops_the_memo():
    X = np.random.default_rng(8).standard_normal((64, 64))
    x, _ = _first(X)
    from tapegrad.core.tape import current
    tape = current()
    assert exp_memo.recall(tape, x, (1,)) is not None
    assert exp_memo.recall(tape, x, (0,)) is None
    exp_memo.forget()
    assert exp_memo.recall(tape, x, (1,)) is None
