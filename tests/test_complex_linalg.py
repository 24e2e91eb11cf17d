"""numpy.linalg on complex tensors.

Every function: NumPy's value; the gradient of a real projection of its
output against central differences in float64 along random complex
directions of each input (the real and imaginary parts perturbed together,
``Re <grad, d>`` being the directional derivative in PyTorch's convention);
second order (``tg.hessian`` of a real loss of the parts) against central
differences of ``tg.grad`` where the op is built from real ops with second
derivatives; PyTorch's complex autograd when torch is installed.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

RNG = np.random.default_rng(22)
H = 1e-6


def _c(*shape):
    return RNG.normal(size=shape) + 1j * RNG.normal(size=shape)


def _hpd(n, batch=()):
    a = _c(*batch, n, n)
    return a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)


def _herm(a):
    """The Hermitian part, on arrays and tensors (directions that keep A Hermitian)."""
    ah = np.conj(np.swapaxes(a, -1, -2)) if not isinstance(a, ComplexTensor) else \
        ComplexTensor(np.swapaxes(a.real, -1, -2), -np.swapaxes(a.imag, -1, -2))
    return (a + ah) * 0.5


def _project(out, seed=1):
    """A real scalar of an op's outputs (tuples, complex or real), fixed random weights."""
    if isinstance(out, (tuple, list)):
        return sum(_project(o, seed + k) for k, o in enumerate(out))
    r = np.random.default_rng(seed)
    if isinstance(out, ComplexTensor) or np.iscomplexobj(out):
        return (np.real(out) * r.normal(size=np.shape(out))).sum() + \
            (np.imag(out) * r.normal(size=np.shape(out))).sum()
    return (out * r.normal(size=np.shape(out))).sum()


def _np(x):
    if isinstance(x, (tuple, list)):
        return [_np(v) for v in x]
    if isinstance(x, ComplexTensor):
        return x.numpy()
    return np.asarray(x._data if isinstance(x, tg.Tensor) else x)


def check(fn, *args, rtol=1e-6, value=True, directions=2):
    """fn's value against NumPy's; its gradient against central differences."""
    ts = [tg.tensor(a, requires_grad=True) for a in args]
    out = fn(*ts)
    if value:
        for got, want in zip(_np(out) if isinstance(out, tuple) else [_np(out)],
                             fn(*args) if isinstance(out, tuple) else [fn(*args)]):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    _project(out).backward()

    def loss(*vals):
        return float(_np(_project(fn(*vals))))

    for k, (t, a) in enumerate(zip(ts, args)):
        g = _np(t.grad)
        for _ in range(directions):
            d = RNG.normal(size=np.shape(a))
            if np.iscomplexobj(a):
                d = d + 1j * RNG.normal(size=np.shape(a))
            up, dn = list(args), list(args)
            up[k], dn[k] = a + H * d, a - H * d
            fd = (loss(*up) - loss(*dn)) / (2 * H)
            got = float(np.real(np.vdot(g, d)))  # Re sum(conj(g) d)
            assert abs(got - fd) <= rtol * (1 + abs(fd)), (k, got, fd)


A3, A4, B43, B4 = _c(3, 3), _c(4, 4), _c(4, 3), _c(4)
HPD = _hpd(4)

