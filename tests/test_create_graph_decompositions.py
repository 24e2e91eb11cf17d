"""``create_graph=True`` through the matrix decompositions (cholesky, eigh,
qr, svd, pinv, lstsq): third and fourth derivatives against central
differences (float64) of the exact second derivative (``tg.hessian``), and
against PyTorch where it is installed; eigen- and singular-vector
gradients at repeated values raise instead of giving inf/NaN."""
import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning",
                                        "ignore:divide by zero:RuntimeWarning")

import tapegrad as tg
from test_create_graph import _fd_of_hessian, _flat_f, _third

RNG = np.random.default_rng(11)
B_RHS = np.array([1.0, -0.5, 2.0, 0.3])


def _spd(B):
    return B @ B.T + 3.0 * np.eye(B.shape[0])


def _eigh_f(B):
    w, V = tg.linalg.eigh(B + B.T)
    # sign-invariant in each eigenvector: products within one column
    return tg.concatenate([w, (V * V[0:1]).reshape(-1)])


def _qr_f(B):
    Q, R = tg.linalg.qr(B)
    return tg.concatenate([R.reshape(-1), (Q * Q[0:1]).reshape(-1)])


def _svd_f(full):
    def f(B):
        U, S, Vh = tg.linalg.svd(B, full_matrices=full)
        k = S.shape[0]
        # sign-invariant in each pair of singular vectors
        return tg.concatenate([S, (U[:, :k] * U[0:1, :k]).reshape(-1),
                               (Vh[:k] * Vh[:k, 0:1]).reshape(-1)])
    return f


def _lstsq_f(B):
    x, res, _rank, _s = tg.linalg.lstsq(B, B_RHS)
    return tg.concatenate([x, res])


CASES = {
    "cholesky": ((3, 3), lambda B: tg.linalg.cholesky(_spd(B))),
    "cholesky batched": ((2, 2, 2), lambda B: tg.linalg.cholesky(
        B @ tg.swapaxes(B, -1, -2) + 2.0 * np.eye(2))),
    "eigh": ((3, 3), _eigh_f),
    "eigvalsh": ((3, 3), lambda B: tg.linalg.eigvalsh(B @ B.T) ** 2),
    "qr tall": ((4, 3), _qr_f),
    "qr square": ((3, 3), _qr_f),
    "qr wide": ((2, 4), _qr_f),
    "qr r": ((3, 2), lambda B: tg.linalg.qr(B, mode="r")),
    "svd tall": ((4, 3), _svd_f(False)),
    "svd wide full": ((3, 4), _svd_f(True)),
    "svdvals": ((3, 2), lambda B: tg.linalg.svdvals(B)),
    "svd hermitian": ((3, 3), lambda B: (lambda U, S, Vh: tg.concatenate(
        [S, (U * U[0:1]).reshape(-1)]))(*tg.linalg.svd(_spd(B), hermitian=True))),
    "eigh batched": ((2, 2, 2), lambda B: (lambda w, V: tg.concatenate(
        [w.reshape(-1), (V * V[:, 0:1]).reshape(-1)]))(
            *tg.linalg.eigh(B + tg.swapaxes(B, -1, -2)))),
    "pinv": ((4, 3), lambda B: tg.linalg.pinv(B)),
    "pinv wide": ((2, 3), lambda B: tg.linalg.pinv(B)),
    "lstsq": ((4, 2), _lstsq_f),
    "lstsq matrix rhs": ((4, 2), lambda B: tg.linalg.lstsq(
        B, tg.tensor(np.outer(B_RHS, [1.0, 2.0])) * B[:, :1])[0]),
}


def _point(shape):
    # well conditioned: a dominant diagonal keeps singular values apart
    z = RNG.uniform(-0.5, 0.5, shape)
    m, n = shape[-2:]
    for i in range(min(m, n)):
        z[..., i, i] += 1.0 + 0.7 * i
    return z.reshape(-1)


