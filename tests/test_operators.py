"""The public API: operators with numbers and ndarrays on either side
(broadcasting, gradients reduced to each operand's shape) and comparisons,
checked against closed-form derivatives written out by hand.
"""

import numpy as np
import pytest

import tapegrad as tg

from api_helpers import SEED
from oracle import close, leaf


# -- operators -----------------------------------------------------------------------------
A_VAL = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
B_VAL = np.array([0.8, 1.25, 2.5])


class TestOperators:
    @pytest.mark.parametrize("op, da, db", [
        (lambda a, b: a + b, lambda a, b: np.ones_like(a), lambda a, b: np.ones_like(b)),
        (lambda a, b: a - b, lambda a, b: np.ones_like(a), lambda a, b: -np.ones_like(b)),
        (lambda a, b: a * b, lambda a, b: b + 0 * a, lambda a, b: a + 0 * b),
        (lambda a, b: a / b, lambda a, b: 1 / b + 0 * a, lambda a, b: -a / b ** 2),
    ], ids=["add", "sub", "mul", "div"])
    def test_tensor_tensor_broadcast(self, op, da, db):
        a, b = leaf(A_VAL), leaf(B_VAL)
        y = op(a, b)
        assert y.shape == (2, 3)
        close(y, op(A_VAL, B_VAL))
        y.backward(SEED)
        assert a.grad.shape == (2, 3) and b.grad.shape == (3,)
        close(a.grad, SEED * da(A_VAL, B_VAL))
        close(b.grad, (SEED * db(A_VAL, B_VAL)).sum(axis=0))

    def test_pow_tensor_tensor(self):
        base = np.array([[0.5, 1.5, 2.0], [1.2, 0.7, 3.0]])
        a, b = leaf(base), leaf(B_VAL)
        y = a ** b
        close(y, base ** B_VAL)
        y.backward(SEED)
        close(a.grad, SEED * B_VAL * base ** (B_VAL - 1))
        close(b.grad, (SEED * base ** B_VAL * np.log(base)).sum(axis=0))

    @pytest.mark.parametrize("expr, value, deriv", [
        (lambda x: x + 2.0, lambda v: v + 2, lambda v: 1 + 0 * v),
        (lambda x: 2.0 + x, lambda v: v + 2, lambda v: 1 + 0 * v),
        (lambda x: x - 2.0, lambda v: v - 2, lambda v: 1 + 0 * v),
        (lambda x: 2.0 - x, lambda v: 2 - v, lambda v: -1 + 0 * v),
        (lambda x: x * 3, lambda v: 3 * v, lambda v: 3 + 0 * v),
        (lambda x: 3 * x, lambda v: 3 * v, lambda v: 3 + 0 * v),
        (lambda x: x / 4.0, lambda v: v / 4, lambda v: 0.25 + 0 * v),
        (lambda x: 4.0 / x, lambda v: 4 / v, lambda v: -4 / v ** 2),
        (lambda x: x ** 3, lambda v: v ** 3, lambda v: 3 * v ** 2),
        (lambda x: x ** 0.5, lambda v: v ** 0.5, lambda v: 0.5 / np.sqrt(v)),
        (lambda x: x ** -1, lambda v: 1 / v, lambda v: -1 / v ** 2),
        (lambda x: 2.0 ** x, lambda v: 2 ** v, lambda v: np.log(2) * 2 ** v),
        (lambda x: -x, lambda v: -v, lambda v: -1 + 0 * v),
        (lambda x: +x, lambda v: v, lambda v: 1 + 0 * v),
        (lambda x: np.float64(3.0) * x, lambda v: 3 * v, lambda v: 3 + 0 * v),
        (lambda x: x * np.int64(3), lambda v: 3 * v, lambda v: 3 + 0 * v),
        (lambda x: (x * 2.0 + 1.0) / 3.0 - 0.5, lambda v: (2 * v + 1) / 3 - 0.5,
         lambda v: 2 / 3 + 0 * v),
    ], ids=["add", "radd", "sub", "rsub", "mul", "rmul", "div", "rdiv", "pow3", "pow_half",
            "pow_neg", "rpow", "neg", "pos", "np_scalar_left", "np_int_right", "chain"])
    def test_with_python_numbers(self, expr, value, deriv):
        v = np.array([0.5, 1.5, 2.5, 4.0])
        x = leaf(v)
        y = expr(x)
        assert isinstance(y, tg.Tensor) and y.requires_grad
        close(y, value(v))
        seed = np.array([1.0, -1.0, 0.5, 2.0])
        y.backward(seed)
        close(x.grad, seed * deriv(v))

    @pytest.mark.parametrize("expr, da", [
        (lambda x, c: x + c, lambda x, c: np.ones_like(x)),
        (lambda x, c: c + x, lambda x, c: np.ones_like(x)),
        (lambda x, c: x - c, lambda x, c: np.ones_like(x)),
        (lambda x, c: c - x, lambda x, c: -np.ones_like(x)),
        (lambda x, c: x * c, lambda x, c: c + 0 * x),
        (lambda x, c: c * x, lambda x, c: c + 0 * x),
        (lambda x, c: x / c, lambda x, c: 1 / c + 0 * x),
        (lambda x, c: c / x, lambda x, c: -c / x ** 2),
        (lambda x, c: x ** c, lambda x, c: c * x ** (c - 1)),
        (lambda x, c: c ** x, lambda x, c: np.log(c) * c ** x),
    ], ids=["add", "radd", "sub", "rsub", "mul", "rmul", "div", "rdiv", "pow", "rpow"])
    def test_with_ndarrays_on_either_side(self, expr, da):
        xv = np.array([0.5, 1.5, 2.5])
        cv = np.array([[1.5, 2.0, 0.5], [3.0, 1.25, 2.0]])  # broadcasts x to (2, 3)
        x = leaf(xv)
        y = expr(x, cv)
        assert isinstance(y, tg.Tensor), type(y)
        assert y.shape == (2, 3)
        close(y, expr(xv, cv))
        y.backward(SEED)
        assert x.grad.shape == (3,)
        close(x.grad, (SEED * da(xv, cv)).sum(axis=0))

    def test_gradient_reduced_over_size_one_axes(self):
        a = leaf([[1.0], [2.0]])          # (2, 1)
        b = leaf([[1.0, 2.0, 3.0]])        # (1, 3)
        c = leaf(4.0)                      # ()
        y = a * b + c
        assert y.shape == (2, 3)
        y.backward(SEED)
        assert a.grad.shape == (2, 1) and b.grad.shape == (1, 3) and c.grad.shape == ()
        close(a.grad, (SEED * np.array([[1.0, 2.0, 3.0]])).sum(axis=1, keepdims=True))
        close(b.grad, (SEED * np.array([[1.0], [2.0]])).sum(axis=0, keepdims=True))
        close(c.grad, SEED.sum())

    def test_matmul_operator(self):
        av = np.arange(1.0, 7.0).reshape(2, 3)
        bv = np.arange(1.0, 13.0).reshape(3, 4) / 10
        a, b = leaf(av), leaf(bv)
        y = a @ b
        close(y, av @ bv)
        g = np.arange(8.0).reshape(2, 4) - 3
        y.backward(g)
        close(a.grad, g @ bv.T)
        close(b.grad, av.T @ g)

    def test_matmul_with_ndarray_either_side(self):
        X = np.arange(1.0, 7.0).reshape(2, 3)
        v = leaf([0.5, -1.0, 2.0])
        y = X @ v
        assert isinstance(y, tg.Tensor) and y.shape == (2,)
        close(y, X @ np.array([0.5, -1.0, 2.0]))
        y.backward([1.0, 2.0])
        close(v.grad, X.T @ np.array([1.0, 2.0]))
        w = leaf([1.0, -1.0])
        z = w @ X
        close(z, np.array([1.0, -1.0]) @ X)
        z.backward([1.0, 1.0, 1.0])
        close(w.grad, X @ np.ones(3))

    def test_batched_matmul_broadcast(self):
        rng = np.random.default_rng(0)
        av, bv = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
        a, b = leaf(av), leaf(bv)
        g = rng.standard_normal((2, 3, 5))
        (a @ b).backward(g)
        close(a.grad, g @ bv.T, rtol=1e-10)
        close(b.grad, np.einsum("bij,bik->jk", av, g), rtol=1e-10)

    def test_same_tensor_twice(self):
        x = leaf([1.0, 2.0, 3.0])
        (x * x + x).sum().backward()
        close(x.grad, 2 * np.array([1.0, 2.0, 3.0]) + 1)

    def test_diamond(self):
        x = leaf([0.5, 1.0])
        h = tg.exp(x)
        y = (h * tg.sin(h) + h).sum()
        y.backward()
        e = np.exp([0.5, 1.0])
        close(x.grad, (np.sin(e) + e * np.cos(e) + 1) * e)


