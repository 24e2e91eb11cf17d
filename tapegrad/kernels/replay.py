"""Compiled forward replay of a traced tape (see :mod:`tapegrad.tracing.api`).

``replay`` walks a trace's records in recording order and recomputes each
output value from its parents' values with the same parameters the reverse
sweep reads (shapes, strides, index maps, constants), writing through the
same ``value(T, r)`` views: the sweep then runs on the replayed values
unchanged.  It returns at host records (matmul, solve, ...) so that Python
computes those with NumPy, and at a failed guard, so that the trace is
redone.  Here: the loop (``_replay``), its guards, and the ``FWD`` table of
forward families; the families' kernels are replay_families.py, the fused
elementwise segments fused_segments.py (this module's namespace includes
both, so that the trace layer reaches every replay kernel here).
"""

from . import codes as C
from ._jit import inline, kernel
from ._views import OP, ARG0, SIZE, IP0, ARGS, IP, FP, V1  # tape fields
from ._views import borrowed_tape, parent, value
from .dispatch import FAILED, MISSING, SIG_EXTRA, Families, call_entry_extra, load_tape
from .fused_segments import CHUNK, seg_backward, seg_forward, seg_plan  # noqa: F401
from .replay_families import (CMP_FIRST, EQUAL, GREATER, GREATER_EQUAL, LESS,  # noqa: F401
                              LESS_EQUAL, NOT_EQUAL, compare_fwd, concat_fwd, f_compare,
                              gather_fwd, nary_fwd, reduce_fwd, scalar_fwd, scan_fwd,
                              sum_fwd, unary_fwd, user_fwd)
from .rules import f_binary, f_scalar, f_unary
from .small_matmul import mm_forward
from .sweep import NO_MATMULS, TINY, arithmetic

#: guard kinds (``guard[r]``): the value's truth, or the exact value
G_TRUTH = 1
G_VALUE = 2


@inline
def _guard_holds(T, r, kind, expect):
    y = value(T, r)
    for i in range(y.size):
        e = expect[i]
        if kind == G_TRUTH:
            if (y[i] != 0.0) != (e != 0.0):
                return False
        elif y[i] != e and not (y[i] != y[i] and e != e):
            return False
    return True


# Tiny records (sweep.py: ``TINY``, ``arithmetic``) are recomputed inline in
# the loop, without the call through ``FWD.table``: in loops over tiny arrays
# (an RK4 step on a 2-vector, a 6-state ODE) that call, not the arithmetic,
# was most of each record's cost.
#: the replay computes ``arithmetic`` records of at most this many elements
#: inline: the structural records' bound (``TINY``), as the sweep does
#: (sweep.py: ``TINY_ELEMENTWISE``).
TINY_ELEMENTWISE = TINY
@inline
def _f_arithmetic(kind, sub, a, b, c):
    """An ``arithmetic`` op at one element, each rule called with a constant
    sub code (so that its switch folds to the one expression)."""
    if kind == C.K_NARY:
        if sub == C.ADD:
            return f_binary(C.ADD, a, b)
        if sub == C.SUB:
            return f_binary(C.SUB, a, b)
        if sub == C.MUL:
            return f_binary(C.MUL, a, b)
        return f_binary(C.DIV, a, b)
    if kind == C.K_SCALAR:
        if sub == C.ADDC:
            return f_scalar(C.ADDC, a, c)
        if sub == C.MULC:
            return f_scalar(C.MULC, a, c)
        if sub == C.DIVC:
            return f_scalar(C.DIVC, a, c)
        if sub == C.RSUBC:
            return f_scalar(C.RSUBC, a, c)
        return f_scalar(C.RDIVC, a, c)
    if sub == C.NEG:
        return f_unary(C.NEG, a)
    if sub == C.SQUARE:
        return f_unary(C.SQUARE, a)
    return f_unary(C.IDENT, a)


