"""The public API: reductions (sum, mean, prod, max, min, logsumexp) as
functions and methods, checked against closed-form derivatives written out
by hand.
"""

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, leaf


# -- reductions ----------------------------------------------------------------------------
M_VAL = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])


class TestReductions:
    def test_sum_all(self):
        x = leaf(M_VAL)
        y = tg.sum(x)
        assert y.shape == ()
        close(y, M_VAL.sum())
        y.backward()
        close(x.grad, np.ones((2, 3)))

    @pytest.mark.parametrize("axis", [0, 1, -1, (0, 1), None])
    @pytest.mark.parametrize("keepdims", [False, True])
    def test_sum_axis_method(self, axis, keepdims):
        x = leaf(M_VAL)
        y = x.sum(axis=axis, keepdims=keepdims)
        ref = M_VAL.sum(axis=axis, keepdims=keepdims)
        assert y.shape == ref.shape
        close(y, ref)
        seed = np.arange(1.0, ref.size + 1).reshape(ref.shape)
        y.backward(seed)
        kshape = M_VAL.sum(axis=axis, keepdims=True).shape
        close(x.grad, np.broadcast_to(seed.reshape(kshape), (2, 3)))

    @pytest.mark.parametrize("axis", [0, 1, None])
    def test_mean(self, axis):
        x = leaf(M_VAL)
        y = tg.mean(x, axis=axis)
        close(y, M_VAL.mean(axis=axis))
        n = M_VAL.size if axis is None else M_VAL.shape[axis]
        seed = np.ones(np.shape(M_VAL.mean(axis=axis)))
        y.backward(seed)
        close(x.grad, np.full((2, 3), 1.0 / n))
        x.grad = None
        x.mean(axis=axis, keepdims=True).backward(np.ones(np.shape(
            M_VAL.mean(axis=axis, keepdims=True))) * 2.0)
        close(x.grad, np.full((2, 3), 2.0 / n))

    def test_prod(self):
        v = np.array([[2.0, 3.0, 0.5], [1.5, -2.0, 4.0]])
        x = leaf(v)
        y = tg.prod(x, axis=1)
        close(y, v.prod(axis=1))
        y.backward([1.0, 2.0])
        close(x.grad, np.array([[1.0], [2.0]]) * v.prod(axis=1, keepdims=True) / v)

    def test_prod_with_zero_is_exact(self):
        x = leaf([2.0, 0.0, 3.0])
        x.prod().backward()
        close(x.grad, [0.0, 6.0, 0.0])
        y = leaf([0.0, 0.0, 3.0])
        y.prod().backward()
        close(y.grad, [0.0, 0.0, 0.0])

    @pytest.mark.parametrize("fname, pick", [("max", np.argmax), ("min", np.argmin)])
    def test_max_min(self, fname, pick):
        v = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
        x = leaf(v)
        y = getattr(tg, fname)(x, axis=1)
        close(y, getattr(np, fname)(v, axis=1))
        y.backward([1.0, 3.0])
        expected = np.zeros((2, 3))
        expected[0, pick(v[0])] = 1.0
        expected[1, pick(v[1])] = 3.0
        close(x.grad, expected)
        x.grad = None
        getattr(x, fname)().backward()
        expected = np.zeros(6)
        expected[pick(v)] = 1.0
        close(x.grad, expected.reshape(2, 3))

    def test_max_ties_share_gradient(self):
        x = leaf([1.0, 3.0, 3.0, 2.0])
        x.max().backward()
        close(x.grad, [0.0, 0.5, 0.5, 0.0])

    @pytest.mark.parametrize("axis", [None, 0, 1, -1])
    def test_logsumexp_gradient_is_softmax(self, axis):
        v = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
        x = leaf(v)
        y = tg.logsumexp(x, axis=axis)
        ref = np.log(np.sum(np.exp(v), axis=axis))
        close(y, ref, rtol=1e-12)
        y.backward(np.ones(np.shape(ref)))
        e = np.exp(v - np.max(v, axis=axis, keepdims=True))
        close(x.grad, e / e.sum(axis=axis, keepdims=True), rtol=1e-12)

    def test_logsumexp_is_stable(self):
        x = leaf([1000.0, 1000.0])
        y = tg.logsumexp(x)
        close(y, 1000.0 + np.log(2.0))
        y.backward()
        close(x.grad, [0.5, 0.5])

    def test_reduction_methods(self):
        x = leaf(M_VAL)
        y = x.sum() + x.mean() + x.prod() + x.max() + x.min()
        close(y, M_VAL.sum() + M_VAL.mean() + M_VAL.prod() + M_VAL.max() + M_VAL.min())
        y.backward()
        g = 1.0 + 1.0 / 6 + M_VAL.prod() / M_VAL
        g[0, 2] += 1.0   # max
        g[0, 1] += 1.0   # min
        close(x.grad, g, rtol=1e-11)


