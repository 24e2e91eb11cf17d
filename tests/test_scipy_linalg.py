"""``tapegrad.scipy.linalg`` against SciPy, one table row per use.

Each row gives tapegrad's function of tensors, SciPy's of arrays, and its
inputs (fixed seeds, well conditioned).  Checked per row: the value against
SciPy's; the gradient of a random projection, for every input and every
entry, against float64 central differences of SciPy's own function (so the
oracle is independent, and an input SciPy reads only in part -- a triangle,
a diagonal -- is perturbed in the part it does not read too: inputs carry
noise there, and the gradient must be zero there); forward mode (``tg.jvp``)
against the same differences; second order (``tg.hvp``) against central
differences of ``tg.grad``, and ``create_graph=True`` against ``tg.hvp``.
Then errors, traces and the import rule.
"""
import os
import pathlib
import subprocess
import sys
from typing import Callable, NamedTuple

import numpy as np
import pytest
import scipy.linalg as sl

import tapegrad as tg
from tapegrad.scipy import linalg as L

from oracle import check_hvp

N = 3


def _rng(name):
    return np.random.default_rng(sum(map(ord, name)))


def spd(rng, n=N, batch=()):
    m = rng.standard_normal(batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


def noise(rng, shape, keep):
    """Noise on the entries outside ``keep`` (a mask of what is read)."""
    return np.where(keep, 0.0, 0.5 * rng.standard_normal(shape))


UPPER, LOWER = np.triu(np.ones((N, N), bool)), np.tril(np.ones((N, N), bool))
DIAG = np.eye(N, dtype=bool)


def well(rng, shape, keep=None):
    """A well-conditioned matrix (stack); ``keep``: entries read, the rest noise."""
    a = rng.standard_normal(shape) + 3 * np.eye(shape[-1])
    return a if keep is None else np.where(keep, a, 0) + noise(rng, shape, keep)


def spd_read(rng, keep, batch=()):
    """SPD in the triangle ``keep`` (what is read), noise in the other."""
    return np.where(keep, spd(rng, N, batch), 0) + noise(rng, batch + (N, N), keep)


class Case(NamedTuple):
    name: str
    ours: Callable          # tensors -> tensor
    theirs: Callable        # arrays -> array
    inputs: Callable        # rng -> list of arrays
    second: bool = True     # run the second-order checks


def _eig_pack(w, V, cat):
    """Eigenvalues and the squared eigenvector entries (free of the sign)."""
    shape = tuple(np.shape(w)[:-1]) + (-1,)
    return cat([w, (V ** 2).reshape(shape)], axis=-1)


def _tg_cat(xs, axis):
    return tg.concatenate(xs, axis=axis)


def _tg_eig(out):
    w, V = out
    return _eig_pack(w, V, _tg_cat)


def _np_eig(out):
    w, V = out
    return _eig_pack(w, V, np.concatenate)


def _lu_pack(out, cat):
    p, l, u = out
    return cat([l.reshape(-1), u.reshape(-1)], axis=0)


def _lu_inputs(rng):
    """An LU factor (unit lower below the diagonal, a well-conditioned upper
    triangle) and pivots, given directly to lu_solve."""
    lu = np.tril(0.5 * rng.standard_normal((N, N)), -1) + np.triu(well(rng, (N, N)))
    return [lu, rng.standard_normal((N, 2))]


PIV = np.array([2, 1, 2], np.int32)

CASES = [
    # solve_triangular: the triangle read, noise in the other
    Case("solve_triangular lower",
         lambda a, b: L.solve_triangular(a, b, lower=True),
         lambda a, b: sl.solve_triangular(a, b, lower=True),
         lambda r: [well(r, (N, N), LOWER), r.standard_normal((N, 2))]),
    Case("solve_triangular upper trans unit vector",
         lambda a, b: L.solve_triangular(a, b, trans=1, unit_diagonal=True),
         lambda a, b: sl.solve_triangular(a, b, trans=1, unit_diagonal=True),
         lambda r: [np.triu(well(r, (N, N)), 1) + noise(r, (N, N), UPPER & ~DIAG),
                    r.standard_normal(N)]),
    Case("solve_triangular stacked 'T'",
         lambda a, b: L.solve_triangular(a, b, trans="T", lower=True),
         lambda a, b: sl.solve_triangular(a, b, trans="T", lower=True),
         lambda r: [well(r, (2, N, N), LOWER), r.standard_normal(N)]),
    # Cholesky: the symmetric matrix of one triangle
    Case("cholesky upper", lambda a: L.cholesky(a), lambda a: sl.cholesky(a),
         lambda r: [spd_read(r, UPPER)]),
    Case("cholesky lower stacked", lambda a: L.cholesky(a, lower=True),
         lambda a: sl.cholesky(a, lower=True), lambda r: [spd_read(r, LOWER, (2,))]),
    Case("cho_factor upper",  # SciPy's other triangle is arbitrary: ours is zero
         lambda a: L.cho_factor(a)[0], lambda a: np.triu(sl.cho_factor(a)[0]),
         lambda r: [spd_read(r, UPPER)]),
    Case("cho_factor lower",
         lambda a: L.cho_factor(a, lower=True)[0],
         lambda a: np.tril(sl.cho_factor(a, lower=True)[0]),
         lambda r: [spd_read(r, LOWER)]),
    Case("cho_solve given the factor",
         lambda c, b: L.cho_solve((c, False), b), lambda c, b: sl.cho_solve((c, False), b),
         lambda r: [well(r, (N, N), UPPER), r.standard_normal((N, 2))]),
    Case("cho_solve lower stacked vector",
         lambda c, b: L.cho_solve((c, True), b), lambda c, b: sl.cho_solve((c, True), b),
         lambda r: [well(r, (2, N, N), LOWER), r.standard_normal(N)]),
    Case("cho_factor + cho_solve through m m^T + n I",
         lambda m, b: L.cho_solve(L.cho_factor(m @ m.T + N * np.eye(N), lower=True), b),
         lambda m, b: sl.cho_solve(sl.cho_factor(m @ m.T + N * np.eye(N), lower=True), b),
         lambda r: [r.standard_normal((N, N)), r.standard_normal(N)]),
    # LU
    Case("lu_factor", lambda a: L.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0],
         lambda r: [r.standard_normal((4, 4))]),
    Case("lu_factor tall", lambda a: L.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0],
         lambda r: [r.standard_normal((4, 3))]),
    Case("lu_factor wide", lambda a: L.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0],
         lambda r: [r.standard_normal((3, 5))]),
    Case("lu_factor stacked", lambda a: L.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0],
         lambda r: [r.standard_normal((2, N, N))]),
    Case("lu_factor + lu_solve",
         lambda a, b: L.lu_solve(L.lu_factor(a), b), lambda a, b: sl.lu_solve(sl.lu_factor(a), b),
         lambda r: [r.standard_normal((N, N)), r.standard_normal((N, 2))]),
    Case("lu_factor + lu_solve trans stacked",
         lambda a, b: L.lu_solve(L.lu_factor(a), b, trans=1),
         lambda a, b: sl.lu_solve(sl.lu_factor(a), b, trans=1),
         lambda r: [r.standard_normal((2, N, N)), r.standard_normal(N)]),
    Case("lu_solve given the factor",
         lambda lu, b: L.lu_solve((lu, PIV), b), lambda lu, b: sl.lu_solve((lu, PIV), b),
         _lu_inputs),
    Case("lu_solve given the factor trans",
         lambda lu, b: L.lu_solve((lu, PIV), b, trans=2),
         lambda lu, b: sl.lu_solve((lu, PIV), b, trans=2), _lu_inputs),
    Case("lu", lambda a: _lu_pack(L.lu(a), _tg_cat), lambda a: _lu_pack(sl.lu(a), np.concatenate),
         lambda r: [r.standard_normal((4, 3))]),
    Case("lu permute_l", lambda a: L.lu(a, permute_l=True)[0],
         lambda a: sl.lu(a, permute_l=True)[0], lambda r: [r.standard_normal((N, N))]),
    # expm: Pade degrees 3 to 13, and squarings
    Case("expm degree 3", L.expm, sl.expm, lambda r: [0.004 * r.standard_normal((N, N))]),
    Case("expm degree 7", L.expm, sl.expm, lambda r: [0.25 * r.standard_normal((N, N))]),
    Case("expm degree 13", L.expm, sl.expm, lambda r: [1.5 * r.standard_normal((N, N))]),
    Case("expm squarings stacked", L.expm, sl.expm,
         lambda r: [4.0 * r.standard_normal((2, N, N))]),
    # solve with each structure: what it reads, noise elsewhere
    Case("solve", L.solve, sl.solve, lambda r: [well(r, (N, N)), r.standard_normal((N, 2))]),
    Case("solve transposed vector", lambda a, b: L.solve(a, b, transposed=True),
         lambda a, b: sl.solve(a, b, transposed=True),
         lambda r: [well(r, (N, N)), r.standard_normal(N)]),
    Case("solve stacked broadcast", L.solve, sl.solve,
         lambda r: [well(r, (2, N, N)), r.standard_normal((N, 2))]),
    Case("solve sym upper", lambda a, b: L.solve(a, b, assume_a="sym"),
         lambda a, b: sl.solve(a, b, assume_a="sym"),
         lambda r: [well(r, (N, N), UPPER), r.standard_normal((N, 2))]),
    Case("solve her lower", lambda a, b: L.solve(a, b, assume_a="her", lower=True),
         lambda a, b: sl.solve(a, b, assume_a="her", lower=True),
         lambda r: [well(r, (N, N), LOWER), r.standard_normal(N)]),
    Case("solve pos", lambda a, b: L.solve(a, b, assume_a="pos"),
         lambda a, b: sl.solve(a, b, assume_a="pos"),
         lambda r: [spd_read(r, UPPER), r.standard_normal((N, 2))]),
    Case("solve pos lower", lambda a, b: L.solve(a, b, assume_a="positive definite", lower=True),
         lambda a, b: sl.solve(a, b, assume_a="positive definite", lower=True),
         lambda r: [spd_read(r, LOWER), r.standard_normal(N)]),
    Case("solve diagonal", lambda a, b: L.solve(a, b, assume_a="diagonal"),
         lambda a, b: sl.solve(a, b, assume_a="diagonal"),
         lambda r: [well(r, (N, N), DIAG), r.standard_normal((N, 2))]),
    Case("solve tridiagonal", lambda a, b: L.solve(a, b, assume_a="tridiagonal"),
         lambda a, b: sl.solve(a, b, assume_a="tridiagonal"),
         lambda r: [well(r, (4, 4), np.abs(np.subtract.outer(range(4), range(4))) <= 1),
                    r.standard_normal(4)]),
    Case("solve lower triangular transposed",
         lambda a, b: L.solve(a, b, assume_a="lower triangular", transposed=True),
         lambda a, b: sl.solve(a, b, assume_a="lower triangular", transposed=True),
         lambda r: [well(r, (N, N), LOWER), r.standard_normal((N, 2))]),
    # inv, det
    Case("inv", L.inv, sl.inv, lambda r: [well(r, (N, N))]),
    Case("inv stacked", L.inv, sl.inv, lambda r: [well(r, (2, N, N))]),
    Case("inv sym", lambda a: L.inv(a, assume_a="sym"), lambda a: sl.inv(a, assume_a="sym"),
         lambda r: [well(r, (N, N), UPPER)]),
    Case("inv pos lower", lambda a: L.inv(a, assume_a="pos", lower=True),
         lambda a: sl.inv(a, assume_a="pos", lower=True), lambda r: [spd_read(r, LOWER)]),
    Case("inv upper triangular", lambda a: L.inv(a, assume_a="upper triangular"),
         lambda a: sl.inv(a, assume_a="upper triangular"), lambda r: [well(r, (N, N), UPPER)]),
    Case("det", L.det, sl.det, lambda r: [well(r, (N, N))]),
    Case("det stacked", L.det, sl.det, lambda r: [well(r, (2, N, N))]),
    # eigh: the symmetric matrix of one triangle; eigenvectors up to sign
    Case("eigh", lambda a: _tg_eig(L.eigh(a)), lambda a: _np_eig(sl.eigh(a)),
         lambda r: [spd_read(r, LOWER)]),
    Case("eigh upper stacked", lambda a: _tg_eig(L.eigh(a, lower=False)),
         lambda a: _np_eig(sl.eigh(a, lower=False)), lambda r: [spd_read(r, UPPER, (2,))]),
    Case("eigh eigvals_only", lambda a: L.eigh(a, eigvals_only=True),
         lambda a: sl.eigh(a, eigvals_only=True), lambda r: [spd_read(r, LOWER)]),
    Case("eigvalsh subset_by_index", lambda a: L.eigvalsh(a, subset_by_index=(1, 2)),
         lambda a: sl.eigvalsh(a, subset_by_index=(1, 2)), lambda r: [spd_read(r, LOWER)]),
    Case("eigh generalised", lambda a, b: _tg_eig(L.eigh(a, b)),
         lambda a, b: _np_eig(sl.eigh(a, b)),
         lambda r: [spd_read(r, LOWER), spd_read(r, LOWER)]),
    Case("eigh generalised type 2 upper", lambda a, b: _tg_eig(L.eigh(a, b, type=2, lower=False)),
         lambda a, b: _np_eig(sl.eigh(a, b, type=2, lower=False)),
         lambda r: [spd_read(r, UPPER), spd_read(r, UPPER)]),
    Case("eigh generalised type 3", lambda a, b: _tg_eig(L.eigh(a, b, type=3)),
         lambda a, b: _np_eig(sl.eigh(a, b, type=3)),
         lambda r: [spd_read(r, LOWER), spd_read(r, LOWER)]),
]

