"""eigh, eigvalsh and cholesky read one triangle of their input, as NumPy's
(LAPACK's) do: their derivatives are those of NumPy's function for any input,
symmetric or not, against central differences of plain NumPy, in every mode."""
import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 4))


def _fd_grad(f, a, e=1e-6):
    """Central differences of a real f of a real or complex array (complex:
    dL/dRe + 1j dL/dIm, tapegrad's and PyTorch's convention)."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        d = np.zeros(a.shape)
        d[i] = e
        g[i] = (f(a + d) - f(a - d)) / (2 * e)
        if np.iscomplexobj(a):
            g[i] += 1j * (f(a + 1j * d) - f(a - 1j * d)) / (2 * e)
    return g


def _eigh_loss(uplo):
    def f(x):
        w, v = np.linalg.eigh(x, uplo)
        return (w * W[0, :w.shape[-1]]).sum() + (np.abs(v) ** 2 * W[:v.shape[-2], :v.shape[-1]]).sum()
    return f


def _cholesky_loss(x):
    return (np.abs(np.linalg.cholesky(x)) ** 2 * W[:x.shape[-2], :x.shape[-1]]).sum()


def _spd(n, complex_=False):
    b = RNG.standard_normal((n, n)) + (1j * RNG.standard_normal((n, n)) if complex_ else 0)
    return b @ np.conj(b).T + n * np.eye(n)


CASES = {
    "eigh L": (_eigh_loss("L"), lambda c: RNG.standard_normal((4, 4)) + (
        1j * RNG.standard_normal((4, 4)) if c else 0)),
    "eigh U": (_eigh_loss("U"), lambda c: RNG.standard_normal((2, 3, 3)) + (
        1j * RNG.standard_normal((2, 3, 3)) if c else 0)),
    "eigvalsh": (lambda x: (np.linalg.eigvalsh(x) ** 3).sum(), lambda c: RNG.standard_normal(
        (3, 3)) + (1j * RNG.standard_normal((3, 3)) if c else 0)),
    "cholesky": (_cholesky_loss, lambda c: _spd(4, c) + 0.5 * RNG.standard_normal((4, 4))),
    "pinv hermitian": (lambda x: (np.abs(np.linalg.pinv(x, hermitian=True)) ** 2 * W).sum(),
                       lambda c: _spd(4, c) + 0.5 * RNG.standard_normal((4, 4))),
}
REAL_ONLY = {
    "svd hermitian": (lambda x: (np.linalg.svd(x, hermitian=True)[1] * W[0]).sum()
                      + (np.linalg.svd(x, compute_uv=False, hermitian=True) ** 3).sum(),
                      lambda c: RNG.standard_normal((4, 4))),
}


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("name", list(CASES))
def test_gradient_of_a_nonsymmetric_input_is_numpys(name, complex_):
    f, make = CASES[name]
    a = make(complex_)
    np.testing.assert_allclose(tg.grad(f)(a), _fd_grad(f, a), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", list(REAL_ONLY))
def test_gradient_of_a_nonsymmetric_input_is_numpys_real_only(name):
    f, make = REAL_ONLY[name]
    a = make(False)
    np.testing.assert_allclose(tg.grad(f)(a), _fd_grad(f, a), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["eigh L", "eigvalsh", "cholesky"])
def test_gradient_of_a_symmetric_input_lies_on_the_triangle_read(name):
    f, _ = CASES[name]
    a = _spd(3)
    g = tg.grad(f)(a)
    np.testing.assert_allclose(g, _fd_grad(f, a), rtol=1e-6, atol=1e-7)
    assert not np.triu(g, 1).any()


@pytest.mark.parametrize("name", ["eigh L", "eigh U", "eigvalsh", "cholesky"])
def test_second_order_and_forward_mode_of_a_nonsymmetric_input(name):
    f, make = CASES[name]
    a = make(False)
    d = RNG.standard_normal(a.shape)
    e = 1e-6
    _, jv = tg.jvp(f, (a,), (d,))
    np.testing.assert_allclose(jv, (f(a + e * d) - f(a - e * d)) / (2 * e), rtol=1e-6, atol=1e-7)
    hv = tg.hvp(f, (a,), (d,))[1][0]
    g = tg.grad(f)
    np.testing.assert_allclose(hv, (g(a + e * d) - g(a - e * d)) / (2 * e), rtol=1e-5, atol=1e-6)


def test_symmetric_leaf_agrees_with_pytorch_along_symmetric_directions():
    torch = pytest.importorskip("torch")
    a = _spd(4)
    t = tg.tensor(a, requires_grad=True)
    ((np.linalg.eigh(t)[0] ** 3).sum() + (np.linalg.cholesky(t) ** 2 * W).sum()).backward()
    u = torch.tensor(a, requires_grad=True)
    ((torch.linalg.eigh(u)[0] ** 3).sum()
     + (torch.linalg.cholesky(u) ** 2 * torch.tensor(W)).sum()).backward()
    sym = lambda g: (g + g.T) / 2                                  # noqa: E731
    np.testing.assert_allclose(sym(t.grad.numpy()), sym(u.grad.numpy()), rtol=1e-10, atol=1e-12)


def test_a_gradient_step_on_a_symmetric_parameter_lowers_the_loss():
    a = _spd(3)
    f = lambda x: np.linalg.eigvalsh(x)[-1]                        # noqa: E731
    a2 = a - 0.01 * tg.grad(f)(a)
    assert f(a2) < f(a)


def test_values_are_numpys_and_no_records_without_grad():
    a = RNG.standard_normal((3, 3))
    t = tg.tensor(a, requires_grad=True)
    w, v = np.linalg.eigh(t, "U")
    np.testing.assert_array_equal(w.numpy(), np.linalg.eigh(a, "U")[0])
    np.testing.assert_array_equal(np.abs(v.numpy()), np.abs(np.linalg.eigh(a, "U")[1]))
    w0, _ = np.linalg.eigh(tg.tensor(a))
    assert w0.grad_fn is None


@pytest.mark.parametrize("name", ["eigh L", "cholesky"])
def test_create_graph_of_a_nonsymmetric_input(name):
    f, make = CASES[name]
    a, d = make(False), RNG.standard_normal((4, 4))
    x = tg.tensor(a, requires_grad=True)
    (g,) = tg.autograd.grad(f(x), [x], create_graph=True)
    (g * d).sum().backward()
    gf, e = tg.grad(f), 1e-6
    np.testing.assert_allclose(x.grad.numpy(), (gf(a + e * d) - gf(a - e * d)) / (2 * e),
                               rtol=1e-5, atol=1e-6)
