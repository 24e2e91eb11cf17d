"""Replay internals and transforms of traced functions: fused elementwise
segments, reused buffers, jvp/hvp on the replayed tape, multi-output functions."""
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.tracing import replay as trace_replay

N = 2 * trace_replay.FUSE_MIN + 37  # large enough to fuse; not a whole number of blocks


def _replay(ft):
    (reps,) = ft.cache.values()
    return reps[0]


def _unfused(ft, *args):
    """value_and_grad of ft with its fused segments switched off."""
    rep = _replay(ft)
    segs, rep.segs = rep.segs, []
    try:
        return ft.value_and_grad(*args)
    finally:
        rep.segs = segs


# -- fused segments ----------------------------------------------------------------------
_UNARY = [np.sin, np.cos, np.tanh, np.arctan, np.negative, np.square, np.exp]
_SCALAR = [lambda x: x * 1.5, lambda x: x + 0.3, lambda x: 0.7 - x, lambda x: x / 3.0,
           lambda x: x ** 2]
_BINARY = [np.add, np.subtract, np.multiply, np.maximum, np.arctan2]


@st.composite
def programs(draw):
    """A random elementwise program over three inputs and a closed-over constant:
    steps ``(family, op, operand, operand)`` referring to earlier values."""
    steps = []
    for k in range(draw(st.integers(2, 9))):
        fam = draw(st.sampled_from(["u", "s", "b", "b", "c"]))
        i = draw(st.integers(0, 2 + k))
        j = draw(st.integers(0, 2 + k))
        op = draw(st.integers(0, 10))
        steps.append((fam, op, i, j))
    outside = draw(st.integers(0, 3 + len(steps)))  # also read by a non-fused op
    return steps, outside


def _run_program(prog, a, b, c, const):
    steps, outside = prog
    vals = [a, b, c]
    for fam, op, i, j in steps:
        x, y = vals[i], vals[j]
        if fam == "u":
            x = np.tanh(x) if op % len(_UNARY) == 6 else x  # keep exp bounded
            vals.append(_UNARY[op % len(_UNARY)](x))
        elif fam == "s":
            vals.append(_SCALAR[op % len(_SCALAR)](x))
        elif fam == "b":
            vals.append(_BINARY[op % len(_BINARY)](x, y))
        else:
            vals.append(x * const if op % 2 else const - x)
    out = vals[-1].sum()
    if outside < len(vals):  # an intermediate that a cumsum (not fusable) reads too
        out = out + np.cumsum(vals[outside])[-1] * 0.5
    return out


@settings(max_examples=25, deadline=None)
@given(prog=programs(), seed=st.integers(0, 2**32 - 1))
# three fused unary records whose middle one's VJP reads its own value: the
# reverse pass recomputed it from a stale operand (wrong gradient; found by
# this test, kept as a fixed example)
@example(prog=([("u", 0, 0, 0), ("u", 6, 3, 0)], 0), seed=0)
# arctan2(x - x, x - x): a NaN gradient, the same NaN in every form
@example(prog=([("b", 1, 0, 0), ("b", 4, 3, 3)], 0), seed=0)
def test_fused_segments_equal_unfused_replay_and_eager(prog, seed):
    rng = np.random.default_rng(seed)
    const = rng.standard_normal(N)
    args = [rng.standard_normal(N) for _ in range(3)]
    ft = tg.trace(lambda a, b, c: _run_program(prog, a, b, c, const), *args)
    for _ in range(2):
        args = [rng.standard_normal(N) for _ in range(3)]
        v, g = ft.value_and_grad(*args)
        v0, g0 = _unfused(ft, *args)
        assert np.array_equal(v, v0, equal_nan=True)
        for x, y in zip(g, g0):
            # element for element the same arithmetic (NaN where it is NaN)
            assert np.array_equal(x, y, equal_nan=True)
        leaves = [tg.tensor(x, requires_grad=True) for x in args]
        y = _run_program(prog, *leaves, const)
        y.backward()
        np.testing.assert_allclose(v, y.item(), rtol=1e-12, atol=1e-9)
        for x, leaf in zip(g, leaves):
            ref = leaf.grad.numpy() if leaf.grad is not None else np.zeros(N)
            np.testing.assert_allclose(x, ref, rtol=1e-10, atol=1e-12)


