"""The package's layers: every import, at module level or inside a function,
points to the same layer or one below.

Layers, lowest first (docs/architecture.md):

* kernels -- op codes, the op table, every ``@njit`` kernel (``kernels/``);
* core -- the registry, the tape, grad mode, ``Tensor`` (which calls the
  layers above only through functions they bind into ``tensor.bound``);
* ops -- the differentiable operations, the NumPy protocol, and ``tg.Function``
  (ops written with their own backward: some ops are built on it);
* engine -- graph nodes, hooks, anomaly mode, backward;
* transforms -- grad/jacobian/vjp, forward mode, second order, sparsity;
* trace -- the trace tape, replay, traced functions, tape files;
* debug -- graph drawing, tape statistics;
* api -- the package namespace, ``tg.linalg``, ``python -m tapegrad``.

The imports are read from the sources with ``ast``, so a lazy import inside
a function counts as much as one at the top of a module.
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tapegrad"

LAYERS = [
    ("kernels", lambda m: m.startswith("kernels")),
    ("core", lambda m: m in ("ops.registry", "grad_mode", "tape_liveness", "tape_writes", "tape",
                           "tensor", "index_maps")),
    ("ops", lambda m: m.startswith("ops") or m in ("views", "function")),
    ("engine", lambda m: m in ("graph", "hooks", "anomaly", "fused_backward", "fused_codegen",
                                  "autograd")),
    ("transforms", lambda m: m in ("transform_base", "tensor_grads", "functional", "forward_host",
                                   "forward", "second_decompositions", "second_rules", "second",
                                   "sparsity", "checkpointing", "create_graph_index",
                                   "create_graph_kinds", "create_graph_linalg", "create_graph")),
    ("trace", lambda m: m in ("trace_tape", "trace_batch", "trace_replay", "traced_tangents", "traced_function",
                              "traced_call", "tapefile_screen", "tapefile_checks", "tapefile",
                              "tracing")),
    ("debug", lambda m: m in ("viz", "stats")),
    ("api", lambda m: m in ("", "linalg", "__main__", "dask_support")),
]

#: import cycles inside one layer that are accepted (each module of a cycle
#: found must lie in one of these sets: a new cycle, or a larger one, fails)
KNOWN_CYCLES = []


def _modules():
    mods = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _imports(name, path, mods):
    """The package modules ``name`` imports, anywhere in its source."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "tapegrad":
                mod = node.module[len("tapegrad"):].lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}" if mod else alias.name
                targets.append(sub if sub in mods else mod)
        elif isinstance(node, ast.Import):
            targets = [a.name[len("tapegrad"):].lstrip(".") for a in node.names
                       if a.name.split(".")[0] == "tapegrad"]
        out.update(t for t in targets if t in mods and t != name)
    return out


def _layer(name):
    for i, (_, member) in enumerate(LAYERS):
        if member(name):
            return i
    raise AssertionError(f"module tapegrad.{name} is in no layer: add it to LAYERS "
                         "(tests/test_layers.py) and to docs/architecture.md")


def _graph():
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def test_every_module_has_a_layer():
    for name in _graph():
        _layer(name)


def test_imports_point_down():
    up = [f"tapegrad.{a} ({LAYERS[_layer(a)][0]}) imports tapegrad.{b} "
          f"({LAYERS[_layer(b)][0]})"
          for a, outs in _graph().items() for b in outs if _layer(b) > _layer(a)]
    assert not up, "imports that point up a layer:\n" + "\n".join(sorted(up))


def _cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_new_import_cycles():
    for comp in _cycles(_graph()):
        assert any(comp <= known for known in KNOWN_CYCLES), \
            f"import cycle {sorted(comp)}: break it (bind the upper module's function " \
            "into the lower one, as tensor.bound does) or move the shared code down"


def test_the_checker_sees_function_level_imports(tmp_path):
    # the walk reads imports inside functions too: a test that could not fail
    # would protect nothing
    src = "def f():\n    from .tracing import trace\n    return trace\n"
    f = tmp_path / "probe.py"
    f.write_text(src)
    assert _imports("probe", f, {"tracing": None, "probe": None}) == {"tracing"}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [{"a", "b"}]