IDS = [c.name for c in CASES]


def _arrays(case):
    return [np.asarray(x, np.float64) for x in case.inputs(_rng(case.name))]


def _value(y):
    return np.asarray(y.numpy() if isinstance(y, tg.Tensor) else y, np.float64)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_value_matches_scipy(case):
    xs = _arrays(case)
    want = case.theirs(*[x.copy() for x in xs])
    got = case.ours(*[tg.tensor(x, requires_grad=True) for x in xs])
    assert isinstance(got, tg.Tensor) and got.shape == np.shape(want)
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(_value(got), want, rtol=1e-10, atol=1e-12 * scale)
    # arrays in give the same numbers, bit for bit
    np.testing.assert_array_equal(_value(case.ours(*xs)), _value(got))


def _fd_gradient(f, xs, i, eps=1e-6):
    """d f / d xs[i], entry by entry, by central differences of SciPy's f."""
    g = np.zeros(xs[i].shape)
    for k in range(xs[i].size):
        e = np.zeros(xs[i].size)
        e[k] = eps
        e = e.reshape(xs[i].shape)
        hi = [x.copy() for x in xs]
        lo = [x.copy() for x in xs]
        hi[i] = hi[i] + e
        lo[i] = lo[i] - e
        g.flat[k] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradient_matches_central_differences_of_scipy(case):
    xs = _arrays(case)
    v = _rng(case.name + "v").standard_normal(np.shape(case.theirs(*xs)))
    grads = tg.grad(lambda *ts: (v * case.ours(*ts)).sum(), argnums=tuple(range(len(xs))))(*xs)
    for i, x in enumerate(xs):
        fd = _fd_gradient(lambda *ys: float(np.sum(v * case.theirs(*ys))), xs, i)
        assert grads[i].shape == x.shape
        np.testing.assert_allclose(grads[i], fd, rtol=1e-6, atol=1e-7 * (1 + np.abs(fd).max()),
                                   err_msg=f"input {i}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_mode_matches_central_differences(case):
    xs = _arrays(case)
    rng = _rng(case.name + "t")
    ts = [rng.standard_normal(x.shape) for x in xs]
    _, tangent = tg.jvp(case.ours, tuple(xs), tuple(ts))
    eps = 1e-6
    fd = (case.theirs(*[x + eps * t for x, t in zip(xs, ts)])
          - case.theirs(*[x - eps * t for x, t in zip(xs, ts)])) / (2 * eps)
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-7 * (1 + np.abs(fd).max()))


