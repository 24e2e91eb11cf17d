"""The generated docs table matches what the code dispatches; docs/reference.md's
derived-derivative example runs and prints what its comments say."""
import contextlib
import io
import pathlib
import re
import runpy
import textwrap

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_numpy_function_table_is_up_to_date():
    table = (ROOT / "docs" / "numpy_functions.md").read_text()
    if f"with NumPy {np.__version__}." not in table:
        pytest.skip("docs/numpy_functions.md was generated with another NumPy version")
    render = runpy.run_path(str(ROOT / "docs" / "make_function_table.py"))["render"]
    assert table == render(), \
        "docs/numpy_functions.md is stale: run python docs/make_function_table.py"


def test_architecture_module_map_is_up_to_date():
    render = runpy.run_path(str(ROOT / "docs" / "make_architecture.py"))["render"]
    assert (ROOT / "docs" / "architecture.md").read_text() == render(), \
        "docs/architecture.md's module map is stale: run python docs/make_architecture.py"


def test_readme_derived_derivative_example_runs(tmp_path):
    # derive.py reads the forward's source, so the block runs from a file of its own
    blocks = re.findall(r"```python\n(.*?)\n\s*```", (ROOT / "docs" / "reference.md").read_text(), re.S)
    block = next(textwrap.dedent(b) for b in blocks if "def huber(x)" in b)
    script = tmp_path / "readme_huber.py"
    script.write_text(block)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(script))
    printed = out.getvalue().splitlines()
    wanted = [ln.split("# ")[-1] for ln in block.splitlines() if ln.startswith("print(")]
    assert printed == wanted


def test_readme_tour_example_runs():
    # the README's tour: what it prints, and the gradient it takes against
    # central differences of the same NumPy function
    blocks = re.findall(r"```python\n(.*?)\n\s*```", (ROOT / "README.md").read_text(), re.S)
    block = next(b for b in blocks if "plain NumPy code, unchanged" in b)
    out, scope = io.StringIO(), {}
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), scope)
    wanted = [ln.split("# ")[-1].split(": ")[-1] for ln in block.splitlines()
              if ln.startswith("print(")]
    assert out.getvalue().split() == wanted
    f, x, g = scope["f"], scope["x"], scope["g"]
    fd = [(f(x + e) - f(x - e)) / 2e-6 for e in np.eye(3) * 1e-6]
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    grad = scope["tg"].grad(f)
    fd2 = np.array([(grad(x + e) - grad(x - e)) / 2e-5 for e in np.eye(3) * 1e-5])
    np.testing.assert_allclose(scope["H"], fd2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(scope["J"], np.diag(np.cos(x) * x + np.sin(x)), atol=1e-15)


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")))
def test_every_benchmark_script_opens_with_its_docstring(script):
    """Each script's docstring says how to run it, and the scripts that build
    their --help from ``__doc__`` need it to be the module's docstring (a
    statement above it makes ``__doc__`` None)."""
    import ast
    source = (ROOT / "benchmarks" / script).read_text()
    assert ast.get_docstring(ast.parse(source)), f"benchmarks/{script} has no module docstring"
