"""Writes into values a graph saved, writes through views, nested transforms
and threads sharing a leaf: each gives the right number (checked against
central differences or plain NumPy) or a clear error, for every size."""
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tapegrad as tg
from oracle import close, in_fresh_thread, leaf


def fd(f, x, eps=1e-6):
    """Central differences of scalar f at x (float64)."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# -- nested transforms -------------------------------------------------------------
@pytest.mark.parametrize("f, x, expected", [
    (lambda x: x ** 3, 2.0, 12.0),
    (np.sin, 1.0, -np.sin(1.0)),
    (lambda x: np.exp(x) * x, 0.5, np.exp(0.5) * 2.5),
])
def test_grad_of_grad_is_the_second_derivative(f, x, expected):
    assert tg.grad(tg.grad(f))(x) == pytest.approx(expected, rel=1e-12)


def test_jacobian_of_grad_is_the_hessian():
    f = lambda x: (x ** 3).sum() * x[0] + np.sin(x).prod()  # noqa: E731
    x = np.array([0.7, 1.3, -0.4])
    H = tg.jacobian(tg.grad(f))(x)
    Hfd = np.stack([fd(lambda z: tg.grad(f)(z)[i], x) for i in range(3)])
    close(H, Hfd, rtol=1e-6, atol=1e-7)
    close(H, tg.hessian(f)(x), rtol=1e-10)


def test_grad_of_grad_with_several_arguments():
    f = lambda x, w: (np.tanh(x * w) * w).sum()  # noqa: E731
    x, w = np.array([0.3, -0.2]), np.array([1.1, 0.6])
    # d/dw of sum(df/dx): mixed second derivatives, through a closure-free nest
    outer = tg.grad(lambda w_: tg.grad(f, argnums=0)(x, w_).sum())(w)
    close(outer, fd(lambda w_: tg.grad(f)(x, w_).sum(), w), rtol=1e-6, atol=1e-8)


def test_gradient_penalty_through_backward():
    x = leaf([0.5, 1.5])
    g = tg.grad(lambda z: (z ** 3).sum())(x)      # a tensor carrying d/dx on
    assert isinstance(g, tg.Tensor) and g.requires_grad
    (g * g).sum().backward()
    close(x.grad, 2 * (3 * x.numpy() ** 2) * 6 * x.numpy())


def test_nesting_goes_to_any_order():
    assert tg.grad(tg.grad(tg.grad(lambda x: x ** 3)))(2.0) == 6.0
    assert tg.grad(tg.grad(tg.grad(tg.grad(lambda x: x ** 5))))(2.0) == 240.0
    # d3/dx3 of sin(x) exp(x) = 2 exp(x) (cos x - sin x)
    g3 = tg.grad(tg.grad(tg.grad(lambda x: np.sin(x) * np.exp(x))))(0.7)
    assert abs(g3 - 2 * np.exp(0.7) * (np.cos(0.7) - np.sin(0.7))) < 1e-12


def test_backward_inside_a_differentiated_function_raises():
    def f(x):
        y = (x * x).sum()
        y.backward()
        return x.grad.sum()
    with pytest.raises(NotImplementedError, match="backward pass inside a function"):
        tg.grad(f)(np.ones(2))


def test_inner_grad_over_a_closure_of_the_outer_input_raises():
    inner = lambda w: tg.grad(lambda x: (x * w * w).sum())(np.ones(2)).sum()  # noqa: E731
    with pytest.raises(NotImplementedError, match="backward pass inside a function"):
        tg.grad(inner)(np.array([1.0, 2.0]))


def test_autograd_grad_inside_a_transform_raises():
    def f(x):
        (g,) = tg.autograd.grad((x ** 3).sum(), x)
        return g.sum()
    with pytest.raises(NotImplementedError, match="backward pass inside a function"):
        tg.grad(f)(np.array([1.0, 2.0]))


@pytest.mark.parametrize("inner", [
    lambda f: (lambda x: tg.vjp(f, x)[1](np.ones(2))[0].sum()),
    lambda f: (lambda x: tg.jacobian(f)(x).sum()),
    lambda f: (lambda x: tg.jvp(f, (x,), (np.ones(2),))[1].sum()),
])
def test_other_nested_transforms_raise(inner):
    f = lambda x: x ** 3  # noqa: E731
    with pytest.raises(NotImplementedError, match="requires grad"):
        tg.grad(inner(f))(np.array([1.0, 2.0]))


def test_transforms_on_constants_inside_a_transform_still_work():
    # an inner transform on values that do not depend on the outer input
    c = np.array([1.0, 2.0])
    f = lambda x: (x * tg.grad(lambda z: (z ** 2).sum())(c)).sum()  # noqa: E731
    close(tg.grad(f)(np.zeros(2)), 2 * c)


@given(st.floats(-2, 2), st.sampled_from(["sin", "exp", "cube", "tanh_sq"]))
def test_nested_grad_fuzz(x, name):
    f = {"sin": np.sin, "exp": np.exp, "cube": lambda z: z ** 3,
         "tanh_sq": lambda z: np.tanh(z) ** 2}[name]
    d1 = tg.grad(f)
    got = tg.grad(d1)(x)
    expected = (d1(x + 1e-5) - d1(x - 1e-5)) / 2e-5
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)


# -- writes into saved values: one rule for every size --------------------------------
@pytest.mark.parametrize("n", [1, 3, 16, 17, 40])
@pytest.mark.parametrize("how", ["data", "detach", "no_grad"])
def test_write_reaches_leaf_and_old_graph_raises(n, how):
    pv = np.arange(1.0, n + 1)
    p = leaf(pv)
    old = (p * p).sum()                      # a live graph that saved p
    if how == "data":
        p.data[0] = 100.0
    elif how == "detach":
        p.detach()[0] = 100.0
    else:
        with tg.no_grad():
            p[0] = 100.0
    new_v = pv.copy()
    new_v[0] = 100.0
    close(p, new_v)
    new = (p * p).sum()
    assert new.item() == pytest.approx((new_v ** 2).sum())
    new.backward()
    close(p.grad, 2 * new_v)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        old.backward()
    close(p.grad, 2 * new_v)                 # the failed backward changed nothing


@pytest.mark.parametrize("n", [1, 3, 16, 17, 40])
def test_numpy_write_into_a_held_value_raises_and_later_works(n):
    p = leaf(np.arange(1.0, n + 1))
    old = (p * p).sum()
    with pytest.raises(ValueError, match="read-only"):
        p.numpy()[0] = 100.0
    old.backward()                            # the graph is freed: the array is writable
    close(p.grad, 2 * np.arange(1.0, n + 1))
    p.numpy()[0] = 100.0
    assert p.numpy()[0] == 100.0


def test_zero_d_numpy_write_reaches_the_tensor():
    s = tg.tensor(2.0)
    s.numpy()[...] = 0
    assert s.item() == 0.0
    q = leaf(3.0)
    q.numpy()[...] = 5.0
    y = q * q
    y.backward()
    assert q.grad.item() == 10.0


def test_data_assignment_and_sgd_step():
    p = leaf([1.0, 2.0, 3.0])
    (p * p).sum().backward()
    p.data -= 0.1 * p.grad                    # PyTorch's habit: updates p in place
    close(p, [0.8, 1.6, 2.4])
    p.data = tg.tensor([5.0, 6.0])            # any shape, as PyTorch
    assert p.shape == (2,) and p.requires_grad
    p.grad = None
    (p * p).sum().backward()
    close(p.grad, [10.0, 12.0])
    with pytest.raises(TypeError, match="floating"):
        p.data = np.array([1, 2])
    close(p, [5.0, 6.0])                      # the refused assignment changed nothing


def test_write_into_value_not_saved_backpropagates():
    p = leaf([1.0, 2.0])
    y = (p + 1.0).sum()                       # add saves nothing of p
    p.data[0] = 9.0
    y.backward()
    close(p.grad, [1.0, 1.0])


def test_users_buffer_is_writable_after_each_step():
    buf = np.zeros((40, 3))
    w = leaf(np.ones(3))
    for step in range(3):
        buf[:] = step + 1.0                   # refill in place, as a data loader does
        loss = ((buf @ w) ** 2).sum()
        loss.backward()
    close(w.grad, sum(2 * 40 * 3 * k * k * np.ones(3) for k in (1.0, 2.0, 3.0)))


# -- writes through views ---------------------------------------------------------------
def _stencil(u, m):
    v = u * 1.0
    inner = v[1:-1]
    inner[:] = m.sin(inner) * 2 + v[:-2] * 0.5
    ends = v[::len(v) - 1]
    ends[:] = 0
    return (v * v).sum() + (inner * inner).sum()


@pytest.mark.parametrize("n", [4, 6, 30])
def test_writes_through_basic_slices_match_numpy_and_fd(n):
    u0 = np.linspace(0.3, 2.0, n)
    assert _stencil(tg.tensor(u0), np).item() == pytest.approx(_stencil(u0.copy(), np))
    u = leaf(u0)
    y = _stencil(u, np)
    assert y.item() == pytest.approx(_stencil(u0.copy(), np))
    y.backward()
    close(u.grad, fd(lambda z: _stencil(z.copy(), np), u0), rtol=1e-6, atol=1e-8)


def test_sibling_views_see_a_write():
    x = leaf(np.arange(5.0))
    v = x * 1.0
    a, b = v[0:3], v[2:5]
    a *= 10.0
    close(b, [20.0, 3.0, 4.0])
    b.sum().backward()
    close(x.grad, [0.0, 0.0, 10.0, 1.0, 1.0])


def test_write_of_a_grad_value_into_a_plain_view():
    w = leaf([1.0, 2.0])
    z = tg.tensor(np.zeros(4))
    zz = z[1:3]
    zz[:] = w * 3
    close(z, [0.0, 3.0, 6.0, 0.0])
    z.sum().backward()
    close(w.grad, [3.0, 3.0])


def test_view_of_a_leaf_refuses_in_place_write_and_changes_nothing():
    p = leaf([1.0, 2.0, 3.0])
    view = p[0:2]
    with pytest.raises(RuntimeError, match="view of a leaf"):
        view[:] = 5.0
    close(p, [1.0, 2.0, 3.0])
    close(view, [1.0, 2.0])


@given(st.integers(3, 12), st.integers(0, 2), st.integers(1, 3), st.floats(-2, 2))
def test_view_write_fuzz(n, start, step, c):
    """v[start::step] op= c and v[start::step][:] = f(...) against NumPy and FD."""
    u0 = np.linspace(-1.0, 1.0, n)

    def f(u, m):
        v = u * 1.0
        s = v[start::step]
        s *= c
        t = v[start::step][:]
        t[:] = m.tanh(t) + 1.0
        return (v * v * (1.0 + m.arange(n))).sum()

    assert f(tg.tensor(u0), np).item() == pytest.approx(f(u0.copy(), np), rel=1e-12)
    u = leaf(u0)
    f(u, np).backward()
    close(u.grad, fd(lambda z: f(z.copy(), np), u0), rtol=1e-5, atol=1e-7)


# -- threads sharing a leaf -------------------------------------------------------------
def test_threads_accumulating_into_one_leaf_lose_nothing():
    x = leaf(np.zeros(200_000))
    n_threads, reps = 4, 15

    def work():
        mine = tg.tensor(x.detach().numpy().copy(), requires_grad=True)  # noqa: F841
        for _ in range(reps):
            x.sum().backward()

    ts = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    close(x.grad, np.full(x.shape, float(n_threads * reps)))


# -- writes the read-only flag cannot stop: checked in anomaly mode ----------------------
def test_anomaly_mode_sees_a_write_through_an_earlier_view():
    x = leaf(np.linspace(0.0, 1.0, 20))
    v = x.numpy().reshape(4, 5)               # taken before the graph: stays writable
    with tg.detect_anomaly():
        y = tg.sin(x).sum()
        v[:] = 5.0
        with pytest.raises(RuntimeError, match="leaf tensor's value saved for the gradient"):
            y.backward()
    assert x.grad is None


def test_anomaly_mode_sees_a_write_into_a_constant_after_flags_reset():
    c = np.arange(20.0)
    w = leaf(np.ones(20))
    with tg.detect_anomaly():
        loss = (w * c).sum()
        c.flags.writeable = True
        c[:] = 100.0
        with pytest.raises(RuntimeError, match="constant operand saved for the gradient"):
            loss.backward()
        loss2 = (w * c).sum()                 # recorded after the write: right
        loss2.backward()
    close(w.grad, np.full(20, 100.0))


# -- create_graph=True: gradients that differentiate again ------------------------------
def _penalty(xv, Wv):
    g = tg.grad(lambda z: np.tanh(Wv @ z).sum() + (z ** 3).sum())(xv)
    return (g * g).sum()


def test_gradient_penalty_with_create_graph_matches_fd():
    xv, Wv = np.array([0.5, 1.5]), np.array([[1.0, 2.0], [0.5, -1.0]])
    x, W = leaf(xv), leaf(Wv)
    y = np.tanh(W @ x).sum() + (x ** 3).sum()
    (g,) = tg.autograd.grad(y, x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None  # a tensor of the graph
    close(g, tg.grad(lambda z: np.tanh(Wv @ z).sum() + (z ** 3).sum())(xv))
    (g * g).sum().backward()
    close(x.grad, fd(lambda z: _penalty(z, Wv), xv), rtol=1e-6, atol=1e-8)
    close(W.grad, fd(lambda w: _penalty(xv, w), Wv), rtol=1e-6, atol=1e-8)


def test_hessian_vector_product_by_hand():
    xv, v = np.array([0.3, -0.7, 1.1]), np.array([1.0, 2.0, -1.0])
    f = lambda z: (np.sin(z) * z.prod()).sum()  # noqa: E731
    x = leaf(xv)
    (g,) = tg.autograd.grad(f(x), x, create_graph=True)
    (hv,) = tg.autograd.grad((g * tg.tensor(v)).sum(), x)
    close(hv, tg.hessian(f)(xv) @ v, rtol=1e-10)


def test_backward_create_graph_fills_differentiable_grads():
    x = leaf([1.0, 2.0])
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    close(x.grad, [3.0, 12.0])
    (gg,) = tg.autograd.grad(x.grad.sum(), x)
    close(gg, [6.0, 12.0])
    # x.grad holds the graph that reaches x: a cycle through the tape's leaves, as
    # PyTorch's through its AccumulateGrad node; setting .grad to None breaks it
    x.grad = None


def test_create_graph_with_grad_outputs_and_several_outputs():
    xv = np.array([0.4, 0.9])
    x = leaf(xv)
    y1, y2 = x ** 2, np.exp(x)
    v1, v2 = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    (g,) = tg.autograd.grad([y1, y2], [x], [v1, v2], create_graph=True)
    close(g, v1 * 2 * xv + v2 * np.exp(xv))
    g.sum().backward()
    close(x.grad, v1 * 2 + v2 * np.exp(xv))


@pytest.mark.parametrize("f", [
    lambda z: (np.log1p(z * z) * np.cos(z)).sum(),
    lambda z: np.sqrt((z ** 2).sum() + 1.0) * z[0],
    lambda z: (np.maximum(z, 0.2) ** 2).mean() + np.logaddexp(z, 0.5).sum(),
    lambda z: (z.reshape(2, 2) @ z.reshape(2, 2)).trace() + np.tanh(z).prod(),
])
def test_create_graph_second_derivatives_match_hessian(f):
    xv = np.array([0.3, -0.6, 0.9, 1.4])
    x = leaf(xv)
    (g,) = tg.autograd.grad(f(x), x, create_graph=True)
    rows = [tg.autograd.grad(g[i], x, retain_graph=True)[0].numpy() for i in range(4)]
    Hfd = np.stack([fd(lambda z: tg.grad(f)(z)[i], xv) for i in range(4)])
    close(np.stack(rows), Hfd, rtol=1e-5, atol=1e-7)


def test_create_graph_third_order_and_non_leaf_inputs():
    x = leaf([1.0, 2.0])
    (g,) = tg.autograd.grad((x ** 4).sum(), x, create_graph=True)
    (g2,) = tg.autograd.grad(g.sum(), x, create_graph=True)
    g2.sum().backward()
    close(x.grad, [24.0, 48.0])                       # d3/dx3 x^4 = 24 x
    h = x * 2.0
    (gh,) = tg.autograd.grad((h ** 3).sum(), h, create_graph=True)
    close(gh, 3 * np.array([2.0, 4.0]) ** 2)
    (gx,) = tg.autograd.grad(gh.sum(), x)             # d/dx 3 (2x)^2 = 24 x
    close(gx, [24.0, 48.0])


_CUBE = []


def _opaque_d1(x, y):
    return 3.0 * x.real * x    # an attribute: Numba compiles it, tapegrad cannot derive it


def _opaque_d2(x, y):
    return 6.0 * x.real


def _cube():
    """x^3 as a tg.elementwise op (made once, on first use) with first and
    second derivatives given and written so that no further order can be
    derived: its derivative op has no differentiable backward formula."""
    if not _CUBE:
        _CUBE.append(tg.elementwise(lambda x: x * x * x, derivative=_opaque_d1,
                                    second_derivative=_opaque_d2, name="cube"))
    return _CUBE[0]


def test_create_graph_through_an_op_without_a_further_formula_stops_there():
    x = leaf([1.5, 2.5])
    (g,) = tg.autograd.grad(_cube()(x).sum(), x, create_graph=True)
    (g2,) = tg.autograd.grad(g.sum(), x, create_graph=True)   # second order: one node
    close(g2, 6 * x.numpy())
    assert g2.grad_fn.name() == "GradBackward"
    with pytest.raises(NotImplementedError, match="third derivative of the op cube cannot "
                                                  "be derived.*x.real"):
        tg.autograd.grad(g2.sum(), x)
    h = x * 2.0
    (gh,) = tg.autograd.grad(_cube()(h).sum(), h, create_graph=True)
    with pytest.raises(NotImplementedError, match="input 0 .* not a leaf.*cube"):
        tg.autograd.grad(gh.sum(), h, create_graph=True)


def test_a_view_taken_before_an_unrecorded_write_into_its_base_reads_the_new_value():
    # the SGD pattern: a view taken once, the leaf updated under no_grad each step
    def run():
        x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        v = x[0:2]
        with tg.no_grad():
            x[0] = 5.0
        assert v.numpy().tolist() == [5.0, 2.0]
        tg.square(v).sum().backward()
        assert x.grad.numpy().tolist() == [10.0, 4.0, 0.0]     # 2 v, at the new value
        for _ in range(3):   # each step's write takes v again: a fresh graph
            with tg.no_grad():
                x -= 0.1 * x.grad
            x.grad = None
            (v * v).sum().backward()
        np.testing.assert_allclose(x.numpy(), [5.0 * 0.8 ** 3, 2.0 * 0.8 ** 3, 3.0])
        np.testing.assert_allclose(x.grad.numpy(), [10.0 * 0.8 ** 3, 4.0 * 0.8 ** 3, 0.0])
    in_fresh_thread(run)


def test_a_graph_that_saved_a_live_view_raises_after_a_write_into_its_base():
    def run():
        for n in (3, 40):   # a view copied into the tape, and one kept by reference
            x = tg.tensor(np.linspace(0.1, 1.0, n), requires_grad=True)
            v = x[0:n - 1]
            s = tg.sin(v)
            with tg.no_grad():
                x[0] = 9.0
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                s.sum().backward()
            assert x.grad is None
    in_fresh_thread(run)


def test_a_recorded_write_into_a_tensor_reaches_its_views():
    def run():
        x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = x * 2.0
        v = h[0:2]
        w = v[0:1]
        h *= 3.0
        assert v.numpy().tolist() == [6.0, 12.0] and w.numpy().tolist() == [6.0]
        (v * v).sum().backward()
        assert x.grad.numpy().tolist() == [72.0, 144.0, 0.0]   # d/dx (6x)^2 = 72x
    in_fresh_thread(run)


def test_an_unrecorded_write_into_a_tensor_made_by_an_op_keeps_later_graphs_working():
    def run():
        x0 = np.array([0.5, 1.7, -1.7])
        x = tg.tensor(x0, requires_grad=True)
        h = x * 2.0
        before = tg.sin(h)                      # saved h's old value
        with tg.no_grad():
            h *= 3.0
        tg.cos(h).sum().backward(retain_graph=True)   # through h's graph, at its new value
        np.testing.assert_allclose(x.grad.numpy(), -2.0 * np.sin(6.0 * x0), rtol=1e-12)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            before.sum().backward()
    in_fresh_thread(run)


def test_create_graph_with_allow_unused_and_no_input_used():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    w = tg.tensor([3.0], requires_grad=True)
    assert tg.autograd.grad((w * w).sum(), [x], create_graph=True, allow_unused=True) == (None,)
    gx, gw = tg.autograd.grad((w * w).sum(), [x, w], create_graph=True, allow_unused=True)
    assert gx is None and gw.numpy().tolist() == [6.0]


def test_inputs_reach_a_leaf_written_in_place_after_its_use():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    x.data -= 0.5
    z = (y + x * x).sum()                   # uses x before and after the write
    (g,) = tg.autograd.grad(z, [x], retain_graph=True)
    assert g.numpy().tolist() == [4.0, 6.0]  # 3 + 2 x at the new value
    z.backward(inputs=[x])
    assert x.grad.numpy().tolist() == [4.0, 6.0]


# -- create_graph: liveness, writes into the first graph, inputs= --------------------
def test_a_create_graph_gradient_lets_the_tape_reset_once_dropped():
    """The first graph lives as long as a tensor that reaches the gradient's
    record (as in PyTorch), not for ever: a loop of gradient penalties runs in
    bounded memory and the tape resets once every tensor is gone."""
    def run():
        import gc

        def step():
            x = tg.tensor([0.3, -0.7, 1.1], requires_grad=True)
            (g,) = tg.autograd.grad((tg.sin(x) * x).sum(), x, create_graph=True)
            (h,) = tg.autograd.grad((g * 2.0).sum(), x)
            return h.numpy()
        for _ in range(200):
            h = step()
        x0 = np.array([0.3, -0.7, 1.1])
        np.testing.assert_allclose(h, 2.0 * (2.0 * np.cos(x0) - x0 * np.sin(x0)), rtol=1e-12)
        gc.collect()
        x = tg.tensor([1.0], requires_grad=True)
        assert (x * 2.0)._rec <= 1               # the tape reset: records start again
    in_fresh_thread(run)


def test_a_create_graph_gradient_keeps_the_first_graph_while_it_lives():
    """Nothing but g holds the first graph; its second derivative is still right
    after other graphs were recorded and dropped (and after compaction)."""
    def run():
        x = tg.tensor([0.3, -0.7, 1.1], requires_grad=True)
        (g,) = tg.autograd.grad(tg.sin(x).sum() * 1.0, x, create_graph=True)
        for _ in range(3000):                    # enough records for a compaction
            tg.exp(x * 2.0)
        (g * g).sum().backward()
        x0 = x.detach().numpy()
        np.testing.assert_allclose(x.grad.numpy(), -2.0 * np.cos(x0) * np.sin(x0),
                                   rtol=1e-12)
    in_fresh_thread(run)


@pytest.mark.parametrize("n", [3, 24])
def test_the_second_backward_sees_writes_into_the_first_graph(n):
    """h saved by sin in the first graph, written under no_grad after the
    create_graph gradient: the second backward raises PyTorch's error (it
    neither uses the old value nor, for a value kept by reference, the new
    one), and no .grad changes."""
    def run():
        x = tg.tensor(np.linspace(0.1, 1.0, n), requires_grad=True)
        h = x * 1.0
        (g,) = tg.autograd.grad(tg.sin(h).sum(), [x], create_graph=True)
        with tg.no_grad():
            h += 3.0
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            (g * g).sum().backward()
        assert x.grad is None
    in_fresh_thread(run)


def test_the_second_backward_reads_a_written_leaf_only_where_needed():
    """A leaf of the first graph written under no_grad: the second pass needs
    h's value, not x's, so it runs (PyTorch's value: -2 cos h sin h with h at
    the old value)."""
    def run():
        x0 = np.array([0.1, 0.5, 1.0])
        x = tg.tensor(x0, requires_grad=True)
        h = x * 1.0
        (g,) = tg.autograd.grad(tg.sin(h).sum(), [x], create_graph=True)
        with tg.no_grad():
            x += 3.0
        (g * g).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), -np.sin(2.0 * x0), rtol=1e-12)
    in_fresh_thread(run)


def test_backward_inputs_ignore_stale_values_off_their_paths():
    """PyTorch runs only the nodes on paths to inputs=: h * h reads h, which
    was written, but no path from it reaches x."""
    def run():
        x = tg.tensor([1.0, 2.0], requires_grad=True)
        w = tg.tensor([3.0, 4.0], requires_grad=True)
        h = w * 1.0
        y = x + h * h
        with tg.no_grad():
            h += 1.0
        (gx,) = tg.autograd.grad(y.sum(), [x], retain_graph=True)
        assert gx.numpy().tolist() == [1.0, 1.0]
        y.sum().backward(inputs=[x], retain_graph=True)
        assert x.grad.numpy().tolist() == [1.0, 1.0] and w.grad is None
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward(inputs=[w])         # on w's path: the error, nothing changed
        assert x.grad.numpy().tolist() == [1.0, 1.0] and w.grad is None
    in_fresh_thread(run)


@pytest.mark.parametrize("n", [2, 24])
@pytest.mark.parametrize("op", ["mul", "div"])
def test_a_product_with_a_constant_array_does_not_need_the_tensor(op, n):
    """x * k and x / k (k an ndarray): the gradient in x reads only k, so a
    write into x afterwards is no error and the gradient is k (or 1 / k)."""
    def run():
        k = np.linspace(2.0, 3.0, n)
        x = tg.tensor(np.linspace(0.5, 2.0, n), requires_grad=True)
        y = x * k if op == "mul" else x / k
        with tg.no_grad():
            x += 1.0
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), k if op == "mul" else 1.0 / k, rtol=1e-15)
        z = tg.tensor(np.linspace(0.5, 2.0, n), requires_grad=True)
        y = k / z                               # reads z: the error stays
        with tg.no_grad():
            z += 1.0
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    in_fresh_thread(run)


def test_retains_grad_stays_true_after_backward_frees_the_graph():
    """PyTorch keeps y.retains_grad True after the backward that freed y's graph
    (and y.grad holds the gradient)."""
    def run():
        x = tg.tensor([1.0, 2.0], requires_grad=True)
        y = x * x
        y.retain_grad()
        (3.0 * y).sum().backward()
        assert y.retains_grad and not x.retains_grad
        assert y.grad.numpy().tolist() == [3.0, 3.0]
        z = x * 2.0
        assert not z.retains_grad
    in_fresh_thread(run)


@pytest.mark.parametrize("n", [4, 24])
@pytest.mark.parametrize("how", ["slice", "reshape", "transpose", "unbind"])
def test_a_graph_that_saved_a_temporary_view_raises_after_a_write_into_its_base(how, n):
    """sin(h[1:]), sin(h.reshape(...)), ...: the view is gone, but its value is
    h's memory (PyTorch: the same version counter), so an unrecorded write into
    h raises at backward -- for small views copied into the tape (which would
    give the old value) and large ones kept by reference (the new one)."""
    def run():
        x = tg.tensor(np.linspace(0.1, 1.0, n), requires_grad=True)
        h = x * 1.0
        if how == "slice":
            y = tg.sin(h[1:]).sum()
        elif how == "reshape":
            y = tg.sin(h.reshape(2, -1)).sum()
        elif how == "transpose":
            y = tg.sin(h.reshape(2, -1).T).sum()
        else:
            y = sum(tg.sin(p) for p in tg.unbind(h.reshape(2, -1)))[0]
        with tg.no_grad():
            h += 1.0
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
        assert x.grad is None
    in_fresh_thread(run)


def test_an_advanced_index_copies_so_a_write_into_its_base_is_no_error():
    """h[[0, 2]] is a copy (NumPy and PyTorch): the graph that saved it runs."""
    def run():
        x = tg.tensor([0.1, 0.5, 1.0], requires_grad=True)
        h = x * 1.0
        y = tg.sin(h[np.array([0, 2])]).sum()
        with tg.no_grad():
            h += 1.0
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), [np.cos(0.1), 0.0, np.cos(1.0)], rtol=1e-15)
    in_fresh_thread(run)


_SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])


@pytest.mark.parametrize("fn", [
    lambda A: np.linalg.cholesky(A).sum(),
    lambda A: (np.linalg.eigh(A)[0] ** 3).sum(),
    lambda A: (np.linalg.svd(A)[1] ** 3).sum(),
    lambda A: np.linalg.qr(A)[1].sum(),
    lambda A: np.linalg.slogdet(A)[1],
], ids=["cholesky", "eigh", "svd", "qr", "slogdet"])
def test_nested_grad_through_decompositions_to_third_order(fn):
    def h(a):
        return tg.grad(lambda b: (tg.grad(fn)(b) ** 2).sum())(a).sum()
    g3 = tg.grad(h)(_SPD)
    fd, e = np.zeros_like(_SPD), 1e-5
    for i in range(3):
        for j in range(3):
            E = np.zeros_like(_SPD)
            E[i, j] = e
            fd[i, j] = (h(_SPD + E) - h(_SPD - E)) / (2 * e)
    np.testing.assert_allclose(g3, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
