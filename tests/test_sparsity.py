"""Hessian sparsity (tapegrad.transforms.sparsity) and Hessians from coloured directions:
the structural pattern holds every nonzero of the dense Hessian for every op
in the gradient table (so new ops are covered automatically), the colouring
is valid, coloured Hessians equal dense ones, eager and traced, and the
pattern is tight where the op's structure allows."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.transforms.second import passes as S
from tapegrad.transforms import sparsity as SP

from op_cases import CASES
from test_second import NO_SECOND, _fd_hessian, _weights, rosen, rosen_hessian


def _pattern_set(f, *xs, argnums=0):
    rows, cols = tg.hessian_sparsity(f, argnums)(*xs)
    return set(zip(rows.tolist(), cols.tolist()))


def _dense(n, pairs):
    M = np.zeros((n, n), bool)
    for i, j in pairs:
        M[i, j] = True
    return M


def _assert_holds(H, rows, cols, scale):
    """Every entry of H outside the pattern is zero (to roundoff)."""
    n = H.shape[0]
    outside = np.ones((n, n), bool)
    outside[rows, cols] = False
    assert np.abs(H[outside]).max(initial=0.0) <= 1e-12 * scale, \
        np.argwhere(outside & (np.abs(H) > 1e-12 * scale))[:5]


# -- every op in the table ----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(set(CASES) - set(NO_SECOND)))
def test_pattern_holds_every_nonzero_and_coloured_hessian_equals_dense(name):
    strategy, fn = CASES[name]

    @settings(max_examples=4, deadline=None)
    @given(case=strategy, seed=st.integers(0, 2**32 - 1), square=st.booleans())
    def run(case, seed, square):
        shapes, domains, params = case
        rng = np.random.default_rng(seed)
        arrays = [d(rng, s) for d, s in zip(domains, shapes)]

        def f(*xs):
            y = fn(*xs, **params)
            out = (_weights(np.shape(y), 1) * y).sum()
            # without the square only the op's own second derivative shows;
            # with it every pair of inputs one output element reads does
            return out + 0.25 * (_weights(np.shape(y), 0.5) * y * y).sum() if square else out

        nums = tuple(range(len(arrays)))
        _, H = S._hessian_flat(f, arrays, nums, False, "t")
        rows, cols = tg.hessian_sparsity(f, nums)(*arrays)
        scale = 1.0 + np.abs(H).max(initial=0.0)
        _assert_holds(H, rows, cols, scale)
        # the pattern is symmetric and sorted
        np.testing.assert_array_equal(np.lexsort((cols, rows)), np.arange(rows.size))
        assert _pattern_set(f, *arrays, argnums=nums) == set(zip(cols.tolist(), rows.tolist()))
        # the Hessian from coloured directions is the dense one
        _, Hc = S._hessian_flat(f, arrays, nums, True, "t")
        np.testing.assert_allclose(Hc, H, rtol=1e-12, atol=1e-12 * scale)

    run()


# -- tight where the structure allows --------------------------------------------------------
def test_products_couple_across_not_within():
    x = np.linspace(0.5, 1.5, 4)
    # x0 x1 + x1 x2 + x2 x3: bilinear, nothing on the diagonal
    assert _pattern_set(lambda x: (x[:-1] * x[1:]).sum(), x) == \
        {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)}
    # a / b is nonlinear in b only
    assert _pattern_set(lambda x: (x[:2] / x[2:]).sum(), x) == \
        {(0, 2), (2, 0), (1, 3), (3, 1), (2, 2), (3, 3)}
    # elementwise nonlinear: diagonal only
    assert _pattern_set(lambda x: tg.sin(x).sum(), x) == {(i, i) for i in range(4)}


def test_linear_and_piecewise_linear_ops_couple_nothing():
    x = np.linspace(-1.0, 1.0, 5)
    for f in (lambda x: (3.0 * x - x[::-1]).sum(),
              lambda x: tg.where(x > 0, x, -2.0 * x).sum(),
              lambda x: tg.maximum(x, x[::-1]).sum() + tg.abs(x).sum(),
              lambda x: tg.concatenate([x, x[1:]]).mean() + tg.cumsum(x).sum(),
              lambda x: (np.arange(25.0).reshape(5, 5) @ x).sum()):
        assert _pattern_set(f, x) == set()
        np.testing.assert_array_equal(tg.hessian(f, sparse=True)(x), np.zeros((5, 5)))


def test_pattern_is_structural_not_pointwise():
    # the squared branch is not taken at this point, its pairs still count:
    # the pattern holds wherever the function records this graph
    x = -np.ones(3)
    f = lambda x: tg.where(x > 0, x ** 2, 0.0).sum()  # noqa: E731
    np.testing.assert_array_equal(tg.hessian(f)(x), np.zeros((3, 3)))
    assert _pattern_set(f, x) == {(i, i) for i in range(3)}


def test_pattern_follows_indexing_reductions_and_matmul():
    x = np.linspace(0.5, 1.5, 6)
    # gathers keep element identity: (x0 x5)^2 couples 0, 5 only
    assert _pattern_set(lambda x: (x[[0]] * x[[5]]) ** 2, x) == \
        {(0, 0), (0, 5), (5, 0), (5, 5)}
    # a partial sum mixes its row: exp of row sums couples within rows
    P = _pattern_set(lambda x: tg.exp(x.reshape(2, 3).sum(axis=1)).sum(), x)
    assert P == {(i, j) for i in range(3) for j in range(3)} | \
        {(i, j) for i in range(3, 6) for j in range(3, 6)}
    # matmul of two input-dependent operands: A[i, :] with B[:, k]
    f = lambda x: (x[:4].reshape(2, 2) @ x[4:].reshape(2, 1)).sum()  # noqa: E731
    H = tg.hessian(f, sparse=False)(x)
    P = _pattern_set(f, x)
    rows, cols = np.nonzero(H)
    assert set(zip(rows.tolist(), cols.tolist())) <= P
    assert all(i < 4 <= j or j < 4 <= i for i, j in P)  # no A-A or B-B pairs
    # softmax couples within rows only
    P = _pattern_set(lambda x: (tg.softmax(x.reshape(3, 2), axis=1) * x.reshape(3, 2)).sum(), x)
    assert all(i // 2 == j // 2 for i, j in P) and len(P) == 12


def test_multi_output_ops_and_host_ops():
    x = np.linspace(0.5, 1.5, 6)
    # split: each piece keeps its own elements
    f = lambda x: sum((s ** 3).sum() for s in tg.split(x, 3))  # noqa: E731
    assert _pattern_set(f, x) == {(i, i) for i in range(6)}
    # a host op with no rule of its own (det): everything it reads couples
    g = lambda x: tg.linalg.det(x[:4].reshape(2, 2)) + (x[4:] ** 2).sum()  # noqa: E731
    P = _pattern_set(g, x)
    assert {(i, j) for i in range(4) for j in range(4)} <= P
    assert not any(i < 4 <= j for i, j in P)
    for fn in (f, g):
        np.testing.assert_allclose(tg.hessian(fn, sparse=True)(x), _fd_hessian(fn, x),
                                   rtol=1e-6, atol=1e-6)


# -- the colouring ----------------------------------------------------------------------------
def _random_pattern(n, density, hubs, seed):
    """A random symmetric pattern, plus ``hubs`` columns coupled with all."""
    rng = np.random.default_rng(seed)
    M = rng.random((n, n)) < density
    M[rng.permutation(n)[:hubs]] = True
    M = M | M.T
    return M, rng


#: random symmetric patterns: size, density, columns coupled with all, seed
PATTERNS = dict(n=st.integers(1, 40), density=st.floats(0.0, 0.5), hubs=st.integers(0, 2),
                seed=st.integers(0, 2**32 - 1))


@settings(max_examples=80, deadline=None)
@given(**PATTERNS)
def test_colouring_recovers_every_symmetric_matrix_exactly(n, density, hubs, seed):
    M, rng = _random_pattern(n, density, hubs, seed)
    rows, cols = np.nonzero(M)
    color, p = SP.colors(rows, cols, n)
    assert color.shape == (n,) and color.min(initial=0) >= 0
    assert color.max(initial=-1) < p if rows.size else p == 0
    # a random symmetric H with this pattern is recovered exactly from p products
    H = np.where(M, rng.standard_normal((n, n)), 0.0)
    H = H + H.T
    hv = SP.seeds(color, p) @ H  # row c: (H s_c)^T (H symmetric)
    got = np.zeros((n, n))
    got[rows, cols] = SP.recover(hv, rows, cols, color)
    np.testing.assert_array_equal(got, H)


@settings(max_examples=60, deadline=None)
@given(**PATTERNS)
def test_distance2_and_star_colourings_hold_their_properties(n, density, hubs, seed):
    from tapegrad.kernels.coloring import color_columns, star_color
    M, _ = _random_pattern(n, density, hubs, seed)
    rows, cols = np.nonzero(M)
    ptr = np.concatenate(([0], np.cumsum(M.sum(axis=1))))
    color, p = color_columns(ptr, cols.astype(np.int64), n)
    for i in range(n):  # distance 2: no row holds two columns of one colour
        c = color[cols[rows == i]]
        assert np.unique(c).size == c.size
    color, p = star_color(ptr, cols.astype(np.int64), n)
    A = M & ~np.eye(n, dtype=bool)
    assert not (A & (color[:, None] == color[None, :])).any()  # a proper colouring
    # no path on four vertices in two colours
    for v in range(n):
        for w in np.flatnonzero(A[v]):
            for x in np.flatnonzero(A[w]):
                if x == v or color[x] != color[v]:
                    continue
                for y in np.flatnonzero(A[x]):
                    assert y in (v, w) or color[y] != color[w], (v, w, x, y)


def test_an_arrowhead_takes_two_colours():
    # one input coupled with all the others (a shared parameter): every pair of
    # columns shares row 0, so a distance-2 colouring needs n colours
    f = lambda x: (x[0] * x[1:] ** 2).sum() + tg.sin(x).sum()  # noqa: E731
    x = np.random.default_rng(4).uniform(0.5, 1.5, 300)
    h = tg.sparse_hessian(f)(x)
    assert h.colors == 2
    np.testing.assert_allclose(h.toarray(), tg.hessian(f, sparse=False)(x), rtol=1e-13,
                               atol=1e-13)
    np.testing.assert_allclose(tg.hessian(f)(x), tg.hessian(f, sparse=False)(x), rtol=1e-13,
                               atol=1e-13)


@pytest.mark.parametrize("b", [1, 2, 5])
def test_banded_patterns_take_2b_plus_1_colours_at_any_size(b):
    for n in (50, 5000):
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij", sparse=True)
        rows, cols = np.nonzero(np.abs(i - j) <= b)
        assert SP.colors(rows, cols, n)[1] == 2 * b + 1


# -- the transforms -----------------------------------------------------------------------------
def test_large_rosenbrock_from_three_directions():
    n = 10_000
    x = np.random.default_rng(0).uniform(-1.0, 1.5, n)
    h = tg.sparse_hessian(rosen)(x)
    assert h.colors == 3 and h.shape == (n, n) and h.rows.size == 3 * n - 2
    expect = rosen_hessian(x[:8])
    small = np.zeros((8, 8))
    keep = (h.rows < 8) & (h.cols < 8)
    small[h.rows[keep], h.cols[keep]] = h.data[keep]
    np.testing.assert_allclose(small[:7, :7], expect[:7, :7], rtol=1e-12)
    # the last diagonal entry is 200 (x_{n-1} appears only in one term)
    assert h.data[-1] == 200.0


@pytest.mark.parametrize("n", [10, 150])
def test_hessian_sparse_modes_agree_with_the_closed_form(n):
    x = np.random.default_rng(n).uniform(-1.0, 1.5, n)
    expect = rosen_hessian(x)
    for mode in (True, False, "auto"):
        np.testing.assert_allclose(tg.hessian(rosen, sparse=mode)(x), expect, rtol=1e-12,
                                   atol=1e-9)
    np.testing.assert_allclose(tg.sparse_hessian(rosen)(x).toarray(), expect, rtol=1e-12,
                               atol=1e-9)


def _count_patterns(monkeypatch):
    calls = []
    real = SP.pattern

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(SP, "pattern", spy)
    return calls


def test_auto_skips_small_inputs_and_dense_patterns(monkeypatch):
    calls = _count_patterns(monkeypatch)
    x = np.linspace(0.1, 1.0, S.SPARSE_MIN - 1)
    tg.hessian(rosen)(x)
    assert not calls  # below SPARSE_MIN: never looked for
    # a dense Hessian (exp of a sum) over many inputs: found dense, computed densely
    x = np.linspace(0.1, 1.0, S.SPARSE_MIN)
    f = lambda x: tg.exp(0.01 * x.sum()) + (x ** 2).sum()  # noqa: E731
    H = tg.hessian(f)(x)
    assert calls
    e = np.exp(0.01 * x.sum()) * 1e-4
    np.testing.assert_allclose(H, e + 2.0 * np.eye(x.size), rtol=1e-12)


def test_several_argnums_and_float32():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(0.5, 1.5, (3, 2)), rng.uniform(0.5, 1.5, 4)

    def f(a, b):
        return (tg.sin(a).sum(axis=1) * b[:3]).sum() + (b[1:] * b[:-1]).sum()
    dense = tg.hessian(f, (0, 1), sparse=False)(a, b)
    coloured = tg.hessian(f, (0, 1), sparse=True)(a, b)
    for rd, rc in zip(dense, coloured):
        for d, c in zip(rd, rc):
            np.testing.assert_allclose(c, d, rtol=1e-12, atol=1e-14)
    h = tg.sparse_hessian(f, (0, 1))(a, b)
    assert h.shape == (10, 10)
    full = np.block([[dense[0][0].reshape(6, 6), dense[0][1].reshape(6, 4)],
                     [dense[1][0].reshape(4, 6), dense[1][1].reshape(4, 4)]])
    np.testing.assert_allclose(h.toarray(), full, rtol=1e-12, atol=1e-14)
    H32 = tg.hessian(rosen, sparse=True)(np.linspace(0.1, 1.0, 20).astype(np.float32))
    assert H32.dtype == np.float32


def test_constant_and_linear_functions():
    x = np.ones(3)
    h = tg.sparse_hessian(lambda x: (2.0 * x).sum())(x)
    assert h.rows.size == 0 and h.colors == 0 and h.shape == (3, 3)
    np.testing.assert_array_equal(h.toarray(), np.zeros((3, 3)))
    assert tg.hessian_sparsity(lambda x: np.float64(1.0) + 0 * x.sum())(x)[0].size == 0
    np.testing.assert_array_equal(tg.hessian(lambda x: x.sum(), sparse=True)(x),
                                  np.zeros((3, 3)))


def _opaque_cube_derivative(x):
    return 3.0 * x.real * x    # an attribute: Numba compiles it, tapegrad cannot derive it


def test_errors_leave_the_tape_working():
    with pytest.raises(ValueError, match="sparse must be True, False or 'auto'"):
        tg.hessian(rosen, sparse="yes")
    with pytest.raises(TypeError, match="one number"):
        tg.sparse_hessian(lambda x: x ** 2)(np.ones(3))
    with pytest.raises(TypeError, match="one number"):
        tg.hessian_sparsity(lambda x: x ** 2)(np.ones(3))
    # ops with no second-order rule still say so on the coloured path
    op = tg.elementwise(lambda x: x ** 3, derivative=_opaque_cube_derivative)
    with pytest.raises(NotImplementedError, match="second_derivative="):
        tg.sparse_hessian(lambda x: op(x).sum())(np.ones(3))
    # and a graph recorded alongside is untouched
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (a ** 3).sum()
    tg.sparse_hessian(rosen)(np.ones(200))
    y.backward()
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 12.0])


# -- traced ---------------------------------------------------------------------------------
def test_traced_hessian_uses_the_colouring_found_once():
    n = 100
    x0 = np.random.default_rng(1).uniform(-1.0, 1.5, n)
    ft = tg.trace(rosen, x0)
    for k in range(3):
        x = x0 + 0.1 * k
        np.testing.assert_allclose(ft.hessian(x), rosen_hessian(x), rtol=1e-12, atol=1e-9)
    (rep,) = [r for reps in ft.cache.values() for r in reps]
    _, plan, found = rep._hessian_plan
    assert plan.p == 3 and found is not None
    h = ft.sparse_hessian(x0)
    assert h.colors == 3
    np.testing.assert_allclose(h.toarray(), rosen_hessian(x0), rtol=1e-12, atol=1e-9)


def test_traced_sparse_hessian_of_small_and_dense_functions():
    # below 8 inputs a trace uses unit directions; sparse_hessian colours anyway
    f = lambda x: (x[0] ** 2) * x[1] + tg.exp(x).sum()  # noqa: E731
    x = np.array([1.0, 3.0])
    ft = tg.trace(f, x)
    H = ft.hessian(x)
    h = ft.sparse_hessian(x)
    np.testing.assert_allclose(h.toarray(), H, rtol=1e-12)
    np.testing.assert_allclose(ft.hessian(x), H, rtol=1e-12)
    # the output is an input: nothing is nonzero
    g = tg.trace(lambda x: x[0], np.ones(1))
    assert g.sparse_hessian(np.ones(1)).rows.size == 0


# -- eager: the colouring kept while f records the same graph ----------------------------------
def test_same_graph_finds_its_pattern_once(monkeypatch):
    calls = _count_patterns(monkeypatch)
    rng = np.random.default_rng(5)
    h = tg.hessian(rosen)
    big = tg.hessian(rosen)
    for k in range(4):
        x = rng.uniform(-1.0, 1.5, 40)
        np.testing.assert_allclose(h(x), rosen_hessian(x), rtol=1e-12, atol=1e-9)
    # below SPARSE_MIN: dense on the first call, the pattern on the second, kept after
    assert len(calls) == 1
    for k in range(3):
        x = rng.uniform(-1.0, 1.5, S.SPARSE_MIN)
        np.testing.assert_allclose(big(x), rosen_hessian(x), rtol=1e-12, atol=1e-9)
    # a new input size is a new graph: from SPARSE_MIN on, its pattern at once
    assert len(calls) == 2


def test_a_changed_graph_gets_a_new_pattern(monkeypatch):
    calls = _count_patterns(monkeypatch)

    def f(x):
        # the branch decides the graph: a chain, or one coupling of all pairs
        if x[0] > 0:  # control flow on the value (float(x[0]) would raise here)
            return (x[:-1] * x[1:]).sum()
        return tg.exp(0.1 * x.sum())

    h = tg.hessian(f, sparse=True)
    x = np.linspace(0.1, 1.0, 30)
    for sign in (1, 1, -1, -1, 1):
        xs = sign * x
        np.testing.assert_allclose(h(xs), tg.hessian(f, sparse=False)(xs), rtol=1e-12,
                                   atol=1e-15)
    assert len(calls) == 3  # each change of graph, and only those
    # a constant of the graph that changes its structure (x ** c, c = 1 is linear)
    c = [2.0]
    g = tg.hessian(lambda x: (x ** c[0]).sum(), sparse=True)
    np.testing.assert_allclose(g(x), 2.0 * np.eye(30))
    c[0] = 1.0
    np.testing.assert_allclose(g(x), np.zeros((30, 30)))


def test_threads_keep_their_own_patterns():
    import threading
    h = tg.hessian(rosen)
    errors = []

    def work(n):
        try:
            for k in range(5):
                x = np.linspace(-1.0, 1.0, n) + 0.01 * k
                np.testing.assert_allclose(h(x), rosen_hessian(x), rtol=1e-12, atol=1e-9)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(n,)) for n in (20, 150, 33)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
