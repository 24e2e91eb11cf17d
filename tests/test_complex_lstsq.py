"""numpy.linalg.qr, pinv and lstsq of complex tensors.

Values against NumPy's; gradients of real projections against central
differences along random complex directions (tests/test_complex_linalg.py's
``check``) and against PyTorch; second order (pinv, lstsq: through the real
embedding) against central differences of ``tg.grad``; qr is first order and
its hessian raises naming it.
"""
import numpy as np
import pytest
from test_complex_linalg import _c, _m, _np, check, check_second

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

TALL, SQUARE, WIDE = _c(5, 3), _c(3, 3), _c(3, 5)

FIRST = {
    "qr_tall": (np.linalg.qr, TALL), "qr_square": (np.linalg.qr, SQUARE),
    "qr_wide": (np.linalg.qr, WIDE), "qr_batched": (np.linalg.qr, _c(2, 4, 3)),
    "qr_r": (lambda a: np.linalg.qr(a, mode="r"), TALL),
    "qr_r_wide": (lambda a: np.linalg.qr(a, mode="r"), WIDE),
    "qr_complete_wide": (lambda a: np.linalg.qr(a, mode="complete"), WIDE),
    "qr_complete_tall_r": (lambda a: np.linalg.qr(a, mode="complete")[1], TALL),
    "qr_complete_tall_q_first_columns": (
        lambda a: np.linalg.qr(a, mode="complete")[0][:, :3], TALL),
    "pinv_tall": (np.linalg.pinv, TALL), "pinv_wide": (np.linalg.pinv, WIDE),
    "pinv_batched": (np.linalg.pinv, _c(2, 3, 4)),
    "pinv_hermitian": (lambda a: np.linalg.pinv(a + np.conj(a).T, hermitian=True), SQUARE),
    "lstsq_vector": (lambda a, b: np.linalg.lstsq(a, b)[0], TALL, _c(5)),
    "lstsq_matrix": (lambda a, b: np.linalg.lstsq(a, b)[0], TALL, _c(5, 2)),
    "lstsq_residuals": (lambda a, b: np.linalg.lstsq(a, b)[1], TALL, _c(5, 2)),
    "lstsq_wide": (lambda a, b: np.linalg.lstsq(a, b)[0], WIDE, _c(3)),
    "lstsq_real_matrix": (lambda a, b: np.linalg.lstsq(a, b)[:2], TALL.real, _c(5)),
    "lstsq_real_rhs": (lambda a, b: np.linalg.lstsq(a, b)[:2], TALL, _c(5).real),
}


@pytest.mark.parametrize("name", sorted(FIRST))
def test_first_order(name):
    fn, *args = FIRST[name]
    check(fn, *args, directions=3)


def test_qr_values_are_numpys_with_a_real_diagonal():
    for a in (TALL, WIDE, _c(2, 4, 3)):
        for rg in (False, True):
            q, r = np.linalg.qr(tg.tensor(a, requires_grad=rg))
            q0, r0 = np.linalg.qr(a)
            np.testing.assert_array_equal(q.numpy(), q0)
            np.testing.assert_array_equal(r.numpy(), r0)
            assert not np.imag(np.diagonal(r0, axis1=-2, axis2=-1)).any()
    raw = np.linalg.qr(tg.tensor(TALL), mode="raw")
    np.testing.assert_array_equal(raw[0], np.linalg.qr(TALL, mode="raw")[0])


def test_lstsq_rank_and_singular_values_are_numpys():
    b = _c(5)
    x, res, rank, s = np.linalg.lstsq(tg.tensor(TALL, requires_grad=True), b)
    x0, res0, rank0, s0 = np.linalg.lstsq(TALL, b)
    np.testing.assert_allclose(x.numpy(), x0, rtol=1e-12)
    np.testing.assert_allclose(res.numpy(), res0, rtol=1e-12)
    assert rank == rank0 and isinstance(res, tg.Tensor)
    np.testing.assert_array_equal(s, s0)
    x, res, rank, s = np.linalg.lstsq(tg.tensor(WIDE, requires_grad=True), _c(3))
    assert res.shape == (0,) and rank == 3


