"""The small backward in one compiled call (engine/backward.py: ``_quick``).

``loss.backward()`` of a one-element float64 loss on a plain tape without
hooks, host records, in-place writes or freed records runs layout, sweep and
freeing in one call (kernels/sweep.py: ``quick_backward``); everything else
runs the general walk.  Both must give the same bits, free the same records
and leave the tape in the same state: checked here against the walk itself
(``_quick`` switched off) and against closed forms.
"""
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core.tape import current
from tapegrad.engine import backward as B


def _warm():
    """A backward first: the tape's first one lays out its scratch arena,
    and a kernel family's first record compiles it, in the walk."""
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()


@pytest.fixture
def quick_calls(monkeypatch):
    """How many backwards the quick path ran (it declines by returning False).

    The test gets a tape of its own and no leaf hooks from elsewhere: what
    earlier tests of the run left alive on this thread's tape (a large
    value, a freed record, a hook) would make the quick path decline, as it
    must, and these tests are about the path itself."""
    from tapegrad.core import tape as tape_module
    from tapegrad.engine import hooks as H
    old = getattr(tape_module._local, "tape", None)
    tape_module._local.tape = tape_module.Tape()
    monkeypatch.setattr(H, "LEAF_HOOKS", {})
    yield _quick_spy(monkeypatch)
    if old is None:
        del tape_module._local.tape
    else:
        tape_module._local.tape = old


def _quick_spy(monkeypatch):
    _warm()
    seen = {"ran": 0, "declined": 0}
    real = B._quick

    def spy(t, retain_graph):
        ran = real(t, retain_graph)
        seen["ran" if ran else "declined"] += 1
        return ran
    monkeypatch.setattr(B, "_quick", spy)
    return seen


def _programs():
    rng = np.random.default_rng(7)
    a3, b3 = rng.normal(size=3), rng.normal(size=3)
    a40, b40 = rng.normal(size=40), rng.uniform(0.5, 2.0, size=40)
    m = rng.normal(size=(4, 5))
    return {
        "x*x sum": ([a3], lambda x: (x * x).sum()),
        "scalar chain": ([np.array(0.3)], lambda x: _chain(x)),
        "two leaves, constants": ([a3, b3], lambda x, y: (3.0 * x + 2.0 * y * y - x / 4.0).sum()),
        "leaf used thrice": ([a3], lambda x: (x * x * x + tg.sin(x)).mean()),
        "larger than the arena": ([a40, b40], lambda x, y: (tg.exp(x * 0.1) * tg.log(y)).sum()),
        "broadcast and reshape": ([m], lambda x: (x.reshape(5, 4) * np.arange(4.0)).sum()),
        "indexing": ([a40], lambda x: (x[3:9] * x[10:16]).sum() + x[0]),
        "float32 leaf": ([a3.astype(np.float32)], lambda x: (x * x).sum()),
    }


def _chain(x):
    y = x
    for _ in range(30):
        y = y * 0.999 + tg.sin(y) * 0.001
    return y


def _grads(values, f, steps=2):
    leaves = [tg.tensor(v, requires_grad=True) for v in values]
    for _ in range(steps):          # accumulation into .grad, as a loop does
        f(*leaves).backward()
    return [x.grad.numpy().copy() for x in leaves]


@pytest.mark.parametrize("name", list(_programs()))
def test_the_same_bits_as_the_walk(name, quick_calls, monkeypatch):
    values, f = _programs()[name]
    _grads(values, f, 1)       # the families this program needs, compiled
    quick_calls["ran"] = 0
    quick = _grads(values, f)
    assert quick_calls["ran"] == 2
    monkeypatch.setattr(B, "_quick", lambda t, retain_graph: False)
    walked = _grads(values, f)
    for q, w in zip(quick, walked):
        assert q.dtype == w.dtype
        np.testing.assert_array_equal(q, w)


def test_gradients_against_closed_forms(quick_calls):
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for _ in range(3):
        x.grad = None
        (x * x).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    w = tg.tensor([0.5, -1.5], requires_grad=True)
    (w * x[:2]).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.5, 2.5, 6.0])
    assert quick_calls["ran"] == 4


def test_freed_after_backward_and_kept_with_retain_graph(quick_calls):
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0])
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 12.0, 18.0])
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    assert quick_calls["ran"] == 3
    # a graph that saved nothing stays differentiable, as in PyTorch
    y = tg.tensor([1.0, 2.0], requires_grad=True)
    neg = (-y).sum()
    neg.backward()
    neg.backward()
    np.testing.assert_array_equal(y.grad.numpy(), [-2.0, -2.0])


def test_the_leaf_is_writable_again_after_backward(quick_calls):
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (x * x).sum()
    tape = current()
    assert not x.numpy().flags.writeable      # read-only while a graph reads it
    loss.backward()
    assert x.numpy().flags.writeable
    assert tape.all_freed                     # (the next op resets the tape)


def test_a_graph_kept_beside_the_one_backwarded(quick_calls):
    """Not every op record ran: the general freeing (Tape.after_backward)
    frees the backward's own, the other graph stays whole."""
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    metric = (tg.exp(x) * x).sum()
    loss = (x * x).sum()
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    tape = current()
    assert not tape.all_freed
    assert tape.freed[loss._rec - 1]          # x * x saved its operands: freed
    x.grad = None
    metric.backward()
    v = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy(), np.exp(v) * (v + 1), rtol=1e-15)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    # (a tape with freed records sweeps its roots' graphs: the walk)
    assert quick_calls == {"ran": 1, "declined": 2}


def test_declines_what_it_does_not_run(quick_calls):
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.register_hook(lambda g: g * 2.0)          # a hook: the walk
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0])
    x.grad = None
    (x * x).sum().backward(gradient=np.array(2.0))   # a seed given
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0])
    x.grad = None
    y = x * x
    y.backward(np.ones(3))                      # a root of three elements
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    assert quick_calls["ran"] == 0


def test_a_tape_that_grew_and_an_arena_that_changed_size(quick_calls):
    """The addresses the call reads are renewed when the tape's arrays, its
    scratch arena or the leaf arena change."""
    for n in (3, 5000, 2):
        for _ in range(2):
            quick_calls["ran"] = 0
            x = tg.tensor(np.linspace(0.1, 1.0, n), requires_grad=True)
            y = x
            for _ in range(1500):               # past the tape's first capacity
                y = y * 1.0
            (y * y).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-15)
        # (the first may have needed a larger scratch arena: the walk's)
        assert quick_calls["ran"] == 1


def test_threads_each_with_their_own_tape():
    errors = []

    def work(k):
        try:
            x = tg.tensor(np.arange(1.0, 4.0) * k, requires_grad=True)
            for _ in range(300):
                x.grad = None
                (x * x).sum().backward()
                np.testing.assert_array_equal(x.grad.numpy(), 2 * x.numpy())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_one_leaf_shared_by_threads_accumulates_every_step():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def work():
        for _ in range(200):
            (x * x).sum().backward()

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(x.grad.numpy(), 600 * np.array([2.0, 4.0, 6.0]))
