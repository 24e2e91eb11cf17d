"""One behaviour on every path: ``backward()``, ``backward(inputs=)``,
``autograd.grad`` (with and without ``create_graph``), ``backward(create_graph=
True)`` and ``tg.grad`` are one walk over the graph (``autograd.walk``), so
hooks, ``retain_grad``, which records run and what a backward frees hold on
all of them alike.

Table-driven: every hook kind x every path, checked against numbers worked
out by hand (always) and against PyTorch's (when torch is importable).  The
program, for x = [1, 2] and y = [0.5, -1] (leaves)::

    h = x * 3;  out = (h * h).sum() + (h * y).sum()

so d out/dh = 2h + y, d out/dx = 3 (2h + y) = 18x + 3y and d out/dy = h = 3x.
Then second backwards: through a graph that saved nothing (PyTorch runs it
again, any number of times) and through one that saved values (PyTorch's
"backward through the graph a second time" error), and the error paths:
their message, and that nothing changed after them.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core.tape import current

X0 = np.array([1.0, 2.0])
Y0 = np.array([0.5, -1.0])
GH = 2 * 3 * X0 + Y0          # d out / dh, before any hook

#: hook kinds: where the hooks go (h: the intermediate, x and y: leaves, out:
#: the output), what they do, and how they change d out/dh, d out/dx and the
#: second derivative d/dx sum(d out/dx) (18 without hooks)
KINDS = ["none", "inter_replace", "inter_observe", "inter_chain", "leaf_replace",
         "leaf_observe", "leaf_chain", "retain", "retain_then_hook", "root", "off_path"]

#: paths: what is asked for
PATHS = ["backward", "backward_inputs", "grad", "grad_xy", "grad_h", "grad_create_graph",
         "backward_create_graph", "tg_grad"]


def _program(lib, kind, log):
    """Build the graph with ``lib`` (tapegrad or torch) and the hooks of
    ``kind``; ``log`` gets (name, gradient seen) per hook call."""
    x = lib.tensor(X0.tolist(), requires_grad=True)
    y = lib.tensor(Y0.tolist(), requires_grad=True)
    h = x * 3.0
    out = (h * h).sum() + (h * y).sum()
    _hook_up(kind, log, x, y, h, out)
    return x, y, h, out


def _hook_up(kind, log, x, y, h, out):
    def seen(name, then=None):
        def fn(g):
            log.append((name, np.array(g.detach().tolist(), dtype=float)))
            return None if then is None else then(g)
        return fn
    if kind == "inter_replace":
        h.register_hook(seen("h", lambda g: g * 10))
    elif kind == "inter_observe":
        h.register_hook(seen("h"))
    elif kind == "inter_chain":
        h.register_hook(seen("h1", lambda g: g * 10))
        h.register_hook(seen("h2", lambda g: g + 1))
    elif kind == "leaf_replace":
        x.register_hook(seen("x", lambda g: g + 1))
    elif kind == "leaf_observe":
        x.register_hook(seen("x"))
    elif kind == "leaf_chain":
        x.register_hook(seen("x1", lambda g: g * 10))
        x.register_hook(seen("x2", lambda g: g + 1))
    elif kind == "retain":
        h.retain_grad()
    elif kind == "retain_then_hook":   # the retained gradient is the hooked one
        h.retain_grad()
        h.register_hook(seen("h", lambda g: g * 10))
    elif kind == "root":
        out.register_hook(seen("out", lambda g: g * 2))
    elif kind == "off_path":
        y.register_hook(seen("y"))


def _expected(kind, path):
    """Worked out by hand: {"x": .., "y": .., "h": ..} the gradients the path
    gives (None: not asked for), "retained": h.grad, "calls": the hook log
    (names with the gradients they saw), "second": d/dx sum(d out/dx)."""
    times10, plus1 = (lambda g: g * 10), (lambda g: g + 1)
    h_hooks = {"inter_replace": [("h", times10)], "retain_then_hook": [("h", times10)],
               "inter_observe": [("h", None)],
               "inter_chain": [("h1", times10), ("h2", plus1)]}.get(kind, [])
    x_hooks = {"leaf_replace": [("x", plus1)], "leaf_observe": [("x", None)],
               "leaf_chain": [("x1", times10), ("x2", plus1)]}.get(kind, [])
    y_hooks = [("y", None)] if kind == "off_path" else []
    scale = 2.0 if kind == "root" else 1.0     # the hook on out doubles its seed
    # which gradients each path computes, and so which hooks run: a node runs
    # only on a path from the output down to a wanted tensor
    wants = {"backward": "xy", "backward_inputs": "x", "grad": "x", "grad_xy": "xy",
             "grad_h": "h", "grad_create_graph": "x", "backward_create_graph": "xy",
             "tg_grad": "x"}[path]
    calls = [("out", np.array(1.0))] if kind == "root" else []

    def hooked(hooks, g):
        for name, fn in hooks:
            calls.append((name, g))
            g = g if fn is None else fn(g)
        return g
    retains = kind in ("retain", "retain_then_hook")
    gh = hooked(h_hooks, scale * GH)
    retained = gh if retains else None
    gx = hooked(x_hooks, 3 * gh) if "x" in wants else None
    gy = hooked(y_hooks, scale * 3 * X0) if "y" in wants else None
    second = None
    if path == "grad_create_graph":
        # d/dx sum(gx): the hooks are affine and recorded: back through the
        # x hooks (slope 1 or 10), 3, the h hooks, and d(gh)/dh = 2 * scale;
        # at h and at x the hooks run again on what arrives there
        slope = lambda hooks: np.prod([10.0 for _, fn in hooks if fn is times10])  # noqa: E731
        vh = hooked(h_hooks, np.full(2, 6 * scale * slope(x_hooks) * slope(h_hooks)))
        if retains:
            retained = retained + vh
        second = hooked(x_hooks, 3 * vh)
    return dict(x=gx, y=gy, h=gh if wants == "h" else None, retained=retained, calls=calls,
                second=second)


def _run(lib, kind, path):
    """Run ``path`` on the program of ``kind`` with ``lib``; what it gave."""
    log = []
    if path == "tg_grad":
        if lib is tg:
            def f(xv):
                _, _, _, out = _fresh(tg, kind, log, xv)
                return out
            gx = tg.grad(f)(X0.copy())
        else:
            from torch.func import grad as fgrad

            def f(xv):
                _, _, _, out = _fresh(lib, kind, log, xv)
                return out
            gx = fgrad(f)(lib.tensor(X0.tolist(), dtype=lib.float64)).detach().numpy()
        return dict(x=np.asarray(gx), y=None, h=None, retained=None, calls=log, second=None)
    x, y, h, out = _program(lib, kind, log)
    res = dict(x=None, y=None, h=None, retained=None, second=None, calls=log)
    grad = lib.autograd.grad
    if path == "backward":
        out.backward()
        res.update(x=x.grad, y=y.grad)
    elif path == "backward_inputs":
        out.backward(inputs=[x])
        res.update(x=x.grad, y=y.grad)
    elif path == "grad":
        (res["x"],) = grad(out, [x])
        assert x.grad is None and y.grad is None
    elif path == "grad_xy":
        res["x"], res["y"] = grad(out, [x, y])
        assert x.grad is None and y.grad is None
    elif path == "grad_h":
        (res["h"],) = grad(out, [h])
        assert x.grad is None and y.grad is None
    elif path == "grad_create_graph":
        (gx,) = grad(out, [x], create_graph=True)
        assert gx.requires_grad
        res["x"] = gx
        (res["second"],) = grad(gx.sum(), [x])
    elif path == "backward_create_graph":
        out.backward(create_graph=True)
        assert x.grad.requires_grad
        res.update(x=x.grad, y=y.grad)
    if kind in ("retain", "retain_then_hook"):
        res["retained"] = h.grad
    res = {k: _np(v) if k != "calls" else v for k, v in res.items()}
    if path == "backward_create_graph":
        # a .grad that carries its graph holds that graph (and so the tape's
        # epoch) as long as the leaf lives: break the cycle, as PyTorch advises
        x.grad = y.grad = h.grad = None
    return res


def _fresh(lib, kind, log, xv):
    """The program on a given x (``tg.grad``'s leaf), hooks on the way."""
    y = lib.tensor(Y0.tolist())
    h = xv * 3.0
    out = (h * h).sum() + (h * y).sum()
    _hook_up(kind if kind.startswith(("inter", "root", "none")) else "none", log,
             xv, y, h, out)
    return xv, y, h, out


def _np(v):
    if v is None:
        return None
    if hasattr(v, "detach"):
        v = v.detach()
    return np.array(v.tolist() if hasattr(v, "tolist") else v, dtype=float)


def _same(got, want, what):
    if want is None:
        assert got is None, f"{what}: expected None, got {got}"
        return
    assert got is not None, f"{what}: expected {want}, got None"
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=what)


