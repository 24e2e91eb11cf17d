"""In-place writes and backwards beside graphs kept alive for a whole loop
(a metric kept for a plot, without ``.detach()``): a training loop's write of
its parameters finds every record that saved them through the tape's index
of saved arrays (tape_writes.SavedIndex), and looks only at what was saved
since the previous write; a backward checks and releases its own graph's
records only.  The results must be the ones a full scan of the tape gives:
every record that saved the written array is stale, kept graphs that saved
an old value raise PyTorch's in-place error, a graph recorded after the last
write backpropagates, and arrays are writable again once no graph reads them.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import tape_writes
from tapegrad.tape import current


def _saving_records(tape, array):
    """Every record that saved ``array`` itself, by a scan of the whole tape
    (the oracle): copied small operands, kept values, leaves."""
    out = {r for a, r in tape.consts if a is array}
    if tape.flipped.holds(array):
        out.update(int(r) for r in np.flatnonzero(tape.rix[:tape.n] >= 0)
                   if tape.refs[tape.rix[r]] is array)
        out.update(r for r, leaf in tape.leaves.items() if leaf._data is array)
    return out


def _step(A, b, w, lr=0.01):
    loss = ((A @ w - b) ** 2).mean()
    loss.backward()
    with tg.no_grad():
        w -= lr * w.grad
    w.grad = None
    return loss


@pytest.mark.parametrize("keep_every", [1, 7])
def test_a_loop_with_kept_metrics_marks_every_saving_record(keep_every):
    """keep_every=7 drops most metrics, so the tape compacts (renumbering
    every record and rebuilding the index) while the loop runs."""
    rng = np.random.default_rng(0)
    A, b = rng.normal(size=(24, 20)), rng.normal(size=24)
    w = tg.tensor(np.zeros(20), requires_grad=True)
    tape = current()
    kept, want_w = [], np.zeros(20)
    for k in range(700):
        before = _saving_records(tape, w._data)
        _step(A, b, w)
        # the oracle: what saved w before the write is stale now
        assert before <= set(tape.stale), k
        want_w -= 0.01 * (2.0 / 24) * A.T @ (A @ want_w - b)
        m = (A @ w - b).sum() + (w * w).sum()   # w of 20 elements: kept by reference
        if k % keep_every == 0 or k == 699:
            kept.append(m)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-12, atol=1e-15)
    # every kept metric but the last saved a value of w written since
    for m in kept[:-1:max(1, len(kept) // 20)]:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            m.backward()
    kept[-1].backward()
    np.testing.assert_allclose(w.grad.numpy(), A.T @ np.ones(24) + 2 * w.numpy(), rtol=1e-12)
    # a NumPy write into w's array is refused while a live graph saved it
    with pytest.raises(ValueError, match="read-only"):
        w.numpy()[0] = 1.0
    del kept, m
    w.grad = None
    _step(A, b, w)                       # frees the last graph: the tape resets
    w.numpy()[0] = 1.0                   # nothing reads it any more
    assert w.numpy()[0] == 1.0


def test_marks_per_write_do_not_grow_with_the_kept_graphs(monkeypatch):
    """A write marks the records saved since the previous write, not again
    every record a kept graph saved earlier (the work would grow with the
    loop); counted, not timed."""
    marks = []
    real = tape_writes.Stale.__setitem__

    def counting(self, r, what):
        marks[-1] += 1
        real(self, r, what)

    monkeypatch.setattr(tape_writes.Stale, "__setitem__", counting)
    rng = np.random.default_rng(1)
    A, b = rng.normal(size=(24, 20)), rng.normal(size=24)
    w = tg.tensor(np.zeros(20), requires_grad=True)
    kept = []
    for _ in range(400):
        marks.append(0)
        _step(A, b, w)
        kept.append((A @ w - b).sum())
    assert max(marks[300:]) <= max(marks[5:20]) <= 8


def test_a_backward_beside_stale_kept_graphs_checks_its_own_records(monkeypatch):
    """With many stale records on a small tape the backward searches its
    graph and the in-place check looks at that graph's records only."""
    from tapegrad import autograd as AG
    seen = []
    real = AG._with_views

    def spying(tape, arg0, args, upto, users_of, searched, graph=None):
        out = real(tape, arg0, args, upto, users_of, searched, graph)
        seen.append((len(tape.stale), len(out)))
        return out

    monkeypatch.setattr(AG, "_with_views", spying)
    rng = np.random.default_rng(2)
    A, b = rng.normal(size=(8, 5)), rng.normal(size=8)
    w = tg.tensor(np.zeros(5), requires_grad=True)
    kept = []
    for _ in range(150):
        _step(A, b, w)
        kept.append((A @ w - b).sum())
    stale, looked = seen[-1]
    assert stale > AG.STALE_SEARCH_FROM and looked <= 2
    # the gradients are the closed form's all along
    x = w.numpy().copy()
    loss = ((A @ w - b) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), (2.0 / 8) * A.T @ (A @ x - b), rtol=1e-13)