# -- logsumexp of large inputs: recorded as its parts ------------------------------
from tapegrad.ops import reductions as _R  # noqa: E402


def _lse_both(X, axis, keepdims, seed_shape_rng):
    """logsumexp through its parts (X is large) and through the one record."""
    outs = []
    for limit in (_R.COMPOSITE_LOGSUMEXP_MIN, 10**12):
        old = _R.COMPOSITE_LOGSUMEXP_MIN
        _R.COMPOSITE_LOGSUMEXP_MIN = limit
        try:
            x = tg.tensor(X, requires_grad=True)
            y = tg.logsumexp(x, axis=axis, keepdims=keepdims)
        finally:
            _R.COMPOSITE_LOGSUMEXP_MIN = old
        outs.append((x, y))
    g = seed_shape_rng.standard_normal(outs[0][1].shape)
    for x, y in outs:
        (y * g).sum().backward()
    return outs, g


@pytest.mark.parametrize("shape,axis,keepdims", [
    ((80, 60), 1, False), ((80, 60), 0, True), ((80, 60), None, False),
    ((16, 20, 15), (0, 2), False), ((16, 20, 15), -1, True), ((5000,), 0, False)])
def test_large_logsumexp_matches_the_one_record_form(shape, axis, keepdims):
    rng = np.random.default_rng(3)
    X = rng.standard_normal(shape) * 3.0
    ((xa, ya), (xb, yb)), seed = _lse_both(X, axis, keepdims, rng)
    assert ya.grad_fn is not None and "Logsumexp" not in type(ya.grad_fn).__name__
    np.testing.assert_array_equal(ya.numpy(), yb.numpy())
    assert ya.shape == yb.shape
    np.testing.assert_allclose(xa.grad.numpy(), xb.grad.numpy(), rtol=1e-13, atol=1e-16)
    # the softmax of each group, weighted by the seed: against NumPy directly
    ax = tuple(range(X.ndim)) if axis is None else axis
    p = np.exp(X - np.max(X, axis=ax, keepdims=True))
    p /= p.sum(axis=ax, keepdims=True)
    seed = np.reshape(seed, np.shape(np.sum(X, axis=ax, keepdims=True)))
    np.testing.assert_allclose(xa.grad.numpy(), seed * p, rtol=1e-12, atol=1e-15)


def test_large_logsumexp_with_infinite_rows_matches_the_one_record_form():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((100, 50))
    X[3] = -np.inf          # an all -inf row: -inf, a NaN gradient
    X[7, 5] = np.inf        # +inf: inf, a NaN gradient
    X[9, :10] = -np.inf     # some -inf: their gradient is 0
    with np.errstate(all="ignore"):
        ((xa, ya), (xb, yb)), _ = _lse_both(X, 1, False, rng)
    np.testing.assert_array_equal(ya.numpy(), yb.numpy())
    np.testing.assert_array_equal(np.isnan(xa.grad.numpy()), np.isnan(xb.grad.numpy()))
    ok = ~np.isnan(xb.grad.numpy())
    np.testing.assert_allclose(xa.grad.numpy()[ok], xb.grad.numpy()[ok], rtol=1e-13,
                               atol=1e-16)
    assert np.all(xa.grad.numpy()[9, :10] == 0.0)


def test_large_logsumexp_second_order_trace_and_no_grad():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((64, 70))
    v = rng.standard_normal(X.shape)
    f = lambda x: (tg.logsumexp(x, axis=1) ** 2).sum()  # noqa: E731
    h = 1e-5
    fd = (np.asarray(tg.grad(f)(X + h * v)) - np.asarray(tg.grad(f)(X - h * v))) / (2 * h)
    (hv,) = tg.hvp(f, (X,), (v,))[1]     # (value, (hvp,)) per argument
    np.testing.assert_allclose(np.asarray(hv), fd, rtol=1e-6, atol=1e-8)
    traced = tg.trace(f, X)
    import tapegrad.transforms.functional as ft
    X2 = X + 0.25
    np.testing.assert_allclose(ft.grad(traced)(X2), tg.grad(f)(X2), rtol=1e-13, atol=1e-15)
    with tg.no_grad():
        y = tg.logsumexp(tg.tensor(X, requires_grad=True), axis=1)
    assert y.grad_fn is None
