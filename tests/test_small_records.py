"""Traces of tiny records: the inline paths of the compiled replay and sweep.

Records of at most ``TINY`` elements (one-element indexing, stacks of
scalars, elementwise ops on 2- and 3-element arrays, broadcasting a
one-element operand) are computed inside the replay and sweep loops instead
of through the family tables (kernels/replay.py, kernels/sweep.py).  Each
program here is dominated by such records; its traced value and gradient at
inputs other than the traced ones are checked against eager ``tg.grad`` and
central differences, and the inline paths' numbers against the family
kernels' bit for bit: the loops' own source run as Python with the inline
paths switched off (``TINY = 0``), the families from the Python table.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.kernels import interpret
from tapegrad.kernels import replay as RK
from tapegrad.kernels import sweep as SW
from tapegrad.kernels._views import SMALL
from tapegrad.kernels.dispatch import VJP

DT = 0.05


def _indexing(x):
    """One-element indexing at every offset, from the front, the back, and
    through reversed and strided views (negative steps), of 1-d and 2-d."""
    m = x.reshape(2, 3)
    r = x[::-1]
    t = m.T
    y = x[0] * x[5] + x[-1] * x[2] - x[-3] / (2.0 + x[1] * x[1])
    for i in range(12):
        k = i % 6
        y = y * 0.9 + x[k] * r[k] - m[1, ::-1][i % 3] * 0.3 + t[i % 3, 1] * x[::2][i % 3]
        y = y + m[i % 2, -1 - (i % 3)] * r[::-2][i % 3]
    return y


def _rk4(x):
    """An RK4 loop on a 2-vector in plain NumPy style: components indexed out,
    combined, stacked back (the program the inline paths are for)."""
    a, b, c, d = x[0], x[1], x[2], x[3]

    def rhs(u):
        p, q = u[0], u[1]
        return np.stack([a * p - b * p * q, c * p * q - d * q])

    u = np.stack([x[4] * 0 + 1.0, x[5] * 0 + 0.5])
    total = 0.0
    for i in range(15):
        k1 = rhs(u)
        k2 = rhs(u + 0.5 * DT * k1)
        k3 = rhs(u + 0.5 * DT * k2)
        k4 = rhs(u + DT * k3)
        u = u + (DT / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        e = u - np.array([1.0, 0.7 + 0.01 * i])
        total = total + (e * e).sum()
    return total


def _stacks(x):
    """Stacks and concatenations of scalars and of 2-element arrays."""
    s = np.stack([x[0], x[1] * x[2]])
    for i in range(6):
        v = np.stack([x[i % 6], x[(i + 3) % 6]])
        w = np.stack([s, v])                       # 2 x 2: four elements
        c = np.concatenate([s, v[::-1], x[4:5]])   # five elements
        s = w[1] * s + w[0, ::-1] * 0.5 + c[1:3] * c[4]
    return (s * s).sum() + np.stack([s[0], s[1], x[5]]).sum()


def _elementwise(x):
    """Unary, with-a-constant and binary ops on 2- and 3-element arrays,
    ``x op x``, a constant operand, and one-element operands broadcast
    against 2-element ones (both sides, both orders)."""
    u, v = x[0:2], x[2:4]
    w = x[3:6]
    one = x[5:6]
    kon = np.array([0.25, -1.5])
    y = 0.0
    for i in range(4):
        p = np.sin(u) * np.exp(v * 0.1) + u * v - v / (u * u + 1.0)
        q = np.tanh(w) * w + w ** 3 * 0.01 + 2.0 ** (w * 0.1) - 1.0 / (w + 4.0)
        r = one * p - p / (one + 2.0) + np.maximum(one, u) + np.minimum(v, one[0])
        s = (p + kon) * (kon - p) + np.square(q[:2]) - abs(r) + r * r
        u = s * 0.3 + u
        w = q * 0.2 + np.log1p(w * w)
        y = y + s.sum() + q.sum() * 0.5 + (np.negative(r) + one).sum()
    return y


def _arithmetic(x):
    """``_elementwise`` with correctly rounded operations only (no libm), so
    that the Python and compiled tiers agree to the bit."""
    u, v = x[0:2], x[2:4]
    one = x[5:6]
    kon = np.array([0.25, -1.5])
    y = 0.0
    for i in range(5):
        p = -u * v - v / (u * u + 1.0) + (v - 0.5) ** 2
        r = one * p - p / (one + 2.0) + np.maximum(one, u) + np.minimum(v, one[0])
        s = (p + kon) * (kon - p) + np.square(r) - abs(r) + r * r - 3.0 / (r + 4.0)
        u = s * 0.3 + u
        v = v - one * 0.1
        y = y + s.sum() + (np.negative(r) + one).sum()
    return y


PROGRAMS = [_indexing, _rk4, _stacks, _elementwise, _arithmetic]
#: the programs whose every operation is correctly rounded: the Python tier
#: (NumPy's transcendental functions) computes them to the same bits
EXACT = [_indexing, _rk4, _stacks, _arithmetic]
X0 = np.array([0.9, 0.45, 0.2, 0.55, 0.6, 0.35])


def _inputs():
    rng = np.random.default_rng(3)
    return [X0 * (1.0 + 0.1 * rng.standard_normal(6)) for _ in range(3)]


def _central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def _replay(ft):
    (reps,) = ft.cache.values()
    return reps[0]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_tiny_records_dominate(f):
    """The programs exercise what they are for: mostly records of at most
    TINY elements, indexing and stacks among them, and no host record."""
    ft = tg.trace(f, X0)
    rep = _replay(ft)
    kinds = rep.op >> 6
    ops = kinds[kinds != 0]
    sizes = rep.size[kinds != 0]
    assert (sizes <= RK.TINY).mean() > 0.9
    assert not np.any(ops == 7)
    if f is _indexing:
        assert np.count_nonzero(ops == 5) > 50
    if f in (_rk4, _stacks):
        assert np.count_nonzero(ops == 6) > 10


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_traced_matches_eager_and_differences(f):
    ft = tg.trace(f, X0)
    eager = tg.grad(f)
    for x in _inputs():
        v, g = ft.value_and_grad(x)
        assert float(v) == pytest.approx(float(f(x)), rel=1e-13, abs=1e-13)
        ge = np.asarray(eager(x))
        np.testing.assert_allclose(g, ge, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(ft.grad(x), g, rtol=0, atol=0)
        np.testing.assert_allclose(g, _central(f, x), rtol=1e-6, atol=1e-7)


def _general(kernel):
    """``kernel``'s source as Python with the inline tiny paths off."""
    copy = interpret.python_copy(kernel, dict(interpret.STAND_INS))
    copy.__globals__["TINY"] = copy.__globals__["TINY_ELEMENTWISE"] = 0
    return copy


