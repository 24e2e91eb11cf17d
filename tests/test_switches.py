"""Every op code reaches a real branch of every switch that must handle it.

The kernels dispatch on integer op codes; a code a switch does not know ends
in ``kernels/unhandled.py``'s fallback -- NaN compiled, an exception as
Python -- never a default that looks like an answer.  These tests run each
registered code through each scalar switch as plain Python (no compiling)
against independent oracles (central differences of the op's NumPy forward,
the NumPy forward itself), check the tables that name which rule handles
which code, and check that the compiled fallbacks give NaN or an error.
"""
import math

import numba
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.transforms.forward import sweep as FW
from tapegrad.transforms.second import rules as S2
from tapegrad.kernels import codes as C
from tapegrad.kernels import elementwise_vjp as E
from tapegrad.kernels import optable
from tapegrad.kernels import replay as R
from tapegrad.kernels import hvp as KS
from tapegrad.kernels.coverage import as_python, check, reaches_fallback
from tapegrad.kernels.unhandled import FAMILIES, KINDS, UnhandledCode
from tapegrad.core.registry import REGISTRY, register
from tapegrad.core.tape import current
from tapegrad.tracing.replay import _HOST_FORWARD, _NOT_REPLAYABLE

from oracle import leaf


def _codes(kind, skip=()):
    return sorted(c & C.MASK for c in REGISTRY if c >> C.SHIFT == kind and c & C.MASK
                  not in skip)


def _name(kind, sub):
    return REGISTRY[C.code(kind, sub)].name


py = as_python  # the kernels' sources, run as Python
d_unary, f_unary = py(E.d_unary), py(R.f_unary)
d_scalar, f_scalar = py(E.d_scalar), py(R.f_scalar)
d_binary, f_binary, f_compare = py(E.d_binary), py(R.f_binary), py(R.f_compare)
d2_unary, d2_scalar, d2_binary = py(KS.d2_unary), py(KS.d2_scalar), py(KS.d2_binary)
unary_has_d2, scalar_has_d2, nary_has_d2 = (py(KS.unary_has_d2), py(KS.scalar_has_d2),
                                            py(KS.nary_has_d2))

H = 1e-6
POINTS = (0.3, 0.55, 0.8, 1.3, 1.7, 2.6)  # off the integers and the .5 ties of rint


def _fd(f, x):
    return (f(x + H) - f(x - H)) / (2 * H)


def _near(a, b, rtol=1e-5, atol=1e-6):
    return abs(a - b) <= atol + rtol * abs(b)


# -- elementwise ops of one tensor ------------------------------------------------------------
UNARY = _codes(C.K_UNARY)


@pytest.mark.parametrize("sub", UNARY, ids=[_name(C.K_UNARY, s) for s in UNARY])
def test_unary_switches_against_numpy_and_finite_differences(sub):
    fwd = REGISTRY[C.code(C.K_UNARY, sub)].forward
    if sub >= C.VIEW_FIRST:  # views: identity forward, derivative 1, no curvature
        for x in POINTS:
            assert f_unary(sub, x) == x and d_unary(sub, x, x) == 1.0
        assert not unary_has_d2(sub)
        return
    checked = 0
    for x in POINTS:
        with np.errstate(all="ignore"):
            y = float(fwd(x))
            lo, hi = float(fwd(x - 2 * H)), float(fwd(x + 2 * H))
        if not (math.isfinite(y) and math.isfinite(lo) and math.isfinite(hi)):
            continue  # outside the op's domain
        checked += 1
        assert f_unary(sub, x) == pytest.approx(y, rel=1e-13, abs=1e-15)
        d = d_unary(sub, x, y)
        assert _near(d, _fd(lambda t: float(fwd(t)), x)), (x, d)
        # the second derivative: the derivative's own slope
        slope = _fd(lambda t: d_unary(sub, t, float(fwd(t))), x)
        if unary_has_d2(sub):
            assert _near(d2_unary(sub, x, y), slope, rtol=1e-4, atol=1e-5), x
        else:
            assert _near(0.0, slope), x
    assert checked >= 2


