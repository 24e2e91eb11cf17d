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
import gc

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core import writes as tape_writes
from tapegrad.core.tape import current


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
    # the refused backwards' tracebacks hold metrics in reference cycles
    # until a collection: collect, so that no graph but the next one is left
    gc.collect()
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
    from tapegrad.engine import backward as AG
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


def test_a_loop_making_a_new_leaf_each_step_releases_arrays_as_graphs_free(monkeypatch):
    """Functional updates (a new parameter leaf each step) beside kept metrics:
    each leaf's array is read-only while a live graph saved it, writable once
    the last such graph is freed; and a backward looks at the arrays its own
    graph may have released, not at every array the kept graphs hold."""
    looked = []
    real = tape_writes.SavedIndex.entry

    def counting(self, tape, a):
        looked[-1] += 1
        return real(self, tape, a)

    monkeypatch.setattr(tape_writes.SavedIndex, "entry", counting)
    rng = np.random.default_rng(3)
    A, b = rng.normal(size=(24, 20)), rng.normal(size=24)
    w = tg.tensor(np.zeros(20), requires_grad=True)
    kept, leaves = [], []
    for _ in range(300):
        looked.append(0)
        loss = ((A @ w - b) ** 2).mean()
        loss.backward()
        w = tg.tensor(w.numpy() - 0.01 * w.grad.numpy(), requires_grad=True)
        kept.append((w * w).sum())          # saves w's array (20 elements: by reference)
        leaves.append(w)
    assert max(looked[250:]) <= max(looked[5:20]) + 2
    old = leaves[100]
    with pytest.raises(ValueError, match="read-only"):
        old.numpy()[0] = 1.0                # kept[100] saved it
    old.grad = None                         # it holds the next step's loss gradient
    kept[100].backward()                    # frees that graph: nothing reads it now
    np.testing.assert_allclose(old.grad.numpy(), 2 * old.numpy(), rtol=1e-15)
    old.numpy()[0] = 1.0
    assert old.numpy()[0] == 1.0
    with pytest.raises(ValueError, match="read-only"):
        leaves[101].numpy()[0] = 1.0        # still saved by kept[101]


@pytest.fixture(params=["graph search", "whole tape"])
def search(request, monkeypatch):
    from tapegrad.engine import backward as AG
    monkeypatch.setattr(AG, "GRAPH_SEARCH_FROM", 0 if request.param == "graph search" else 10**12)
    return request.param


def test_a_batch_buffer_refilled_beside_a_kept_graph(search):
    """A loop that refills its batch buffer after each backward while some
    other graph stays alive (a kept metric that does not read the buffer):
    the buffer is writable again once the graph that read it is freed."""
    rng = np.random.default_rng(4)
    buf = np.empty((32, 20))
    w = tg.tensor(np.zeros(20), requires_grad=True)
    kept = []
    for _ in range(6):
        buf[:] = rng.normal(size=(32, 20))
        x = w.numpy().copy()
        loss = ((buf @ w - 1.0) ** 2).mean()
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), (2.0 / 32) * buf.T @ (buf @ x - 1.0),
                                   rtol=1e-12)
        with tg.no_grad():
            w -= 0.01 * w.grad
        w.grad = None
        kept.append((w * 2.0).sum())       # alive, and reads no buffer
    with pytest.raises(ValueError, match="read-only"):
        held = (buf @ w).sum()             # a live graph that reads it: protected
        buf[0, 0] = 1.0
    assert held.grad_fn is not None


def test_a_leaf_value_let_go_is_kept_again_by_a_later_graph(search):
    """A leaf's large value, let go when the graph that read it was freed
    (beside a live unrelated graph), is kept anew by the next graph that
    reads the leaf: that graph's gradient uses the value it saw."""
    tape = current()
    _z = tg.tensor(np.ones(3), requires_grad=True)
    kept = (_z * 2.0).sum()
    p = tg.tensor(np.linspace(0.1, 0.9, 40), requires_grad=True)
    (p * p).sum().backward()
    assert p.numpy().flags.writeable     # nothing live reads it
    np.testing.assert_allclose(p.grad.numpy(), 2 * p.numpy(), rtol=1e-15)
    p.grad = None
    y = (tg.sin(p) * p).sum()            # reads p again: kept again
    with pytest.raises(ValueError, match="read-only"):
        p.numpy()[0] = 5.0
    y.backward()
    x = p.numpy()
    np.testing.assert_allclose(p.grad.numpy(), np.cos(x) * x + np.sin(x), rtol=1e-14)
    assert kept.grad_fn is not None and tape.n > 0