@inline
def _tiny_elementwise(T, r, kind, sub, n):
    """An ``arithmetic`` record of ``2 <= n <= TINY_ELEMENTWISE`` elements
    whose operands have n or one element, inline (the family kernels' loops,
    element for element: ``unary_fwd``, ``scalar_fwd``, ``nary_fwd``); False
    (nothing done) for other operand sizes.  A broadcast operand's element
    is the same whatever the shapes: a one-element operand gives its one
    element, and an operand with the output's element count has no
    broadcast axis of length > 1, so its elements are the output's in
    order."""
    size, args = T[SIZE], T[ARGS]
    a = args[T[ARG0][r]]
    b = args[T[ARG0][r] + 1] if kind == C.K_NARY else a
    ma, mb = size[a], size[b]
    if not ((ma == n or (kind == C.K_NARY and ma == 1)) and (mb == n or mb == 1)):
        return False
    y, xa, xb = value(T, r), value(T, a), value(T, b)
    c = T[FP][r]
    for i in range(n):
        y[i] = _f_arithmetic(kind, sub, xa[i if ma == n else 0], xb[i if mb == n else 0], c)
    return True


@inline
def _tiny_structural(T, r, kind):
    """``gather_fwd`` (one output record) and ``concat_fwd`` of a record of
    at most ``TINY`` elements, inline."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    y = value(T, r)
    if kind == C.K_GATHER:
        x = value(T, parent(T, r, 0))
        for k in range(m):
            i = ip[b + 1 + k]
            y[k] = x[i] if i >= 0 else 0.0
        return
    for k in range(m):
        y[k] = value(T, parent(T, r, ip[b + 1 + k]))[ip[b + 1 + m + k]]


# -- the replay loop: forward families compiled on first use ---------------------------
# Each family is a C entry point called through FWD.table, as the sweeps call
# the VJP families (kernels/dispatch.py), so that a trace compiles the
# forwards of the kinds it holds, not all of them.
def _unary_entry(tp, r, sub, extra):
    unary_fwd(load_tape(tp), r, sub)
    return 1


def _scalar_entry(tp, r, sub, extra):
    scalar_fwd(load_tape(tp), r, sub)
    return 1


def _nary_entry(tp, r, sub, extra):
    nary_fwd(load_tape(tp), r, sub)
    return 1


def _sum_entry(tp, r, sub, extra):
    sum_fwd(load_tape(tp), r, sub)
    return 1


def _reduce_entry(tp, r, sub, extra):
    reduce_fwd(load_tape(tp), r, sub)
    return 1


def _gather_entry(tp, r, sub, extra):
    gather_fwd(load_tape(tp), r)
    return 1


def _concat_entry(tp, r, sub, extra):
    concat_fwd(load_tape(tp), r)
    return 1


def _scan_entry(tp, r, sub, extra):
    scan_fwd(load_tape(tp), r, sub)
    return 1


def _user_entry(tp, r, sub, extra):
    user_fwd(load_tape(tp), r, sub, extra)
    return 1


def _compare_entry(tp, r, sub, extra):
    compare_fwd(load_tape(tp), r, sub)
    return 1


def _matmul_entry(tp, r, sub, extra):
    # a small matmul (the loop's ``mmk``): extra is its inner dimension k
    mm_forward(load_tape(tp), r, extra)
    return 1


#: forward-family slots: the kinds, and two of their own
SUM_FWD, COMPARE_FWD = 15, 14
#: the forward families of the replay loop, by slot


@inline
def fwd_slot(T, r, kind, sub):
    """Index in ``FWD.table`` of the family that recomputes a ``kind, sub``
    record (-1: nothing to compute)."""
    if kind == C.K_NONE:
        return COMPARE_FWD if sub >= CMP_FIRST else -1
    if kind == C.K_REDUCE and (sub == C.SUM or sub == C.MEAN):
        return SUM_FWD
    return kind


FWD = Families("replay", SIG_EXTRA, {
    C.K_UNARY: (_unary_entry, "replayed unary forwards"),
    C.K_SCALAR: (_scalar_entry, "replayed with-a-constant forwards"),
    C.K_NARY: (_nary_entry, "replayed binary forwards"),
    SUM_FWD: (_sum_entry, "replayed sum/mean"),
    C.K_REDUCE: (_reduce_entry, "replayed reductions"),
    C.K_GATHER: (_gather_entry, "replayed indexing/shape forwards"),
    C.K_CONCAT: (_concat_entry, "replayed concatenations"),
    C.K_SCAN: (_scan_entry, "replayed cumulative ops"),
    C.K_USER: (_user_entry, "replayed user ops"),
    COMPARE_FWD: (_compare_entry, "replayed comparisons"),
    C.K_HOST: (_matmul_entry, "replayed small matmuls"),
}, fwd_slot)


def replay(T, faddr, guard, goff, gvals, start, stop, mmk=NO_MATMULS):
    """Recompute records ``start .. stop-1`` in order.

    Returns -1 when done, ``r >= 0`` at a host record r (Python computes it
    and resumes at ``r + 1``), and ``-2 - r`` when record r's guard does not
    hold (the trace no longer describes what the function does).  A matmul
    record r with ``mmk[r] > 0`` (its inner dimension; ``mmk`` may be shorter
    than the tape) is computed here (kernels/small_matmul.py), not returned.
    """
    return FWD.run(_replay, (T, faddr, guard, goff, gvals, start, stop, mmk, FWD.table), 5)


@kernel
def _replay(T, faddr, guard, goff, gvals, start, stop, mmk, table):
    """``replay``'s compiled loop; returns ``MISSING - r`` at a record whose
    forward family is not compiled yet (before computing it), ``FAILED - r``
    when its kernel raised."""
    # the inline paths' helpers take T: borrowed, they count no references
    # (T0, the caller's, goes to the family entries: their signature's type)
    T0, T = T, borrowed_tape(T)
    op, arg0, size, args, fp, v1 = T[OP], T[ARG0], T[SIZE], T[ARGS], T[FP], T[V1]
    for r in range(start, stop):
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        if (kind == C.K_HOST or kind > C.K_USER) and (
                kind != C.K_HOST or r >= mmk.size or mmk[r] == 0):
            # host records: Python computes them (but for the small matmuls:
            # the family of slot K_HOST below); a kind with no kernel goes
            # there too, and Python's host path raises, naming the op
            return r
        n = size[r]
        if n == 1 and kind <= C.K_NARY and kind != C.K_NONE \
                and not (kind == C.K_NARY and sub == C.WHERE):
            # one-element elementwise record: scalar code's hot path
            a = args[arg0[r]]
            if kind == C.K_UNARY:
                v1[r] = f_unary(sub, v1[a])
            elif kind == C.K_SCALAR:
                v1[r] = f_scalar(sub, v1[a], fp[r])
            else:
                v1[r] = f_binary(sub, v1[a], v1[args[arg0[r] + 1]])
        elif n == 2 and TINY_ELEMENTWISE >= 2 and arithmetic(kind, sub) \
                and _tiny_elementwise(T, r, kind, sub, 2):
            # 2-vectors, the commonest, apart: with the wider sizes in the
            # same branch the loop as a whole ran a tenth slower
            pass
        elif 0 < n <= TINY and (kind == C.K_GATHER or kind == C.K_CONCAT):
            _tiny_structural(T, r, kind)
        elif 2 < n <= TINY_ELEMENTWISE and arithmetic(kind, sub) \
                and _tiny_elementwise(T, r, kind, sub, n):
            pass
        else:
            k = fwd_slot(T, r, kind, sub)
            if k >= 0:  # leaves, constants and OUTPUT records: already in place
                f = table[k]
                if f == 0:
                    return MISSING - r
                # extra: a user op's forward, a small matmul's inner dimension
                extra = mmk[r] if kind == C.K_HOST else faddr[r]
                if call_entry_extra(f, T0, r, sub, extra) != 1:
                    return FAILED - r
        g = guard[r]
        if g != 0 and not _guard_holds(T, r, g, gvals[goff[r]:]):
            return -2 - r
    return -1
