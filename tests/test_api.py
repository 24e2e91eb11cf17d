"""The public API, checked against closed-form derivatives.

Covers tensor creation, Tensor properties and conversions, repr, operators
with numbers and ndarrays on either side (broadcasting, gradients reduced to
each operand's shape), comparisons, every documented function and method,
indexing, ``grad_fn`` / ``next_functions``, ``no_grad`` and ``backward``.
Every expected gradient here is written out by hand (or from a finite
difference where a closed form would only restate the code).
"""

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, in_fresh_thread, leaf


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


# -- creation ------------------------------------------------------------------------------
class TestCreation:
    def test_python_float_is_float64_zero_dim(self):
        t = tg.tensor(1.5)
        assert t.dtype == np.float64
        assert t.shape == () and t.ndim == 0 and t.size == 1
        assert t.item() == 1.5

    def test_list_of_floats_is_float64(self):
        t = tg.tensor([1.0, 2.0, 3.0])
        assert t.dtype == np.float64
        assert t.shape == (3,)

    def test_nested_list_shape(self):
        t = tg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        assert t.shape == (2, 3) and t.ndim == 2 and t.size == 6
        assert np.array_equal(t.numpy(), [[1, 2, 3], [4, 5, 6]])

    def test_float32_array_stays_float32(self):
        t = tg.tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
        assert t.dtype == np.float32

    def test_integer_data_stays_integer(self):
        assert tg.tensor([1, 2, 3]).dtype == np.array([1, 2, 3]).dtype
        assert tg.tensor(np.array([1, 2], dtype=np.int32)).dtype == np.int32
        assert tg.tensor(7).dtype.kind == "i"

    def test_dtype_argument(self):
        t = tg.tensor([1, 2], dtype=np.float32)
        assert t.dtype == np.float32
        assert np.array_equal(t.numpy(), [1.0, 2.0])
        assert tg.tensor([1, 2], dtype=np.float64, requires_grad=True).requires_grad

    def test_copies_ndarray(self):
        a = np.array([1.0, 2.0, 3.0])
        t = tg.tensor(a)
        a[0] = 100.0
        assert t.numpy()[0] == 1.0
        assert not np.shares_memory(t.numpy(), a)

    def test_copies_tensor(self):
        a = tg.tensor([1.0, 2.0, 3.0])
        b = tg.tensor(a)
        a.numpy()[0] = 100.0
        assert b.numpy()[0] == 1.0
        assert b is not a

    def test_copies_list_data(self):
        data = [1.0, 2.0]
        t = tg.tensor(data)
        data[0] = 9.0
        assert t.numpy()[0] == 1.0

    def test_requires_grad_flag(self):
        assert not tg.tensor([1.0]).requires_grad
        t = tg.tensor([1.0], requires_grad=True)
        assert t.requires_grad and t.is_leaf and t.grad is None and t.grad_fn is None

    def test_float_leaf_from_int_dtype_arg_can_require_grad(self):
        t = tg.tensor([1, 2, 3], dtype=np.float64, requires_grad=True)
        (t * t).sum().backward()
        close(t.grad, [2.0, 4.0, 6.0])


