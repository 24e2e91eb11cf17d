"""Gradients with respect to tensors written in place without a record, against PyTorch.

A write no graph records (under ``no_grad``, through ``.data``, through
``detach()``, into a view of the tensor) changes no history: a graph recorded
before it reads the value as it was, and the gradient with respect to the
tensor is the one with respect to that value, plus what uses recorded after
the write contribute.  A view written so (itself, or through its base) starts
a new history (PyTorch makes its ``grad_fn`` anew from its base's), so only
its uses after the write count.

The programs here: leaves ``a`` (5 elements) and ``c`` (3), an input ``x``
made from ``a`` (the leaf itself, a product, ``exp``, a view of a product, a
view of the leaf), an output that reads ``x`` (through ``tanh``, which saves
its result and not x), a write into x or into a view of x, sometimes uses of
x after the write, then ``tg.autograd.grad`` or ``backward(inputs=)``, with
``create_graph`` and ``allow_unused`` or not; with ``create_graph=True`` the
gradient is differentiated again.  Each runs on tapegrad (on a fresh thread:
its own tape) and on PyTorch, float64; values and errors are compared.  Then:
saved values written (the in-place error), hooks and ``retain_grad``,
``grad_fn``, writes into the base of a view input, and a compaction between
the write and the gradient.

PyTorch's ``.data`` writes skip its version counter (a graph that saved the
value silently reads the new one); tapegrad's are the same write as under
``no_grad``, so the PyTorch side runs them that way (as the fuzzer's oracle
does, tests/inplace_programs.py).
"""
import numpy as np
import pytest

from oracle import in_fresh_thread

torch = pytest.importorskip("torch")

import tapegrad as tg  # noqa: E402  (after the skip)

# backward(inputs=[x]) that does not reach a non-leaf x leaves x.grad unset: reading it
# warns, in both libraries
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

RTOL = 1e-12
INPLACE = "modified by an inplace operation"
UNUSED = "appears to not have been used in the graph"


def _no_grad(lib):
    return tg.no_grad() if lib == "tg" else torch.no_grad()


def _data_write(t, lib):
    """Where a ``.data`` write goes, and in which grad mode: t.data in tapegrad
    (grad mode on), t under no_grad in PyTorch (see the module docstring)."""
    import contextlib
    return (t.data, contextlib.nullcontext()) if lib == "tg" else (t, torch.no_grad())


def _write(kind, t, lib):
    """Write into t in place, with no record."""
    if kind == "no_grad_iadd":
        with _no_grad(lib):
            t += 0.5
    elif kind == "no_grad_imul":
        with _no_grad(lib):
            t *= -2.0
    elif kind == "no_grad_set":
        with _no_grad(lib):
            t[0] = 9.0
    elif kind == "data_isub":
        d, mode = _data_write(t, lib)
        with mode:
            d -= 0.5
    elif kind == "data_set":
        d, mode = _data_write(t, lib)
        with mode:
            d[1] = -4.0
    elif kind == "detach_set":
        t.detach()[0] = 7.0
    elif kind == "detach_imul":
        d = t.detach()
        d *= 3.0
    elif kind == "view_iadd":          # into a view of t
        with _no_grad(lib):
            t[1:3] += 1.0
    elif kind == "view_detach_set":    # into a view of t, through detach()
        t[1:3].detach()[1] = 5.0
    else:
        raise ValueError(kind)


WRITES = ("no_grad_iadd", "no_grad_imul", "no_grad_set", "data_isub", "data_set",
          "detach_set", "detach_imul", "view_iadd", "view_detach_set")
INPUTS = ("leaf", "nonleaf", "exp", "view", "leaf_view")


def _input(kind, a, lib):
    m = tg if lib == "tg" else torch
    if kind == "leaf":
        return a
    if kind == "nonleaf":
        return a[1:4] * 3.0
    if kind == "exp":                  # its own node saves its value
        return m.exp(a[1:4])
    if kind == "view":                 # a view of a non-leaf
        return (a * 3.0)[1:4]
    if kind == "leaf_view":
        return a[1:4]
    raise ValueError(kind)


