"""Linear algebra beyond the gradient table: values against NumPy, closed-form
gradients, output slots of the multi-output decompositions, errors, float32,
and (when PyTorch is installed) gradients side by side with PyTorch's."""
import numpy as np
import pytest

import tapegrad as tg

from oracle import check_vjp, close, leaf


def _sv_matrix(rng, shape, low=1.0, gap=0.6):
    """A matrix with well-separated singular values."""
    m, n = shape[-2:]
    k = min(m, n)
    U = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
    V = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
    s = low + gap * np.arange(k)[::-1]
    return (U * s) @ np.swapaxes(V, -1, -2)


# -- values equal NumPy's, and unpack as NumPy's do ----------------------------------------
@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (3, 3), (2, 3, 2)])
def test_decomposition_values_match_numpy(shape):
    rng = np.random.default_rng(0)
    A = rng.standard_normal(shape)
    t = leaf(A)
    for got, want in [(tg.linalg.qr(t), np.linalg.qr(A)), (np.linalg.qr(t), np.linalg.qr(A)),
                      (tg.linalg.svd(t), np.linalg.svd(A)),
                      (np.linalg.svd(t, full_matrices=False), np.linalg.svd(A, False))]:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            close(g, w, rtol=1e-12, atol=1e-12)
    close(tg.linalg.qr(t, "r"), np.linalg.qr(A, "r"), rtol=1e-12, atol=1e-12)
    close(tg.linalg.svd(t, compute_uv=False), np.linalg.svd(A, compute_uv=False))
    close(np.linalg.svdvals(t), np.linalg.svdvals(A))
    close(np.linalg.pinv(t), np.linalg.pinv(A), rtol=1e-10, atol=1e-12)
    U, S, Vh = tg.linalg.svd(t)
    res = tg.linalg.svd(t)
    assert res.U is res[0] and res.S is res[1] and res.Vh is res[2]
    q = tg.linalg.qr(t)
    assert q.Q is q[0] and q.R is q[1]


def test_lstsq_values_match_numpy():
    rng = np.random.default_rng(1)
    A, b = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    x, res, rank, s = np.linalg.lstsq(leaf(A), leaf(b))
    wx, wres, wrank, ws = np.linalg.lstsq(A, b)
    close(x, wx, rtol=1e-10)
    close(res, wres, rtol=1e-10)
    assert rank == wrank and isinstance(s, np.ndarray)
    close(s, ws)
    # underdetermined: no residuals (a plain empty array), x the min-norm solution
    x, res, rank, s = tg.linalg.lstsq(leaf(A.T), b[:3])
    assert res.size == 0 and not res.requires_grad
    close(x, np.linalg.lstsq(A.T, b[:3])[0], rtol=1e-10)


def test_no_grad_gives_plain_results():
    A = np.random.default_rng(2).standard_normal((3, 2))
    with tg.no_grad():
        Q, R = tg.linalg.qr(leaf(A))
        U, S, Vh = tg.linalg.svd(leaf(A))
        x = tg.linalg.lstsq(leaf(A), np.ones(3))[0]
    assert not any(t.requires_grad for t in (Q, R, U, S, Vh, x))
    assert not tg.linalg.pinv(tg.tensor(A)).requires_grad


# -- output slots ---------------------------------------------------------------------------
def test_qr_outputs_are_slots_of_one_node():
    A = leaf(np.random.default_rng(3).standard_normal((3, 2)))
    Q, R = tg.linalg.qr(A)
    y = Q.sum() * R.sum()
    assert Q.grad_fn.name() == "LinalgQrBackward" and Q.grad_fn == R.grad_fn
    (a, sa), (b, sb) = (Q.sum().grad_fn.next_functions[0], R.sum().grad_fn.next_functions[0])
    assert (sa, sb) == (0, 1) and a == b == Q.grad_fn
    assert Q.grad_fn.next_functions[0][0].variable is A
    y.backward()
    assert A.grad.shape == (3, 2)


def test_svd_outputs_are_slots_of_one_node():
    A = leaf(_sv_matrix(np.random.default_rng(4), (3, 2)))
    U, S, Vh = tg.linalg.svd(A, full_matrices=False)
    y = (U * S) @ Vh
    mul = y.grad_fn.next_functions[0][0]
    assert [s for _, s in mul.next_functions] == [0, 1]
    assert y.grad_fn.next_functions[1] == (U.grad_fn, 2)
    assert {n.name() for n, _ in mul.next_functions} == {"LinalgSvdBackward"}
    y.backward(np.ones((3, 2)))
    close(A.grad, np.ones((3, 2)), rtol=1e-10, atol=1e-12)  # d(U S Vh)/dA = identity


