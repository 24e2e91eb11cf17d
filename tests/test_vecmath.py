"""kernels/vecmath.py: the compiled kernels' exp and log.

They are reached the way every program reaches them: a traced function's
replay (``rules.f_unary`` in compiled code).  Oracles: 120-bit references
(mpmath) for the error in ulps, NumPy for every special value, and the
gradients of programs that use them against central differences.
"""
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad.kernels import interpret

mpmath.mp.prec = 120


def _compiled(fn, x):
    """``fn`` (np.exp or np.log) of x, replayed by compiled code."""
    with interpret.mode(0):
        ft = tg.trace(lambda v: fn(v) * 1.0, x)
        return np.asarray(ft(x))


def _ulps(got, x, ref_fn):
    out = []
    for g, v in zip(got, x):
        ref = ref_fn(mpmath.mpf(float(v)))
        rf = float(ref)
        if rf == 0.0 or not math.isfinite(rf):
            out.append(0.0 if g == rf else math.inf)
            continue
        out.append(float(abs(mpmath.mpf(float(g)) - ref) / mpmath.mpf(float(np.spacing(abs(rf))))))
    return np.array(out)


RNG = np.random.default_rng(11)
EXP_X = np.concatenate([RNG.uniform(-745.0, 709.7, 1500), RNG.uniform(-1, 1, 1000),
                        RNG.uniform(-1e-6, 1e-6, 200), RNG.uniform(-745.13, -708.0, 300)])
LOG_X = np.concatenate([np.exp(RNG.uniform(-700, 700, 1500)), RNG.uniform(0.5, 2, 1000),
                        1 + RNG.uniform(-1e-6, 1e-6, 200), RNG.uniform(1e-320, 1e-307, 300)])


@pytest.mark.parametrize("fn, xs, ref", [(np.exp, EXP_X, mpmath.exp),
                                         (np.log, LOG_X, mpmath.log)])
def test_within_one_ulp_of_the_exact_value(fn, xs, ref):
    u = _ulps(_compiled(fn, xs), xs, ref)
    assert u.max() < 1.0, (u.max(), xs[u.argmax()])
    assert (u > 0.5).mean() < 0.05  # all but a few are the correctly rounded result


TANH_X = np.concatenate([RNG.uniform(-1, 1, 1500), RNG.uniform(-25, 25, 800),
                         RNG.uniform(-1e-3, 1e-3, 300), RNG.uniform(-0.4, 0.4, 800),
                         np.exp(RNG.uniform(-40, 1, 300))])


def test_tanh_within_one_and_a_half_ulp():
    u = _ulps(_compiled(np.tanh, TANH_X), TANH_X, mpmath.tanh)
    assert u.max() < 1.5, (u.max(), TANH_X[u.argmax()])
    assert (u > 0.5).mean() < 0.12


@pytest.mark.parametrize("fn, xs", [
    (np.tanh, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 5e-324, 20.0, 20.1,
               -25.0, 0.3465, 0.34657359027997264, 0.3466, -0.3466, 710.0, -1e308]),
    (np.exp, [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 709.78, 709.79, 710.0, 1e308,
              -745.13, -745.14, -746.0, -1e308, -708.4, 5e-324, -5e-324, 1.0, -1.0]),
    (np.log, [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 5e-324, 2.2250738585072014e-308,
              1.7976931348623157e308, 1.0, 2.0, 0.5, np.nextafter(1.0, 2.0),
              np.nextafter(1.0, 0.0)]),
])
def test_special_values_as_numpy(fn, xs):
    xs = np.array(xs)
    got = _compiled(fn, xs)
    with np.errstate(all="ignore"):
        want = fn(xs)
    np.testing.assert_array_equal(got, want)
    num = ~np.isnan(want)  # a NaN's sign means nothing
    assert (np.signbit(got[num]) == np.signbit(want[num])).all()


def test_common_values_are_correctly_rounded():
    xs = np.array([1.0, 2.0, 0.5, -1.0, 3.0, 10.0, 0.1, -0.5, 100.0, np.log(2.0)])
    np.testing.assert_array_equal(_compiled(np.exp, xs), [math.exp(v) for v in xs])
    xs = np.array([np.e, 10.0, 2.0, 3.0, 0.1, 7.0, 1e10, 5.0, 0.3, 1.5])
    np.testing.assert_array_equal(_compiled(np.log, xs), [math.log(v) for v in xs])


@given(st.lists(st.floats(-760.0, 720.0), min_size=1, max_size=40))
@settings(max_examples=40, deadline=None)
def test_exp_near_numpy(xs):
    x = np.array(xs)
    got = _compiled(np.exp, x)
    want = np.exp(x)
    ok = (got == want) | (np.abs(got - want) <= np.spacing(np.abs(want)))
    assert ok.all()


@given(st.lists(st.floats(0.0, 1.7e308, allow_subnormal=True), min_size=1, max_size=40))
@settings(max_examples=40, deadline=None)
def test_log_near_numpy(xs):
    x = np.array(xs)
    got = _compiled(np.log, x)
    with np.errstate(divide="ignore"):
        want = np.log(x)
    ok = (got == want) | (np.abs(got - want) <= np.spacing(np.abs(want)))
    assert ok.all()


def test_gradients_through_a_tanh_replay():
    rng = np.random.default_rng(3)
    W = rng.normal(size=(8, 5))
    f = lambda x: (np.tanh(W @ x) ** 2).sum() + np.tanh(x * 30.0).sum()  # noqa: E731
    x0 = rng.normal(size=5)
    with interpret.mode(0):
        ft = tg.trace(f, x0)
        for x in (x0, x0 * 0.01, x0 * 3.0):
            v, g = ft.value_and_grad(x)
            ve, ge = tg.value_and_grad(f)(x)
            assert v == pytest.approx(ve, rel=1e-14)
            np.testing.assert_allclose(g, ge, rtol=1e-12, atol=1e-13)
            h = 1e-7
            fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(5)])
            np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


def test_gradients_through_exp_and_log_replays():
    x0 = RNG.uniform(0.2, 3.0, 64)
    f = lambda x: (np.exp(np.log(x) * 1.5) + np.log(np.exp(-x) + x)).sum()  # noqa: E731
    with interpret.mode(0):
        ft = tg.trace(f, x0)
        for x in (x0, x0 * 0.7 + 0.1):
            v, g = ft.value_and_grad(x)
            assert v == pytest.approx(f(x), rel=1e-14)
            h = 1e-6
            fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(64)])
            np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(g, 1.5 * x ** 0.5 + (1 - np.exp(-x)) / (np.exp(-x) + x),
                                       rtol=1e-13)
