"""The replay's logsumexp / softmax / log_softmax over trailing axes (each
row contiguous: ``replay_families._softmax_rows``) against the eager ops,
SciPy and central differences, with rows of infinities and NaN."""
import numpy as np
import pytest
import scipy.special as sp

import tapegrad as tg
from tapegrad.kernels import interpret

RNG = np.random.default_rng(5)

OPS = {
    "logsumexp": (tg.logsumexp, sp.logsumexp),
    "softmax": (tg.softmax, sp.softmax),
    "log_softmax": (tg.log_softmax, sp.log_softmax),
}


def _replayed(op, x, axis):
    with interpret.mode(0):
        ft = tg.trace(lambda v: op(v, axis=axis) * 1.0, x)
        return np.asarray(ft(x)), ft


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape, axis", [((7, 33), 1), ((7, 33), -1), ((3, 4, 5), (1, 2)),
                                         ((50,), 0), ((7, 33), None), ((7, 33), 0),
                                         ((3, 4, 5), 1)])
def test_values_match_the_eager_op_and_scipy(name, shape, axis):
    op, ref = OPS[name]
    x = RNG.normal(size=shape) * 5
    got, ft = _replayed(op, x, axis)
    want = np.asarray(op(tg.tensor(x), axis=axis))
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(got, ref(x, axis=axis), rtol=1e-13, atol=1e-14)
    x2 = RNG.normal(size=shape)  # another input than the traced one
    np.testing.assert_allclose(np.asarray(ft(x2)), ref(x2, axis=axis), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", sorted(OPS))
def test_rows_with_infinities_and_nan(name):
    op, ref = OPS[name]
    x = RNG.normal(size=(6, 5))
    x[1, 2] = np.inf
    x[2, :] = -np.inf
    x[3, 0] = np.nan
    x[4, 1] = -np.inf
    x[5, :] = np.inf
    got, _ = _replayed(op, x, 1)
    with np.errstate(all="ignore"):
        want = np.asarray(op(tg.tensor(x), axis=1))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradient_by_central_differences(name):
    op, _ = OPS[name]
    W = RNG.normal(size=(4, 9))
    f = lambda v: (W[:, :v.shape[1]] * op(v, axis=1)).sum() if name != "logsumexp" \
        else (W[:, 0] * op(v, axis=1)).sum()  # noqa: E731
    x = RNG.normal(size=(4, 9))
    with interpret.mode(0):
        ft = tg.trace(f, x)
        v, g = ft.value_and_grad(x * 0.5)
    h = 1e-6
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        fd[idx] = (float(f(tg.tensor(x * 0.5 + e))) - float(f(tg.tensor(x * 0.5 - e)))) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
