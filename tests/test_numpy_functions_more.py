"""NumPy's statistics, array builders and ufunc methods on tensors, where
tests/test_surface.py's table (one differentiable tensor result) does not
reach: exact values over every quantile method, axis and keepdims; NaN
slices; histogram's integer counts and differentiable edges; the in-place
writes (``ufunc.at``, ``fill_diagonal``), checked against NumPy on ndarrays
and their gradients against float64 central differences; the errors.
"""
import numpy as np
import pytest

import tapegrad as tg

from oracle import check_hvp, check_vjp, leaf

R = np.random.default_rng(7)
A3 = R.standard_normal((4, 5, 3))
METHODS = ["inverted_cdf", "averaged_inverted_cdf", "closest_observation",
           "interpolated_inverted_cdf", "hazen", "weibull", "linear", "median_unbiased",
           "normal_unbiased", "lower", "higher", "midpoint", "nearest"]
QS = [0.0, 0.1, 0.5, 0.77, 1.0, [0.2, 0.9], np.array([[0.05, 0.3], [0.6, 0.99]])]
AXES = [None, 0, -1, (0, 2)]


@pytest.mark.parametrize("method", METHODS)
def test_quantile_equals_numpy_bit_for_bit(method):
    t = tg.tensor(A3)
    for q in QS:
        for axis in AXES:
            for keepdims in (False, True):
                want = np.quantile(A3, q, axis=axis, method=method, keepdims=keepdims)
                got = np.quantile(t, q, axis=axis, method=method, keepdims=keepdims)
                assert got.shape == np.shape(want) and got.dtype == want.dtype
                np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("fn", [
    lambda a, **k: np.median(a, **k),
    lambda a, **k: np.percentile(a, [3, 50, 97.5], **k),
    lambda a, **k: np.quantile(a, 0.3, **k),
], ids=["median", "percentile", "quantile"])
def test_order_statistics_axes_dtypes_and_nan(fn):
    for axis in [None, 0, 1, 2, (0, 1)]:
        for keepdims in (False, True):
            want = fn(A3, axis=axis, keepdims=keepdims)
            got = fn(tg.tensor(A3), axis=axis, keepdims=keepdims)
            assert got.shape == np.shape(want)
            np.testing.assert_array_equal(got.numpy(), want)
    x32 = A3[0].astype(np.float32)        # float32 data, Python q: a float32 result
    assert fn(tg.tensor(x32)).dtype == fn(x32).dtype
    np.testing.assert_array_equal(fn(tg.tensor(x32)).numpy(), fn(x32))
    ints = np.arange(7) % 4                  # integers compute in float64
    np.testing.assert_array_equal(fn(tg.tensor(ints)).numpy(), fn(ints))
    nan = A3[0].copy()
    nan[1, 2] = np.nan                       # the slices that hold it give NaN
    for axis in (None, 0, 1):
        np.testing.assert_array_equal(fn(tg.tensor(nan), axis=axis).numpy(), fn(nan, axis=axis))


def test_quantile_gradient_goes_to_the_interpolated_order_statistics():
    x = leaf([4.0, 1.0, 3.0, 2.0])
    np.quantile(x, 0.3).backward()           # 1.9: 0.1 of 1.0 and 0.9 of 2.0
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.1, 0.0, 0.9], rtol=1e-15)
    y = leaf([4.0, 1.0, 3.0, 2.0])
    np.median(y).backward()
    np.testing.assert_array_equal(y.grad.numpy(), [0.0, 0.0, 0.5, 0.5])


def test_quantile_forward_mode_and_trace():
    x = np.array([0.3, -1.2, 2.5, 0.7, 1.1])
    _, t = tg.jvp(lambda a: np.quantile(a, [0.25, 0.8]), (x,), (np.arange(5.0),))
    # 0.25: the 2nd order statistic (0.3, element 0); 0.8: 0.8 of the 4th (1.1,
    # element 4) and 0.2 of the 5th (2.5, element 2)
    np.testing.assert_allclose(t, [0.0, 0.8 * 4 + 0.2 * 2], rtol=1e-14)
    f = tg.trace(lambda a: np.median(a) * 2.0, x)
    np.testing.assert_array_equal(tg.grad(f)(x), [0.0, 0.0, 0.0, 2.0, 0.0])
    # other values order differently: the guard traces again
    np.testing.assert_array_equal(tg.grad(f)(x[::-1].copy()), [0.0, 2.0, 0.0, 0.0, 0.0])


