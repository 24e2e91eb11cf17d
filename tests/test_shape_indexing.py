"""The public API: shape ops (reshape, transpose, squeeze, broadcast_to,
concatenate, stack, split, unbind, matmul, dot) and indexing, checked against
closed-form derivatives written out by hand.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg

from oracle import close, in_fresh_thread, leaf


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


def _scatters_like_numpy(numbers, select, want):
    """``select`` of a leaf of ``numbers / 7`` gives NumPy's selection ``want``
    of the element numbers, and its gradient scatters through it (np.add.at:
    repeats accumulate)."""
    x = leaf(numbers / 7.0)
    y = select(x)
    close(y, want / 7.0)
    seed = np.arange(1.0, want.size + 1).reshape(want.shape)
    (y * seed).sum().backward()
    expected = np.zeros(numbers.shape)
    np.add.at(expected.reshape(-1), want.ravel(), seed.ravel())
    close(x.grad if x.grad is not None else np.zeros(numbers.shape), expected)


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

    @pytest.mark.parametrize("key, name", [
        ((Ellipsis, None), "Unsqueeze"), ((slice(None), None), "Unsqueeze"),
        ((None, Ellipsis, None), "Unsqueeze"), ((Ellipsis, 0), "Squeeze"),
        ((slice(None), slice(None), -1), "Squeeze"), ((slice(None), slice(None, None, 1), 0, None), "Reshape"),
        (Ellipsis, "Reshape"), ((slice(None), slice(1, None)), "Slice"), ((0, Ellipsis), "Slice"),
    ], ids=lambda k: repr(k).replace(" ", ""))
    def test_keys_that_keep_every_element_are_views(self, key, name):
        """A key that keeps every element in order (new axes, full slices, 0 or
        -1 on an axis of length 1) records an identity-VJP view; the others
        a strided selection.  Values, gradients and writes through the view are NumPy's."""
        base = np.arange(6.0).reshape(3, 2, 1) / 5
        x = leaf(base)
        y = x[key]
        ref = base[key]
        assert y.shape == ref.shape and y.grad_fn.name() == name + "Backward"
        close(y, ref)
        seed = np.arange(1.0, ref.size + 1).reshape(ref.shape)
        (y * seed).sum().backward()
        expected = np.zeros(base.shape)
        np.add.at(expected, key, seed)
        close(x.grad, expected)
        # a write through the view reaches its base, in value and gradient
        x2 = leaf(base)
        z = x2 * 2.0
        v = z[key]
        v[(0,) * v.ndim] = 7.0 * x2[0, 0, 0]
        zref = 2.0 * base
        zref[key][(0,) * v.ndim] = 7.0 * base[0, 0, 0]
        close(z, zref)
        (z * base).sum().backward()
        j = np.arange(base.size).reshape(base.shape)[key][(0,) * v.ndim]  # the written element
        g = 2.0 * base
        g.flat[j] = 0.0
        g.flat[0] += 7.0 * base.flat[j]
        close(x2.grad, g)

    @settings(max_examples=300, deadline=None)
    @given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=4), data=st.data())
    def test_basic_keys_record_numpys_selection(self, shape, data):
        """The selection a basic key records (its offset, shape and strides)
        is, as an index map, the one NumPy makes of the element numbers, and
        the gradient scatters through it."""
        from tapegrad.core.index_maps import slice_map
        from tapegrad.ops.shape import _slice_params
        shape = tuple(shape)
        items = []
        for n in shape:
            kind = data.draw(st.sampled_from(["slice", "int", "none", "full"]))
            if kind == "int" and n:
                items.append(data.draw(st.integers(-n, n - 1)))
            elif kind == "slice":
                items.append(slice(data.draw(st.none() | st.integers(-5, 5)),
                                   data.draw(st.none() | st.integers(-5, 5)),
                                   data.draw(st.none() | st.sampled_from([1, 2, -1, -3]))))
            elif kind == "none":
                items += [None, slice(None)]
            else:
                items.append(slice(None))
        cut = data.draw(st.integers(0, len(items)))
        key = tuple(items[:cut])
        if data.draw(st.booleans()):
            key = key + (Ellipsis,) + tuple(items[cut:cut + 1])
        numbers = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
        try:
            want = numbers[key]
        except IndexError:
            return
        p = np.array(_slice_params(shape, key))
        assert p[0] == want.size and tuple(p[3:3 + p[2]]) == want.shape
        if want.size:
            np.testing.assert_array_equal(slice_map(p, 0), want.ravel())
        _scatters_like_numpy(numbers, lambda x: x[key], want)

    @settings(max_examples=300, deadline=None)
    @given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
    def test_advanced_keys_record_numpys_selection(self, shape, data):
        """The index map an advanced key records (integer arrays on the
        leading axes, masks, arrays beside slices, None and ...) is the
        selection NumPy makes of the element numbers, without a grid."""
        from tapegrad.ops.shape import _advanced_map
        shape = tuple(shape)
        numbers = np.arange(int(np.prod(shape))).reshape(shape)
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        kind = data.draw(st.sampled_from(["leading", "mask", "part_mask", "mixed", "ellipsis"]))
        nd = len(shape)
        if kind == "leading":
            k = data.draw(st.integers(1, nd))
            bshape = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
            key = tuple(rng.integers(-n, n, bshape) for n in shape[:k])
        elif kind == "mask":
            key = rng.random(shape) < 0.5
        elif kind == "part_mask":
            key = (rng.random(shape[:1]) < 0.5,)
        elif kind == "mixed":
            key = ((slice(None, None, -1), rng.integers(0, shape[1], 3)) if nd > 1
                   else (None, [0, -1]))
        else:
            key = (Ellipsis, rng.integers(-shape[-1], shape[-1], (2, 2)))
        if type(key) is tuple and len(key) == 1 and data.draw(st.booleans()):
            key = key[0]
        want = numbers[key]
        got = _advanced_map(shape, key if not isinstance(key, tuple) else
                            tuple(np.asarray(k) if isinstance(k, list) else k for k in key))
        np.testing.assert_array_equal(np.ravel(got), np.ravel(want))
        _scatters_like_numpy(numbers, lambda x: x[key], want)

    @settings(max_examples=200, deadline=None)
    @given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
    def test_take_records_numpys_selection(self, shape, data):
        """``take`` (flattened or along an axis, negative indices) and
        ``take_along_axis`` record, without a grid, the selection NumPy makes
        of the element numbers; the gradient scatters through it."""
        shape = tuple(shape)
        numbers = np.arange(int(np.prod(shape))).reshape(shape)
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
        axis = data.draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
        along = axis is not None and data.draw(st.booleans())
        if along:
            ishape = list(shape)
            ishape[axis] = data.draw(st.integers(0, 4))
            n = shape[axis]
            idx = rng.integers(-n, n, ishape)
            fn, npfn = tg.take_along_axis, np.take_along_axis
        else:
            n = numbers.size if axis is None else shape[axis]
            idx = rng.integers(-n, n, tuple(data.draw(st.lists(st.integers(0, 3), max_size=2))))
            fn, npfn = tg.take, np.take
        want = npfn(numbers, idx, axis)
        _scatters_like_numpy(numbers, lambda x: fn(x, idx, axis), want)

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
