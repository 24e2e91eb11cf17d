"""The public API: tensor creation, Tensor properties and conversions, and
repr.
"""

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, leaf


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
