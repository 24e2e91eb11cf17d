"""More of NumPy's surface on tensors: ndarray methods (argmax, argsort,
sort in place, round, fill, flat, all, any, nonzero, conj, real, imag),
has_aux and keyword arguments in the transforms, and axis=0 of 0-d
reductions -- each against NumPy on ndarrays, gradients against float64
central differences.
"""
import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))
V = np.array([3.0, -1.0, 2.0, 0.0, 5.0])
M = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])


def numeric_grad(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (float(f(hi)) - float(f(lo))) / (2 * eps)
    return g


def same(got, want):
    """The same plain value (type family, shape, dtype kind and contents)."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for a, b in zip(got, want):
            same(a, b)
        return
    assert not isinstance(got, tg.Tensor), f"expected a plain result, got {got!r}"
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype.kind == np.asarray(want).dtype.kind
    np.testing.assert_array_equal(got, want)


# -- plain-valued methods ----------------------------------------------------------------
PLAIN_CASES = [
    ("argmax", A, {}), ("argmax", A, {"axis": 0}), ("argmax", A, {"axis": -1}),
    ("argmax", A, {"axis": 1, "keepdims": True}), ("argmin", A, {}),
    ("argmin", A, {"axis": 1}), ("argsort", A, {}), ("argsort", A, {"axis": 0}),
    ("argsort", A, {"axis": None}), ("argsort", V, {"kind": "stable"}),
    ("all", M, {}), ("all", M, {"axis": 0}), ("any", M, {}), ("any", M, {"axis": 1}),
    ("any", M, {"axis": 1, "keepdims": True}), ("nonzero", M, {}), ("nonzero", V, {}),
    ("argmax", np.array(2.0), {}),
]


@pytest.mark.parametrize("name, a, kw", PLAIN_CASES)
def test_plain_method_matches_numpy(name, a, kw):
    t = tg.tensor(a, requires_grad=True)
    same(getattr(t, name)(**kw), getattr(a, name)(**kw))


@pytest.mark.parametrize("name", ["argmax", "argmin", "all", "any"])
def test_plain_method_refuses_out(name):
    with pytest.raises(TypeError, match=rf"Tensor\.{name}\(out=\.\.\.\) is not supported"):
        getattr(tg.tensor(V), name)(out=np.empty(()))


def test_argsort_order_is_refused():
    with pytest.raises(TypeError, match="order= .* not supported"):
        tg.tensor(V).argsort(order="x")


def test_argmax_is_guarded_in_a_trace():
    def plain(x):
        return x[x.argmax()] * 2.0
    f = tg.trace(plain, np.array([1.0, 3.0, 2.0]))
    np.testing.assert_allclose(tg.grad(f)(np.array([1.0, 3.0, 2.0])), [0, 2, 0])
    # the maximum moves: the guard traces again
    np.testing.assert_allclose(tg.grad(f)(np.array([4.0, 3.0, 2.0])), [2, 0, 0])


# -- round ---------------------------------------------------------------------------------
@pytest.mark.parametrize("decimals", [0, 1, -1])
def test_round_matches_numpy_with_zero_gradient(decimals):
    a = np.array([1.26, -3.55, 12.5, 0.04])
    t = tg.tensor(a, requires_grad=True)
    r = t.round(decimals)
    np.testing.assert_array_equal(r.detach().numpy(), a.round(decimals))
    np.testing.assert_array_equal(tg.grad(lambda x: x.round(decimals).sum())(a), 0.0)


def test_round_refuses_out():
    with pytest.raises(TypeError, match="out="):
        tg.tensor(V).round(out=np.empty(5))


# -- sort in place -------------------------------------------------------------------------
@pytest.mark.parametrize("a, axis", [(V, -1), (A, -1), (A, 0), (A, 1)])
def test_sort_in_place_matches_numpy(a, axis):
    t = tg.tensor(a.copy())
    want = a.copy()
    assert t.sort(axis=axis) is None
    want.sort(axis=axis)
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("a, axis", [(V, -1), (A, 0), (A, 1)])
def test_sort_in_place_gradient(a, axis):
    w = RNG.standard_normal(a.shape)

    def f(x):
        y = x * 1.0
        y.sort(axis=axis)
        return (y * w).sum()
    np.testing.assert_allclose(tg.grad(f)(a), numeric_grad(
        lambda x: (np.sort(x, axis=axis) * w).sum(), a), atol=1e-6)


def test_sort_through_a_view_reaches_the_base():
    t = tg.tensor(A.copy())
    t[1].sort()
    want = A.copy()
    want[1].sort()
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("make, kw, err, msg", [
    (lambda: tg.tensor(V, requires_grad=True), {}, RuntimeError, "leaf tensor that requires grad"),
    (lambda: tg.tensor(A), {"axis": None}, TypeError, "axis=None is not supported"),
    (lambda: tg.tensor(2.0), {}, np.exceptions.AxisError, "dimension 0"),
    (lambda: tg.tensor(A), {"axis": 2}, np.exceptions.AxisError, "out of bounds"),
])
def test_sort_errors(make, kw, err, msg):
    with pytest.raises(err, match=msg):
        make().sort(**kw)


# -- fill ----------------------------------------------------------------------------------
def test_fill_matches_numpy():
    t, a = tg.tensor(A.copy()), A.copy()
    assert t.fill(2.5) is None
    a.fill(2.5)
    np.testing.assert_array_equal(t.numpy(), a)


def test_fill_gradient_goes_to_the_value():
    def f(x, s):
        y = x * 1.0
        y.fill(s)
        return (y * np.arange(5.0)).sum()
    gx, gs = tg.grad(f, argnums=(0, 1))(V, 2.0)
    np.testing.assert_array_equal(gx, 0.0)
    np.testing.assert_allclose(gs, np.arange(5.0).sum())


def test_fill_errors():
    with pytest.raises(ValueError, match="single number"):
        tg.tensor(V).fill(np.ones(5))
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        tg.tensor(V, requires_grad=True).fill(1.0)


# -- flat ----------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [0, 5, -1, slice(2, 9, 3), [0, 11, 4], np.arange(12) % 2 == 0])
def test_flat_reads_match_numpy(key):
    t = tg.tensor(A)
    got = t.flat[key]
    np.testing.assert_array_equal(np.asarray(got.numpy()), A.flat[key])


@pytest.mark.parametrize("key, value", [(0, 9.0), (-1, 7.0), (slice(1, 6, 2), 0.0),
                                        ([2, 10], [1.0, 2.0])])
def test_flat_writes_match_numpy(key, value):
    for a in (A.copy(), A.T.copy(order="C")):
        t = tg.tensor(a.copy())
        t.flat[key] = value
        a.flat[key] = value
        np.testing.assert_array_equal(t.numpy(), a)


def test_flat_of_a_transpose_writes_through():
    t = tg.tensor(A.copy())
    tt = t.T
    tt.flat[1] = 100.0
    want = A.copy()
    want.T.flat[1] = 100.0
    np.testing.assert_array_equal(t.numpy(), want)


def test_flat_len_iter_and_gradient():
    t = tg.tensor(A)
    assert len(t.flat) == A.size
    np.testing.assert_array_equal([float(v) for v in t.flat], list(A.flat))
    g = tg.grad(lambda x: x.flat[3] * 2 + x.flat[[0, 5]].sum())(A)
    want = np.zeros(A.size)
    want[[3, 0, 5]] = [2, 1, 1]
    np.testing.assert_array_equal(g, want.reshape(A.shape))

    def f(x):
        y = x * 1.0
        y.flat[2] = x.flat[0] * 3.0
        return (y * y).sum()
    np.testing.assert_allclose(tg.grad(f)(A), numeric_grad(lambda x: f(tg.tensor(x)).item(), A),
                               atol=1e-5)


def test_flat_error():
    with pytest.raises(IndexError, match="one index"):
        tg.tensor(A).flat[0, 1] = 1.0


# -- conj, real, imag ----------------------------------------------------------------------
def test_conj_real_imag_match_numpy():
    a = A.copy()
    t = tg.tensor(a, requires_grad=True)
    assert a.conj() is a and t.conj() is t and t.conjugate() is t
    assert a.real is a and t.real is t
    np.testing.assert_array_equal(t.imag.numpy(), a.imag)
    assert t.imag.dtype == a.imag.dtype and not t.imag.requires_grad
    np.testing.assert_allclose(tg.grad(lambda x: (x.conj() * x.real).sum() + x.imag.sum())(a),
                               2 * a)


def test_real_setter_writes_through():
    t, a = tg.tensor(A.copy()), A.copy()
    t.real = 1.0
    a.real = 1.0
    np.testing.assert_array_equal(t.numpy(), a)


def test_imag_setter_error():
    with pytest.raises(TypeError, match="no imaginary part to set"):
        tg.tensor(A).imag = 1.0


# -- transforms: has_aux, keyword arguments, argnums tuples --------------------------------
X = RNG.standard_normal((5, 3))
W = RNG.standard_normal(3)


def loss(w, X, scale=1.0):
    pred = X @ w
    return scale * (pred ** 2).sum()


def loss_aux(w, X, scale=1.0):
    pred = X @ w
    return scale * (pred ** 2).sum(), {"pred": pred, "n": 5, "mean": pred.mean()}


def test_grad_passes_keyword_arguments():
    want = numeric_grad(lambda w: loss(w, X, 3.0), W)
    np.testing.assert_allclose(tg.grad(loss)(W, X=X, scale=3.0), want, rtol=1e-6)
    v, g = tg.value_and_grad(loss)(W, X=X)
    np.testing.assert_allclose(v, loss(W, X))
    np.testing.assert_allclose(g, numeric_grad(lambda w: loss(w, X), W), rtol=1e-6)


def test_jacobian_and_hessian_pass_keyword_arguments():
    np.testing.assert_allclose(tg.jacobian(lambda w, X: X @ w)(W, X=X), X)
    np.testing.assert_allclose(tg.hessian(loss)(W, X=X, scale=0.5), X.T @ X, rtol=1e-12)


@pytest.mark.parametrize("argnums", [0, (0,), (0, 1)])
def test_grad_has_aux(argnums):
    g, aux = tg.grad(loss_aux, argnums=argnums, has_aux=True)(W, X)
    want = tg.grad(loss, argnums=argnums)(W, X)
    for a, b in zip(g if isinstance(argnums, tuple) else (g,),
                    want if isinstance(argnums, tuple) else (want,)):
        np.testing.assert_allclose(a, b)
    assert set(aux) == {"pred", "n", "mean"} and aux["n"] == 5
    assert type(aux["pred"]) is np.ndarray and not isinstance(aux["mean"], tg.Tensor)
    np.testing.assert_allclose(aux["pred"], X @ W)
    np.testing.assert_allclose(aux["mean"], (X @ W).mean())


def test_value_and_grad_has_aux_and_kwargs():
    (value, aux), g = tg.value_and_grad(loss_aux, has_aux=True)(W, X=X, scale=2.0)
    np.testing.assert_allclose(value, loss(W, X, 2.0))
    np.testing.assert_allclose(g, numeric_grad(lambda w: loss(w, X, 2.0), W), rtol=1e-6)
    np.testing.assert_allclose(aux["pred"], X @ W)


def test_has_aux_aux_may_be_any_object_and_nested_grad_works():
    g, aux = tg.grad(lambda x: ((x ** 3).sum(), "note"), has_aux=True)(np.array([1.0, 2.0]))
    assert aux == "note"
    np.testing.assert_allclose(g, [3.0, 12.0])
    outer = tg.grad(lambda x: tg.grad(lambda y: ((y ** 3).sum(), y * 2), has_aux=True)(x)[0].sum())
    np.testing.assert_allclose(outer(np.array([1.0, 2.0])), [6.0, 12.0])


@pytest.mark.parametrize("transform", [tg.grad, tg.value_and_grad])
@pytest.mark.parametrize("out", [1.0, (1.0,), (1.0, 2.0, 3.0)])
def test_has_aux_needs_a_pair(transform, out):
    f = lambda x: (x.sum(), 1, 2) if isinstance(out, tuple) and len(out) == 3 else (  # noqa: E731
        (x.sum(),) if isinstance(out, tuple) else x.sum())
    with pytest.raises(TypeError, match=r"has_aux=True\): f must return a pair \(value, aux\)"):
        transform(f, has_aux=True)(np.ones(2))


@pytest.mark.parametrize("transform", [tg.grad, tg.value_and_grad, tg.jacobian, tg.hessian])
def test_argnums_tuples_everywhere(transform):
    f = lambda x, y: (x * x * y).sum()  # noqa: E731
    x, y = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    res = transform(f, argnums=(0, 1))(x, y)
    if transform is tg.value_and_grad:
        res = res[1]
    assert isinstance(res, tuple) and len(res) == 2
    if transform in (tg.grad, tg.value_and_grad):
        np.testing.assert_allclose(res[0], 2 * x * y)
        np.testing.assert_allclose(res[1], x * x)


def test_argnums_error():
    with pytest.raises(ValueError, match="argnums .* does not name one"):
        tg.grad(loss, argnums=(0, 2))(W, X)


# -- 0-d reductions with axis=0 ------------------------------------------------------------
ZERO_D = [(np.sum, 0), (np.sum, -1), (np.sum, ()), (np.prod, 0), (np.prod, -1), (np.max, 0),
          (np.max, -1), (np.min, 0), (np.min, -1), (np.mean, ()), (np.cumsum, 0),
          (np.cumsum, -1), (np.cumprod, 0)]


@pytest.mark.parametrize("fn, axis", ZERO_D)
def test_zero_d_reduction_axis_matches_numpy(fn, axis):
    a = np.array(2.5)
    got = fn(tg.tensor(a), axis=axis)
    want = fn(a, axis=axis)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want)
    g = tg.grad(lambda x: (fn(x * x, axis=axis)).sum())(a)
    np.testing.assert_allclose(g, numeric_grad(lambda x: fn(x * x, axis=axis).sum(), a),
                               rtol=1e-6)


@pytest.mark.parametrize("method", ["sum", "prod", "max", "min"])
def test_zero_d_method_axis(method):
    assert float(getattr(tg.tensor(2.0), method)(axis=0)) == getattr(np.array(2.0), method)(0)


@pytest.mark.parametrize("fn, axis, err, msg", [
    (np.sum, 1, np.exceptions.AxisError, "axis 1 is out of bounds for a tensor of dimension 0"),
    (np.sum, (0,), np.exceptions.AxisError, "only as an int"),
    (np.max, -2, np.exceptions.AxisError, "out of bounds"),
    (np.mean, 0, np.exceptions.AxisError, "pass axis=None or axis=()"),
    (np.var, 0, np.exceptions.AxisError, "out of bounds"),
    (np.cumsum, 1, np.exceptions.AxisError, "out of bounds"),
    (np.cumsum, (0,), TypeError, "axis must be an int or None"),
    (np.sum, 0.5, TypeError, "axis must be an int"),
])
def test_zero_d_reduction_errors(fn, axis, err, msg):
    a = np.array(2.0)
    with pytest.raises(err):  # NumPy raises too
        fn(a, axis=axis)
    with pytest.raises(err, match=msg):
        fn(tg.tensor(a), axis=axis)
