"""tg.checkpoint and tg.checkpoint_loop against the plain tape and finite differences."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.transforms.checkpointing import checkpoint, checkpoint_loop
from tapegrad.core.tape import NO_COMPACTION, current



def central_difference(f, x0, eps=1e-6):
    g = np.zeros_like(x0)
    for i in range(x0.size):
        e = np.zeros_like(x0)
        e[i] = eps
        g[i] = (f(x0 + e) - f(x0 - e)) / (2 * eps)
    return g


def _block(x, w, scale):
    h = tg.tanh(x * w + 0.1) * scale
    return tg.sin(h) * x + h.sum() * w


def _grads(fn, *arrays):
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    (out * out).sum().backward()
    return out.numpy(), [t.grad.numpy() for t in ts]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 2**31), scale=st.floats(0.5, 2.0))
def test_checkpoint_matches_the_plain_tape(n, seed, scale):
    rng = np.random.default_rng(seed)
    x, w = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    v0, g0 = _grads(lambda x, w: _block(x, w, scale), x, w)
    v1, g1 = _grads(lambda x, w: checkpoint(_block, x, w, scale), x, w)
    np.testing.assert_array_equal(v1, v0)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


def test_checkpoint_against_central_differences():
    x0 = np.array([0.3, -0.4, 0.8])

    def f(x):
        y = checkpoint(lambda a: tg.exp(tg.sin(a)) * a, tg.tensor(x) if not isinstance(
            x, tg.Tensor) else x)
        return (y * y).sum()

    x = tg.tensor(x0, requires_grad=True)
    f(x).backward()
    fd = central_difference(lambda v: float(f(v).numpy()), x0)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-7, atol=1e-9)


def test_tuple_outputs_unused_outputs_and_plain_arguments():
    x = tg.tensor([0.5, 1.5], requires_grad=True)
    c = tg.tensor([2.0, 3.0])            # no grad: a plain input
    a, b = checkpoint(lambda x, c, k: (x * c * k, tg.exp(x)), x, c, 3.0)
    a.sum().backward()                    # b unused: its gradient is zero
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 9.0])
    assert c.grad is None


def test_nested_checkpoints():
    def inner(v):
        return tg.sin(v) * v

    def outer(v):
        return checkpoint(inner, v * 2.0) + v

    x0 = np.array([0.2, 0.7])
    _, (g0,) = _grads(lambda v: inner(v * 2.0) + v, x0)
    _, (g1,) = _grads(lambda v: checkpoint(outer, v), x0)
    np.testing.assert_allclose(g1, g0, rtol=1e-14)


def test_gradients_accumulate_and_retain_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = checkpoint(lambda a: (a * a).sum(), x)
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_a_tensor_read_from_a_closure_raises_and_leaves_everything_working():
    w = tg.tensor([2.0, 3.0], requires_grad=True)
    x = tg.tensor([0.5, 1.0], requires_grad=True)
    (w * 1.0).sum().backward()                        # w now has a grad to keep
    y = checkpoint(lambda a: (tg.exp(a) * w).sum(), x)
    with pytest.raises(RuntimeError, match="fn reads a tensor that requires grad and is not "
                                           "one of its arguments .* Pass it as an argument"):
        y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0])   # unchanged
    assert x.grad is None
    z = (x * w).sum()                                 # the tape still works
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0])


def test_a_leaf_first_used_inside_fn_is_caught_too():
    w = tg.tensor([2.0, 3.0], requires_grad=True)    # never used before the call
    x = tg.tensor([0.5, 1.0], requires_grad=True)
    y = checkpoint(lambda a: (a * w).sum(), x)
    with pytest.raises(RuntimeError, match="not one of its arguments"):
        y.backward()
    assert w.grad is None


def test_a_tensor_that_needs_no_gradient_may_come_from_a_closure():
    c = tg.tensor([2.0, 3.0])
    x = tg.tensor([0.5, 1.0], requires_grad=True)
    checkpoint(lambda a: (a * c).sum(), x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0])


def test_a_function_that_computes_other_values_again_raises():
    rng = np.random.default_rng(0)
    x = tg.tensor([0.5, 1.0], requires_grad=True)
    y = checkpoint(lambda a: (a * rng.uniform(size=2)).sum(), x)
    with pytest.raises(RuntimeError, match="recomputing fn gave different values for output "
                                           "0 .* draw random numbers outside it"):
        y.backward()
    assert x.grad is None


def test_bad_arguments_raise():
    x = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match="first argument must be a function"):
        checkpoint(x, x)
    with pytest.raises(TypeError, match="fn must return a tensor or a tuple of tensors, got "
                                        "float"):
        checkpoint(lambda a: 1.0, x)
    with pytest.raises(ValueError, match="steps must be a non-negative integer"):
        checkpoint_loop(lambda s: s, x, 2.5)
    with pytest.raises(ValueError, match="segments must be a positive integer"):
        checkpoint_loop(lambda s: s, x, 4, segments=0)
    with pytest.raises(TypeError, match="same structure"):
        checkpoint_loop(lambda s: (s, s), x, 4)


def _ode_step(state, k, c):
    # a damped oscillator, explicit Euler, dt = 0.01
    u, v = state
    return u + 0.01 * v, v - 0.01 * (k * u + c * v)


def _ode_plain(u0, v0, k, c, steps):
    s = (u0, v0)
    for _ in range(steps):
        s = _ode_step(s, k, c)
    return s


@pytest.mark.parametrize("steps,segments", [(1, None), (7, None), (400, None), (400, 3),
                                            (50, 50), (10, 40)])
def test_checkpoint_loop_matches_the_plain_loop(steps, segments):
    def run(loop):
        u0 = tg.tensor(np.array([1.0, 0.5]), requires_grad=True)
        v0 = tg.tensor(np.array([0.0, -0.2]), requires_grad=True)
        k = tg.tensor(4.0, requires_grad=True)
        c = tg.tensor(0.3, requires_grad=True)
        u, v = loop(u0, v0, k, c)
        ((u * u).sum() + v.sum()).backward()
        return [u.numpy(), v.numpy()] + [t.grad.numpy() for t in (u0, v0, k, c)]

    want = run(lambda u0, v0, k, c: _ode_plain(u0, v0, k, c, steps))
    got = run(lambda u0, v0, k, c: checkpoint_loop(_ode_step, (u0, v0), steps, k, c,
                                                   segments=segments))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_checkpoint_loop_keeps_about_sqrt_steps_records():
    steps = 900

    def records(loop):
        tape = current()
        u0 = tg.tensor(np.ones(3), requires_grad=True)
        v0 = tg.tensor(np.zeros(3), requires_grad=True)
        k = tg.tensor(4.0, requires_grad=True)
        c = tg.tensor(0.3, requires_grad=True)
        # the records the loop leaves on the tape, counted without a
        # compaction meanwhile (which would drop some of the plain loop's)
        n0, check_at = tape.n, tape.check_at
        tape.check_at = NO_COMPACTION
        try:
            u, v = loop(u0, v0, k, c)
        finally:
            tape.check_at = check_at
        n = tape.n - n0
        (u.sum() + v.sum()).backward()
        return n

    plain = records(lambda *a: _ode_plain(*a, steps))
    ck = records(lambda u0, v0, k, c: checkpoint_loop(_ode_step, (u0, v0), steps, k, c))
    assert plain >= 6 * steps            # a few records per step
    assert ck <= 4 * int(np.sqrt(steps)) + 10   # a few records per segment


def test_zero_steps_return_the_state():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert checkpoint_loop(lambda s: s * 2.0, x, 0) is x


def test_second_order_and_tracing_raise_rather_than_guess():
    def f(x):
        return checkpoint(lambda a: (a * a * a).sum(), x)

    with pytest.raises(NotImplementedError, match="Checkpoint is a tg.Function"):
        tg.hessian(f)(np.array([1.0, 2.0]))
    with pytest.raises(NotImplementedError, match="cannot replay Function"):
        tg.trace(f, np.array([1.0, 2.0]))


def _two_outputs(x, c, k, w):
    return tg.sin(x * w) * c * k, tg.exp(x) * w, tg.tanh(w)   # the last one unused


@pytest.mark.parametrize("entry", ["autograd.grad", "backward"])
def test_create_graph_through_a_checkpoint_matches_the_plain_tape(entry):
    """create_graph=True recomputes fn on tensors of the graph (Checkpoint's
    vjp_ops), so gradients of gradients -- to the third order, with tuple
    outputs, an unused output, plain arguments and a gradient that depends on
    the incoming adjoint -- are those of the plain tape."""
    c = np.array([2.0, 3.0, -1.0])

    def run(ck):
        x = tg.tensor([0.5, 1.5, -0.3], requires_grad=True)
        w = tg.tensor([0.2, -0.7, 1.1], requires_grad=True)
        a, b, _ = (checkpoint(_two_outputs, x, tg.tensor(c), 3.0, w) if ck
                   else _two_outputs(x, tg.tensor(c), 3.0, w))
        y = (a * a).sum() + (b * tg.sin(a)).sum()
        if entry == "backward":
            y.backward(create_graph=True)
            gx, gw = x.grad, w.grad
            x.grad = w.grad = None
        else:
            gx, gw = tg.autograd.grad(y, [x, w], create_graph=True)
        h, = tg.autograd.grad((gx * gx).sum() + (gw * x).sum(), [w], create_graph=True)
        (h * h * x).sum().backward()
        return [t.detach().numpy() for t in (gx, gw, h, x.grad, w.grad)]

    for got, want in zip(run(True), run(False)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_create_graph_through_a_checkpoint_keeps_its_rules():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    x = tg.tensor([0.5, 1.5], requires_grad=True)
    y = checkpoint(lambda a: (a * w).sum(), x)        # w from a closure
    with pytest.raises(RuntimeError, match="not one of its arguments"):
        tg.autograd.grad(y * y, [x], create_graph=True)
    draws = iter([1.0, 2.0])
    y = checkpoint(lambda a: (a * next(draws)).sum(), x)
    with pytest.raises(RuntimeError, match="different values"):
        tg.autograd.grad(y * y, [x], create_graph=True)


def test_the_node_is_named():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert checkpoint(lambda a: a * 2.0, x).grad_fn.name() == "CheckpointBackward"


def test_the_tape_is_not_compacted_under_a_running_backward():
    # the recomputation records on the tape the outer backward is sweeping:
    # a compaction there would renumber records under the sweep
    def run(loop):
        k = tg.tensor(4.0, requires_grad=True)
        u0 = tg.tensor(np.ones(3), requires_grad=True)
        v0 = tg.tensor(np.zeros(3), requires_grad=True)
        c = tg.tensor(0.3, requires_grad=True)
        u, v = loop(u0, v0, k, c)
        loss = (u * u).sum() + v.sum()
        current().check_at = current().n + 5     # compaction due at the next op
        loss.backward()
        return [t.grad.numpy() for t in (u0, v0, k, c)]

    want = run(lambda *a: _ode_plain(*a, 200))
    got = run(lambda u0, v0, k, c: checkpoint_loop(_ode_step, (u0, v0), 200, k, c))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
