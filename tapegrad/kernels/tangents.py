"""Forward mode: the tangent sweep, one compiled loop over the tape upwards.

Recording order is a topological order, so walking record ids upwards
visits every record after all of its parents.  Record ``r``'s tangents are a
``(size, p)`` block (p tangent directions per element, side by side), at the
address ``T[APTR][r]`` -- the slot the reverse sweep uses for adjoints.  With
the p directions innermost, every rule's inner loop runs over p contiguous
numbers (it vectorises), a multi-output op's outputs form one contiguous
span, and a host rule sees a Jacobian-shaped ``(size, p)`` matrix (a matmul
tangent is one GEMM for all p).

Only records that depend on a seeded leaf are *reached* (``T[REACHED]``) and get
tangent memory: constants, and everything recorded before the leaves, have
tangent zero and cost nothing.  A rule therefore skips unreached parents
rather than reading zeros.

Each rule is the transpose of the op's VJP: the same local partials
(``d_unary``, ``d_scalar``, ``d_binary``, the user op's compiled derivative)
and the same index maps, read the other way.  So a rule reads exactly the
values the VJP reads, which the tape already keeps (``optable.READS_*``):
forward mode needs no extra values recorded.
"""
import math

import numpy as np

from . import codes as C
from ._jit import inline, inner, kernel
from ._views import OP, ARG0, SIZE, IP0, ARGS, IP, FP, RIX, PTRS, APTR, REACHED  # tape fields
from ._views import _voidptr, carray, advance, copy_into, odometer, parent, rows_of, value
from .dispatch import FAILED, MISSING, SIG_EXTRA, Families, call_entry_extra, load_tape
from .rules import d_binary, d_scalar, d_unary
from .structural import _out_map, strided
from .user import call_d2, call_d3


@inline
def tangent(T, v, p):
    """Record v's tangents: ``size * p`` numbers, p per element."""
    return carray(_voidptr(T[APTR][v]), (T[SIZE][v] * p,), np.float64)


@inline
def tangent_span(T, v, n, p):
    """``n * p`` tangent numbers from record v's on (a multi-output op's
    outputs follow it contiguously)."""
    return carray(_voidptr(T[APTR][v]), (n * p,), np.float64)


@inline
def row(t, i, p):
    """Element i's p tangents.  Loops over a row view vectorise; the same
    loop written with flat indices ``i * p + k`` does not (measured: about
    5x slower), so every rule below works row by row."""
    return t[i * p:(i + 1) * p]


# -- elementwise -----------------------------------------------------------------------
@inline
def _unary_d(sub, x, y, d):
    for i in range(d.size):
        d[i] = d_unary(sub, x[i], y[i])


@inline
def _scale(d, tx, ty, p):
    """``ty[i, :] = d_i * tx[i, :]``."""
    if p == 1:
        for i in range(d.size):
            ty[i] = d[i] * tx[i]
    else:
        for i in range(d.size):
            di = d[i]
            x, y = row(tx, i, p), row(ty, i, p)
            for k in range(p):
                y[k] = di * x[k]


@inner
def unary_jvp(T, r, sub, p):
    xr = parent(T, r, 0)
    tx, ty = tangent(T, xr, p), tangent(T, r, p)
    if sub == C.IDENT or sub >= C.VIEW_FIRST:
        copy_into(ty, tx)
        return
    if sub == C.NEG:
        for k in range(ty.size):
            ty[k] = -tx[k]
        return
    if sub == C.ZERO or sub >= C.ZERO_FIRST:
        ty[:] = 0.0
        return
    x, y = value(T, xr), value(T, r)
    # the partials first, in loops compiled for a constant sub where it
    # matters (the switch folds away, the loop vectorises); then one shared
    # scaling loop: fewer copies of the big switch keep compile time down
    d = np.empty(T[SIZE][r])
    if sub == C.EXP:
        _unary_d(C.EXP, x, y, d)
    elif sub == C.TANH:
        _unary_d(C.TANH, x, y, d)
    else:
        _unary_d(sub, x, y, d)
    _scale(d, tx, ty, p)


