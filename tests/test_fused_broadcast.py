"""Fused runs through adds and subtractions of a smaller constant.

``x - m`` with m a constant broadcast into x (the row maxima of a
logsumexp, a bias that does not require grad) belongs to a run of large
elementwise records: its partial for x is the record's adjoint and the
constant gets none.  Random 2-D programs with such records are swept three
ways -- each run's own generated loop, the shared fused kernel, record by
record -- and must give the same bits; the broadcast records must be inside
a fused run (else the test would pass without the fusion), and the
gradients must match central differences and closed forms.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad.engine import fused as FB
from tapegrad.engine import fused_codegen as FC
from tapegrad.kernels import interpret

from oracle import compiled_grads

R, C = 513, 521            # R * C > FUSE_MIN, and a partial last block
assert R * C >= FB.FUSE_MIN

OPS = ("bsub", "rbsub", "badd", "rbadd", "exp", "sin", "mul", "sub", "bmul", "scale")
SHAPES = ((R, 1), (C,), (), (1, C), (1, 1))


def _program(rng, steps):
    """(op, operand indices, constant shape index) steps over a value list
    that starts with two leaves."""
    prog, n = [], 2
    for _ in range(steps):
        op = OPS[int(rng.integers(len(OPS)))]
        prog.append((op, (int(rng.integers(n)), int(rng.integers(n))),
                     int(rng.integers(len(SHAPES)))))
        n += 1
    return prog


def _constants(dtype):
    rng = np.random.default_rng(7)
    return [rng.uniform(-0.5, 0.5, s).astype(dtype) for s in SHAPES]


def _run(prog, xs, lib):
    ex, sn = (np.exp, np.sin) if lib == "np" else (tg.exp, tg.sin)
    cs = _constants(xs[0].dtype)
    vals = list(xs)
    for op, (i, j), k in prog:
        a, b, c = vals[i], vals[j], cs[k]
        v = {"bsub": lambda: a - c, "rbsub": lambda: c - a, "badd": lambda: a + c,
             "rbadd": lambda: c + a, "exp": lambda: ex(0.3 * a), "sin": lambda: sn(a),
             "mul": lambda: a * b, "sub": lambda: a - b, "bmul": lambda: a * c,
             "scale": lambda: 0.7 * a}[op]()
        vals.append(v)
    return (vals[-1] * vals[-1]).sum() * 1e-3


def _inputs(seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, (R, C)).astype(dtype) for _ in range(2)]


def _grads(prog, xs, fused=True):
    return compiled_grads(lambda *leaves: _run(prog, list(leaves), "tg"), xs, fused)


def _three_ways(prog, xs, monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    looped = _grads(prog, xs)
    monkeypatch.setenv(FC.ENV, "0")
    shared = _grads(prog, xs)
    plain = _grads(prog, xs, fused=False)
    for a, b, c in zip(looped, shared, plain):
        assert a.dtype == xs[0].dtype
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    return looped


def _broadcast_records_fused(prog, xs, monkeypatch):
    """How many records that broadcast a smaller operand into an add or a
    subtraction lie inside the fused runs of the program's backward."""
    from tapegrad.kernels._views import ARG0, ARGS, SIZE
    monkeypatch.setenv(FC.ENV, "now")
    found = set()
    saved = FB.sweep_run

    def spy(T, r0, r1, *a):
        for r in range(r0, r1):
            a0, a1 = int(T[ARG0][r]), int(T[ARG0][r + 1])
            if a1 - a0 == 2 and T[SIZE][r] == R * C:
                if min(int(T[SIZE][int(p)]) for p in T[ARGS][a0:a1]) < R * C:
                    found.add(r)
        return saved(T, r0, r1, *a)
    monkeypatch.setattr(FB, "sweep_run", spy)
    _grads(prog, xs)
    return len(found)