def test_lstsq_outputs_are_slots():
    A = leaf(_sv_matrix(np.random.default_rng(5), (4, 2)))
    x, res, rank, s = tg.linalg.lstsq(A, np.ones(4))
    assert (res.sum() + x.sum()).grad_fn.next_functions[0][0].next_functions[0][1] == 1
    assert x.grad_fn == res.grad_fn and x.grad_fn.name() == "LinalgLstsqBackward"


# -- closed forms ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (2, 3, 4)])
def test_sum_of_singular_values_gradient_is_u_vh(shape):
    A = np.random.default_rng(6).standard_normal(shape)
    t = leaf(A)
    tg.linalg.svd(t)[1].sum().backward()
    U, _, Vh = np.linalg.svd(A, full_matrices=False)
    close(t.grad, U @ Vh, rtol=1e-10, atol=1e-12)
    t2 = leaf(A)
    np.linalg.norm(t2, "nuc", axis=(-2, -1)).sum().backward()
    close(t2.grad, U @ Vh, rtol=1e-10, atol=1e-12)


def test_spectral_norm_gradient_is_top_singular_pair():
    A = _sv_matrix(np.random.default_rng(7), (4, 3))
    t = leaf(A)
    np.linalg.norm(t, 2).backward()
    U, _, Vh = np.linalg.svd(A)
    close(t.grad, np.outer(U[:, 0], Vh[0]), rtol=1e-10, atol=1e-12)
    t = leaf(A)
    np.linalg.norm(t, -2).backward()
    close(t.grad, np.outer(U[:, 2], Vh[2]), rtol=1e-10, atol=1e-12)