def test_benchmark_workload_is_one_segment_and_keeps_no_intermediates():
    a, b, c = (np.linspace(0.5, 2.0, N) + k for k in range(3))
    ft = tg.trace(lambda a, b, c: (3 * a + 2 * b * b + np.log(c)).sum(), a, b, c)
    rep = _replay(ft)
    assert len(rep.segs) == 1
    r0, r1, n, slot, need = rep.segs[0]
    assert n == N and (slot >= 0).sum() == 5  # only the summed value is stored
    assert need.sum() == 1                    # the backward recomputes 2*b only
    v, (ga, gb, gc) = ft.value_and_grad(a, b, c)
    np.testing.assert_allclose(ga, 3.0)
    np.testing.assert_allclose(gb, 4 * b)
    np.testing.assert_allclose(gc, 1 / c)


def test_full_sum_replays_numpys_pairwise_order_exactly():
    rng = np.random.default_rng(3)
    for n in (1, 7, 8, 129, 1000, 8193, 100_001):
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
        ft = tg.trace(lambda x: x.sum(), x)
        fm = tg.trace(lambda x: x.mean(), x)
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
        assert ft(x) == np.sum(x) and fm(x) == np.mean(x)


@pytest.mark.parametrize("axis", [0, 1, 2, (0, 2), (1, 2)])
def test_axis_reductions_replay(axis):
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((3, 4, 5))

    def f(x):
        return (x.sum(axis=axis) ** 2).sum() + x.max(axis=axis).sum() \
            + tg.logsumexp(x, axis=axis).sum() + (tg.softmax(x, axis=-1) * x).sum()
    ft = tg.trace(f, x0)
    x = rng.standard_normal((3, 4, 5))
    v, g = ft.value_and_grad(x)
    xt = tg.tensor(x, requires_grad=True)
    y = f(xt)
    y.backward()
    np.testing.assert_allclose(v, y.item(), rtol=1e-12)
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-10, atol=1e-12)


# -- buffers -------------------------------------------------------------------------------
def test_gradients_handed_out_are_never_overwritten():
    ft = tg.trace(lambda x, y: (x * y).sum(), np.ones(N), np.ones(N))
    x1, x2 = np.full(N, 2.0), np.full(N, 5.0)
    gx1, gy1 = ft.grad(x1, x1 + 1)
    keep = gx1.copy(), gy1.copy()
    gx2, gy2 = ft.grad(x2, x2 + 1)
    assert np.array_equal(gx1, keep[0]) and np.array_equal(gy1, keep[1])
    np.testing.assert_allclose(gx2, 6.0)
    # let go of the gradients: the next call reuses their memory
    address = gx2.ctypes.data
    del gx1, gy1, gx2, gy2
    assert ft.grad(x1, x1)[0].ctypes.data == address


def test_inputs_are_read_in_place_never_written():
    ft = tg.trace(lambda x: (np.sin(x) * 2).sum(), np.zeros(N))
    x = np.linspace(0, 1, N)
    x.flags.writeable = False
    v, g = ft.value_and_grad(x)
    np.testing.assert_allclose(g, 2 * np.cos(x))
    ft2 = tg.trace(lambda x: x, np.zeros(5))  # output is the input itself
    z = np.arange(5.0)
    out = ft2(z)
    z[:] = -1.0  # the returned value is a copy
    assert np.array_equal(out, np.arange(5.0)) and ft2(np.ones(5))[0] == 1.0
    # a non-contiguous input is copied, not read in place
    w = np.linspace(0, 1, 2 * N)[::2]
    np.testing.assert_allclose(ft.grad(w), 2 * np.cos(w))


# -- jvp, hvp ------------------------------------------------------------------------------
W = np.random.default_rng(5).standard_normal((4, 3))


def _f1(x):
    return np.tanh(W @ x) * x.sum() + np.exp(x[:2]).sum()


def _f2(x, y):
    return (np.sin(x) * y).sum() + tg.logsumexp(x * y) + (x ** 3).mean()


@pytest.mark.parametrize("f,shapes", [(_f1, [(3,)]), (_f2, [(6,), (6,)]),
                                      (lambda x: (x * x).sum(), [(N,)])])
