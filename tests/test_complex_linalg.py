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


_JR = np.random.default_rng(5)   # the cases below: FIRST's draws stay as they were


def _jc(*shape):
    return _JR.normal(size=shape) + 1j * _JR.normal(size=shape)


def _svd_parts(a, **kw):
    u, s, vh = np.linalg.svd(a, **kw)
    return np.abs(u), s, np.abs(vh)


# more decompositions: batched, the other triangle, square and tall shapes (the
# inputs' eigenvalues and squared singular values are at least 0.5 apart)
FIRST.update({
    "eigh_upper": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eigh(a, "U")),
                   _jc(4, 4) + np.diag([0.0, 3.0, 6.0, 9.0])),
    "eigh_batched": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eigh(_herm(a))),
                     _jc(2, 3, 3) + np.diag([0.0, 3.0, 6.0])),
    "eig_batched": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eig(a)), _jc(3, 4, 4)),
    "eig_real_input_real_values": (lambda a: (lambda w, v: (w, np.abs(v)))(*np.linalg.eig(a)),
                                   np.array([[1.0, 0.4, 0.0], [0.3, 2.5, 0.2], [0.1, 0.0, 4.0]])),
    "svd_square_batched": (lambda a: _svd_parts(a, full_matrices=False), _jc(2, 4, 4)),
    "svd_tall_batched": (lambda a: _svd_parts(a, full_matrices=False), _jc(2, 5, 3)),
    "svd_values_batched": (lambda a: np.linalg.svd(a, compute_uv=False), _jc(3, 3, 5)),
    "svd_full_matrices_product": (lambda a: (lambda u, s, vh: (u[:, :3] * s) @ vh)(
        *np.linalg.svd(a)), _jc(5, 3)),
    "norm_nuc_axis": (lambda a: np.linalg.norm(a, "nuc", axis=(0, 1)), _jc(4, 3, 2)),
})


@pytest.mark.parametrize("name", sorted(FIRST))
def test_first_order(name):
    fn, *args = FIRST[name]
    check(fn, *args)


# -- forward mode of the decompositions --------------------------------------------------
def _reals(out):
    """An op's outputs (tuples, complex or real; tensors or arrays) as one real vector."""
    parts = []
    for o in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(o, ComplexTensor) or np.iscomplexobj(o):
            parts += [np.ravel(np.real(o)), np.ravel(np.imag(o))]
        else:
            parts.append(np.ravel(o))
    return np.concatenate(parts)


JVP = ["eigh_values", "eigh_abs_vectors", "eigh_projector", "eigh_upper", "eigh_batched",
       "eig_values", "eig_abs_vectors", "eig_real_input", "eig_real_input_real_values",
       "eig_similarity", "eig_batched", "svd_values", "svd_values_batched", "svd_abs_factors",
       "svd_wide_products", "svd_square_batched", "svd_tall_batched",
       "svd_full_matrices_product", "norm_2", "norm_nuc", "norm_nuc_axis",
       "matrix_norm_nuc_batched"]


@pytest.mark.parametrize("name", JVP)
def test_jvp_of_decompositions(name):
    """tg.jvp along a random direction (complex: real and imaginary parts
    together) against central differences, and against the gradient by
    <vjp(w), d> = <w, jvp(d)> in the real inner product (Re vdot)."""
    fn, a = FIRST[name]
    rng = np.random.default_rng(7)
    f = lambda x: _reals(fn(x))  # noqa: E731
    for _ in range(2):
        d = rng.normal(size=a.shape) + (1j * rng.normal(size=a.shape) if np.iscomplexobj(a)
                                        else 0.0)
        out, t = tg.jvp(f, (a,), (d,))
        np.testing.assert_allclose(out, f(a), rtol=1e-12, atol=1e-13)
        fd = (f(a + H * d) - f(a - H * d)) / (2 * H)
        np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-7 * (1 + np.abs(fd).max()))
        w = rng.normal(size=t.shape)
        (g,) = tg.vjp(f, a)[1](w)
        np.testing.assert_allclose(np.real(np.vdot(g, d)), w @ t, rtol=1e-10,
                                   atol=1e-12 * np.abs(w).sum() * np.abs(t).max())


@pytest.mark.parametrize("a", [A4, _jc(2, 3, 3), np.array([[0.0, -2.0, 0.5], [1.0, 0.3, 0.0],
                                                             [0.2, 0.0, 1.5]]),
                               np.array([[1.0, 0.4, 0.0], [0.3, 2.5, 0.2], [0.1, 0.0, 4.0]])],
                         ids=["complex", "complex_batched", "real_complex_values",
                              "real_real_values"])
def test_jvp_of_eig_vectors_follows_numpys_gauge(a):
    """eig's eigenvectors themselves: unit length with the largest entry real
    (LAPACK's normalisation), which the forward rule keeps, so its tangent is
    the central difference of NumPy's own eigenvectors."""
    rng = np.random.default_rng(8)
    d = rng.normal(size=a.shape) + (1j * rng.normal(size=a.shape) if np.iscomplexobj(a) else 0)
    (w, v), (dw, dv) = tg.jvp(lambda x: np.linalg.eig(x), (a,), (d,))
    np.testing.assert_allclose(v, np.linalg.eig(a)[1], rtol=1e-12, atol=1e-13)
    up, dn = np.linalg.eig(a + H * d), np.linalg.eig(a - H * d)
    np.testing.assert_allclose(dw, (up[0] - dn[0]) / (2 * H), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dv, (up[1] - dn[1]) / (2 * H), rtol=1e-6, atol=1e-7)
    # the gauge: lengths stay 1, the largest entries stay real
    np.testing.assert_allclose(np.real(np.sum(np.conj(v) * dv, axis=-2)), 0, atol=1e-12)
    top = np.argmax(np.abs(v), axis=-2)[..., None, :]
    np.testing.assert_allclose(np.imag(np.take_along_axis(dv, top, -2)), 0, atol=1e-12)