SECOND = [c for c in CASES if c.second]


@pytest.mark.parametrize("case", SECOND, ids=[c.name for c in SECOND])
def test_second_order(case):
    xs = _arrays(case)
    # tg.hvp against central differences of tg.grad (the first order being
    # checked against SciPy above)
    check_hvp(case.ours, xs, _rng(case.name + "h"))
    # create_graph=True: the gradient of <grad, t> is tg.hvp's product
    rng = _rng(case.name + "c")
    v = rng.standard_normal(np.shape(case.theirs(*xs)))
    ts = [rng.standard_normal(x.shape) for x in xs]
    f = lambda *zs: (v * case.ours(*zs)).sum() + 0.25 * (case.ours(*zs) ** 2).sum()  # noqa: E731
    leaves = [tg.tensor(x, requires_grad=True) for x in xs]
    gs = tg.autograd.grad(f(*leaves), leaves, create_graph=True)
    inner = sum((g * t).sum() for g, t in zip(gs, ts))
    hv_cg = tg.autograd.grad(inner, leaves, allow_unused=True)
    _, hv = tg.hvp(f, tuple(xs), tuple(ts))
    for a, b in zip(hv_cg, hv):
        a = np.zeros_like(b) if a is None else a.numpy()
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10 * (1 + np.abs(b).max()))