@inner
def scalar_jvp(T, r, sub, p):
    xr = parent(T, r, 0)
    tx, ty = tangent(T, xr, p), tangent(T, r, p)
    c = T[FP][r]
    if sub == C.ADDC:
        copy_into(ty, tx)
        return
    if sub == C.MULC:
        for k in range(ty.size):
            ty[k] = c * tx[k]
        return
    x, y = value(T, xr), value(T, r)
    d = np.empty(T[SIZE][r])
    for i in range(d.size):
        d[i] = d_scalar(sub, x[i], y[i], c)
    _scale(d, tx, ty, p)


@inline
def _pos(i, n, m):
    """Operand index of output element i when no operand is broadcast beyond
    one element (``ip`` has ``nd == 0``)."""
    return i if m == n else 0


@inline
def _binary_d(sub, xa, xb, y, da, db):
    for i in range(y.size):
        da[i], db[i] = d_binary(sub, xa[i], xb[i], y[i])


@inline
def _combine(da, db, ta, tb, ty, p, ka, kb):
    """``ty[i, :] = da_i ta[i, :] + db_i tb[i, :]`` for same-shape operands,
    one loop per reached combination so the inner loop has no branch."""
    n = da.size
    if ka and kb:
        for i in range(n):
            a, b = da[i], db[i]
            xa, xb, y = row(ta, i, p), row(tb, i, p), row(ty, i, p)
            for k in range(p):
                y[k] = a * xa[k] + b * xb[k]
    elif ka:
        _scale(da, ta, ty, p)
    else:
        _scale(db, tb, ty, p)


@inline
def _bin_put(ty, ta, tb, i, ia, ib, da, db, p, ka, kb):
    y = row(ty, i, p)
    if ka and kb:
        xa, xb = row(ta, ia, p), row(tb, ib, p)
        for k in range(p):
            y[k] = da * xa[k] + db * xb[k]
    elif ka:
        xa = row(ta, ia, p)
        for k in range(p):
            y[k] = da * xa[k]
    elif kb:
        xb = row(tb, ib, p)
        for k in range(p):
            y[k] = db * xb[k]
    else:
        for k in range(p):
            y[k] = 0.0


