"""The public API: ``backward`` (seed forms, accumulation, retain_graph, long
graphs), checked against closed-form derivatives or, where a closed form
would only restate the code, a finite difference.
"""

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, leaf


def numgrad(f, x, seed, eps=1e-6):
    """Central finite difference of <seed, f(x)> with respect to ndarray x."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (np.sum(seed * f(hi)) - np.sum(seed * f(lo))) / (2 * eps)
    return g


# -- backward ------------------------------------------------------------------------------
class TestBackward:
    @pytest.mark.parametrize("seed", [
        np.array([1.0, 2.0, 3.0]), [1.0, 2.0, 3.0], (1.0, 2.0, 3.0),
        tg.tensor([1.0, 2.0, 3.0]), np.array([1, 2, 3]), [1, 2, 3],
        np.array([1.0, 2.0, 3.0], dtype=np.float32),
    ], ids=["ndarray", "list", "tuple", "tensor", "int_array", "int_list", "float32"])
    def test_gradient_forms(self, seed):
        x = leaf([1.0, 2.0, 3.0])
        (x * x).backward(seed)
        close(x.grad, 2 * np.array([1.0, 2.0, 3.0]) * np.array([1.0, 2.0, 3.0]))

    @pytest.mark.parametrize("seed", [2.0, 2, np.float64(2.0), tg.tensor(2.0), np.array(2.0)])
    def test_number_seed_for_scalar(self, seed):
        x = leaf([1.0, 2.0])
        (x * x).sum().backward(seed)
        close(x.grad, [4.0, 8.0])

    def test_implicit_seed_for_scalar_and_one_element(self):
        x = leaf([1.0, 2.0])
        (x * x).sum().backward()
        close(x.grad, [2.0, 4.0])
        y = leaf([3.0])
        (y * y).backward()
        close(y.grad, [6.0])

    def test_accumulates_across_calls(self):
        x = leaf([1.0, 2.0])
        (x * x).sum().backward()
        (x * 3.0).sum().backward()
        tg.sin(x).backward([1.0, 1.0])
        close(x.grad, [2.0 + 3.0 + np.cos(1.0), 4.0 + 3.0 + np.cos(2.0)])

    def test_accumulated_grad_object_not_aliased(self):
        x = leaf([1.0, 2.0])
        (x * 1.0).sum().backward()
        g = x.grad
        snapshot = g.numpy().copy()
        h = x.grad
        assert np.array_equal(h.numpy(), snapshot)

    def test_retain_graph(self):
        x = leaf([1.0, 2.0])
        y = (tg.exp(x) * x).sum()
        y.backward(retain_graph=True)
        y.backward(retain_graph=True)
        y.backward()
        close(x.grad, 3 * (np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0]))))

    def test_backward_on_leaf(self):
        x = leaf([1.0, 2.0])
        x.backward([3.0, 4.0])
        close(x.grad, [3.0, 4.0])
        s = leaf(5.0)
        s.backward()
        close(s.grad, 1.0)

    def test_backward_from_intermediate(self):
        x = leaf([1.0, 2.0])
        h = x * x
        y = h * 3.0
        h.backward([1.0, 1.0], retain_graph=True)
        close(x.grad, [2.0, 4.0])
        y.backward([1.0, 1.0])
        close(x.grad, [2.0 + 6.0, 4.0 + 12.0])

    @pytest.mark.parametrize("kind", ["ndarray", "tensor"])
    def test_seed_is_not_aliased(self, kind):
        x = leaf([0.0, 0.0])
        seed = np.array([1.0, 2.0]) if kind == "ndarray" else tg.tensor([1.0, 2.0])
        x.backward(seed)
        x.backward(seed)
        close(seed, [1.0, 2.0])
        close(x.grad, [2.0, 4.0])

    def test_seed_is_not_aliased_through_an_op(self):
        x = leaf(np.zeros(20))
        seed = np.ones(20)
        (x * 1.0).backward(seed)
        (x * 1.0).backward(seed)
        close(seed, np.ones(20))
        close(x.grad, np.full(20, 2.0))

    def test_grads_independent_of_later_backwards(self):
        x = leaf(np.arange(20.0))
        (x * 2.0).sum().backward()
        g = x.grad
        y = leaf(np.ones(50))
        (y * 7.0).sum().backward()
        a, b = leaf(np.ones(20)), leaf(np.ones(20))
        (a * 2.0 + b * 3.0).sum().backward()
        close(g, np.full(20, 2.0))
        close(x.grad, np.full(20, 2.0))
        close(a.grad, np.full(20, 2.0))
        close(b.grad, np.full(20, 3.0))

    def test_earlier_graph_survives_many_dropped_graphs(self):
        xv = np.linspace(0.1, 1.0, 20)
        x, w = leaf(xv), leaf([0.5, 1.5])
        g0 = (tg.sin(x) * w[0]).sum()       # built before the loop, used after it
        node = g0.grad_fn
        kept = tg.exp(w)
        y = None
        for _ in range(6000):               # graphs dropped as soon as the next is built
            y = (x * 2.0 + w[1]).sum()
        g0.backward()
        close(x.grad, np.cos(xv) * 0.5)
        close(w.grad, [np.sin(xv).sum(), 0.0])
        assert node == g0.grad_fn and node.name() == "SumBackward"
        (kept * y).sum().backward()
        yv = (xv * 2.0 + 1.5).sum()
        close(w.grad, [np.sin(xv).sum() + np.exp(0.5) * yv,
                       np.exp(1.5) * yv + 20 * (np.exp(0.5) + np.exp(1.5))], rtol=1e-11)
        close(x.grad, np.cos(xv) * 0.5 + 2 * (np.exp(0.5) + np.exp(1.5)), rtol=1e-11)

    def test_long_recurrence(self):
        W = leaf(0.9)
        h = tg.tensor(np.full(3, 0.5))
        for _ in range(3000):
            h = tg.tanh(W * h + 0.1)
        h.sum().backward()

        def f(wv):
            hv = np.full(3, 0.5)
            for _ in range(3000):
                hv = np.tanh(wv * hv + 0.1)
            return hv.sum()

        close(W.grad, (f(0.9 + 1e-6) - f(0.9 - 1e-6)) / 2e-6, rtol=1e-6)

    def test_only_reached_leaves_updated(self):
        a, b = leaf([1.0]), leaf([2.0])
        ya = a * 2.0
        yb = b * 3.0  # noqa: F841  (a live graph not reached from ya)
        ya.backward([1.0])
        close(a.grad, [2.0])
        assert b.grad is None

    def test_leaf_used_in_two_graphs(self):
        w = leaf([1.0, 2.0])
        y1 = (w * w).sum()
        y2 = (w * 5.0).sum()
        y2.backward()
        close(w.grad, [5.0, 5.0])
        y1.backward()
        close(w.grad, [7.0, 9.0])

    def test_long_chain(self):
        x = leaf([0.5, 1.0])
        y = x
        for _ in range(3000):
            y = y * 1.0001 + 0.0
        y.backward([1.0, 1.0])
        close(x.grad, np.full(2, 1.0001 ** 3000), rtol=1e-9)

    def test_large_and_small_values_mixed(self):
        rng = np.random.default_rng(1)
        xv = rng.uniform(0.5, 1.5, (5, 8))    # large (40 elements)
        wv = rng.uniform(-1, 1, 8)            # small
        x, w = leaf(xv), leaf(wv)
        y = (tg.log(x) * w + tg.tanh(x * w)).sum(axis=1)
        seed = rng.standard_normal(5)
        y.backward(seed)
        f_x = lambda xx: (np.log(xx) * wv + np.tanh(xx * wv)).sum(axis=1)  # noqa: E731
        f_w = lambda ww: (np.log(xv) * ww + np.tanh(xv * ww)).sum(axis=1)  # noqa: E731
        close(x.grad, numgrad(f_x, xv, seed), rtol=1e-6, atol=1e-8)
        close(w.grad, numgrad(f_w, wv, seed), rtol=1e-6, atol=1e-8)

    def test_mlp_matches_finite_differences(self):
        rng = np.random.default_rng(2)
        X = rng.standard_normal((6, 4))
        W1v, b1v, W2v = rng.standard_normal((4, 5)), rng.standard_normal(5), rng.standard_normal(5)

        def f(W1_, b1_, W2_, lib):
            h = lib.tanh(X @ W1_ + b1_)
            return lib.logsumexp(h * W2_, axis=1) if lib is tg else \
                np.log(np.exp(h * W2_).sum(axis=1))

        W1, b1, W2 = leaf(W1v), leaf(b1v), leaf(W2v)
        y = f(W1, b1, W2, tg).mean()
        y.backward()
        close(W1.grad, numgrad(lambda w: f(w, b1v, W2v, np).mean(), W1v, 1.0), rtol=1e-6, atol=1e-8)
        close(b1.grad, numgrad(lambda b: f(W1v, b, W2v, np).mean(), b1v, 1.0), rtol=1e-6, atol=1e-8)
        close(W2.grad, numgrad(lambda w: f(W1v, b1v, w, np).mean(), W2v, 1.0), rtol=1e-6, atol=1e-8)