def test_what_host_records_kept_goes_with_their_graph(search):
    """A decomposition's factors and a tg.Function's context, kept for their
    VJPs, are let go when their graph is freed, while an unrelated graph
    keeps the tape alive; a freed tg.Function's grad_fn keeps its name, and a
    second backward through it raises PyTorch's error."""
    class Square(tg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    tape = current()
    _z = tg.tensor(np.ones(3), requires_grad=True)
    kept = (_z * 2.0).sum()
    X = tg.tensor(np.random.default_rng(5).normal(size=(6, 4)), requires_grad=True)
    for _ in range(30):
        X.grad = None
        y = Square.apply(X)
        U, S, Vt = tg.linalg.svd(y, full_matrices=False)
        also = S.sum() * 2.0
        S.sum().backward()
        # the freed records' are gone; a tg.Function's class stays for its name
        assert all(len(h) == 1 for r, h in tape.host.items() if tape.freed[r])
    s, v = np.linalg.svd(X.numpy() ** 2, full_matrices=False)[1:]
    u = np.linalg.svd(X.numpy() ** 2, full_matrices=False)[0]
    np.testing.assert_allclose(X.grad.numpy(), 2 * X.numpy() * (u @ v), rtol=1e-10)
    assert y.grad_fn.name() == "SquareBackward"
    with pytest.raises(RuntimeError, match="second time"):
        also.backward()
    assert kept.grad_fn is not None


def test_the_adjoint_arena_follows_the_graph_beside_kept_graphs(monkeypatch):
    """Backwards of large graphs one after the other while a small graph
    stays alive (the tape never resets): the adjoints a backward lays out are
    its own graph's, not every record the tape still holds."""
    from tapegrad.engine import backward as AG
    laid = []
    real = AG.Adjoints.__init__

    def spying(self, tape, upto, first=None, float32=False):
        real(self, tape, upto, first, float32)
        laid.append((upto, None if self.order is None else self.order.size))

    monkeypatch.setattr(AG.Adjoints, "__init__", spying)
    _z = tg.tensor(np.ones(3), requires_grad=True)
    kept = (_z * 2.0).sum()
    x = tg.tensor(np.linspace(0.1, 0.9, 5000), requires_grad=True)
    for _ in range(20):
        x.grad = None
        (tg.exp(x * 0.5) * x).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(),
                                   np.exp(0.5 * x.numpy()) * (1 + 0.5 * x.numpy()),
                                   rtol=1e-13)
    # from the second backward on (the tape holds freed records), the graph
    assert laid[-1][0] > 60 and all(n is not None and n <= 8 for _, n in laid[1:])
    assert kept.grad_fn is not None


def test_graphs_dropped_without_backward_beside_a_kept_one_are_let_go(monkeypatch):
    """Large results computed, never differentiated and dropped each step,
    while another graph keeps the tape alive: their kept values are let go
    by a compaction once the kept bytes grow, not when the record count has
    doubled (a few records per step would take thousands of steps)."""
    from tapegrad.core.tape import Tape
    monkeypatch.setattr(Tape, "CHECK_BYTES", 1 << 20)
    tape = current()
    tape.check_bytes = 1 << 20
    _z = tg.tensor(np.ones(3), requires_grad=True)
    kept = (_z * 2.0).sum()
    X = tg.tensor(np.linspace(0.0, 1.0, 20_000), requires_grad=True)   # 160 kB values
    most = 0
    for _ in range(200):
        m = tg.exp(X * 2.0).sum()          # exp keeps its output for its VJP
        most = max(most, tape.kept_bytes)
    assert tape.n < 200 and most <= 3 << 20
    m.backward()
    np.testing.assert_allclose(X.grad.numpy(), 2 * np.exp(2 * X.numpy()), rtol=1e-14)
    kept.backward()
    np.testing.assert_allclose(_z.grad.numpy(), np.full(3, 2.0))


