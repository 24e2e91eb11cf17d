"""A trace's small matmuls, replayed and differentiated inside the compiled
loops (kernels/small_matmul.py; ``_Replay.mmk`` names them).

Each program's traced value and gradient at inputs other than the traced
ones are checked against plain NumPy, eager ``tg.grad`` (whose matmuls stay
with BLAS) and central differences along random directions; every operand
layout a record can hold (1-d and 2-d on either side, transposed and
strided views, constants on either side, one record on both sides) and
sizes at and just past ``SMALL_MATMUL``.  The compiled loops agree with the
interpreted tier's copies (element loops and whole-array forms) bit for
bit, ``grad_batch`` with a loop of ``ft.grad``, and a loaded tape file with
the trace it came from.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.kernels import interpret
from tapegrad.kernels import replay as RK
from tapegrad.kernels import small_matmul as SM
from tapegrad.kernels import sweep as SW
from tapegrad.kernels.dispatch import VJP
from tapegrad.ops.matrix import _MATMUL

RNG = np.random.default_rng(11)
M34 = RNG.normal(size=(3, 4))
K32 = RNG.normal(size=(3, 2))
W24 = RNG.normal(size=(2, 4))
M66 = RNG.normal(size=(6, 6)) * 0.3 - np.eye(6)


def _self_dot(u):
    return u @ u      # one record on both sides


def _ode(x):
    """An RK4 loop whose right-hand side is a matrix-vector product: one
    state's adjoint gathers several matmuls' contributions."""
    th, u = x[:2], x[2:8]
    total = 0.0
    for _ in range(6):
        def rhs(v):
            return th[0] * (M66 @ v) + th[1] * np.tanh(v)
        k1 = rhs(u)
        k2 = rhs(u + 0.05 * k1)
        k3 = rhs(u + 0.05 * k2)
        k4 = rhs(u + 0.1 * k3)
        u = u + (0.1 / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        total = total + (u * u).sum()
    return total


def _shared(x):
    """Operands that other records reach first in the sweep: the matmuls'
    contributions are added to adjoints already written, on both sides."""
    u, a = x[:3], x[3:15].reshape(3, 4)
    y = np.tanh(u @ a)
    z = a @ x[15:19]
    return y.sum() * (u * u).sum() + np.sin(z).sum() + (a * a).sum()


# name: (function, number of inputs, matmul records, of which small)
CASES = {
    "mat_vec": (lambda x: np.tanh(x[:12].reshape(3, 4) @ x[12:16]).sum(), 16, 1, 1),
    "vec_mat": (lambda x: np.sin(x[:3] @ x[3:15].reshape(3, 4)).sum(), 15, 1, 1),
    "mat_mat": (lambda x: (np.cos(x[:6].reshape(2, 3) @ x[6:18].reshape(3, 4)) * W24).sum(),
                18, 1, 1),
    "vec_vec": (lambda x: np.tanh(x[:5] @ x[5:10]) + _self_dot(x[:5]), 10, 2, 2),
    "transposed": (lambda x: (np.sin(x[:12].reshape(3, 4).T @ x[12:15]) ** 2).sum()
                   + (x[12:15] @ x[:12].reshape(4, 3).T).sum(), 15, 2, 2),
    "strided": (lambda x: np.tanh(x[:16].reshape(4, 4)[::-1, ::2] @ x[16:18]).sum()
                + (x[16:20][::2] @ x[:16].reshape(2, 8)[:, 1::2]).sum(), 20, 2, 2),
    "constants": (lambda x: np.tanh(M34 @ x[:4]).sum() + (x[:6].reshape(2, 3) @ K32).sum()
                  + (x[:3] @ M34 @ x[:4]), 6, 4, 4),
    "ode": (_ode, 8, 24, 24),
    "shared": (_shared, 19, 2, 2),
    "limit_mat_vec": (lambda x: np.tanh(x[:4096].reshape(64, 64) @ x[4096:] / 8.0).sum(),
                      4160, 1, 1),
    "limit_mat_mat": (lambda x: np.sin(x[:256].reshape(16, 16) @ x[256:].reshape(16, 16)).sum(),
                      512, 1, 1),
    # 4100 and 4097 multiply-adds: BLAS; 4096: the loops
    "past_limit": (lambda x: np.sin(x[:410].reshape(41, 10) @ x[410:510].reshape(10, 10)).sum()
                   + np.tanh(x @ x * 1e-3) + np.tanh(x[1:] @ x[:-1] * 1e-3), 4097, 3, 1),
}


def _replay(ft):
    (reps,) = ft.cache.values()
    return reps[0]


def _x(name, seed):
    return np.random.default_rng(seed).normal(size=CASES[name][1]) * 0.5


@pytest.fixture(scope="module")
def traced():
    return {name: tg.trace(CASES[name][0], _x(name, 0)) for name in CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_small_matmuls_are_marked(traced, name):
    _, _, total, small = CASES[name]
    rep = _replay(traced[name])
    assert np.count_nonzero(rep.op == _MATMUL) == total
    assert np.count_nonzero(rep.mmk) == small
    for r in np.flatnonzero(rep.mmk):
        a0 = rep.arg0[r]
        ra, rb = rep.args[a0], rep.args[a0 + 1]
        k = rep.mmk[r]
        m, n = rep.size[ra] // k, rep.size[rb] // k
        assert m * k * n <= SM.SMALL_MATMUL and rep.size[r] == m * n


def _directional(f, x, v, h=1e-5):
    return (f(x + h * v) - f(x - h * v)) / (2 * h)


@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_matches_numpy_eager_and_differences(traced, name):
    f = CASES[name][0]
    ft = traced[name]
    eager = tg.grad(f)
    for seed in (1, 2):
        x = _x(name, seed)
        v, g = ft.value_and_grad(x)
        assert float(v) == pytest.approx(float(f(x)), rel=1e-12, abs=1e-12)
        ge = np.asarray(eager(x))
        np.testing.assert_allclose(g, ge, rtol=1e-11, atol=1e-12 * np.abs(ge).max())
        for k in range(2):
            d = np.random.default_rng(10 * seed + k).normal(size=x.size)
            fd = _directional(f, x, d)
            assert float(g @ d) == pytest.approx(fd, rel=1e-6, abs=1e-7)


def test_eager_matmuls_stay_with_blas():
    x = tg.tensor(np.linspace(-1.0, 1.0, 4), requires_grad=True)
    (M34 @ x).sum().backward()
    assert np.array_equal(x.grad.numpy(), np.matmul(M34.T, np.ones((3, 1)))[:, 0])


def _bits(a):
    return np.ascontiguousarray(a, np.float64).view(np.int64)


def _squares(z):
    return (z * z).sum()


#: correctly rounded programs (no libm: the interpreted tier's NumPy agrees
#: to the bit): below and above the whole-array forms' ARRAY_WORK
ROUNDED = {
    "loops": (lambda x: ((x[:12].reshape(3, 4) @ x[12:16]) * (x[:3] @ x[3:15].reshape(3, 4))[:3]
                         ).sum() + (x[:4] @ x[4:8]) * x[0], 16),
    "arrays": (lambda x: _squares(x[:64].reshape(8, 8) @ x[64:128].reshape(8, 8))
               + (x[:64].reshape(8, 8).T @ x[64:72] * x[72:80]).sum(), 128),
}


@pytest.mark.parametrize("name", sorted(ROUNDED))
def test_compiled_loops_are_the_interpreted_ones(name):
    f, n = ROUNDED[name]
    ft = tg.trace(f, np.ones(n))
    rep = _replay(ft)
    assert np.count_nonzero(rep.mmk) == np.count_nonzero(rep.op == _MATMUL) > 0
    x1 = np.random.default_rng(4).normal(size=n)
    g = np.array(ft.grad(x1), copy=True)          # compiled replay and sweep
    rep.view(rep.leaf_rec[0])[:] = x1              # (a large input was read in place)
    want = [rep.view(r).copy() for r in range(rep.n)]
    copies = dict(interpret.STAND_INS)
    before = list(interpret._array_calls)
    for r in range(rep.n):
        if r != rep.leaf_rec[0]:
            rep.view(r)[:] = np.nan
    s = interpret.python_copy(RK._replay, copies)(
        rep.T, rep.faddr, np.zeros(rep.n, np.int64), rep.goff, rep.gvals, 0, rep.n, rep.mmk,
        RK.FWD.python_table())
    assert s == -1
    for r in range(rep.n):
        assert np.array_equal(_bits(rep.view(r)), _bits(want[r])), r
    (root,) = rep.roots
    (leaf,) = rep.leaf_rec
    rep.aptr[:] = rep.aptr0
    rep.reached[:] = False
    rep.adj.add(root, np.ones(1))
    s = interpret.python_copy(SW._sweep, copies)(
        rep.T, rep.freed, np.arange(root, -1, -1), root, -1, rep.mmk, VJP.python_table())
    assert s == -1
    assert np.array_equal(_bits(rep.adj[leaf]), _bits(g))
    if name == "arrays":   # the whole-array forms ran, not only the loops
        assert interpret._array_calls[0] > before[0]


def test_grad_batch_is_a_loop_of_grad_bit_for_bit(traced):
    ft = traced["ode"]
    rep = _replay(ft)
    assert rep.batch_compiled()
    X = np.random.default_rng(5).normal(size=(9, 8)) * 0.5
    ref = np.stack([ft.grad(x) for x in X])
    assert np.array_equal(ft.grad_batch(X), ref)
    assert np.array_equal(ft.grad_batch(X, workers=2), ref)


def test_tape_file_round_trip(traced, tmp_path):
    ft = traced["constants"]
    ft.save(tmp_path / "t.npz")
    g = tg.load(tmp_path / "t.npz")
    assert np.array_equal(_replay(g).mmk, _replay(ft).mmk)
    x = _x("constants", 3)
    assert np.array_equal(g.grad(x), ft.grad(x))


def test_shapes_that_disagree_with_the_records_stay_on_the_host(traced):
    rep = _replay(traced["mat_vec"])
    (r,) = np.flatnonzero(rep.mmk)
    host = rep.host
    try:
        for shapes in [((2, 6), (4,)), ((1, 3, 4), (4,)), ((3, 4), (4, 1, 1)), ((3, 4), (5,))]:
            rep.host = dict(host)
            rep.host[r] = shapes
            assert rep._matmul_k(None)[r] == 0, shapes
    finally:
        rep.host = host


def _branchy(x):
    y = M34 @ x
    if y[0] > 0:
        return (y * y).sum()
    return np.tanh(x @ M34.T).sum()


def test_a_branch_on_a_matmul_retraces():
    ft = tg.trace(_branchy, np.ones(4))
    eager = tg.grad(_branchy)
    for x in (np.ones(4), -np.ones(4), np.linspace(-1, 2, 4)):
        np.testing.assert_allclose(ft.grad(x), np.asarray(eager(x)), rtol=1e-12, atol=1e-14)


def test_other_transforms_of_a_trace_with_small_matmuls(traced):
    f = CASES["mat_vec"][0]
    ft = traced["mat_vec"]
    x = _x("mat_vec", 6)
    jac = np.asarray(tg.jacobian(f)(x))
    np.testing.assert_allclose(ft.jacobian(x), jac, rtol=1e-12, atol=1e-14)
    v = np.random.default_rng(7).normal(size=x.size)
    _, hv = ft.hvp(x, v)
    _, want = tg.hvp(f, (x,), (v,))
    np.testing.assert_allclose(np.reshape(hv, -1), want[0], rtol=1e-10, atol=1e-12)
