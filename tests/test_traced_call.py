"""A traced function called on tensors that require grad: its value joins
their graph and its gradient is the trace's (tapegrad/tracing/call.py)."""
import numpy as np
import pytest

import tapegrad as tg
import tapegrad.transforms.functional as F

X = np.array([0.3, -0.7, 1.1, 0.5])


def _f(x):
    return (np.sin(x) * x).sum() + 0.0 + x[0] * x[1]


def test_grad_of_a_traced_function_is_the_trace_gradient():
    ft = tg.trace(_f, X)
    want = tg.grad(_f)(X)
    np.testing.assert_allclose(tg.grad(ft)(X), want, rtol=1e-14)
    np.testing.assert_allclose(F.grad(ft)(X), want, rtol=1e-14)
    v, g = F.value_and_grad(ft)(X)
    assert float(v) == pytest.approx(float(_f(X)))
    np.testing.assert_allclose(g, ft.grad(X), rtol=1e-14)


def test_a_traced_function_inside_a_bigger_graph():
    ft = tg.trace(lambda x: np.exp(x) * x, X)
    x = tg.tensor(X, requires_grad=True)
    y = (ft(x) * x.sum()).sum() + (x * x).sum()
    y.backward()
    assert ft(X).shape == (4,)
    w = tg.tensor(X, requires_grad=True)
    ((tg.exp(w) * w * w.sum()).sum() + (w * w).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), w.grad.numpy(), rtol=1e-13)
    assert ft(x).grad_fn.name() == "TracedCallBackward"


def test_jacobian_multi_output_and_static_arguments():
    ft = tg.trace(lambda x, k: (x * k, (x * x).sum()), X, 3)
    a, b = ft(tg.tensor(X, requires_grad=True), 3)
    assert isinstance(a, tg.Tensor) and isinstance(b, tg.Tensor)
    x = tg.tensor(X, requires_grad=True)
    a, b = ft(x, 3)
    (a.sum() + b).backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 + 2 * X, rtol=1e-14)
    g = tg.jacobian(lambda v: ft(v, 3)[0])(X)
    np.testing.assert_allclose(g, 3 * np.eye(4))


def test_plain_calls_stay_plain():
    ft = tg.trace(_f, X)
    assert not isinstance(ft(X), tg.Tensor)
    assert not isinstance(ft(tg.tensor(X)), tg.Tensor)          # no grad needed
    with tg.no_grad():
        assert not isinstance(ft(tg.tensor(X, requires_grad=True)), tg.Tensor)


def test_second_order_through_a_traced_call_raises():
    ft = tg.trace(_f, X)
    # the call recorded inside a bigger function has no forward rule
    with pytest.raises(NotImplementedError, match="TracedCall is a tg.Function"):
        tg.hessian(lambda x: ft(x) * 2.0)(X)
    # the traced function itself at plain arrays: the trace's own pass
    np.testing.assert_allclose(tg.hessian(ft)(X), tg.hessian(_f)(X), rtol=1e-12)
    np.testing.assert_allclose(ft.hessian(X), tg.hessian(_f)(X), rtol=1e-12)
