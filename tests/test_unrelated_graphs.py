"""A backward walks the graph of its root alone (autograd.Adjoints with the
graph search of kernels/sweep.py: graph_of), not every record of the tape:
the gradients, freeing, value release and tape reset must be what the
whole-tape walk gives, with other graphs alive around it."""
import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.engine import backward as A
from tapegrad.kernels._views import SMALL
from tapegrad.kernels.sweep import layout
from tapegrad.core.tape import current


@pytest.fixture(params=["graph search", "whole tape"])
def search(request, monkeypatch):
    monkeypatch.setattr(A, "GRAPH_SEARCH_FROM", 0 if request.param == "graph search" else 10**12)
    return request.param


def _unrelated(n):
    z = tg.tensor(np.ones(3), requires_grad=True)
    y = z
    for _ in range(n):
        y = y * 1.0001 + 0.5
    return z, y


def test_gradients_beside_a_live_unrelated_graph(search):
    w = tg.tensor(np.linspace(0.1, 0.9, 6), requires_grad=True)   # older than the other graph
    z, kept = _unrelated(300)
    u, v = w.reshape(2, 3).unbind()           # a multi-output record in the graph
    a, b, _c = tg.split(w, [2, 4])
    loss = (tg.sin(u) * v).sum() + (a * a).sum() + tg.exp(b[:1]).sum()
    loss.backward()
    x = w.numpy()
    want = np.zeros(6)
    want[:3] += np.cos(x[:3]) * x[3:]
    want[3:] += np.sin(x[:3])
    want[:2] += 2 * x[:2]
    want[2] += np.exp(x[2])
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-13)
    # the unrelated graph was neither freed nor changed
    kept.sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), np.full(3, 1.0001 ** 300), rtol=1e-12)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_accumulation_and_retain_graph_beside_a_live_graph(search):
    _, kept = _unrelated(50)
    x = tg.tensor([0.5, 1.5, -0.3], requires_grad=True)
    y = (x * x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * 3 * x.numpy() ** 2, rtol=1e-14)
    assert kept.grad_fn is not None


def test_the_tape_resets_once_every_graph_is_freed(search):
    # tensors of earlier tests caught in reference cycles hold the epoch
    # until a collection: let them go before counting what is freed
    gc.collect()
    tape = current()
    z, kept = _unrelated(20)
    x = tg.tensor(np.arange(4.0), requires_grad=True)
    (x * 2.0).sum().backward()
    assert not tape.all_freed          # the unrelated graph is alive and unfreed
    kept.sum().backward()
    assert tape.all_freed


def test_a_freed_graph_releases_its_large_values(search):
    tape = current()
    _, kept = _unrelated(10)
    x = tg.tensor(np.linspace(0.1, 0.9, 4 * SMALL), requires_grad=True)
    e = tg.exp(x)                  # its VJP reads its output: kept by the tape
    r = e._rec
    assert tape.refs[tape.rix[r]] is not None
    (e * 2.0).sum().backward()
    assert tape.refs[tape.rix[r]] is None   # no live record reads it any more
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(x.numpy()), rtol=1e-14)
    assert kept.grad_fn is not None


def test_the_recorded_value_offsets_are_the_layout_s():
    tape = current()
    x = tg.tensor(np.arange(5.0), requires_grad=True)
    ys = [x * float(k) + tg.tensor(np.ones(k + 2)).sum() for k in range(6)]
    n = tape.n
    voff = layout(tape.op, tape.size, n, SMALL)[0]
    mid = (tape.size[:n] > 1) & (tape.size[:n] <= SMALL)
    np.testing.assert_array_equal(tape.voff[:n][mid], voff[mid])
    assert ys


def _reached_by(tape, first, upto):
    """What records ``first .. upto-1`` reach, by a plain walk (the oracle),
    with every output of a multi-output record that is reached."""
    from tapegrad.kernels import codes as C
    seen = set(range(first, upto))
    for r in range(upto - 1, -1, -1):
        if r in seen:
            seen.update(int(p) for p in tape.args[tape.arg0[r]:tape.arg0[r + 1]])
    out = C.code(C.K_NONE, C.OUTPUT)
    for r in sorted(seen):
        if tape.size[r] == 0 and (tape.op[r] >> C.SHIFT) in (C.K_GATHER, C.K_HOST):
            j = r + 1
            while j < upto and tape.op[j] == out and tape.args[tape.arg0[j]] == r:
                seen.add(j)
                j += 1
    return seen


def _graph_set(tape, root):
    from tapegrad.kernels.sweep import graph_of
    tape.arg0[tape.n] = tape.na
    order = graph_of(tape.op, tape.size, tape.arg0, tape.args, root, root + 1,
                     np.zeros(root + 1, np.uint8))[0]
    assert np.all(np.diff(order) < 0)  # descending, each record once
    return set(order.tolist())


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**6), st.integers(0, 10**6)),
                min_size=1, max_size=60), st.integers(0, 10**6))
