"""Plain NumPy code on tensors records like the tapegrad functions.

``np.sin(t)``, ``np.sum(t, axis=0)``, ``np.concatenate([t, u])``, ``X @ t``
with X an ndarray ... return tensors with the same values, the same graph
nodes and the same gradients as ``tg.sin`` and friends.  What tapegrad
cannot differentiate raises a TypeError that names the function and says
how to get plain values; ``out=`` and ``where=`` give a clear TypeError.
"""
import numpy as np
import pytest

import tapegrad as tg

from oracle import close, leaf


V = np.array([[0.3, -0.7, 0.5], [0.9, 0.2, -0.4]])
P = np.array([[0.3, 1.7, 0.5], [2.9, 0.2, 1.4]])        # positive
SEED = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])


def _grad_of(fn, value, seed):
    x = leaf(value)
    y = fn(x)
    assert isinstance(y, tg.Tensor), f"{fn} returned {type(y).__name__}"
    assert y.requires_grad
    y.backward(seed)
    return y, x.grad.numpy()


# (numpy spelling, tapegrad spelling, input)
PAIRS = {
    "sin": (np.sin, tg.sin, V), "cos": (np.cos, tg.cos, V), "tan": (np.tan, tg.tan, V),
    "exp": (np.exp, tg.exp, V), "log": (np.log, tg.log, P), "log1p": (np.log1p, tg.log1p, P),
    "expm1": (np.expm1, tg.expm1, V), "sqrt": (np.sqrt, tg.sqrt, P),
    "square": (np.square, tg.square, V), "tanh": (np.tanh, tg.tanh, V),
    "sinh": (np.sinh, tg.sinh, V), "cosh": (np.cosh, tg.cosh, V),
    "arcsin": (np.arcsin, tg.arcsin, V), "arccos": (np.arccos, tg.arccos, V),
    "arctan": (np.arctan, tg.arctan, V), "abs": (np.abs, tg.abs, V),
    "absolute": (np.absolute, tg.abs, V), "negative": (np.negative, lambda t: -t, V),
    "positive": (np.positive, lambda t: +t, V),
    "add": (lambda t: np.add(t, 2.0), lambda t: t + 2.0, V),
    "subtract": (lambda t: np.subtract(1.0, t), lambda t: 1.0 - t, V),
    "multiply": (lambda t: np.multiply(t, V), lambda t: t * V, V),
    "divide": (lambda t: np.divide(t, P), lambda t: t / P, V),
    "true_divide": (lambda t: np.true_divide(1.0, t), lambda t: 1.0 / t, P),
    "power": (lambda t: np.power(t, 3), lambda t: t ** 3, V),
    "rpower": (lambda t: np.power(2.0, t), lambda t: 2.0 ** t, V),
    "maximum": (lambda t: np.maximum(t, 0.1), lambda t: tg.maximum(t, 0.1), V),
    "minimum": (lambda t: np.minimum(t, 0.1), lambda t: tg.minimum(t, 0.1), V),
    "sum": (lambda t: np.sum(t, axis=0), lambda t: tg.sum(t, axis=0), V),
    "sum_all": (np.sum, tg.sum, V),
    "sum_keepdims": (lambda t: np.sum(t, axis=1, keepdims=True),
                     lambda t: t.sum(axis=1, keepdims=True), V),
    "mean": (lambda t: np.mean(t, axis=1), lambda t: tg.mean(t, axis=1), V),
    "prod": (lambda t: np.prod(t, axis=0), lambda t: tg.prod(t, axis=0), V),
    "max": (lambda t: np.max(t, axis=1), lambda t: tg.max(t, axis=1), V),
    "amax": (lambda t: np.amax(t, axis=0), lambda t: tg.max(t, axis=0), V),
    "min": (lambda t: np.min(t), lambda t: tg.min(t), V),
    "amin": (lambda t: np.amin(t, axis=1), lambda t: tg.min(t, axis=1), V),
    "add_reduce_1d": (lambda t: np.add.reduce(t), tg.sum, V[0]),
    "multiply_reduce_1d": (lambda t: np.multiply.reduce(t), tg.prod, V[0]),
    "reshape": (lambda t: np.reshape(t, (3, 2)), lambda t: tg.reshape(t, (3, 2)), V),
    "ravel": (np.ravel, lambda t: t.reshape(-1), V),
    "transpose": (np.transpose, tg.transpose, V),
    "swapaxes": (lambda t: np.swapaxes(t, 0, 1), lambda t: tg.swapaxes(t, 0, 1), V),
    "expand_dims": (lambda t: np.expand_dims(t, 1), lambda t: tg.expand_dims(t, 1), V),
    "squeeze": (lambda t: np.squeeze(np.expand_dims(t, 0)), lambda t: t, V),
    "broadcast_to": (lambda t: np.broadcast_to(t, (4, 2, 3)),
                     lambda t: tg.broadcast_to(t, (4, 2, 3)), V),
    "clip": (lambda t: np.clip(t, -0.5, 0.4), lambda t: tg.clip(t, -0.5, 0.4), V),
    "where": (lambda t: np.where(t > 0, t, 0.5 * t),
              lambda t: tg.where(t > 0, t, 0.5 * t), V),
    "matmul_left": (lambda t: np.ones((4, 2)) @ t, lambda t: tg.matmul(np.ones((4, 2)), t), V),
    "matmul_right": (lambda t: t @ P.T, lambda t: tg.matmul(t, P.T), V),
    "np_matmul": (lambda t: np.matmul(P.T, t), lambda t: tg.matmul(P.T, t), V),
    "dot": (lambda t: np.dot(t, np.arange(3.0)), lambda t: tg.dot(t, np.arange(3.0)), V),
    "ndarray_add": (lambda t: P + t, lambda t: t + P, V),
    "ndarray_mul": (lambda t: P * t, lambda t: t * P, V),
    "ndarray_sub": (lambda t: P - t, lambda t: -t + P, V),
    "ndarray_div": (lambda t: P / t, lambda t: tg.divide(P, t), P),
    "ndarray_pow": (lambda t: P ** t, lambda t: tg.power(P, t), V),
    "np_scalar": (lambda t: np.float64(2.0) * t - np.float64(1.0),
                  lambda t: 2.0 * t - 1.0, V),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_numpy_spelling_matches_tapegrad(name):
    np_fn, tg_fn, value = PAIRS[name]
    with tg.no_grad():
        ref_shape = tg_fn(tg.tensor(value)).shape
    seed = np.arange(1.0, int(np.prod(ref_shape)) + 1).reshape(ref_shape) / 7
    y_np, g_np = _grad_of(np_fn, value, seed)
    y_tg, g_tg = _grad_of(tg_fn, value, seed)
    assert y_np.shape == y_tg.shape
    close(y_np, y_tg.numpy())
    close(g_np, g_tg)
    assert g_np.shape == value.shape


@pytest.mark.parametrize("np_fn, deriv, value", [
    (np.sin, np.cos, V), (np.exp, np.exp, V), (np.log, lambda v: 1 / v, P),
    (np.sqrt, lambda v: 0.5 / np.sqrt(v), P), (np.tanh, lambda v: 1 - np.tanh(v) ** 2, V),
    (np.arctan, lambda v: 1 / (1 + v * v), V), (np.square, lambda v: 2 * v, V),
], ids=["sin", "exp", "log", "sqrt", "tanh", "arctan", "square"])
def test_ufunc_gradients_closed_form(np_fn, deriv, value):
    y, g = _grad_of(np_fn, value, SEED)
    close(y, np_fn(value))
    close(g, SEED * deriv(value), rtol=1e-11)


def test_graph_nodes_named_like_tapegrad():
    t = leaf(V)
    assert np.sin(t).grad_fn.name() == "SinBackward"
    assert np.sum(t, axis=0).grad_fn.name() == "SumBackward"
    assert np.concatenate([t, t]).grad_fn.name() == "CatBackward"
    assert (np.ones((4, 2)) @ t).grad_fn.name() == "MmBackward"
    assert np.exp(t).grad_fn.name() == tg.exp(t).grad_fn.name() == "ExpBackward"
    assert (P + t).grad_fn.name() == "AddBackward"


def test_concatenate_and_stack_of_tensors_and_arrays():
    t, u = leaf([1.0, 2.0]), leaf([3.0])
    y = np.concatenate([t, u, np.array([9.0, 9.0])])
    assert isinstance(y, tg.Tensor)
    close(y, [1.0, 2.0, 3.0, 9.0, 9.0])
    y.backward([1.0, 2.0, 3.0, 4.0, 5.0])
    close(t.grad, [1.0, 2.0])
    close(u.grad, [3.0])
    z = np.concatenate([np.zeros(1), t])     # an ndarray first
    assert isinstance(z, tg.Tensor)
    z.backward([7.0, 1.0, 1.0])
    close(t.grad, [2.0, 3.0])
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    s = np.stack([a, b], axis=1)
    assert s.shape == (2, 2)
    s.backward([[1.0, 2.0], [3.0, 4.0]])
    close(a.grad, [1.0, 3.0])
    close(b.grad, [2.0, 4.0])


def test_split():
    t = leaf(np.arange(6.0))
    parts = np.split(t, [2, 5])
    assert [p.shape for p in parts] == [(2,), (3,), (1,)]
    assert all(isinstance(p, tg.Tensor) for p in parts)
    (parts[0].sum() + 3 * parts[2].sum()).backward()
    close(t.grad, [1.0, 1.0, 0.0, 0.0, 0.0, 3.0])


def test_ndarray_matmul_both_sides():
    X = np.arange(6.0).reshape(2, 3)
    t = leaf([1.0, -1.0, 2.0])
    y = X @ t
    assert isinstance(y, tg.Tensor) and y.grad_fn.name() == "MmBackward"
    close(y, X @ np.array([1.0, -1.0, 2.0]))
    y.backward([1.0, 1.0])
    close(t.grad, X.sum(axis=0))
    m = leaf(np.eye(2))
    z = m @ X
    z.backward(np.ones((2, 3)))
    close(m.grad, np.ones((2, 3)) @ X.T)


def test_mlp_written_in_plain_numpy():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((5, 3))
    W = leaf(rng.standard_normal((3, 2)))
    b = leaf([0.1, -0.2])

    def loss_np(Wv, bv):
        h = np.tanh(X @ Wv + bv)
        return np.mean(np.sum(h * h, axis=1))

    y = np.mean(np.sum(np.square(np.tanh(X @ W + b)), axis=1))
    assert isinstance(y, tg.Tensor)
    close(y, loss_np(W.numpy(), b.numpy()))
    y.backward()
    h = np.tanh(X @ W.numpy() + b.numpy())
    dpre = 2 * h * (1 - h * h) / 5
    close(W.grad, X.T @ dpre, rtol=1e-11)
    close(b.grad, dpre.sum(axis=0), rtol=1e-11)


def test_comparison_ufuncs_give_plain_booleans():
    t = leaf([-1.0, 0.0, 2.0])
    for fn in (np.greater, np.less, np.equal, np.not_equal, np.less_equal, np.greater_equal):
        r = fn(t, 0.0)
        assert isinstance(r, tg.Tensor) and r.dtype == np.bool_ and not r.requires_grad
        assert np.array_equal(r.numpy(), fn(np.array([-1.0, 0.0, 2.0]), 0.0))


def test_plain_value_functions():
    t = leaf([[3.0, 1.0], [2.0, 5.0]])
    assert np.argmax(t) == 3
    assert np.shape(t) == (2, 2)
    assert np.ndim(t) == 2 and np.size(t) == 4
    assert np.allclose(t, [[3.0, 1.0], [2.0, 5.0]])
    assert np.array_equal(np.argsort(t, axis=1), [[1, 0], [0, 1]])
    assert np.count_nonzero(t) == 4
    assert t.grad is None


def test_asarray_and_array():
    t = tg.tensor([1.0, 2.0])  # no grad: a requires-grad tensor refuses (test_api)
    a = np.asarray(t)
    assert type(a) is np.ndarray and np.array_equal(a, [1.0, 2.0])
    b = np.array(t, dtype=np.float32)
    assert type(b) is np.ndarray and b.dtype == np.float32
    c = np.array(t)
    c[0] = 5.0                # a copy
    assert t.numpy()[0] == 1.0


def test_plain_tensors_give_plain_results():
    t = tg.tensor([1.0, 4.0])
    y = np.sqrt(t)
    assert isinstance(y, tg.Tensor) and not y.requires_grad
    close(y, [1.0, 2.0])
    s = np.sum(t)
    assert isinstance(s, tg.Tensor) and not s.requires_grad and s.item() == 5.0


def test_under_no_grad():
    t = leaf([1.0, 2.0])
    with tg.no_grad():
        y = np.exp(np.sum(t * t))
    assert isinstance(y, tg.Tensor) and not y.requires_grad


def test_ufunc_dtype_keyword():
    t = leaf([0.5, 1.0])
    y = np.exp(t, dtype=np.float32)
    assert y.dtype == np.float32
    y.backward(np.ones(2, dtype=np.float32))
    assert t.grad.dtype == np.float64
    close(t.grad, np.exp(np.float32([0.5, 1.0])), rtol=1e-6)


# -- what cannot be differentiated ---------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda t: np.nanmedian(t), "nanmedian"),
    (lambda t: np.unwrap(t), "unwrap"),
    (lambda t: np.nanpercentile(t, 50), "nanpercentile"),
    (lambda t: np.polyder(t), "polyder"),
    (lambda t: np.spacing(t), "spacing"),
    (lambda t: np.ldexp(t, 2), "ldexp"),
    (lambda t: np.nextafter(t, t), "nextafter"),
    (lambda t: np.add.reduceat(t, [0, 1]), "reduceat"),
    (lambda t: np.ldexp.outer(t, t), "ldexp.outer"),
], ids=["nanmedian", "unwrap", "nanpercentile", "polyder", "spacing", "ldexp", "nextafter",
        "reduceat", "ldexp.outer"])
