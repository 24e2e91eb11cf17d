"""The replay and sweep loops' inline arithmetic on records of up to ``TINY`` (8)
elements (kernels/replay.py: ``TINY_ELEMENTWISE``), a 6- and 8-state
program of every ``arithmetic`` op: same-size and one-element operands,
``x op x``, constants on either side.  The compiled replay agrees bit for
bit with the loop's own source run as Python with the inline paths off (the
family kernels), and its gradient with eager ``tg.grad`` and central
differences."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.kernels import interpret
from tapegrad.kernels import replay as RK

M88 = np.random.default_rng(12).normal(size=(8, 8)) * 0.2 - np.eye(8)


def _program(x):
    th, u, w = x[:2], x[2:10], x[10:16]
    total = 0.0
    for _ in range(3):
        v = th[0] * (M88 @ u) - u / (u * u + 2.0) + (-u) * 0.5
        u = u + 0.1 * v + th[1:2] - 1.0 / (u * u + 3.0)
        w = 0.3 * (w * w) - w / 3.0 + (2.0 - w) * 0.2 + th[0] - (w + w) * th[1]
        total = total + (u * u).sum() + (w / (w * w + 1.0)).sum()
    return total


X0 = np.linspace(0.2, 1.1, 16)


def _bits(a):
    return np.ascontiguousarray(a, np.float64).view(np.int64)


def test_the_program_has_inline_records():
    ft = tg.trace(_program, X0)
    (reps,) = ft.cache.values()
    rep = reps[0]
    kind = rep.op >> 6
    sizes = rep.size[(kind >= 1) & (kind <= 3)]
    assert {6, 8} <= set(sizes.tolist()) and RK.TINY_ELEMENTWISE == RK.TINY == 8


def test_inline_replay_is_the_families():
    ft = tg.trace(_program, X0)
    (reps,) = ft.cache.values()
    rep = reps[0]
    x1 = np.random.default_rng(2).normal(size=16) * 0.4
    ft(x1)
    want = [rep.view(r).copy() for r in range(rep.n)]
    for r in np.flatnonzero(rep.op >> 6):   # op records: recomputed below
        rep.view(r)[:] = np.nan
    copy = interpret.python_copy(RK._replay, dict(interpret.STAND_INS))
    copy.__globals__["TINY"] = copy.__globals__["TINY_ELEMENTWISE"] = 0
    s = copy(rep.T, rep.faddr, np.zeros(rep.n, np.int64), rep.goff, rep.gvals, 0, rep.n,
             rep.mmk, RK.FWD.python_table())
    assert s == -1
    for r in range(rep.n):
        assert np.array_equal(_bits(rep.view(r)), _bits(want[r])), r


@pytest.mark.parametrize("seed", [3, 4])
def test_gradient_matches_eager_and_differences(seed):
    ft = tg.trace(_program, X0)
    x = np.random.default_rng(seed).normal(size=16) * 0.4
    v, g = ft.value_and_grad(x)
    assert float(v) == pytest.approx(float(_program(x)), rel=1e-12)
    np.testing.assert_allclose(g, np.asarray(tg.grad(_program)(x)), rtol=1e-11, atol=1e-12)
    h = 1e-5
    fd = np.array([(_program(x + h * e) - _program(x - h * e)) / (2 * h) for e in np.eye(16)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_inline_sweep_is_the_families():
    """The sweep's inline arithmetic of up to 8 elements (kernels/sweep.py:
    ``TINY_ELEMENTWISE``) against the sweep's source with it off, bit for bit."""
    from tapegrad.kernels import sweep as SW
    from tapegrad.kernels.dispatch import VJP
    assert SW.TINY_ELEMENTWISE == 8
    ft = tg.trace(_program, X0)
    (reps,) = ft.cache.values()
    rep = reps[0]
    x1 = np.random.default_rng(5).normal(size=16) * 0.4
    g = np.array(ft.grad(x1), copy=True)   # compiled sweep, inline paths on
    (root,) = rep.roots
    (leaf,) = rep.leaf_rec
    rep.aptr[:] = rep.aptr0
    rep.reached[:] = False
    rep.adj.add(root, np.ones(1))
    copy = interpret.python_copy(SW._sweep, dict(interpret.STAND_INS))
    copy.__globals__["TINY"] = copy.__globals__["TINY_ELEMENTWISE"] = 0
    s = copy(rep.T, rep.freed, np.arange(root, -1, -1), root, -1, rep.mmk, VJP.python_table())
    assert s == -1
    assert rep.reached[leaf]
    assert np.array_equal(_bits(rep.adj[leaf]), _bits(g))
