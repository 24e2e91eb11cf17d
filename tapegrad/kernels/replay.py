"""Compiled forward replay of a traced tape (see :mod:`tapegrad.tracing`).

``replay`` walks a trace's records in recording order and recomputes each
output value from its parents' values with the same parameters the reverse
sweep reads (shapes, strides, index maps, constants), writing through the
same ``value(T, r)`` views: the sweep then runs on the replayed values
unchanged.  It returns at host records (matmul, solve, ...) so that Python
computes those with NumPy, and at a failed guard, so that the trace is
redone.  The scalar forwards (``f_unary``, ``f_scalar``, ``f_binary``) are
written per sub code beside the derivatives in rules.py and follow NumPy's
definitions, NaN and infinity handling included.
"""

import numpy as np

from . import codes as C
from ._jit import deferred, inline, inner, kernel
from .interpret import estimate_as
from ._views import OP, ARG0, SIZE, IP0, ARGS, IP, FP, V1, RIX, PTRS, APTR, REACHED  # tape fields
from ._views import _voidptr, carray, advance, copy_into, odometer, parent, rows_of, value
# the VJP loops of a segment's records: one compiled function per family, a
# call per block and record (inlined, they made one function too large to
# compile in reasonable time and memory)
from .elementwise_vjp import binary_loops as _binary_vjp_into
from .elementwise_vjp import binary_one_side_loops as _binary_one_side_into
from .elementwise_vjp import binary_self_loops as _binary_self_into
from .elementwise_vjp import scalar_loops as _scalar_vjp_into
from .elementwise_vjp import unary_loops as _unary_vjp_into
from .structural import _out_map, _runs, _step
from .dispatch import FAILED, MISSING, SIG_EXTRA, Families, call_entry_extra, load_tape
from .rules import f_binary, f_scalar, f_unary
from .unhandled import unhandled
from .user import call_d2

#: K_NONE subs of comparison records (recorded only while tracing).  Their
#: operands are named in ``ip`` (``[a, b, nd, shape, strides...]``), not as
#: parents: comparisons carry no gradient, and the sweep must never pass an
#: adjoint through them.
CMP_FIRST = 8
LESS, LESS_EQUAL, GREATER, GREATER_EQUAL, EQUAL, NOT_EQUAL = range(CMP_FIRST, CMP_FIRST + 6)

#: guard kinds (``guard[r]``): the value's truth, or the exact value
G_TRUTH = 1
G_VALUE = 2


#: ``call_d1(addr, x)``: ``(*addr)(x)`` for a C function ``double f(double)``
call_d1 = deferred("call_d1")


@inline
def f_compare(sub, a, b):
    if sub == LESS:
        t = a < b
    elif sub == LESS_EQUAL:
        t = a <= b
    elif sub == GREATER:
        t = a > b
    elif sub == GREATER_EQUAL:
        t = a >= b
    elif sub == EQUAL:
        t = a == b
    elif sub == NOT_EQUAL:
        t = a != b
    else:
        return unhandled(sub)
    return 1.0 if t else 0.0


# -- array kernels -----------------------------------------------------------------------
@inline
def _ix(i, n, m):
    return i if m == n else 0


@inline
def _unary_loop(sub, x, y):
    for i in range(y.size):
        y[i] = f_unary(sub, x[i])


@inner
def unary_fwd(T, r, sub):
    _unary_into(sub, value(T, parent(T, r, 0)), value(T, r))


@inner
def _unary_into(sub, x, y):
    # the common ops get loops compiled for a constant sub (they vectorise)
    if sub == C.IDENT or sub >= C.VIEW_FIRST:
        copy_into(y, x)
    elif sub == C.NEG:
        _unary_loop(C.NEG, x, y)
    elif sub == C.EXP:
        _unary_loop(C.EXP, x, y)
    elif sub == C.LOG:
        _unary_loop(C.LOG, x, y)
    elif sub == C.SQUARE:
        _unary_loop(C.SQUARE, x, y)
    elif sub == C.TANH:
        _unary_loop(C.TANH, x, y)
    elif sub == C.SIN:
        _unary_loop(C.SIN, x, y)
    else:
        _unary_loop(sub, x, y)


@inline
def _scalar_loop(sub, x, c, y):
    for i in range(y.size):
        y[i] = f_scalar(sub, x[i], c)


@inner
def scalar_fwd(T, r, sub):
    _scalar_into(sub, value(T, parent(T, r, 0)), T[FP][r], value(T, r))


