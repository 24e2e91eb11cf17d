"""Integer and boolean casts of a tensor that requires grad: NumPy's array
casts (``np.int64(t)``, ``np.asarray(t, dtype=int)``, ``t.astype(int)``,
``out[:] = t`` into an integer array) give constants, the derivative of an
integer being 0, as in autograd and JAX; Python numbers (``int(t)``,
``float(t)``) and float conversions still raise ConcretizationError; a
trace guards the cast, so new inputs whose integers differ trace again."""
import numpy as np
import pytest

import tapegrad as tg

W = np.random.default_rng(3).standard_normal((5, 4))
IDX = np.array([0.0, 2.0, 1.0, 3.0, 1.0])


def glue_and_pick(W):
    """Rows of W picked by indices held in W's own last column, cast to ints."""
    M = np.concatenate((W, IDX[:, None]), axis=1)
    idx = np.int64(M[:, -1])
    assert idx.dtype == np.int64
    return (M[:, :-1][idx] ** 2).sum()


def by_differences(f, x, h=1e-6):
    g = np.zeros(x.size)
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        e = e.reshape(x.shape)
        g[j] = (f(x + e) - f(x - e)) / (2 * h)
    return g.reshape(x.shape)


def test_indices_cast_from_the_differentiated_array():
    g = tg.grad(glue_and_pick)(W)
    counts = np.bincount(IDX.astype(int), minlength=5)
    np.testing.assert_allclose(g, 2 * W * counts[:, None], rtol=1e-15)
    np.testing.assert_allclose(g, by_differences(glue_and_pick, W), rtol=1e-8, atol=1e-9)


CASTS = {
    "np.int64(t)": lambda t: np.int64(t),
    "np.int32(t)": lambda t: np.int32(t),
    "np.uint8(t)": lambda t: np.uint8(t),
    "np.asarray(t, dtype=int)": lambda t: np.asarray(t, dtype=int),
    "np.array(t, dtype=np.int16)": lambda t: np.array(t, dtype=np.int16),
    "t.astype(int)": lambda t: t.astype(int),
    "out[:] = t": lambda t: _store_int(t),
}


def _store_int(t):
    out = np.zeros(t.shape, dtype=np.int64)
    out[...] = t
    return out


def _indexed(cast):
    table = np.linspace(1.0, 2.0, 10)
    return lambda x: (x * table[np.asarray(cast(x * 3.0))]).sum()


X = np.array([0.4, 1.7, 2.9])


@pytest.mark.parametrize("name", sorted(CASTS))
def test_an_integer_cast_is_a_constant_in_every_transform(name):
    f = _indexed(CASTS[name])
    table = np.linspace(1.0, 2.0, 10)
    expected = table[(3.0 * X).astype(int)]  # d/dx of x * c(x), c piecewise constant
    np.testing.assert_allclose(tg.grad(f)(X), expected, rtol=1e-15)
    np.testing.assert_allclose(tg.jacobian(f, mode="reverse")(X), expected, rtol=1e-15)
    np.testing.assert_allclose(tg.jacobian(f, mode="forward")(X), expected, rtol=1e-15)
    np.testing.assert_allclose(tg.jvp(f, (X,), (np.ones(3),))[1], expected.sum(), rtol=1e-15)
    np.testing.assert_allclose(tg.hessian(f)(X), np.zeros((3, 3)), atol=0)
    np.testing.assert_allclose(tg.grad(f)(X), by_differences(f, X), rtol=1e-8)
    x = tg.tensor(X, requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-15)


def test_casts_give_numpy_types():
    x = tg.tensor(np.array([1.5, -2.5]), requires_grad=True)
    a = np.int64(x * 1.0)
    assert type(a) is np.ndarray and a.dtype == np.int64 and a.tolist() == [1, -2]
    s = np.int32(x[0])  # a 0-d tensor: NumPy's scalar, as of a 0-d array
    assert type(s) is np.int32 and s == 1
    b = np.bool_(x * 0.0)
    assert b.dtype == np.bool_ and not b.any()
    t = x.astype(np.int8)
    assert isinstance(t, tg.Tensor) and t.dtype == np.int8 and not t.requires_grad


def test_inside_grad_a_zero_dimensional_integer_cast_works():
    f = lambda x: x[0] * np.int64(x[1] * 2.0) + x[1]  # noqa: E731
    np.testing.assert_allclose(tg.grad(f)(np.array([3.0, 1.6])), [3.0, 1.0], rtol=1e-15)


RAISE = {
    "int(t)": lambda t: int(t[0]),
    "float(t)": lambda t: float(t[0]),
    "np.float64(t)": lambda t: np.float64(t),
    "np.float32(t)": lambda t: np.float32(t),
    "np.asarray(t)": lambda t: np.asarray(t),
    "np.asarray(t, dtype=float)": lambda t: np.asarray(t, dtype=float),
    "np.complex128(t)": lambda t: np.complex128(t),
}


@pytest.mark.parametrize("name", sorted(RAISE))
def test_python_numbers_and_float_conversions_still_raise(name):
    conv = RAISE[name]
    with pytest.raises((tg.ConcretizationError, TypeError, ValueError)) as e:
        tg.grad(lambda x: (x * np.sum(conv(x))).sum())(X)
    err = e.value
    while not isinstance(err, tg.ConcretizationError) and err.__cause__ is not None:
        err = err.__cause__
    if not isinstance(err, tg.ConcretizationError):
        err = err.__context__
    assert isinstance(err, tg.ConcretizationError), repr(e.value)


def test_a_trace_guards_the_cast_and_traces_again_when_it_changes():
    table = np.linspace(1.0, 2.0, 20)
    for cast in (np.int64, lambda t: t.astype(int)):
        f = lambda x: (x * table[np.asarray(cast(x * 3.0))]).sum()  # noqa: E731
        ft = tg.trace(f, X)
        for x in (X, X + 0.01, X + 1.0, X + 1.02):  # the same, same, new, same integers
            v, g = ft.value_and_grad(x)
            ev, eg = tg.value_and_grad(f)(x)
            np.testing.assert_allclose(v, ev, rtol=1e-15)
            np.testing.assert_allclose(g, eg, rtol=1e-15)
        assert ft.retraces == 1


@pytest.mark.parametrize("dtype,part", [(np.complex128, np.float64), (np.complex64, np.float32)])
def test_a_complex_cast_keeps_the_gradient(dtype, part):
    x0 = np.array([1.0, -2.0, 0.5], part)

    def f(x):
        z = x.astype(dtype) * (1 + 2j)
        return (np.abs(z) ** 2 + np.real(z * z)).sum()
    # |x (1 + 2i)|^2 + Re(x^2 (1 + 2i)^2) = 5 x^2 - 3 x^2 = 2 x^2
    g = tg.grad(f)(x0)
    assert g.dtype == part
    np.testing.assert_allclose(g, 4 * x0, rtol=1e-6 if part == np.float32 else 1e-14)
    z = tg.tensor(x0, requires_grad=True).astype(dtype)
    assert z.requires_grad  # complex tensors compute in complex128, as tg.tensor's do
