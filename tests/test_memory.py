"""Memory follows liveness: loops run in bounded memory, saved arrays are
released and restored, and compaction keeps surviving graphs correct."""
import tracemalloc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core.tape import current

from oracle import in_fresh_thread


def _bounded_loop(step, iterations=10_000):
    """Run ``step`` many times; return the tape sizes and traced memory seen."""
    sizes = []
    tracemalloc.start()
    try:
        for i in range(iterations):
            step(i)
            if i % 500 == 0:
                sizes.append((current().n, tracemalloc.get_traced_memory()[0]))
    finally:
        tracemalloc.stop()
    return sizes


def _assert_bounded(sizes):
    records = [n for n, _ in sizes]
    mem = [m for _, m in sizes]
    assert max(records) < 10_000, records
    # memory after warm-up does not grow: compare the last quarter with the second
    q = len(mem) // 4
    assert max(mem[-q:]) < 2 * max(mem[q:2 * q]) + (1 << 20), mem


def test_backward_loop_is_bounded():
    def run():
        W = tg.tensor(np.random.default_rng(0).standard_normal((8, 8)), requires_grad=True)
        x = np.ones(8)

        def step(i):
            W.grad = None
            loss = (np.tanh(x @ W) ** 2).sum()
            loss.backward()
        sizes = _bounded_loop(step)
        _assert_bounded(sizes)
        assert max(n for n, _ in sizes) < 50
    in_fresh_thread(run)


def test_dropped_graphs_are_bounded():
    """y is rebound each iteration: the previous graph is alive while the next
    one is recorded, so the tape is never entirely dead."""
    def run():
        x = tg.tensor(np.linspace(0, 1, 40), requires_grad=True)
        state = {}

        def step(i):
            state["y"] = (tg.sin(x) * x).sum() + i  # never differentiated
        _assert_bounded(_bounded_loop(step))
    in_fresh_thread(run)


def test_mixed_loop_with_kept_results_stays_correct():
    """Results kept across compactions still differentiate correctly."""
    def run():
        rng = np.random.default_rng(1)
        W = tg.tensor(rng.standard_normal((3, 5)), requires_grad=True)
        kept = []
        for i in range(6000):
            x = tg.tensor(rng.standard_normal(3), requires_grad=True)
            a, b, c = tg.unbind(x)
            y = tg.tanh(x @ W).sum() * a + b * c
            if i % 1000 == 0:
                kept.append((x, y))
            elif i % 3 == 0:
                y.backward()
        assert current().n < 6000
        Wv = W.numpy()
        for x, y in kept:
            X = x.numpy()
            t = np.tanh(X @ Wv)
            want = (1 - t ** 2) @ Wv.T * X[0]
            want += [t.sum(), X[2], X[1]]
            y.backward()
            np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)
            (n, slot), = [f for f in y.grad_fn.next_functions[1][0].next_functions[:1]]
            assert n.name() == "UnbindBackward" and slot == 1
    in_fresh_thread(run)


def test_user_array_is_read_only_only_while_a_graph_holds_it():
    def run():
        W = np.ones((50, 50))
        x = tg.tensor(np.ones(50), requires_grad=True)
        y = (x * W).sum()            # W is a saved constant of the graph
        assert not W.flags.writeable
        y.backward()
        del y
        (x * 2.0).sum()              # the next op starts a new tape epoch
        assert W.flags.writeable
        W[0, 0] = 5.0
    in_fresh_thread(run)


def test_freed_large_values_are_released():
    def run():
        x = tg.tensor(np.ones(1000), requires_grad=True)
        other = (x * 3.0).sum()      # keeps the tape from being reset
        y = (tg.exp(x * 2.0) * 0.5).sum()
        tape = current()
        held = sum(a is not None for a in tape.refs)
        y.backward()
        assert sum(a is not None for a in tape.refs) < held
        other.backward()             # still correct
        np.testing.assert_allclose(x.grad.numpy(), np.exp(2.0) + 3.0)
    in_fresh_thread(run)


def test_a_backward_that_frees_the_tape_releases_every_kept_value_at_once():
    """As PyTorch frees a graph's saved tensors in its backward: the values
    only the tape held are let go before the next op, not at its reset."""
    def run():
        x = tg.tensor(np.linspace(0.0, 1.0, 5000), requires_grad=True)
        y = (tg.exp(x * 2.0) * tg.sin(x)).sum()   # keeps exp(2x) and sin(x)
        tape = current()
        assert sum(a is not None for a in tape.refs) >= 2
        y.backward()
        assert all(a is None for a in tape.refs)
        assert not np.any(tape.ptrs[:tape.nptrs])
        e = np.exp(2 * x.numpy())
        np.testing.assert_allclose(x.grad.numpy(), 2 * e * np.sin(x.numpy())
                                   + e * np.cos(x.numpy()), rtol=1e-14)
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()
        z = (tg.exp(x) * x).sum()                 # the next graph is whole
        z.backward()
        np.testing.assert_allclose(x.grad.numpy(), 2 * e * np.sin(x.numpy())
                                   + e * np.cos(x.numpy())
                                   + np.exp(x.numpy()) * (1 + x.numpy()), rtol=1e-14)
    in_fresh_thread(run)
