"""Anomaly mode: the first non-finite gradient names its op, line and shapes;
errors leave the tape usable; nothing is recorded or checked when it is off."""
import inspect
import sys

import numpy as np
import pytest

import tapegrad as tg
from oracle import close, in_fresh_thread, leaf
from tapegrad.core.tape import Tape, current


def _line(fn, text):
    """Line number, in this file, of the line of fn containing text."""
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def test_log_of_zero_names_the_op_the_line_and_shapes():
    def f():
        x = leaf([0.0, 1.0, 2.0])
        with tg.detect_anomaly(), np.errstate(divide="ignore"):
            y = tg.log(x)                     # the culprit
            z = (y * 2.0).sum()
            with pytest.raises(RuntimeError) as e:
                z.backward()
        return str(e.value), x
    msg, x = f()
    assert "Function 'LogBackward' returned inf values" in msg
    assert f"{__file__}\", line {_line(f, 'the culprit')}" in msg
    assert "y = tg.log(x)" in msg
    assert "(3,)" in msg
    assert x.grad is None


def test_nan_is_named_as_nan():
    x = leaf([0.0, 4.0])
    with tg.detect_anomaly():
        z = (tg.sqrt(x) * 0.0).sum()          # 0 * (1 / (2 sqrt 0)) = nan
        with pytest.raises(RuntimeError, match="'SqrtBackward' returned nan"):
            z.backward()


def test_fast_paths_are_traced_too():
    def f():
        x = leaf([1.0, 2.0])
        with tg.detect_anomaly():
            y = x * 2.0
            w = y * y                  # two non-leaves: the inlined fast path
            u = tg.exp(w)              # unary fast path
            tape = current()
            assert set(tape.where) >= {y._rec, w._rec, u._rec}
            return tape.where[w._rec]
    path, line, func, shape = in_fresh_thread(f)
    assert path == __file__ and func == "f" and shape == (2,)


def test_errors_leave_the_tape_usable():
    x = leaf([0.0, 1.0])
    other = leaf([1.0, 2.0])
    keep = (other * 3.0).sum()
    with tg.detect_anomaly(), np.errstate(divide="ignore"):
        z = tg.log(x).sum()
        with pytest.raises(RuntimeError):
            z.backward()
    assert type(current()) is Tape and not tg.is_anomaly_enabled()
    with np.errstate(divide="ignore"):
        z.backward()                   # outside anomaly mode: no check
    assert np.isinf(x.grad.numpy()[0]) and x.grad.numpy()[1] == 1.0
    keep.backward()
    close(other.grad, [3.0, 3.0])


def test_same_gradients_as_without_anomaly_mode():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))

    def run():
        a, b = leaf(A), leaf(B)
        m = a @ b                       # a host record
        p, q = tg.unbind(m, axis=1)     # multi-output record
        h = []
        p.register_hook(lambda g: h.append(1) or g * 2)
        (tg.tanh(p) * q + tg.sin(m).sum(axis=1)).sum().backward()
        return a.grad.numpy(), b.grad.numpy(), h
    ga, gb, h = run()
    with tg.detect_anomaly():
        ga2, gb2, h2 = run()
    close(ga2, ga)
    close(gb2, gb)
    assert h == h2 == [1]


def test_graph_recorded_outside_anomaly_mode():
    x = leaf([0.0])
    with np.errstate(divide="ignore"):
        z = tg.log(x).sum()
    with tg.detect_anomaly():
        with pytest.raises(RuntimeError, match="recorded outside tg.detect_anomaly"):
            z.backward()


def test_off_by_default_and_free_when_off():
    def f():
        x = leaf([1.0, 2.0])
        y = tg.exp(x * 2.0).sum()
        tape = current()
        return type(tape), dict(tape.where), tg.is_anomaly_enabled(), tape.room
    cls, where, on, room = in_fresh_thread(f)
    assert cls is Tape and where == {} and not on and room > 0


def test_mode_restored_after_an_exception_and_as_decorator():
    with pytest.raises(KeyError):
        with tg.detect_anomaly():
            assert tg.is_anomaly_enabled()
            raise KeyError
    assert not tg.is_anomaly_enabled()

    @tg.detect_anomaly()
    def g():
        return tg.is_anomaly_enabled()
    assert g() and not tg.is_anomaly_enabled()


def test_no_grad_inside_anomaly_mode():
    x = leaf([1.0])
    with tg.detect_anomaly():
        with tg.no_grad():
            assert not (x * 2.0).requires_grad
        assert (x * 2.0).requires_grad


def test_check_nan_false_does_not_raise():
    x = leaf([0.0, 1.0])
    with tg.detect_anomaly(check_nan=False):
        with np.errstate(divide="ignore"):
            tg.log(x).sum().backward()
    assert np.isinf(x.grad.numpy()[0])


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes")
def test_errors_in_custom_backward_get_the_line():
    class Bad(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("broken backward")

    x = leaf([1.0])
    with tg.detect_anomaly():
        z = Bad.apply(x).sum()      # made here
        with pytest.raises(ValueError) as e:
            z.backward()
    notes = "".join(getattr(e.value, "__notes__", []))
    assert "BadBackward" in notes and "z = Bad.apply(x).sum()" in notes