def _arrays(ts):
    return [None if t is None else np.array(t.detach().numpy(), dtype=np.float64, copy=True)
            for t in ts]


def _program(lib, stage, inp, write, api, create_graph, allow_unused, later, op="tanh"):
    """One program (see the module docstring); ``stage`` gets the name of each
    step as it starts, so that an error tells where it came from."""
    m = tg if lib == "tg" else torch

    def leaf(v):
        if lib == "tg":
            return tg.tensor(np.array(v), requires_grad=True)
        return torch.tensor(np.array(v), dtype=torch.float64, requires_grad=True)
    a = leaf([0.3, -0.7, 1.1, 0.5, -0.2])
    c = leaf([1.5, -0.5, 2.0])
    u = leaf([1.0, 2.0, 3.0])                     # never used
    x = _input(inp, a, lib)
    xs = x if inp != "leaf" else x[1:4]           # the three elements the output reads
    y = (getattr(m, op)(xs) * c).sum()
    _write(write, x, lib)
    if later:                                     # uses of x after the write
        y = y + (xs * c).sum() if inp != "leaf" else y + (x[1:4] * c).sum()
    out = {"x": _arrays([x])[0]}
    stage.append("first")
    if api == "grad":
        inputs = [x, u] if allow_unused else [x]
        gs = m.autograd.grad(y, inputs, create_graph=create_graph, allow_unused=allow_unused)
        g = gs[0]
        out["grads"] = _arrays(gs)
    else:
        y.backward(inputs=[x], create_graph=create_graph)
        g = x.grad
        out["grads"] = _arrays([g])
    if create_graph and g is not None and g.requires_grad:
        # the gradient differentiated again (it depends on a and c)
        stage.append("second")
        s = (g * g).sum()
        out["second"] = _arrays(m.autograd.grad(s, [a, c], allow_unused=True))
    return out


def _both(*args, **kw):
    """(error, stage, out) of tapegrad's run and of PyTorch's."""
    def one(lib):
        stage = ["forward"]
        try:
            return None, None, _program(lib, stage, *args, **kw)
        except RuntimeError as e:
            return str(e), stage[-1], None
    return in_fresh_thread(lambda: one("tg")), one("torch")


def _same(got, want):
    assert got.keys() == want.keys(), (got.keys(), want.keys())
    for k in want:
        a, b = got[k], want[k]
        if isinstance(b, list):
            assert len(a) == len(b), (k, a, b)
            for p, q in zip(a, b):
                if q is None or p is None:
                    assert p is None and q is None, (k, p, q)
                else:
                    np.testing.assert_allclose(p, q, rtol=RTOL, atol=1e-14, err_msg=k)
        else:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=1e-14, err_msg=k)


def _compare(tg_res, torch_res):
    (tg_err, tg_stage, tg_out), (torch_err, torch_stage, torch_out) = tg_res, torch_res
    if torch_err is not None:
        assert tg_err is not None, f"PyTorch raised {torch_err!r}, tapegrad gave {tg_out}"
        assert tg_stage == torch_stage, (tg_stage, tg_err, torch_stage, torch_err)
        for phrase in (INPLACE, UNUSED):
            if phrase in torch_err:
                assert phrase in tg_err, (tg_err, torch_err)
        return "error"
    assert tg_err is None, f"tapegrad raised {tg_err!r}; PyTorch gave {torch_out}"
    _same(tg_out, torch_out)
    return "ok"


