"""The elementwise op table (kernels/optable.py) against the rules it describes.

Each row says which values an op's derivative rules read and how the op
curves; the tape, fused replay segments, the second-order rules and Hessian
sparsity all act on those claims.  Here every row is checked against the
kernels themselves: a derivative evaluated with every value the row says it
does not read replaced by NaN must give the same number, a linear op's
derivative must not change along its inputs, a curved op's must.
"""
import math

import numpy as np
import pytest

from tapegrad.kernels import codes as C
from tapegrad.kernels import elementwise_vjp as E
from tapegrad.kernels import optable as OT
from tapegrad.kernels import replay as R
from tapegrad.kernels import hvp as KS
from tapegrad.kernels.coverage import as_python, check
from tapegrad.kernels.unhandled import UnhandledCode
from tapegrad.core.registry import REGISTRY

d_unary, d_scalar, d_binary = (as_python(f) for f in (E.d_unary, E.d_scalar, E.d_binary))
f_unary, f_scalar, f_binary = (as_python(f) for f in (R.f_unary, R.f_scalar, R.f_binary))
d2_unary, d2_scalar, d2_binary = (as_python(f) for f in (KS.d2_unary, KS.d2_scalar,
                                                          KS.d2_binary))
NAN = float("nan")
H = 1e-5


def _same(a, b):
    a, b = np.atleast_1d(np.asarray(a, float)), np.atleast_1d(np.asarray(b, float))
    return np.array_equal(a, b, equal_nan=True)


def _registered(kind):
    subs = set()
    for code in REGISTRY:
        if code >> C.SHIFT == kind:
            subs.add(code & C.MASK)
    return sorted(subs)


def _x_for(sub):
    return 1.5 if sub == C.ARCCOSH else 0.5   # inside every op's domain


@pytest.mark.parametrize("kind", [C.K_UNARY, C.K_SCALAR, C.K_NARY])
def test_every_registered_elementwise_code_has_a_row(kind):
    subs = _registered(kind)
    assert subs, "no op of this kind is registered"
    missing = [s for s in subs if s not in OT.TABLE[kind]]
    assert not missing, f"kind {kind}: subs {missing} have no row in kernels/optable.py"


def test_a_code_without_a_row_is_refused(monkeypatch):
    check(C.code(C.K_UNARY, C.EXP))            # every switch has it, and a row
    monkeypatch.delitem(OT.UNARY, C.EXP)
    with pytest.raises(UnhandledCode, match="no row in kernels/optable.py"):
        check(C.code(C.K_UNARY, C.EXP))


@pytest.mark.parametrize("sub", sorted(OT.UNARY))
def test_unary_reads(sub):
    reads, _ = OT.UNARY[sub]
    x = _x_for(sub)
    y = f_unary(sub, x)
    xs, ys = (x if "x" in reads else NAN), (y if "y" in reads else NAN)
    assert _same(d_unary(sub, xs, ys), d_unary(sub, x, y))
    if OT.has_d2(C.K_UNARY, sub):
        assert _same(d2_unary(sub, xs, ys), d2_unary(sub, x, y))


@pytest.mark.parametrize("c", [0.75, 2.5])
@pytest.mark.parametrize("sub", sorted(OT.SCALAR))
def test_scalar_reads(sub, c):
    reads, _ = OT.SCALAR[sub]
    x = 0.5
    y = f_scalar(sub, x, c)
    xs, ys = (x if "x" in reads else NAN), (y if "y" in reads else NAN)
    assert _same(d_scalar(sub, xs, ys, c), d_scalar(sub, x, y, c))
    if OT.has_d2(C.K_SCALAR, sub):
        assert _same(d2_scalar(sub, xs, ys, c), d2_scalar(sub, x, y, c))


@pytest.mark.parametrize("sub", sorted(s for s in OT.NARY if s != C.WHERE))
def test_binary_reads(sub):
    reads, _ = OT.NARY[sub]
    a, b = 0.5, 0.75
    y = f_binary(sub, a, b)
    args = [(a if "a" in reads else NAN), (b if "b" in reads else NAN),
            (y if "y" in reads else NAN)]
    assert _same(d_binary(sub, *args), d_binary(sub, a, b, y))
    if OT.has_d2(C.K_NARY, sub):
        assert _same(d2_binary(sub, *args), d2_binary(sub, a, b, y))