def _compare(got, want, case):
    for k in ("x", "y", "h", "retained"):
        _same(got[k], want[k], f"{case}: {k}")
    if want.get("second") is not None and got.get("second") is not None:
        _same(got["second"], want["second"], f"{case}: second order")
    assert [n for n, _ in got["calls"]] == [n for n, _ in want["calls"]], \
        f"{case}: hook calls {got['calls']} != {want['calls']}"
    for (n, g), (_, w) in zip(got["calls"], want["calls"]):
        _same(np.asarray(g), np.asarray(w), f"{case}: what hook {n} saw")


CASES = [(k, p) for k in KINDS for p in PATHS
         # tg.grad makes its own leaf: hooks on leaves do not apply there
         if not (p == "tg_grad" and k in ("leaf_replace", "leaf_observe", "leaf_chain",
                                            "off_path", "retain", "retain_then_hook"))]


@pytest.mark.parametrize("kind, path", CASES)
def test_hooks_on_every_path_by_hand(kind, path):
    got = _run(tg, kind, path)
    want = _expected(kind, path)
    if path == "tg_grad":
        want = dict(want, y=None, retained=None, second=None)
    _compare(got, want, f"{kind} x {path}")
    if path == "grad_create_graph":
        _same(got["second"], want["second"], f"{kind} x {path}: second order")