def test_jvp_equals_eager_and_batched_equals_one_by_one(f, shapes):
    rng = np.random.default_rng(6)
    ft = tg.trace(f, *[rng.standard_normal(s) for s in shapes])
    xs = [rng.standard_normal(s) for s in shapes]
    ts = [rng.standard_normal(s) for s in shapes]
    v, t = ft.jvp(*xs, tuple(ts))
    v0, t0 = tg.jvp(f, tuple(xs), tuple(ts))
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(t, t0, rtol=1e-10, atol=1e-12)
    batch = [rng.standard_normal((3,) + s) for s in shapes]
    _, tb = ft.jvp(*xs, tuple(batch))
    for k in range(3):
        np.testing.assert_allclose(tb[k], ft.jvp(*xs, tuple(b[k] for b in batch))[1],
                                   rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("f,shapes", [(lambda x: _f1(x).sum(), [(3,)]), (_f2, [(6,), (6,)])])
def test_hvp_equals_eager_and_batched_equals_one_by_one(f, shapes):
    rng = np.random.default_rng(7)
    ft = tg.trace(f, *[rng.standard_normal(s) for s in shapes])
    xs = [rng.standard_normal(s) for s in shapes]
    vs = [rng.standard_normal(s) for s in shapes]
    g, hv = ft.hvp(*xs, tuple(vs))
    g0, hv0 = tg.hvp(f, tuple(xs), tuple(vs))
    for a, b in zip(g + hv, g0 + hv0):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    batch = [rng.standard_normal((4,) + s) for s in shapes]
    _, hb = ft.hvp(*xs, tuple(batch))
    for k in range(4):
        one = ft.hvp(*xs, tuple(b[k] for b in batch))[1]
        for a, b in zip(hb, one):
            np.testing.assert_allclose(a[k], b, rtol=1e-12, atol=1e-14)


def test_jvp_hvp_edge_cases():
    ft = tg.trace(lambda x, y: x, 1.0, 2.0)  # the output is an input
    g, hv = ft.hvp(3.0, 4.0, (1.0, 1.0))
    assert g == (1.0, 0.0) and hv == (0.0, 0.0)
    assert ft.jvp(3.0, 4.0, (2.0, 5.0)) == (3.0, 2.0)
    fc = tg.trace(lambda x: np.ones(2) * 3.0, np.zeros(2))  # constant output
    v, t = fc.jvp(np.ones(2), np.ones(2))
    assert np.array_equal(v, [3.0, 3.0]) and not t.any()
    fs = tg.trace(lambda x: np.sin(x) * 2.0, 0.5)  # a bare float tangent
    np.testing.assert_allclose(fs.jvp(0.0, 1.0)[1], 2.0)


def test_jvp_hvp_errors_are_clear():
    ft = tg.trace(lambda x: x * 2, np.zeros(3))
    with pytest.raises(ValueError, match="tangent 0 has shape"):
        ft.jvp(np.zeros(3), np.zeros(4))
    with pytest.raises(TypeError, match="must return one number"):
        ft.hvp(np.zeros(3), np.zeros(3))
    f2 = tg.trace(lambda x, y: (x * y).sum(), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="2 traced inputs but 1 tangents"):
        f2.jvp(np.zeros(2), np.zeros(2), (np.zeros(2),))


# -- several outputs -----------------------------------------------------------------------
def _multi(x, y):
    return np.sin(x) * y, (x * y).sum(), np.ones(2), x * 1.0


def _eager_multi(x, y):
    xt, yt = tg.tensor(x, requires_grad=True), tg.tensor(y, requires_grad=True)
    return xt, yt, _multi(xt, yt)


def test_multi_output_value_vjp_jacobian_equal_eager():
    rng = np.random.default_rng(8)
    ft = tg.trace(_multi, rng.standard_normal(3), rng.standard_normal(3))
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    out = ft(x, y)
    xt, yt, ref = _eager_multi(x, y)
    assert isinstance(out, tuple) and len(out) == 4
    for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b.numpy() if hasattr(b, "numpy") else b, rtol=1e-14)
    cts = (rng.standard_normal(3), 0.7, rng.standard_normal(2), rng.standard_normal(3))
    v, (gx, gy) = ft.vjp(x, y, cts)
    total = (ref[0] * cts[0]).sum() + ref[1] * cts[1] + (ref[3] * cts[3]).sum()
    total.backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gy, yt.grad.numpy(), rtol=1e-12)
    # a batch of cotangent tuples equals one by one
    batch = tuple(np.stack([c, 2 * np.asarray(c)]) for c in cts)
    _, (bx, by) = ft.vjp(x, y, batch)
    np.testing.assert_allclose(bx[1], 2 * gx, rtol=1e-12)
    np.testing.assert_allclose(by[0], gy, rtol=1e-12)
    J = ft.jacobian(x, y)
    assert len(J) == 4 and J[0][0].shape == (3, 3) and J[1][1].shape == (3,)
    np.testing.assert_allclose(J[0][0], np.diag(np.cos(x) * y), rtol=1e-12)
    np.testing.assert_allclose(J[1][1], x, rtol=1e-14)
    assert not J[2][0].any() and J[2][0].shape == (2, 3)
    np.testing.assert_allclose(J[3][0], np.eye(3))
    _, ts = ft.jvp(x, y, (np.ones(3), np.zeros(3)))
    np.testing.assert_allclose(ts[0], np.cos(x) * y, rtol=1e-12)
    np.testing.assert_allclose(ts[1], y.sum(), rtol=1e-12)


