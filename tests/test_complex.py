"""Complex tensors (pairs of real tensors) and numpy.fft on tensors.

Every op: NumPy's value, and the gradient of a real projection of its output
against central differences in float64, perturbing the real and imaginary
parts of each input separately.  Second order through FFTs and complex
elementwise ops against differences of the gradient; PyTorch's complex
autograd when installed.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops.complex_tensor import ComplexTensor

RNG = np.random.default_rng(7)
H = 1e-6


def _c(*shape):
    return RNG.normal(size=shape) + 1j * RNG.normal(size=shape)


def _project(out, seed):
    """A real scalar of an op's output (complex or real), with fixed random weights."""
    if isinstance(out, ComplexTensor) or np.iscomplexobj(out):
        w = np.random.default_rng(seed).normal(size=np.shape(out) + (2,))
        re, im = (out.real, out.imag)
        return (re * w[..., 0]).sum() + (im * w[..., 1]).sum()
    w = np.random.default_rng(seed).normal(size=np.shape(out))
    return (out * w).sum()


def _value(out):
    if isinstance(out, ComplexTensor):
        return out.numpy()
    return np.asarray(out._data if isinstance(out, tg.Tensor) else out)


def check(fn, *args, rtol=1e-6, atol=1e-7):
    """fn's value against NumPy's on ndarrays; its gradient in every input
    (real: d/dx; complex: d/dx + i d/dy) against central differences."""
    ts = [tg.tensor(a, requires_grad=True) for a in args]
    out = fn(*ts)
    np.testing.assert_allclose(_value(out), fn(*args), rtol=1e-10, atol=1e-12)
    _project(out, 1).backward()

    def loss(*vals):
        return float(_value(_project(tg.tensor(fn(*vals)), 1)))

    for k, (t, a) in enumerate(zip(ts, args)):
        parts = [1.0, 1j] if np.iscomplexobj(a) else [1.0]
        want = np.zeros(np.shape(a), dtype=complex if len(parts) == 2 else float)
        for unit in parts:
            g = np.zeros(np.shape(a))
            for i in np.ndindex(np.shape(a)):
                up = [np.array(v, dtype=complex if np.iscomplexobj(v) else float)
                      for v in args]
                dn = [v.copy() for v in up]
                up[k][i] += H * unit
                dn[k][i] -= H * unit
                g[i] = (loss(*up) - loss(*dn)) / (2 * H)
            want = want + (g * unit if unit == 1j else g)
        got = t.grad.numpy()
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


Z = _c(3, 4)
W = _c(3, 4)
X = RNG.normal(size=(3, 4))
P = np.abs(_c(3, 4)) + 0.5  # away from the branch cut of sqrt, log, power
P = P * np.exp(1j * RNG.uniform(-2.5, 2.5, size=(3, 4)))