@pytest.mark.parametrize("kind, path", CASES)
def test_hooks_on_every_path_as_pytorch(kind, path):
    torch = pytest.importorskip("torch")
    torch.set_default_dtype(torch.float64)
    try:
        want = _run(torch, kind, path)
    finally:
        torch.set_default_dtype(torch.float32)
    got = _run(tg, kind, path)
    _compare(got, want, f"{kind} x {path} (PyTorch)")


def test_the_issue_example():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.register_hook(lambda g: g * 10)
    (g,) = tg.autograd.grad((h * h).sum(), x)
    np.testing.assert_allclose(g.numpy(), [180.0, 360.0])
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: g + 1)
    (g,) = tg.autograd.grad((x * x).sum(), x)
    np.testing.assert_allclose(g.numpy(), [3.0, 5.0])
    (g,) = tg.autograd.grad((x * x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [3.0, 5.0])


def test_retained_gradient_accumulates_over_autograd_grad_calls():
    # PyTorch fills retained gradients in autograd.grad too, and accumulates
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.retain_grad()
    s = (h * h).sum()
    tg.autograd.grad(s, x, retain_graph=True)
    tg.autograd.grad(s, x)
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0])
    assert x.grad is None


def test_input_that_retains_gets_its_gradient_once():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.retain_grad()
    (h * h).sum().backward(inputs=[h])
    np.testing.assert_allclose(h.grad.numpy(), [6.0, 12.0])
    assert x.grad is None