def _bits(a):
    return np.ascontiguousarray(a, np.float64).view(np.int64)


@pytest.mark.parametrize("f", EXACT, ids=lambda f: f.__name__)
def test_inline_replay_is_the_families(f):
    ft = tg.trace(f, X0)
    rep = _replay(ft)
    assert not rep.segs
    x1, x2 = _inputs()[:2]
    ft(x1)
    small = [r for r in range(rep.n) if rep.size[r] <= SMALL]
    want = [rep.view(r).copy() for r in small]
    ft(x2)
    rep.view(rep.leaf_rec[0])[:] = x1
    s = _general(RK._replay)(rep.T, rep.faddr, np.zeros(rep.n, np.int64), rep.goff, rep.gvals,
                             0, rep.n, rep.mmk, RK.FWD.python_table())
    assert s == -1
    for r, w in zip(small, want):
        assert np.array_equal(_bits(rep.view(r)), _bits(w)), r


@pytest.mark.parametrize("f", EXACT, ids=lambda f: f.__name__)
def test_inline_sweep_is_the_families(f):
    ft = tg.trace(f, X0)
    rep = _replay(ft)
    x1 = _inputs()[1]
    g = np.array(ft.grad(x1), copy=True)   # compiled sweep, inline paths on
    (root,) = rep.roots
    (leaf,) = rep.leaf_rec
    rep.aptr[:] = rep.aptr0
    rep.reached[:] = False
    rep.adj.add(root, np.ones(1))
    s = _general(SW._sweep)(rep.T, rep.freed, np.arange(root, -1, -1), root, -1, rep.mmk,
                            VJP.python_table())
    assert s == -1
    assert rep.reached[leaf]
    assert np.array_equal(_bits(rep.adj[leaf]), _bits(g))
