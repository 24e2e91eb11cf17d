"""The forward families of the replay (:mod:`tapegrad.kernels.replay`): per
kind, the kernel that recomputes a record's output value from its parents'
values with the parameters the reverse sweep reads, writing through the
same ``value(T, r)`` views.  The scalar forwards (``f_unary``, ``f_scalar``,
``f_binary``) are written per sub code beside the derivatives in rules.py
and follow NumPy's definitions, NaN and infinity handling included;
``f_compare`` (the comparisons a trace records) is here.
"""

import numpy as np

from . import codes as C
from ._jit import deferred, inline, inner
from ._views import SIZE, IP0, IP, FP  # tape fields
from ._views import _at, copy_into, advance, odometer, parent, rows_of, value
from .structural import _out_map, _runs, _step
from .rules import f_binary, f_scalar, f_unary
from .unhandled import unhandled
from .vecmath import exp_v, log_v
from .user import call_d2

#: K_NONE subs of comparison records (recorded only while tracing).  Their
#: operands are named in ``ip`` (``[a, b, nd, shape, strides...]``), not as
#: parents: comparisons carry no gradient, and the sweep must never pass an
#: adjoint through them.
CMP_FIRST = 8
LESS, LESS_EQUAL, GREATER, GREATER_EQUAL, EQUAL, NOT_EQUAL = range(CMP_FIRST, CMP_FIRST + 6)
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


@inline
def _softmax_rows(sub, x, y, A, R):
    """logsumexp, softmax or log_softmax over the contiguous rows of x (A
    rows of R elements: the reduced axes are the trailing ones).  The same
    values as the general loop of ``reduce_fwd`` (each row's maximum, its sum
    of exponentials in element order), with the exponentials computed once,
    in a loop of their own that vectorises, before the sequential sum."""
    e = np.empty(R if sub == C.LOGSUMEXP else 0)
    for a in range(A):
        xa = _at(x, a * R, R)
        mx = -np.inf
        for q in range(R):
            if xa[q] > mx:
                mx = xa[q]
        if not np.isfinite(mx):
            mx = 0.0
        ea = e if sub == C.LOGSUMEXP else _at(y, a * R, R)
        for q in range(R):
            ea[q] = exp_v(xa[q] - mx)
        s = 0.0
        for q in range(R):
            s += ea[q]
        if sub == C.LOGSUMEXP:
            y[a] = log_v(s) + mx
        elif sub == C.SOFTMAX:
            for q in range(R):
                ea[q] = ea[q] / s
        else:
            ls = log_v(s)
            for q in range(R):
                ea[q] = xa[q] - mx - ls


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
    if R != 0 and Cn == 1:
        _softmax_rows(sub, x, y, A, R)
        return
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
        s[j] += exp_v(x[i] - mx[j])
        if R != 0:
            a, q, c = _step(a, q, c, R, Cn)
    if sub == C.LOGSUMEXP:
        for j in range(m):
            y[j] = log_v(s[j]) + mx[j]
        return
    a, q, c = 0, 0, 0
    for i in range(n):
        j = om[i] if R == 0 else a * Cn + c
        if sub == C.SOFTMAX:
            y[i] = exp_v(x[i] - mx[j]) / s[j]
        else:
            y[i] = x[i] - mx[j] - log_v(s[j])
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