# -- properties and conversions ------------------------------------------------------------
class TestProperties:
    def test_shape_ndim_size_dtype_len(self):
        t = tg.tensor(np.zeros((2, 3, 4)))
        assert t.shape == (2, 3, 4)
        assert t.ndim == 3
        assert t.size == 24
        assert t.dtype == np.float64
        assert len(t) == 2

    def test_T_value_and_gradient(self):
        a = leaf(np.arange(6.0).reshape(2, 3))
        assert a.T.shape == (3, 2)
        close(a.T, np.arange(6.0).reshape(2, 3).T)
        seed = np.arange(1.0, 7.0).reshape(3, 2)
        a.T.backward(seed)
        close(a.grad, seed.T)

    def test_numpy_returns_ndarray_of_value(self):
        t = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
        a = t.numpy()
        assert isinstance(a, np.ndarray)
        assert np.array_equal(a, [[1.0, 2.0], [3.0, 4.0]])

    def test_np_asarray(self):
        t = tg.tensor([1.0, 2.0, 3.0])
        a = np.asarray(t)
        assert type(a) is np.ndarray
        assert np.array_equal(a, [1.0, 2.0, 3.0])
        u = leaf([1.0, 2.0, 3.0])
        b = np.asarray((u * 2.0).detach())
        assert type(b) is np.ndarray and np.array_equal(b, [2.0, 4.0, 6.0])
        with tg.no_grad():
            assert np.array_equal(np.asarray(u * 2.0), [2.0, 4.0, 6.0])

    def test_np_asarray_of_a_tensor_that_requires_grad_raises(self):
        # the array would carry no gradient: refuse rather than lose it silently
        u = leaf([1.0, 2.0])
        y = u * 3.0
        for t in (u, y):
            with pytest.raises(RuntimeError, match=r"would drop its gradient.*t.detach\(\)"):
                np.asarray(t)
        out = np.zeros((2, 2))
        with pytest.raises(RuntimeError, match="requires grad"):
            out[0] = y
        y.sum().backward()                    # the graph is intact
        assert np.array_equal(u.grad.numpy(), [3.0, 3.0])

    def test_item_and_float(self):
        assert tg.tensor(2.5).item() == 2.5
        assert tg.tensor([[2.5]]).item() == 2.5
        assert isinstance(tg.tensor([2.5]).item(), float)
        x = leaf([3.0])
        assert float(x) == 3.0
        assert float(x * 2.0) == 6.0
        assert float(tg.tensor(4.0)) == 4.0

    def test_detach(self):
        x = leaf([1.0, 2.0])
        y = x * 3.0
        d = y.detach()
        assert d.is_leaf and not d.requires_grad and d.grad_fn is None
        assert np.array_equal(d.numpy(), [3.0, 6.0])
        dx = x.detach()
        assert not dx.requires_grad
        assert np.shares_memory(dx.numpy(), x.numpy())
        # a detached tensor cuts the graph: only x's direct use is differentiated
        (x * d).sum().backward()
        close(x.grad, [3.0, 6.0])

    def test_requires_grad_(self):
        t = tg.tensor([1.0, 2.0])
        assert t.requires_grad_() is t
        assert t.requires_grad
        (t * t).sum().backward()
        close(t.grad, [2.0, 4.0])
        t.requires_grad_(False)
        assert not t.requires_grad
        assert not (t * t).requires_grad

    def test_requires_grad_setter(self):
        t = tg.tensor([1.0])
        t.requires_grad = True
        assert t.requires_grad

    def test_requires_grad_on_non_leaf_raises(self):
        y = leaf([1.0]) * 2.0
        with pytest.raises(RuntimeError, match="leaf"):
            y.requires_grad_(False)

    def test_grad_reset_with_none(self):
        x = leaf([1.0, 2.0])
        (x * x).sum().backward()
        close(x.grad, [2.0, 4.0])
        x.grad = None
        assert x.grad is None
        (x * 3.0).sum().backward()
        close(x.grad, [3.0, 3.0])

    def test_grad_is_a_plain_tensor(self):
        x = leaf([1.0, 2.0])
        (x * x).sum().backward()
        assert isinstance(x.grad, tg.Tensor)
        assert not x.grad.requires_grad and x.grad.grad_fn is None
        assert x.grad.shape == x.shape

    def test_is_leaf(self):
        x = leaf([1.0])
        assert x.is_leaf
        assert not (x + 1.0).is_leaf
        assert tg.tensor([1.0]).is_leaf
        assert (tg.tensor([1.0]) + 1.0).is_leaf  # nothing requires grad: a plain leaf


class TestRepr:
    def test_leaf_requires_grad(self):
        assert repr(leaf([0.3, 3.0, 0.0003])) == "tensor([0.3, 3.0, 0.0003], requires_grad=True)"

    def test_plain(self):
        assert repr(tg.tensor([0.1, 1.0, 0.0001])) == "tensor([0.1, 1.0, 0.0001])"

    def test_scalar(self):
        assert repr(tg.tensor(2.0, requires_grad=True)) == "tensor(2.0, requires_grad=True)"

    def test_non_leaf_shows_grad_fn(self):
        a = leaf([1.0, 2.0])
        b = leaf([0.5, 0.5])
        assert repr(a + b) == "tensor([1.5, 2.5], grad_fn=<AddBackward>)"

    def test_grad_repr_matches_docstring_example(self):
        a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        c = tg.tensor([6.0, 7.0, 8.0], requires_grad=True)
        y = 3 * a + np.log(c)
        y.backward([0.1, 1.0, 0.0001])
        assert repr(a.grad) == "tensor([0.3, 3.0, 0.0003])"
        close(c.grad, np.array([0.1, 1.0, 0.0001]) / np.array([6.0, 7.0, 8.0]))