def test_pinv_of_invertible_has_inv_gradient():
    A = np.random.default_rng(8).standard_normal((2, 3, 3)) + 3 * np.eye(3)
    g = np.random.default_rng(9).standard_normal((2, 3, 3))
    p, i = leaf(A), leaf(A)
    tg.linalg.pinv(p).backward(g)
    tg.linalg.inv(i).backward(g)
    close(p.grad, i.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_lstsq_square_matches_solve():
    rng = np.random.default_rng(10)
    A, b = rng.standard_normal((3, 3)) + 3 * np.eye(3), rng.standard_normal(3)
    a1, b1, a2, b2 = leaf(A), leaf(b), leaf(A), leaf(b)
    tg.linalg.lstsq(a1, b1)[0].backward([1.0, 2.0, 3.0])
    tg.linalg.solve(a2, b2).backward([1.0, 2.0, 3.0])
    close(a1.grad, a2.grad.numpy(), rtol=1e-9, atol=1e-12)
    close(b1.grad, b2.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_singular_value_gradient_is_fine_for_repeated_values():
    t = leaf(np.eye(3))
    tg.linalg.svdvals(t).sum().backward()
    close(t.grad, np.eye(3))


def test_hermitian_svd_and_pinv_gradients_lie_on_the_lower_triangle():
    """hermitian=True reads a's lower triangle, as NumPy's: the gradient is
    that function's, for a symmetric a as for any other."""
    rng = np.random.default_rng(11)
    B = rng.standard_normal((3, 3))
    A = B @ B.T + np.eye(3)
    check_vjp(lambda a: tg.linalg.svd(a, hermitian=True)[1], [A], rng)
    check_vjp(lambda a: tg.linalg.svd(a, hermitian=True)[1], [A + 0.3 * B], rng)
    t = leaf(A)
    tg.linalg.pinv(t, hermitian=True).backward(rng.standard_normal((3, 3)))
    close(np.triu(t.grad.numpy(), 1), np.zeros((3, 3)))


# -- the rest of numpy.linalg ------------------------------------------------------------------
EXTRAS = {
    "matrix_power 3": (lambda a: np.linalg.matrix_power(a, 3), [(2, 3, 3)]),
    "matrix_power -2": (lambda a: np.linalg.matrix_power(a, -2), [(3, 3)]),
    "matrix_power 1": (lambda a: tg.linalg.matrix_power(a, 1), [(2, 2)]),
    "multi_dot": (lambda a, b, c: np.linalg.multi_dot([a, b, c]), [(2, 3), (3, 5), (5, 2)]),
    "multi_dot vectors": (lambda a, b, c: np.linalg.multi_dot([a, b, c]), [(3,), (3, 4), (4,)]),
    "eigvalsh": (lambda a: np.linalg.eigvalsh((a + np.swapaxes(a, -1, -2)) * 0.5), [(2, 3, 3)]),
    "tensorinv": (lambda a: np.linalg.tensorinv(a, ind=1), [(4, 2, 2)]),
    "tensorsolve": (lambda a, b: np.linalg.tensorsolve(a, b), [(2, 3, 6), (2, 3)]),
    "tensorsolve axes": (lambda a, b: np.linalg.tensorsolve(a, b, axes=(0,)), [(6, 2, 3), (2, 3)]),
    "cond": (lambda a: np.linalg.cond(a), [(2, 3, 3)]),
    "cond fro": (lambda a: np.linalg.cond(a, "fro"), [(3, 3)]),
    "matrix_norm nuc": (lambda a: np.linalg.matrix_norm(a, ord="nuc"), [(2, 3, 4)]),
    "vector_norm": (lambda a: np.linalg.vector_norm(a, axis=(0, 2), keepdims=True, ord=3),
                    [(2, 3, 4)]),
    "vector_norm all": (lambda a: np.linalg.vector_norm(a), [(2, 3)]),
    "norm 2 axis keepdims": (lambda a: np.linalg.norm(a, 2, axis=(2, 0), keepdims=True),
                             [(3, 2, 4)]),
    "norm -2 batched": (lambda a: np.linalg.norm(a, -2, axis=(-2, -1)), [(2, 3, 2)]),
    "norm vector -inf": (lambda a: np.linalg.norm(a, -np.inf), [(5,)]),
    "norm vector -1.5": (lambda a: np.linalg.norm(a, -1.5, axis=1), [(2, 5)]),
    "dot 3d": (np.dot, [(2, 3, 4), (5, 4, 2)]),
    "dot 3d vector": (np.dot, [(2, 3, 4), (4,)]),
    "dot vector 3d": (tg.dot, [(3,), (2, 3, 4)]),
    "linalg matmul": (np.linalg.matmul, [(2, 3), (3, 2)]),
    "linalg diagonal": (lambda a: np.linalg.diagonal(a, offset=1), [(2, 3, 4)]),
    "linalg trace": (lambda a: np.linalg.trace(a), [(2, 3, 4)]),
    "vecdot": (lambda a, b: np.linalg.vecdot(a, b, axis=0), [(3, 2), (3, 1)]),
    "linalg tensordot": (lambda a, b: np.linalg.tensordot(a, b, axes=1), [(2, 3), (3, 4)]),
    "linalg outer": (np.linalg.outer, [(2,), (3,)]),
    "matrix_transpose": (lambda a: np.linalg.matrix_transpose(a) * np.arange(6.0).reshape(3, 2),
                         [(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(EXTRAS))
def test_more_linalg(name):
    fn, shapes = EXTRAS[name]
    rng = np.random.default_rng(12)
    arrays = [_sv_matrix(rng, s) if len(s) >= 2 and s[-1] == s[-2] else
              rng.uniform(0.5, 2.0, s) * rng.choice([-1, 1], s) for s in shapes]
    with tg.no_grad():
        got = fn(*[tg.tensor(a) for a in arrays])
    close(got, fn(*arrays), rtol=1e-10, atol=1e-12)
    check_vjp(fn, arrays, rng)


def test_matrix_power_zero_and_rank_are_plain():
    a = leaf(np.eye(2) * 2)
    assert not tg.linalg.matrix_power(a, 0).requires_grad
    close(tg.linalg.matrix_power(a, 0), np.eye(2))
    assert np.linalg.matrix_rank(a) == 2


# -- einsum: ellipsis and diagonals -----------------------------------------------------------
def test_einsum_diagonal_gradient_lands_on_the_diagonal():
    a = leaf(np.arange(12.0).reshape(2, 2, 3))
    y = tg.einsum("iij->j", a)
    close(y, np.einsum("iij->j", a.numpy()))
    y.backward([1.0, 2.0, 3.0])
    want = np.zeros((2, 2, 3))
    want[0, 0] = want[1, 1] = [1.0, 2.0, 3.0]
    close(a.grad, want)
    m = leaf(np.arange(9.0).reshape(3, 3))
    np.einsum("ii->i", m).backward([1.0, 2.0, 3.0])
    close(m.grad, np.diag([1.0, 2.0, 3.0]))


def test_einsum_ellipsis_implicit_output_matches_numpy():
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 3))
    for spec in ("...ij,...ji", "...ij,...jk->...ik", "...ij,...ji->..."):
        bb = b if "jk" not in spec else rng.standard_normal((5, 4, 2))
        close(tg.einsum(spec, tg.tensor(a), bb), np.einsum(spec, a, bb), rtol=1e-12, atol=1e-12)
        check_vjp(lambda x, y: tg.einsum(spec, x, y), [a, bb], rng)


def test_einsum_sublist_form_is_the_string_form():
    # the interleaved form's own tests: tests/test_real_partition_einsum.py
    x = leaf(np.arange(1.0, 3.0))
    close(tg.einsum(x, [0]), np.einsum(np.arange(1.0, 3.0), [0]))
    tg.einsum(x, [0], x, [0], []).backward()
    close(x.grad, [2.0, 4.0])


# -- errors ------------------------------------------------------------------------------------
def test_qr_complete_tall_gradient_through_q_raises_and_names_the_fix():
    A = leaf(np.random.default_rng(14).standard_normal((4, 2)))
    Q, R = tg.linalg.qr(A, mode="complete")
    assert Q.shape == (4, 4)
    with pytest.raises(RuntimeError, match="mode='reduced'"):
        Q.sum().backward()
    assert A.grad is None
    # R alone is determined: its gradient is the reduced one
    Q, R = tg.linalg.qr(A, mode="complete")
    R.sum().backward()
    B = leaf(A.numpy())
    tg.linalg.qr(B)[1].sum().backward()
    close(A.grad, B.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_qr_raw_is_not_differentiable():
    with pytest.raises(NotImplementedError, match="mode='raw'.*mode='reduced'"):
        tg.linalg.qr(leaf(np.eye(2)), mode="raw")
    h, tau = tg.linalg.qr(tg.tensor(np.eye(2)), mode="raw")  # plain values: fine
    assert isinstance(h, np.ndarray)
    with pytest.raises(ValueError, match="mode"):
        tg.linalg.qr(leaf(np.eye(2)), mode="full")


def test_decompositions_need_matrices():
    for fn in (tg.linalg.qr, tg.linalg.svd):
        with pytest.raises(np.linalg.LinAlgError, match="two-dimensional"):
            fn(leaf([1.0, 2.0]))


def test_norm_errors():
    with pytest.raises(ValueError, match="Invalid norm order"):
        tg.linalg.norm(leaf(np.eye(2)), "bad")
    with pytest.raises(ValueError, match="Improper number of dimensions"):
        tg.linalg.norm(leaf(np.ones((2, 2, 2))), 2)


def test_svd_with_repeated_values_gives_nonfinite_vector_gradient():
    # documented: U / Vh gradients are undefined where singular values repeat
    t = leaf(np.eye(2))
    with np.errstate(all="ignore"):
        U, S, Vh = tg.linalg.svd(t)
        (U[0, 0] * Vh[0, 1]).backward()
    assert np.isnan(t.grad.numpy()).all()


# -- float32 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, fn", [
    ("qr", lambda a: tg.linalg.qr(a)[1].sum() + (tg.linalg.qr(a)[0] ** 2).sum()),
    ("svd", lambda a: tg.linalg.svd(a)[1].sum()),
    ("pinv", lambda a: tg.linalg.pinv(a).sum()),
    ("lstsq", lambda a: tg.linalg.lstsq(a, np.ones(3, np.float32))[0].sum()),
    ("norm2", lambda a: tg.linalg.norm(a, 2)),
    ("einsum diag", lambda a: tg.einsum("ii", a[:2, :])),
    ("dot nd", lambda a: tg.dot(tg.reshape(a, (1, 3, 2)), np.ones((2, 2, 2), np.float32)).sum()),
])
def test_float32_stays_float32(name, fn):
    A = _sv_matrix(np.random.default_rng(15), (3, 2)).astype(np.float32)
    t = tg.tensor(A, requires_grad=True)
    y = fn(t)
    assert y.dtype == np.float32
    y.backward()
    assert t.grad.dtype == np.float32
    t64 = leaf(A.astype(np.float64))
    fn(t64).backward()
    close(t.grad.numpy().astype(np.float64), t64.grad.numpy(), rtol=1e-3, atol=1e-4)


# -- PyTorch, when installed --------------------------------------------------------------------
def test_gradients_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(16)
    for shape in [(4, 3), (3, 4), (2, 3, 3)]:
        A = _sv_matrix(rng, shape)
        gq, gr = rng.standard_normal(np.linalg.qr(A)[0].shape), rng.standard_normal(
            np.linalg.qr(A)[1].shape)
        k = min(shape[-2:])
        gs = rng.standard_normal(shape[:-2] + (k,))
        gu = rng.standard_normal(shape[:-1] + (k,))
        gp = rng.standard_normal(shape[:-2] + shape[-1:] + shape[-2:-1])
        ta = torch.tensor(A, requires_grad=True)
        Q, R = torch.linalg.qr(ta)
        U, S, Vh = torch.linalg.svd(ta, full_matrices=False)
        P = torch.linalg.pinv(ta)
        loss = ((Q * torch.tensor(gq)).sum() + (R * torch.tensor(gr)).sum()
                + (S * torch.tensor(gs)).sum() + ((U ** 2) * torch.tensor(gu)).sum()
                + (P * torch.tensor(gp)).sum())
        loss.backward()
        t = leaf(A)
        Q, R = tg.linalg.qr(t)
        U, S, Vh = tg.linalg.svd(t, full_matrices=False)
        P = tg.linalg.pinv(t)
        ((Q * gq).sum() + (R * gr).sum() + (S * gs).sum() + ((U ** 2) * gu).sum()
         + (P * gp).sum()).backward()
        close(t.grad, ta.grad.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((16, 5, 5), (16, 5, 1)),   # batched, one column: the outer product, into A's adjoint
    ((3, 5, 5), (5,)),          # a vector right-hand side
    ((3, 5, 5), (3, 5, 2)),     # two columns: the GEMM, into A's adjoint
    ((5, 5), (3, 5, 1)),        # A broadcast over b's batch: summed, then added
])
@pytest.mark.parametrize("a_read_later", [False, True])
def test_solve_gradient_of_a_first_or_added_contribution(a_shape, b_shape, a_read_later):
    """A's adjoint takes the solve's VJP directly when it is the first
    contribution of A's shape, and by addition when an op recorded later
    (so swept earlier) already reached A, or when A was broadcast."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal(a_shape) + 4.0 * np.eye(a_shape[-1])
    B = rng.standard_normal(b_shape)

    def f(a, b):
        x = np.linalg.solve(a, b)
        if a_read_later:
            return x.sum(axis=-1) + (a * a).sum(axis=-1)[..., : x.shape[-2]] if x.ndim > 1 \
                else x + (a * a).sum(axis=(-1, -2))[..., None]
        return x
    check_vjp(f, [A, B], rng)
    # and against the closed form: dA = -A^-T G X^T, db = A^-T G
    a, b = leaf(A), leaf(B)
    x = tg.linalg.solve(a, b)
    G = rng.standard_normal(x.shape)
    x.backward(G)
    X = np.linalg.solve(A, B)
    vec = B.ndim == 1
    Gm, Xm = (G[..., None], X[..., None]) if vec else (G, X)
    gb = np.linalg.solve(np.swapaxes(A, -1, -2), Gm)
    gA = -gb @ np.swapaxes(Xm, -1, -2)
    if gA.ndim > A.ndim:
        gA = gA.sum(axis=tuple(range(gA.ndim - A.ndim)))
    gb = gb[..., 0] if vec else gb
    if gb.ndim > B.ndim:  # b broadcast over A's batch
        gb = gb.sum(axis=tuple(range(gb.ndim - B.ndim)))
    close(a.grad.numpy(), gA, rtol=1e-12, atol=1e-13)
    close(b.grad.numpy(), gb, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("shapes", [((8, 16), (16, 8)), ((2, 8, 4), (2, 8, 4)),
                                    ((64, 64), (64, 64))])
def test_einsum_takes_blas_only_for_large_contractions(shapes, monkeypatch):
    # small contractions never search a path (which starts BLAS's threads on
    # a busy machine); large ones do; both give NumPy's numbers and gradients
    from tapegrad.ops import matrix as M
    spec = "ij,jk->ik" if len(shapes[0]) == 2 else "bqd,bkd->bqk"
    rng = np.random.default_rng(0)
    a, b = (rng.normal(size=s) for s in shapes)
    other = "ik,jk->ij" if spec == "ij,jk->ik" else "bqk,bkd->bqd"
    want = np.einsum(spec, a, b)
    want_grad = np.einsum(other, 2 * want, b)
    searched = []
    einsum = np.einsum
    monkeypatch.setattr(np, "einsum", lambda *args, **kw: searched.append(
        kw.get("optimize", False)) or einsum(*args, **kw))
    ta, tb = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    y = tg.einsum(spec, ta, tb)
    (y * y).sum().backward()
    monkeypatch.undo()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(ta.grad.numpy(), want_grad, rtol=1e-10)
    assert searched and set(searched) == {shapes[0] == (64, 64)}, searched
    assert M.EINSUM_LOOP_WORK == 1 << 15