ELEMENTWISE = {
    "add": (lambda z, w: z + w, Z, W), "add_real": (lambda z, x: z + x, Z, X),
    "radd_real": (lambda x, z: x + z, X, Z), "add_const": (lambda z: z + (2 - 1j), Z),
    "sub": (lambda z, w: z - w, Z, W), "rsub_real": (lambda x, z: x - z, X, Z),
    "mul": (lambda z, w: z * w, Z, W), "mul_real": (lambda x, z: x * z, X, Z),
    "mul_const": (lambda z: (0.5 + 2j) * z, Z), "imag_unit": (lambda x: 1j * x, X),
    "div": (lambda z, w: z / w, Z, W), "div_real": (lambda z, x: z / (x + 3), Z, X),
    "rdiv_real": (lambda x, z: x / z, X, Z), "rdiv_const": (lambda z: 2 / z, Z),
    "pow2": (lambda z: z ** 2, Z), "pow3": (lambda z: z ** 3, Z), "pow_neg": (lambda z: z ** -2, Z),
    "pow_half": (lambda z: z ** 0.5, P), "pow_complex": (lambda z, w: z ** w, P, W * 0.3),
    "rpow": (lambda z: 2.0 ** z, Z),
    "neg": (lambda z: -z, Z), "exp": (np.exp, Z), "log": (np.log, P), "sin": (np.sin, Z),
    "cos": (np.cos, Z), "sqrt": (np.sqrt, P), "square": (np.square, Z),
    "reciprocal": (np.reciprocal, Z), "abs": (np.abs, Z), "conj": (np.conj, Z),
    "conjugate": (np.conjugate, Z), "real": (np.real, Z), "imag": (np.imag, Z),
    "angle": (np.angle, Z), "angle_deg": (lambda z: np.angle(z, deg=True), Z),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise(name):
    fn, *args = ELEMENTWISE[name]
    check(fn, *args)


A, B = _c(3, 4), _c(4, 2)
STRUCTURAL = {
    "sum": (np.sum, Z), "sum_axis": (lambda z: np.sum(z, axis=0), Z),
    "mean": (np.mean, Z), "mean_axis_keep": (lambda z: np.mean(z, axis=1, keepdims=True), Z),
    "method_sum": (lambda z: z.sum(axis=1) if isinstance(z, ComplexTensor) else z.sum(axis=1), Z),
    "matmul": (lambda a, b: a @ b, A, B), "matmul_real": (lambda a, x: a @ x, A, X.T),
    "rmatmul_real": (lambda x, b: x @ b, X, B), "np_matmul": (np.matmul, A, B),
    "dot": (np.dot, A, B), "vdot": (np.vdot, Z, W), "outer": (np.outer, Z[0], W[1]),
    "einsum": (lambda a, b: np.einsum("ij,jk->ik", a, b), A, B),
    "reshape": (lambda z: np.reshape(z, (4, 3)), Z), "transpose": (np.transpose, Z),
    "T": (lambda z: z.T, Z), "getitem": (lambda z: z[1:, ::2], Z),
    "getitem_int": (lambda z: z[np.array([2, 0, 2])], Z),
    "concatenate": (lambda z, x: np.concatenate([z, x]), Z, X),
    "stack": (lambda z, w: np.stack([z, w], axis=1), Z, W),
    "roll": (lambda z: np.roll(z, 1, axis=1), Z), "flip": (lambda z: np.flip(z, 0), Z),
    "cumsum": (lambda z: np.cumsum(z, axis=1), Z), "where": (
        lambda z, w: np.where(X > 0, z, w), Z, W),
    "fftshift": (np.fft.fftshift, Z), "ifftshift": (lambda z: np.fft.ifftshift(z, axes=1), Z),
    "fftshift_real": (np.fft.fftshift, X),
    "swapaxes": (lambda z: np.swapaxes(z, 0, 1), Z),
    "squeeze_expand": (lambda z: np.squeeze(np.expand_dims(z, 0)), Z),
    "broadcast_to": (lambda z: np.broadcast_to(z, (2, 3, 4)), Z),
    "moveaxis": (lambda z: np.moveaxis(z, 0, -1), Z),
    "hstack_vstack": (lambda z, w: np.vstack([np.hstack([z, w]), np.hstack([w, z])]), Z, W),
    "diagonal_trace": (lambda z: np.diagonal(z) * np.trace(z), Z),
    "take": (lambda z: np.take(z, [3, 0], axis=1), Z), "tril_triu": (
        lambda z: np.tril(z) + 2 * np.triu(z, 1), Z),
    "diff": (lambda z: np.diff(z, axis=1), Z), "atleast_2d": (lambda z: np.atleast_2d(z[0]), Z),
    "tile_repeat": (lambda z: np.repeat(np.tile(z, (1, 2)), 2, axis=0), Z),
    "inner": (np.inner, Z, W), "tensordot": (lambda a, b: np.tensordot(a, b, 1), A, B),
    "kron": (lambda a, b: np.kron(a[:2, :2], b[:2]), A, B),
    "convolve": (lambda a, b: np.convolve(a[0], b[:, 0]), A, B),
    "einsum_one": (lambda z: np.einsum("ij->j", z), Z),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_reductions_products_and_shapes(name):
    fn, *args = STRUCTURAL[name]
    check(fn, *args)


VAR_STD = {
    "var": (np.var, Z), "std": (np.std, Z),
    "var_axis": (lambda z: np.var(z, axis=1), Z),
    "std_axis_ddof_keep": (lambda z: np.std(z, axis=0, ddof=1, keepdims=True), Z),
    "var_axes_ddof": (lambda z: np.var(z, axis=(0, 1), ddof=2), Z),
    "var_correction": (lambda z: np.var(z, axis=-1, correction=1), Z),
    "method_var_std": (lambda z: z.var(axis=1) * z.std(), Z),
}


@pytest.mark.parametrize("name", sorted(VAR_STD))
def test_var_and_std(name):
    """Real results, mean(|z - mean(z)|^2) with ddof, as NumPy's."""
    fn, *args = VAR_STD[name]
    out = fn(tg.tensor(args[0]))
    assert isinstance(out, tg.Tensor) and out.dtype == np.float64
    check(fn, *args)


def test_var_and_std_second_order_and_edge_cases():
    v0 = RNG.normal(size=6)
    for f in (lambda v: np.var(tg.complex(v[:3], v[3:])),
              lambda v: np.std(tg.complex(v[:3], v[3:]), ddof=1)):
        np.testing.assert_allclose(tg.hessian(f)(tg.tensor(v0)), _hessian_fd(f, v0),
                                   rtol=1e-5, atol=1e-6)
    # over one element the std is identically 0, and so is its gradient
    z = tg.tensor(np.array([[1 + 2j], [3 - 1j]]), requires_grad=True)
    s = np.std(z, axis=1)
    np.testing.assert_array_equal(s.detach().numpy(), [0.0, 0.0])
    s.sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), np.zeros((2, 1)))
    with pytest.raises(TypeError, match="numpy.var with dtype is not supported on complex"):
        np.var(tg.tensor(_c(3)), dtype=np.complex64)
    with pytest.raises(TypeError, match="numpy.std with where is not supported on complex"):
        np.std(tg.tensor(_c(3)), where=np.ones(3, bool))