@inner
def nary_jvp(T, r, sub, p):
    """Broadcasting binary ops and ``where`` (``ip`` as in ``nary_vjp``): the
    tangent is ``da t_a + db t_b`` at each output element's operand
    positions, unreached operands contributing nothing."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    reached = T[REACHED]
    ty = tangent(T, r, p)
    n = T[SIZE][r]
    if sub == C.WHERE:
        cr, ar, br = parent(T, r, 0), parent(T, r, 1), parent(T, r, 2)
        cond = value(T, cr)
        ka, kb = reached[ar], reached[br]
        ta, tb = tangent(T, ar, p), tangent(T, br, p)
        mc, ma, mb = cond.size, T[SIZE][ar], T[SIZE][br]
        if nd == 0:
            for i in range(n):
                take_a = cond[_pos(i, n, mc)] != 0.0
                _bin_put(ty, ta, tb, i, _pos(i, n, ma), _pos(i, n, mb),
                         1.0, 1.0, p, ka and take_a, kb and not take_a)
            return
        shape, strides, cnt, pos = odometer(ip, b, nd, 3)
        for i in range(n):
            take_a = cond[pos[0]] != 0.0
            _bin_put(ty, ta, tb, i, pos[1], pos[2], 1.0, 1.0, p, ka and take_a,
                     kb and not take_a)
            advance(shape, strides, cnt, pos)
        return
    if sub >= C.NARY_ZERO_FIRST:
        ty[:] = 0.0
        return
    ar, br = parent(T, r, 0), parent(T, r, 1)
    ka, kb = reached[ar], reached[br]
    xa, xb, y = value(T, ar), value(T, br), value(T, r)
    ta, tb = tangent(T, ar, p), tangent(T, br, p)
    ma, mb = xa.size, xb.size
    da, db = np.empty(n), np.empty(n)
    if ma == n and mb == n:
        if sub == C.MUL:
            _binary_d(C.MUL, xa, xb, y, da, db)
        elif sub == C.ADD or sub == C.SUB:
            da[:] = 1.0
            db[:] = 1.0 if sub == C.ADD else -1.0
        else:
            _binary_d(sub, xa, xb, y, da, db)
        _combine(da, db, ta, tb, ty, p, ka, kb)
        return
    # broadcasting: each output element's operand positions, then one loop
    ia, ib = np.empty(n, np.int64), np.empty(n, np.int64)
    if nd == 0:
        for i in range(n):
            ia[i], ib[i] = _pos(i, n, ma), _pos(i, n, mb)
    else:
        shape, strides, cnt, pos = odometer(ip, b, nd, 2)
        for i in range(n):
            ia[i], ib[i] = pos[0], pos[1]
            advance(shape, strides, cnt, pos)
    for i in range(n):
        da[i], db[i] = d_binary(sub, xa[ia[i]], xb[ib[i]], y[i])
    for i in range(n):
        _bin_put(ty, ta, tb, i, ia[i], ib[i], da[i], db[i], p, ka, kb)


# -- reductions, softmax ----------------------------------------------------------------
@inline
def _acc(ty, j, tx, i, w, p):
    """``ty[j, :] += w * tx[i, :]``."""
    y, x = row(ty, j, p), row(tx, i, p)
    for k in range(p):
        y[k] += w * x[k]


@inner
def sum_jvp(T, r, sub, p):
    """sum and mean (``ip`` as for reductions): a family of their own, so
    that the other reductions' rules compile only when a program uses them."""
    ip = T[IP]
    b = T[IP0][r]
    xr = parent(T, r, 0)
    tx, ty = tangent(T, xr, p), tangent(T, r, p)
    n, m = T[SIZE][xr], T[SIZE][r]
    om = _out_map(ip, b, ip[b], n, m)
    ty[:] = 0.0
    w = 1.0 if sub == C.SUM else (m / n if n > 0 else 0.0)
    for i in range(n):
        _acc(ty, om[i] if m > 1 else 0, tx, i, w, p)