# -- operators -----------------------------------------------------------------------------
A_VAL = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
B_VAL = np.array([0.8, 1.25, 2.5])
SEED = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])


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


# -- shape ops -----------------------------------------------------------------------------
T_VAL = np.arange(24.0).reshape(2, 3, 4) / 7


class TestShape:
    def test_reshape_function_and_method(self):
        x = leaf(T_VAL)
        y1 = tg.reshape(x, (6, 4))
        y2 = x.reshape(4, 6)
        y3 = x.reshape((-1,))
        assert y1.shape == (6, 4) and y2.shape == (4, 6) and y3.shape == (24,)
        close(y2, T_VAL.reshape(4, 6))
        s = np.arange(24.0)
        (y1 * s.reshape(6, 4)).sum().backward()
        close(x.grad, s.reshape(2, 3, 4))

    def test_ravel(self):
        x = leaf(T_VAL)
        x.ravel().backward(np.arange(24.0))
        close(x.grad, np.arange(24.0).reshape(2, 3, 4))

    @pytest.mark.parametrize("axes", [None, (1, 2, 0), (2, 0, 1), (0, 2, 1)])
    def test_transpose(self, axes):
        x = leaf(T_VAL)
        y = tg.transpose(x, axes)
        ref = np.transpose(T_VAL, axes)
        assert y.shape == ref.shape
        close(y, ref)
        seed = np.arange(24.0).reshape(ref.shape)
        y.backward(seed)
        inv = None if axes is None else tuple(np.argsort(axes))
        close(x.grad, np.transpose(seed, inv))

    def test_transpose_method_forms(self):
        x = leaf(T_VAL)
        a = x.transpose(1, 2, 0)
        b = x.transpose((1, 2, 0))
        c = x.transpose()
        close(a, np.transpose(T_VAL, (1, 2, 0)))
        close(b, np.transpose(T_VAL, (1, 2, 0)))
        close(c, T_VAL.T)
        (a.sum() + 2 * b.sum() + 3 * c.sum()).backward()
        close(x.grad, np.full((2, 3, 4), 6.0))

    def test_swapaxes(self):
        x = leaf(T_VAL)
        y = tg.swapaxes(x, 0, 2)
        assert y.shape == (4, 3, 2)
        seed = np.arange(24.0).reshape(4, 3, 2)
        y.backward(seed)
        close(x.grad, np.swapaxes(seed, 0, 2))
        x.grad = None
        x.swapaxes(1, 2).backward(np.ones((2, 4, 3)))
        close(x.grad, np.ones((2, 3, 4)))

    def test_squeeze_expand_dims(self):
        x = leaf(np.arange(3.0).reshape(1, 3, 1))
        y = tg.squeeze(x)
        assert y.shape == (3,)
        z = tg.expand_dims(y, 0)
        assert z.shape == (1, 3)
        w = x.squeeze(axis=2)
        assert w.shape == (1, 3)
        (z * np.array([[1.0, 2.0, 3.0]]) + w).sum().backward()
        close(x.grad, np.array([2.0, 3.0, 4.0]).reshape(1, 3, 1))

    def test_broadcast_to(self):
        x = leaf([1.0, 2.0, 3.0])
        y = tg.broadcast_to(x, (4, 3))
        assert y.shape == (4, 3)
        close(y, np.broadcast_to([1.0, 2.0, 3.0], (4, 3)))
        seed = np.arange(12.0).reshape(4, 3)
        y.backward(seed)
        close(x.grad, seed.sum(axis=0))

    def test_concatenate(self):
        a = leaf([[1.0, 2.0], [3.0, 4.0]])
        b = leaf([[5.0], [6.0]])
        c = np.array([[7.0, 8.0, 9.0], [1.0, 1.0, 1.0]])
        y = tg.concatenate([a, b, c], axis=1)
        assert y.shape == (2, 6)
        close(y[:, :3], [[1, 2, 5], [3, 4, 6]])
        seed = np.arange(12.0).reshape(2, 6)
        y.backward(seed)
        close(a.grad, seed[:, :2])
        close(b.grad, seed[:, 2:3])

    def test_concatenate_axis0_default(self):
        a, b = leaf([1.0, 2.0]), leaf([3.0])
        y = tg.concatenate((a, b))
        close(y, [1.0, 2.0, 3.0])
        y.backward([1.0, 2.0, 3.0])
        close(a.grad, [1.0, 2.0])
        close(b.grad, [3.0])

    @pytest.mark.parametrize("axis", [0, 1, -1])
    def test_stack(self, axis):
        a, b = leaf([1.0, 2.0, 3.0]), leaf([4.0, 5.0, 6.0])
        y = tg.stack([a, b], axis=axis)
        ref = np.stack([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], axis=axis)
        assert y.shape == ref.shape
        close(y, ref)
        seed = np.arange(6.0).reshape(ref.shape)
        y.backward(seed)
        parts = np.moveaxis(seed, axis, 0)
        close(a.grad, parts[0])
        close(b.grad, parts[1])

    def test_split_sections(self):
        x = leaf(np.arange(6.0))
        parts = tg.split(x, 3)
        assert len(parts) == 3 and all(p.shape == (2,) for p in parts)
        close(parts[1], [2.0, 3.0])
        (parts[0].sum() + 10 * parts[2].sum()).backward()
        close(x.grad, [1.0, 1.0, 0.0, 0.0, 10.0, 10.0])

    def test_split_indices_and_axis(self):
        x = leaf(np.arange(12.0).reshape(3, 4))
        a, b, c = x.split([1, 3], axis=1)
        assert (a.shape, b.shape, c.shape) == ((3, 1), (3, 2), (3, 1))
        (a.sum() * 1.0 + b.sum() * 2.0 + c.sum() * 3.0).backward()
        close(x.grad, np.tile([1.0, 2.0, 2.0, 3.0], (3, 1)))

    def test_unbind(self):
        x = leaf(np.arange(6.0).reshape(2, 3))
        parts = tg.unbind(x)
        assert isinstance(parts, tuple) and len(parts) == 2
        close(parts[1], [3.0, 4.0, 5.0])
        (parts[0] * 2.0 + parts[1] * 5.0).sum().backward()
        close(x.grad, [[2.0] * 3, [5.0] * 3])

    def test_unbind_axis_method(self):
        x = leaf(np.arange(6.0).reshape(2, 3))
        cols = x.unbind(1)
        assert isinstance(cols, tuple) and len(cols) == 3 and cols[0].shape == (2,)
        close(cols[2], [2.0, 5.0])
        (cols[0] - cols[2]).sum().backward()
        close(x.grad, [[1.0, 0.0, -1.0], [1.0, 0.0, -1.0]])

    def test_unbind_unused_outputs_get_zero(self):
        x = leaf([1.0, 2.0, 3.0])
        a, b, c = tg.unbind(x)
        (b * b).backward()
        close(x.grad, [0.0, 4.0, 0.0])

    @pytest.mark.parametrize("case", ["split_first_unused", "unbind_middle_unused"])
    def test_unused_outputs_get_zero_after_other_backwards(self, case):
        in_fresh_thread(lambda: _unused_outputs_scenario(case))

    @pytest.mark.parametrize("case", ["split_last_unused", "unbind_last_unused"])
    def test_unused_trailing_outputs_get_zero_after_other_backwards(self, case):
        in_fresh_thread(lambda: _unused_outputs_scenario(case))

    def test_matmul_and_dot(self):
        av = np.array([[1.0, 2.0], [3.0, 4.0]])
        v = np.array([0.5, -1.0])
        a, x = leaf(av), leaf(v)
        y = tg.matmul(a, x)
        close(y, av @ v)
        y.backward([1.0, 2.0])
        close(a.grad, np.outer([1.0, 2.0], v))
        close(x.grad, av.T @ np.array([1.0, 2.0]))
        a.grad = x.grad = None
        d = tg.dot(x, x)
        assert d.shape == ()
        close(d, v @ v)
        d.backward()
        close(x.grad, 2 * v)
        x.grad = None
        e = a.dot(x)
        close(e, av @ v)
        e.backward([1.0, 1.0])
        close(x.grad, av.sum(axis=0))

    def test_dot_scalar(self):
        x = leaf([1.0, 2.0])
        y = tg.dot(x, 3.0)
        close(y, [3.0, 6.0])
        y.backward([1.0, 1.0])
        close(x.grad, [3.0, 3.0])


