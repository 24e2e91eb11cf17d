"""User-registered elementwise ops (``tg.elementwise``): values, gradients
against closed forms and finite differences, dtypes, the NumPy protocol and
every error.  The broad gradient check is the table row in test_gradients."""
import math

import numpy as np
import pytest

import tapegrad as tg

from oracle import check_vjp, close, leaf


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _gelu_tanh_derivative(x, y):
    u = 0.7978845608028654 * (x + 0.044715 * x ** 3)
    t = math.tanh(u)
    du = 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du


gelu = tg.elementwise(_gelu_tanh, _gelu_tanh_derivative, name="gelu")
cube = tg.elementwise(lambda x: x * x * x, lambda x: 3.0 * x * x, name="cube")


@tg.elementwise(derivative=lambda a, b, y: (b * y / a if a != 0.0 else 0.0,
                                            y * math.log(a)))
def pow_op(a, b):
    return a ** b


def test_unary_gradient_matches_closed_form():
    x = leaf(np.linspace(-3, 3, 101))
    y = gelu(x)
    assert y.grad_fn.name() == "gelu" + "Backward"
    close(y, [_gelu_tanh(v) for v in x.numpy()])
    y.backward(np.ones(101))
    close(x.grad, [_gelu_tanh_derivative(v, 0.0) for v in x.numpy()])


def test_derivative_of_x_only_and_scalars():
    x = leaf(2.0)
    cube(x).backward()
    close(x.grad, 12.0)
    assert cube(3.0) == 27.0  # plain numbers: a plain ufunc call


def test_binary_broadcasts_and_accumulates():
    rng = np.random.default_rng(0)
    a = leaf(rng.uniform(0.5, 2.0, (3, 1)))
    b = leaf(rng.uniform(-1.0, 1.0, (4,)))
    y = pow_op(a, b)
    close(y, a.numpy() ** b.numpy())
    v = rng.standard_normal((3, 4))
    y.backward(v)
    A, B = a.numpy(), b.numpy()
    close(a.grad, (v * B * A ** (B - 1)).sum(1, keepdims=True), rtol=1e-12)
    close(b.grad, (v * A ** B * np.log(A)).sum(0), rtol=1e-12)


def test_binary_with_constants_and_same_operand():
    x = leaf([1.5, 2.0])
    pow_op(x, 2.0).sum().backward()          # a Python number operand
    close(x.grad, 2 * x.numpy())
    x.grad = None
    pow_op(x, x).sum().backward()            # both partials into one adjoint
    X = x.numpy()
    close(x.grad, X ** X * (1 + np.log(X)), rtol=1e-12)
    x.grad = None
    pow_op(np.array([2.0, 3.0]), x).sum().backward()   # an ndarray operand
    close(x.grad, np.array([2.0, 3.0]) ** X * np.log([2.0, 3.0]), rtol=1e-12)


def test_in_a_larger_graph_against_finite_differences():
    rng = np.random.default_rng(1)

    def f(w, x):
        return (gelu(x @ w) * cube(np.tanh(x @ w))).sum(axis=1)

    check_vjp(f, [rng.standard_normal((3, 4)), rng.standard_normal((5, 3))], rng)


def test_float32_keeps_its_dtype():
    x = tg.tensor(np.array([0.5, -1.0], np.float32), requires_grad=True)
    y = gelu(x)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32
    close(x.grad, [_gelu_tanh_derivative(0.5, 0), _gelu_tanh_derivative(-1.0, 0)], rtol=1e-6)


def test_numpy_ufunc_on_a_tensor_records_the_op():
    x = leaf([1.0, 2.0])
    y = cube.ufunc(x)
    assert isinstance(y, tg.Tensor) and y.grad_fn.name() == "cubeBackward"
    y.sum().backward()
    close(x.grad, [3.0, 12.0])
    assert isinstance(cube.ufunc(np.ones(2)), np.ndarray)


def test_no_grad_and_tensors_without_grad_record_nothing():
    x = leaf([1.0, 2.0])
    with tg.no_grad():
        assert cube(x).grad_fn is None
    t = cube(tg.tensor([1.0, 2.0]))
    assert isinstance(t, tg.Tensor) and not t.requires_grad
    assert isinstance(cube(np.ones(3)), np.ndarray)


def test_next_functions_and_retain_graph():
    x = leaf([0.1, 0.2])
    u, w = x.unbind()
    y = pow_op(u + 1.0, w)
    assert y.grad_fn.next_functions[0][0].name() == "AddScalarBackward"
    assert y.grad_fn.next_functions[1][1] == 1   # w is unbind's output slot 1
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    close(x.grad, 2 * first)