@pytest.mark.parametrize("seed", range(8))
def test_random_programs_same_bits_three_ways(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    prog, xs = _program(rng, 7), _inputs(seed)
    grads = _three_ways(prog, xs, monkeypatch)
    # central differences of the NumPy program along a random direction
    d = [np.random.default_rng(seed + 100).standard_normal((R, C)) for _ in xs]
    h = 1e-6
    up = _run(prog, [x + h * e for x, e in zip(xs, d)], "np")
    dn = _run(prog, [x - h * e for x, e in zip(xs, d)], "np")
    fd = (up - dn) / (2 * h)
    an = sum(float((g * e).sum()) for g, e in zip(grads, d))
    assert abs(fd - an) <= 1e-5 * max(1.0, abs(fd)), (prog, fd, an)


@pytest.mark.parametrize("seed", range(4))
def test_float32_programs_same_bits_three_ways(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    prog = _program(rng, 7)
    g32 = _three_ways(prog, _inputs(seed, np.float32), monkeypatch)
    g64 = _grads(prog, [x.astype(np.float64) for x in _inputs(seed, np.float32)])
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5 * np.abs(b).max())


@settings(max_examples=8, deadline=None)
@given(ops=st.lists(st.sampled_from(OPS), min_size=2, max_size=6),
       shape=st.integers(0, len(SHAPES) - 1), seed=st.integers(0, 1000))
def test_hypothesis_chains_same_bits_as_record_by_record(ops, shape, seed):
    # a chain: every step reads the last value (and the first leaf)
    prog = [(op, (k + 1, 0), shape) for k, op in enumerate(ops)]
    xs = _inputs(seed)
    with pytest.MonkeyPatch.context() as mp:
        _three_ways(prog, xs, mp)


def test_the_broadcast_records_are_inside_fused_runs(monkeypatch):
    # without the fusion every one of them would be swept record by record
    prog = [("exp", (0, 0), 0), ("bsub", (2, 0), 0), ("sin", (3, 0), 0), ("rbadd", (4, 0), 1),
            ("mul", (5, 1), 0), ("rbsub", (6, 0), 2)]
    xs = _inputs(3)
    _three_ways(prog, xs, monkeypatch)
    assert _broadcast_records_fused(prog, xs, monkeypatch) == 3


def test_a_broadcast_product_stays_out_of_the_run(monkeypatch):
    # x * c needs c's values at broadcast positions: swept record by record
    prog = [("bmul", (0, 0), 0), ("sin", (2, 0), 0)]
    xs = _inputs(4)
    _three_ways(prog, xs, monkeypatch)
    assert _broadcast_records_fused(prog, xs, monkeypatch) == 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("loops", ["now", "0"])
def test_logsumexp_and_softmax_against_the_closed_form(dtype, loops, monkeypatch):
    monkeypatch.setenv(FC.ENV, loops)
    rng = np.random.default_rng(5)
    X, W = rng.standard_normal((R, C)).astype(dtype), rng.standard_normal((R, C)).astype(dtype)
    x = tg.tensor(X, requires_grad=True)
    runs = []
    saved, summed = FB.sweep_run, FB._sweep_summed
    monkeypatch.setattr(FB, "sweep_run", lambda T, r0, r1, *a: (runs.append((r0, r1)),
                                                                saved(T, r0, r1, *a)))

    def spy(tape, T, r0, r1, *a):
        done = summed(tape, T, r0, r1, *a)
        if done is True:
            runs.append((r0, r1, "from the row sums"))
        return done
    monkeypatch.setattr(FB, "_sweep_summed", spy)
    with interpret.mode(0):
        (tg.logsumexp(x, axis=1).sum() + (W * tg.softmax(x, axis=1)).sum()).backward()
    X64, W64 = X.astype(np.float64), W.astype(np.float64)
    e = np.exp(X64 - X64.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    expect = p + p * (W64 - (W64 * p).sum(axis=1, keepdims=True))
    tol = 1e-12 if dtype == np.float64 else 2e-6
    assert x.grad.dtype == dtype
    np.testing.assert_allclose(x.grad.numpy(), expect, rtol=tol * 100, atol=tol)
    # the shift by the row maxima and the exponential swept as one run, from
    # the row sums' adjoint when the run has its own loop
    # (a loop compiled earlier in the process is used under "0" too)
    assert any(r[1] - r[0] >= 2 for r in runs), runs
    if loops == "now":
        assert any(len(r) == 3 for r in runs), runs


# -- a run swept from the adjoint of a sum over some axes --------------------------
def _summed(x, how, lib):
    """A run on x, summed over some axes, then a scalar (``lib``: tg or np)."""
    ex, lg, sn = (np.exp, np.log, np.sin) if lib == "np" else (tg.exp, tg.log, tg.sin)
    c = _constants(x.dtype)[0 if x.ndim == 2 else 4]
    e = ex(sn(x) * 0.5 - c)
    if how == "rows":
        return lg(e.sum(axis=1)).sum()
    if how == "rows_keep":
        return (lg(e.sum(axis=1, keepdims=True)) * 0.3).sum()
    if how == "cols":
        return lg(e.sum(axis=0)).sum()
    if how == "last2":      # a 3-D operand, its two trailing axes summed
        return lg(e.sum(axis=(1, 2))).sum()
    if how == "first2":     # ... its two leading axes
        return lg(e.sum(axis=(0, 1))).sum()
    if how == "middle":     # neither: the sum's VJP and then the run
        return lg(e.sum(axis=1)).sum()
    if how == "read_again":  # e read again above the sum: its VJP reaches e first
        return lg(e.sum(axis=1)).sum() + (e * 0.25).sum()
    raise ValueError(how)


HOWS = ("rows", "rows_keep", "cols", "last2", "first2", "middle", "read_again")


def _summed_input(how, dtype):
    rng = np.random.default_rng(len(how))
    shape = (41, 79, 83) if how in ("last2", "first2", "middle") else (R, C)
    return rng.uniform(-1.0, 1.0, shape).astype(dtype)


def _summed_grad(x, how, fused=True, seed=None):
    return compiled_grads(lambda t: _summed(t, how, "tg"), [x], fused, seed)[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("how", HOWS)
def test_a_run_under_a_sum_over_axes_same_bits_three_ways(how, dtype, monkeypatch):
    x = _summed_input(how, dtype)
    took = []
    real = FB._sweep_summed
    monkeypatch.setattr(FB, "_sweep_summed", lambda *a: (took.append(real(*a)), took[-1])[1])
    monkeypatch.setattr(FC._State, "loops", {})   # none compiled yet
    monkeypatch.setenv(FC.ENV, "0")
    shared = _summed_grad(x, how)
    assert True not in took   # the shared kernel takes the sum's VJP, then the run
    monkeypatch.setenv(FC.ENV, "now")
    looped = _summed_grad(x, how)
    assert (True in took) == (how not in ("middle", "read_again")), took
    plain = _summed_grad(x, how, fused=False)
    np.testing.assert_array_equal(looped, shared)
    np.testing.assert_array_equal(looped, plain)
    if dtype == np.float64:   # against central differences along a direction
        d = np.random.default_rng(9).standard_normal(x.shape)
        h = 1e-6
        fd = (_summed(x + h * d, how, "np") - _summed(x - h * d, how, "np")) / (2 * h)
        an = float((looped * d).sum())
        assert abs(fd - an) <= 1e-6 * max(1.0, abs(fd)), (fd, an)


def test_the_sums_axes_are_read_from_its_parameters():
    for shape, axis, want in [((4, 5), 1, (5, False)), ((4, 5), 0, (5, True)),
                              ((3, 4, 5), (1, 2), (20, False)), ((3, 4, 5), (0, 1), (5, True)),
                              ((3, 4, 5), 1, None), ((3, 1, 5), 2, (5, False)),
                              ((3, 4, 5), (0, 2), None)]:
        x = tg.tensor(np.ones(shape), requires_grad=True)
        s = (x * 1.0).sum(axis=axis)
        from tapegrad.core.tape import current
        assert FB._summed_axes(current(), s._rec) == want, (shape, axis)


def test_the_summed_loop_pays_rent_before_it_is_compiled(monkeypatch):
    # in the default mode the sum's VJP and the run sweep it until they have
    # cost what a compilation does; the time is counted against the loop
    monkeypatch.setenv(FC.ENV, "")
    spent = []
    monkeypatch.setattr(FC, "spent", lambda p, s: spent.append((p.key, s)))
    monkeypatch.setattr(FC, "_in_cache", lambda key: False)
    monkeypatch.setattr(FC._State, "loops", {})
    monkeypatch.setattr(FC._State, "spent", {})   # no rent paid by earlier tests
    x = _summed_input("rows", np.float64)
    g = _summed_grad(x, "rows")
    np.testing.assert_array_equal(g, _summed_grad(x, "rows", fused=False))
    assert spent and all(s > 0 for _, s in spent)


@pytest.mark.parametrize("seed", [np.inf, np.nan])
def test_a_nonfinite_seed_reaches_a_summed_run_as_the_plain_sweep(seed, monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    x = _summed_input("rows", np.float64)
    fused = _summed_grad(x, "rows", seed=np.asarray(seed))
    plain = _summed_grad(x, "rows", fused=False, seed=np.asarray(seed))
    np.testing.assert_array_equal(fused, plain)