def test_hessian_of_a_gaussian_log_likelihood():
    """tg.hessian through cho_factor, cho_solve and a log-determinant of the
    factor's diagonal, against central differences of tg.grad."""
    rng = np.random.default_rng(5)
    y = rng.standard_normal(N)

    def nll(m):
        c, low = L.cho_factor(m @ m.T + np.eye(N), lower=True)
        return 0.5 * (y * L.cho_solve((c, low), y)).sum() + tg.log(tg.diagonal(c)).sum()

    m = rng.standard_normal((N, N))
    H = tg.hessian(nll)(m)
    g = tg.grad(nll)
    eps = 1e-5
    fd = np.stack([(g(m + eps * e) - g(m - eps * e)) / (2 * eps)
                   for e in np.eye(m.size).reshape((-1,) + m.shape)])
    np.testing.assert_allclose(H.reshape(m.size, m.size), fd.reshape(m.size, m.size),
                               rtol=1e-6, atol=1e-8)


def test_expm_third_order_create_graph():
    """d^3/dt^3 of expm(t A)[0, 1] at t = 1 is (A^3 expm(A))[0, 1]."""
    rng = np.random.default_rng(9)
    A = rng.standard_normal((N, N))
    t = tg.tensor(1.0, requires_grad=True)
    y = L.expm(t * A)[0, 1]
    (d1,) = tg.autograd.grad(y, [t], create_graph=True)
    (d2,) = tg.autograd.grad(d1, [t], create_graph=True)
    (d3,) = tg.autograd.grad(d2, [t])
    E = sl.expm(A)
    np.testing.assert_allclose([d1.item(), d2.item(), d3.item()],
                               [(A @ E)[0, 1], (A @ A @ E)[0, 1], (A @ A @ A @ E)[0, 1]],
                               rtol=1e-11)


