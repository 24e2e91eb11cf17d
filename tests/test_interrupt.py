"""KeyboardInterrupt during recording and between sweeps leaves the tape usable.

Ctrl-C arrives as a KeyboardInterrupt at an arbitrary bytecode of the main
thread.  Two ways to provoke it: deterministically from inside user code
(a ``tg.Function`` forward or backward, a hook), and at random points with
``signal.setitimer`` while a long graph records or backward passes run.
After each interrupt a graph recorded before it and a new graph must both
differentiate correctly.
"""
import signal
import sys
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


# -- compaction ---------------------------------------------------------------------------
def _compaction_scenario(tape, tracer=None):
    """Record a graph to keep (small and large values, int parameters, a host
    record, a hook), then a loop whose earlier results die, and trigger one
    compaction with ``tracer`` set.  Returns what the checks need."""
    x = tg.tensor(np.linspace(0.1, 0.9, 6), requires_grad=True)
    big = tg.tensor(np.linspace(0.5, 1.5, 40), requires_grad=True)   # > SMALL: kept in refs
    w = tg.tensor(np.eye(3) * 0.5 + 0.1, requires_grad=True)
    seen = []
    mid = tg.sin(big) * 2.0
    mid.register_hook(lambda g: seen.append(float(g.numpy().sum())))
    keep = ((mid * big).sum() + (x[1:4].reshape(1, 3) @ w).sum()
            + tg.exp(x).sum(axis=0))
    tape.check_at = 10 ** 9          # no compaction while the loop records
    y = None
    for i in range(100):             # ~700 records, all but the last few dead
        y = (tg.sin(x * (1.0 + 1e-3 * i)) * big[:6]).sum()
    n_before = tape.n
    tape.check_at = tape.n           # the next op on a leaf compacts first
    interrupted = False
    sys.settrace(tracer)
    try:
        z = tg.cos(x)
    except KeyboardInterrupt:
        interrupted = True
        z = None
    finally:
        sys.settrace(None)
    return dict(x=x, big=big, w=w, keep=keep, y=y, z=z, seen=seen, n_before=n_before,
                interrupted=interrupted, compacted=tape.n < n_before)


def _compaction_results(s, tape, again):
    """Gradients of everything recorded before the compaction, then of a loop
    long enough to compact again (if ``again``: compaction scans the heap,
    which makes it the slow part of this test)."""
    x, big, w = s["x"], s["big"], s["w"]
    s["keep"].backward()
    out = [x.grad.numpy().copy(), big.grad.numpy().copy(), w.grad.numpy().copy(),
           list(s["seen"])]
    s["y"].backward()
    out.append(x.grad.numpy().copy())
    z = s["z"] if s["z"] is not None else tg.cos(x)
    if not again:
        tape.check_at = 10 ** 9
    for i in range(200):             # past the next compaction
        y = (tg.sin(x * (2.0 + 1e-3 * i)) * big[:6]).sum()
    (y + z.sum()).backward()
    out += [x.grad.numpy().copy(), big.grad.numpy().copy()]
    out.append(tape.n < 1000 if again else None)   # compaction keeps working
    return out


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signals are delivered to the main thread")
@pytest.mark.compaction_trigger
def test_interrupt_at_every_point_of_compaction(monkeypatch):
    """Ctrl-C (a real SIGINT) arriving at each line that Tape.compact and its
    helpers in the tape's modules (tapegrad/core/tape.py, liveness.py, writes.py) execute: before the write-back it interrupts
    and leaves the old tape, during the write-back it waits until the tape is
    consistent.  Either way every graph differentiates as without the
    interrupt, and later compactions work."""
    from tapegrad.core import tape as tape_mod
    import glob
    import os
    code = tape_mod.Tape.compact.__code__
    # the files of the tape's modules: compact and the Tape methods it calls
    here = os.path.dirname(tape_mod.__file__)
    where = {os.path.realpath(os.path.join(here, f))
             for f in ("tape.py", "liveness.py", "writes.py")}
    assert os.path.realpath(code.co_filename) in where
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_tape = getattr(tape_mod._local, "tape", None)

    def fresh():
        t = tape_mod._local.tape = tape_mod.Tape()
        return t

    def tracer_at(k):
        state = {"count": 0, "depth": 0}

        def local(frame, event, arg):
            if event == "line":
                state["count"] += 1
                if state["count"] == k:
                    signal.raise_signal(signal.SIGINT)
            elif event == "return" and frame.f_code is code:
                state["depth"] -= 1
            return local

        def tracer(frame, event, arg):
            # compact's own lines and those of the tape modules' functions it calls
            # (not its comprehensions: a point inside one is a point of the
            # statement that holds it)
            if frame.f_code is code:
                state["depth"] += 1
            if (state["depth"] and os.path.realpath(frame.f_code.co_filename) in where
                    and not frame.f_code.co_name.startswith("<")):
                return local
            return None
        return tracer, state

    monkeypatch.setattr(tape_mod.Tape, "CHECK_RECORDS", 256)   # compact sooner: faster
    try:
        t = fresh()
        ref = _compaction_scenario(t)
        assert ref["compacted"] and not ref["interrupted"]
        expected = _compaction_results(ref, t, True)
        counts = {"before the write-back": 0, "during or after it": 0}
        k = 0
        while True:
            k += 1
            t = fresh()
            tracer, state = tracer_at(k)
            s = _compaction_scenario(t, tracer)
            if state["count"] < k:       # compact ran to its end: every point tried
                assert not s["interrupted"]
                break
            assert s["interrupted"], k
            counts["during or after it" if s["compacted"] else "before the write-back"] += 1
            if not s["compacted"]:
                assert t.n == s["n_before"]
            again = k % 8 == 0
            got = _compaction_results(s, t, again)
            for a, b in zip(got, expected):
                if isinstance(a, np.ndarray):
                    np.testing.assert_array_equal(a, b)
                elif a is not None:
                    assert a == b, k
        assert k > 40 and min(counts.values()) > 10, counts
    finally:
        sys.settrace(None)
        signal.signal(signal.SIGINT, old_handler)
        tape_mod._local.tape = old_tape
        if old_tape is None:
            del tape_mod._local.tape


def test_compaction_keeps_graphs_gc_cannot_see():
    """Compaction finds live tensors with gc.get_referrers, which does not see
    objects gc.freeze() moved out of its reach; a graph held by such a tensor
    used to lose its records (a wrong gradient, silently)."""
    import gc

    def body():
        x = tg.tensor(np.linspace(0.1, 0.9, 5), requires_grad=True)
        keep = (tg.sin(x) * 3.0).sum()
        gc.freeze()
        try:
            for i in range(3000):                   # past a compaction
                y = tg.exp(x * (1 + i * 1e-3)).sum()
        finally:
            gc.unfreeze()
        keep.backward()
        close(x.grad, 3 * np.cos(np.linspace(0.1, 0.9, 5)))
        y.backward()
        _fresh_graph_works()
    in_fresh_thread(body)