R1 = RNG.normal(size=7)
R2 = RNG.normal(size=(4, 6))
R3 = RNG.normal(size=(3, 4, 5))
C1, C2, C3 = _c(7), _c(4, 6), _c(3, 4, 5)
NORMS = [None, "ortho", "forward"]
FFTS = []
for norm in NORMS:
    FFTS += [
        ("fft_real", lambda x, norm=norm: np.fft.fft(x, norm=norm), R1),
        ("fft", lambda z, norm=norm: np.fft.fft(z, norm=norm), C1),
        ("fft_n_pad", lambda z, norm=norm: np.fft.fft(z, n=10, norm=norm), C1),
        ("fft_n_crop_axis0", lambda z, norm=norm: np.fft.fft(z, n=3, axis=0, norm=norm), C2),
        ("ifft", lambda z, norm=norm: np.fft.ifft(z, norm=norm), C1),
        ("ifft_n", lambda z, norm=norm: np.fft.ifft(z, n=5, axis=-1, norm=norm), C2),
        ("rfft", lambda x, norm=norm: np.fft.rfft(x, norm=norm), R1),
        ("rfft_even", lambda x, norm=norm: np.fft.rfft(x, norm=norm), R2),
        ("rfft_n_axis0", lambda x, norm=norm: np.fft.rfft(x, n=7, axis=0, norm=norm), R2),
        ("irfft", lambda z, norm=norm: np.fft.irfft(z, norm=norm), C1),
        ("irfft_n_odd", lambda z, norm=norm: np.fft.irfft(z, n=9, norm=norm), C2),
        ("irfft_n_short", lambda z, norm=norm: np.fft.irfft(z, n=4, axis=0, norm=norm), C2),
        ("fft2", lambda z, norm=norm: np.fft.fft2(z, norm=norm), C2),
        ("ifft2_s", lambda z, norm=norm: np.fft.ifft2(z, s=(5, 3), norm=norm), C2),
        ("fftn", lambda z, norm=norm: np.fft.fftn(z, norm=norm), C3),
        ("fftn_axes", lambda z, norm=norm: np.fft.fftn(z, s=(3, 6), axes=(0, 2), norm=norm),
         C3),
        ("ifftn", lambda z, norm=norm: np.fft.ifftn(z, axes=(1, 2), norm=norm), C3),
        ("rfftn", lambda x, norm=norm: np.fft.rfftn(x, norm=norm), R3),
        ("rfftn_axes_s", lambda x, norm=norm: np.fft.rfftn(x, s=(5, 4), axes=(2, 0),
                                                           norm=norm), R3),
        ("irfftn", lambda z, norm=norm: np.fft.irfftn(z, norm=norm), C3),
        ("irfftn_axes_s", lambda z, norm=norm: np.fft.irfftn(z, s=(4, 7), axes=(0, 1),
                                                             norm=norm), C3),
        ("rfft2", lambda x, norm=norm: np.fft.rfft2(x, norm=norm), R2),
        ("irfft2", lambda z, norm=norm: np.fft.irfft2(z, norm=norm), C2),
    ]


