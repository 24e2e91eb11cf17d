"""Dtypes: float32 stays float32 through ops and gradients, mixed operands
promote as NumPy does, integer and boolean data keep their dtype and never
carry gradients.
"""
import warnings

import numpy as np
import pytest

import tapegrad as tg

from oracle import close

F32_RTOL = 2e-6


# -- creation ------------------------------------------------------------------------------
@pytest.mark.parametrize("data, dtype", [
    (1.5, np.float64), ([1.0, 2.0], np.float64), ([[1.0], [2.0]], np.float64),
    (np.float32(1.5), np.float32), (np.array([1.0], np.float32), np.float32),
    (np.array([1.0], np.float16), np.float16), (np.float64(2.0), np.float64),
    ([1, 2], np.array([1, 2]).dtype), (np.array([1, 2], np.int8), np.int8),
    (np.array([1, 2], np.uint16), np.uint16), (True, np.bool_), ([1, 2.0], np.float64),
], ids=["py_float", "float_list", "nested", "np_float32", "f32_array", "f16_array",
        "np_float64", "int_list", "int8", "uint16", "bool", "mixed_list"])
def test_creation_dtype_follows_numpy(data, dtype):
    t = tg.tensor(data)
    assert t.dtype == dtype
    assert t.dtype == np.asarray(data).dtype


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_requested_float_dtype(dtype):
    t = tg.tensor([1, 2, 3], dtype=dtype, requires_grad=True)
    assert t.dtype == dtype
    (t * t).sum().backward()
    assert t.grad.dtype == dtype
    close(t.grad.numpy().astype(np.float64), [2.0, 4.0, 6.0])


def test_repr_shows_non_default_float_dtype():
    t = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    assert repr(t) == "tensor([1.0, 2.0], dtype=float32, requires_grad=True)"
    assert repr(tg.tensor([1.0, 2.0])) == "tensor([1.0, 2.0])"