# -- outputs that are not differentiable ---------------------------------------------------
def test_lu_factor_pivots_and_lu_permutations_are_scipys():
    rng = np.random.default_rng(2)
    for shape in [(4, 4), (5, 3), (3, 5), (2, 4, 4)]:
        a = rng.standard_normal(shape)
        lu, piv = L.lu_factor(tg.tensor(a, requires_grad=True))
        want_lu, want_piv = sl.lu_factor(a)
        np.testing.assert_array_equal(piv, want_piv)
        assert piv.dtype == want_piv.dtype
        np.testing.assert_allclose(lu.numpy(), want_lu, rtol=1e-12, atol=1e-14)
        p, _, _ = L.lu(a)
        np.testing.assert_array_equal(p, sl.lu(a)[0])
        pi, l_, u_ = L.lu(a, p_indices=True)
        np.testing.assert_array_equal(pi, sl.lu(a, p_indices=True)[0])
        np.testing.assert_allclose(np.take_along_axis(l_.numpy(), pi[..., None], -2) @ u_.numpy(),
                                   a, atol=1e-13)


def test_cho_solve_takes_scipys_factor():
    # SciPy's c holds arbitrary entries in the other triangle: only the factor is read
    rng = np.random.default_rng(3)
    a, b = spd(rng), rng.standard_normal(N)
    for lower in (False, True):
        c = sl.cho_factor(a, lower=lower)
        np.testing.assert_allclose(L.cho_solve(c, b).numpy(), sl.cho_solve(c, b), rtol=1e-12)
        assert L.cho_factor(a, lower=lower)[1] is lower