def test_multi_output_same_record_twice_accumulates():
    ft = tg.trace(lambda x: (x * 3, x * 3), np.zeros(2))
    y = np.zeros(2)
    # one record behind both outputs: the cotangents add up
    assert ft.jacobian(y)[0].shape == (2, 2)
    np.testing.assert_allclose(ft.vjp(y, (np.ones(2), np.ones(2)))[1], [6.0, 6.0])


def test_multi_output_errors_are_clear(tmp_path):
    ft = tg.trace(lambda x: (x.sum(), x), np.zeros(2))
    with pytest.raises(RuntimeError, match="returns a tuple of 2 outputs"):
        ft.grad(np.zeros(2))
    with pytest.raises(TypeError, match="give a tuple of as many cotangents"):
        ft.vjp(np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="the cotangent has shape"):
        ft.vjp(np.zeros(2), (1.0, np.ones(3)))
    with pytest.raises(NotImplementedError, match="cannot be saved"):
        ft.save(tmp_path / "f.npz")
    with pytest.raises(NotImplementedError, match="nested"):
        tg.trace(lambda x: (x, (x, x)), np.zeros(2))
    with pytest.raises(RuntimeError, match="one output element"):
        ft.grad_batch(np.zeros((3, 2)))


# -- ft.hessian: the kept forward-over-reverse plan ---------------------------------------
from test_second import rosen as _rosen  # noqa: E402


def _mixed(x):
    # records the compiled second-order sweep hands to Python (matmul,
    # softmax, concatenate, a multi-output split): a rerun of the kept plan
    # must start from its own adjoint addresses again
    m = x[:4].reshape(2, 2)
    return (tg.tanh(m @ m).sum() + (tg.softmax(x) * x).sum()
            + (tg.concatenate([x, x ** 2]) ** 2).sum()
            + sum((s ** 3).sum() for s in tg.split(x, 2)))


@pytest.mark.parametrize("f,n", [(_rosen, 12), (_mixed, 6)])
def test_traced_hessian_equals_eager_at_fresh_inputs(f, n):
    rng = np.random.default_rng(11)
    ft = tg.trace(f, rng.uniform(-1, 1, n))
    for _ in range(3):  # the same kept plan, new values each time
        x = rng.uniform(-1, 1, n)
        np.testing.assert_allclose(ft.hessian(x), tg.hessian(f)(x), rtol=1e-12, atol=1e-12)
    assert ft.n_traces == 1


def test_traced_hessian_several_arguments_float32_and_errors():
    f = lambda a, b: (tg.sin(a) * b ** 2).sum()  # noqa: E731
    ft = tg.trace(f, np.zeros(3), np.zeros(2).reshape(2, 1))
    a, b = np.array([0.1, 0.2, 0.3]), np.array([[1.0], [-2.0]])
    H, E = ft.hessian(a, b), tg.hessian(f, argnums=(0, 1))(a, b)
    for i in range(2):
        for j in range(2):
            assert H[i][j].shape == E[i][j].shape
            np.testing.assert_allclose(H[i][j], E[i][j], rtol=1e-12, atol=1e-12)
    ft32 = tg.trace(_rosen, np.zeros(4, np.float32))
    x32 = np.array([0.5, -0.2, 0.3, 1.1], np.float32)
    H32 = ft32.hessian(x32)
    assert H32.dtype == np.float32
    np.testing.assert_allclose(H32, tg.hessian(_rosen)(x32), rtol=1e-5)
    with pytest.raises(TypeError, match="one number"):
        tg.trace(lambda x: x * 2.0, np.zeros(3)).hessian(np.ones(3))
    # an output that is the input itself: linear, Hessian zero
    np.testing.assert_array_equal(tg.trace(lambda x: x, np.zeros(())).hessian(np.array(2.0)),
                                  np.zeros(()))


