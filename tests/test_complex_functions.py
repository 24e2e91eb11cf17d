"""Elementwise functions, prod and products (einsum of several operands,
vecdot, multi_dot, matrix_power) on complex tensors.

The same checks as tests/test_complex_linalg.py: NumPy's value, the
gradient against central differences along random complex directions,
second order against central differences of ``tg.grad``, and PyTorch.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

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


V23 = _c(2, 3)
NEAR0 = np.array([0, 0.01 + 0.02j, -1e-3j, 0.02, 0.4 - 0.3j, 1.5 + 0.2j])
MORE = {
    "float_power": (lambda z: np.float_power(z, 2.5), Z34),
    "float_power_int": (lambda z: np.float_power(z, 3), Z34),
    "float_power_complex_exponent": (lambda z, w: np.float_power(z, w), Z34, Z34[::-1] * 0.5),
    "split": (lambda z: tuple(np.split(z, 2, axis=1)), Z34),
    "split_indices": (lambda z: tuple(np.split(z, [1, 3], axis=1)), Z34),
    "array_split": (lambda z: tuple(np.array_split(z, 3, axis=1)), Z34),
    "hsplit_vsplit": (lambda z: np.hsplit(z, 2)[1] + np.vsplit(z[:, :2], 3)[0], Z34),
    "diag_of_vector": (lambda z: np.diag(z[0], 1), Z34),
    "diag_of_matrix": (lambda z: np.diag(z, -1), Z34),
    "diagflat": (lambda z: np.diagflat(z[:2, :2]), Z34),
    "flips_rot90": (lambda z: np.fliplr(z) + np.flipud(z) * 2 + np.rot90(np.rot90(z)), Z34),
    "sinc": (np.sinc, Z34),
    "sinc_near_zero": (np.sinc, NEAR0),
    "cross": (np.cross, V23, V23[::-1]),
    "cross_real_operand": (np.cross, V23, V23.real[::-1]),
    "cross_axes": (lambda a, b: np.cross(a, b, axisa=0, axisb=0), V23.T, V23.T[:, ::-1]),
    "tensorinv": (lambda a: np.linalg.tensorinv(a, ind=1), _c(4, 2, 2)),
    "tensorinv_ind2": (np.linalg.tensorinv, _c(2, 3, 6)),
    "tensorsolve": (np.linalg.tensorsolve, _c(2, 3, 6), _c(2, 3)),
    "tensorsolve_real_matrix": (np.linalg.tensorsolve, _c(2, 3, 6).real, _c(2, 3)),
    "tensorsolve_axes": (lambda a, b: np.linalg.tensorsolve(a, b, axes=(0,)), _c(6, 2, 3),
                         _c(2, 3)),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_functions(name):
    fn, *args = MORE[name]
    check(fn, *args)


SPECIAL = [0.0, -0.0, 0.5, -2.0, 800.0, -800.0, 1e300, np.inf, -np.inf, np.nan]
UNARY = ["exp", "log", "sin", "cos", "tan", "sinh", "cosh", "tanh", "exp2", "expm1", "log1p",
         "log2", "log10", "arctan", "arctanh", "arcsin", "arccos", "arcsinh", "arccosh", "sqrt",
         "square", "reciprocal", "sign", "absolute"]


def _grid():
    """Every pair of SPECIAL values as (real, imag), built part by part."""
    z = np.empty(len(SPECIAL) ** 2, complex)
    z.real, z.imag = np.repeat(SPECIAL, len(SPECIAL)), np.tile(SPECIAL, len(SPECIAL))
    return z


@pytest.mark.parametrize("name", UNARY)
def test_special_values_are_numpys(name):
    """At infinities and NaNs each part is NumPy's wherever NumPy's is a
    number (C99's limits); at the finite values (signed zeros, overflowing
    and huge arguments among them) the value is NumPy's to rounding."""
    z = _grid()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(z)
        got = getattr(np, name)(tg.tensor(z)).numpy()
    special = ~np.isfinite(z.real) | ~np.isfinite(z.imag) | ~np.isfinite(want)
    for g, w in [(got.real, want.real), (got.imag, want.imag)]:
        same = np.isnan(w) | (g == w)
        bad = np.flatnonzero(special & ~same)
        assert not bad.size, [(z[i], got[i], want[i]) for i in bad[:5]]
    fin = ~special
    err = np.abs(got[fin] - want[fin])
    bad = np.flatnonzero(err > 1e-13 * np.abs(want[fin]) + 1e-300)
    assert not bad.size, [(z[fin][i], got[fin][i], want[fin][i]) for i in bad[:5]]


def test_special_values_keep_the_gradient_elsewhere():
    z = np.array([np.inf + 0j, 0.5 + 0.25j, complex(np.nan, 1.0), -1 + 2j])
    t = tg.tensor(z, requires_grad=True)
    with np.errstate(all="ignore"):
        w = np.arctan(t)
        (np.real(w) + np.imag(w)).sum().backward()
    np.testing.assert_array_equal(w.numpy()[[0, 2]].real, np.arctan(z[[0, 2]]).real)
    d = 1 / (1 + z[[1, 3]] ** 2)  # arctan' = 1 / (1 + z^2); grad of Re w + Im w: conj(d) (1 + 1j)
    np.testing.assert_allclose(t.grad.numpy()[[1, 3]], np.conj(d) * (1 + 1j), rtol=1e-12)
    one = np.array(complex(np.inf, 0.0))  # a 0-d tensor
    assert np.exp(tg.tensor(one)).numpy() == np.exp(one) and np.exp(one).imag == 0