def test_unsupported_function_raises_type_error(call, name):
    t = leaf([1.0, 2.0, 3.0])
    with pytest.raises(TypeError) as info:
        call(t)
    msg = str(info.value)
    assert name in msg
    assert "t.numpy()" in msg
    assert "differentiate" in msg
    # the library keeps working
    (t * t).sum().backward()
    close(t.grad, [2.0, 4.0, 6.0])


def test_unsupported_function_works_on_plain_values():
    t = leaf([1.0, 2.0, 3.0])
    assert np.array_equal(np.cumsum(t.numpy()), [1.0, 3.0, 6.0])
    close(np.fft.fft(np.asarray(t.detach())).real, np.fft.fft([1.0, 2.0, 3.0]).real)


def test_ufunc_out_keyword():
    t = leaf([1.0, 2.0])
    out = np.zeros(2)
    with pytest.raises(TypeError, match="out="):
        np.sin(t, out=out)
    assert np.array_equal(out, [0.0, 0.0])
    with pytest.raises(TypeError, match="out="):
        np.add(t, 1.0, out=out)
    with pytest.raises(TypeError, match="out="):
        np.multiply(np.ones(2), t, out=(out,))


def test_ndarray_inplace_with_tensor_raises():
    X = np.ones(2)
    t = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="out="):
        X += t
    assert np.array_equal(X, [1.0, 1.0])


