"""The elementwise ops of one tensor are rows of ``kernels/formulas.py``.

Each row's formulas are written once; these tests check that every table
built from them is current and agrees with the rows, that each row's
``create_graph`` rule (its derivative evaluated with tapegrad's ops) agrees
with the compiled first and second derivatives and goes on to third order,
and that adding a row is all a new op needs: a copy of the package with one
more row goes through grad, jvp, hessian, third-order create_graph, trace
and replay, and tape files.
"""
import ast
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core.registry import REGISTRY
from tapegrad.kernels import codes as C
from tapegrad.kernels import formulas, generate, optable
from tapegrad.kernels.coverage import as_python
from tapegrad.kernels import rules
from tapegrad.ops import derive_tables
from tapegrad.ops import elementwise as E

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
d_unary, d2_unary = as_python(rules.d_unary), as_python(rules.d2_unary)


def test_the_generated_switches_are_current():
    with open(generate.path("unary_rules.py")) as fh:
        assert fh.read() == formulas.render(), \
            "kernels/unary_rules.py is stale: run python tapegrad/kernels/generate.py"


def test_every_table_is_derived_from_the_rows():
    assert len({r.sub for r in formulas.ROWS}) == len(formulas.ROWS)
    assert len({r.name for r in formulas.ROWS}) == len(formulas.ROWS)
    for r in formulas.ROWS:
        assert r.sub < formulas.VIEW_FIRST
        assert optable.UNARY[r.sub] == (r.reads, r.curve), r.name
        assert getattr(C, formulas.CODE_NAMES[r.sub]) == r.sub
        assert REGISTRY[C.code(C.K_UNARY, r.sub)].name == r.grad
        if r.name != "round":  # takes decimals: its own function
            assert getattr(tg, r.name) is E.UNARY[r.name]
        rule = derive_tables._rule(r)
        if rule and r.name != "fabs":
            assert derive_tables.UNARY[rule][0] == derive_tables._template(r.d)


def _names(src):
    return {n.id for n in ast.walk(ast.parse(src, mode="eval")) if isinstance(n, ast.Name)}


def test_the_formulas_read_only_what_every_namespace_has():
    allowed = {"x", "y", "math", "np", "abs", *formulas.CONSTANTS, *formulas.HELPERS}
    graph_only = {"i0e", "i1e", "log_ndtr", "nonzero"}
    for r in formulas.ROWS:
        assert _names(r.f) <= allowed | {"sub"}, r.name
        assert "y" not in _names(r.f), r.name
        for src in (r.d, r.d2 or "0.0"):
            assert _names(src) <= allowed, r.name
        if r.graph:
            assert _names(r.graph) <= allowed | graph_only, r.name
        else:  # the graph namespace evaluates d itself: no kernel-only helper
            assert not _names(r.d) & (set(formulas.HELPERS) - {"digamma", "trigamma"}), r.name


def test_substitute_renames_whole_names_only():
    assert formulas.substitute("xy + x * np.exp(x)", {"x": "u"}) == "xy + u * np.exp(u)"


SMOOTH = [r for r in formulas.ROWS if r.curve == formulas.SELF]


def _points(row):
    return np.array([row.example, row.example + 0.2])