FIRST = {
    "inv": (np.linalg.inv, A4), "inv_batched": (np.linalg.inv, _c(2, 3, 3)),
    "solve": (np.linalg.solve, A4, B43), "solve_vector": (np.linalg.solve, A4, B4),
    "solve_real_matrix": (np.linalg.solve, A4.real, B43),
    "solve_real_rhs": (np.linalg.solve, A4, B43.real),
    "solve_batched_vector": (np.linalg.solve, _c(2, 3, 3), _c(3)),
    "det": (np.linalg.det, A4), "det_odd": (np.linalg.det, _c(5, 5)),
    "det_1x1": (np.linalg.det, _c(1, 1)), "det_batched": (np.linalg.det, _c(2, 3, 3)),
    "det_needs_pivoting": (np.linalg.det, np.array([[1e-3j, 1, 2], [1, 2j, 0], [3, 1, 1j]])),
    "slogdet": (np.linalg.slogdet, A4), "slogdet_batched": (np.linalg.slogdet, _c(3, 2, 2)),
    "cholesky": (lambda a: np.linalg.cholesky(_herm(a)), HPD),
    "cholesky_upper": (lambda a: np.linalg.cholesky(_herm(a), upper=True), HPD),
    "cholesky_batched": (lambda a: np.linalg.cholesky(_herm(a)), _hpd(3, (2,))),
    "eigh_values": (lambda a: np.linalg.eigvalsh(_herm(a)), HPD),
    "eigh_abs_vectors": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eigh(_herm(a))),
                         HPD),
    "eigh_projector": (lambda a: (lambda w, v: v[:, :2] @ np.conj(v[:, :2]).T)(
        *np.linalg.eigh(_herm(a))), HPD),
    "svd_values": (lambda a: np.linalg.svd(a, compute_uv=False), B43),
    "svd_abs_factors": (lambda a: (lambda u, s, vh: (np.abs(u), s, np.abs(vh)))(
        *np.linalg.svd(a, full_matrices=False)), B43),
    "svd_wide_products": (lambda a: (lambda u, s, vh: ((u * s[None]) @ np.conj(u).T, np.conj(
        vh).T @ (s[:, None] ** 2 * vh)))(*np.linalg.svd(a, full_matrices=False)), _c(3, 5)),
    "eig_values": (lambda a: np.linalg.eigvals(a), A4),
    "eig_abs_vectors": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eig(a)), A4),
    "eig_real_input": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eig(a)),
                       np.array([[0.0, -2.0, 0.5], [1.0, 0.3, 0.0], [0.2, 0.0, 1.5]])),
    "eig_similarity": (lambda a: (lambda w, v: v @ (np.exp(w)[:, None] * np.linalg.inv(v)))(
        *np.linalg.eig(a)), A3),
    "norm_fro": (np.linalg.norm, A4), "norm_vector": (lambda z: np.linalg.norm(z, 3), B4),
    "norm_1": (lambda a: np.linalg.norm(a, 1), A4), "norm_inf": (
        lambda a: np.linalg.norm(a, np.inf), A4),
    "norm_2": (lambda a: np.linalg.norm(a, 2), A4), "norm_nuc": (
        lambda a: np.linalg.norm(a, "nuc"), B43),
    "norm_axis": (lambda a: np.linalg.norm(a, axis=1), B43),
    "matrix_norm_nuc_batched": (lambda a: np.linalg.matrix_norm(a, ord="nuc"), _c(2, 3, 2)),
    "vector_norm": (lambda a: np.linalg.vector_norm(a, ord=1), B43),
}


@pytest.mark.parametrize("name", sorted(FIRST))
def test_first_order(name):
    fn, *args = FIRST[name]
    check(fn, *args)


# -- second order: hessian of real losses of the parts ---------------------------------------
def _m(v, n=3):
    return tg.complex(v[:n * n].reshape(n, n), v[n * n:2 * n * n].reshape(n, n))