def test_ufunc_where_keyword():
    t = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="where="):
        np.add(t, 1.0, where=np.array([True, False]))
    with pytest.raises(TypeError, match="where"):
        np.exp(t, where=np.array([True, False]))
    y = np.add(t, 1.0, where=True)   # the default is fine
    close(y, [2.0, 3.0])


def test_function_out_keyword():
    t = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="out"):
        np.sum(t, out=np.zeros(()))
    with pytest.raises(TypeError, match="out"):
        np.mean(t, out=np.zeros(()))


def test_ufunc_reduce_with_axis():
    t = leaf(V)
    y = np.add.reduce(t, axis=1)
    close(y, V.sum(axis=1))
    y.backward([1.0, 2.0])
    close(t.grad, [[1.0] * 3, [2.0] * 3])
    m = np.maximum.reduce(leaf(V), axis=0)
    close(m, V.max(axis=0))


def test_ufunc_reduce_default_axis_is_zero():
    t = leaf(V)
    y = np.add.reduce(t)
    assert y.shape == (3,)
    close(y, V.sum(axis=0))


@pytest.mark.parametrize("fn", [np.isnan, np.isfinite, np.isinf], ids=lambda f: f.__name__)
def test_isnan_family_gives_plain_booleans(fn):
    t = leaf([1.0, np.inf, np.nan])
    r = fn(t)
    assert np.array_equal(np.asarray(r), fn(np.array([1.0, np.inf, np.nan])))
