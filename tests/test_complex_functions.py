"""Elementwise functions, prod and products (einsum of several operands,
vecdot, multi_dot, matrix_power) on complex tensors.

The same checks as tests/test_complex_linalg.py: NumPy's value, the
gradient against central differences along random complex directions,
second order against central differences of ``tg.grad``, and PyTorch.
"""
import numpy as np
import pytest

import tapegrad as tg

from test_complex_linalg import _c, _m, check, check_second

RNG = np.random.default_rng(23)
A3, A4, B43 = _c(3, 3), _c(4, 4), _c(4, 3)

Z34 = _c(3, 4) * 0.8
ELEMENTWISE = ["tan", "tanh", "sinh", "cosh", "exp2", "expm1", "log1p", "log2", "log10",
               "arctan", "arctanh", "arcsin", "arccos", "arcsinh", "arccosh", "sign"]
REDUCTIONS = {
    "prod": lambda z: np.prod(z), "prod_axis0": lambda z: np.prod(z, axis=0),
    "prod_axis1_keep": lambda z: np.prod(z, axis=1, keepdims=True),
    "prod_method": lambda z: z.prod(axis=(0, 1)),
}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise(name):
    check(getattr(np, name), Z34)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_prod(name):
    check(REDUCTIONS[name], Z34)


def test_prod_with_zeros_and_large_values():
    z = np.array([0j, 1 + 1j, 2 - 1j, 0.5j, 3.0])
    check(np.prod, z)
    big = tg.tensor(np.full(40, 1.5 + 0.5j))
    np.testing.assert_allclose(np.prod(big).numpy(), np.prod(np.full(40, 1.5 + 0.5j)),
                               rtol=1e-13)
    # tan, tanh far from the real axis: their limits, not inf / inf
    far = np.array([0.3 + 400j, -0.2 - 400j])
    np.testing.assert_allclose(np.tan(tg.tensor(far)).numpy(), np.tan(far))
    np.testing.assert_allclose(np.tanh(tg.tensor(far * 1j)).numpy(), np.tanh(far * 1j))



PRODUCTS = {
    "einsum3": (lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c), A4, B43, A3),
    "einsum3_real_middle": (lambda a, x, c: np.einsum("ij,jk,kl->il", a, x, c), A4,
                            B43.real, A3),
    "einsum_interleaved": (lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), A4, B43),
    "vecdot": (np.linalg.vecdot, B43, B43[::-1]), "multi_dot": (
        lambda a, b, c: np.linalg.multi_dot([a, b, c]), A4, B43, A3),
    "matrix_power": (lambda a: np.linalg.matrix_power(a, 3), A3),
    "matrix_power_zero": (lambda a: np.linalg.matrix_power(a, 0) @ a, A3),
    "matrix_power_negative": (lambda a: np.linalg.matrix_power(a, -2), A3),
    "linalg_outer_matmul": (lambda a, b: np.linalg.outer(a[:, 0], b[0]) + np.linalg.matmul(
        a, b), B43.T, B43),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_products(name):
    fn, *args = PRODUCTS[name]
    check(fn, *args)


SECOND = {
    "prod": lambda v: np.real(np.prod(_m(v) * 0.5)) + np.imag(np.prod(_m(v), axis=0)).sum(),
    "tan_tanh": lambda v: np.real(np.tan(_m(v) * 0.3) + np.tanh(_m(v) * 0.4)).sum(),
    "inverse_trig": lambda v: np.imag(np.arcsinh(_m(v)) + np.arctan(_m(v) * 0.3)
                                      + np.arccos(_m(v) * 0.2)).sum(),
    "log1p_expm1_sign": lambda v: np.real(np.log1p(_m(v) * 0.2) * np.expm1(_m(v) * 0.3)
                                          + np.sign(_m(v)) * np.cosh(_m(v))).sum(),
    "einsum3": lambda v: np.real(np.einsum("ij,jk,ki", _m(v), _m(v), np.conj(_m(v)))),
    "matrix_power": lambda v: np.imag(np.linalg.matrix_power(_m(v), -2)).sum(),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_order(name):
    check_second(SECOND[name])


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    z0 = _c(2, 4) * 0.8

    def f(m, z):
        return m.abs(m.prod(m.tan(z[0]) * m.tanh(z[1]))) + m.real(
            m.arcsinh(z) * m.log1p(z) + m.sinh(z) / m.cosh(z * 0.5)).sum()

    z = tg.tensor(z0, requires_grad=True)
    f(np, z).backward()
    zt = torch.tensor(z0, requires_grad=True)
    f(torch, zt).backward()
    np.testing.assert_allclose(z.grad.numpy(), zt.grad.numpy(), rtol=1e-10, atol=1e-12)
