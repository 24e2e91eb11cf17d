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
* tracing -- the trace tape, replay, traced functions, tape files;
* debug -- graph drawing, tape statistics;
* api -- the package namespace and the top-level modules (``tg.linalg``,
  ``tg.autograd``, ``python -m tapegrad``), and ``tapegrad.scipy``;
* integrations -- Dask (its workers warm up with ``python -m tapegrad``'s steps).

Each layer is a folder of the package (``tapegrad/core/``, ...), the api
layer its top level.

The imports are read from the sources with ``ast``, so a lazy import inside
a function counts as much as one at the top of a module.
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tapegrad"

#: the layers, lowest first: each is a folder of the package; the api layer
#: is the package's top-level modules (the namespaces users import) and
#: ``scipy/``, SciPy's names over the ops
LAYERS = ["kernels", "core", "ops", "engine", "transforms", "tracing", "debug", "api", "integrations"]
API_FOLDERS = ("scipy", "numpy")
#: the most modules the package's top level may hold (the rest live in the
#: layers' folders)
MAX_TOP_MODULES = 12

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
    folder = name.split(".")[0] if "." in name else ""
    if folder in LAYERS:
        return LAYERS.index(folder)
    if name in LAYERS:      # a layer's own __init__.py
        return LAYERS.index(name)
    if folder == "" or folder in API_FOLDERS or name in API_FOLDERS:
        return LAYERS.index("api")
    raise AssertionError(f"module tapegrad.{name} is in no layer: put it in one of the "
                         f"folders {[f for f in LAYERS if f != 'api']} (docs/architecture.md says which)")


def _graph():
    mods = _modules()
    return {name: _imports(name, path, mods) for name, path in mods.items()}


def test_every_module_has_a_layer():
    for name in _graph():
        _layer(name)


def test_the_top_level_is_the_namespaces():
    tops = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(tops) <= MAX_TOP_MODULES, tops
    folders = sorted(p.name for p in ROOT.iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    assert set(folders) <= set(LAYERS) | set(API_FOLDERS), \
        f"package folders that are no layer: {sorted(set(folders) - set(LAYERS) - set(API_FOLDERS))}"


def test_imports_point_down():
    up = [f"tapegrad.{a} ({LAYERS[_layer(a)]}) imports tapegrad.{b} "
          f"({LAYERS[_layer(b)]})"
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