@pytest.mark.parametrize("where", ["function", "hook"])
def test_no_compaction_inside_a_sweep(monkeypatch, where):
    """A tg.Function's backward, or a tensor hook, that runs tapegrad ops
    while the kept bytes are past the threshold: the compaction waits until
    the sweep is over (it would renumber the records the sweep walks)."""
    from tapegrad.core import liveness as TL
    from tapegrad.core.tape import Tape
    monkeypatch.setattr(Tape, "CHECK_BYTES", 1 << 20)
    tape = current()
    tape.check_bytes = 1 << 20
    during = []
    real = TL._Liveness.compact

    def spying(self):
        n = self.n
        real(self)
        during.append((inside[0], self.n < n))

    monkeypatch.setattr(TL._Liveness, "compact", spying)
    inside = [False]
    w = tg.tensor(np.linspace(0.1, 0.9, 20_000), requires_grad=True)

    def record_inside():
        inside[0] = True
        with tg.enable_grad():               # (a backward runs under no_grad)
            for _ in range(20):
                tg.exp(w * 1.0)              # records and keeps 160 kB each
        inside[0] = False

    class Scaled(tg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3.0

        @staticmethod
        def backward(ctx, g):
            record_inside()
            return g * 3.0

    def scaled(x):
        if where == "function":
            return Scaled.apply(x)
        h = x * 3.0
        h.register_hook(lambda g: record_inside())
        return h

    _z = tg.tensor(np.ones(3), requires_grad=True)
    kept = (_z * 2.0).sum()
    x = tg.tensor(np.linspace(0.0, 1.0, 20_000), requires_grad=True)
    for _ in range(3):
        x.grad = None
        (tg.sin(scaled(x)) * 1.0).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(3 * x.numpy()), rtol=1e-13)
    for _ in range(20):                      # ops after the sweeps compact
        tg.exp(w * 1.0)
    assert (True, True) not in during        # looked inside, but renumbered nothing
    assert (True, False) in during and (False, True) in during
    assert kept.grad_fn is not None


@pytest.mark.compaction_trigger
def test_a_hook_that_records_past_the_compaction_point_loses_no_gradient():
    """A tensor hook that records ops (under enable_grad) while the sweep runs,
    taking the tape past its record-count compaction point, beside dropped
    graphs that a compaction would remove: the compaction waits for the
    sweep, and the gradient reaches the leaf."""
    _z = tg.tensor(np.ones(3), requires_grad=True)
    kept = (_z * 2.0).sum()
    w = tg.tensor(np.array([0.3]), requires_grad=True)
    for _ in range(1500):
        (w * 2.0) + 1.0                      # dropped graphs: dead records
    tape = current()

    def hook(g):
        with tg.enable_grad():
            for _ in range(1000):
                tg.sin(w * 1.0)

    x = tg.tensor(np.array([0.5, 0.7]), requires_grad=True)
    h = x * 3.0
    h.register_hook(hook)
    y = tg.sin(h)
    for _ in range(300):
        y = y * 1.0
    assert tape.n < tape.check_at < tape.n + 2000   # the hook crosses it
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(3 * x.numpy()), rtol=1e-14)
    assert kept.grad_fn is not None


@pytest.mark.compaction_trigger
def test_a_kept_traceback_of_a_failed_backward_does_not_stop_compaction():
    """A hook that raises inside backward, its exception kept (as a notebook
    keeps the last one): the walk let go of the tape when it failed, so a
    later compaction still drops the graphs nobody holds."""
    x = tg.tensor(np.array([0.5, 0.7]), requires_grad=True)

    def failing(g):
        raise ValueError("hook failed")

    h = x * 3.0
    handle = h.register_hook(failing)
    with pytest.raises(ValueError, match="hook failed") as kept_error:
        tg.sin(h).sum().backward()
    assert kept_error.value.__traceback__ is not None
    tape = current()
    for _ in range(50):
        (x * 2.0) + 1.0                      # dropped graphs
    n = tape.n
    tape.compact()
    assert tape.n < n - 90
    handle.remove()                          # the graph kept is whole
    tg.sin(h).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(3 * x.numpy()), rtol=1e-14)