B3 = np.array([1.0, 2j, -1 + 0.5j])
SECOND = {
    "inv": lambda v: (np.real(np.linalg.inv(_m(v))) * np.arange(9.0).reshape(3, 3)).sum()
    + np.imag(np.linalg.inv(_m(v))).sum(),
    "solve": lambda v: (np.abs(np.linalg.solve(_m(v), B3)) ** 2).sum(),
    "solve_both": lambda v: np.real(np.linalg.solve(_m(v), _m(v[::-1]))).sum(),
    "det": lambda v: np.abs(np.linalg.det(_m(v))) ** 2 + np.real(np.linalg.det(_m(v))),
    "det_phase": lambda v: np.angle(np.linalg.det(_m(v))),
    "slogdet": lambda v: np.linalg.slogdet(_m(v))[1] + np.imag(np.linalg.slogdet(_m(v))[0]),
    "cholesky": lambda v: (np.abs(np.linalg.cholesky(_m(v) @ np.conj(_m(v)).T + np.eye(3)))
                           ** 2 * np.arange(1.0, 10.0).reshape(3, 3)).sum(),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_order(name):
    check_second(SECOND[name])


def check_second(f):
    """tg.hessian of f (of 18 reals) against central differences of tg.grad."""
    x0 = RNG.normal(size=18)
    Hm = tg.hessian(f)(x0)
    np.testing.assert_allclose(Hm, Hm.T, atol=1e-8 * (1 + np.abs(Hm).max()))
    g = lambda v: np.asarray(tg.grad(f)(v))  # noqa: E731
    for _ in range(2):
        d = RNG.normal(size=18)
        fd = (g(x0 + H * d) - g(x0 - H * d)) / (2 * H)
        np.testing.assert_allclose(Hm @ d, fd, rtol=1e-5, atol=1e-5 * (1 + np.abs(fd).max()))


def test_create_graph_through_complex_det():
    x = tg.tensor(RNG.normal(size=18), requires_grad=True)
    f = lambda v: np.abs(np.linalg.det(_m(v))) ** 2  # noqa: E731
    (g,) = tg.autograd.grad(f(x), [x], create_graph=True)
    (gg,) = tg.autograd.grad((g * g).sum(), [x])
    Hm = tg.hessian(f)(x.detach().numpy())
    np.testing.assert_allclose(gg.numpy(), 2 * Hm @ g.detach().numpy(), rtol=1e-9)


@pytest.mark.parametrize("fn", [
    lambda v: np.linalg.eigvalsh(_m(v) @ np.conj(_m(v)).T)[0],
    lambda v: np.linalg.svd(_m(v), compute_uv=False).sum(),
    lambda v: np.linalg.norm(_m(v), 2),
    lambda v: np.real(np.linalg.eigvals(_m(v))).sum(),
], ids=["eigh", "svd", "norm_2", "eig"])
def test_decompositions_have_no_second_order_and_say_so(fn):
    x0 = RNG.normal(size=18)
    assert np.isfinite(tg.grad(fn)(x0)).all()
    with pytest.raises(NotImplementedError, match="first-order derivatives only .its backward, Linalg"):
        tg.hessian(fn)(x0)


# -- the phase of eigenvectors and singular vectors ----------------------------------------
@pytest.mark.parametrize("loss", [
    lambda a: np.real(np.linalg.eigh(a)[1]).sum(),
    lambda a: np.real(np.linalg.eig(a)[1]).sum(),
    lambda a: np.imag(np.linalg.svd(a)[0]).sum(),
], ids=["eigh", "eig", "svd"])
def test_a_loss_of_the_free_phase_raises(loss):
    a = tg.tensor(HPD, requires_grad=True)
    with pytest.raises(RuntimeError, match="fixed only up to a phase"):
        loss(a).backward()
    assert a.grad is None


def test_real_matrix_eig_gives_real_or_complex_results_as_numpy():
    sym = RNG.normal(size=(3, 3))
    sym = sym + sym.T
    w, v = np.linalg.eig(tg.tensor(sym, requires_grad=True))
    assert isinstance(w, tg.Tensor) and isinstance(v, tg.Tensor)
    rot = np.array([[0.0, -1.0], [1.0, 0.0]])
    w, v = np.linalg.eig(tg.tensor(rot, requires_grad=True))
    assert isinstance(w, ComplexTensor) and isinstance(v, ComplexTensor)
    np.testing.assert_allclose(w.numpy(), np.linalg.eig(rot)[0])
    x = tg.tensor(rot, requires_grad=True)
    np.imag(tg.linalg.eigvals(x)).sum().backward()
    assert isinstance(x.grad, tg.Tensor)   # a real input's gradient is real


def test_values_without_gradient_are_numpys_and_namespaces_agree():
    for fn in (np.linalg.inv, np.linalg.det, lambda a: np.linalg.slogdet(a)[0],
               lambda a: np.linalg.eigvals(a), lambda a: np.linalg.cholesky(a @ np.conj(a).T)):
        got = fn(tg.tensor(A4))
        assert isinstance(got, ComplexTensor)
        np.testing.assert_array_equal(got.numpy(), fn(A4))
    z = tg.tensor(A4, requires_grad=True)
    for name in ("inv", "det", "eigvals", "svdvals", "norm"):
        np.testing.assert_allclose(_np(getattr(tg.linalg, name)(z)),
                                   getattr(np.linalg, name)(A4), rtol=1e-12)
    # a real tensor with a complex right-hand side, through NumPy and tg.linalg
    x = tg.tensor(A4.real, requires_grad=True)
    for solve in (np.linalg.solve, tg.linalg.solve):
        np.testing.assert_allclose(solve(x, B43).numpy(), np.linalg.solve(A4.real, B43))


def test_results_have_numpys_shapes_with_and_without_gradient():
    for rg in (False, True):
        for a in (A4, _c(2, 3, 3), np.zeros((0, 0), complex)):
            z = tg.tensor(a, requires_grad=rg)
            for fn in (np.linalg.det, lambda m: np.linalg.slogdet(m)[0],
                       lambda m: np.linalg.slogdet(m)[1], np.linalg.inv,
                       lambda m: np.linalg.norm(m, axis=(-2, -1))):
                assert np.shape(fn(z)) == np.shape(fn(a))
    assert tg.tensor(np.complex128(1 + 2j)).shape == ()
    assert (tg.tensor(2.0) * np.array(1j)).shape == ()


def test_singular_and_invalid_matrices_raise_clearly():
    sing = tg.tensor(np.array([[1 + 1j, 2 + 2j], [1.0, 2.0]]) * 0, requires_grad=True)
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        np.linalg.det(sing)
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(tg.tensor(-HPD, requires_grad=True))
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        np.linalg.inv(tg.tensor(B43, requires_grad=True))
    with pytest.raises(TypeError, match="numpy.linalg.cond is not supported on complex"):
        np.linalg.cond(tg.tensor(A4))


def test_a_traced_complex_det_replays_and_retraces_on_a_new_pivot_order():
    def f(v):
        return np.abs(np.linalg.det(_m(v))) + np.angle(np.linalg.det(_m(v) + 1j))
    x0 = RNG.normal(size=18)
    ft = tg.trace(f, x0)
    for x in (x0 + 1e-3 * RNG.normal(size=18), RNG.normal(size=18)):
        np.testing.assert_allclose(ft(x), float(f(tg.tensor(x))), rtol=1e-12)
        np.testing.assert_allclose(tg.grad(ft)(x), tg.grad(f)(x), rtol=1e-9)


def test_a_gradient_step_lowers_complex_linear_algebra_losses():
    target, b = _c(3, 3), _c(3)
    losses = {
        "solve": lambda a: (np.abs(np.linalg.solve(a, b) - target[0]) ** 2).sum(),
        "inv_det": lambda a: (np.abs(np.linalg.inv(a) - target) ** 2).sum()
        + np.abs(np.linalg.det(a) - 1j) ** 2,
        "eigh": lambda a: (np.linalg.eigvalsh(a @ np.conj(a).T) - np.arange(1.0, 4.0)) @
        np.ones(3) ** 2,
    }
    for name, f in losses.items():
        a = tg.tensor(A3 + 3 * np.eye(3), requires_grad=True)
        before = f(a)
        before.backward()
        with tg.no_grad():
            a -= 1e-3 * a.grad
        assert float(f(a)) < float(before), name


# -- PyTorch ---------------------------------------------------------------------------
def _torch_cases(torch):
    return {
        "inv": (lambda m, a: (m.abs(m.linalg.inv(a)) ** 3).sum(), A4),
        "solve": (lambda m, a, b: m.real(m.linalg.solve(a, b) * (1 + 2j)).sum(), A4, B43),
        "det": (lambda m, a: m.real(m.linalg.det(a) * (0.5 - 1j)), A4),
        "slogdet": (lambda m, a: m.imag(m.linalg.slogdet(a)[0]) + m.linalg.slogdet(a)[1], A4),
        "cholesky": (lambda m, a: (m.abs(m.linalg.cholesky(a)) ** 3)[1:].sum()
                     + m.real(m.linalg.cholesky(a)[2, 1] * 1j), HPD),
        "eigh": (lambda m, a: (m.linalg.eigh(a)[0] ** 2).sum() + (
            m.abs(m.linalg.eigh(a)[1][:2]) ** 3).sum(), HPD),
        "svd": (lambda m, a: m.linalg.svd(a, full_matrices=False)[1].sum() + (m.abs(
            m.linalg.svd(a, full_matrices=False)[0]) ** 3).sum(), B43),
        "eig": (lambda m, a: m.real(m.linalg.eig(a)[0] ** 2).sum() + (
            m.abs(m.linalg.eig(a)[1]) ** 3).sum(), A4),
        "norm_nuc": (lambda m, a: m.linalg.norm(a, "nuc"), A4),
        "eig_of_real": (lambda m, a: m.imag(m.linalg.eig(a)[0] ** 3).sum() + (
            m.abs(m.linalg.eig(a)[1]) ** 3).sum(), np.array([[0.0, -2.0, 0.5], [1.0, 0.3, 0.0],
                                                              [0.2, 0.0, 1.5]])),
        "svd_wide_batched": (lambda m, a: (m.abs(m.linalg.svd(a, full_matrices=False)[2])
                                           ** 3).sum(), _c(2, 3, 5)),
        "inv_det_batched": (lambda m, a: m.real(m.linalg.det(m.linalg.inv(a)) * 1j).sum(),
                            _c(2, 3, 3)),
    }


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    cases = _torch_cases(torch)
    for name, (f, *args) in cases.items():
        ts = [tg.tensor(a, requires_grad=True) for a in args]
        f(np, *ts).backward()
        tt = [torch.tensor(a, requires_grad=True) for a in args]
        f(torch, *tt).backward()
        for t, u in zip(ts, tt):
            got, want = _np(t.grad), u.grad.numpy()
            if name in ("cholesky", "eigh"):
                # tapegrad's lies on the triangle NumPy reads, PyTorch's is not:
                # the same derivative along Hermitian directions, which keep A
                # Hermitian, so their Hermitian parts agree
                got, want = _herm(got), _herm(want)
                assert np.allclose(np.triu(_np(t.grad), 1), 0), name
            np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10, err_msg=name)
