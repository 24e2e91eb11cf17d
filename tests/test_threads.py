"""One tape per thread.

Eight threads that each build and differentiate independent graphs get the
same results as one thread doing the same work; grad mode is per thread; a
non-leaf recorded on one thread cannot enter another thread's graph (a clear
RuntimeError), while leaves can be shared.
"""
import threading

import numpy as np
import pytest

import tapegrad as tg

from oracle import close

N_THREADS = 8


def run_threads(target, n=N_THREADS, args_of=lambda i: (i,)):
    """Run target(*args_of(i)) on n threads started together; return results in order."""
    results, errors = [None] * n, [None] * n
    barrier = threading.Barrier(n)

    def body(i):
        try:
            barrier.wait(timeout=60)
            results[i] = target(*args_of(i))
        except BaseException as e:  # re-raised below, on the test's thread
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    for e in errors:
        if e is not None:
            raise e
    return results


def in_thread(fn):
    return run_threads(lambda i: fn(), n=1)[0]


def workload(seed, steps=15):
    """A small training loop touching most kinds of records; returns its numbers."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((12, 5))              # large operands (> 16 elements)
    labels = rng.integers(0, 3, 12)
    W1 = tg.tensor(rng.standard_normal((5, 4)) * 0.5, requires_grad=True)
    b1 = tg.tensor(np.zeros(4), requires_grad=True)   # small
    W2 = tg.tensor(rng.standard_normal((4, 3)) * 0.5, requires_grad=True)
    losses = []
    for step in range(steps):
        h = tg.tanh(X @ W1 + b1)
        z = h @ W2
        loss = (tg.logsumexp(z, axis=1) - z[np.arange(12), labels]).mean()
        cols = tg.unbind(h, axis=1)
        reg = (cols[0] * cols[1]).sum() * 1e-3 + tg.sqrt(tg.square(W2).sum() + 1.0)
        total = loss + reg
        total.backward(retain_graph=(step % 5 == 0))
        if step % 5 == 0:
            total.backward()            # a second pass through the retained graph
        losses.append(float(total))
        with tg.no_grad():
            for p in (W1, b1, W2):
                p -= 0.05 * p.grad
                p.grad = None
    return np.array(losses), W1.numpy().copy(), b1.numpy().copy(), W2.numpy().copy()


def _assert_same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15)


def test_eight_threads_match_one_thread():
    expected = [in_thread(lambda s=s: workload(s)) for s in range(N_THREADS)]
    got = run_threads(workload)
    for e, g in zip(expected, got):
        _assert_same(e, g)
    # the work really differs between seeds (the comparison is not vacuous)
    assert not np.allclose(expected[0][0], expected[1][0])


def test_main_thread_with_a_live_graph_matches_fresh_thread():
    k = tg.tensor([1.0, 2.0], requires_grad=True)
    keep = (k * k).sum()          # e.g. a graph the caller still holds
    main = workload(3, steps=5)
    (other,) = run_threads(lambda i: workload(3, steps=5), n=1)
    _assert_same(main, other)
    keep.backward()


def test_thread_doing_errors_does_not_disturb_others():
    def target(i):
        if i % 2:
            return workload(i)
        x = tg.tensor(np.linspace(0.1, 2.0, 20), requires_grad=True)
        for _ in range(30):
            y = tg.exp(x)
            with pytest.raises(RuntimeError, match="only for scalar outputs"):
                y.backward()
            with pytest.raises(RuntimeError, match="Mismatch in shape"):
                y.backward(np.ones(3))
            y.backward(np.ones(20))
            with pytest.raises(RuntimeError, match="second time"):
                y.backward(np.ones(20))
        return x.grad.numpy().copy()

    got = run_threads(target)
    for i in range(N_THREADS):
        if i % 2:
            _assert_same(in_thread(lambda i=i: workload(i)), got[i])
        else:
            close(got[i], 30 * np.exp(np.linspace(0.1, 2.0, 20)))


def test_non_leaf_from_another_thread_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0                      # recorded on this thread

    def use_it():
        with pytest.raises(RuntimeError, match="another thread") as info:
            h * 2.0
        assert "detach()" in str(info.value)
        with pytest.raises(RuntimeError, match="another thread"):
            tg.exp(h)
        with pytest.raises(RuntimeError, match="another thread"):
            tg.concatenate([h, h])
        # this thread's own graphs still work
        y = tg.tensor([1.0, 2.0], requires_grad=True)
        (y * y).sum().backward()
        return y.grad.numpy().copy()

    close(in_thread(use_it), [2.0, 4.0])
    # and the graph on this thread is intact
    (h * h).sum().backward()
    close(x.grad, 18 * np.array([1.0, 2.0]))


def test_backward_on_another_thread_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()

    def other():
        with pytest.raises(RuntimeError, match="thread"):
            y.backward()

    in_thread(other)
    assert x.grad is None
    y.backward()
    close(x.grad, [2.0, 4.0])


def test_non_leaf_from_finished_thread_raises():
    def make():
        a = tg.tensor([1.0, 2.0], requires_grad=True)
        return a, a * 2.0

    a, h = in_thread(make)
    with pytest.raises(RuntimeError, match="another thread"):
        (h * 1.0).sum()
    # its value is still readable, and a detached copy can be used here
    close(h, [2.0, 4.0])
    d = h.detach().requires_grad_()
    (d * d).sum().backward()
    close(d.grad, [4.0, 8.0])
    assert a.grad is None


def test_results_of_a_thread_are_readable_elsewhere():
    def job():
        w = tg.tensor([1.0, -1.0], requires_grad=True)
        (tg.exp(w) * 2.0).sum().backward()
        return w

    w = in_thread(job)
    close(w.grad, 2 * np.exp([1.0, -1.0]))
    (w * 3.0).sum().backward()        # a leaf can be reused on this thread
    close(w.grad, 2 * np.exp([1.0, -1.0]) + 3.0)


def test_detached_tensor_crosses_threads():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = tg.sin(x)

    def other(value):
        v = value.requires_grad_()
        (v * v).sum().backward()
        return v.grad.numpy().copy()

    (g,) = run_threads(other, n=1, args_of=lambda i: (h.detach(),))
    close(g, 2 * np.sin([1.0, 2.0]))
    h.sum().backward()
    close(x.grad, np.cos([1.0, 2.0]))


def test_shared_leaf_across_threads():
    W = tg.tensor(np.array([1.0, 2.0, 3.0, 4.0]), requires_grad=True)
    steps = 50

    def target(i):
        v = tg.tensor(np.full(4, i + 1.0), requires_grad=True)
        for _ in range(steps):
            (W * v + v * v).sum().backward()
        return v.grad.numpy().copy()

    got = run_threads(target)
    for i in range(N_THREADS):
        close(got[i], steps * (np.array([1.0, 2.0, 3.0, 4.0]) + 2 * (i + 1.0)))
    close(W.grad, steps * sum(np.full(4, i + 1.0) for i in range(N_THREADS)))


def test_grad_mode_is_per_thread():
    seen = {}
    inside = threading.Event()
    release = threading.Event()

    def other():
        inside.wait(timeout=30)
        seen["enabled"] = tg.is_grad_enabled()
        x = tg.tensor([1.0], requires_grad=True)
        seen["records"] = (x * 2.0).requires_grad
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with tg.no_grad():
        inside.set()
        assert release.wait(timeout=30)
        assert not tg.is_grad_enabled()
    t.join()
    assert seen == {"enabled": True, "records": True}

    def off():
        with tg.no_grad():
            return tg.is_grad_enabled()

    assert in_thread(off) is False
    assert tg.is_grad_enabled()


def test_no_grad_decorator_in_threads():
    @tg.no_grad()
    def f(v):
        return tg.tensor(v, requires_grad=True) * 2.0, tg.is_grad_enabled()

    res = run_threads(lambda i: f([float(i)]))
    assert all(not y.requires_grad and not enabled for y, enabled in res)
    assert tg.is_grad_enabled()


def test_large_values_read_only_per_thread():
    def target(i):
        x = tg.tensor(np.arange(20.0) + i, requires_grad=True)
        y = (x * x).sum()
        with pytest.raises(ValueError, match="read-only"):
            x.numpy()[0] = 1.0
        y.backward()
        return x.grad.numpy().copy()

    got = run_threads(target)
    for i, g in enumerate(got):
        close(g, 2 * (np.arange(20.0) + i))