@inner
def reduce_jvp(T, r, sub, p):
    """The transposes of ``reduce_vjp``'s rules (``ip`` alike).  Tied maxima
    and minima each pass on an equal share, as their gradients do."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    xr = parent(T, r, 0)
    tx, ty = tangent(T, xr, p), tangent(T, r, p)
    n, m = T[SIZE][xr], T[SIZE][r]
    if sub == C.SOFTMAX or sub == C.LOG_SOFTMAX:
        # softmax: t_y = y (t_x - sum(y t_x)); log_softmax: t_x - sum(e^y t_x)
        om = _out_map(ip, b, nd, n, 2)
        rows = rows_of(om)
        s = np.zeros(rows * p)
        y = value(T, r)
        for i in range(n):
            w = y[i] if sub == C.SOFTMAX else math.exp(y[i])
            _acc(s, om[i], tx, i, w, p)
        for i in range(n):
            yr, xr_, sr = row(ty, i, p), row(tx, i, p), row(s, om[i], p)
            if sub == C.SOFTMAX:
                yi = y[i]
                for k in range(p):
                    yr[k] = yi * (xr_[k] - sr[k])
            else:
                for k in range(p):
                    yr[k] = xr_[k] - sr[k]
        return
    om = _out_map(ip, b, nd, n, m)
    ty[:] = 0.0
    x = value(T, xr)
    y = value(T, r)
    if sub == C.MAX or sub == C.MIN:
        ties = np.zeros(m)
        for i in range(n):
            j = om[i] if m > 1 else 0
            if x[i] == y[j] or (x[i] != x[i] and y[j] != y[j]):
                ties[j] += 1.0
        for i in range(n):
            j = om[i] if m > 1 else 0
            if x[i] == y[j] or (x[i] != x[i] and y[j] != y[j]):
                _acc(ty, j, tx, i, 1.0 / ties[j], p)
    elif sub == C.PROD:
        # d y / d x_i is the product of the others: exact with zeros present
        zeros = np.zeros(m, np.int64)
        rest = np.ones(m)
        for i in range(n):
            j = om[i] if m > 1 else 0
            if x[i] == 0.0:
                zeros[j] += 1
            else:
                rest[j] *= x[i]
        for i in range(n):
            j = om[i] if m > 1 else 0
            if zeros[j] == 0:
                _acc(ty, j, tx, i, rest[j] / x[i], p)
            elif zeros[j] == 1 and x[i] == 0.0:
                _acc(ty, j, tx, i, rest[j], p)
    elif sub == C.LOGSUMEXP:
        for i in range(n):
            j = om[i] if m > 1 else 0
            _acc(ty, j, tx, i, math.exp(x[i] - y[j]), p)
    else:  # a sub code with no rule here: NaN, never a silent zero
        ty[:] = np.nan


# -- selections, joins, scans ---------------------------------------------------------------
@inner
def gather_jvp(T, r, sub, p):
    """``ip`` holds ``[m, idx...]``: output k's tangent is input ``idx_k``'s
    (zero where ``idx_k`` is -1), or the strided form ``[m, offset, nd,
    shape, strides]``.  A multi-output record (size 0) fills its outputs'
    span, which follows it."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    ty = tangent_span(T, r, m, p)
    tx = tangent(T, parent(T, r, 0), p)
    if strided(sub):  # the strided form (kernels/codes.py): no map to read
        _strided_rows(ty, tx, ip, b + 1, m, p)
        return
    for k in range(m):
        i = ip[b + 1 + k]
        y = row(ty, k, p)
        if i >= 0:
            x = row(tx, i, p)
            for q in range(p):
                y[q] = x[q]
        else:
            for q in range(p):
                y[q] = 0.0


@inline
def _strided_rows(ty, tx, ip, at, m, p):
    """Output k's p tangent entries are those of operand element ``offset +
    sum_d i_d * strides[d]`` (``ip[at:]``: ``[offset, nd, shape, strides]``),
    k walking the output in C order with the odometer."""
    off = ip[at]
    nd = ip[at + 1]
    if nd == 0:
        y, x = row(ty, 0, p), row(tx, off, p)
        for q in range(p):
            y[q] = x[q]
        return
    shape, strides, cnt, pos = odometer(ip, at + 1, nd, 1)
    for k in range(m):
        y, x = row(ty, k, p), row(tx, off + pos[0], p)
        for q in range(p):
            y[q] = x[q]
        advance(shape, strides, cnt, pos)