@pytest.mark.parametrize("row", SMOOTH, ids=[r.name for r in SMOOTH])
def test_create_graph_follows_the_row_to_third_order(row):
    op = E.UNARY[row.name]
    x0 = _points(row)
    x = tg.tensor(x0, requires_grad=True)
    (g,) = tg.autograd.grad(op(x).sum(), x, create_graph=True)
    (h,) = tg.autograd.grad(g.sum(), x, create_graph=True)
    if h.requires_grad:
        (t,) = tg.autograd.grad(h.sum(), x)
        t = t.numpy()
    else:  # a constant second derivative (square)
        t = np.zeros_like(x0)
    y0 = op(x0)
    y0 = np.asarray(getattr(y0, "data", y0))
    want1 = [d_unary(row.sub, a, b) for a, b in zip(x0, y0)]
    want2 = [d2_unary(row.sub, a, b) for a, b in zip(x0, y0)]
    np.testing.assert_allclose(g.numpy(), want1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(h.numpy(), want2, rtol=1e-10, atol=1e-12)
    # the third derivative against central differences of the compiled second
    step = 1e-5

    def d2(v):
        yv = np.asarray(getattr(op(np.array([v])), "data", op(np.array([v]))))[0]
        return d2_unary(row.sub, v, yv)
    fd = [(d2(v + step) - d2(v - step)) / (2 * step) for v in x0]
    np.testing.assert_allclose(t, fd, rtol=1e-6, atol=1e-7)


# -- a new row is a new op, in every transform ------------------------------------------------
_ROW = ('    U(38, "softsign", "Softsign", "x / (1.0 + abs(x))", '
        '"1.0 / ((1.0 + abs(x)) * (1.0 + abs(x)))", '
        '"-2.0 * np.sign(x) / ((1.0 + abs(x)) * (1.0 + abs(x)) * (1.0 + abs(x)))"),\n')

_SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    import tapegrad as tg
    from tapegrad.ops.elementwise import UNARY

    softsign = UNARY["softsign"]

    def f(x):
        return (softsign(x) * np.sin(x)).sum()

    def value(x):
        return float(np.sum(x / (1.0 + np.abs(x)) * np.sin(x)))

    def fd(fun, x, h=1e-5):
        out = []
        for i in range(x.size):
            e = np.zeros_like(x)
            e[i] = h
            out.append((fun(x + e) - fun(x - e)) / (2 * h))
        return np.array(out)

    x0 = np.array([0.3, -1.2, 2.0])
    x1 = np.array([-0.4, 0.9, 1.6])
    v = np.array([0.5, -1.0, 2.0])
    assert softsign(tg.tensor(x0, requires_grad=True)).grad_fn.name() == "SoftsignBackward"
    assert np.allclose(softsign(tg.tensor(x0)).numpy(), x0 / (1 + np.abs(x0)), rtol=1e-15)
    g = tg.grad(f)(x0)
    assert np.allclose(g, fd(value, x0), rtol=1e-7, atol=1e-9), g
    _, tangent = tg.jvp(f, (x0,), (v,))
    assert np.isclose(float(np.asarray(tangent)), float(g @ v), rtol=1e-12), tangent
    H = tg.hessian(f)(x0)
    assert np.allclose(H, fd(lambda z: tg.grad(f)(z), x0), rtol=1e-6, atol=1e-8), H
    x = tg.tensor(x0, requires_grad=True)
    (g1,) = tg.autograd.grad(f(x), x, create_graph=True)
    (g2,) = tg.autograd.grad(g1 @ v, x, create_graph=True)
    (g3,) = tg.autograd.grad(g2 @ v, x)
    want = fd(lambda z: tg.hessian(f)(z) @ v @ v, x0)
    assert np.allclose(g3.numpy(), want, rtol=1e-6, atol=1e-7), (g3, want)
    ft = tg.trace(f, x0)
    assert np.isclose(float(ft(x1)), value(x1), rtol=1e-14)
    assert np.allclose(ft.grad(x1), tg.grad(f)(x1), rtol=1e-13)
    path = os.path.join(os.environ["OUT_DIR"], "softsign.npz")
    ft.save(path)
    back = tg.load(path)
    assert np.isclose(float(back(x1)), value(x1), rtol=1e-14)
    assert np.allclose(back.grad(x1), tg.grad(f)(x1), rtol=1e-13)
    print("ok")
""")


def test_a_new_row_is_an_op_in_every_transform(tmp_path):
    pkg = tmp_path / "tapegrad"
    shutil.copytree(os.path.join(ROOT, "tapegrad"), pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    src = (pkg / "kernels" / "formulas.py").read_text()
    end = src.index("\n)\ndel U\n")
    (pkg / "kernels" / "formulas.py").write_text(src[:end + 1] + _ROW + src[end + 1:])
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               TAPEGRAD_INTERPRET="force", TAPEGRAD_QUIET="1", OUT_DIR=str(tmp_path))
    gen = subprocess.run([sys.executable, str(pkg / "kernels" / "generate.py")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    assert "softsign" in (pkg / "kernels" / "unary_rules.py").read_text().lower()
    (tmp_path / "check.py").write_text(_SCRIPT)
    out = subprocess.run([sys.executable, str(tmp_path / "check.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip().endswith("ok")
