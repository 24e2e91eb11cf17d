"""KeyboardInterrupt during recording and between sweeps leaves the tape usable.

Ctrl-C arrives as a KeyboardInterrupt at an arbitrary bytecode of the main
thread.  Two ways to provoke it: deterministically from inside user code
(a ``tg.Function`` forward or backward, a hook), and at random points with
``signal.setitimer`` while a long graph records or backward passes run.
After each interrupt a graph recorded before it and a new graph must both
differentiate correctly.
"""
import signal
import threading

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, in_fresh_thread


class Boom(tg.Function):
    """Raises KeyboardInterrupt in forward or backward on request."""

    fail_forward = False
    fail_backward = False

    @staticmethod
    def forward(ctx, x):
        if Boom.fail_forward:
            raise KeyboardInterrupt
        return x * 2.0

    @staticmethod
    def backward(ctx, g):
        if Boom.fail_backward:
            raise KeyboardInterrupt
        return g * 2.0


@pytest.fixture(autouse=True)
def _reset_boom():
    yield
    Boom.fail_forward = Boom.fail_backward = False


def _fresh_graph_works():
    x = tg.tensor(np.linspace(0.1, 2.0, 30), requires_grad=True)
    (tg.sin(x) * x).sum().backward()
    v = x.numpy()
    close(x.grad, np.cos(v) * v + np.sin(v))
    s = tg.tensor(0.7, requires_grad=True)
    (tg.exp(s) * s).backward()
    close(s.grad, np.exp(0.7) * 1.7)


def _long_recording(x, steps, fail_at):
    h = x
    for i in range(steps):
        if i == fail_at:
            Boom.fail_forward = True
        h = Boom.apply(tg.tanh(h) * 0.5 + x)
    return h


def test_interrupt_in_forward_during_long_recording():
    def body():
        k = tg.tensor([1.0, 2.0], requires_grad=True)
        keep = (k * k).sum()                    # recorded before, must survive
        x = tg.tensor(np.linspace(-1, 1, 40), requires_grad=True)
        with pytest.raises(KeyboardInterrupt):
            _long_recording(x, 3000, fail_at=2000)  # past several tape doublings
        Boom.fail_forward = False
        _fresh_graph_works()
        # the same leaf joins a new graph after the interrupt
        y = (_long_recording(x, 5, fail_at=-1) ** 2).sum()
        y.backward()
        assert x.grad is not None and np.isfinite(x.grad.numpy()).all()
        keep.backward()
        close(k.grad, [2.0, 4.0])
    in_fresh_thread(body)


def test_interrupt_in_backward_between_sweeps():
    """A host record (a tg.Function's backward) runs between two compiled sweeps;
    an interrupt there leaves the graph retained and the gradients untouched."""
    def body():
        x = tg.tensor(np.linspace(0.1, 1.0, 25), requires_grad=True)
        w = tg.tensor([0.5, 1.5], requires_grad=True)
        (w * 1.0).sum().backward()
        y = (tg.sin(Boom.apply(tg.exp(x) * w[0])) * w[1]).sum()
        Boom.fail_backward = True
        with pytest.raises(KeyboardInterrupt):
            y.backward()
        assert x.grad is None
        close(w.grad, [1.0, 1.0])
        Boom.fail_backward = False
        y.backward()        # the interrupted backward freed nothing
        v = x.numpy()
        inner = 2.0 * np.exp(v) * 0.5
        c = np.cos(inner) * 1.5
        close(x.grad, c * inner)
        close(w.grad, [1.0 + np.sum(c * 2.0 * np.exp(v)), 1.0 + np.sum(np.sin(inner))])
        _fresh_graph_works()
    in_fresh_thread(body)


def test_interrupt_in_hook():
    def body():
        x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = x * 3.0

        def hook(g):
            raise KeyboardInterrupt
        handle = h.register_hook(hook)
        y = (h * h).sum()
        with pytest.raises(KeyboardInterrupt):
            y.backward(retain_graph=True)
        assert x.grad is None
        handle.remove()
        y.backward()
        close(x.grad, 18 * np.array([1.0, 2.0, 3.0]))
        _fresh_graph_works()
    in_fresh_thread(body)


def _caused_by_interrupt(e):
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or e.__context__
    return False


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals are delivered to the main thread")
def test_interrupt_by_signal_at_random_points():
    """SIGALRM raises KeyboardInterrupt wherever the main thread happens to be:
    inside an op's recording, a tape growth or compaction, a backward's Python
    part.  Afterwards graphs recorded before and after still differentiate right."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, handler)
    rng = np.random.default_rng(0)
    hits = 0
    try:
        k = tg.tensor([1.0, 2.0], requires_grad=True)
        for trial in range(40):
            keep = (tg.exp(k) * k).sum()
            x = tg.tensor(np.linspace(0.1, 1.0, 8 + trial % 20), requires_grad=True)
            signal.setitimer(signal.ITIMER_REAL, float(rng.uniform(1e-4, 2e-2)))
            try:
                h = x
                for i in range(20_000):
                    h = tg.sin(h) * 0.9 + x * 0.1
                    if i % 50 == 0:
                        (h.sum()).backward(retain_graph=True)
            except KeyboardInterrupt:
                hits += 1
            except SystemError as e:
                # an interrupt inside Numba's dispatcher (unpickling a kernel's
                # constants on its first calls) surfaces as SystemError from it
                assert _caused_by_interrupt(e), e
                hits += 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            k.grad = None
            keep.backward()
            close(k.grad, np.exp([1.0, 2.0]) * (1.0 + np.array([1.0, 2.0])))
            _fresh_graph_works()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert hits >= 30      # the timer really interrupted the loops
