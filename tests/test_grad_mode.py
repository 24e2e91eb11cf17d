"""set_grad_enabled and enable_grad beside no_grad (PyTorch semantics)."""
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