def test_traced_hessian_follows_guards():
    def f(x):
        if x.sum() > 0:
            return (x ** 3).sum()
        return (tg.exp(x)).sum()
    ft = tg.trace(f, np.ones(3))
    for x in (np.array([0.5, 1.0, 2.0]), np.array([-1.0, -0.5, 0.2])):
        np.testing.assert_allclose(ft.hessian(x), tg.hessian(f)(x), rtol=1e-12)


# -- vector reverse mode on a trace (functional.replay_reverse) ---------------------------
def test_traced_jacobian_and_cotangent_batch_take_one_vector_sweep(monkeypatch):
    rng = np.random.default_rng(11)
    A = rng.standard_normal((30, 30)) / 6.0
    f = lambda x: tg.tanh(A @ x) * x  # noqa: E731
    x = rng.standard_normal(30)
    ft = tg.trace(f, x)
    # one sweep for all 30 rows: Replay.backward (a sweep per vector) is not used
    monkeypatch.setattr(trace_replay._Replay, "backward", None)
    J = ft.jacobian(x)
    np.testing.assert_allclose(J, tg.jacobian(f)(x), rtol=1e-13, atol=1e-15)
    cts = rng.standard_normal((5, 30))
    _, g = ft.vjp(x, cts)
    np.testing.assert_allclose(g, cts @ J, rtol=1e-12, atol=1e-14)
    monkeypatch.undo()
    # chunks of vectors give the same rows (a last chunk of one takes the plain sweep)
    from tapegrad.transforms import functional
    monkeypatch.setattr(functional, "JACOBIAN_BYTES", 8 * 7 * 100)
    np.testing.assert_allclose(ft.jacobian(x), J, rtol=1e-13, atol=1e-15)


def test_traced_jacobian_over_fused_segments_equals_eager():
    # same-size elementwise runs fuse (their intermediates stay in scratch):
    # the vector sweep must replay every value first
    rng = np.random.default_rng(12)
    f = lambda x: (tg.tanh(x) * x + tg.sin(x) ** 2).reshape(4, -1).sum(axis=1)  # noqa: E731
    x = rng.standard_normal(4 * (N // 4))
    ft = tg.trace(f, x)
    assert _replay(ft).segs
    x2 = rng.standard_normal(x.size)
    np.testing.assert_allclose(ft.jacobian(x2), tg.jacobian(f)(x2), rtol=1e-13, atol=1e-15)
    ct = rng.standard_normal((3, 4))
    np.testing.assert_allclose(ft.vjp(x2, ct)[1], ct @ tg.jacobian(f)(x2), rtol=1e-12)


@pytest.mark.parametrize("c", [2.0, 3.0, 2.5])
def test_squares_and_cubes_are_exact_in_every_sweep(c):
    # x ** 2 and x ** 3 skip pow() per element: the same numbers as NumPy's
    x = np.random.default_rng(13).uniform(-2.0, 2.0, N)
    if c == 2.5:
        x = np.abs(x)
    f = lambda x: (x ** c).sum()  # noqa: E731
    ft = tg.trace(f, x)
    np.testing.assert_allclose(ft(x), np.sum(x ** c), rtol=1e-12)
    expect = c * x ** (c - 1.0)
    check = np.testing.assert_array_equal if c != 2.5 else np.testing.assert_allclose
    check(ft.grad(x), expect)
    check(tg.grad(f)(x), expect)
    h = tg.hvp(f, (x[:50],), (np.ones(50),))[1][0]
    np.testing.assert_allclose(h, c * (c - 1.0) * x[:50] ** (c - 2.0), rtol=1e-14)
