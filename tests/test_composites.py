"""Functions built from primitives: values equal NumPy's, gradients match
central finite differences, for hypothesis-drawn shapes and axes."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

from oracle import check_vjp

shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4)


@st.composite
def with_axis(draw):
    shape = draw(shapes)
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    return shape, dict(axis=axis, keepdims=draw(st.booleans()))


@st.composite
def matrices(draw):
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=2, min_side=2, max_side=4))
    return shape, dict(ord=draw(st.sampled_from([None, "fro", 1, -1, np.inf, -np.inf, 2, -2,
                                                  "nuc"])))


@st.composite
def vectors(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=1, min_side=2, max_side=6))
    return shape, dict(ord=draw(st.sampled_from([None, 1, 2, 3, 0.5, np.inf, -np.inf])))


def _distinct(rng, shape):
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.37 - n * 0.15).reshape(shape) + rng.uniform(0, 0.01, shape)


def _distinct_nonzero(rng, shape):
    """``_distinct`` values at least 0.2 from zero: |x| ** 0.5 (ord=0.5) has an
    unbounded derivative there, beyond what a finite difference resolves."""
    d = _distinct(rng, shape)
    return np.where(d >= 0.0, d + 0.2, d - 0.2)


# name -> (strategy of (shape, params), tapegrad call, NumPy reference, values)
CASES = {
    "var": (with_axis(), lambda x, **k: np.var(x, ddof=1, **k),
            lambda x, **k: np.var(x, ddof=1, **k), None),
    "std": (with_axis(), lambda x, **k: tg.std(x, **k), np.std, None),
    "ptp": (with_axis(), lambda x, **k: np.ptp(x, **k), np.ptp, _distinct),
    "average": (with_axis(), lambda x, axis, keepdims: np.average(
        x, axis=axis, weights=np.arange(1.0, x.size + 1).reshape(x.shape), keepdims=keepdims),
        lambda x, axis, keepdims: np.average(
            x, axis=axis, weights=np.arange(1.0, x.size + 1).reshape(x.shape),
            keepdims=keepdims), None),
    "nansum": (with_axis(), lambda x, **k: np.nansum(x, **k), np.nansum, None),
    "nanmean": (with_axis(), lambda x, **k: np.nanmean(x, **k), np.nanmean, None),
    "nanmax": (with_axis(), lambda x, **k: np.nanmax(x, **k), np.nanmax, _distinct),
    "nanmin": (with_axis(), lambda x, **k: tg.nanmin(x, **k), np.nanmin, _distinct),
    "softmax": (with_axis(), lambda x, axis, keepdims: tg.softmax(x, axis=axis) * np.arange(
        1.0, x.size + 1).reshape(x.shape), None, None),
    "log_softmax": (with_axis(), lambda x, axis, keepdims: tg.log_softmax(x, axis=axis)
                    * np.arange(1.0, x.size + 1).reshape(x.shape), None, None),
    "matrix norm": (matrices(), lambda x, ord: np.linalg.norm(x, ord),
                    lambda x, ord: np.linalg.norm(x, ord), _distinct),
    "vector norm": (vectors(), lambda x, ord: np.linalg.norm(x, ord),
                    lambda x, ord: np.linalg.norm(x, ord), _distinct_nonzero),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_composite(name):
    strategy, fn, ref, values = CASES[name]

    @given(case=strategy, seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        shape, params = case
        rng = np.random.default_rng(seed)
        x = values(rng, shape) if values else rng.uniform(-2, 2, shape)
        if name == "vector norm" and params["ord"] == 0:
            return
        if ref is not None:
            np.testing.assert_allclose(fn(tg.tensor(x), **params).numpy(),
                                       ref(x, **params), rtol=1e-12, atol=1e-12)
        check_vjp(lambda t: fn(t, **params), [x], rng)

    run()


PRODUCTS = {
    "outer": (((3,), (2, 2)), np.outer),
    "vdot": (((2, 3), (6,)), np.vdot),
    "inner": (((2, 3), (4, 3)), np.inner),
    "tensordot": (((2, 3, 4), (4, 3, 2)), lambda a, b: np.tensordot(a, b, axes=([1, 2], [1, 0]))),
    "tensordot int": (((2, 3, 4), (3, 4, 5)), np.tensordot),
    "kron": (((2, 3), (3, 1)), np.kron),
    "kron mixed ndim": (((2,), (2, 3)), np.kron),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_products(name):
    shapes_, fn = PRODUCTS[name]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s) for s in shapes_]
    np.testing.assert_allclose(fn(*[tg.tensor(a) for a in arrays]).numpy(), fn(*arrays),
                               rtol=1e-12, atol=1e-12)
    check_vjp(fn, arrays, rng)


def test_nan_functions_skip_nans():
    x = tg.tensor([1.0, np.nan, 3.0], requires_grad=True)
    (np.nansum(x) + np.nanmax(x) + np.nanmean(x)).backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.5, 0.0, 2.5])


def test_stacking_and_splitting():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0, 4.0], requires_grad=True)
    assert np.hstack([a, b]).shape == (4,)
    assert np.vstack([a, b]).shape == (2, 2)
    assert np.dstack([a, b]).shape == (1, 2, 2)
    assert np.column_stack([a, b]).shape == (2, 2)
    assert np.atleast_3d(a).shape == (1, 2, 1)
    parts = np.array_split(tg.concatenate([a, b]), 3)
    assert [p.shape for p in parts] == [(2,), (1,), (1,)]
    tg.concatenate([parts[0] * 1.0, parts[1] * 2.0, parts[2] * 3.0]).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [2.0, 3.0])
    m = tg.tensor(np.arange(9.0).reshape(3, 3), requires_grad=True)
    np.trace(m).backward()
    np.testing.assert_array_equal(m.grad.numpy(), np.eye(3))


def test_matrix_two_norm_is_the_largest_singular_value():
    t = tg.tensor(np.diag([3.0, -1.0]), requires_grad=True)
    np.linalg.norm(t, 2).backward()
    np.testing.assert_allclose(t.grad.numpy(), np.diag([1.0, 0.0]), atol=1e-12)


def test_select_and_masked_reductions():
    x = tg.tensor([-2.0, 0.5, 3.0, -1.0], requires_grad=True)
    xv = x.numpy()
    y = np.select([x.numpy() < 0, x.numpy() > 1], [x * x, 3.0 * x], default=x)
    np.testing.assert_allclose(y.numpy(), np.select([xv < 0, xv > 1], [xv * xv, 3 * xv], xv))
    mask = np.array([True, False, True, True])
    total = np.sum(y, where=mask) + np.mean(x, where=mask) + np.max(x, where=mask, initial=-9)
    np.testing.assert_allclose(
        total.numpy(), np.sum(y.numpy(), where=mask) + np.mean(xv, where=mask) + 3.0)
    total.backward()
    # d/dx of: select part (masked by `mask`) + mean over mask + max over mask (x[2])
    want = np.array([2 * -2.0, 0.0, 3.0, 2 * -1.0]) + mask / 3.0 + [0, 0, 1.0, 0]
    np.testing.assert_allclose(x.grad.numpy(), want)