# -- cov, corrcoef, polyfit ------------------------------------------------------------------
X = R.standard_normal((3, 6))
Y = R.standard_normal((2, 6))
FW = np.array([1, 2, 0, 3, 1, 1])
AW = R.uniform(0.5, 2.0, 6)
COV_OPTIONS = [{}, dict(bias=True), dict(ddof=2), dict(fweights=FW), dict(aweights=AW),
               dict(fweights=FW, aweights=AW), dict(fweights=FW, aweights=AW, ddof=0),
               dict(aweights=AW, bias=True)]


@pytest.mark.parametrize("kw", COV_OPTIONS, ids=str)
def test_cov_and_corrcoef_equal_numpy(kw):
    for args, rowvar in [((X,), True), ((X, Y), True), ((X[0],), True), ((X[0], X[1]), True),
                         ((X.T,), False), ((X.T, Y.T), False)]:
        want = np.cov(*args, rowvar=rowvar, **kw)
        got = np.cov(*[tg.tensor(a) for a in args], rowvar=rowvar, **kw)
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-14, atol=1e-15)
    for args in [(X,), (X, Y), (X[0], X[1])]:
        np.testing.assert_allclose(np.corrcoef(*[tg.tensor(a) for a in args]).numpy(),
                                   np.corrcoef(*args), rtol=1e-14, atol=1e-15)


def test_polyfit_full_and_unscaled_cov():
    x, y = np.linspace(0.0, 2.0, 8), R.standard_normal(8)
    for got, want in zip(np.polyfit(tg.tensor(x), tg.tensor(y), 2, full=True),
                         np.polyfit(x, y, 2, full=True)):
        got = got.numpy() if isinstance(got, tg.Tensor) else got
        np.testing.assert_allclose(got, want, rtol=1e-12)
    gc, gv = np.polyfit(tg.tensor(x), y, 1, cov="unscaled")
    wc, wv = np.polyfit(x, y, 1, cov="unscaled")
    np.testing.assert_allclose(gv.numpy(), wv, rtol=1e-12)
    check_vjp(lambda b: np.polyfit(x, b, 3, full=True)[1], [y], np.random.default_rng(0))


# -- histogram -----------------------------------------------------------------------------
H = R.standard_normal(20)
HIST_OPTIONS = [dict(), dict(bins=4), dict(bins=[-1.0, 0.0, 0.5, 2.0]),
                dict(bins=5, range=(-1, 1)), dict(bins="auto"), dict(density=True),
                dict(bins=3, density=True, range=(-2, 2))]


@pytest.mark.parametrize("kw", HIST_OPTIONS, ids=str)
def test_histogram_counts_are_plain_and_edges_equal_numpy(kw):
    want_h, want_e = np.histogram(H, **kw)
    got_h, got_e = np.histogram(tg.tensor(H, requires_grad=True), **kw)
    if not kw.get("density"):
        assert type(got_h) is np.ndarray and got_h.dtype == want_h.dtype
    np.testing.assert_array_equal(np.asarray(getattr(got_h, "numpy", lambda: got_h)()), want_h)
    assert isinstance(got_e, tg.Tensor)
    np.testing.assert_array_equal(got_e.numpy(), want_e)


def test_histogram_gradients_of_edges_and_weights():
    rng = np.random.default_rng(3)
    # edges from the data range: linspace(min, max), differentiable in both ends
    check_vjp(lambda a: np.histogram(a, bins=3)[1], [H[:6]], rng)
    w = rng.uniform(0.2, 1.0, 20)
    got = np.histogram(tg.tensor(H), bins=4, weights=tg.tensor(w))[0]
    np.testing.assert_allclose(got.numpy(), np.histogram(H, bins=4, weights=w)[0], rtol=1e-14)
    check_vjp(lambda v: np.histogram(H, bins=4, weights=v, density=True)[0], [w], rng)
    assert np.histogram(tg.tensor(np.ones(3)), bins=2)[1].numpy().tolist() == [0.5, 1.0, 1.5]


