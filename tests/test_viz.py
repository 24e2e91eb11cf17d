"""tg.viz: DOT text of the graph, every record that reaches the output in it,
slots on multi-output edges, big graphs folded, rendering when available."""
import re
import shutil
import sys

import numpy as np
import pytest

import tapegrad as tg
from oracle import leaf

NODE = re.compile(r'^  (r\d+|hidden|leaf\d+) \[label="((?:[^"\\]|\\.)*)"(, [a-z]+="[^"]*")*\];$')
EDGE = re.compile(r'^  (r\d+|hidden) -> (r\d+|hidden)( \[label="(?:\d+|next trip)"[^\]]*\])?;$')
CLUSTER = re.compile(r'^  subgraph cluster_loop \{ label="loop: ([\d,]+) trips";')


def parse(dot):
    """A strict reading of what to_dot writes: nodes {id: label}, edges."""
    lines = dot.strip().splitlines()
    assert lines[0] == "digraph tapegrad {" and lines[-1] == "}"
    nodes, edges = {}, []
    for ln in lines[1:-1]:
        if ln.startswith(("  graph [", "  node [", "  edge [")) or CLUSTER.match(ln) or ln == "  }":
            continue
        if ln.startswith("    "):  # a box inside the loop's frame
            ln = ln[2:]
        m = NODE.match(ln)
        if m:
            nodes[m.group(1)] = m.group(2)
            continue
        m = EDGE.match(ln)
        assert m, f"unexpected DOT line {ln!r}"
        edges.append((m.group(1), m.group(2), m.group(3)))
    for s, d, _ in edges:
        assert s in nodes and d in nodes
    return nodes, edges


def records_reaching(y):
    """Records of the grad_fn nodes (and leaves) reaching y, via next_functions."""
    seen, recs, stack = set(), set(), [y.grad_fn]
    leaves = set()
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        if isinstance(n, tg.AccumulateGrad):
            leaves.add(n.variable._lrec)
            continue
        recs.add(n._rec)
        stack.extend(f for f, _ in n.next_functions)
    return recs, leaves


def test_every_record_reaching_the_output_is_drawn():
    rng = np.random.default_rng(1)
    W, b = leaf(rng.standard_normal((3, 2))), leaf(rng.standard_normal(2))
    x = tg.tensor(rng.standard_normal((4, 3)))
    h = tg.tanh(x @ W + b)
    p, q = tg.unbind(h, axis=1)
    loss = (tg.log_softmax(h, axis=1).sum() + (p * q).mean()) ** 2
    unrelated = tg.exp(W).sum()           # on the tape, not in loss's graph
    dot = tg.viz.to_dot(loss, params={"W": W, "b": b}, fold=False)
    nodes, edges = parse(dot)
    recs, leaves = records_reaching(loss)
    assert {f"r{r}" for r in recs | leaves} == set(nodes)
    assert f"r{unrelated._rec}" not in nodes
    labels = "\n".join(nodes.values())
    for name in ("MmBackward", "TanhBackward", "UnbindBackward", "LogSoftmaxBackward",
                 "MulBackward", "AddBackward"):
        assert name in labels
    assert nodes[f"r{W._lrec}"] == "W\\n(3, 2)" and nodes[f"r{b._lrec}"] == "b\\n(2,)"
    assert "(4, 2)" in nodes[f"r{h._rec}"]         # TanhBackward's output shape
    unbind = next(k for k, v in nodes.items() if v.startswith("UnbindBackward"))
    slots = sorted(lab for s, d, lab in edges if s == unbind)
    assert slots == [' [label="0"]', ' [label="1"]']
    # edges are the graph's edges, in data-flow direction
    for node in (loss.grad_fn,):
        for nxt, _ in node.next_functions:
            if nxt is not None:
                assert (f"r{nxt._rec}", f"r{node._rec}", None) in edges


def test_output_that_is_a_leaf_and_errors():
    x = leaf([1.0, 2.0])
    nodes, edges = parse(tg.viz.to_dot(x, params={"x": x}))
    assert list(nodes.values()) == ["x\\n(2,)"] and not edges
    with pytest.raises(RuntimeError, match="does not require grad"):
        tg.viz.to_dot(tg.tensor([1.0]))
    y = (x * 2.0).sum()
    y.backward()
    z = (x * 3.0).sum()                   # the tape is reused
    with pytest.raises(RuntimeError, match="freed"):
        tg.viz.to_dot(y)
    assert "MulScalarBackward" in tg.viz.to_dot(z)


def test_long_chain_is_folded():
    w = leaf(1.0)
    y = w
    for _ in range(100_000):
        y = y * 1.0000001
    nodes, edges = parse(tg.viz.to_dot(y))
    assert len(nodes) == 4                 # leaf, first, "× 99,998", last
    assert any("MulScalarBackward × 99,998" in v for v in nodes.values())
    assert len(edges) == 3


def test_unfolded_chain_is_capped():
    w = leaf(1.0)
    y = w
    for _ in range(1000):
        y = y * 1.0000001
    nodes, edges = parse(tg.viz.to_dot(y, fold=False, max_nodes=10))
    assert len(nodes) == 10 and "992 more boxes: MulScalarBackward × 992" in nodes["hidden"]
    assert ("hidden", f"r{y._rec - 7}", None) in edges and ("r0", "hidden", None) in edges