def test_hooks_below_a_non_leaf_input_do_not_run():
    calls = []
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    k = x * 2.0
    k.register_hook(lambda g: calls.append("k"))
    x.register_hook(lambda g: calls.append("x"))
    h = k * 3.0
    h.register_hook(lambda g: calls.append("h") or g * 10)
    (h * h).sum().backward(inputs=[h])
    assert calls == ["h"]
    np.testing.assert_allclose(h.grad.numpy(), [120.0, 240.0])
    assert x.grad is None


def test_jacobian_runs_hooks_per_vector():
    calls = []

    def f(x):
        h = x * 3.0
        h.register_hook(lambda g: calls.append(g.numpy().copy()) or g * 10)
        return h * h
    J = tg.jacobian(f)(np.array([1.0, 2.0]))
    np.testing.assert_allclose(J, np.diag([180.0, 360.0]))
    assert len(calls) == 2


def test_anomaly_mode_checks_autograd_grad_too():
    x = tg.tensor([0.0, 1.0], requires_grad=True)
    with tg.detect_anomaly(), np.errstate(divide="ignore"):
        y = tg.log(x).sum()
        with pytest.raises(RuntimeError, match="LogBackward"):
            tg.autograd.grad(y, x)


def test_anomaly_mode_with_hooks_on_every_path():
    for path in ("backward", "grad"):
        x = tg.tensor([1.0, 2.0], requires_grad=True)
        with tg.detect_anomaly():
            h = x * 3.0
            h.register_hook(lambda g: g * 10)
            s = (h * h).sum()
            if path == "backward":
                s.backward()
                g = x.grad
            else:
                (g,) = tg.autograd.grad(s, x)
        np.testing.assert_allclose(g.numpy(), [180.0, 360.0])


# -- a second backward ---------------------------------------------------------------------
FREED = "Trying to backward through the graph a second time"


def _tape_state():
    tape = current()
    n = tape.n
    return (n, tape.freed[:n].copy(), tape.spent[:n].copy(), tape.n_freed, tape.n_spent,
            len(tape.hooks), tape.live_tok())


def _same_tape(a, b):
    assert a[0] == b[0] and a[3:] == b[3:]
    assert np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])


#: graphs that save nothing: PyTorch backpropagates through them any number of
#: times (verified with torch 2.13); x = [1, 2]
NOTHING_SAVED = {
    "neg": (lambda x: (-x).sum(), [-1.0, -1.0]),
    "add_const": (lambda x: (x + 1.0).sum(), [1.0, 1.0]),
    "rsub": (lambda x: (1.0 - x).sum(), [-1.0, -1.0]),
    "x_plus_x": (lambda x: (x + x).sum(), [2.0, 2.0]),
    "mean": (lambda x: x.mean(), [0.5, 0.5]),
    "slice": (lambda x: x[1:].sum(), [0.0, 1.0]),
    "index0": (lambda x: (-x)[0], [-1.0, 0.0]),
    "reshape_T": (lambda x: x.reshape(1, 2).T.sum(), [1.0, 1.0]),
    "concat": (lambda x: np.concatenate([x, x]).sum(), [2.0, 2.0]),
    "cumsum": (lambda x: np.cumsum(x).sum(), [2.0, 1.0]),
    "flip_pad": (lambda x: np.pad(np.flip(x), 1).sum(), [1.0, 1.0]),
    "broadcast": (lambda x: np.broadcast_to(x, (3, 2)).sum(), [3.0, 3.0]),
}

#: graphs that save values: a second backward raises, as PyTorch's
SAVED = {
    "square": lambda x: (x * x).sum(),
    "mul_const": lambda x: (x * 3.0).sum(),     # PyTorch saves the wrapped scalar
    "div_const": lambda x: (x / 2.0).sum(),
    "exp": lambda x: np.exp(x).sum(),
    "abs": lambda x: np.abs(x).sum(),
    "relu": lambda x: np.maximum(x, 0.0).sum(),
    "adv_index": lambda x: x[np.array([0, 1])].sum(),
    "sort": lambda x: np.sort(x).sum(),
    "matmul": lambda x: (x @ np.ones(2)),
    "mixed": lambda x: (-x).sum() + (x * x).sum(),
}