def _unused_outputs_scenario(case):
    # an earlier backward leaves non-zero adjoints in this thread's arena
    z = leaf(np.ones(300))
    (tg.exp(z * 7.0) * 3.0).backward(np.full(300, 5.0))
    x = leaf(np.arange(12.0).reshape(3, 4))
    if case == "split_first_unused":
        y, expected = tg.split(x, 2, axis=1)[1], [[0, 0, 1, 1]] * 3
    elif case == "split_last_unused":
        y, expected = tg.split(x, 2, axis=1)[0], [[1, 1, 0, 0]] * 3
    elif case == "unbind_middle_unused":
        a, b, c = tg.unbind(x)
        y, expected = a + c, [[1] * 4, [0] * 4, [1] * 4]
    else:
        y, expected = tg.unbind(x)[1], [[0] * 4, [1] * 4, [0] * 4]
    y.backward(np.ones(y.shape))
    close(x.grad, np.array(expected, dtype=float))


# -- indexing ------------------------------------------------------------------------------
IDX_VAL = np.arange(12.0).reshape(3, 4) / 3


class TestIndexing:
    @pytest.mark.parametrize("key", [
        1, -1, (1, 2), slice(1, None), (slice(None), slice(None, None, 2)),
        (slice(None, None, -1), 0), None, (None, 1), Ellipsis, (Ellipsis, 1),
        (0, None, slice(1, 3)), np.array([2, 0]), (np.array([0, 2]), np.array([1, 3])),
        [0, 2], (slice(None), [3, 0]),
    ], ids=lambda k: repr(k).replace(" ", ""))
    def test_basic_and_fancy(self, key):
        x = leaf(IDX_VAL)
        y = x[key]
        ref = IDX_VAL[key]
        assert y.shape == ref.shape
        close(y, ref)
        seed = np.arange(1.0, ref.size + 1).reshape(ref.shape)
        y.backward(seed)
        expected = np.zeros((3, 4))
        np.add.at(expected, key if not isinstance(key, list) else np.array(key), seed)
        close(x.grad, expected)

    def test_boolean_mask(self):
        x = leaf(IDX_VAL)
        mask = IDX_VAL > 1.5
        y = x[mask]
        close(y, IDX_VAL[mask])
        y.backward(np.arange(1.0, mask.sum() + 1))
        expected = np.zeros((3, 4))
        expected[mask] = np.arange(1.0, mask.sum() + 1)
        close(x.grad, expected)

    def test_boolean_tensor_mask(self):
        x = leaf([-1.0, 2.0, -3.0, 4.0])
        y = x[x > 0]
        close(y, [2.0, 4.0])
        (y * y).sum().backward()
        close(x.grad, [0.0, 4.0, 0.0, 8.0])

    def test_row_mask(self):
        x = leaf(IDX_VAL)
        y = x[np.array([True, False, True])]
        assert y.shape == (2, 4)
        y.sum().backward()
        close(x.grad, [[1.0] * 4, [0.0] * 4, [1.0] * 4])

    def test_rows_labels(self):
        z = leaf(np.arange(12.0).reshape(4, 3))
        rows = np.arange(4)
        labels = np.array([2, 0, 1, 2])
        picked = z[rows, labels]
        close(picked, [2.0, 3.0, 7.0, 11.0])
        picked.sum().backward()
        expected = np.zeros((4, 3))
        expected[rows, labels] = 1.0
        close(z.grad, expected)

    def test_cross_entropy_like(self):
        logits = np.array([[1.0, 2.0, 0.5], [0.1, -0.3, 0.8]])
        labels = np.array([1, 2])
        z = leaf(logits)
        loss = (tg.logsumexp(z, axis=1) - z[np.arange(2), labels]).mean()
        loss.backward()
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        p[np.arange(2), labels] -= 1.0
        close(z.grad, p / 2, rtol=1e-12)

    def test_repeated_indices_scatter_add(self):
        x = leaf([1.0, 2.0, 3.0])
        y = x[np.array([0, 0, 2, 0])]
        y.backward([1.0, 10.0, 100.0, 1000.0])
        close(x.grad, [1011.0, 0.0, 100.0])

    def test_repeated_index_pairs(self):
        x = leaf(np.zeros((2, 2)))
        y = x[np.array([1, 1, 0]), np.array([0, 0, 1])]
        y.backward([1.0, 2.0, 4.0])
        close(x.grad, [[0.0, 4.0], [3.0, 0.0]])

    def test_index_with_tensor_of_ints(self):
        x = leaf([5.0, 6.0, 7.0])
        y = x[tg.tensor([2, 2, 1])]
        close(y, [7.0, 7.0, 6.0])
        y.sum().backward()
        close(x.grad, [0.0, 1.0, 2.0])

    def test_chained_indexing(self):
        x = leaf(IDX_VAL)
        y = x[1:][:, 1][0]
        close(y, IDX_VAL[1, 1])
        y.backward()
        expected = np.zeros((3, 4))
        expected[1, 1] = 1.0
        close(x.grad, expected)

    def test_iteration_unbinds(self):
        x = leaf([[1.0, 2.0], [3.0, 4.0]])
        rows = list(x)
        assert len(rows) == 2 and rows[1].shape == (2,)
        (rows[0] * rows[1]).sum().backward()
        close(x.grad, [[3.0, 4.0], [1.0, 2.0]])