@pytest.mark.parametrize("inp", INPUTS)
@pytest.mark.parametrize("write", WRITES)
def test_grad_with_respect_to_a_written_input(inp, write):
    """tg.autograd.grad and backward(inputs=), create_graph and allow_unused both
    ways, with and without uses after the write."""
    outcomes = []
    for api, create_graph, allow_unused, later in (
            ("grad", False, False, False), ("grad", False, True, True),
            ("grad", True, True, False), ("grad", True, False, True),
            ("backward", False, False, True), ("backward", True, False, False),
            ("backward", False, False, False), ("backward", True, False, True)):
        if api == "backward" and allow_unused:
            continue
        outcomes.append(_compare(*_both(inp, write, api, create_graph, allow_unused, later)))
    if inp in ("leaf", "nonleaf"):
        # not a view, and no saved value written: the gradient is always there
        assert set(outcomes) == {"ok"}, outcomes
    if inp == "exp":
        # exp's node saved x: backward(inputs=[x]) runs it and raises, autograd.grad
        # does not, unless a second derivative goes through it (create_graph)
        assert outcomes == ["ok", "ok", "error", "error", "error", "error", "error", "error"], \
            outcomes


@pytest.mark.parametrize("inp", ("nonleaf", "view", "leaf"))
@pytest.mark.parametrize("write", ("no_grad_iadd", "detach_set", "view_iadd"))
@pytest.mark.parametrize("create_graph", (False, True))
def test_a_saved_written_value_raises_as_in_pytorch(inp, write, create_graph):
    """sin saves x: a gradient that needs the value written since raises PyTorch's
    in-place error, through either entry point (x a leaf or not; not a view)."""
    for api in ("grad", "backward"):
        res = _both(inp, write, api, create_graph, False, False, op="sin")
        outcome = _compare(*res)
        if inp == "view":
            # a view written so has a new history, which the output does not reach:
            # grad says so (allow_unused is False), backward(inputs=) leaves x.grad None
            assert outcome == ("error" if api == "grad" else "ok"), outcome
            assert api != "grad" or UNUSED in res[0][0], res[0][0]
        else:
            assert outcome == "error" and INPLACE in res[0][0], res[0][0]


def _hooked(lib, when, inp):
    """A hook and retain_grad on x registered before or after the write."""
    m = tg if lib == "tg" else torch
    if lib == "tg":
        a = tg.tensor(np.array([0.3, -0.7, 1.1, 0.5, -0.2]), requires_grad=True)
    else:
        a = torch.tensor([0.3, -0.7, 1.1, 0.5, -0.2], dtype=torch.float64, requires_grad=True)
    x = _input(inp, a, lib)
    seen = []

    def hook(g):
        seen.append(np.array(g.numpy(), copy=True))

    def register():
        x.register_hook(hook)
        x.retain_grad()
    if when == "before":
        register()
    y = (m.tanh(x * 2.0) * 1.5).sum()
    _write("no_grad_imul", x, lib)
    if when == "after":
        register()
    y = y + (x * x).sum() * 0.5
    y.backward()
    return seen, _arrays([x.grad, a.grad])


# (not views: PyTorch 2.13 crashes registering a hook on a view written under no_grad)
@pytest.mark.parametrize("inp", ("nonleaf",))
@pytest.mark.parametrize("when", ("before", "after"))
def test_hooks_and_retain_grad_on_a_written_input(inp, when):
    """A hook and retain_grad see every use of the tensor, before the write and after."""
    got = in_fresh_thread(lambda: _hooked("tg", when, inp))
    want = _hooked("torch", when, inp)
    assert len(got[0]) == len(want[0])
    for p, q in zip(got[0], want[0]):
        np.testing.assert_allclose(p, q, rtol=RTOL)
    _same({"g": got[1]}, {"g": want[1]})


def _grad_fn_names(lib):
    m = tg if lib == "tg" else torch
    if lib == "tg":
        a = tg.tensor(np.array([0.3, -0.7]), requires_grad=True)
    else:
        a = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    x = m.exp(a)
    before = x.grad_fn
    with _no_grad(lib):
        x *= 2.0
    z = x * 3.0

    def name(node):
        return type(node).__name__.rstrip("0123456789") if lib == "torch" else node.name()
    return (name(x.grad_fn), x.grad_fn == before, z.grad_fn.next_functions[0][0] == before)


