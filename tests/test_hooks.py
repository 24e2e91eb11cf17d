"""Tensor hooks and retain_grad: they fire once per backward with the right
gradient, can replace it, can be removed; retained gradients accumulate."""
import gc

import numpy as np
import pytest

import tapegrad as tg
from oracle import close, leaf


def fd_grad(f, x, eps=1e-6):
    """Central finite differences of scalar f at array x."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


X = np.array([0.3, -1.2, 2.0])


def test_non_leaf_hook_sees_gradient_once_and_can_replace_it():
    x = leaf(X)
    y = x * x                       # dL/dy = cos(y)
    seen = []

    def hook(g):
        seen.append(g.numpy().copy())
        return g * 2.0

    y.register_hook(hook)
    tg.sin(y).sum().backward()
    assert len(seen) == 1
    close(seen[0], np.cos(X * X))
    close(x.grad, 2.0 * np.cos(X * X) * 2 * X)   # the replacement flowed on


def test_hooks_chain_in_order_and_remove():
    x = leaf(X)
    y = tg.exp(x)
    calls = []
    h1 = y.register_hook(lambda g: calls.append("a") or g + 1.0)
    y.register_hook(lambda g: calls.append(("b", g.numpy().copy())))
    z = (3 * y).sum()
    z.backward(retain_graph=True)
    assert calls[0] == "a"
    close(calls[1][1], np.full(3, 4.0))             # b sees a's replacement
    close(x.grad, 4.0 * np.exp(X))
    h1.remove()
    h1.remove()                                      # twice is harmless
    calls.clear()
    x.grad = None
    z.backward()
    assert [c[0] for c in calls] == ["b"]
    close(x.grad, 3.0 * np.exp(X))


def test_hook_fires_once_per_backward():
    x = leaf(X)
    y = x * 2.0
    n = []
    y.register_hook(lambda g: n.append(1))
    z = (y * y).sum() + y.sum()      # y has several consumers
    for _ in range(3):
        z.backward(retain_graph=True)
    assert len(n) == 3


def test_leaf_hook_replaces_what_is_accumulated():
    x = leaf(X)
    seen = []

    def hook(g):
        seen.append(g.numpy().copy())
        return g * 0.5
    x.register_hook(hook)
    (x * x + x).sum().backward()             # x used three times: one call
    assert len(seen) == 1
    close(seen[0], 2 * X + 1)
    close(x.grad, 0.5 * (2 * X + 1))
    # the gradient handed to a hook is a copy: keeping it is safe
    kept = seen[0].copy()
    (x * 3).sum().backward()
    close(seen[0], kept)
    close(x.grad, 0.5 * (2 * X + 1) + 1.5)


def test_backward_of_a_leaf_runs_its_hook():
    x = leaf(X)
    x.register_hook(lambda g: g * 3)
    x.backward(np.ones(3))
    close(x.grad, np.full(3, 3.0))


def test_hook_on_output_sees_seed():
    x = leaf(X)
    y = tg.sin(x)
    seen = []
    y.register_hook(lambda g: seen.append(g.numpy().copy()))
    y.backward([0.1, 1.0, 0.0001])
    close(seen[0], [0.1, 1.0, 0.0001])
    close(x.grad, np.array([0.1, 1.0, 0.0001]) * np.cos(X))


def test_hook_outlives_its_tensor():
    x = leaf(X)
    y = x * 2.0
    n = []
    y.register_hook(lambda g: n.append(1))
    z = (y * y).sum()
    del y
    gc.collect()
    z.backward()
    assert n == [1]


def test_hooks_on_multi_output_and_host_records():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    W = leaf([[0.5, -1.0], [2.0, 0.25]])
    m = x @ W                                      # host record (BLAS VJP)
    a, b = tg.unbind(m)                            # OUTPUT records
    seen = {}
    m.register_hook(lambda g: seen.setdefault("m", g.numpy().copy()))
    b.register_hook(lambda g: g * 10)
    (a.sum() + (b * b).sum()).backward()
    mb = (x.numpy() @ W.numpy())[1]
    gm = np.stack([np.ones(2), 10 * 2 * mb])
    close(seen["m"], gm)
    close(W.grad, x.numpy().T @ gm)
    close(x.grad, gm @ W.numpy().T)


def test_hook_gets_the_tensor_dtype():
    x = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = x * 2
    dts = []
    y.register_hook(lambda g: dts.append(g.dtype))
    x.register_hook(lambda g: dts.append(g.dtype))
    y.sum().backward()
    assert dts == [np.float32, np.float32]
    assert x.grad.dtype == np.float32


def test_hook_shape_error_leaves_everything_usable():
    x = leaf(X)
    y = x * 2.0
    x.grad = np.ones(3)
    h = y.register_hook(lambda g: np.zeros(2))
    z = y.sum()
    with pytest.raises(RuntimeError, match=r"shape \(2,\)"):
        z.backward()
    close(x.grad, np.ones(3))                       # untouched
    h.remove()
    z.backward()                                    # the graph is still there
    close(x.grad, np.ones(3) + 2.0)


def test_hook_exception_propagates_and_graph_survives():
    x = leaf(X)
    y = tg.exp(x)

    def bad(g):
        raise ValueError("from the hook")
    h = y.register_hook(bad)
    z = y.sum()
    with pytest.raises(ValueError, match="from the hook"):
        z.backward()
    assert x.grad is None
    h.remove()
    z.backward()
    close(x.grad, np.exp(X))


def test_register_hook_errors():
    with pytest.raises(RuntimeError, match="does not require gradient"):
        tg.tensor([1.0]).register_hook(lambda g: g)
    with pytest.raises(TypeError):
        leaf([1.0]).register_hook(3)
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        tg.tensor([1.0]).retain_grad()


def test_retain_grad_matches_finite_differences_and_accumulates():
    def f(x):
        y = np.tanh(x) * x
        return float(np.sum(np.sin(y) + y ** 2))

    def f_of_y(y):
        return float(np.sum(np.sin(y) + y ** 2))

    x = leaf(X)
    y = tg.tanh(x) * x
    y.retain_grad()
    assert y.retains_grad and not x.retains_grad
    z = (tg.sin(y) + y ** 2).sum()
    z.backward(retain_graph=True)
    yv = np.tanh(X) * X
    close(y.grad, fd_grad(f_of_y, yv), rtol=1e-7, atol=1e-8)
    close(x.grad, fd_grad(f, X), rtol=1e-7, atol=1e-8)
    z.backward()
    close(y.grad, 2 * fd_grad(f_of_y, yv), rtol=1e-7, atol=1e-8)


def test_retain_grad_sees_hooks_and_seed():
    x = leaf(X)
    y = x * 3.0
    y.retain_grad()
    y.register_hook(lambda g: g * 2)     # registered after: retain still sees it
    y.backward(np.ones(3))
    close(y.grad, np.full(3, 2.0))
    close(x.grad, np.full(3, 6.0))


def test_retain_grad_on_leaf_is_a_no_op_and_nonleaf_grad_warns():
    x = leaf(X)
    x.retain_grad()
    assert not x.retains_grad
    y = x * 2.0
    with pytest.warns(UserWarning, match="not a leaf"):
        assert y.grad is None
    y.sum().backward()
    with pytest.warns(UserWarning):
        assert y.grad is None


def test_no_grad_reached_no_hook():
    x, w = leaf(X), leaf(X)
    y = x * 2.0
    n = []
    y.register_hook(lambda g: n.append(1))
    (w * 2.0).sum().backward()            # y is not in this graph
    (y * 0 + w).sum().backward()          # y is reached (a zero gradient)
    assert n == [1]


def test_hooks_survive_compaction():
    """A tape that compacts renumbers records; hooks follow their record."""
    from oracle import in_fresh_thread
    from tapegrad.core.tape import current

    def run():   # a new thread's tape: compaction is due at 4,096 records
        x = leaf(X)
        y = x * 2.0
        n = []
        y.register_hook(lambda g: n.append(g.numpy().copy()))
        y.retain_grad()
        for _ in range(3000):               # garbage that nothing reaches
            t = tg.sin(x) * 2.0
        del t
        z = (y * 3.0).sum()
        for _ in range(2000):
            z2 = tg.sin(x) * 2.0
        assert current().n < 5000             # compacted meanwhile
        assert y._rec < 3                     # and y renumbered
        z.backward()
        del z2
        return n, y.grad, x.grad
    n, yg, xg = in_fresh_thread(run)
    assert len(n) == 1
    close(n[0], np.full(3, 3.0))
    close(yg, np.full(3, 3.0))
    close(xg, np.full(3, 6.0))


def test_handle_as_context_manager():
    x = leaf(X)
    y = x * 1.0
    n = []
    with y.register_hook(lambda g: n.append(1)):
        y.sum().backward(retain_graph=True)
    y.sum().backward()
    assert n == [1]


def test_hooks_run_without_recording():
    x, w = leaf(X), leaf(2.0)
    y = x * 3.0
    kinds = []

    def hook(g):
        r = g * w                       # w requires grad: not recorded here
        kinds.append(r.requires_grad)
        return r
    y.register_hook(hook)
    y.sum().backward()
    assert kinds == [False]
    close(x.grad, np.full(3, 6.0))
    assert w.grad is None


def test_removing_the_last_leaf_hook_forgets_the_leaf():
    from oracle import in_fresh_thread
    from tapegrad.engine import hooks
    mine = in_fresh_thread(_leaf_hooks_come_and_go)
    gc.collect()              # the thread's tape, and the leaf with it, are gone
    assert all(e[1] is not mine for e in hooks.LEAF_HOOKS.values())


def _leaf_hooks_come_and_go():
    from tapegrad.engine import hooks
    x = leaf(X)
    mine = lambda: [e[1] for e in hooks.LEAF_HOOKS.values() if e[0]() is x]  # noqa: E731
    h1 = x.register_hook(lambda g: g * 2)
    h2 = x.register_hook(lambda g: g * 3)
    assert len(mine()) == 1
    h1.remove()
    (x * 1.0).sum().backward()
    close(x.grad, np.full(3, 3.0))
    h2.remove()
    assert mine() == []
    x.register_hook(lambda g: g * 5)
    x.grad = None
    (x * 1.0).sum().backward()
    close(x.grad, np.full(3, 5.0))
    (found,) = mine()
    return found