# -- elementwise ops with a Python constant -----------------------------------------------------
SCALAR_FORWARD = {C.ADDC: lambda x, c: x + c, C.MULC: lambda x, c: x * c,
                  C.DIVC: lambda x, c: x / c, C.RSUBC: lambda x, c: c - x,
                  C.RDIVC: lambda x, c: c / x, C.POWC: lambda x, c: x ** c,
                  C.RPOWC: lambda x, c: c ** x}


def test_the_scalar_oracle_table_covers_the_registry():
    assert sorted(SCALAR_FORWARD) == _codes(C.K_SCALAR)


@pytest.mark.parametrize("sub", sorted(SCALAR_FORWARD),
                         ids=[_name(C.K_SCALAR, s) for s in sorted(SCALAR_FORWARD)])
@pytest.mark.parametrize("c", [0.7, 2.0, 3.0, -1.3])
def test_scalar_switches_against_numpy_and_finite_differences(sub, c):
    fwd = SCALAR_FORWARD[sub]
    checked = 0
    for x in POINTS:
        with np.errstate(all="ignore"):
            y = float(np.float64(fwd(np.float64(x), c)))
        if not math.isfinite(y) or (sub == C.RPOWC and c < 0):
            continue
        checked += 1
        assert f_scalar(sub, x, c) == pytest.approx(y, rel=1e-13)
        assert _near(d_scalar(sub, x, y, c), _fd(lambda t: fwd(t, c), x))
        slope = _fd(lambda t: d_scalar(sub, t, fwd(t, c), c), x)
        if scalar_has_d2(sub):
            assert _near(d2_scalar(sub, x, y, c), slope, rtol=1e-4, atol=1e-5)
        else:
            assert _near(0.0, slope)
    assert checked >= 2 or (sub == C.RPOWC and c < 0)


# -- broadcasting ops of two tensors --------------------------------------------------------
NARY = _codes(C.K_NARY, skip=(C.WHERE,))
# no pair has an integer a / b, where fmod and remainder jump
PAIRS = [(a, b) for a in (0.3, 0.8, 1.7, -1.15) for b in (0.55, 1.3, 2.6, -0.45)]


@pytest.mark.parametrize("sub", NARY, ids=[_name(C.K_NARY, s) for s in NARY])
def test_binary_switches_against_numpy_and_finite_differences(sub):
    fwd = REGISTRY[C.code(C.K_NARY, sub)].forward
    checked = 0
    for a, b in PAIRS:
        with np.errstate(all="ignore"):
            y = float(fwd(a, b))
            near = [float(fwd(a + s, b + t)) for s in (-2 * H, 0, 2 * H)
                    for t in (-2 * H, 0, 2 * H)]
        if not all(math.isfinite(v) for v in [y] + near):
            continue
        checked += 1
        assert f_binary(sub, a, b) == pytest.approx(y, rel=1e-13, abs=1e-15)
        da, db = d_binary(sub, a, b, y)
        assert _near(da, _fd(lambda t: float(fwd(t, b)), a)), (a, b)
        assert _near(db, _fd(lambda t: float(fwd(a, t)), b)), (a, b)

        def partials(s, t):
            return d_binary(sub, s, t, float(fwd(s, t)))
        aa = _fd(lambda t: partials(t, b)[0], a)
        ab = _fd(lambda t: partials(a, t)[0], b)
        bb = _fd(lambda t: partials(a, t)[1], b)
        if nary_has_d2(sub):
            got = d2_binary(sub, a, b, y)
            for g, e in zip(got, (aa, ab, bb)):
                assert _near(g, e, rtol=1e-4, atol=1e-5), (a, b, got)
        else:
            assert all(_near(0.0, e) for e in (aa, ab, bb)), (a, b)
    assert checked >= 4


COMPARE = {"Less": np.less, "LessEqual": np.less_equal, "Greater": np.greater,
           "GreaterEqual": np.greater_equal, "Equal": np.equal, "NotEqual": np.not_equal}


def test_comparisons_replay_as_numpy_compares():
    subs = [c & C.MASK for c in REGISTRY if c >> C.SHIFT == C.K_NONE
            and c & C.MASK >= R.CMP_FIRST]
    assert sorted(_name(C.K_NONE, s) for s in subs) == sorted(COMPARE)
    for s in subs:
        for a, b in [(1.0, 2.0), (2.0, 1.0), (1.5, 1.5), (np.nan, 1.0)]:
            assert f_compare(s, a, b) == float(COMPARE[_name(C.K_NONE, s)](a, b))


