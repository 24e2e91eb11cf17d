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


# -- every order: create_graph, nested transforms, traces and tape files ----------------------
# Ops defined at run time, each row checked against float64 central differences of the
# order below it (each order's own value checked the same way first).  The unary rows:
# derivatives all given / given to order 2 / all derived from the forward's source.
def _sp_forward(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _sp_d1(x, y):
    return 1.0 / (1.0 + math.exp(-x))


def _sp_d2(x, y):
    s = 1.0 / (1.0 + math.exp(-x))
    return s * (1.0 - s)


def _wave(x):
    return math.sin(x) * math.exp(0.3 * x) + 0.1 * x ** 3


def _mix(a, b):
    return math.sin(a) * math.exp(0.5 * b) + a * a * b


def _mix_d(a, b, y):
    return (math.cos(a) * math.exp(0.5 * b) + 2.0 * a * b,
            0.5 * math.sin(a) * math.exp(0.5 * b) + a * a)


_X = np.array([-1.3, -0.2, 0.0, 0.7, 1.9])
_A, _B = np.array([-0.8, 0.4, 1.1]), np.array([0.3, -0.6, 0.9])


def _unary_ops():
    return {"given": tg.elementwise(_sp_forward, _sp_d1, second_derivative=_sp_d2,
                                    name="softplus_o"),
            "derived": tg.elementwise(_wave, name="wave_o")}


def _orders(op, x, k):
    """d^j/dx^j sum(op(x)) for j = 1..k by create_graph=True at every level."""
    x = leaf(x)
    out, s = [], op(x).sum()
    for _ in range(k):
        (g,) = tg.autograd.grad(s, x, create_graph=True)
        out.append(g.numpy().copy())
        s = g.sum()
    return out


def _cd(fn, x, h=1e-5):
    return (fn(x + h) - fn(x - h)) / (2 * h)


@pytest.mark.parametrize("kind", ["given", "derived"])
def test_create_graph_to_the_fourth_order_against_central_differences(kind):
    op = _unary_ops()[kind]
    value = lambda v: op(v)     # noqa: E731  a plain ufunc call on arrays
    got = _orders(op, _X, 4)
    close(got[0], _cd(value, _X), rtol=1e-8, atol=1e-9)
    for j in range(1, 4):
        close(got[j], _cd(lambda v: _orders(op, v, j)[j - 1], _X), rtol=1e-6, atol=1e-7)
    # the recorded VJP names its derivative op, itself a user op
    x = leaf(_X)
    (g,) = tg.autograd.grad(op(x).sum(), x, create_graph=True)
    assert any(op.name + "_dx" in str(f) for f in _walk_names(g))


def _walk_names(t):
    seen, todo = [], [t.grad_fn]
    while todo:
        f = todo.pop()
        if f is None:
            continue
        seen.append(f.name())
        todo += [n for n, _ in f.next_functions]
    return seen


def test_binary_op_mixed_partials_to_third_order():
    op = tg.elementwise(_mix, _mix_d, name="mix_o")

    def third(av, bv, order):            # d/d(order[2]) d/d(order[1]) d/d(order[0]) sum op
        a, b = leaf(av), leaf(bv)
        s, gs = op(a, b).sum(), []
        for w in order:
            (g,) = tg.autograd.grad(s, (a, b)[w], create_graph=True)
            gs.append(g.numpy().copy())
            s = g.sum()
        return gs

    for order in [(0, 0, 0), (0, 1, 0), (1, 1, 1)]:
        gs = third(_A, _B, order)
        for j, w in enumerate(order):
            def lower(v, j=j, w=w):
                args = [_A, _B]
                args[w] = v
                return op(*args) if j == 0 else third(*args, order[:j])[j - 1]
            close(gs[j], _cd(lower, (_A, _B)[w]), rtol=1e-6, atol=1e-7)
    # tg.hessian with derivative= only: the second derivatives derived from _mix_d
    H = tg.hessian(lambda v: op(v[:3], v[3:]).sum())(np.r_[_A, _B])
    gfun = tg.grad(lambda v: op(v[:3], v[3:]).sum())
    cd = np.array([_cd(lambda t: gfun(np.r_[_A, _B] + t * e), 0.0) for e in np.eye(6)])
    close(H, cd, rtol=1e-6, atol=1e-7)
    # broadcasting: a (3,) against b (2, 1); the adjoints sum over the broadcast
    b0 = _B[:2].reshape(2, 1)
    a, b = leaf(_A), leaf(b0)
    (ga,) = tg.autograd.grad(op(a, b).sum(), a, create_graph=True)
    (gab,) = tg.autograd.grad(ga.sum(), b)
    da_sum = lambda bv: tg.grad(lambda aa: op(aa, bv).sum())(_A).sum()   # noqa: E731
    cd = [(da_sum(b0 + h * e) - da_sum(b0 - h * e)) / (2 * h)
          for h in (1e-5,) for e in np.eye(2)[:, :, None]]
    close(gab, np.reshape(cd, (2, 1)), rtol=1e-6, atol=1e-7)


def test_jvp_hessian_hvp_and_nested_grad_through_user_ops():
    ops = _unary_ops()
    w = np.arange(1.0, 6.0)
    for op in ops.values():
        f = lambda v: (op(v) * w).sum()   # noqa: E731
        close(tg.grad(f)(_X), w * _cd(lambda v: op(v), _X), rtol=1e-8, atol=1e-9)
        _, t = tg.jvp(lambda v: op(v), (_X,), (np.ones(5),))
        close(t, _cd(lambda v: op(v), _X), rtol=1e-8, atol=1e-9)
        d2 = _cd(lambda v: tg.grad(lambda u: op(u).sum())(v), _X)
        close(tg.hessian(f)(_X), np.diag(w * d2), rtol=1e-6, atol=1e-7)
        _, hv = tg.hvp(f, (_X,), (np.ones(5),))
        close(hv[0], w * d2, rtol=1e-6, atol=1e-7)
        gg = tg.grad(lambda v: tg.grad(lambda u: op(u).sum())(v).sum())
        close(gg(_X), d2, rtol=1e-6, atol=1e-7)
        # three deep, as the built-ins: against differences of the second derivative
        g3 = tg.grad(tg.grad(tg.grad(lambda v: op(v))))(0.3)
        d2f = tg.grad(tg.grad(lambda v: op(v)))
        close(g3, (d2f(0.3 + 1e-4) - d2f(0.3 - 1e-4)) / 2e-4, rtol=1e-6, atol=1e-7)


def test_a_trace_through_a_user_op_replays_and_saves(tmp_path):
    op = tg.elementwise(_mix, _mix_d, name="mix_saved")
    ft = tg.trace(lambda a, b: (op(a, b) * a).sum(), _A, _B)
    a2, b2 = _A + 0.25, _B - 0.5
    close(ft(a2, b2), (_mix_np(a2, b2) * a2).sum(), rtol=1e-13)
    ga, gb = tg.grad(ft, argnums=(0, 1))(a2, b2)
    close(ga, _cd(lambda v: _mix_np(v, b2) * v, a2), rtol=1e-7, atol=1e-8)
    close(gb, _cd(lambda v: _mix_np(a2, v) * a2, b2), rtol=1e-7, atol=1e-8)
    ft.save(tmp_path / "m.npz")
    with pytest.raises(ValueError, match="mix_saved"):
        tg.load(tmp_path / "m.npz")
    back = tg.load(tmp_path / "m.npz", ops=[op])
    close(back(a2, b2), ft(a2, b2), rtol=0, atol=0)
    gl = tg.grad(back, argnums=(0, 1))(a2, b2)
    close(gl[0], ga, rtol=0, atol=0)
    close(gl[1], gb, rtol=0, atol=0)


def _mix_np(a, b):
    return np.sin(a) * np.exp(0.5 * b) + a * a * b


def _tanh_like(x):
    return math.tanh(x)


def _tanh_like_d(x, y):          # reads y: its derivative goes through the forward
    return 1.0 - y * y


def test_an_order_that_cannot_be_derived_names_the_op_the_order_and_the_construct():
    op = tg.elementwise(_tanh_like, _tanh_like_d, name="tanh_o")
    got = _orders(op, _X, 3)     # orders 1..3 are derived from _tanh_like_d's source
    t = np.tanh(_X)
    close(got[0], 1 - t * t, rtol=1e-13)
    close(got[1], -2 * t * (1 - t * t), rtol=1e-12, atol=1e-15)
    close(got[2], -2 * (1 - t * t) ** 2 + 4 * t * t * (1 - t * t), rtol=1e-11, atol=1e-14)
    # the fourth is derived from derived code that calls the forward's tangent function
    x = leaf(_X)
    s = op(x).sum()
    for _ in range(3):
        (s,) = tg.autograd.grad(s, x, create_graph=True)
        s = s.sum()
    with pytest.raises(NotImplementedError,
                       match=r"(?s)fourth derivative of the op tanh_o cannot be derived.*"
                             r"tuple.*derivative="):
        (g4,) = tg.autograd.grad(s, x, create_graph=True)
        tg.autograd.grad(g4.sum(), x)