@inner
def _scalar_into(sub, x, c, y):
    if sub == C.ADDC:
        _scalar_loop(C.ADDC, x, c, y)
    elif sub == C.MULC:
        _scalar_loop(C.MULC, x, c, y)
    else:
        _scalar_loop(sub, x, c, y)


@inline
def _binary_loop(sub, xa, xb, y):
    for i in range(y.size):
        y[i] = f_binary(sub, xa[i], xb[i])


@inner
def _binary_into(sub, xa, xb, y):
    """Same-shape binary op (not WHERE), common subs compiled for a constant sub."""
    if sub == C.ADD:
        _binary_loop(C.ADD, xa, xb, y)
    elif sub == C.SUB:
        _binary_loop(C.SUB, xa, xb, y)
    elif sub == C.MUL:
        _binary_loop(C.MUL, xa, xb, y)
    elif sub == C.DIV:
        _binary_loop(C.DIV, xa, xb, y)
    else:
        _binary_loop(sub, xa, xb, y)


@inner
def nary_fwd(T, r, sub):
    """Broadcasting binary ops and ``where`` (``ip`` as in ``nary_vjp``)."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    y = value(T, r)
    n = y.size
    if sub == C.WHERE:
        c = value(T, parent(T, r, 0))
        xa, xb = value(T, parent(T, r, 1)), value(T, parent(T, r, 2))
        mc, ma, mb = c.size, xa.size, xb.size
        if nd == 0:
            for i in range(n):
                if c[_ix(i, n, mc)] != 0.0:
                    y[i] = xa[_ix(i, n, ma)]
                else:
                    y[i] = xb[_ix(i, n, mb)]
            return
        shape, strides, cnt, pos = odometer(ip, b, nd, 3)
        for i in range(n):
            y[i] = xa[pos[1]] if c[pos[0]] != 0.0 else xb[pos[2]]
            advance(shape, strides, cnt, pos)
        return
    xa, xb = value(T, parent(T, r, 0)), value(T, parent(T, r, 1))
    ma, mb = xa.size, xb.size
    if ma == n and mb == n:
        _binary_into(sub, xa, xb, y)
        return
    if nd == 0:
        for i in range(n):
            y[i] = f_binary(sub, xa[_ix(i, n, ma)], xb[_ix(i, n, mb)])
        return
    shape, strides, cnt, pos = odometer(ip, b, nd, 2)
    for i in range(n):
        y[i] = f_binary(sub, xa[pos[0]], xb[pos[1]])
        advance(shape, strides, cnt, pos)


@inner
def compare_fwd(T, r, sub):
    """A comparison record: ``ip`` holds ``[a, b, nd, shape, strides...]``."""
    ip = T[IP]
    b = T[IP0][r]
    xa, xb = value(T, ip[b]), value(T, ip[b + 1])
    y = value(T, r)
    n = y.size
    ma, mb = xa.size, xb.size
    nd = ip[b + 2]
    if nd == 0:
        for i in range(n):
            y[i] = f_compare(sub, xa[_ix(i, n, ma)], xb[_ix(i, n, mb)])
        return
    shape, strides, cnt, pos = odometer(ip, b + 2, nd, 2)
    for i in range(n):
        y[i] = f_compare(sub, xa[pos[0]], xb[pos[1]])
        advance(shape, strides, cnt, pos)


@inline
def _pairwise(x, a, k):
    """NumPy's pairwise summation (``pairwise_sum`` in its loops_utils.h):
    ``0.0 + _pairwise(x, 0, x.size)`` is bit for bit ``np.sum(x)`` of a
    contiguous float64 array, so a replayed full sum equals the eager one.

    NumPy recurses (halves rounded to multiples of 8, blocks of <= 128 summed
    with eight accumulators); this walks the same tree with an explicit
    stack (cached Numba code and recursion do not mix well)."""
    if k <= 128:
        return _pairwise_block(x, a, k)
    sa = np.empty(64, np.int64)
    sk = np.empty(64, np.int64)
    stage = np.empty(64, np.int64)
    acc = np.empty(64)
    sa[0], sk[0], stage[0] = a, k, 0
    sp = 1
    ret = 0.0
    while sp > 0:
        t = sp - 1
        if sk[t] <= 128:
            ret = _pairwise_block(x, sa[t], sk[t])
            sp -= 1
            continue
        k2 = sk[t] // 2
        k2 -= k2 % 8
        if stage[t] == 0:  # descend into the left half
            stage[t] = 1
            sa[sp], sk[sp], stage[sp] = sa[t], k2, 0
            sp += 1
        elif stage[t] == 1:  # left done: keep it, descend into the right half
            acc[t] = ret
            stage[t] = 2
            sa[sp], sk[sp], stage[sp] = sa[t] + k2, sk[t] - k2, 0
            sp += 1
        else:  # both done: left + right, as NumPy adds them
            ret = acc[t] + ret
            sp -= 1
    return ret


@inline
def _pairwise_block(x, a, k):
    if k < 8:
        res = 0.0
        for i in range(a, a + k):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[a], x[a + 1], x[a + 2], x[a + 3]
    r4, r5, r6, r7 = x[a + 4], x[a + 5], x[a + 6], x[a + 7]
    i = 8
    while i < k - (k % 8):
        j = a + i
        r0 += x[j]
        r1 += x[j + 1]
        r2 += x[j + 2]
        r3 += x[j + 3]
        r4 += x[j + 4]
        r5 += x[j + 5]
        r6 += x[j + 6]
        r7 += x[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < k:
        res += x[a + i]
        i += 1
    return res


@inner
def sum_fwd(T, r, sub):
    """sum and mean (``ip`` as in ``reduce_fwd``): a family of their own, so
    that the other reductions compile only when a trace uses them."""
    ip = T[IP]
    b = T[IP0][r]
    x, y = value(T, parent(T, r, 0)), value(T, r)
    n, m = x.size, y.size
    if m == 1:
        # a full sum: NumPy's order exactly (eager sums with np.sum)
        y[0] = 0.0 + _pairwise(x, 0, n) if n > 0 else 0.0
        if sub == C.MEAN:
            y[0] /= n
        return
    A, R, Cn = _runs(ip, b, ip[b], n, m)
    om = _out_map(ip, b, ip[b], n, 2) if R == 0 else np.zeros(0, np.int64)
    y[:] = 0.0
    a, q, c = 0, 0, 0
    for i in range(n):
        j = om[i] if R == 0 else a * Cn + c
        y[j] += x[i]
        if R != 0:
            a, q, c = _step(a, q, c, R, Cn)
    if sub == C.MEAN:
        cnt = n // m if m > 0 else 0
        for j in range(m):
            y[j] /= cnt


@inner
def reduce_fwd(T, r, sub):
    """``ip`` holds ``[nd, in_shape, out_strides]`` (0 on reduced axes)."""
    ip = T[IP]
    b = T[IP0][r]
    x, y = value(T, parent(T, r, 0)), value(T, r)
    n, m = x.size, y.size
    if not (sub == C.PROD or sub == C.MAX or sub == C.MIN
            or sub == C.LOGSUMEXP or sub == C.SOFTMAX or sub == C.LOG_SOFTMAX):
        y[:] = np.nan  # no rule here: NaN, never some other reduction's value
        return
    # the group of input element i: a cursor when the reduced axes are one
    # run (no index array, see structural._runs), else an index map
    A, R, Cn = _runs(ip, b, ip[b], n, m) if m > 1 else (1, n, 1)
    if R == 0:
        om = _out_map(ip, b, ip[b], n, 2)
    else:
        om = np.zeros(0, np.int64)
    if sub == C.PROD:
        y[:] = 1.0
        a, q, c = 0, 0, 0
        for i in range(n):
            j = om[i] if R == 0 else a * Cn + c
            y[j] *= x[i]
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
        return
    if sub == C.MAX or sub == C.MIN:
        seen = np.zeros(m, np.bool_)
        a, q, c = 0, 0, 0
        for i in range(n):
            j = om[i] if R == 0 else a * Cn + c
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
            xi = x[i]
            if not seen[j]:
                y[j] = xi
                seen[j] = True
            elif y[j] != y[j]:
                pass  # NaN propagates, as in NumPy
            elif xi != xi or (xi > y[j] if sub == C.MAX else xi < y[j]):
                y[j] = xi
        return
    # logsumexp, softmax, log_softmax: shifted by each group's finite maximum
    if R == 0:
        rows = m if sub == C.LOGSUMEXP else rows_of(om)
    else:
        rows = A * Cn
    mx = np.full(rows, -np.inf)
    a, q, c = 0, 0, 0
    for i in range(n):
        j = om[i] if R == 0 else a * Cn + c
        if x[i] > mx[j]:
            mx[j] = x[i]
        if R != 0:
            a, q, c = _step(a, q, c, R, Cn)
    for j in range(rows):
        if not np.isfinite(mx[j]):
            mx[j] = 0.0
    s = np.zeros(rows)
    a, q, c = 0, 0, 0
    for i in range(n):
        j = om[i] if R == 0 else a * Cn + c
        s[j] += np.exp(x[i] - mx[j])
        if R != 0:
            a, q, c = _step(a, q, c, R, Cn)
    if sub == C.LOGSUMEXP:
        for j in range(m):
            y[j] = np.log(s[j]) + mx[j]
        return
    a, q, c = 0, 0, 0
    for i in range(n):
        j = om[i] if R == 0 else a * Cn + c
        if sub == C.SOFTMAX:
            y[i] = np.exp(x[i] - mx[j]) / s[j]
        else:
            y[i] = x[i] - mx[j] - np.log(s[j])
        if R != 0:
            a, q, c = _step(a, q, c, R, Cn)


@inner
def gather_fwd(T, r):
    """``y[k] = x[idx[k]]`` (0 where ``idx[k]`` is -1); a size-0 record fills
    the OUTPUT records after it in turn."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    x = value(T, parent(T, r, 0))
    if T[SIZE][r] == 0:
        v, k = r + 1, 0
        while k < m:
            y = value(T, v)
            for j in range(y.size):
                i = ip[b + 1 + k]
                y[j] = x[i] if i >= 0 else 0.0
                k += 1
            v += 1
        return
    y = value(T, r)
    for k in range(m):
        i = ip[b + 1 + k]
        y[k] = x[i] if i >= 0 else 0.0