@pytest.mark.parametrize("name", sorted(NOTHING_SAVED))
def test_second_backward_through_a_graph_that_saved_nothing(name):
    f, g1 = NOTHING_SAVED[name]
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    s = f(x)
    s.backward()
    s.backward()
    s.backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array(g1))
    (g,) = tg.autograd.grad(s, x)
    np.testing.assert_allclose(g.numpy(), g1)


@pytest.mark.parametrize("name", sorted(NOTHING_SAVED))
def test_second_backward_that_saved_nothing_as_pytorch(name):
    torch = pytest.importorskip("torch")
    f, g1 = NOTHING_SAVED[name]
    t = {"concat": lambda x: torch.cat([x, x]).sum(),
         "cumsum": lambda x: x.cumsum(0).sum(),
         "flip_pad": lambda x: torch.nn.functional.pad(x.flip(0), (1, 1)).sum(),
         "broadcast": lambda x: x.expand(3, 2).sum()}.get(name, f)
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    s = t(x)
    s.backward()
    s.backward()
    s.backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array(g1))


@pytest.mark.parametrize("name", sorted(SAVED))
def test_second_backward_through_a_graph_that_saved_values(name):
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    s = SAVED[name](x)
    s.backward()
    first = x.grad.numpy().copy()
    before = _tape_state()
    with pytest.raises(RuntimeError, match=FREED) as info:
        s.backward()
    assert "retain_graph=True" in str(info.value)
    np.testing.assert_array_equal(x.grad.numpy(), first)   # nothing accumulated
    _same_tape(before, _tape_state())                       # nothing freed or spent
    with pytest.raises(RuntimeError, match=FREED):
        tg.autograd.grad(s, x)
    np.testing.assert_array_equal(x.grad.numpy(), first)


@pytest.mark.parametrize("name", sorted(SAVED))
def test_second_backward_that_saved_values_as_pytorch(name):
    torch = pytest.importorskip("torch")
    t = {"exp": lambda x: x.exp().sum(), "abs": lambda x: x.abs().sum(),
         "relu": lambda x: x.relu().sum(), "adv_index": lambda x: x[torch.tensor([0, 1])].sum(),
         "sort": lambda x: x.sort().values.sum(),
         "matmul": lambda x: x @ torch.ones(2, dtype=torch.float64)}.get(name, SAVED[name])
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    s = t(x)
    s.backward()
    with pytest.raises(RuntimeError, match=FREED):
        s.backward()


def test_second_backward_that_saved_nothing_runs_hooks_again():
    calls = []
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = -x
    h.register_hook(lambda g: calls.append(1))
    s = h.sum()
    s.backward()
    s.backward()
    assert calls == [1, 1]
    np.testing.assert_allclose(x.grad.numpy(), [-2.0, -2.0])


def test_a_part_that_saved_nothing_stays_differentiable():
    # PyTorch: s2's backward frees the mul's saved values, not the negation
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = -x
    s1 = h.sum()
    s2 = (h * h).sum()
    s2.backward()
    s1.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * X0 - 1)
    x.grad = None
    y = x * x
    y.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        (y * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * X0)


def test_loop_of_backwards_still_resets_the_tape():
    # a graph that saved something is spent whole: the tape resets as before
    import threading
    seen = []

    def body():
        x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        for _ in range(3):
            (x * x).sum().backward()
            seen.append(current.__globals__["_local"].tape.all_freed)
        s = (-x).sum()
        s.backward()
        seen.append(current.__globals__["_local"].tape.all_freed)  # s can still run
        s.backward()
        seen.append(x.grad.numpy().tolist())
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [True, True, True, False, [4.0, 10.0, 16.0]]