def _slope_unary(sub, x):
    """Central difference of the derivative: the second derivative."""
    d = [d_unary(sub, t, f_unary(sub, t)) for t in (x - H, x + H)]
    return (d[1] - d[0]) / (2 * H)


@pytest.mark.parametrize("sub", sorted(s for s in OT.UNARY if s < C.ZERO_FIRST))
def test_unary_curve(sub):
    _, curve = OT.UNARY[sub]
    x = _x_for(sub)
    if curve == OT.CONSTANT:
        assert d_unary(sub, x, f_unary(sub, x)) == 0.0
    elif curve == OT.LINEAR:
        assert abs(_slope_unary(sub, x)) < 1e-6
        assert d2_unary(sub, x, f_unary(sub, x)) == 0.0
    else:
        slope = _slope_unary(sub, x)
        assert abs(slope) > 1e-3
        assert math.isclose(d2_unary(sub, x, f_unary(sub, x)), slope, rel_tol=1e-5)


@pytest.mark.parametrize("sub", sorted(OT.SCALAR))
def test_scalar_curve(sub):
    _, curve = OT.SCALAR[sub]
    c, x = 2.5, 0.5
    d = [d_scalar(sub, t, f_scalar(sub, t, c), c) for t in (x - H, x + H)]
    slope = (d[1] - d[0]) / (2 * H)
    if curve == OT.LINEAR:
        assert abs(slope) < 1e-6
    else:
        assert math.isclose(d2_scalar(sub, x, f_scalar(sub, x, c), c), slope, rel_tol=1e-5)


def _hessian_binary(sub, a, b):
    """Central differences of (da, db) in a and in b."""
    def d(s, t):
        return np.array(d_binary(sub, s, t, f_binary(sub, s, t)))
    da = (d(a + H, b) - d(a - H, b)) / (2 * H)   # (d2/da2, d2/da db)
    db = (d(a, b + H) - d(a, b - H)) / (2 * H)   # (d2/da db, d2/db2)
    return da[0], da[1], db[1]


@pytest.mark.parametrize("sub", sorted(s for s in OT.NARY
                                       if s != C.WHERE and s < C.NARY_ZERO_FIRST))
def test_binary_curve(sub):
    _, curve = OT.NARY[sub]
    a, b = 0.5, 0.75
    aa, ab, bb = _hessian_binary(sub, a, b)
    zero = 1e-6
    if curve == OT.LINEAR:
        assert max(abs(aa), abs(ab), abs(bb)) < zero
        return
    if curve == OT.CROSS:        # a * b: the mixed partial only
        assert abs(aa) < zero and abs(bb) < zero and abs(ab) > 1e-3
    elif curve == OT.QUOTIENT:   # a / b: linear in a
        assert abs(aa) < zero and abs(ab) > 1e-3 and abs(bb) > 1e-3
    else:
        assert max(abs(aa), abs(ab), abs(bb)) > 1e-3
    got = d2_binary(sub, a, b, f_binary(sub, a, b))
    assert np.allclose(got, (aa, ab, bb), rtol=1e-5, atol=1e-7)


def test_reads_by_code_agree_with_the_rows():
    for kind, rows in OT.TABLE.items():
        for sub, (reads, _) in rows.items():
            code = C.code(kind, sub)
            assert OT.READS_INPUTS[code] == any(v in reads for v in "xab")
            assert OT.READS_OUTPUT[code] == ("y" in reads)


def test_second_order_predicates_follow_the_curves():
    for kind, pred in ((C.K_UNARY, KS.unary_has_d2), (C.K_SCALAR, KS.scalar_has_d2),
                       (C.K_NARY, KS.nary_has_d2)):
        p = as_python(pred)
        for sub, (_, curve) in OT.TABLE[kind].items():
            assert bool(p(sub)) == (curve not in (OT.LINEAR, OT.CONSTANT)), (kind, sub)