@inner
def concat_fwd(T, r):
    """``ip`` holds ``[m, src(m), pos(m)]``: output k is ``args[src_k][pos_k]``."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    y = value(T, r)
    for k in range(m):
        y[k] = value(T, parent(T, r, ip[b + 1 + k]))[ip[b + 1 + m + k]]


@inner
def scan_fwd(T, r, sub):
    """``ip`` holds ``[outer, n, inner]``."""
    ip = T[IP]
    b = T[IP0][r]
    outer, n, inner = ip[b], ip[b + 1], ip[b + 2]
    x, y = value(T, parent(T, r, 0)), value(T, r)
    if sub != C.CUMSUM and sub != C.CUMPROD:  # no rule here: NaN
        y[:] = np.nan
        return
    for o in range(outer):
        for i in range(inner):
            base = o * n * inner + i
            acc = 0.0 if sub == C.CUMSUM else 1.0
            for k in range(n):
                j = base + k * inner
                if sub == C.CUMSUM:
                    acc += x[j]
                else:
                    acc *= x[j]
                y[j] = acc


@inner
def user_fwd(T, r, sub, addr):
    """A user elementwise op through its forward's C address (``ip`` as in
    kernels/user.py)."""
    y = value(T, r)
    n = y.size
    if sub == C.USER_UNARY:
        x = value(T, parent(T, r, 0))
        for i in range(n):
            y[i] = call_d1(addr, x[i])
        return
    if sub != C.USER_BINARY:  # no rule here: NaN
        y[:] = np.nan
        return
    ip = T[IP]
    b = T[IP0][r]
    xa, xb = value(T, parent(T, r, 0)), value(T, parent(T, r, 1))
    ma, mb = xa.size, xb.size
    nd = ip[b + 3]
    if nd == 0:
        for i in range(n):
            y[i] = call_d2(addr, xa[_ix(i, n, ma)], xb[_ix(i, n, mb)])
        return
    shape, strides, cnt, pos = odometer(ip, b + 3, nd, 2)
    for i in range(n):
        y[i] = call_d2(addr, xa[pos[0]], xb[pos[1]])
        advance(shape, strides, cnt, pos)


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
}, fwd_slot)


def replay(T, faddr, guard, goff, gvals, start, stop):
    """Recompute records ``start .. stop-1`` in order.

    Returns -1 when done, ``r >= 0`` at a host record r (Python computes it
    and resumes at ``r + 1``), and ``-2 - r`` when record r's guard does not
    hold (the trace no longer describes what the function does).
    """
    return FWD.run(_replay, (T, faddr, guard, goff, gvals, start, stop, FWD.table), 5)


@kernel
def _replay(T, faddr, guard, goff, gvals, start, stop, table):
    """``replay``'s compiled loop; returns ``MISSING - r`` at a record whose
    forward family is not compiled yet (before computing it), ``FAILED - r``
    when its kernel raised."""
    op, arg0, size, args, fp, v1 = T[OP], T[ARG0], T[SIZE], T[ARGS], T[FP], T[V1]
    for r in range(start, stop):
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        if kind == C.K_HOST or kind > C.K_USER:
            # host records: Python computes them; a kind with no kernel goes
            # there too, and Python's host path raises, naming the op
            return r
        if size[r] == 1 and kind <= C.K_NARY and kind != C.K_NONE \
                and not (kind == C.K_NARY and sub == C.WHERE):
            # one-element elementwise record: scalar code's hot path
            a = args[arg0[r]]
            if kind == C.K_UNARY:
                v1[r] = f_unary(sub, v1[a])
            elif kind == C.K_SCALAR:
                v1[r] = f_scalar(sub, v1[a], fp[r])
            else:
                v1[r] = f_binary(sub, v1[a], v1[args[arg0[r] + 1]])
        else:
            k = fwd_slot(T, r, kind, sub)
            if k >= 0:  # leaves, constants and OUTPUT records: already in place
                f = table[k]
                if f == 0:
                    return MISSING - r
                if call_entry_extra(f, T, r, sub, faddr[r]) != 1:
                    return FAILED - r
        g = guard[r]
        if g != 0 and not _guard_holds(T, r, g, gvals[goff[r]:]):
            return -2 - r
    return -1


# -- fused elementwise segments --------------------------------------------------------
#: elements per block of a fused segment: every record's block of values and
#: adjoints stays in cache while the segment's records run over it
CHUNK = 2048

_CONST = C.code(C.K_NONE, C.CONST)


@inline
def _view(addr, m):
    return carray(_voidptr(addr), (m,), np.float64)


@inline
def _vaddr(T, p, r0, slot, base, lo):
    """Address of element ``lo`` of record p's value: a row of the segment's
    block scratch for records without storage of their own (``slot >= 0``),
    else the record's storage (every operand of a segment has > SMALL elements)."""
    q = p - r0
    if q >= 0 and q < slot.size and slot[q] >= 0:
        return base + 8 * CHUNK * slot[q]
    return T[PTRS][T[RIX][p]] + 8 * lo