def test_eigh_subset_by_value_and_driver():
    rng = np.random.default_rng(4)
    a = spd(rng)
    w = np.linalg.eigvalsh(a)
    lo, hi = (w[0] + w[1]) / 2, w[2] + 1
    got = L.eigh(tg.tensor(a, requires_grad=True), subset_by_value=(lo, hi), driver="evr")
    want = sl.eigh(a, subset_by_value=(lo, hi), driver="evr")
    np.testing.assert_allclose(got[0].numpy(), want[0], rtol=1e-12)
    np.testing.assert_allclose(np.abs(got[1].numpy()), np.abs(want[1]), rtol=1e-10, atol=1e-12)


# -- traces: the pivots and the Pade degree are guards ----------------------------------------
def test_traced_lu_and_expm_retrace_when_the_pivots_or_degree_change():
    @tg.compile
    def f(a, b):
        return (L.lu_solve(L.lu_factor(a), b) ** 2).sum() + L.expm(a).sum()

    rng = np.random.default_rng(6)
    b = rng.standard_normal(N)
    for k in range(4):
        a = rng.standard_normal((N, N)) * (0.05 if k % 2 else 2.0)   # other pivots, degree
        want = (sl.lu_solve(sl.lu_factor(a), b) ** 2).sum() + sl.expm(a).sum()
        np.testing.assert_allclose(float(f(a, b)), want, rtol=1e-10)
        ga, gb = f.grad(a, b)
        plain = tg.grad(lambda x, y: (L.lu_solve(L.lu_factor(x), y) ** 2).sum()
                        + L.expm(x).sum(), argnums=(0, 1))(a, b)
        np.testing.assert_allclose(ga, plain[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gb, plain[1], rtol=1e-10, atol=1e-12)
    assert f.retraces >= 1


# -- errors ------------------------------------------------------------------------------------
SQ = np.eye(N) * 2.0
B = np.ones(N)
SINGULAR = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
ZERO_DIAG = np.triu(np.ones((N, N))) - np.diag([0.0, 1.0, 0.0])

ERRORS = [
    ("solve singular", lambda: L.solve(SINGULAR, B), np.linalg.LinAlgError, "singular"),
    ("inv singular", lambda: L.inv(np.zeros((N, N))), np.linalg.LinAlgError, "singular"),
    ("solve_triangular zero diagonal", lambda: L.solve_triangular(ZERO_DIAG, B),
     np.linalg.LinAlgError, "diagonal entry 1 is exactly zero"),
    ("solve_triangular stacked zero diagonal",
     lambda: L.solve_triangular(np.stack([SQ, ZERO_DIAG]), B), np.linalg.LinAlgError,
     r"diagonal entry 1 of matrix \(1,\) of the stack"),
    ("solve diagonal zero", lambda: L.solve(ZERO_DIAG, B, assume_a="diagonal"),
     np.linalg.LinAlgError, "exactly zero"),
    ("lu_factor singular", lambda: L.lu_factor(np.ones((N, N))), np.linalg.LinAlgError,
     "singular.*pivot 1"),
    ("lu_solve zero pivot", lambda: L.lu_solve((ZERO_DIAG, PIV), B), np.linalg.LinAlgError,
     "diagonal entry of U 1"),
    ("cholesky not positive definite", lambda: L.cholesky(-SQ), np.linalg.LinAlgError,
     "not positive definite"),
    ("cho_factor not positive definite", lambda: L.cho_factor(np.diag([1.0, -1.0, 1.0])),
     np.linalg.LinAlgError, "upper triangle"),
    ("solve pos not positive definite", lambda: L.solve(-SQ, B, assume_a="pos"),
     np.linalg.LinAlgError, "not positive definite"),
    ("eigh b not positive definite", lambda: L.eigh(SQ, -SQ), np.linalg.LinAlgError,
     "not positive definite"),
    ("solve non-square", lambda: L.solve(np.ones((3, 2)), B), ValueError,
     r"square matrix .* got shape \(3, 2\)"),
    ("inv non-square", lambda: L.inv(np.ones((2, 3))), ValueError, "square"),
    ("det vector", lambda: L.det(np.ones(3)), ValueError, "square"),
    ("expm non-square", lambda: L.expm(np.ones((2, 3))), ValueError, "square"),
    ("eigh non-square", lambda: L.eigh(np.ones((2, 3))), ValueError, "square"),
    ("cholesky non-square", lambda: L.cholesky(np.ones((2, 3))), ValueError, "square"),
    ("solve_triangular non-square", lambda: L.solve_triangular(np.ones((2, 3)), B),
     ValueError, "square"),
    ("lu_factor vector", lambda: L.lu_factor(np.ones(3)), ValueError, r"\(\.\.\., M, N\)"),
    ("solve wrong b", lambda: L.solve(SQ, np.ones(2)), ValueError,
     r"shapes of a \(3, 3\) and b \(2,\) are incompatible"),
    ("solve b rows", lambda: L.solve(SQ, np.ones((2, 3))), ValueError, "incompatible"),
    ("solve batch", lambda: L.solve(np.stack([SQ] * 2), np.ones((3, N, 1))), ValueError,
     "do not broadcast"),
    ("cho_solve wrong b", lambda: L.cho_solve((SQ, False), np.ones(4)), ValueError,
     "incompatible"),
    ("lu_solve wrong b", lambda: L.lu_solve((SQ, PIV), np.ones((2, 2))), ValueError,
     "incompatible"),
    ("solve_triangular wrong b", lambda: L.solve_triangular(SQ, np.ones(2)), ValueError,
     "incompatible"),
    ("eigh a and b sizes", lambda: L.eigh(SQ, np.eye(2)), ValueError, "one size"),
    ("solve_triangular trans", lambda: L.solve_triangular(SQ, B, trans=3), ValueError,
     "trans must be"),
    ("solve assume_a", lambda: L.solve(SQ, B, assume_a="foo"), ValueError,
     "'foo' is not a recognized matrix structure"),
    ("inv assume_a", lambda: L.inv(SQ, assume_a="tridiagonal"), ValueError,
     "not a recognized"),
    ("lu_solve pivots dtype", lambda: L.lu_solve((SQ, np.zeros(N)), B), ValueError,
     "integer array"),
    ("lu_solve pivots range", lambda: L.lu_solve((SQ, np.array([0, 5, 2])), B), ValueError,
     r"\[0, 3\)"),
    ("lu_solve not a pair", lambda: L.lu_solve(SQ, B), TypeError, r"\(lu, piv\)"),
    ("cho_solve not a pair", lambda: L.cho_solve(SQ, B), TypeError, r"\(c, lower\)"),
    ("eigh type", lambda: L.eigh(SQ, type=4), ValueError, "type must be"),
    ("eigh driver", lambda: L.eigh(SQ, driver="xyz"), ValueError, "driver must be"),
    ("eigh subset_by_index", lambda: L.eigh(SQ, subset_by_index=(2, 5)), ValueError,
     "0 <= lo <= hi < 3"),
    ("eigh both subsets", lambda: L.eigh(SQ, subset_by_index=(0, 1), subset_by_value=(0, 1)),
     ValueError, "not both"),
    ("solve nan", lambda: L.solve(SQ * np.nan, B), ValueError, "infs or NaNs"),
    ("expm inf", lambda: L.expm(np.full((N, N), np.inf)), ValueError, "infs or NaNs"),
    ("solve complex", lambda: L.solve(SQ + 1j, B), NotImplementedError, "complex"),
    ("det strings", lambda: L.det(np.array([["a"]])), TypeError, "real array"),
]


@pytest.mark.parametrize("call, exc, match", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_an_error_leaves_the_operand_untouched():
    a = tg.tensor(SINGULAR, requires_grad=True)
    with pytest.raises(np.linalg.LinAlgError):
        L.lu_factor(a)
    with pytest.raises(np.linalg.LinAlgError):
        L.solve(a, B)
    assert a.grad is None
    (a * 2.0).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.full((N, N), 2.0))


def test_importing_tapegrad_does_not_import_scipy():
    code = ("import sys, tapegrad, tapegrad.scipy.linalg as L, numpy as np; "
            "L.solve(np.eye(2), np.ones(2)); L.expm(np.eye(2)); "
            "assert 'scipy' not in sys.modules, 'scipy was imported'")
    root = pathlib.Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root,
                   env={**os.environ, "PYTHONPATH": str(root)})