def test_errors_name_the_problem_and_leave_the_tape_working():
    x = leaf([1.0, 2.0])
    y = x * 2.0  # a live graph that must survive the errors below
    assert callable(tg.elementwise())          # a decorator; the derivative is derived
    with pytest.raises(TypeError, match="pass derivative="):
        tg.elementwise(eval("lambda x: x"))      # no source to derive it from
    with pytest.raises(TypeError, match="must be a function"):
        tg.elementwise(lambda x: x, 3.0)
    with pytest.raises(TypeError, match="unary and binary"):
        tg.elementwise(lambda a, b, c: a, lambda a, b, c, y: (a, b, c))
    with pytest.raises(TypeError, match=r"must take \(x\) or \(x, y\)"):
        tg.elementwise(lambda x: x, lambda a, b, c: 1.0)
    with pytest.raises(TypeError, match=r"\(a, b, y\)"):
        tg.elementwise(lambda a, b: a, lambda a, b: (1.0, 1.0))
    with pytest.raises(TypeError, match="positional"):
        tg.elementwise(lambda *xs: xs[0], lambda x: 1.0)
    bad = tg.elementwise(lambda x: [x], lambda x: 1.0, name="bad")
    with pytest.raises(TypeError, match="Numba could not compile bad"):
        bad(x)
    with pytest.raises(TypeError, match=r"cube\(\) takes 1 argument, got 2"):
        cube(x, x)
    y.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_gradients_on_another_thread():
    from oracle import in_fresh_thread

    def run():
        x = leaf([0.3, -0.7])
        gelu(x).sum().backward()
        return x.grad.numpy()

    close(in_fresh_thread(run), [_gelu_tanh_derivative(0.3, 0), _gelu_tanh_derivative(-0.7, 0)])


# -- a derivative that divides by zero or raises: IEEE values or NaN, never 0 ----------------
def _over_x(x, y):
    return 1.0 / x


def _raises_above_one(x, y):
    if x > 1.0:
        raise ValueError("no derivative here")
    return 2.0


def _binary_over_a(a, b, y):
    return b / a, a / b


recip_d = tg.elementwise(lambda x: math.log(abs(x)) if x != 0.0 else -math.inf, _over_x,
                         name="logabs")
raising_d = tg.elementwise(lambda x: 2.0 * x, _raises_above_one, name="raising")
ratio_d = tg.elementwise(lambda a, b: a * b, _binary_over_a, name="ratio")


def test_derivative_dividing_by_zero_gives_ieee_inf_as_builtins_do(capfd):
    x = leaf([0.0, 2.0, -0.0])
    recip_d(x).sum().backward()
    b = leaf([0.0, 2.0, -0.0])
    with np.errstate(divide="ignore"):
        tg.log(b).sum().backward()  # the built-in op's convention at 0: inf
    close(x.grad, [np.inf, 0.5, -np.inf])
    close(b.grad, [np.inf, 0.5, -np.inf])
    a, c = leaf([0.0, 1.0]), leaf([0.0, 4.0])
    ratio_d(a, c).sum().backward()
    assert np.isnan(a.grad.numpy()[0]) and np.isnan(c.grad.numpy()[0])  # 0 / 0
    close(a.grad.numpy()[1:], [4.0])
    close(c.grad.numpy()[1:], [0.25])
    assert "Exception ignored" not in capfd.readouterr().err


def test_derivative_that_raises_gives_nan_and_anomaly_mode_names_the_op(capfd):
    x = leaf([0.5, 2.0])
    raising_d(x).sum().backward()
    g = x.grad.numpy()
    assert g[0] == 2.0 and np.isnan(g[1])  # never the 0.0 of an ignored exception
    x = leaf([0.5, 2.0])
    with pytest.raises(RuntimeError, match="raisingBackward.*nan"):
        with tg.detect_anomaly():
            raising_d(x).sum().backward()
    # forward mode calls the same compiled derivative
    _, t = tg.jvp(lambda x: raising_d(x), (np.array([0.5, 2.0]),), (np.ones(2),))
    assert t[0] == 2.0 and np.isnan(t[1])
    assert "Exception ignored" not in capfd.readouterr().err


def test_second_derivative_that_raises_gives_nan():
    def d2(x, y):
        if x > 1.0:
            raise ValueError("no second derivative here")
        return 6.0 * x

    op = tg.elementwise(lambda x: x * x * x, lambda x: 3.0 * x * x, second_derivative=d2,
                        name="cube2")
    _, hv = tg.hvp(lambda x: op(x).sum(), (np.array([0.5, 2.0]),), (np.ones(2),))
    assert hv[0][0] == pytest.approx(3.0) and np.isnan(hv[0][1])
