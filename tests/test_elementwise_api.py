"""The public API: the documented unary functions and methods and the binary
functions (maximum, minimum, where, clip), checked against closed-form
derivatives written out by hand.
"""

import numpy as np
import pytest

import tapegrad as tg

from api_helpers import SEED
from oracle import close, leaf


# -- elementwise functions -----------------------------------------------------------------
UNARY = {
    "exp": (np.exp, lambda v: np.exp(v)),
    "log": (np.log, lambda v: 1 / v),
    "log1p": (np.log1p, lambda v: 1 / (1 + v)),
    "expm1": (np.expm1, lambda v: np.exp(v)),
    "sqrt": (np.sqrt, lambda v: 0.5 / np.sqrt(v)),
    "square": (np.square, lambda v: 2 * v),
    "sin": (np.sin, np.cos),
    "cos": (np.cos, lambda v: -np.sin(v)),
    "tan": (np.tan, lambda v: 1 / np.cos(v) ** 2),
    "tanh": (np.tanh, lambda v: 1 - np.tanh(v) ** 2),
    "sinh": (np.sinh, np.cosh),
    "cosh": (np.cosh, np.sinh),
    "arcsin": (np.arcsin, lambda v: 1 / np.sqrt(1 - v ** 2)),
    "arccos": (np.arccos, lambda v: -1 / np.sqrt(1 - v ** 2)),
    "arctan": (np.arctan, lambda v: 1 / (1 + v ** 2)),
    "abs": (np.abs, np.sign),
}
UNARY_METHODS = ["exp", "log", "sqrt", "sin", "cos", "tanh", "abs"]
POSITIVE = {"log", "log1p", "sqrt"}


def _unary_input(name):
    if name in POSITIVE:
        return np.array([[0.3, 0.9, 1.7], [2.5, 0.05, 4.0]])
    return np.array([[0.3, -0.9, 0.7], [-0.25, 0.05, -0.6]])


class TestUnary:
    @pytest.mark.parametrize("name", sorted(UNARY))
    def test_function(self, name):
        ref, deriv = UNARY[name]
        v = _unary_input(name)
        x = leaf(v)
        y = getattr(tg, name)(x)
        assert isinstance(y, tg.Tensor) and y.requires_grad and not y.is_leaf
        close(y, ref(v))
        y.backward(SEED)
        close(x.grad, SEED * deriv(v), rtol=1e-11)

    @pytest.mark.parametrize("name", UNARY_METHODS)
    def test_method(self, name):
        ref, deriv = UNARY[name]
        v = _unary_input(name)
        x = leaf(v)
        y = getattr(x, name)()
        close(y, ref(v))
        y.backward(SEED)
        close(x.grad, SEED * deriv(v), rtol=1e-11)

    def test_on_plain_tensor_gives_plain_tensor(self):
        y = tg.exp(tg.tensor([0.0, 1.0]))
        assert isinstance(y, tg.Tensor) and not y.requires_grad
        close(y, [1.0, np.e])

    def test_builtin_abs(self):
        x = leaf([-2.0, 3.0])
        y = abs(x)
        close(y, [2.0, 3.0])
        y.backward([1.0, 1.0])
        close(x.grad, [-1.0, 1.0])


class TestBinaryFunctions:
    def test_maximum_minimum(self):
        av, bv = np.array([1.0, 5.0, -2.0, 0.5]), np.array([3.0, 2.0, -1.0, -4.0])
        a, b = leaf(av), leaf(bv)
        y = tg.maximum(a, b) * 2.0 + tg.minimum(a, b) * 3.0
        close(y, 2 * np.maximum(av, bv) + 3 * np.minimum(av, bv))
        y.backward(np.ones(4))
        close(a.grad, np.where(av > bv, 2.0, 3.0))
        close(b.grad, np.where(bv > av, 2.0, 3.0))

    def test_maximum_with_number(self):
        x = leaf([-1.0, 2.0, -0.5, 3.0])
        y = tg.maximum(x, 0.0)
        close(y, [0.0, 2.0, 0.0, 3.0])
        y.backward(np.ones(4))
        close(x.grad, [0.0, 1.0, 0.0, 1.0])

    def test_where_broadcast_and_scalars(self):
        cond = np.array([[True, False, True], [False, False, True]])
        a = leaf([1.0, 2.0, 3.0])          # broadcast over rows
        b = leaf([[10.0], [20.0]])          # broadcast over columns
        y = tg.where(cond, a, b)
        close(y, np.where(cond, [1.0, 2.0, 3.0], [[10.0], [20.0]]))
        y.backward(SEED)
        close(a.grad, (SEED * cond).sum(axis=0))
        close(b.grad, (SEED * ~cond).sum(axis=1, keepdims=True))

    def test_where_with_plain_operand(self):
        x = leaf([1.0, -2.0, 3.0])
        y = tg.where(np.array([True, False, True]), x, 0.0)
        close(y, [1.0, 0.0, 3.0])
        y.backward(np.ones(3))
        close(x.grad, [1.0, 0.0, 1.0])

    def test_clip(self):
        v = np.array([-2.0, -0.5, 0.25, 0.9, 3.0])
        x = leaf(v)
        y = tg.clip(x, -1.0, 1.0)
        close(y, np.clip(v, -1.0, 1.0))
        y.backward(np.arange(1.0, 6.0))
        close(x.grad, [0.0, 2.0, 3.0, 4.0, 0.0])

    def test_clip_method_and_one_sided(self):
        x = leaf([-2.0, 0.5, 3.0])
        y = x.clip(0.0, None) + x.clip(None, 1.0)
        close(y, [0.0 - 2.0, 1.0, 3.0 + 1.0])
        y.backward(np.ones(3))
        close(x.grad, [1.0, 2.0, 1.0])

    def test_clip_tensor_bounds_receive_gradient(self):
        x = leaf([-2.0, 0.5, 3.0])
        lo = leaf([-1.0, -1.0, -1.0])
        hi = leaf(1.0)
        y = tg.clip(x, lo, hi)
        close(y, [-1.0, 0.5, 1.0])
        y.backward([1.0, 2.0, 3.0])
        close(x.grad, [0.0, 2.0, 0.0])
        close(lo.grad, [1.0, 0.0, 0.0])
        close(hi.grad, 3.0)
