"""The elementwise ops of one and of two tensors are rows of
``kernels/formulas.py``.

Each row's formulas are written once; these tests check that every table
built from them is current and agrees with the rows, that each row's
``create_graph`` rule (its derivatives evaluated with tapegrad's ops) agrees
with the compiled first and second derivatives (mixed partials included)
and goes on to third order, and that adding a row is all a new op needs: a
copy of the package with one more row (of one or of two tensors) goes
through grad, jvp, hessian, third-order create_graph, trace and replay, and
tape files.
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
from tapegrad.kernels import formulas, generate, libm, optable
from tapegrad.kernels.coverage import as_python
from tapegrad.kernels import rules
from tapegrad.ops import derive_tables, numpy_api
from tapegrad.ops import elementwise as E

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
d_unary, d2_unary = as_python(rules.d_unary), as_python(rules.d2_unary)


@pytest.mark.parametrize("name", sorted(generate.GENERATED))
def test_the_generated_switches_are_current(name):
    with open(generate.path(name)) as fh:
        assert fh.read() == generate.GENERATED[name](), \
            f"kernels/{name} is stale: run python tapegrad/kernels/generate.py"


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


# -- the ops of two tensors -------------------------------------------------------------------
d_binary, d2_binary = as_python(rules.d_binary), as_python(rules.d2_binary)


def test_every_binary_table_is_derived_from_the_rows():
    assert len({r.sub for r in formulas.BINARY}) == len(formulas.BINARY)
    assert len({r.name for r in formulas.BINARY}) == len(formulas.BINARY)
    # no constant name of kernels/codes.py is given to two rows
    assert len({**formulas.codes(), **formulas.binary_codes()}) == \
        len(formulas.ROWS) + len(formulas.BINARY)
    assert set(optable.NARY) == {r.sub for r in formulas.BINARY} | {C.WHERE}
    for r in formulas.BINARY:
        assert r.sub != C.WHERE and r.sub <= C.MASK, r.name
        # from NARY_ZERO_FIRST on, d_binary returns zeros before any row's branch
        assert (r.sub >= C.NARY_ZERO_FIRST) == (r.curve == formulas.CONSTANT), r.name
        assert optable.NARY[r.sub] == (r.reads, r.curve), r.name
        assert getattr(C, formulas.BINARY_CODE_NAMES[r.sub]) == r.sub
        assert REGISTRY[C.code(C.K_NARY, r.sub)].name == r.grad
        assert getattr(tg, r.name) is E.BINARY[r.name]
        assert numpy_api.UFUNCS[getattr(np, r.name)] is E.BINARY[r.name]
        if r.curve == formulas.CONSTANT:
            assert r.name in derive_tables._FLAT_NUMPY
        else:
            rule = derive_tables._binary_rule(r)
            assert derive_tables.BINARY[rule] == tuple(
                derive_tables._template2(d) for d in (r.da, r.db, *r.second)), r.name
            assert derive_tables._NUMPY[r.name] == rule
            assert rule in derive_tables._TWO
            if r.math:
                assert derive_tables._MATH[r.math] == rule
        if r.libm:  # the interpreted tier computes f with libm's function
            stand_in = getattr(libm.NUMPY, r.name)
            assert stand_in is not getattr(np, r.name)
            assert stand_in is (libm.LIBM[r.math] if r.math else getattr(libm, r.name))


def test_the_binary_formulas_read_only_what_every_namespace_has():
    allowed = {"a", "b", "y", "math", "np", "abs", "float", *formulas.CONSTANTS,
               *formulas.HELPERS}
    for r in formulas.BINARY:
        assert _names(r.f) <= allowed, r.name
        assert "y" not in _names(r.f), r.name
        for src in (r.da, r.db, *r.second, r.graph_da, r.graph_db):
            if src is not None:  # the partials: no kernel helper (create_graph evaluates them)
                assert _names(src) <= allowed - set(formulas.HELPERS), r.name


def test_array_and_graph_forms():
    assert formulas.array_form("1.0 if a > b and b > 0.0 else -float(np.trunc(a))") == \
        "np.where(np.logical_and(a > b, b > 0.0), 1.0, -np.trunc(a))"
    assert formulas.graph_form("math.copysign(1.0, a) * b if a != b else 0.0") == \
        ("_where(_c0, _c1 * b, 0.0)", ["a != b", "math.copysign(1.0, a)"])


SMOOTH2 = [r for r in formulas.BINARY if r.curve in (optable.CROSS, optable.QUOTIENT, optable.ALL)]


def _np(t, like):
    if t is None:  # an input the output does not depend on
        return np.zeros_like(like)
    return np.broadcast_to(np.asarray(getattr(t, "data", t), dtype=float), like.shape)


def _grads(out, inputs, like):
    """d sum(out) / d each input (zeros for a constant ``out``)."""
    if not getattr(out, "requires_grad", False):
        return [None, None], [np.zeros_like(like), np.zeros_like(like)]
    ts = tg.autograd.grad(out.sum(), inputs, create_graph=True, allow_unused=True)
    return list(ts), [_np(t, like) for t in ts]


@pytest.mark.parametrize("row", SMOOTH2, ids=[r.name for r in SMOOTH2])
def test_create_graph_follows_a_binary_row_to_third_order(row):
    """First and second partials (mixed included) against the compiled
    rules, the third against central differences of the compiled second."""
    op = E.BINARY[row.name]
    a0, b0 = np.array([0.7, 1.3]), np.array([0.4, -1.1])
    a, b = tg.tensor(a0, requires_grad=True), tg.tensor(b0, requires_grad=True)

    def rules_at(av, bv):
        yv = np.asarray(op(av, bv), dtype=float)
        return (np.array([d_binary(row.sub, p, q, z) for p, q, z in zip(av, bv, yv)]),
                np.array([d2_binary(row.sub, p, q, z) for p, q, z in zip(av, bv, yv)]))
    want1, want2 = rules_at(a0, b0)
    (ga, gb), first = _grads(op(a, b), (a, b), a0)
    np.testing.assert_allclose(first[0], want1[:, 0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(first[1], want1[:, 1], rtol=1e-12, atol=1e-14)
    (haa, hab), (vaa, vab) = _grads(ga, (a, b), a0)
    (_, hbb), (vba, vbb) = _grads(gb, (a, b), a0)
    for got, k in ((vaa, 0), (vab, 1), (vba, 1), (vbb, 2)):
        np.testing.assert_allclose(got, want2[:, k], rtol=1e-10, atol=1e-12)
    step = 1e-5
    for h, k in ((haa, 0), (hab, 1), (hbb, 2)):
        _, (ta, tb) = _grads(h, (a, b), a0) if h is not None else (None, (0 * a0, 0 * a0))
        fa = (rules_at(a0 + step, b0)[1][:, k] - rules_at(a0 - step, b0)[1][:, k]) / (2 * step)
        fb = (rules_at(a0, b0 + step)[1][:, k] - rules_at(a0, b0 - step)[1][:, k]) / (2 * step)
        np.testing.assert_allclose(ta, fa, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(tb, fb, rtol=1e-6, atol=1e-7)


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


def _with_one_more_row(tmp_path, row, table_end, script):
    """Run ``script`` against a copy of the package whose formula table
    ``table_end`` closes (``"\\n)\\ndel U\\n"``) has one more ``row``, its
    switches regenerated; interpreted (the same switches, run as Python), so
    that nothing compiles. Returns the generated sources."""
    pkg = tmp_path / "tapegrad"
    shutil.copytree(os.path.join(ROOT, "tapegrad"), pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    src = (pkg / "kernels" / "formulas.py").read_text()
    end = src.index(table_end)
    (pkg / "kernels" / "formulas.py").write_text(src[:end + 1] + row + src[end + 1:])
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               TAPEGRAD_INTERPRET="force", TAPEGRAD_QUIET="1", OUT_DIR=str(tmp_path))
    gen = subprocess.run([sys.executable, str(pkg / "kernels" / "generate.py")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    (tmp_path / "check.py").write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path / "check.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert out.stdout.strip().endswith("ok")
    return "".join((pkg / "kernels" / f).read_text() for f in ("unary_rules.py",
                                                                 "binary_rules.py"))


def test_a_new_row_is_an_op_in_every_transform(tmp_path):
    generated = _with_one_more_row(tmp_path, _ROW, "\n)\ndel U\n", _SCRIPT)
    assert "SOFTSIGN" in generated


# -- a new binary row is a new op, in every transform -----------------------------------------
_BINARY_ROW = ('    B(18, "logaddexp_naive", "LogaddexpNaive", "np.log(np.exp(a) + np.exp(b))", '
               '"np.exp(a - y)", "np.exp(b - y)", "np.exp(a - y) * np.exp(b - y)", '
               '"-(np.exp(a - y) * np.exp(b - y))", "np.exp(a - y) * np.exp(b - y)"),\n')

_BINARY_SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    import tapegrad as tg
    from tapegrad.ops.elementwise import BINARY

    op = BINARY["logaddexp_naive"]

    def f(x):  # both operands differentiated, one of them broadcast
        a, b = x[:3], x[3:] * x[:3]
        return (op(a, b) * x[3:]).sum() + op(a, x[5:6]).sum()

    def lae(a, b):
        return np.log(np.exp(a) + np.exp(b))

    def value(x):
        a, b = x[:3], x[3:] * x[:3]
        return float(np.sum(lae(a, b) * x[3:]) + np.sum(lae(a, x[5:6])))

    def fd(fun, x, h=1e-5):
        out = []
        for i in range(x.size):
            e = np.zeros_like(x)
            e[i] = h
            out.append((fun(x + e) - fun(x - e)) / (2 * h))
        return np.array(out)

    x0 = np.array([0.3, -1.2, 2.0, 0.7, -0.4, 1.1])
    x1 = np.array([-0.4, 0.9, 1.6, 0.2, 1.3, -0.8])
    v = np.array([0.5, -1.0, 2.0, 0.3, 0.8, -0.6])
    a0, b0 = tg.tensor(x0[:3], requires_grad=True), tg.tensor(x0[3:])
    assert op(a0, b0).grad_fn.name() == "LogaddexpNaiveBackward"
    assert np.allclose(op(a0, b0).numpy(), lae(x0[:3], x0[3:]), rtol=1e-15)
    g = tg.grad(f)(x0)
    assert np.allclose(g, fd(value, x0), rtol=1e-7, atol=1e-9), g
    _, tangent = tg.jvp(f, (x0,), (v,))
    assert np.isclose(float(np.asarray(tangent)), float(g @ v), rtol=1e-12), tangent
    H = tg.hessian(f)(x0)
    assert np.allclose(H, fd(lambda z: tg.grad(f)(z), x0), rtol=1e-6, atol=1e-8), H
    x = tg.tensor(x0, requires_grad=True)
    (g1,) = tg.autograd.grad(f(x), x, create_graph=True)
    (g2,) = tg.autograd.grad(g1 @ v, x, create_graph=True)
    assert np.allclose(g2.numpy(), H @ v, rtol=1e-12, atol=1e-13), (g2, H @ v)
    (g3,) = tg.autograd.grad(g2 @ v, x)
    want = fd(lambda z: tg.hessian(f)(z) @ v @ v, x0)
    assert np.allclose(g3.numpy(), want, rtol=1e-6, atol=1e-7), (g3, want)
    ft = tg.trace(f, x0)
    assert np.isclose(float(ft(x1)), value(x1), rtol=1e-14)
    assert np.allclose(ft.grad(x1), tg.grad(f)(x1), rtol=1e-13)
    path = os.path.join(os.environ["OUT_DIR"], "logaddexp_naive.npz")
    ft.save(path)
    back = tg.load(path)
    assert np.isclose(float(back(x1)), value(x1), rtol=1e-14)
    assert np.allclose(back.grad(x1), tg.grad(f)(x1), rtol=1e-13)
    print("ok")
""")


def test_a_new_binary_row_is_an_op_in_every_transform(tmp_path):
    generated = _with_one_more_row(tmp_path, _BINARY_ROW, "\n)\ndel B\n", _BINARY_SCRIPT)
    assert "LOGADDEXP_NAIVE" in generated