@pytest.mark.parametrize("name,fn,arg", FFTS,
                         ids=[f"{n}-{m}" for m in NORMS for n, _, _ in FFTS[:len(FFTS) // 3]])
def test_fft(name, fn, arg):
    check(fn, arg, rtol=1e-6, atol=1e-6)


def test_real_loss_of_the_spectrum_and_its_descent_step():
    x = tg.tensor(RNG.normal(size=16), requires_grad=True)
    loss = (np.abs(np.fft.rfft(x)) ** 2).sum()
    loss.backward()
    assert isinstance(loss, tg.Tensor)
    check(lambda v: (np.abs(np.fft.rfft(v)) ** 2).sum(), x.detach().numpy())
    # a complex leaf: z -= lr * z.grad lowers the loss (PyTorch's convention)
    target = _c(8)
    z = tg.tensor(_c(8), requires_grad=True)

    def f(z):
        return (np.abs(np.fft.fft(z) - target) ** 2).sum()

    before = f(z)
    before.backward()
    with tg.no_grad():
        z -= 1e-3 * z.grad
    assert float(f(z)) < float(before)
    # and it is twice dL/dz*: for L = |z|^2, z.grad = 2 z
    z2 = tg.tensor(np.array([1 + 2j, -3j]), requires_grad=True)
    (np.abs(z2) ** 2).sum().backward()
    np.testing.assert_allclose(z2.grad.numpy(), 2 * np.array([1 + 2j, -3j]))


def _hessian_fd(f, x0):
    g = lambda v: np.asarray(tg.grad(f)(tg.tensor(v)))  # noqa: E731
    n = x0.size
    return np.stack([(g(x0 + H * e) - g(x0 - H * e)) / (2 * H) for e in np.eye(n)])


SECOND = {
    "power_spectrum": lambda v: (np.abs(np.fft.rfft(v)) ** 2).sum(),
    "fft_exp": lambda v: np.real(np.exp(np.fft.fft(v) * 0.3j)).sum(),
    "complex_leaf_pair": lambda v: (np.abs(np.fft.ifft(tg.complex(v[:3], v[3:]) ** 2,
                                                       norm="ortho")) ** 2).sum(),
    "irfftn_log": lambda v: np.log(1 + np.fft.irfftn(
        tg.complex(v[:3], v[3:]).reshape(1, 3)) ** 2).sum(),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_order(name):
    f = SECOND[name]
    x0 = RNG.normal(size=6)
    Hm = tg.hessian(f)(tg.tensor(x0))
    np.testing.assert_allclose(Hm, _hessian_fd(f, x0), rtol=1e-5, atol=1e-6)
    v = RNG.normal(size=6)
    np.testing.assert_allclose(tg.hvp(f, (x0,), (v,))[1][0], Hm @ v,
                               rtol=1e-8, atol=1e-10)


def test_forward_mode_through_an_fft():
    f = lambda v: np.abs(np.fft.rfft(v))  # noqa: E731
    x0 = RNG.normal(size=6)
    J = tg.jacobian(f)(tg.tensor(x0))
    Jf = tg.jacfwd(f)(tg.tensor(x0))
    np.testing.assert_allclose(np.asarray(getattr(Jf, "_data", Jf)),
                               np.asarray(getattr(J, "_data", J)), rtol=1e-10, atol=1e-12)


def test_against_pytorch_complex_autograd():
    torch = pytest.importorskip("torch")
    z0, x0 = _c(6), RNG.normal(size=6)

    def f(np_like, z, x):
        s = np_like.fft.fft(z * np_like.exp(1j * x)) / (2 + z)
        return (np_like.abs(np_like.sqrt(s + 3)) ** 2).sum() + np_like.angle(s).sum()

    z, x = tg.tensor(z0, requires_grad=True), tg.tensor(x0, requires_grad=True)
    f(np, z, x).backward()
    zt = torch.tensor(z0, requires_grad=True)
    xt = torch.tensor(x0, requires_grad=True)
    f(torch, zt, xt).backward()
    np.testing.assert_allclose(z.grad.numpy(), zt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_interop_and_errors():
    z = tg.tensor(np.array([1 + 1j, 2.0]), requires_grad=True)
    assert isinstance(z, ComplexTensor) and z.requires_grad and z.dtype == np.complex128
    assert isinstance(np.fft.fft(tg.tensor([1.0, 2.0])), ComplexTensor)
    assert isinstance(np.abs(z), tg.Tensor) and isinstance(np.real(z), tg.Tensor)
    with pytest.raises(TypeError, match="numpy.cbrt is not supported on complex tensors"):
        np.cbrt(z)
    with pytest.raises(TypeError, match="numpy.linalg.cond is not supported on complex"):
        np.linalg.cond(tg.tensor(_c(2, 2)))
    with pytest.raises(RuntimeError, match="needs a gradient"):
        z.backward()
    with pytest.raises(TypeError, match="no order"):
        z < 1
    with pytest.raises(TypeError, match="out="):
        np.fft.fft(tg.tensor([1.0, 2.0]), out=np.zeros(2, complex))
    with pytest.raises(TypeError, match="real input"):
        np.fft.rfft(z)
    # a seeded backward is the gradient of sum(Re(conj(g) z))
    w = z * 2
    w.backward(np.array([1j, 1.0]))
    np.testing.assert_allclose(z.grad.numpy(), [2j, 2.0])


def test_abs_at_zero_has_gradient_zero():
    z = tg.tensor(np.array([0j, 3 + 4j, 0j]), requires_grad=True)
    np.abs(z).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0, 0.6 + 0.8j, 0])


def test_a_traced_function_with_complex_intermediates_replays():
    def f(v):
        return (np.abs(np.fft.rfft(v * v, n=8)) ** 2).sum() + np.angle(np.fft.fft(v)).sum()
    ft = tg.trace(f, np.full(6, 0.5))
    x = RNG.normal(size=6)
    np.testing.assert_allclose(ft(x), float(f(tg.tensor(x))), rtol=1e-12)
    np.testing.assert_allclose(tg.grad(ft)(x), tg.grad(f)(x), rtol=1e-10)


def test_readme_complex_example_runs():
    import contextlib
    import io
    import pathlib
    import re
    readme = (pathlib.Path(__file__).parents[1] / "docs" / "reference.md").read_text()
    blocks = re.findall(r"```python\n(.*?)\n\s*```", readme, re.S)
    block = next(b for b in blocks if "a real loss of a complex spectrum" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "docs/reference.md", "exec"), {})
    wanted = [ln.split("# ")[-1] for ln in block.splitlines() if ln.startswith("print(")]
    assert out.getvalue().splitlines() == wanted


def test_item_of_a_complex_tensor_is_a_python_complex():
    z = tg.tensor(np.array([1.0 + 2.0j]), requires_grad=True)
    v = (z * 2.0).sum().item()
    assert type(v) is complex and v == 2.0 + 4.0j
    with pytest.raises(ValueError, match="size 1"):
        tg.tensor(np.array([1.0 + 2.0j, 3.0j])).item()


def _fd_complex(f, z):
    """Central differences of a real f along each part: dL/dRe + 1j dL/dIm."""
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        d = np.zeros(z.shape)
        d[i] = H
        g[i] = (f(z + d) - f(z - d)) / (2 * H) + 1j * (f(z + 1j * d) - f(z - 1j * d)) / (2 * H)
    return g


EXTREMES = {
    "max": lambda z, w: np.real(np.max(z) * w[0, 0]),
    "max axis 0": lambda z, w: np.real(np.max(z, axis=0) * w[0]).sum(),
    "min axis 1 keepdims": lambda z, w: np.imag(np.min(z, axis=1, keepdims=True) * w[:, :1]).sum(),
    "amin axis -1": lambda z, w: np.abs(np.amin(z, axis=-1)).sum(),
    "real_if_close (complex)": lambda z, w: np.real(np.real_if_close(z) * w).sum(),
}


@pytest.mark.parametrize("name", list(EXTREMES))
def test_max_min_real_if_close_of_complex_tensors(name):
    """Lexicographic order, as NumPy's: values equal NumPy's, the gradient
    goes to the element selected (central differences away from ties)."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    w = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    f = EXTREMES[name]
    np.testing.assert_allclose(float(f(tg.tensor(z), w)), f(z, w), rtol=1e-14)
    np.testing.assert_allclose(tg.grad(lambda z: f(z, w))(z), _fd_complex(lambda z: f(z, w), z),
                               rtol=1e-6, atol=1e-8)


def test_max_of_complex_ties_and_errors():
    z = np.array([1.0 + 2.0j, 1.0 + 3.0j, -1.0 + 9.0j])   # equal real parts: the imaginary decides
    t = tg.tensor(z, requires_grad=True)
    m = np.max(t)
    assert m.numpy() == np.max(z)
    np.real(m).backward()
    np.testing.assert_array_equal(t.grad.numpy(), [0.0, 1.0, 0.0])
    with pytest.raises(ValueError):
        np.max(tg.tensor(np.zeros(0, complex)))
    with pytest.raises(TypeError, match="numpy.max with out, initial or where"):
        np.max(tg.tensor(z), initial=0)
    r = np.real_if_close(tg.tensor(np.array([1.0 + 1e-17j, 2.0 + 0j]), requires_grad=True))
    assert isinstance(r, tg.Tensor) and r.requires_grad