@inner
def concat_jvp(T, r, sub, p):
    """``ip`` holds ``[m, src(m), pos(m)]``: output k is ``args[src_k][pos_k]``."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    reached = T[REACHED]
    ty = tangent(T, r, p)
    for k in range(m):
        src = parent(T, r, ip[b + 1 + k])
        y = row(ty, k, p)
        if reached[src]:
            x = row(tangent(T, src, p), ip[b + 1 + m + k], p)
            for q in range(p):
                y[q] = x[q]
        else:
            for q in range(p):
                y[q] = 0.0


@inner
def scan_jvp(T, r, sub, p):
    """``ip`` holds ``[outer, n, inner]``.  cumsum: the running sum of the
    tangents.  cumprod: ``t_k = t_{k-1} x_k + y_{k-1} tx_k``, no division."""
    ip = T[IP]
    b = T[IP0][r]
    outer, n, inner = ip[b], ip[b + 1], ip[b + 2]
    xr = parent(T, r, 0)
    tx, ty = tangent(T, xr, p), tangent(T, r, p)
    if sub != C.CUMSUM and sub != C.CUMPROD:  # no rule here: NaN, never a silent zero
        ty[:] = np.nan
        return
    x = value(T, xr)
    y = value(T, r)
    for o in range(outer):
        for i in range(inner):
            base = o * n * inner + i
            for k in range(n):
                j = base + k * inner
                yj, xj_ = row(ty, j, p), row(tx, j, p)
                if k == 0:
                    for q in range(p):
                        yj[q] = xj_[q]
                    continue
                yb_ = row(ty, j - inner, p)
                if sub == C.CUMSUM:
                    for q in range(p):
                        yj[q] = yb_[q] + xj_[q]
                else:
                    xj, yb = x[j], y[j - inner]
                    for q in range(p):
                        yj[q] = yb_[q] * xj + yb * xj_[q]


# -- user elementwise ops ------------------------------------------------------------------
@inner
def user_jvp(T, r, sub, p):
    """Through the op's compiled partials (``ip`` as in ``user_vjp``)."""
    ip = T[IP]
    b = T[IP0][r]
    d0 = ip[b + 1]
    y = value(T, r)
    ty = tangent(T, r, p)
    n = T[SIZE][r]
    if sub == C.USER_UNARY:
        xr = parent(T, r, 0)
        x, tx = value(T, xr), tangent(T, xr, p)
        for i in range(n):
            d = call_d2(d0, x[i], y[i])
            yr, xr_ = row(ty, i, p), row(tx, i, p)
            for k in range(p):
                yr[k] = d * xr_[k]
        return
    if sub != C.USER_BINARY:  # no rule here: NaN, never a silent zero
        ty[:] = np.nan
        return
    d1 = ip[b + 2]
    reached = T[REACHED]
    ar, br = parent(T, r, 0), parent(T, r, 1)
    ka, kb = reached[ar], reached[br]
    xa, xb = value(T, ar), value(T, br)
    ta, tb = tangent(T, ar, p), tangent(T, br, p)
    nd = ip[b + 3]
    ma, mb = xa.size, xb.size
    if nd == 0:
        for i in range(n):
            ia, ib = _pos(i, n, ma), _pos(i, n, mb)
            da = call_d3(d0, xa[ia], xb[ib], y[i]) if ka else 0.0
            db = call_d3(d1, xa[ia], xb[ib], y[i]) if kb else 0.0
            _bin_put(ty, ta, tb, i, ia, ib, da, db, p, ka, kb)
        return
    shape, strides, cnt, pos = odometer(ip, b + 3, nd, 2)
    for i in range(n):
        ia, ib = pos[0], pos[1]
        da = call_d3(d0, xa[ia], xb[ib], y[i]) if ka else 0.0
        db = call_d3(d1, xa[ia], xb[ib], y[i]) if kb else 0.0
        _bin_put(ty, ta, tb, i, ia, ib, da, db, p, ka, kb)
        advance(shape, strides, cnt, pos)


# -- the sweep and its layout --------------------------------------------------------------
@kernel
def fwd_layout(op, arg0, args, size, start, upto, reached, root):
    """Which records ``start .. upto-1`` depend on the seeded ones (``reached``
    comes in with the seeds set) and lead to the roots ``root .. upto-1``,
    and where their tangents live: returns ``(toff, total)``, element offsets
    (-1 for unreached records) and the number of elements that need tangents.

    A record that reads the seeds but that no root reads -- another graph
    over the same leaves, or one an earlier backward freed -- gets no
    tangent and no rule runs for it."""
    need = np.zeros(upto, np.bool_)
    for r in range(max(root, start), upto):
        need[r] = True
    for r in range(upto - 1, start - 1, -1):
        if need[r]:
            for j in range(arg0[r], arg0[r + 1]):
                need[args[j]] = True
    # a multi-output op's rule writes every output's tangents: each OUTPUT
    # record of a needed op is needed too
    for r in range(start, upto):
        if op[r] == C.OUTPUT and not need[r] and need[args[arg0[r]]]:
            need[r] = True
    toff = np.full(upto, -1, np.int64)
    total = 0
    for r in range(start, upto):
        if not reached[r] and need[r]:
            for j in range(arg0[r], arg0[r + 1]):
                if reached[args[j]]:
                    reached[r] = True
                    break
        if reached[r]:
            toff[r] = total
            total += size[r]
    return toff, total


