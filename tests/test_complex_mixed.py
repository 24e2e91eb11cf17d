"""A real tensor meeting a complex array or number in NumPy's products
(np.dot, einsum, tensordot, kron, matmul, outer, inner, vdot, vecdot,
multi_dot, concatenate): a ComplexTensor result, NumPy's value, and the
gradient of the real tensor against central differences in float64 of a
real projection of the real and imaginary parts, and against PyTorch.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

RNG = np.random.default_rng(122)
H = 1e-6


def _c(*shape):
    return RNG.normal(size=shape) + 1j * RNG.normal(size=shape)


def _r(*shape):
    return RNG.normal(size=shape)


def _project(out):
    """A real scalar of a complex output: fixed random weights on both parts."""
    r = np.random.default_rng(5)
    wr, wi = r.normal(size=np.shape(out)), r.normal(size=np.shape(out))
    return (np.real(out) * wr).sum() + (np.imag(out) * wi).sum()


def _np(x):
    if isinstance(x, ComplexTensor):
        return x.numpy()
    return np.asarray(x._data if isinstance(x, tg.Tensor) else x)


C33, C3, C23, C234 = _c(3, 3), _c(3), _c(2, 3), _c(2, 3, 4)
R33, R3, R34, R432 = _r(3, 3), _r(3), _r(3, 4), _r(4, 3, 2)

# name: (fn of (real, complex), real operand, complex operand)
CASES = {
    "dot": (np.dot, R33, C33), "dot_rev": (lambda x, c: np.dot(c, x), R33, C33),
    "dot_vec": (np.dot, R3, C3), "dot_mat_vec": (np.dot, R33, C3),
    "dot_scalar": (lambda x, c: np.dot(x, c), R33, 2 - 1j),
    "einsum": (lambda x, c: np.einsum("ij,jk->ik", x, c), R33, C33),
    "einsum_rev": (lambda x, c: np.einsum("ij,jk", c, x), R34, C23),
    "einsum_three": (lambda x, c: np.einsum("ij,jk,kl->il", x, c, x), R33, C33),
    "einsum_sublists": (lambda x, c: np.einsum(x, [0, 1], c, [1, 2], [0, 2]), R33, C33),
    "tensordot": (lambda x, c: np.tensordot(c, x, axes=([1, 2], [1, 0])), R432, C234),
    "tensordot_full": (np.tensordot, R33, C33),
    "tensordot_rev": (lambda x, c: np.tensordot(x, c, axes=1), R33, C33),
    "kron": (np.kron, R33, C23), "kron_rev": (lambda x, c: np.kron(c, x), R3, C23),
    "matmul": (np.matmul, R33, C33), "matmul_rev": (lambda x, c: np.matmul(c, x), R34, C23),
    "operator_matmul": (lambda x, c: c @ x, R33, C33),
    "linalg_matmul": (np.linalg.matmul, R33, C33),
    "outer": (np.outer, R3, C23), "outer_rev": (lambda x, c: np.outer(c, x), R33, C3),
    "inner": (np.inner, R33, C23), "inner_rev": (lambda x, c: np.inner(c, x), R33, C3),
    "vdot": (np.vdot, R33, C33), "vdot_rev": (lambda x, c: np.vdot(c, x), R33, C33),
    "vecdot": (lambda x, c: np.vecdot(c, x), R33, C33),
    "linalg_vecdot": (lambda x, c: np.linalg.vecdot(x, c), R33, C33),
    "multi_dot": (lambda x, c: np.linalg.multi_dot([x, c, x]), R33, C33),
    "concatenate": (lambda x, c: np.concatenate([x, c], axis=0), R33, C23),
    "stack": (lambda x, c: np.stack([c, x]), R33, C33),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_tensor_with_a_complex_array(name):
    fn, x, c = CASES[name]
    t = tg.tensor(x, requires_grad=True)
    out = fn(t, c)
    assert isinstance(out, ComplexTensor), type(out)
    np.testing.assert_allclose(out.numpy(), fn(x, c), rtol=1e-12, atol=1e-12)
    _project(out).backward()
    g = t.grad.numpy()
    assert g.dtype == np.float64 and g.shape == x.shape
    worst = 0.0
    for _ in range(3):
        d = RNG.normal(size=x.shape)
        fd = (_project(fn(x + H * d, c)) - _project(fn(x - H * d, c))) / (2 * H)
        worst = max(worst, abs(float(np.sum(g * d)) - fd) / (1 + abs(fd)))
    assert worst < 1e-7, worst


def test_both_operands_carry_gradient():
    """A complex tensor and a real tensor: both gradients against differences."""
    x, c = R33, C33
    t, z = tg.tensor(x, requires_grad=True), tg.tensor(c, requires_grad=True)
    f = lambda a, b: np.einsum("ij,jk,kl->il", a, b, a) + np.kron(a[:1], b)[:, :3]  # noqa
    _project(f(t, z)).backward()
    d, e = RNG.normal(size=x.shape), _c(3, 3)
    fd = (_project(f(x + H * d, c + H * e)) - _project(f(x - H * d, c - H * e))) / (2 * H)
    got = np.sum(t.grad.numpy() * d) + np.real(np.vdot(z.grad.numpy(), e))
    assert abs(got - fd) < 1e-7 * (1 + abs(fd))


def test_second_order_through_a_mixed_product():
    """The mixed products are real recorded ops: tg.hessian works through them."""
    c = C33

    def f(v):
        a = v.reshape(3, 3)
        return (np.abs(np.dot(a, c) + np.tensordot(c, a, axes=1)) ** 2).sum()
    x0 = R33.ravel()
    hm = tg.hessian(f)(x0)
    g = lambda v: np.asarray(tg.grad(f)(v))  # noqa: E731
    d = RNG.normal(size=9)
    fd = (g(x0 + H * d) - g(x0 - H * d)) / (2 * H)
    np.testing.assert_allclose(hm @ d, fd, rtol=1e-6, atol=1e-6)


def test_values_without_gradient_and_plain_real_calls_are_unchanged():
    t = tg.tensor(R33)
    out = np.dot(t, C33)
    assert isinstance(out, ComplexTensor)
    np.testing.assert_allclose(out.numpy(), R33 @ C33, rtol=1e-13)
    assert isinstance(np.dot(tg.tensor(R33, requires_grad=True), R33), tg.Tensor)


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    cases = {
        "dot": (lambda m, x, c: m.matmul(x, c), R33, C33),
        "einsum": (lambda m, x, c: m.einsum("ij,jk->ik", c, x), R34, C23),
        "tensordot": (lambda m, x, c: m.tensordot(c, x, ([1, 2], [1, 0])), R432, C234),
        "kron": (lambda m, x, c: m.kron(x, c), R33, C23),
        "outer": (lambda m, x, c: m.outer(x, c), R3, C3),
        "vdot": (lambda m, x, c: m.vdot(c.ravel(), x.ravel()), R33, C33),
    }
    for name, (f, x, c) in cases.items():
        t = tg.tensor(x, requires_grad=True)
        out = f(np, t, c)
        (np.abs(out) ** 3).sum().backward()
        u = torch.tensor(x, requires_grad=True)
        tout = f(torch, u.to(torch.complex128), torch.tensor(c))
        (tout.abs() ** 3).sum().backward()
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12,
                                   err_msg=name)
        np.testing.assert_allclose(t.grad.numpy(), u.grad.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