def test_chain_with_a_side_input_folds_and_keeps_the_edge():
    w, x = leaf(0.5), leaf(2.0)
    y = x
    for _ in range(50):
        y = y * w
    nodes, edges = parse(tg.viz.to_dot(y, params={"w": w, "x": x}))
    assert len(nodes) == 5
    wid = f"r{w._lrec}"
    assert len([e for e in edges if e[0] == wid]) == 3   # into first, × 48, last


def test_big_graph_is_capped_and_keeps_the_leaves():
    x = leaf(0.5)
    y = x
    for _ in range(2000):
        y = y * 0.999 + tg.sin(y) * 0.001
    nodes, edges = parse(tg.viz.to_dot(y, params={"x": x}, max_nodes=40, roll=False))
    assert len(nodes) <= 40
    assert "more boxes" in nodes["hidden"] and "SinBackward" in nodes["hidden"]
    assert nodes[f"r{x._lrec}"] == "x\\n()"
    assert nodes[f"r{y._rec}"].startswith("AddBackward")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
def test_render_and_parse_with_graphviz(tmp_path):
    graphviz = pytest.importorskip("graphviz")
    x = leaf([1.0, 2.0])
    a, b = tg.unbind(tg.sin(x))
    y = a * b + tg.exp(x).sum()
    dot = tg.viz.to_dot(y, params={"x": x})
    plain = graphviz.Source(dot).pipe(format="plain").decode()   # dot parses it
    names = {ln.split()[1] for ln in plain.splitlines() if ln.startswith("node ")}
    recs, leaves = records_reaching(y)
    assert names == {f"r{r}" for r in recs | leaves}
    out = tg.viz.render(y, tmp_path / "g.svg", params={"x": x})
    assert (tmp_path / "g.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert out.endswith("g.svg")


def test_render_without_graphviz_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "graphviz", None)   # import fails
    x = leaf([1.0])
    with pytest.raises(ImportError, match=r"graphviz.*tapegrad\[viz\]"):
        tg.viz.render(x * 2.0, tmp_path / "g.svg")


def test_debugging_page_examples_run(capsys):
    """docs/debugging.md: its Python blocks run, in order, in one namespace."""
    import pathlib
    from oracle import in_fresh_thread
    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "debugging.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 6
    assert (pathlib.Path(__file__).resolve().parents[1] / "docs" / "debugging_graph.svg").exists()

    def run():
        ns = {}
        for code in blocks:
            exec(compile(code, "debugging.md", "exec"), ns)
        return ns
    ns = in_fresh_thread(run)
    out = capsys.readouterr().out
    assert "dL/dy = tensor([0.54030231, -0.65364362, -0.91113026])" in out
    assert "Function 'LogBackward' returned inf values" in out
    assert "MulScalarBackward × 99,998" in out
    assert "tape statistics (this thread)" in out
    assert ns["stats"]["records"] == sum(ns["stats"]["by_op"].values())


def _rk4_loss(th, steps, dt=0.01):
    def rhs(u):
        x, y = u[0], u[1]
        return tg.stack([th[0] * x - th[1] * x * y, th[2] * x * y - th[3] * y])
    u, total = tg.tensor([1.0, 0.5]), 0.0
    for _ in range(steps):
        k1 = rhs(u)
        k2 = rhs(u + dt / 2 * k1)
        k3 = rhs(u + dt / 2 * k2)
        k4 = rhs(u + dt * k3)
        u = u + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        total = total + ((u - 1.0) ** 2).sum()
    return total


def test_a_python_loop_is_drawn_once_with_its_trip_count():
    th = tg.tensor([1.1, 0.4, 0.1, 0.4], requires_grad=True)
    small, big = _rk4_loss(th, 10), _rk4_loss(th, 60)
    counts = []
    for y, steps in ((small, 10), (big, 60)):
        dot = tg.viz.to_dot(y, params={"th": th})
        nodes, edges = parse(dot)
        trips = int(re.search(r'label="loop: ([\d,]+) trips"', dot).group(1).replace(",", ""))
        # the first step reads the constant start, so it is drawn apart
        assert trips == steps - 1
        assert any(e[2] and "next trip" in e[2] for e in edges)
        framed = dot[dot.index("subgraph cluster_loop"):].split("\n  }")[0]
        body = len(re.findall(r"^    r\d+ \[label", framed, re.M))
        counts.append((len(nodes), body))
        unrolled, _ = parse(tg.viz.to_dot(y, params={"th": th}, roll=False, max_nodes=10**6))
        assert len(nodes) < len(unrolled) / 3
    # the picture does not grow with the number of steps
    assert counts[0] == counts[1]
    assert counts[0][1] > 50   # an RK4 step: four right-hand sides and the update


def test_find_loop_prefers_the_trip_to_its_repeated_stages():
    from tapegrad.debug.loops import find_loop
    stage = [1, 2, 3]
    trip = stage * 4 + [4, 5]          # four alike stages, then the update
    sig = np.array([0] + trip * 6 + [9])
    loop = find_loop(sig)
    assert (loop.start, loop.period, loop.trips) == (1, len(trip), 6)
    assert find_loop(np.array([1, 2, 3, 4])) is None
    assert find_loop(np.array([5] * 50), min_period=2) is None   # a chain: folded instead