def test_jvp_of_svd_and_eigh_vectors_in_the_rules_gauge():
    """The singular vectors' and eigh's eigenvectors' tangents hold each
    vector's phase: the diagonals of V^H dV (svd and eigh) are zero, and
    that of U^H dU is i Im(diag(U^H dA V)) / s (the phase between u_i and v_i)."""
    rng = np.random.default_rng(9)
    a, d = _jc(5, 3), rng.normal(size=(5, 3)) + 1j * rng.normal(size=(5, 3))
    (u, s, vh), (du, ds, dvh) = tg.jvp(lambda x: tuple(np.linalg.svd(x, full_matrices=False)),
                                       (a,), (d,))
    v, dv = np.conj(vh).T, np.conj(dvh).T
    np.testing.assert_allclose(np.diag(np.conj(v).T @ dv), 0, atol=1e-12)
    dP = np.conj(u).T @ d @ v
    np.testing.assert_allclose(np.diag(np.conj(u).T @ du), 1j * np.imag(np.diag(dP)) / s,
                               atol=1e-12)
    np.testing.assert_allclose(ds, np.real(np.diag(dP)), atol=1e-12)
    h = _herm(_jc(4, 4)) + np.diag([0.0, 3.0, 6.0, 9.0])
    (w, v), (dw, dv) = tg.jvp(lambda x: tuple(np.linalg.eigh(x)), (h,), (_herm(_jc(4, 4)),))
    np.testing.assert_allclose(np.diag(np.conj(v).T @ dv), 0, atol=1e-12)


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


DECOMPOSITIONS = {
    "eigh": lambda v: np.linalg.eigvalsh(_m(v) @ np.conj(_m(v)).T)[0]
    + (np.abs(np.linalg.eigh(_m(v) @ np.conj(_m(v)).T, "U")[1]) ** 3).sum(),
    "svd": lambda v: np.linalg.svd(_m(v), compute_uv=False).sum() + (np.abs(
        np.linalg.svd(_m(v))[0]) ** 3).sum() + (np.abs(np.linalg.svd(_m(v))[2]) ** 3).sum(),
    "norm_2": lambda v: np.linalg.norm(_m(v), 2),
    "norm_nuc": lambda v: np.linalg.norm(_m(v), "nuc"),
    "eig": lambda v: np.real(np.linalg.eigvals(_m(v)) ** 2).sum()
    + (np.abs(np.linalg.eig(_m(v))[1]) ** 3).sum(),
    "eig_real": lambda v: np.imag(np.linalg.eigvals(v[:9].reshape(3, 3)) ** 3).sum()
    + (np.abs(np.linalg.eig(v[:9].reshape(3, 3))[1]) ** 3).sum(),
    # real eigenvalues (Gershgorin discs apart): real eigenvalues and eigenvectors
    "eig_real_values": lambda v: (lambda w, u: (w ** 2).sum() + (np.abs(u) ** 3).sum())(
        *np.linalg.eig(np.diag([0.0, 3.0, 6.0]) + 0.3 * v[:9].reshape(3, 3))),
}


@pytest.mark.parametrize("name", sorted(DECOMPOSITIONS))
def test_decompositions_differentiate_again_with_create_graph(name):
    """The gradient taken with create_graph=True differentiates again (to a
    third order too) against central differences; tg.hessian and tg.hvp,
    which have no forward-over-reverse rule for them, differentiate that
    recorded gradient."""
    fn = DECOMPOSITIONS[name]
    x0 = np.random.default_rng(4).normal(size=18)
    d, e = np.random.default_rng(6).normal(size=(2, 18))
    x = tg.tensor(x0, requires_grad=True)
    (g,) = tg.autograd.grad(fn(x), [x], create_graph=True)
    (hd,) = tg.autograd.grad((g * d).sum(), [x], create_graph=True)
    grad = lambda v: np.asarray(tg.grad(fn)(v))  # noqa: E731
    fd = (grad(x0 + H * d) - grad(x0 - H * d)) / (2 * H)
    np.testing.assert_allclose(hd.detach().numpy(), fd, rtol=1e-5,
                               atol=1e-6 * (1 + np.abs(fd).max()))
    (third,) = tg.autograd.grad((hd * e).sum(), [x])

    def hd_at(v):
        xv = tg.tensor(v, requires_grad=True)
        (gv,) = tg.autograd.grad(fn(xv), [xv], create_graph=True)
        return tg.autograd.grad((gv * e).sum(), [xv])[0].numpy()
    # T[d, e, :] both ways (the third derivative T is symmetric)
    fd3 = (hd_at(x0 + H * d) - hd_at(x0 - H * d)) / (2 * H)
    np.testing.assert_allclose(third.numpy(), fd3, rtol=1e-5, atol=1e-6 * (1 + np.abs(fd3).max()))
    Hm = tg.hessian(fn)(x0)
    np.testing.assert_allclose(Hm @ d, fd, rtol=1e-5, atol=1e-6 * (1 + np.abs(fd).max()))
    np.testing.assert_allclose(Hm, Hm.T, atol=1e-10 * (1 + np.abs(Hm).max()))
    _, hv = tg.hvp(fn, (x0,), (d,))
    np.testing.assert_allclose(hv[0], hd.detach().numpy(), rtol=1e-10, atol=1e-12)


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