def test_repr_of_float16_emits_no_warning():
    t = tg.tensor(np.array([1.0, 2.0], np.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = repr(t)
    assert "float16" in text


# -- float32 through every op --------------------------------------------------------------
X32 = np.array([[0.3, -0.7, 0.5], [0.9, 0.2, -0.4]], dtype=np.float32)
P32 = np.array([[0.3, 1.7, 0.5], [2.9, 0.2, 1.4]], dtype=np.float32)
U32 = np.array([[1.5, 0.5, -2.0], [0.25, 1.0, 3.0]], dtype=np.float32)

OPS32 = {
    "exp": (tg.exp, X32), "log": (tg.log, P32), "log1p": (tg.log1p, P32),
    "expm1": (tg.expm1, X32), "sqrt": (tg.sqrt, P32), "square": (tg.square, X32),
    "sin": (tg.sin, X32), "cos": (tg.cos, X32), "tan": (tg.tan, X32), "tanh": (tg.tanh, X32),
    "sinh": (tg.sinh, X32), "cosh": (tg.cosh, X32), "arcsin": (tg.arcsin, X32),
    "arccos": (tg.arccos, X32), "arctan": (tg.arctan, X32), "abs": (tg.abs, X32),
    "neg": (lambda x: -x, X32),
    "add_py": (lambda x: x + 1.5, X32), "rsub_py": (lambda x: 1.5 - x, X32),
    "mul_py": (lambda x: 3 * x, X32), "div_py": (lambda x: x / 3.0, X32),
    "rdiv_py": (lambda x: 1.0 / x, P32), "pow_py": (lambda x: x ** 3, X32),
    "pow_frac": (lambda x: x ** 0.5, P32), "rpow_py": (lambda x: 2.0 ** x, X32),
    "mul_f32_array": (lambda x: x * U32, X32), "add_f32_array": (lambda x: U32 + x, X32),
    "mul_np_float32": (lambda x: x * np.float32(2.0), X32),
    "mul_self": (lambda x: x * x, X32), "div_self": (lambda x: x / (x * x + 1.0), X32),
    "pow_tensor": (lambda x: x ** (x * 0.5), P32),
    "maximum": (lambda x: tg.maximum(x, 0.0), X32), "minimum": (lambda x: tg.minimum(x, U32), X32),
    "where": (lambda x: tg.where(x > 0, x, x * 0.1), X32),
    "clip": (lambda x: tg.clip(x, -0.5, 0.45), X32),
    "sum": (lambda x: x.sum(axis=0), X32), "sum_all": (lambda x: x.sum(), X32),
    "mean": (lambda x: x.mean(axis=1), X32), "prod": (lambda x: x.prod(axis=0), X32),
    "max": (lambda x: x.max(axis=1), X32), "min": (lambda x: x.min(), X32),
    "logsumexp": (lambda x: tg.logsumexp(x, axis=1), X32),
    "reshape": (lambda x: x.reshape(3, 2), X32), "transpose": (lambda x: x.T, X32),
    "swapaxes": (lambda x: tg.swapaxes(x, 0, 1), X32),
    "expand_squeeze": (lambda x: tg.squeeze(tg.expand_dims(x, 0)), X32),
    "broadcast_to": (lambda x: tg.broadcast_to(x, (2, 2, 3)), X32),
    "index": (lambda x: x[np.array([1, 1, 0]), np.array([0, 0, 2])], X32),
    "mask": (lambda x: x[x > 0], X32), "slice": (lambda x: x[:, ::2], X32),
    "concatenate": (lambda x: tg.concatenate([x, x * 2.0], axis=1), X32),
    "stack": (lambda x: tg.stack([x, x], axis=0), X32),
    "split": (lambda x: tg.concatenate([p * (i + 1.0) for i, p in
                                        enumerate(tg.split(x, 3, axis=1))], axis=1), X32),
    "unbind": (lambda x: tg.stack([p * (i + 1.0) for i, p in enumerate(tg.unbind(x, 1))]), X32),
    "matmul": (lambda x: x @ U32.T, X32), "matmul_self": (lambda x: x @ x.T, X32),
    "dot": (lambda x: tg.dot(x[0], x[1]), X32),
    "numpy_protocol": (lambda x: np.sum(np.sin(x) * np.float32(2.0), axis=0), X32),
    # special functions and composites of ops/special.py, ops/numeric.py
    "erf": (tg.erf, X32), "erfc": (tg.erfc, X32), "erfinv": (tg.erfinv, X32),
    "gammaln": (tg.gammaln, P32), "digamma": (tg.digamma, P32), "i0e": (tg.i0e, X32),
    "i1e": (tg.i1e, X32), "log_ndtr": (tg.log_ndtr, X32), "expit": (tg.expit, X32),
    "logit": (lambda x: tg.logit(x * np.float32(0.3)), P32), "sinc": (np.sinc, X32),
    "convolve": (lambda x: np.convolve(x[0], x[1]), X32),
    "trapezoid": (lambda x: np.trapezoid(x, axis=1), X32),
    "linspace": (lambda x: np.linspace(x[0], x[1], 4), X32),
}


def _numgrad64(fn, value, seed, eps=1e-6):
    """Finite difference of <seed, fn(x)> in float64 at the float32 value."""
    v = value.astype(np.float64)
    g = np.zeros_like(v)
    for i in np.ndindex(v.shape):
        hi, lo = v.copy(), v.copy()
        hi[i] += eps
        lo[i] -= eps
        with tg.no_grad():
            fh = fn(tg.tensor(hi)).numpy()
            fl = fn(tg.tensor(lo)).numpy()
        g[i] = np.sum(seed * (fh.astype(np.float64) - fl.astype(np.float64))) / (2 * eps)
    return g


@pytest.mark.parametrize("name", sorted(OPS32))
def test_float32_stays_float32(name):
    fn, value = OPS32[name]
    x = tg.tensor(value, requires_grad=True)
    y = fn(x)
    assert y.dtype == np.float32, f"{name}: output is {y.dtype}"
    assert y.requires_grad
    # the forward is NumPy's float32 computation
    with tg.no_grad():
        ref = fn(tg.tensor(value.astype(np.float64))).numpy()
    close(y.numpy().astype(np.float64), ref, rtol=1e-5, atol=1e-6)
    seed = (np.arange(1.0, y.size + 1) / y.size).reshape(y.shape)
    y.backward(seed)
    assert x.grad.dtype == np.float32, f"{name}: gradient is {x.grad.dtype}"
    assert x.grad.shape == value.shape
    expected = _numgrad64(fn, value, seed)
    close(x.grad.numpy().astype(np.float64), expected, rtol=1e-4, atol=1e-5)


def test_float32_seed_of_any_dtype():
    x = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    for seed in ([1.0, 1.0], np.array([1.0, 1.0]), np.array([1, 1]),
                 np.array([1.0, 1.0], np.float32), tg.tensor([1.0, 1.0])):
        (x * 3.0).backward(seed)
    assert x.grad.dtype == np.float32
    close(x.grad, [15.0, 15.0])


def test_float32_gradient_accumulates_in_float32():
    x = tg.tensor(np.array([0.1, 0.2], np.float32), requires_grad=True)
    for _ in range(5):
        (x * x).sum().backward()
    assert x.grad.dtype == np.float32
    close(x.grad, 5 * 2 * np.array([0.1, 0.2], np.float32), rtol=F32_RTOL)


def test_float32_large_values():
    v = np.linspace(-1.0, 1.0, 100).astype(np.float32)
    x = tg.tensor(v, requires_grad=True)
    y = (tg.tanh(x) * x).sum()
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float32
    t = np.tanh(v.astype(np.float64))
    close(x.grad, t + v * (1 - t * t), rtol=1e-5, atol=1e-6)


def test_grad_assignment_casts_to_leaf_dtype():
    x = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    x.grad = np.array([0.5, 0.25])
    assert x.grad.dtype == np.float32
    (x * 2.0).sum().backward()
    assert x.grad.dtype == np.float32
    close(x.grad, [2.5, 2.25])


def test_float32_inplace_update_keeps_dtype():
    x = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    with tg.no_grad():
        x -= np.array([0.5, 0.5])          # a float64 operand
        x *= 2.0
    assert x.dtype == np.float32
    close(x, [1.0, 3.0])


# -- mixed operands promote as NumPy does --------------------------------------------------
def _f32(v):
    return tg.tensor(np.asarray(v, np.float32), requires_grad=True)


def _f64(v):
    return tg.tensor(np.asarray(v, np.float64), requires_grad=True)


A = [0.5, 1.5, 2.5]
B = [2.0, -1.0, 0.25]

MIXED = {
    # name: (tapegrad expression on (a, b), the same expression in NumPy on values)
    "f32*f64": (lambda: (_f32(A), _f64(B)), lambda a, b: a * b),
    "f64*f32": (lambda: (_f64(A), _f32(B)), lambda a, b: a * b),
    "f32+f64": (lambda: (_f32(A), _f64(B)), lambda a, b: a + b),
    "f32/f64": (lambda: (_f32(A), _f64(B)), lambda a, b: a / b),
    "f32**f64": (lambda: (_f32(A), _f64(B)), lambda a, b: a ** b),
    "f32@f64": (lambda: (_f32(A), _f64(B)), lambda a, b: a @ b),
    "maximum": (lambda: (_f32(A), _f64(B)), lambda a, b: np.maximum(a, b)),
    "concatenate": (lambda: (_f32(A), _f64(B)), lambda a, b: np.concatenate([a, b])),
    "stack": (lambda: (_f32(A), _f64(B)), lambda a, b: np.stack([a, b])),
    "where": (lambda: (_f32(A), _f64(B)),
              lambda a, b: np.where(np.array([True, False, True]), a, b)),
    "f16*f32": (lambda: (tg.tensor(np.asarray(A, np.float16), requires_grad=True), _f32(B)),
                lambda a, b: a * b),
}


@pytest.mark.parametrize("name", sorted(MIXED))
def test_mixed_tensors_promote_like_numpy(name):
    make, expr = MIXED[name]
    a, b = make()
    y = expr(a, b)
    ref = expr(a.numpy(), b.numpy())
    assert y.dtype == ref.dtype, f"{name}: {y.dtype} != NumPy's {ref.dtype}"
    close(y.numpy(), ref, rtol=1e-6)
    seed = np.ones(y.shape)
    y.backward(seed)
    assert a.grad.dtype == a.dtype and b.grad.dtype == b.dtype
    # each leaf's gradient, in float64, matches a finite difference
    av, bv = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    for leaf_, value, f in ((a, av, lambda v: expr(v, bv)), (b, bv, lambda v: expr(av, v))):
        g = np.zeros(3)
        for i in range(3):
            hi, lo = value.copy(), value.copy()
            hi[i] += 1e-6
            lo[i] -= 1e-6
            g[i] = (np.sum(seed * f(hi)) - np.sum(seed * f(lo))) / 2e-6
        tol = 1e-2 if leaf_.dtype == np.float16 else 1e-4
        close(leaf_.grad.numpy().astype(np.float64), g, rtol=tol, atol=tol)


@pytest.mark.parametrize("other", [
    2.0, 2, np.float32(2.0), np.float64(2.0), np.int8(2), np.int64(2),
    np.array([2.0, 2.0, 2.0]), np.array([2.0, 2.0, 2.0], np.float32),
    np.array([2, 2, 2], np.int8), np.array([2, 2, 2], np.int32), np.array([2, 2, 2], np.int64),
    True,
], ids=lambda o: f"{type(o).__name__}-{getattr(o, 'dtype', '')}")
@pytest.mark.parametrize("side", ["left", "right"])
def test_float32_with_numbers_and_arrays(other, side):
    x = _f32(A)
    y = x * other if side == "right" else other * x
    ref = np.asarray(A, np.float32) * other if side == "right" else \
        other * np.asarray(A, np.float32)
    assert isinstance(y, tg.Tensor)
    assert y.dtype == ref.dtype, f"{y.dtype} != NumPy's {ref.dtype}"
    close(y.numpy(), ref)
    y.backward(np.ones(3))
    assert x.grad.dtype == np.float32
    close(x.grad, np.broadcast_to(np.asarray(other, np.float64), (3,)))


@pytest.mark.parametrize("other", [
    tg.tensor([2, 3, 4]), tg.tensor(np.array([2, 3, 4], np.int8)),
    tg.tensor([True, False, True]),
], ids=["int64", "int8", "bool"])
def test_float_tensor_with_integer_tensor(other):
    x = _f32(A)
    y = x * other
    ref = np.asarray(A, np.float32) * other.numpy()
    assert y.dtype == ref.dtype
    y.backward(np.ones(3))
    assert x.grad.dtype == np.float32
    close(x.grad, other.numpy().astype(np.float64))
    assert other.grad is None and not other.requires_grad


# -- integers and booleans -----------------------------------------------------------------
def test_integer_arithmetic_follows_numpy():
    i = tg.tensor([1, 2, 3])
    assert (i + 1).dtype == (np.array([1, 2, 3]) + 1).dtype
    assert (i * i).dtype.kind == "i"
    assert (i / 2).dtype == np.float64
    assert (i / i).dtype == np.float64
    assert np.array_equal((i * 3).numpy(), [3, 6, 9])
    assert not (i * 2.5).requires_grad
    assert (i * 2.5).dtype == np.float64


def test_integer_tensor_with_grad_float_tensor():
    i = tg.tensor([1, 2, 3])
    x = _f64([1.0, 1.0, 1.0])
    y = (i * x + i).sum()
    assert y.dtype == np.float64
    y.backward()
    close(x.grad, [1.0, 2.0, 3.0])


def test_comparisons_are_boolean():
    x = _f32(A)
    assert (x > 1.0).dtype == np.bool_
    assert (tg.tensor([1, 2]) == 2).dtype == np.bool_


def test_astype_between_floats():
    x = _f64([0.1, 0.2, 0.3])
    y = tg.astype(x, np.float32)
    assert y.dtype == np.float32 and y.requires_grad
    z = (y * y).sum()
    assert z.dtype == np.float32
    z.backward()
    assert x.grad.dtype == np.float64
    close(x.grad, 2 * np.array([0.1, 0.2, 0.3], np.float32), rtol=F32_RTOL)
    w = _f32([1.0, 2.0])
    v = w.astype(np.float64)
    assert v.dtype == np.float64
    (v * 3.0).sum().backward()
    assert w.grad.dtype == np.float32
    close(w.grad, [3.0, 3.0])


def test_astype_to_integer_does_not_require_grad():
    x = _f64([1.5, 2.5])
    i = tg.astype(x, np.int64)
    assert i.dtype == np.int64
    assert not i.requires_grad