@pytest.mark.parametrize("write", ["data", "detach"])
def test_a_leaf_written_before_a_compaction_records_its_new_value(write):
    """A leaf written in place without a record (through .data or detach())
    lets go of its stale record: its next use records the new value.  A
    compaction between the write and that use keeps it so (it re-attached
    every leaf to its record, and the use read the stale one: a false
    in-place error)."""
    a = tg.tensor(np.array([0.3, -0.7, 1.1, 0.5, -0.2]), requires_grad=True)
    c = tg.tensor(np.array([1.5, -0.5, 2.0]), requires_grad=True)
    y = (tg.tanh(a[1:4]) * c).sum()
    d = a.data if write == "data" else a.detach()
    d -= 0.5
    tape = current()
    tape.compact()
    y = y + (a[1:4] * c).sum()
    g, = tg.autograd.grad(y, [a])
    v = a.numpy()[1:4]
    # the first term read the value before the write
    before = v + 0.5
    want = np.zeros(5)
    want[1:4] = c.numpy() * (1 - np.tanh(before) ** 2) + c.numpy()
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-14)


# -- the epoch ends when its last tensor is dropped -----------------------------------
def _on_a_fresh_tape(fn):
    # a new thread has a tape of its own, with no other test's graphs on it
    import threading
    err = []

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 (reraised below)
            err.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if err:
        raise err[0]


def test_a_buffer_is_writable_again_once_its_graphs_are_dropped():
    _on_a_fresh_tape(_writable_after_del)


def _writable_after_del():
    # no op runs after the del: the epoch's token dies with its last tensor
    # and the arrays its records made read-only get their write flags back
    # (the epoch is the unit: beside graphs that stay alive on the same tape
    # the flag comes back when a backward or a compaction finds no live
    # record reading the array)
    # (values of more than SMALL elements are kept by reference, not copied)
    X = np.random.default_rng(0).normal(size=(20, 3))
    w = tg.tensor(np.ones(3), requires_grad=True)
    loss = ((X @ w) ** 2).sum()
    metric = (X @ w).mean()
    assert not X.flags.writeable
    del loss
    assert not X.flags.writeable           # metric's graph still reads X
    del metric
    assert X.flags.writeable
    X[0, 0] = 5.0                          # and a new graph sees the new value
    loss = ((X @ w) ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * X.T @ (X @ np.ones(3)))


def test_a_graph_dropped_on_another_thread_gives_the_flag_back_at_the_next_op():
    # the tape belongs to its thread: another thread dropping the last tensor
    # does not touch it, and the recording thread's next op resets it
    _on_a_fresh_tape(_dropped_elsewhere)


def _dropped_elsewhere():
    import threading
    X = np.random.default_rng(0).normal(size=(20, 3))
    w = tg.tensor(np.ones(3), requires_grad=True)
    box = [((X @ w) ** 2).sum()]
    assert not X.flags.writeable
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    tg.tensor(1.0, requires_grad=True) * 2.0      # any op of this thread
    assert X.flags.writeable


def test_an_epoch_over_detaches_its_tensors():
    _on_a_fresh_tape(_detaches)


def _detaches():
    # every record freed by backward: the tape resets at the next op, and the
    # tensors of the old epoch are of none (freed, not "another thread's")
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.backward(np.ones(2))
    z = tg.exp(x)              # a new epoch
    assert y._tok.tape is None and z._tok.tape is current()
    with pytest.raises(RuntimeError, match="a second time|freed"):
        y.backward(np.ones(2))
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1.0, 2.0]) + np.exp([1.0, 2.0]))


def test_a_user_ops_node_keeps_its_name_after_its_epoch():
    class Twice(tg.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    x = tg.tensor([1.0], requires_grad=True)
    y = Twice.apply(x)
    node = y.grad_fn
    y.backward(np.ones(1))
    tg.exp(x)                  # the tape resets: the node's records are gone
    assert node.name() == "TwiceBackward"
