"""tg.Function: custom operations with PyTorch's forward/backward shape."""
import numpy as np
import pytest

import tapegrad as tg

from oracle import check_vjp, close, leaf


class Softplus(tg.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return np.log1p(np.exp(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / (1.0 + np.exp(-x))


class MinMax(tg.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.i, ctx.j, ctx.shape = int(np.argmin(x)), int(np.argmax(x)), x.shape
        return x.min(), x.max()

    @staticmethod
    def backward(ctx, gmin, gmax):
        g = np.zeros(ctx.shape)
        g.flat[ctx.i] += gmin
        g.flat[ctx.j] += gmax
        return g


def test_single_output_matches_finite_differences():
    rng = np.random.default_rng(0)
    check_vjp(lambda x: Softplus.apply(x * 1.0), [rng.normal(size=(3, 4))], rng)


def test_two_outputs_with_slots_and_unused_output():
    x = leaf([3.0, -1.0, 2.0])
    lo, hi = MinMax.apply(x)
    y = lo * 2.0 + hi
    (n0, s0), = y.grad_fn.next_functions[0][0].next_functions
    assert n0.name() == "MinMaxBackward" and s0 == 0
    assert y.grad_fn.next_functions[1] == (hi.grad_fn, 1) or \
        y.grad_fn.next_functions[1][0] == hi.grad_fn
    y.backward()
    close(x.grad, [1.0, 2.0, 0.0])
    x.grad = None
    lo2, _ = MinMax.apply(x)   # the max output is never used: its gradient is zero
    lo2.backward()
    close(x.grad, [0.0, 1.0, 0.0])


def test_no_grad_and_plain_inputs_return_plain_tensors():
    out = Softplus.apply(tg.tensor([0.0]))
    assert not out.requires_grad
    close(out, [np.log(2.0)])


def test_bad_backward_is_reported_and_leaves_grads_intact():
    class Wrong(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return np.ones(5)

    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    with pytest.raises(RuntimeError, match=r"shape \(5,\) for input 0"):
        Wrong.apply(x).sum().backward()
    close(x.grad, [3.0, 3.0])


@pytest.mark.parametrize("returned, ok", [
    ("g, g", False),             # more gradients than inputs
    ("g, None, None", True),     # trailing Nones past the inputs are ignored (PyTorch)
    ("(g,)", True),
    ("()", False),               # fewer
])
def test_backward_must_return_one_gradient_per_input(returned, ok):
    class Twice(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return eval(returned)   # noqa: S307  (the table's expressions)

    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    if ok:
        Twice.apply(x).sum().backward()
        close(x.grad, [4.0, 4.0])       # backward's g (ones) added once
        return
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        Twice.apply(x).sum().backward()
    close(x.grad, [3.0, 3.0])    # nothing half-added


def test_non_tensor_inputs_count_among_the_gradients():
    class Scale(tg.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k           # no entry for k: PyTorch refuses this too

    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"expected 2, got 1"):
        Scale.apply(x, 3.0).sum().backward()


class _RecordsInBackward(tg.Function):
    """2x, whose backward records ``n`` ops of its own (as a backward that
    runs a nested transform does) while the enclosing backward runs."""
    n = 0

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        t = tg.tensor(np.ones(2), requires_grad=True)
        for _ in range(_RecordsInBackward.n):
            t = t * 1.0
        return g * 2.0


@pytest.mark.parametrize("n_dead, n_inner", [(10, 10), (3000, 20000), (60000, 70000)])
def test_a_backward_that_records_leaves_the_enclosing_backward_right(n_dead, n_inner):
    """Records added during a backward (the tape's arrays grow, a compaction
    becomes due) leave the enclosing sweep and the freeing after it right:
    exact gradients, no crash, and the tape usable afterwards."""
    k = tg.tensor(np.ones(1), requires_grad=True)
    keep = k * 1.0                                           # keeps the tape's epoch alive
    s = tg.tensor(np.array([3.0]), requires_grad=True)
    for _ in range(n_dead):
        keep * 2.0                                          # dead records below the graph
    x = tg.tensor(np.arange(8.0), requires_grad=True)
    _RecordsInBackward.n = n_inner
    ((_RecordsInBackward.apply(x) * s) * np.arange(8.0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * np.arange(8.0))
    np.testing.assert_allclose(s.grad.numpy(), [2.0 * (np.arange(8.0) ** 2).sum()])
    (keep * 5.0).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), [5.0])


# -- forward mode through a tg.Function's jvp --------------------------------------------
class _SinCos(tg.Function):
    """(sin(k x), cos(x)) with a backward and a jvp; k is not a tensor."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return np.sin(k * x), np.cos(x)

    @staticmethod
    def backward(ctx, g1, g2):
        (x,) = ctx.saved_tensors
        return g1 * ctx.k * np.cos(ctx.k * x) - g2 * np.sin(x), None

    @staticmethod
    def jvp(ctx, t, tk):
        assert tk is None   # k is not a tensor
        (x,) = ctx.saved_tensors
        return ctx.k * np.cos(ctx.k * x) * t, -np.sin(x) * t


def _through_sincos(x):
    a, b = _SinCos.apply(x * 1.5, 2.0)
    return a * b + a


def test_jvp_through_a_function_with_a_jvp():
    x, d = np.array([0.3, -0.7, 1.1]), np.array([1.0, 0.5, -2.0])
    _, t = tg.jvp(_through_sincos, (x,), (d,))
    e = 1e-6
    want = (_through_sincos(x + e * d).numpy() - _through_sincos(x - e * d).numpy()) / (2 * e)
    np.testing.assert_allclose(t, want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(tg.jacfwd(_through_sincos)(x), tg.jacobian(_through_sincos)(x),
                               rtol=1e-13, atol=1e-15)
    _, T = tg.jvp(_through_sincos, (x,), (np.eye(3),))          # three directions at once
    np.testing.assert_allclose(T, tg.jacobian(_through_sincos)(x).T, rtol=1e-13, atol=1e-15)


def test_jvp_of_a_function_with_an_input_without_tangent():
    """An input that carries no tangent (a constant tensor) gets zeros."""
    c = tg.tensor(np.array([0.5, 0.25]))
    _, t = tg.jvp(lambda x: _SinCos.apply(x, 1.0)[0] + _SinCos.apply(c, 1.0)[1],
                  (np.array([0.1, 0.2]),), (np.ones(2),))
    np.testing.assert_allclose(t, np.cos([0.1, 0.2]), rtol=1e-14)


class _BadJvp(tg.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        return g * 2.0

    @staticmethod
    def jvp(ctx, t):
        return np.zeros(t.size + 1)


def test_jvp_errors_name_the_function():
    with pytest.raises(RuntimeError, match=r"_BadJvp.jvp returned a tangent of shape \(4,\) "
                                           r"for output 0, whose shape is \(3,\)"):
        tg.jvp(_BadJvp.apply, (np.ones(3),), (np.ones(3),))
    with pytest.raises(NotImplementedError, match="define a static jvp"):
        tg.jvp(_RecordsInBackward.apply, (np.ones(3),), (np.ones(3),))