@pytest.mark.parametrize("name", sorted(CASES))
def test_third_order_matches_central_differences_of_the_hessian(name):
    shape, f = CASES[name]
    F = _flat_f(f, [shape])
    z = _point(shape)
    v, w = RNG.uniform(-1, 1, z.size), RNG.uniform(-1, 1, z.size)
    got = _third(F, z, v, w)
    want = _fd_of_hessian(F, z, v, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("name", ["cholesky", "eigh", "qr tall", "svd tall", "pinv"])
def test_fourth_order_matches_second_differences_of_the_hessian(name):
    shape, f = CASES[name]
    F = _flat_f(f, [shape])
    z = _point(shape)
    v, w, u = (RNG.uniform(-1, 1, z.size) for _ in range(3))
    x = tg.tensor(z, requires_grad=True)
    (g,) = tg.autograd.grad(F(x), x, create_graph=True)
    (h,) = tg.autograd.grad((g * v).sum(), x, create_graph=True)
    (t,) = tg.autograd.grad((h * w).sum(), x, create_graph=True)
    (q,) = tg.autograd.grad((t * u).sum(), x)
    H, e = tg.hessian(F), 1e-3
    q_fd = (w @ H(z + e * u) @ v - 2 * w @ H(z) @ v + w @ H(z - e * u) @ v) / e ** 2
    np.testing.assert_allclose(q.numpy() @ u, q_fd, rtol=1e-4, atol=1e-6 * (1 + abs(q_fd)))


def test_non_leaf_input_through_a_decomposition():
    # the gradient with respect to an intermediate, differentiated again
    z = _point((3, 3)).reshape(3, 3)
    x = tg.tensor(z, requires_grad=True)
    h = x * 1.5
    Lc = tg.linalg.cholesky(_spd(h))
    (gh,) = tg.autograd.grad((Lc ** 3).sum(), h, create_graph=True)
    (gx,) = tg.autograd.grad((gh * gh).sum(), x)
    F = lambda x_: (lambda h_: (tg.linalg.cholesky(_spd(h_)) ** 3).sum())(x_ * 1.5)  # noqa
    # d/dx |d F/dh|^2 with dF/dh = (1/1.5) dF/dx: 2 H_x (dF/dx) / 1.5^2
    xs = z.reshape(-1)
    Ff = lambda t: F(t.reshape(3, 3))  # noqa: E731
    want = 2 * tg.hessian(Ff)(xs) @ tg.grad(Ff)(xs) / 1.5 ** 2
    np.testing.assert_allclose(gx.numpy().reshape(-1), want, rtol=1e-9)


# -- repeated values: refused, nothing recorded ---------------------------------------
def test_eigenvector_gradient_at_repeated_eigenvalues_raises():
    A = tg.tensor(np.diag([1.0, 1.0, 2.0]), requires_grad=True)
    w, V = tg.linalg.eigh(A * 1.0)
    with pytest.raises(RuntimeError, match="LinalgEigh.*eigenvalues are repeated"):
        tg.autograd.grad((V[0] * V[1]).sum(), A, create_graph=True)
    # eigenvalues alone: fine at first order, refused where the next order
    # needs the eigenvectors
    (g,) = tg.autograd.grad((w ** 2).sum(), A, create_graph=True)
    np.testing.assert_allclose(g.numpy(), 2 * np.diag([1.0, 1.0, 2.0]))
    with pytest.raises(RuntimeError, match="LinalgEigh.*repeated"):
        tg.autograd.grad(g.sum(), A, create_graph=True)


def test_singular_vector_gradient_at_repeated_or_zero_singular_values_raises():
    A = tg.tensor(np.eye(3)[:, :2] * 2.0, requires_grad=True)
    U, S, Vh = tg.linalg.svd(A * 1.0, full_matrices=False)
    with pytest.raises(RuntimeError, match="LinalgSvd.*repeated"):
        tg.autograd.grad((U * U).sum() + (Vh[0] * Vh[1]).sum(), A, create_graph=True)
    B = tg.tensor(np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), requires_grad=True)
    U, S, Vh = tg.linalg.svd(B * 1.0, full_matrices=False)
    with pytest.raises(RuntimeError, match="LinalgSvd.*singular value is zero"):
        tg.autograd.grad((U[:, 0] * U[:, 1]).sum(), B, create_graph=True)
    (g,) = tg.autograd.grad(S.sum(), B, create_graph=True)   # S alone: U Vh
    np.testing.assert_allclose(g.numpy(), [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], atol=1e-15)


# -- against PyTorch ------------------------------------------------------------------
def _torch_third(f_tg, f_torch, z, v, w):
    torch = pytest.importorskip("torch")
    got = _third(_flat_f(f_tg, [z.shape]), z.reshape(-1), v, w)

    def F(x):
        out = f_torch(torch, x.reshape(z.shape)).reshape(-1)
        wt = torch.linspace(0.5, 1.5, out.numel(), dtype=torch.float64)
        return (out * wt).sum() + (out ** 3 * wt).sum() / 3.0
    x = torch.tensor(z.reshape(-1), dtype=torch.float64, requires_grad=True)
    vt, wt = torch.tensor(v), torch.tensor(w)
    (g,) = torch.autograd.grad(F(x), x, create_graph=True)
    (h,) = torch.autograd.grad((g * vt).sum(), x, create_graph=True)
    (t,) = torch.autograd.grad((h * wt).sum(), x)
    return got, t.numpy()


TORCH = {
    "cholesky": ((3, 3), lambda B: tg.linalg.cholesky(_spd(B)),
                 lambda m, B: m.linalg.cholesky(B @ B.T + 3.0 * m.eye(3, dtype=m.float64))),
    "eigh": ((3, 3), _eigh_f, lambda m, B: (lambda w, V: m.cat(
        [w, (V * V[0:1]).reshape(-1)]))(*m.linalg.eigh(B + B.T))),
    "qr": ((4, 3), _qr_f, lambda m, B: (lambda Q, R: m.cat(
        [R.reshape(-1), (Q * Q[0:1]).reshape(-1)]))(*m.linalg.qr(B))),
    "svd": ((4, 3), _svd_f(False), lambda m, B: (lambda U, S, Vh: m.cat(
        [S, (U * U[0:1]).reshape(-1), (Vh * Vh[:, 0:1]).reshape(-1)]))(
            *m.linalg.svd(B, full_matrices=False))),
    "pinv": ((4, 3), lambda B: tg.linalg.pinv(B), lambda m, B: m.linalg.pinv(B)),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_third_order_matches_torch(name):
    shape, f_tg, f_torch = TORCH[name]
    z = _point(shape).reshape(shape)
    v, w = RNG.uniform(-1, 1, z.size), RNG.uniform(-1, 1, z.size)
    got, want = _torch_third(f_tg, f_torch, z, v, w)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10 * (1 + np.abs(want).max()))