# -- in-place writes -----------------------------------------------------------------------
A = R.uniform(0.5, 2.0, (3, 4))
AT_CASES = {
    "add repeated rows": (np.add, [0, 1, 1, 2, 1], R.standard_normal((5, 4))),
    "multiply pairs": (np.multiply, ([0, 0, 2], [1, 1, 3]), R.uniform(0.5, 2.0, 3)),
    "maximum broadcast": (np.maximum, [2, 2], np.array(1.7)),
    "subtract slice": (np.subtract, (slice(None), [0, 0]), R.standard_normal((3, 2))),
    "negative": (np.negative, [1, 1, 0], None),
    "add mask": (np.add, np.array([[True, False, True, False]] * 3), np.array(0.5)),
    "divide": (np.divide, ([1, 2, 1], [3, 0, 3]), R.uniform(0.5, 2.0, 3)),
}


def _at(ufunc, idx, with_b):
    def run(x, *b):
        y = x * 1.0
        if with_b:
            ufunc.at(y, idx, b[0])
        else:
            ufunc.at(y, idx)
        return y
    return run


@pytest.mark.parametrize("name", sorted(AT_CASES))
def test_ufunc_at_writes_in_place_as_numpy(name):
    ufunc, idx, b = AT_CASES[name]
    want = A.copy()
    t = tg.tensor(A.copy())
    if b is None:
        ufunc.at(want, idx)
        assert ufunc.at(t, idx) is None
    else:
        ufunc.at(want, idx, b)
        assert ufunc.at(t, idx, b) is None
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-15, atol=0)
    fn = _at(ufunc, idx, b is not None)
    arrays = [A] if b is None else [A, b]
    check_vjp(fn, arrays, np.random.default_rng(4))
    check_hvp(fn, arrays, np.random.default_rng(5))


FILL_CASES = [((3, 3), False, np.array(5.0)), ((5, 3), False, np.array([1.0, 2.0])),
              ((5, 3), True, np.array([1.0, 2.0])), ((2, 2, 2), False, np.array(7.0)),
              ((3, 4), False, np.array([1.0, 2.0, 3.0]))]


@pytest.mark.parametrize("shape, wrap, val", FILL_CASES, ids=str)
def test_fill_diagonal_in_place(shape, wrap, val):
    want = np.arange(np.prod(shape), dtype=float).reshape(shape)
    t = tg.tensor(want.copy())
    np.fill_diagonal(want, val, wrap=wrap)
    assert np.fill_diagonal(t, val, wrap=wrap) is None
    np.testing.assert_array_equal(t.numpy(), want)

    def fn(x, v):
        y = x * 1.0
        np.fill_diagonal(y, v * v, wrap=wrap)
        return y
    check_vjp(fn, [R.standard_normal(shape), val], np.random.default_rng(6))


# -- errors ----------------------------------------------------------------------------------
ERRORS = [
    (lambda t: np.quantile(t, 1.5), ValueError, r"range \[0, 1\]"),
    (lambda t: np.percentile(t, -1), ValueError, r"range \[0, 100\]"),
    (lambda t: np.quantile(t, 0.5, method="cubic"), ValueError, "not a valid method"),
    (lambda t: np.quantile(t, 0.5, out=np.empty(())), TypeError, r"out=\.\.\."),
    (lambda t: np.quantile(t, 0.5, method="inverted_cdf", weights=np.ones(3)), TypeError,
     r"weights=\.\.\."),
    (lambda t: np.quantile(t, leaf(0.5)), TypeError, "q must be plain numbers"),
    (lambda t: np.median(t, out=np.empty(())), TypeError, r"out=\.\.\."),
    (lambda t: np.power.reduce(t), TypeError, "power.reduce is not supported"),
    (lambda t: np.add.accumulate(t, out=np.empty(3)), TypeError, r"out=\.\.\."),
    (lambda t: np.add.at(np.zeros(3), [0], t), TypeError, "must be the tensor"),
    (lambda t: np.add.at(t, [0], 1.0), RuntimeError, "leaf tensor that requires grad"),
    (lambda t: np.fill_diagonal(t, 1.0), ValueError, "at least 2-d"),
    (lambda t: np.cov(t, fweights=[1.5, 1, 1]), TypeError, "fweights must be integer"),
    (lambda t: np.polyfit(t, t, -1), ValueError, "deg >= 0"),
    (lambda t: np.piecewise(t, [t > 0], [1.0, 2.0, 3.0]), ValueError, "functions are expected"),
]


@pytest.mark.parametrize("call, err, msg", ERRORS, ids=[m for _, _, m in ERRORS])
def test_errors(call, err, msg):
    with pytest.raises(err, match=msg):
        call(leaf([1.0, 3.0, 2.0]))