def test_grad_fn_is_kept_by_a_write_without_a_record():
    """x.grad_fn, and the node later uses of x point to, stay x's node before the write."""
    assert in_fresh_thread(lambda: _grad_fn_names("tg")) == _grad_fn_names("torch")


def _base_written(lib, write, with_base):
    """x a view of b (a non-leaf); the write goes into b."""
    m = tg if lib == "tg" else torch
    if lib == "tg":
        a = tg.tensor(np.array([0.3, -0.7, 1.1, 0.5]), requires_grad=True)
    else:
        a = torch.tensor([0.3, -0.7, 1.1, 0.5], dtype=torch.float64, requires_grad=True)
    b = a * 3.0
    x = b[1:3]
    y = (m.tanh(x) * 2.0).sum() + (b * 1.5).sum()
    _write(write, b, lib)
    y = y + (x * 5.0).sum()
    gs = m.autograd.grad(y, [x, b] if with_base else [x])
    return _arrays(gs)


@pytest.mark.parametrize("write", ("no_grad_iadd", "no_grad_set", "detach_imul", "data_isub"))
@pytest.mark.parametrize("with_base", (False, True))
def test_view_of_a_base_written_without_a_record(write, with_base):
    """A write into b gives its view x a new history (only x's later uses count);
    b keeps its own, which every use of b and of x reaches."""
    got = in_fresh_thread(lambda: _base_written("tg", write, with_base))
    want = _base_written("torch", write, with_base)
    _same({"g": got}, {"g": want})


def test_written_input_after_the_tape_is_compacted():
    """The record a written tensor came from is found again after a compaction
    renumbers the tape (the marks of the write are renumbered with it)."""
    def run():
        a = tg.tensor(np.array([0.3, -0.7, 1.1]), requires_grad=True)
        junk = [a * 1.0 for _ in range(50)]      # records that die: compaction drops them
        x = a * 3.0
        y = (tg.tanh(x) * 2.0).sum()
        with tg.no_grad():
            x *= 2.0
        y = y + (x * x).sum()
        tape = x._tok.tape
        before = tape.n
        del junk
        tape.check_at = 0                         # the next op compacts
        z = a * 1.0
        assert tape.n < before, (tape.n, before)  # it did
        (g,) = tg.autograd.grad(y, [x])
        assert x.grad_fn.name() == "MulScalarBackward"   # its node before the write
        del z
        return g.numpy().copy(), a.numpy().copy()
    g, a0 = in_fresh_thread(run)
    a = torch.tensor(a0, dtype=torch.float64)
    x_old = a * 3.0
    x_new = x_old * 2.0
    want = 2.0 * (1 - torch.tanh(x_old) ** 2) + 2 * x_new
    np.testing.assert_allclose(g, want.numpy(), rtol=RTOL)


def _twice(lib):
    """Two gradients with respect to one non-leaf through two outputs (no writes)."""
    m = tg if lib == "tg" else torch
    if lib == "tg":
        a = tg.tensor(np.array([0.3, -0.7]), requires_grad=True)
    else:
        a = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    x = a * a
    g1 = m.autograd.grad((x * 2.0).sum(), [x])[0]
    g2 = m.autograd.grad((x * 5.0).sum(), [x])[0]
    g3 = m.autograd.grad((x * 5.0).sum(), [a])[0]     # runs x's record, frees it
    try:
        m.autograd.grad((x * 5.0).sum(), [a])
        raised = 0.0
    except RuntimeError as e:
        assert "a second time" in str(e)
        raised = 1.0
    return _arrays([g1, g2, g3]) + [np.array(raised)]


def test_gradient_with_respect_to_a_non_leaf_runs_nothing_below_it():
    """autograd.grad with respect to a non-leaf runs no record below it and
    frees none there (PyTorch runs no node below the inputs): a second
    gradient through a new output, and one down to the leaf, work."""
    got = in_fresh_thread(lambda: _twice("tg"))
    _same({"g": got}, {"g": _twice("torch")})