@settings(max_examples=60, deadline=None, database=None)
def test_the_graph_search_finds_what_the_root_reaches(steps, pick):
    """Random interleaved graphs (old parameters, early intermediates,
    multi-output records): the search finds exactly the records the root
    reaches, and the gradient is the whole-tape walk's."""
    ps = [tg.tensor(np.linspace(0.1, 0.9, 4) + k, requires_grad=True) for k in range(3)]
    live = list(ps)
    for kind, i, j in steps:
        a, b = live[i % len(live)], live[j % len(live)]
        if kind == 0:
            live.append(a * b)
        elif kind == 1:
            live.append(tg.sin(a) + 0.5)
        elif kind == 2:
            u, v = a.reshape(2, 2).unbind()
            live.append(tg.concatenate([v, u]) * b)
        elif kind == 3:
            live.append(tg.split(a, [1, 3])[1].sum() * b)
        elif kind == 4:
            live.append(a - b * 2.0)
        else:
            live.append(tg.exp(a * 0.1))
    root = live[len(ps) + pick % (len(live) - len(ps))] if len(live) > len(ps) else live[-1]
    loss = (root * root).sum()
    tape = current()
    assert _graph_set(tape, loss._rec) == _reached_by(tape, loss._rec, loss._rec + 1)
    grads = []
    for at in (0, 10**12):
        for p in ps:
            p.grad = None
        A.GRAPH_SEARCH_FROM = at
        try:
            loss.backward(retain_graph=True)
        finally:
            A.GRAPH_SEARCH_FROM = 4096
        grads.append([None if p.grad is None else p.grad.numpy() for p in ps])
    for g, w in zip(*grads):
        assert (g is None) == (w is None)
        if g is not None:
            np.testing.assert_array_equal(g, w)


def test_a_graph_through_an_early_intermediate_past_many_unrelated_records(search):
    """The reverse pass gives way to the depth-first search when the graph
    reaches an intermediate recorded before thousands of unrelated records."""
    w = tg.tensor(np.linspace(0.1, 0.9, 5), requires_grad=True)
    h = tg.sin(w)                              # an early intermediate
    z, kept = _unrelated(3000)                 # 6,000 unrelated records
    x = tg.tensor(np.arange(5.0), requires_grad=True)
    loss = (h * x).sum()
    tape = current()
    assert _graph_set(tape, loss._rec) == _reached_by(tape, loss._rec, loss._rec + 1)
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), np.cos(w.numpy()) * x.numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), np.sin(w.numpy()), rtol=1e-14)
    assert kept.grad_fn is not None


def test_a_retained_graph_searched_again_after_compaction_and_freeing():
    """A retained graph's next backward reuses its search; compaction
    (records renumbered) and freeing (another backward on the way) make it
    search again."""
    A.GRAPH_SEARCH_FROM = 0
    try:
        x = tg.tensor(np.linspace(0.1, 0.9, 4), requires_grad=True)
        kept = [tg.exp(x * 0.5) for _ in range(50)]   # records below y's graph
        y = (tg.sin(x) * x).sum()
        del kept
        want = np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy())
        y.backward(retain_graph=True)
        y.backward(retain_graph=True)
        np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-14)
        tape = current()
        before = y._rec
        tape.compact()
        assert y._rec != before        # renumbered
        y.backward(retain_graph=True)
        np.testing.assert_allclose(x.grad.numpy(), 3 * want, rtol=1e-14)
        z = (y * 2.0) + (x * x).sum()
        z.backward()                   # frees z's records, y's among them
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()
    finally:
        A.GRAPH_SEARCH_FROM = 4096


def test_the_graph_search_scratch_is_all_zeros_after_each_backward(search):
    """The search's marks and the reached flags come from arrays the tape
    keeps (Tape.zeros) and clears entry by entry afterwards; a mark left
    behind would hide a record from the next graph.  Checked after backwards
    of interleaved graphs, a multi-output record, a fused run of large
    elementwise records and retain_graph."""
    from tapegrad.engine.fused import FUSE_MIN
    tape = current()
    _, kept = _unrelated(40)
    w = tg.tensor(np.linspace(0.1, 0.9, 6), requires_grad=True)
    big = tg.tensor(np.linspace(0.1, 0.9, FUSE_MIN), requires_grad=True)
    for k in range(3):
        u, v = w.reshape(2, 3).unbind()
        (tg.sin(u) * v).sum().backward(retain_graph=bool(k % 2))
        (tg.exp(big * 0.5) * big + 1.0).sum().backward()
        assert all(not a.any() for a in tape.zeroed.values())
    np.testing.assert_allclose(big.grad.numpy(),
                               3 * np.exp(0.5 * big.numpy()) * (1 + 0.5 * big.numpy()),
                               rtol=1e-13)
    assert kept.grad_fn is not None


@pytest.mark.parametrize("host", [False, True], ids=["no host record", "a solve"])
def test_the_records_freed_are_the_whole_tape_walk_s(host):
    """A backward of a searched graph marks freed exactly the op records a
    walk of the whole tape marks (and counts them): the compiled pass over
    the graph (kernels/sweep.py: free_graph), or the array pass that also
    lets the graph's host records drop what they kept."""
    def program():
        gc.collect()
        _, kept = _unrelated(30)
        x = tg.tensor(np.linspace(0.2, 0.8, 4), requires_grad=True)
        y = tg.sin(x) * x
        if host:
            y = tg.linalg.solve(tg.tensor(np.eye(4) * 3.0) + 0.1, y)
        y.sum().backward()
        tape = current()
        n = tape.n
        marks = tape.freed[:n].copy(), tape.n_freed, tape.all_freed, sorted(tape.host)
        kept.sum().backward()
        return marks + (tape.all_freed, x.grad.numpy())
    try:
        A.GRAPH_SEARCH_FROM = 0
        searched = program()
        A.GRAPH_SEARCH_FROM = 10**12
        whole = program()
    finally:
        A.GRAPH_SEARCH_FROM = 4096
    np.testing.assert_array_equal(searched[0], whole[0])
    assert searched[1:4] == whole[1:4]
    assert not searched[2] and searched[4] and whole[4]   # freed in full by the second
    np.testing.assert_array_equal(searched[5], whole[5])