# -- the forward sweep: tangent families compiled on first use ------------------------
def _unary_entry(tp, r, sub, p):
    unary_jvp(load_tape(tp), r, sub, p)
    return 1


def _scalar_entry(tp, r, sub, p):
    scalar_jvp(load_tape(tp), r, sub, p)
    return 1


def _nary_entry(tp, r, sub, p):
    nary_jvp(load_tape(tp), r, sub, p)
    return 1


def _sum_entry(tp, r, sub, p):
    sum_jvp(load_tape(tp), r, sub, p)
    return 1


def _reduce_entry(tp, r, sub, p):
    reduce_jvp(load_tape(tp), r, sub, p)
    return 1


def _gather_entry(tp, r, sub, p):
    gather_jvp(load_tape(tp), r, sub, p)
    return 1


def _concat_entry(tp, r, sub, p):
    concat_jvp(load_tape(tp), r, sub, p)
    return 1


def _scan_entry(tp, r, sub, p):
    scan_jvp(load_tape(tp), r, sub, p)
    return 1


def _user_entry(tp, r, sub, p):
    user_jvp(load_tape(tp), r, sub, p)
    return 1


#: the tangent families of the forward sweep, by kind, and sum/mean in a
#: slot of their own (called as the reverse sweeps call theirs:
#: kernels/dispatch.py)
SUM_JVP = 15


@inline
def jvp_slot(T, r, kind, sub):
    """The JVP table slot of a ``kind, sub`` record."""
    if kind == C.K_REDUCE and (sub == C.SUM or sub == C.MEAN):
        return SUM_JVP
    return kind


JVP = Families("tangents", SIG_EXTRA, {
    C.K_UNARY: (_unary_entry, "unary tangent rules"),
    C.K_SCALAR: (_scalar_entry, "with-a-constant tangent rules"),
    C.K_NARY: (_nary_entry, "binary tangent rules"),
    SUM_JVP: (_sum_entry, "sum/mean tangent rules"),
    C.K_REDUCE: (_reduce_entry, "reduction tangent rules"),
    C.K_GATHER: (_gather_entry, "indexing/shape tangent rules"),
    C.K_CONCAT: (_concat_entry, "concatenation tangent rules"),
    C.K_SCAN: (_scan_entry, "cumulative-op tangent rules"),
    C.K_USER: (_user_entry, "user-op tangent rules"),
}, jvp_slot)


def sweep_fwd(T, start, stop, p):
    """Apply the tangent rules of reached records ``start .. stop-1``.

    Returns -1 when done, ``r >= 0`` at a host record or one of a kind no
    kernel here handles (Python applies its rule or raises, and resumes at
    ``r + 1``), and ``-2 - q`` when a value record q's
    rule needs was released (a backward inside the function freed it).
    """
    return JVP.run(_sweep_fwd, (T, start, stop, p, JVP.table), 1)


@kernel
def _sweep_fwd(T, start, stop, p, table):
    """``sweep_fwd``'s compiled loop; ``MISSING - r`` / ``FAILED - r`` as the
    reverse sweep's."""
    op, arg0, args, reached = T[OP], T[ARG0], T[ARGS], T[REACHED]
    rix, ptrs = T[RIX], T[PTRS]
    for r in range(start, stop):
        if not reached[r]:
            continue
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        if kind == C.K_NONE:  # seeded leaves; outputs filled by their op
            continue
        for j in range(arg0[r], arg0[r + 1]):
            q = args[j]
            if rix[q] >= 0 and ptrs[rix[q]] == 0:
                return -2 - q
        if kind == C.K_HOST or kind > C.K_USER:
            # Python applies host rules; a kind with no kernel goes there too
            # and its host path raises, naming the op
            return r
        f = table[jvp_slot(T, r, kind, sub)]
        if f == 0:
            return MISSING - r
        if call_entry_extra(f, T, r, sub, p) != 1:
            return FAILED - r
    return -1