class TestComparisons:
    @pytest.mark.parametrize("op, ref", [
        (lambda a, b: a > b, np.greater), (lambda a, b: a >= b, np.greater_equal),
        (lambda a, b: a < b, np.less), (lambda a, b: a <= b, np.less_equal),
        (lambda a, b: a == b, np.equal), (lambda a, b: a != b, np.not_equal),
    ], ids=["gt", "ge", "lt", "le", "eq", "ne"])
    def test_boolean_without_gradient(self, op, ref):
        xv = np.array([-1.0, 0.0, 2.0])
        x = leaf(xv)
        for other in (0.0, np.array([0.0, 0.0, 3.0]), leaf([-2.0, 0.0, 2.0])):
            r = op(x, other)
            assert isinstance(r, tg.Tensor)
            assert r.dtype == np.bool_
            assert not r.requires_grad and r.is_leaf and r.grad_fn is None
            ov = other.numpy() if isinstance(other, tg.Tensor) else other
            assert np.array_equal(r.numpy(), ref(xv, ov))

    def test_where_with_comparison(self):
        x = leaf([-1.0, 2.0, -3.0, 4.0])
        a = leaf([10.0, 20.0, 30.0, 40.0])
        y = tg.where(x > 0, a * x, -x)
        close(y, [1.0, 40.0, 3.0, 160.0])
        y.backward([1.0, 1.0, 1.0, 1.0])
        close(x.grad, [-1.0, 20.0, -1.0, 40.0])
        close(a.grad, [0.0, 2.0, 0.0, 4.0])

    def test_bool_of_one_element(self):
        x = leaf([2.0])
        assert bool(x > 0) is True
        assert bool(x < 0) is False
        assert bool(tg.tensor(1.0) > 0.5)
        if x > 1.0:
            pass
        else:
            pytest.fail("one-element comparison in `if` was False")
