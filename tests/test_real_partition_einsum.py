"""``np.real``, ``np.imag``, ``np.conj`` / ``np.conjugate`` and ``np.angle``
on real tensors, ``np.partition`` / ``np.argpartition``, and einsum's
interleaved sublist form, reached through NumPy's own names: values and
dtypes equal NumPy's, gradients match central differences to first order
(check_vjp) and second order (tg.hvp against differences of tg.grad), also
in traces (a replay never reuses a stale index or sign)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

from oracle import check_hvp, check_vjp, leaf

R = np.random.default_rng(11)


def _away_from_zero(shape):
    return R.uniform(0.3, 2.0, shape) * R.choice([-1.0, 1.0], shape)


def _distinct(shape):
    """No ties and gaps far above the finite-difference step."""
    n = int(np.prod(shape))
    return (R.permutation(n) * 0.37 - n * 0.15 + R.uniform(0, 0.01, n)).reshape(shape)


# name -> (function of arrays or tensors (the same code runs on both), input arrays)
CASES = {
    "real": (lambda a: np.real(a) * 2.0, [R.standard_normal((2, 3))]),
    "real 0-d": (lambda a: np.real(a) ** 2, [np.array(1.5)]),
    "conj": (lambda a: np.conj(a), [R.standard_normal((3, 2))]),
    "conjugate": (lambda a: np.conjugate(a) * a, [R.standard_normal(4)]),
    "angle": (lambda a: np.angle(a) + a, [_away_from_zero((2, 4))]),
    "angle alone": (lambda a: np.angle(a), [_away_from_zero(5)]),
    "angle deg": (lambda a: np.angle(a, deg=True) * a, [_away_from_zero(5)]),
    "imag plus": (lambda a: np.imag(a) + a * a, [R.standard_normal((2, 2))]),
    "partition int kth": (lambda a: np.partition(a, 2), [_distinct(6)]),
    "partition negative kth": (lambda a: np.partition(a, -1) * 1.0, [_distinct(5)]),
    "partition sequence": (lambda a: np.partition(a, [0, 3], axis=1), [_distinct((3, 5))]),
    "partition axis 0": (lambda a: np.partition(a, (1,), axis=0), [_distinct((4, 2, 3))]),
    "partition axis None": (lambda a: np.partition(a, [2, 5], axis=None), [_distinct((2, 4))]),
    "partition squared": (lambda a: np.partition(a * a, 1, axis=-2), [_distinct((3, 3)) + 6.0]),
    "einsum sublists": (lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]),
                        [R.standard_normal((2, 3)), R.standard_normal((3, 4))]),
    "einsum sublists implicit": (lambda a, b: np.einsum(a, [30, 1], b, [1, 2]),
                                 [R.standard_normal((2, 3)), R.standard_normal((3, 4))]),
    "einsum sublists ellipsis": (lambda a, b: np.einsum(a, [Ellipsis, 0, 1], b, [1, 2],
                                                        [Ellipsis, 2]),
                                 [R.standard_normal((5, 2, 3)), R.standard_normal((3, 4))]),
    "einsum sublists ellipsis implicit": (lambda a: np.einsum(a, [Ellipsis, 51, 0]),
                                          [R.standard_normal((2, 3, 4))]),
    "einsum sublists trace": (lambda a: np.einsum(a, [7, 7]), [R.standard_normal((3, 3))]),
    "einsum sublists three": (lambda a, b, c: np.einsum(a, [0, 1], b, [1, 2], c, [2],
                                                        [np.int64(0)]),
                              [R.standard_normal((2, 3)), R.standard_normal((3, 4)),
                               R.standard_normal(4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_equals_numpy(name):
    fn, arrays = CASES[name]
    ref = fn(*[a.copy() for a in arrays])
    got = fn(*[tg.tensor(a) for a in arrays])
    assert isinstance(got, tg.Tensor)
    assert got.shape == np.shape(ref) and got.dtype == np.asarray(ref).dtype
    np.testing.assert_array_equal(got.numpy(), ref) if "partition" in name else \
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_order(name):
    fn, arrays = CASES[name]
    check_vjp(fn, arrays, np.random.default_rng(1))
    check_hvp(fn, arrays, np.random.default_rng(2))


# -- real, imag, conj, angle ---------------------------------------------------------
SPECIAL = np.array([-2.0, -0.0, 0.0, 3.0, np.nan, np.inf, -np.inf, -1e-300])


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int64, np.int8])
def test_values_and_dtypes_follow_numpy(dtype):
    a = SPECIAL.astype(dtype) if np.dtype(dtype).kind == "f" else np.array([-3, 0, 2], dtype)
    t = tg.tensor(a, requires_grad=np.dtype(dtype).kind == "f")
    for fn in (np.real, np.imag, np.conj, np.conjugate, np.angle,
               lambda x: np.angle(x, deg=True)):
        ref = fn(a)
        got = fn(t)
        assert isinstance(got, tg.Tensor)
        assert got.dtype == ref.dtype and got.shape == ref.shape, fn
        np.testing.assert_array_equal(got.numpy(), ref)
        # the sign of zero too (-0.0 stays -0.0, where NumPy keeps it)
        np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(ref))


def test_real_is_the_tensor_and_imag_a_constant():
    x = leaf([1.0, -2.0])
    assert np.real(x) is x
    im = np.imag(x)
    assert not im.requires_grad and im.grad_fn is None
    # a function of imag and of x: imag contributes nothing
    g = tg.grad(lambda t: (np.imag(t) * 5.0 + t * t).sum())(np.array([1.0, -2.0]))
    np.testing.assert_array_equal(g, [2.0, -4.0])


def test_angle_has_derivative_zero_on_the_graph():
    x = leaf([-2.0, -0.0, 0.0, 3.0])
    y = np.angle(x)
    assert y.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
    H = tg.hessian(lambda t: (np.angle(t) * t).sum())(np.array([-2.0, 3.0]))
    np.testing.assert_array_equal(H, np.zeros((2, 2)))
    # d/dx (angle(x) * x) = angle(x): pi for the negative one
    g = tg.grad(lambda t: (np.angle(t) * t).sum())(np.array([-2.0, 3.0]))
    np.testing.assert_array_equal(g, [np.pi, 0.0])


def test_conj_copies():
    x = leaf([1.0, 2.0])
    c = np.conj(x)
    assert c is not x and c.grad_fn.name() == "PositiveBackward"
    (c * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_angle_in_a_trace_follows_new_signs():
    f = tg.trace(lambda x: (np.angle(x) * x).sum(), np.array([1.0, 2.0]))
    np.testing.assert_allclose(f(np.array([1.0, 2.0])), 0.0)
    np.testing.assert_allclose(f(np.array([-1.0, 2.0])), -np.pi)
    np.testing.assert_allclose(f.grad(np.array([-1.0, -2.0])), [np.pi, np.pi])


# -- partition -----------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
       data=st.data())
def test_partition_any_shape_axis_and_kth(shape, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    n = int(np.prod(shape)) if axis is None else shape[axis]
    kth = data.draw(st.one_of(st.integers(-n, n - 1),
                              st.lists(st.integers(0, n - 1), min_size=1, max_size=3)))
    ties = data.draw(st.booleans())
    a = np.round(R.standard_normal(shape), 0) if ties else R.standard_normal(shape)
    x = leaf(a)
    y = np.partition(x, kth, axis=axis)
    ref = np.partition(a, kth, axis=axis)
    np.testing.assert_array_equal(y.numpy(), ref)
    w = R.standard_normal(ref.shape)
    (y * w).sum().backward()
    # each output element's weight lands on one input element of the same value
    assert np.isclose(x.grad.numpy().sum(), w.sum())
    idx = np.argpartition(a, kth, axis=axis)   # plain indices, as NumPy's
    assert isinstance(np.argpartition(x, kth, axis=axis), np.ndarray)
    np.testing.assert_array_equal(np.argpartition(x, kth, axis=axis), idx)
    if not ties:   # distinct values: the gradient is w scattered to where each value was
        flat = a.ravel() if axis is None else a
        want = np.zeros_like(flat)
        pos = np.argsort(flat, axis=-1 if axis is None else axis)
        rank_of = np.argsort(np.argsort(ref, axis=-1 if axis is None else axis),
                             axis=-1 if axis is None else axis)
        src = np.take_along_axis(pos, rank_of, axis=-1 if axis is None else axis)
        np.put_along_axis(want, src, w, axis=-1 if axis is None else axis)
        np.testing.assert_array_equal(x.grad.numpy(), want.reshape(a.shape))


def test_partition_with_nan_and_errors():
    a = np.array([3.0, np.nan, 1.0, 2.0])
    np.testing.assert_array_equal(np.partition(leaf(a), 1).numpy(), np.partition(a, 1))
    x = leaf([3.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="out of bounds"):
        np.partition(x, 3)
    with pytest.raises(np.exceptions.AxisError):
        np.partition(x, 0, axis=1)
    with pytest.raises(TypeError, match="order="):
        np.partition(x, 0, order="f")
    # nothing was left half-done
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_partition_in_a_trace_replays_new_orders():
    f = tg.trace(lambda x: (np.partition(x, 1)[:2] * np.array([1.0, 10.0])).sum(),
                 np.array([3.0, 1.0, 2.0]))
    np.testing.assert_allclose(f(np.array([3.0, 1.0, 2.0])), 21.0)
    np.testing.assert_allclose(f(np.array([1.0, 3.0, 2.0])), 21.0)
    np.testing.assert_allclose(f.grad(np.array([1.0, 3.0, 2.0])), [1.0, 0.0, 10.0])
    np.testing.assert_allclose(f.grad(np.array([5.0, 4.0, 0.5])), [0.0, 10.0, 1.0])


# -- einsum sublists -----------------------------------------------------------------
def test_einsum_sublists_match_the_string_form():
    a, b = leaf(R.standard_normal((2, 3))), leaf(R.standard_normal((3, 4)))
    y = np.einsum(a, [0, 1], b, [1, 2], [0, 2])
    z = np.einsum("ij,jk->ik", a, b)
    np.testing.assert_array_equal(y.numpy(), z.numpy())
    assert y.grad_fn.name() == "EinsumBackward"
    assert tg.einsum(a, [0, 1], b, [1, 2]).shape == (2, 4)


@pytest.mark.parametrize("args, exc, match", [
    (lambda a: (a, [0, 52]), ValueError, r"not within the valid range \[0, 52\)"),
    (lambda a: (a, [0, -1]), ValueError, "valid range"),
    (lambda a: (a, [0, 1.5]), TypeError, "integers or Ellipsis"),
    (lambda a: (a, 3), TypeError, "list of subscripts"),
    (lambda a: (a, [0]), ValueError, "number of indices"),
])
def test_einsum_sublist_errors(args, exc, match):
    a = leaf(R.standard_normal((2, 2)))
    with pytest.raises(exc, match=match):
        np.einsum(*args(a))
    with pytest.raises(exc):
        np.einsum(*args(a.numpy()))      # NumPy refuses them too