def test_pinv_cutoff_is_numpys_for_the_complex_matrix():
    # singular values 1 and 1.5e-16 * 3: below NumPy's cutoff 3 eps for A; the
    # embedding's default (6 eps) would be another
    u, _ = np.linalg.qr(_c(3, 3))
    a = u @ np.diag([1.0, 1.0, 5e-16]) @ np.conj(u).T
    got = np.linalg.pinv(tg.tensor(a, requires_grad=True))
    np.testing.assert_allclose(got.numpy(), np.linalg.pinv(a), atol=1e-12)
    np.testing.assert_allclose(got.numpy(), np.linalg.pinv(a, rcond=1e-10), atol=1e-12)


def _rect(v, m=3, n=2):
    """A complex m x n matrix of 2 m n reals (18 -> 3 x 3 by _m; here 12 used)."""
    return tg.complex(v[:m * n].reshape(m, n), v[m * n:2 * m * n].reshape(m, n))


B3 = np.array([1.0, 2j, -1 + 0.5j])
SECOND = {
    "pinv": lambda v: (np.abs(np.linalg.pinv(_rect(v))) ** 2 * np.arange(6.0).reshape(2, 3)
                       ).sum() + np.imag(np.linalg.pinv(_rect(v))).sum(),
    "pinv_square": lambda v: np.real(np.linalg.pinv(_m(v)) * (1 + 2j)).sum(),
    "lstsq": lambda v: (np.abs(np.linalg.lstsq(_rect(v), B3)[0]) ** 2).sum(),
    "lstsq_residuals": lambda v: np.linalg.lstsq(_rect(v), B3 + _rect(v)[:, 0])[1].sum(),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_order(name):
    check_second(SECOND[name])


def test_qr_has_first_order_only_and_its_hessian_says_so():
    f = lambda v: (np.abs(np.linalg.qr(_m(v))[1]) ** 2 * np.arange(9.0).reshape(3, 3)).sum()  # noqa
    x0 = np.random.default_rng(3).normal(size=18)
    assert np.isfinite(tg.grad(f)(x0)).all()
    with pytest.raises(NotImplementedError, match="LinalgQrComplex"):
        tg.hessian(f)(x0)


def test_qr_errors():
    z = tg.tensor(TALL, requires_grad=True)
    with pytest.raises(RuntimeError, match="complement"):
        np.real(np.linalg.qr(z, mode="complete")[0]).sum().backward()
    with pytest.raises(NotImplementedError, match="mode='raw'.*use mode='reduced'"):
        np.linalg.qr(z, mode="raw")
    with pytest.raises(ValueError, match="unrecognized mode"):
        np.linalg.qr(z, mode="full")
    sing = SQUARE.copy()
    sing[:, 1] = 0
    sing = tg.tensor(sing, requires_grad=True)
    with pytest.raises(np.linalg.LinAlgError, match="full rank"):
        np.real(np.linalg.qr(sing)[1]).sum().backward()
    with pytest.raises(np.linalg.LinAlgError, match="two-dimensional"):
        np.linalg.qr(tg.tensor(_c(3), requires_grad=True))
    with pytest.raises(ValueError, match="rtol.*rcond"):
        np.linalg.pinv(z, rcond=1e-3, rtol=1e-3)


def test_tg_linalg_names_take_complex_operands():
    z = tg.tensor(TALL, requires_grad=True)
    b = _c(5)
    np.testing.assert_allclose(tg.linalg.qr(z)[1].numpy(), np.linalg.qr(TALL)[1])
    np.testing.assert_allclose(tg.linalg.pinv(z).numpy(), np.linalg.pinv(TALL), atol=1e-13)
    x = tg.linalg.lstsq(z, b)[0]
    assert isinstance(x, ComplexTensor)
    np.testing.assert_allclose(x.numpy(), np.linalg.lstsq(TALL, b)[0], rtol=1e-12)


def test_a_gradient_step_lowers_a_least_squares_loss():
    b, target = _c(5), _c(3)
    a = tg.tensor(TALL, requires_grad=True)
    f = lambda a: (np.abs(np.linalg.lstsq(a, b)[0] - target) ** 2).sum()  # noqa: E731
    before = f(a)
    before.backward()
    with tg.no_grad():
        a -= 1e-3 * a.grad
    assert float(f(a)) < float(before)


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    cases = {
        "qr_tall": (lambda m, a: (m.abs(m.linalg.qr(a)[0]) ** 3).sum()
                    + m.real(m.linalg.qr(a)[1] * (1 - 2j)).sum(), TALL),
        "qr_wide": (lambda m, a: m.imag(m.linalg.qr(a)[0] * 1j).sum()
                    + (m.abs(m.linalg.qr(a)[1]) ** 3).sum(), WIDE),
        "qr_batched": (lambda m, a: m.real(m.linalg.qr(a)[0] @ m.linalg.qr(a)[1][..., :1])
                       .sum(), _c(2, 4, 3)),
        "pinv": (lambda m, a: (m.abs(m.linalg.pinv(a)) ** 3).sum(), TALL),
        "pinv_wide": (lambda m, a: m.real(m.linalg.pinv(a) * (0.5 + 1j)).sum(), WIDE),
    }
    for name, (f, *args) in cases.items():
        ts = [tg.tensor(a, requires_grad=True) for a in args]
        f(np, *ts).backward()
        tt = [torch.tensor(a, requires_grad=True) for a in args]
        f(torch, *tt).backward()
        for t, u in zip(ts, tt):
            np.testing.assert_allclose(_np(t.grad), u.grad.numpy(), rtol=1e-8, atol=1e-10,
                                       err_msg=name)
    # lstsq: torch's driver for complex CPU input is gelsy; the same minimiser
    a, b = TALL, _c(5, 2)
    t, tb = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    (np.abs(np.linalg.lstsq(t, tb)[0]) ** 3).sum().backward()
    u, ub = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.linalg.lstsq(u, ub).solution.abs() ** 3).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), u.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(tb.grad.numpy(), ub.grad.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("cls, what", [
    ("complex_lstsq.LinalgQrComplex", "qr of a complex tensor")])
def test_first_order_ops_name_themselves(cls, what):
    import importlib

    from tapegrad.ops.function import first_order_message
    mod, name = cls.split(".")
    c = getattr(importlib.import_module(f"tapegrad.ops.{mod}"), name)
    msg = first_order_message(c, "hessian")
    assert msg.startswith(f"hessian: {what} has first-order derivatives only")
    assert "tg.grad" in msg and name in msg
    assert first_order_message(tg.Function) is None


def test_higher_derivatives_through_a_first_order_op_name_it():
    """hessian, jvp and create_graph=True reaching complex qr raise naming
    the op and what works instead (not the class of its tg.Function)."""
    a = np.array([[2.0, 1j], [-1j, 3.0]])

    def f(x):   # |R|_F^2 = |A|_F^2 = 15 (x_0 + x_1)^2
        return (np.abs(np.linalg.qr(a * x.sum())[1]) ** 2).sum()

    want = "qr of a complex tensor has first-order derivatives only"
    with pytest.raises(NotImplementedError, match=want):
        tg.hessian(f)(np.ones(2))
    with pytest.raises(NotImplementedError, match=want):
        tg.jvp(f, (np.ones(2),), (np.ones(2),))
    x = tg.tensor(np.ones(2), requires_grad=True)
    (g,) = tg.autograd.grad(f(x), [x], create_graph=True)
    with pytest.raises(NotImplementedError, match=want):
        g.sum().backward()
    np.testing.assert_allclose(tg.grad(f)(np.ones(2)), [60.0, 60.0])   # first order works