# -- the values each VJP reads (optable.READS_*): the tape frees the others ------------------------
@pytest.mark.parametrize("kind", [C.K_UNARY, C.K_SCALAR, C.K_NARY])
def test_derivatives_read_only_what_the_tape_keeps(kind):
    # a value the table says the VJP does not read may be freed: replacing it
    # by NaN must not change the derivative
    nan = math.nan
    for sub in _codes(kind, skip=(C.WHERE,) if kind == C.K_NARY else ()):
        code = C.code(kind, sub)
        keeps_x, keeps_y = optable.READS_INPUTS[code], optable.READS_OUTPUT[code]
        b, c = 1.3, 0.7
        x = 1.3 if REGISTRY[code].name == "Acosh" else 0.55  # inside every op's domain
        if kind == C.K_UNARY:
            y = float(REGISTRY[code].forward(x)) if sub < C.VIEW_FIRST else x
            d = lambda x_, y_: d_unary(sub, x_, y_)  # noqa: E731
        elif kind == C.K_SCALAR:
            y = SCALAR_FORWARD[sub](x, c)
            d = lambda x_, y_: d_scalar(sub, x_, y_, c)  # noqa: E731
        else:
            y = float(REGISTRY[code].forward(x, b))
            d = lambda x_, y_: d_binary(sub, x_, b if x_ == x_ else nan, y_)  # noqa: E731
        want = d(x, y)
        with np.errstate(all="ignore"):
            got = d(x if keeps_x else nan, y if keeps_y else nan)
        np.testing.assert_equal(got, want, err_msg=REGISTRY[code].name)


# -- the tables of rules -----------------------------------------------------------------------
def test_every_registered_code_passes_the_registry_check():
    for code in REGISTRY:
        check(code)  # raises UnhandledCode if some switch lacks it
        assert code >> C.SHIFT in KINDS


def test_families_list_exactly_the_registered_subs():
    for kind, subs in FAMILIES.items():
        assert sorted(subs) == _codes(kind)


def test_host_ops_have_forward_second_order_and_replay_rules():
    function = REGISTRY_BY_NAME("Function")
    for code, d in REGISTRY.items():
        if code >> C.SHIFT != C.K_HOST:
            continue
        assert code in FW.HOST_JVP, d.name
        # the replay computes it with NumPy, or refuses to trace it
        assert (d.name in _HOST_FORWARD) != (d.name in _NOT_REPLAYABLE), \
            d.name
        if code == function:  # no forward rule: its second order raises, naming it
            assert S2._CLASS[code] == S2._MISSING
        else:
            assert code in S2.HOST_RULES, d.name


def REGISTRY_BY_NAME(name):
    return next(c for c, d in REGISTRY.items() if d.name == name)


def test_second_order_classes_cover_every_registered_code():
    function = REGISTRY_BY_NAME("Function")
    for code, d in REGISTRY.items():
        assert S2._CLASS[code] != S2._MISSING or code == function, d.name
    # and nothing else: an unregistered sub of a family has no rule
    for kind, subs in FAMILIES.items():
        assert S2._CLASS[C.code(kind, max(subs) + 1)] == S2._MISSING


# -- a code no switch knows fails loudly ----------------------------------------------------
FREE_UNARY = C.LOG_NDTR + 1  # the first K_UNARY sub no op uses
MISSING = [(C.K_UNARY, FREE_UNARY, "d_unary"), (C.K_UNARY, C.ZERO_FIRST + 5, "_unary"),
           (C.K_SCALAR, 7, "d_scalar"), (C.K_NARY, 18, "d_binary"),
           (C.K_NARY, C.NARY_ZERO_FIRST + 2, "f_binary"), (C.K_NONE, R.CMP_FIRST + 6, "f_compare"),
           (C.K_REDUCE, 8, "FAMILIES"), (C.K_SCAN, 2, "FAMILIES"), (C.K_USER, 2, "FAMILIES"),
           (10, 0, "kind 10")]


@pytest.mark.parametrize("kind,sub,where", MISSING)
def test_registering_a_code_some_switch_lacks_raises(kind, sub, where):
    with pytest.raises(UnhandledCode, match=where):
        register(f"NotAnOp{kind}_{sub}", kind, sub)
    assert C.code(kind, sub) not in REGISTRY