# -- grad_fn -------------------------------------------------------------------------------
class TestGradFn:
    def test_leaf_has_none(self):
        assert leaf([1.0]).grad_fn is None
        assert tg.tensor([1.0]).grad_fn is None

    @pytest.mark.parametrize("expr, name", [
        (lambda a, b: a + b, "AddBackward"),
        (lambda a, b: a * b, "MulBackward"),
        (lambda a, b: a - b, "SubBackward"),
        (lambda a, b: a / b, "DivBackward"),
        (lambda a, b: tg.exp(a), "ExpBackward"),
        (lambda a, b: a.sum(), "SumBackward"),
        (lambda a, b: tg.unbind(a)[0], "UnbindBackward"),
    ])
    def test_names(self, expr, name):
        a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
        y = expr(a, b)
        assert y.grad_fn.name() == name

    def test_next_functions_leaves_and_constants(self):
        a = leaf([1.0, 2.0])
        c = tg.tensor([3.0, 4.0])
        y = a * c
        nf = y.grad_fn.next_functions
        assert isinstance(nf, tuple) and len(nf) == 2
        (n0, s0), (n1, s1) = nf
        assert isinstance(n0, tg.AccumulateGrad)
        assert n0.name() == "AccumulateGrad"
        assert n0.variable is a
        assert s0 == 0
        assert (n1, s1) == (None, 0)
        z = np.array([1.0, 1.0]) + a
        (m0, _), (m1, _) = z.grad_fn.next_functions
        assert m0 is None and m1.variable is a

    def test_next_functions_chain(self):
        a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
        p = a * b
        s = p + a
        (n0, s0), (n1, s1) = s.grad_fn.next_functions
        assert n0 == p.grad_fn and hash(n0) == hash(p.grad_fn)
        assert n0.name() == "MulBackward" and s0 == 0
        assert n1.variable is a
        (q0, _), (q1, _) = n0.next_functions
        assert q0.variable is a and q1.variable is b

    def test_nodes_equal_from_any_tensor(self):
        a = leaf([1.0, 2.0])
        y = a * 2.0
        assert y.grad_fn == y.grad_fn
        assert hash(y.grad_fn) == hash(y.grad_fn)
        z = y + 1.0
        w = y * 3.0
        nz = z.grad_fn.next_functions[0][0]
        nw = w.grad_fn.next_functions[0][0]
        assert nz == nw == y.grad_fn
        assert len({nz, nw, y.grad_fn}) == 1
        assert z.grad_fn != w.grad_fn
        assert len({z.grad_fn, w.grad_fn}) == 2

    def test_accumulate_grad_equality(self):
        a, b = leaf([1.0]), leaf([2.0])
        y = a * b + a
        n_a1 = y.grad_fn.next_functions[0][0].next_functions[0][0]
        n_a2 = y.grad_fn.next_functions[1][0]
        n_b = y.grad_fn.next_functions[0][0].next_functions[1][0]
        assert n_a1.variable is a and n_a2.variable is a
        assert n_a1 == n_a2 and hash(n_a1) == hash(n_a2)
        assert n_a1 != n_b

    def test_unbind_multi_output(self):
        x = leaf([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        u0, u1, u2 = tg.unbind(x)
        s = u0 + u2
        (n0, slot0), (n1, slot1) = s.grad_fn.next_functions
        assert n0.name() == n1.name() == "UnbindBackward"
        assert (slot0, slot1) == (0, 2)
        assert n0 == n1 == u0.grad_fn == u1.grad_fn == u2.grad_fn
        assert len({n0, n1, u1.grad_fn}) == 1
        ((src, _),) = n0.next_functions
        assert src.variable is x

    def test_grad_fn_of_docstring_example(self):
        a, b = tg.unbind(tg.tensor([1.0, 2.0], requires_grad=True))
        assert (a + b).grad_fn.next_functions[1][1] == 1


# -- no_grad -------------------------------------------------------------------------------
class TestNoGrad:
    def test_context_manager(self):
        x = leaf([1.0, 2.0])
        assert tg.is_grad_enabled()
        with tg.no_grad():
            assert not tg.is_grad_enabled()
            y = x * 2.0 + tg.exp(x)
        assert tg.is_grad_enabled()
        assert not y.requires_grad and y.is_leaf and y.grad_fn is None
        close(y, 2 * np.array([1.0, 2.0]) + np.exp([1.0, 2.0]))

    def test_nested_and_restored_after_exception(self):
        with pytest.raises(ZeroDivisionError):
            with tg.no_grad():
                with tg.no_grad():
                    pass
                assert not tg.is_grad_enabled()
                1 / 0
        assert tg.is_grad_enabled()
        x = leaf([1.0])
        assert (x * 2.0).requires_grad

    def test_decorator(self):
        @tg.no_grad()
        def f(t):
            """doc"""
            assert not tg.is_grad_enabled()
            return t * t

        x = leaf([3.0])
        y = f(x)
        assert not y.requires_grad
        assert f.__name__ == "f" and f.__doc__ == "doc"
        assert tg.is_grad_enabled()
        assert f(x).numpy()[0] == 9.0   # reusable
        assert (x * x).requires_grad

    def test_graph_recorded_before_is_unaffected(self):
        x = leaf([1.0, 2.0])
        y = x * x
        with tg.no_grad():
            z = y * 3.0
        assert not z.requires_grad
        y.sum().backward()
        close(x.grad, [2.0, 4.0])

    def test_grad_mode_inside_function_used_in_graph(self):
        x = leaf([2.0])
        with tg.no_grad():
            scale = x * 10.0
        y = x * scale   # scale is a constant
        y.backward([1.0])
        close(x.grad, [20.0])


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


def test_public_names_exist():
    for name in ["tensor", "Tensor", "no_grad", "is_grad_enabled", "exp", "log", "log1p",
                 "expm1", "sqrt", "square", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                 "arcsin", "arccos", "arctan", "abs", "maximum", "minimum", "where", "clip",
                 "sum", "mean", "prod", "max", "min", "reshape", "transpose", "swapaxes",
                 "squeeze", "expand_dims", "broadcast_to", "concatenate", "stack", "split",
                 "matmul", "dot", "unbind", "logsumexp", "AccumulateGrad"]:
        assert callable(getattr(tg, name)), name


def test_functions_accept_plain_tensors_and_ndarrays():
    t = tg.tensor([1.0, 4.0])
    assert isinstance(tg.sqrt(t), tg.Tensor)
    close(tg.sqrt(t), [1.0, 2.0])
    close(tg.sum(t), 5.0)
    close(tg.concatenate([t, np.array([9.0])]), [1.0, 4.0, 9.0])