@inline
def _gaddr(T, p, r0, slot, base, lo):
    """The same for record p's adjoint."""
    q = p - r0
    if q >= 0 and q < slot.size and slot[q] >= 0:
        return base + 8 * CHUNK * slot[q]
    return T[APTR][p] + 8 * lo


@inner
def _seg_record_fwd(T, r, r0, slot, base, lo, m):
    op, arg0, args = T[OP], T[ARG0], T[ARGS]
    code = op[r]
    kind = code >> C.SHIFT
    sub = code & C.MASK
    y = _view(_vaddr(T, r, r0, slot, base, lo), m)
    x = _view(_vaddr(T, args[arg0[r]], r0, slot, base, lo), m)
    if kind == C.K_UNARY:
        _unary_into(sub, x, y)
    elif kind == C.K_SCALAR:
        _scalar_into(sub, x, T[FP][r], y)
    elif kind == C.K_NARY:
        _binary_into(sub, x, _view(_vaddr(T, args[arg0[r] + 1], r0, slot, base, lo), m), y)
    else:  # segments hold elementwise records only
        y[:] = np.nan


@kernel
def seg_forward(T, r0, r1, start, n, slot, vs):
    """Records ``r0 .. r1-1`` (same-size elementwise ops, and leaves or
    constants) block by block: a block of every record is computed before
    the next block, so intermediates that nothing outside the segment reads
    (``slot >= 0``) live only in the block scratch ``vs`` and are never
    written to memory.  Element for element the same arithmetic as the
    record-by-record replay.  Covers elements ``start .. n-1`` (``start`` a
    multiple of CHUNK): disjoint ranges may run on several threads, each
    with its own ``vs``."""
    op = T[OP]
    base = vs.ctypes.data
    for lo in range(start, n, CHUNK):
        m = min(CHUNK, n - lo)
        for r in range(r0, r1):
            if (op[r] >> C.SHIFT) != C.K_NONE:
                _seg_record_fwd(T, r, r0, slot, base, lo, m)


