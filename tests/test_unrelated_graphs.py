"""A backward walks the graph of its root alone (autograd.Adjoints with the
graph search of kernels/sweep.py: graph_of), not every record of the tape:
the gradients, freeing, value release and tape reset must be what the
whole-tape walk gives, with other graphs alive around it."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import autograd as A
from tapegrad.kernels._views import SMALL
from tapegrad.kernels.sweep import layout
from tapegrad.tape import current


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