def test_autograd_grad_frees_no_record_below_its_inputs():
    # PyTorch runs no node below autograd.grad's inputs: k's graph stays
    y = tg.tensor([1.0, 2.0], requires_grad=True)
    k = np.exp(y)
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (g,) = tg.autograd.grad((k * x).sum(), x)
    np.testing.assert_allclose(g.numpy(), np.exp([1.0, 2.0]))
    k.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), np.exp([1.0, 2.0]))


# -- error paths: the message, and nothing changed -----------------------------------------
def test_hook_error_in_autograd_grad_changes_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.grad = tg.tensor([1.0, 1.0])
    h = x * 3.0
    h.retain_grad()
    fail = [True]

    def hook(g):
        if fail[0]:
            raise ValueError("boom")
        return g * 10
    h.register_hook(hook)
    s = (h * h).sum()
    before = _tape_state()
    with pytest.raises(ValueError, match="boom"):
        tg.autograd.grad(s, x)
    _same_tape(before, _tape_state())
    assert h.grad is None
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])
    fail[0] = False
    (g,) = tg.autograd.grad(s, x)               # the graph is still whole
    np.testing.assert_allclose(g.numpy(), [180.0, 360.0])
    np.testing.assert_allclose(h.grad.numpy(), [60.0, 120.0])


def test_leaf_hook_error_in_backward_inputs_changes_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: np.ones(3))
    s = (x * x).sum()
    before = _tape_state()
    with pytest.raises(RuntimeError, match=r"returned a gradient of shape \(3,\)"):
        s.backward(inputs=[x])
    _same_tape(before, _tape_state())
    assert x.grad is None


def test_hook_shape_error_with_create_graph_changes_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    h.register_hook(lambda g: tg.tensor(np.ones(3)))
    s = (h * h).sum()
    with pytest.raises(RuntimeError, match=r"on the output of MulScalarBackward returned a "
                                           r"gradient of shape \(3,\)"):
        tg.autograd.grad(s, x, create_graph=True)
    assert x.grad is None
    with pytest.raises(RuntimeError, match="returned a gradient of shape"):
        s.backward(create_graph=True)
    assert x.grad is None


def test_unused_input_error_runs_the_walk_first_as_pytorch():
    # PyTorch's engine runs, fills retained gradients and frees the graph,
    # then raises for the unused input
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0
    calls = []
    h.register_hook(lambda g: calls.append(1))
    h.retain_grad()
    s = (h * h).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        tg.autograd.grad(s, [x, y])
    assert calls == [1]
    np.testing.assert_allclose(h.grad.numpy(), [6.0, 12.0])
    with pytest.raises(RuntimeError, match=FREED):
        s.backward()


_CUBE = []


def _opaque_cube_derivative(x, y):
    return 3.0 * x.real * x    # an attribute: Numba compiles it, tapegrad cannot derive it


def _cube():
    """x^3 as a tg.elementwise op whose derivative cannot be derived: no
    differentiable backward formula for create_graph, so its gradients are
    one node."""
    if not _CUBE:
        _CUBE.append(tg.elementwise(lambda x: x * x * x, derivative=_opaque_cube_derivative,
                                    name="cube"))
    return _CUBE[0]


def test_create_graph_fallback_refuses_a_hook_that_replaces_a_gradient():
    cube = _cube()
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    h.register_hook(lambda g: g * 10)
    s = cube(h).sum()
    with pytest.raises(NotImplementedError, match="a tensor hook replaced a gradient"):
        tg.autograd.grad(s, x, create_graph=True)
    assert x.grad is None
    # a hook that only looks is fine there: the gradient is differentiable once more
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    s = cube(h).sum()
    (g,) = tg.autograd.grad(s, x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 24 * X0 ** 2)
    assert len(seen) == 1
    with pytest.raises(NotImplementedError, match="op cube .* has no second derivative"):
        tg.autograd.grad(g.sum(), x)