def test_the_scalar_switches_end_in_the_fallback():
    for fn, args in [(E.d_unary, (FREE_UNARY, 0.5, 0.5)), (R.f_unary, (FREE_UNARY, 0.5)),
                     (E.d_scalar, (7, 0.5, 0.5, 2.0)), (R.f_scalar, (7, 0.5, 2.0)),
                     (E.d_binary, (18, 0.5, 0.7, 0.2)), (R.f_binary, (18, 0.5, 0.7)),
                     (KS.d2_unary, (FREE_UNARY, 0.5, 0.5)), (KS.d2_scalar, (7, 0.5, 0.5, 2.0)),
                     (KS.d2_binary, (18, 0.5, 0.7, 0.2))]:
        assert reaches_fallback(fn, *args), fn
    assert not reaches_fallback(E.d_unary, C.EXP, 0.5, 0.5)


@numba.njit
def _compiled_fallbacks(u, s, b):
    return np.array([E.d_unary(u, 0.5, 0.5), R.f_unary(u, 0.5), KS.d2_unary(u, 0.5, 0.5),
                     E.d_scalar(s, 0.5, 0.5, 2.0), R.f_scalar(s, 0.5, 2.0),
                     KS.d2_scalar(s, 0.5, 0.5, 2.0), E.d_binary(b, 0.5, 0.7, 0.2)[0],
                     E.d_binary(b, 0.5, 0.7, 0.2)[1], R.f_binary(b, 0.5, 0.7),
                     KS.d2_binary(b, 0.5, 0.7, 0.2)[2], R.f_compare(R.CMP_FIRST + 6, 0.5, 0.7)])


def test_compiled_fallbacks_are_nan():
    assert np.isnan(_compiled_fallbacks(FREE_UNARY, 7, 18)).all()
    # the known codes are untouched: exp, x * 2, a + b
    got = _compiled_fallbacks(C.EXP, C.MULC, C.ADD)
    assert got[0] == 0.5 and got[3] == 2.0 and got[6] == 1.0


def test_compiled_array_loops_give_nan_for_an_unknown_sub():
    g, x, y = np.ones(40), np.full(40, 0.5), np.full(40, 0.25)
    for fn, args in [(E.unary_loops, (FREE_UNARY, g, x, y)), (E.scalar_loops, (7, g, x, y, 2.0))]:
        gx = np.zeros(40)
        fn(*args, gx, True)
        assert np.isnan(gx).all()
    ga, gb = np.zeros(40), np.zeros(40)
    E.binary_loops(18, g, x, y, y, ga, gb, True)
    assert np.isnan(ga).all() and np.isnan(gb).all()


# -- the family kernels, on a record whose sub no kernel knows ---------------------------------
def _with_op(build, code):
    """Record ``build()``'s graph, then give its root record op ``code``."""
    x = leaf(np.linspace(0.2, 1.4, 6).reshape(2, 3))
    out = build(x)
    current().op[out._rec] = code
    return x, out


@pytest.mark.parametrize("kind,build", [
    (C.K_REDUCE, lambda x: (x * 1.5).sum(axis=0)),
    (C.K_SCAN, lambda x: tg.cumsum(x * 1.5, axis=1)),
])
def test_family_kernels_give_nan_not_zero_for_an_unknown_sub(kind, build):
    code = C.code(kind, max(FAMILIES[kind]) + 1)
    x, out = _with_op(build, code)
    out.backward(np.ones(out.shape), retain_graph=True)
    assert np.isnan(x.grad.numpy()).all()
    t = FW.push([x], np.ones((1, x.size)), out, 1)  # forward mode: the tangent sweep
    assert np.isnan(t).all()


def test_an_unknown_kind_stops_the_sweep():
    # the sweeps hand a record of a kind they have no kernel for to Python,
    # which has no rule for it either (the registry admits no such code)
    x, out = _with_op(lambda x: (x * 1.5).sum(), C.code(10, 0))
    with pytest.raises(KeyError):
        out.backward()
    x, out = _with_op(lambda x: (x * 1.5).sum(), C.code(10, 0))
    with pytest.raises(NotImplementedError, match="no forward-mode rule"):
        FW.push([x], np.ones((1, x.size)), out, 1)
