"""set_grad_enabled and enable_grad beside no_grad (PyTorch semantics)."""
import numpy as np

import tapegrad as tg


def test_set_grad_enabled_as_function_and_context():
    x = tg.tensor(1.0, requires_grad=True)
    try:
        tg.set_grad_enabled(False)
        assert not tg.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        tg.set_grad_enabled(True)
    assert tg.is_grad_enabled()
    with tg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with tg.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not tg.is_grad_enabled()
    assert tg.is_grad_enabled() and (x * 2).requires_grad


def test_enable_grad_inside_no_grad_and_as_decorator():
    x = tg.tensor(1.0, requires_grad=True)

    @tg.enable_grad()
    def f():
        return x * 2

    with tg.no_grad():
        assert f().requires_grad
        with tg.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    assert tg.is_grad_enabled()


def test_set_grad_enabled_as_decorator_does_not_change_mode_now():
    x = tg.tensor(1.0, requires_grad=True)

    @tg.set_grad_enabled(False)
    def f():
        return x * 2

    assert tg.is_grad_enabled()
    assert not f().requires_grad
    assert tg.is_grad_enabled()


def test_function_transforms_record_under_an_outer_no_grad():
    """A transform records its function whatever the caller's grad mode (as
    torch.func's do): under no_grad every derivative is the true one, not
    zeros, and the caller's mode is left as it was; a no_grad inside the
    function still cuts its part off."""
    f = lambda x: (x ** 3).sum()                          # noqa: E731
    x = np.array([1.0, 2.0])
    with tg.no_grad():
        np.testing.assert_allclose(tg.grad(f)(x), 3 * x ** 2)
        np.testing.assert_allclose(tg.value_and_grad(f)(x)[1], 3 * x ** 2)
        np.testing.assert_allclose(tg.jacobian(lambda x: x ** 3)(x), np.diag(3 * x ** 2))
        np.testing.assert_allclose(tg.vjp(lambda x: x ** 3, x)[1](np.ones(2))[0], 3 * x ** 2)
        np.testing.assert_allclose(tg.jvp(lambda x: x ** 3, (x,), (np.ones(2),))[1], 3 * x ** 2)
        np.testing.assert_allclose(tg.jacfwd(lambda x: x ** 3)(x), np.diag(3 * x ** 2))
        np.testing.assert_allclose(tg.hessian(f)(x), np.diag(6 * x))
        np.testing.assert_allclose(tg.hvp(f, (x,), (np.ones(2),))[1][0], 6 * x)
        np.testing.assert_allclose(tg.trace(f, x).grad(x), 3 * x ** 2)
        t = tg.tensor(x, requires_grad=True)
        assert not (t * 2.0).requires_grad                # the caller's mode holds
    inner = lambda x: tg.no_grad()(lambda: (x ** 3).sum())() + x.sum()   # noqa: E731
    np.testing.assert_allclose(tg.grad(inner)(x), np.ones(2))