@inline
def _put_chunk(gx, m, first):
    """Zero a block before accumulating into it (the sweep's ``fa != fb`` case)."""
    if first:
        for i in range(m):
            gx[i] = 0.0


@kernel
def seg_plan(T, r0, r1, slot):
    """Which records of a fused segment its reverse sweep reaches, and for
    each (record, operand) whether the VJP writes that operand's adjoint and
    whether that write is the first (assign) or accumulates -- in the order
    the record-by-record sweep would write, so that ``seg_backward`` gives
    that sweep's results.  Marks the reached records outside the segment.
    Returns ``(reach, write, assign)``."""
    op, arg0, args, reached = T[OP], T[ARG0], T[ARGS], T[REACHED]
    k = r1 - r0
    reach = np.zeros(k, np.bool_)
    assign = np.zeros(2 * k, np.bool_)
    write = np.zeros(2 * k, np.bool_)
    for r in range(r1 - 1, r0 - 1, -1):
        q = r - r0
        if (op[r] >> C.SHIFT) == C.K_NONE:
            continue
        if slot[q] < 0:
            reach[q] = reached[r]
        if not reach[q]:
            continue
        a0 = arg0[r]
        for j in range(arg0[r + 1] - a0):
            p = args[a0 + j]
            if op[p] == _CONST or (j == 1 and p == args[a0]):
                continue  # a constant's adjoint is never read; x op x writes once
            write[2 * q + j] = True
            pq = p - r0
            if pq >= 0 and pq < k and slot[pq] >= 0:
                assign[2 * q + j] = not reach[pq]
                reach[pq] = True
            else:
                assign[2 * q + j] = not reached[p]
                reached[p] = True
    return reach, write, assign


