"""NumPy functions built as composites (ops/numeric.py), reached through
NumPy's own names: values equal NumPy's, gradients match central finite
differences (first order: check_vjp; second order: tg.hvp against
differences of tg.grad), for hypothesis-drawn shapes where the function
takes any, and every error path's message."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

from oracle import check_hvp, check_vjp, leaf

R = np.random.default_rng(5)


def _sorted_grid(n):
    return np.cumsum(R.uniform(0.3, 1.0, n))


# name -> (function of arrays or tensors (the same code runs on both), input arrays)
CASES = {
    "rot90 k=1": (lambda m: np.rot90(m), [R.standard_normal((3, 4))]),
    "rot90 k=-1 axes": (lambda m: np.rot90(m, -1, axes=(2, 0)), [R.standard_normal((2, 3, 4))]),
    "rot90 k=2": (lambda m: np.rot90(m, 2), [R.standard_normal((3, 2))]),
    "rot90 k=4": (lambda m: np.rot90(m, 4) * 1.0, [R.standard_normal((3, 2))]),
    "rollaxis": (lambda a: np.rollaxis(a, 2, 0), [R.standard_normal((2, 3, 4))]),
    "rollaxis start": (lambda a: np.rollaxis(a, 0, 3), [R.standard_normal((2, 3, 4))]),
    "dsplit": (lambda a: np.dsplit(a, [1])[1] * 2.0, [R.standard_normal((2, 2, 3))]),
    "append flat": (lambda a, b: np.append(a, b), [R.standard_normal((2, 2)), R.standard_normal(3)]),
    "append axis": (lambda a, b: np.append(a, b, axis=0), [R.standard_normal((2, 2)),
                                                           R.standard_normal((1, 2))]),
    "nan_to_num": (lambda a: np.nan_to_num(a * 1.0, posinf=5.0), [R.standard_normal(5)]),
    "sinc": (lambda a: np.sinc(a), [np.concatenate([R.uniform(-3, 3, 6), [0.0, 1e-3, -0.02]])]),
    "diff": (lambda a: np.diff(a), [R.standard_normal((3, 4))]),
    "diff n=2 axis=0": (lambda a: np.diff(a, 2, axis=0), [R.standard_normal((4, 3))]),
    "diff prepend append": (lambda a: np.diff(a, prepend=1.5, append=a[-1:] * 2.0),
                            [R.standard_normal(4)]),
    "ediff1d": (lambda a: np.ediff1d(a, to_end=[7.0], to_begin=a[:1] * 3.0),
                [R.standard_normal((2, 3))]),
    "cross 3x3": (lambda a, b: np.cross(a, b), [R.standard_normal((4, 3)), R.standard_normal(3)]),
    "cross axes": (lambda a, b: np.cross(a, b, axisa=0, axisb=1, axisc=0),
                   [R.standard_normal((3, 2)), R.standard_normal((2, 3))]),
    "cross 2x3": (lambda a, b: np.cross(a, b), [R.standard_normal((2, 2)), R.standard_normal((2, 3))]),
    "trapezoid dx": (lambda y: np.trapezoid(y, dx=0.3), [R.standard_normal((3, 5))]),
    "trapezoid x": (lambda y, x: np.trapezoid(y, x), [R.standard_normal(5), _sorted_grid(5)]),
    "trapezoid x axis": (lambda y, x: np.trapezoid(y, x, axis=0),
                         [R.standard_normal((4, 2)), _sorted_grid(4)]),
    "polyval": (lambda p, x: np.polyval(p, x), [R.standard_normal(4), R.standard_normal((2, 3))]),
    "convolve full": (lambda a, v: np.convolve(a, v), [R.standard_normal(6), R.standard_normal(3)]),
    "convolve same": (lambda a, v: np.convolve(a, v, "same"), [R.standard_normal(3),
                                                               R.standard_normal(6)]),
    "convolve valid": (lambda a, v: np.convolve(a, v, "valid"), [R.standard_normal(6),
                                                                 R.standard_normal(4)]),
    "correlate": (lambda a, v: np.correlate(a, v), [R.standard_normal(6), R.standard_normal(3)]),
    "correlate full": (lambda a, v: np.correlate(a, v, "full"), [R.standard_normal(3),
                                                                 R.standard_normal(5)]),
    "correlate same": (lambda a, v: np.correlate(a, v, "same"), [R.standard_normal(4),
                                                                 R.standard_normal(4)]),
    "interp x fp": (lambda x, fp: np.interp(x, [0.0, 1.0, 2.5, 3.0], fp),
                    [np.array([-0.5, 0.3, 1.2, 2.7, 3.5]), R.standard_normal(4)]),
    "interp xp": (lambda xp: np.interp(np.array([0.7, 1.9, 2.2]), xp, [1.0, -2.0, 0.5, 3.0]),
                  [np.array([0.0, 1.0, 2.0, 3.0])]),
    "interp left right": (lambda x: np.interp(x, [0.0, 1.0], [2.0, 4.0], left=-1.0, right=9.0),
                          [np.array([-1.0, 0.25, 0.75, 2.0])]),
    "gradient": (lambda f: np.gradient(f), [R.standard_normal(6)]),
    "gradient spacing 2d": (lambda f: np.gradient(f, 0.5, axis=1), [R.standard_normal((3, 5))]),
    "gradient edge 2": (lambda f: np.gradient(f, 0.7, edge_order=2), [R.standard_normal(5)]),
    "gradient coordinates": (lambda f, x: np.gradient(f, x), [R.standard_normal(6), _sorted_grid(6)]),
    "gradient coordinates edge 2": (lambda f, x: np.gradient(f, x, edge_order=2),
                                    [R.standard_normal(6), _sorted_grid(6)]),
    "gradient 2d tuple": (lambda f: np.gradient(f, 1.0, 0.5)[0] + np.gradient(f, 1.0, 0.5)[1] * 2.0,
                          [R.standard_normal((4, 3))]),
    "linspace": (lambda a, b: np.linspace(a, b, 7), [R.standard_normal(()), R.standard_normal(())]),
    "linspace arrays axis": (lambda a, b: np.linspace(a, b, 4, axis=-1, endpoint=False),
                             [R.standard_normal(3), R.standard_normal((2, 3))]),
    "linspace int dtype": (lambda a: np.linspace(a, 3.0, 6, dtype=np.int64) * 1.0 + a,
                           [np.array(-2.5)]),
    "geomspace": (lambda a, b: np.geomspace(a, b, 5), [np.array(0.5), np.array(8.0)]),
    "geomspace negative": (lambda a, b: np.geomspace(a, b, 4, endpoint=False),
                           [np.array([-0.5, -2.0]), np.array([-8.0, -1.0])]),
    "concatenate dtype": (lambda a, b: np.concatenate([a, b], dtype=np.float64),
                          [R.standard_normal(2), R.standard_normal(3)]),
    "concatenate axis None": (lambda a, b: np.concatenate([a, b], axis=None),
                              [R.standard_normal((2, 2)), R.standard_normal(3)]),
    "stack dtype": (lambda a, b: np.stack([a, b], axis=1, dtype=np.float64),
                    [R.standard_normal(2), R.standard_normal(2)]),
    "vstack dtype": (lambda a, b: np.vstack([a, b], dtype=np.float64),
                     [R.standard_normal(2), R.standard_normal((2, 2))]),
    "hstack casting": (lambda a, b: np.hstack([a, b], casting="same_kind"),
                       [R.standard_normal(2), R.standard_normal(2)]),
    "where": (lambda a, b: np.where(a > 0, a * b, b), [R.standard_normal(4), R.standard_normal(4)]),
    # statistics (ops/statistics.py): quantiles interpolate between order statistics
    "median odd": (lambda a: np.median(a), [R.standard_normal(7)]),
    "median even axis keepdims": (lambda a: np.median(a, axis=1, keepdims=True),
                                  [R.standard_normal((3, 4))]),
    "median axes": (lambda a: np.median(a, axis=(0, 2)), [R.standard_normal((2, 3, 3))]),
    "quantile linear": (lambda a: np.quantile(a, [0.1, 0.5, 0.93], axis=0),
                        [R.standard_normal((6, 2))]),
    "quantile q grid keepdims": (lambda a: np.quantile(a, np.array([[0.2, 0.7], [0.05, 1.0]]),
                                                       axis=-1, keepdims=True),
                                 [R.standard_normal((2, 5))]),
    "quantile hazen": (lambda a: np.quantile(a, [0.0, 0.3, 0.8], method="hazen"),
                       [R.standard_normal((3, 3))]),
    "quantile weibull": (lambda a: np.quantile(a, 0.4, axis=1, method="weibull"),
                         [R.standard_normal((2, 6))]),
    "quantile median_unbiased": (lambda a: np.quantile(a, [0.25, 0.6], method="median_unbiased"),
                                 [R.standard_normal(9)]),
    "quantile normal_unbiased": (lambda a: np.quantile(a, 0.35, method="normal_unbiased"),
                                 [R.standard_normal(8)]),
    "quantile interpolated_inverted_cdf": (
        lambda a: np.quantile(a, [0.3, 0.9], method="interpolated_inverted_cdf"),
        [R.standard_normal(7)]),
    "quantile midpoint": (lambda a: np.quantile(a, [0.3, 0.5], method="midpoint"),
                          [R.standard_normal(6)]),
    "quantile averaged_inverted_cdf": (
        lambda a: np.quantile(a, [0.25, 0.4], method="averaged_inverted_cdf"), [R.standard_normal(8)]),
    "quantile discrete": (lambda a: sum(np.quantile(a, [0.3, 0.75], method=m) * (i + 1.0)
                                        for i, m in enumerate(["lower", "higher", "nearest",
                                                               "inverted_cdf",
                                                               "closest_observation"])),
                          [R.standard_normal(7)]),
    "percentile": (lambda a: np.percentile(a, [10, 50, 99], axis=0), [R.standard_normal((5, 3))]),
    "cov": (lambda m: np.cov(m), [R.standard_normal((3, 5))]),
    "cov y rowvar bias": (lambda m, y: np.cov(m, y, rowvar=False, bias=True),
                          [R.standard_normal((6, 2)), R.standard_normal(6)]),
    "cov ddof fweights aweights": (lambda m: np.cov(m, ddof=2, fweights=[1, 2, 1, 3, 1, 2],
                                                    aweights=[0.5, 1.0, 2.0, 1.5, 0.7, 1.1]),
                                   [R.standard_normal((2, 6))]),
    "cov tensor aweights": (lambda m, w: np.cov(m, aweights=w * w + 0.5),
                            [R.standard_normal((2, 5)), R.standard_normal(5)]),
    "corrcoef": (lambda x, y: np.corrcoef(x, y), [R.standard_normal((2, 6)), R.standard_normal(6)]),
    "polyfit": (lambda x, y: np.polyfit(x, y, 2), [_sorted_grid(6), R.standard_normal(6)]),
    "polyfit w 2d": (lambda y, w: np.polyfit(np.linspace(0.0, 1.0, 7), y, 1, w=w),
                     [R.standard_normal((7, 2)), R.uniform(0.5, 2.0, 7)]),
    "polyfit cov": (lambda y: np.polyfit(np.linspace(-1.0, 1.0, 6), y, 1, cov=True)[1],
                    [R.standard_normal(6)]),
    "vander": (lambda x: np.vander(x, 4), [R.standard_normal(3)]),
    "vander increasing": (lambda x: np.vander(x, increasing=True), [R.standard_normal(4)]),
    # array builders (ops/arrays.py)
    "meshgrid xy": (lambda x, y: np.meshgrid(x, y)[0] * 2.0 + np.meshgrid(x, y)[1],
                    [R.standard_normal(3), R.standard_normal(2)]),
    "meshgrid ij sparse": (lambda x, y, z: sum(np.meshgrid(x, y, z, indexing="ij", sparse=True)),
                           [R.standard_normal(2), R.standard_normal(3), R.standard_normal(2)]),
    "broadcast_arrays": (lambda a, b: np.broadcast_arrays(a, b)[0] * np.broadcast_arrays(a, b)[1],
                         [R.standard_normal((3, 1)), R.standard_normal(4)]),
    "insert": (lambda a, v: np.insert(a, [1, 1, 3], v), [R.standard_normal((2, 2)),
                                                        R.standard_normal(3)]),
    "insert axis": (lambda a, v: np.insert(a, 1, v, axis=1), [R.standard_normal((3, 2)),
                                                             R.standard_normal(3)]),
    "delete": (lambda a: np.delete(a, [0, 2], axis=1), [R.standard_normal((2, 4))]),
    "delete mask flat": (lambda a: np.delete(a, [True, False, False, True, True, False]),
                         [R.standard_normal((2, 3))]),
    "diagflat": (lambda v: np.diagflat(v, 1), [R.standard_normal((2, 2))]),
    "piecewise": (lambda x: np.piecewise(x, [x < -0.5, x > 0.5], [lambda v: v * v, np.sin, 0.25]),
                  [np.array([-1.3, -0.9, -0.1, 0.2, 0.8, 1.7])]),
    "apply_along_axis": (lambda a: np.apply_along_axis(lambda r: r * r.sum(), 0, a),
                         [R.standard_normal((3, 2))]),
    "apply_along_axis scalar": (lambda a: np.apply_along_axis(lambda r: np.tanh(r).prod(), 1, a),
                                [R.standard_normal((2, 3, 2))]),
    "hfft": (lambda a: np.fft.hfft(a, norm="ortho"), [R.standard_normal(4)]),
    "ihfft": (lambda a: np.fft.ihfft(a, 6).imag, [R.standard_normal(5)]),
    # ufunc methods (ops/ufunc_methods.py)
    "add.reduce": (lambda a: np.add.reduce(a, axis=1, keepdims=True), [R.standard_normal((2, 3))]),
    "maximum.reduce": (lambda a: np.maximum.reduce(a), [R.standard_normal((3, 2))]),
    "subtract.reduce": (lambda a: np.subtract.reduce(a, axis=-1), [R.standard_normal((2, 4))]),
    "divide.reduce initial": (lambda a: np.divide.reduce(a, initial=2.0),
                              [R.uniform(0.5, 2.0, (3, 2))]),
    "logaddexp.reduce": (lambda a: np.logaddexp.reduce(a, axis=0), [R.standard_normal((4, 2))]),
    "multiply.accumulate": (lambda a: np.multiply.accumulate(a, axis=1),
                            [R.standard_normal((2, 4))]),
    "add.accumulate": (lambda a: np.add.accumulate(a), [R.standard_normal((3, 2))]),
    "maximum.accumulate": (lambda a: np.maximum.accumulate(a), [R.permutation(6) + 0.1]),
    "hypot.accumulate": (lambda a: np.hypot.accumulate(a, axis=-1), [R.standard_normal((2, 3))]),
    "subtract.outer": (lambda a, b: np.subtract.outer(a, b), [R.standard_normal(3),
                                                            R.standard_normal((2, 2))]),
    "multiply.outer": (lambda a, b: np.multiply.outer(a, b), [R.standard_normal((2, 2)),
                                                            R.standard_normal(3)]),
    "arctan2.outer": (lambda a, b: np.arctan2.outer(a, b), [R.standard_normal(2),
                                                          R.uniform(0.5, 1.0, 3)]),
}
if hasattr(np, "row_stack"):
    CASES["row_stack"] = (lambda a, b: _quiet(np.row_stack, [a, b]),
                          [R.standard_normal(2), R.standard_normal(2)])


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return fn(*args)


def _cross_quiet(fn):
    def run(*xs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 2-vectors in NumPy 2
            return fn(*xs)
    return run


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_equals_numpy(name):
    fn, arrays = CASES[name]
    fn = _cross_quiet(fn)
    ref = fn(*[a.copy() for a in arrays])
    got = fn(*[tg.tensor(a) for a in arrays])
    assert isinstance(got, tg.Tensor)
    assert got.shape == np.shape(ref) and got.dtype == np.asarray(ref).dtype
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_and_second_order(name):
    fn, arrays = CASES[name]
    fn = _cross_quiet(fn)
    check_vjp(fn, arrays, np.random.default_rng(1))
    check_hvp(fn, arrays, np.random.default_rng(2))


def test_sinc_derivatives_at_zero_are_exact():
    x = leaf([0.0])
    np.sinc(x).sum().backward()
    assert x.grad.numpy()[0] == 0.0
    H = tg.hessian(lambda t: np.sinc(t).sum())(np.array([0.0]))
    np.testing.assert_allclose(H, [[-np.pi ** 2 / 3]], rtol=1e-14)


def test_interp_gradient_is_the_bin_slope():
    x = leaf([0.5, 1.0, 2.0, -1.0, 5.0])
    y = np.interp(x, [0.0, 1.0, 3.0], [0.0, 2.0, 3.0])
    np.testing.assert_allclose(y.numpy(), [1.0, 2.0, 2.5, 0.0, 3.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.5, 0.5, 0.0, 0.0])


def test_dtypes_follow_numpy():
    x32 = np.array([0.2, 0.7], np.float32)
    for fn in (lambda x: np.interp(x, [0.0, 1.0], [1.0, 2.0]),
               lambda x: np.interp(x, x, x), np.sinc, lambda x: np.convolve(x, x),
               np.trapezoid, lambda x: np.gradient(x), lambda x: np.diff(x),
               lambda x: np.linspace(x[0], x[1], 3), lambda x: np.nan_to_num(x)):
        ref = fn(x32)
        got = fn(tg.tensor(x32, requires_grad=True))
        assert got.dtype == ref.dtype, fn
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6)


def test_where_with_one_argument_gives_indices():
    t = tg.tensor([[0.0, 2.0], [3.0, 0.0]], requires_grad=True)
    got = np.where(t)
    ref = np.where(t.numpy())
    assert len(got) == 2 and all(isinstance(g, np.ndarray) for g in got)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
    np.testing.assert_array_equal(np.where(t > 1)[0], [0, 1])
    with pytest.raises(ValueError, match="either both or neither of x and y should be given"):
        np.where(t > 1, t)


def test_linspace_retstep_and_gradient_in_endpoints():
    a, b = leaf(1.0), leaf(3.0)
    y, step = np.linspace(a, b, 5, retstep=True)
    np.testing.assert_allclose(step.numpy(), 0.5)
    (y * np.arange(5.0)).sum().backward()
    # y_i = a + i (b - a) / 4 (the last is b itself)
    w = np.arange(5.0)
    np.testing.assert_allclose(a.grad.numpy(), (w[:-1] * (1 - np.arange(4) / 4)).sum())
    np.testing.assert_allclose(b.grad.numpy(), (w[:-1] * np.arange(4) / 4).sum() + 4.0)


@settings(max_examples=25, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=5),
       n=st.integers(0, 2), data=st.data())
def test_diff_any_shape(shape, n, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    if shape[axis] <= n:
        return
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    fn = lambda t: np.diff(t, n, axis=axis)  # noqa: E731
    np.testing.assert_allclose(fn(tg.tensor(x)).numpy(), fn(x), rtol=1e-15)
    if n:
        check_vjp(fn, [x], np.random.default_rng(0))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 7), m=st.integers(1, 7), mode=st.sampled_from(["full", "same", "valid"]))
def test_convolve_any_lengths(n, m, mode):
    rng = np.random.default_rng(n * 8 + m)
    a, v = rng.standard_normal(n), rng.standard_normal(m)
    for fn in (np.convolve, np.correlate):
        np.testing.assert_allclose(fn(tg.tensor(a), tg.tensor(v), mode).numpy(), fn(a, v, mode),
                                   rtol=1e-13, atol=1e-14)
    check_vjp(lambda x, y: np.convolve(x, y, mode), [a, v], rng)


@pytest.mark.parametrize("shifts_max", [0, 64])
def test_convolve_both_constructions(monkeypatch, shifts_max):
    from tapegrad.ops import sampled
    monkeypatch.setattr(sampled, "SHIFTS_MAX", shifts_max)
    rng = np.random.default_rng(11)
    for n, m in [(7, 3), (3, 7), (5, 5), (1, 4)]:
        a, v = rng.standard_normal(n), rng.standard_normal(m)
        for mode in ("full", "same", "valid"):
            fn = lambda x, y: np.convolve(x, y, mode)  # noqa: E731
            np.testing.assert_allclose(fn(tg.tensor(a), tg.tensor(v)).numpy(), fn(a, v),
                                       rtol=1e-13, atol=1e-14)
            check_vjp(fn, [a, v], rng)
        check_hvp(lambda x, y: np.correlate(x, y, "same"), [a, v], rng)


@settings(max_examples=20, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=3, max_side=5),
       edge=st.sampled_from([1, 2]), data=st.data())
def test_gradient_any_shape(shape, edge, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    rng = np.random.default_rng(sum(shape))
    f = rng.standard_normal(shape)
    x = np.cumsum(rng.uniform(0.2, 1.0, shape[axis]))
    got = np.gradient(tg.tensor(f), tg.tensor(x), axis=axis, edge_order=edge)
    np.testing.assert_allclose(got.numpy(), np.gradient(f, x, axis=axis, edge_order=edge),
                               rtol=1e-12, atol=1e-12)


# -- error paths -------------------------------------------------------------------------
ERRORS = [
    (lambda t: np.rot90(t, axes=(0, 0)), ValueError, "Axes must be different"),
    (lambda t: np.rot90(t, axes=(0,)), ValueError, "len\\(axes\\) must be 2"),
    (lambda t: np.rot90(t, axes=(0, 5)), ValueError, "out of range"),
    (lambda t: np.rollaxis(t, 3), np.exceptions.AxisError, "out of bounds"),
    (lambda t: np.rollaxis(t, 0, 4), np.exceptions.AxisError, "start=4 must satisfy"),
    (lambda t: np.dsplit(t, 2), ValueError, "3 or more dimensions"),
    (lambda t: np.diff(t, -1), ValueError, "order must be non-negative"),
    (lambda t: np.diff(t[0, 0]), ValueError, "at least one dimensional"),
    (lambda t: np.cross(t[:, :1], t), ValueError, "incompatible dimensions for cross product"),
    (lambda t: np.polyval(t, 2.0), TypeError, "1-D sequence"),
    (lambda t: np.convolve(t, t), ValueError, "1-D inputs only"),
    (lambda t: np.convolve(t[0], t[0][:0]), ValueError, "v cannot be empty"),
    (lambda t: np.convolve(t[0][:0], t[0]), ValueError, "a cannot be empty"),
    (lambda t: np.convolve(t[0], t[0], "wide"), ValueError, "mode must be one of"),
    (lambda t: np.interp(t[0], [0.0, 1.0], [0.0, 1.0], period=2.0), TypeError,
     "period=...\\) is not supported"),
    (lambda t: np.interp(t[0], [0.0, 1.0], [0.0, 1.0, 2.0]), ValueError, "not of the same length"),
    (lambda t: np.interp(t[0], [], []), ValueError, "empty"),
    (lambda t: np.interp(t[0], t, t), ValueError, "must be 1-D"),
    (lambda t: np.gradient(t[0], edge_order=3), ValueError, "not supported"),
    (lambda t: np.gradient(t[0][:1]), ValueError, "too small"),
    (lambda t: np.gradient(t[0], 1.0, 2.0), TypeError, "invalid number of arguments"),
    (lambda t: np.gradient(t[0], [1.0, 2.0, 3.0]), ValueError, "distances must match"),
    (lambda t: np.gradient(t, axis=(0, 0)), ValueError, "duplicate value"),
    (lambda t: np.linspace(t[0, 0], 1.0, -1), ValueError, "must be non-negative"),
    (lambda t: np.geomspace(t[0, 0] * 0.0, 1.0), ValueError, "cannot include zero"),
    (lambda t: np.geomspace(-t[0, 0] - 1.0, 1.0), ValueError, "different signs"),
    (lambda t: np.concatenate([t, t], dtype=np.int32), TypeError,
     "cannot cast array data from dtype\\('float64'\\) to dtype\\('int32'\\) according to the "
     "rule 'same_kind'"),
    (lambda t: np.concatenate([t, t], out=np.empty((4, 2))), TypeError, "out=...\\) cannot"),
    (lambda t: np.stack([t, t.astype(np.float32)], casting="no"), TypeError, "rule 'no'"),
    (lambda t: np.vstack([t, t], dtype=np.int8, casting="safe"), TypeError, "rule 'safe'"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors(i):
    fn, exc, match = ERRORS[i]
    t = leaf(np.abs(R.standard_normal((2, 2))) + 0.5)
    with pytest.raises(exc, match=match):
        fn(t)
    # nothing was left half-done: the tensor still differentiates
    (t * 2.0).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.full((2, 2), 2.0))


def test_traced_interp_replays_new_bins():
    f = tg.trace(lambda x: np.interp(x, [0.0, 1.0, 2.0], [0.0, 1.0, 4.0]).sum(),
                 np.array([0.5]))
    np.testing.assert_allclose(f(np.array([0.5])), 0.5)
    np.testing.assert_allclose(f(np.array([1.5])), 2.5)  # another bin: guarded
    np.testing.assert_allclose(f.grad(np.array([1.5])), [3.0])