def test_a_trace_meeting_special_values_traces_again():
    def f(x):
        w = np.arctan(tg.complex(x[:2], x[2:]))
        return (np.real(w) + np.imag(w)).sum()
    x0 = np.array([0.5, 1.0, 0.2, -0.3])
    ft = tg.trace(f, x0)
    for x in (x0, np.array([np.inf, 1.0, 0.0, -0.3]), np.array([0.4, 2.0, 0.1, 0.3])):
        with np.errstate(all="ignore"):
            z = x[:2] + 0j
            z.imag = x[2:]
            np.testing.assert_allclose(float(ft(x)), (np.arctan(z).real + np.arctan(z).imag).sum(),
                                       rtol=1e-13)


def test_numpy_of_infinite_parts_makes_no_nan():
    z = ComplexTensor(np.array([1.0, np.inf, -0.0]), np.array([np.inf, 1.0, -np.inf]))
    a = z.numpy()
    np.testing.assert_array_equal(a.real, [1.0, np.inf, -0.0])
    np.testing.assert_array_equal(a.imag, [np.inf, 1.0, -np.inf])
    assert repr(z) == "ctensor([ 1.+infj, inf +1.j, -0.-infj])"
    assert a.dtype == np.complex128 and tg.tensor(np.complex64(1 + 2j)).numpy().shape == ()


FAR = np.array([1 + 400j, 1 - 400j, 0.3 + 30j, 2 + 800j, 400 + 1j, -400 + 2j, 0.5 + 0.5j])


@pytest.mark.parametrize("name", ["tan", "tanh"])
def test_tan_tanh_gradients_far_from_the_real_axis(name):
    z = FAR if name == "tan" else FAR * 1j
    t = tg.tensor(z, requires_grad=True)
    w = getattr(np, name)(t)
    np.testing.assert_allclose(w.numpy(), getattr(np, name)(z), rtol=1e-13, atol=1e-300)
    (np.real(w) * 1.3 + np.imag(w) * 0.7).sum().backward()
    g = t.grad.numpy()
    assert np.isfinite(g.real).all() and np.isfinite(g.imag).all()
    w0 = getattr(np, name)(z)
    d = 1 + w0 ** 2 if name == "tan" else 1 - w0 ** 2  # the derivative, no overflow
    want = np.conj(d) * (1.3 + 0.7j)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)
    torch = pytest.importorskip("torch")
    zt = torch.tensor(z, requires_grad=True)
    wt = getattr(torch, name)(zt)
    (wt.real * 1.3 + wt.imag * 0.7).sum().backward()
    np.testing.assert_allclose(g, zt.grad.numpy(), rtol=1e-12, atol=1e-15)


SECOND = {
    "prod": lambda v: np.real(np.prod(_m(v) * 0.5)) + np.imag(np.prod(_m(v), axis=0)).sum(),
    "tan_tanh": lambda v: np.real(np.tan(_m(v) * 0.3) + np.tanh(_m(v) * 0.4)).sum(),
    "inverse_trig": lambda v: np.imag(np.arcsinh(_m(v)) + np.arctan(_m(v) * 0.3)
                                      + np.arccos(_m(v) * 0.2)).sum(),
    "log1p_expm1_sign": lambda v: np.real(np.log1p(_m(v) * 0.2) * np.expm1(_m(v) * 0.3)
                                          + np.sign(_m(v)) * np.cosh(_m(v))).sum(),
    "einsum3": lambda v: np.real(np.einsum("ij,jk,ki", _m(v), _m(v), np.conj(_m(v)))),
    "matrix_power": lambda v: np.imag(np.linalg.matrix_power(_m(v), -2)).sum(),
    "sinc_cross_tensorinv": lambda v: np.real(np.sinc(_m(v) * 0.3)).sum() + np.imag(
        np.cross(_m(v), _m(v)[::-1])).sum() + np.real(np.linalg.tensorinv(_m(v), ind=1)).sum(),
    "float_power_split": lambda v: np.abs(np.float_power(np.split(_m(v), 3)[1], 1.5)).sum(),
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


@pytest.mark.parametrize("a,b", [(1e-200 + 1e-200j, 1e-200 + 0j), (1 + 1j, 1e200 + 1e200j),
                                 (1e300 + 1e300j, 1e300 + 0j), (1e-300 + 0j, 3e-300 - 4e-300j),
                                 (3 + 4j, 1 - 2j)])
def test_division_at_extreme_scales_is_numpys(a, b):
    # the divisor's parts are scaled before |b|**2: no overflow or underflow
    # where the quotient is a normal number
    A, B = tg.tensor(np.array([a])), tg.tensor(np.array([b]))
    want = np.array([a]) / np.array([b])
    np.testing.assert_allclose((A / B).numpy(), want, rtol=1e-14)
    np.testing.assert_allclose((1.0 / B).numpy(), 1.0 / np.array([b]), rtol=1e-14)