estimate_as(seg_plan, "records")


@kernel
def seg_backward(T, r0, r1, start, n, slot, need, reach, write, assign, vs, gs):
    """The reverse sweep over a fused segment (as planned by ``seg_plan``),
    block by block, over elements ``start .. n-1``.

    The intermediates' values are recomputed per block where a VJP reads them
    (``need``), their adjoints live in the block scratch ``gs``; only the
    adjoints of records outside the segment (and of segment records that
    something outside reads) are written to memory.  The per-element VJPs
    are elementwise_vjp.py's loops.
    """
    op, arg0, args, fp = T[OP], T[ARG0], T[ARGS], T[FP]
    vb, gb = vs.ctypes.data, gs.ctypes.data
    for lo in range(start, n, CHUNK):
        m = min(CHUNK, n - lo)
        for r in range(r0, r1):
            if need[r - r0]:
                _seg_record_fwd(T, r, r0, slot, vb, lo, m)
        for r in range(r1 - 1, r0 - 1, -1):
            q = r - r0
            if not reach[q]:
                continue
            code = op[r]
            kind = code >> C.SHIFT
            sub = code & C.MASK
            a0 = arg0[r]
            g = _view(_gaddr(T, r, r0, slot, gb, lo), m)
            y = _view(_vaddr(T, r, r0, slot, vb, lo), m)
            pa = args[a0]
            xa = _view(_vaddr(T, pa, r0, slot, vb, lo), m)
            ga = _view(_gaddr(T, pa, r0, slot, gb, lo), m)
            wa, fa = write[2 * q], assign[2 * q]
            if kind == C.K_UNARY:
                if wa:
                    _unary_vjp_into(sub, g, xa, y, ga, fa)
                continue
            if kind == C.K_SCALAR:
                if wa:
                    _scalar_vjp_into(sub, g, xa, y, fp[r], ga, fa)
                continue
            if kind != C.K_NARY:  # segments hold elementwise records only
                ga[:] = np.nan
                continue
            pb = args[a0 + 1]
            xb = _view(_vaddr(T, pb, r0, slot, vb, lo), m)
            if pb == pa:  # x op x: both partials to one adjoint
                if wa:
                    _binary_self_into(sub, g, xa, y, ga, fa)
                continue
            gbv = _view(_gaddr(T, pb, r0, slot, gb, lo), m)
            wb, fb = write[2 * q + 1], assign[2 * q + 1]
            if wa and wb:
                # one of them written before: zero the other's block, accumulate
                if fa != fb:
                    _put_chunk(ga, m, fa)
                    _put_chunk(gbv, m, fb)
                _binary_vjp_into(sub, g, xa, xb, y, ga, gbv, fa and fb)
            elif wa or wb:  # the other operand is a constant
                _binary_one_side_into(sub, g, xa, xb, y, ga if wa else gbv,
                                      fa if wa else fb, wa)
