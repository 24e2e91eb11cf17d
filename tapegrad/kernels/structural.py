"""VJP kernels of reductions and of ops that move elements around.

Reductions map each input element to its output element with the same
broadcast-index rule the elementwise ops use (output strides are 0 on the
reduced axes).  Every op whose output is a selection of its input's elements
(indexing, transpose, broadcast_to, split, ...) is one *gather* with an index
map; its VJP is a scatter-add, so repeated indices accumulate.
"""
import math

import numpy as np

from . import codes as C
from ._jit import inline, inner
from .interpret import ARRAY_MIN, array_form
from ._views import ARG0, SIZE, IP0, IP  # tape fields
from ._views import (adjoint, adjoint_span, advance, advance_row, claim, claim_zeroed,
                     odometer, parent, rows_of, step_from, value)


@inline
def _out_map(ip, b, nd, n, m):
    """Output index of every input element (empty for a full reduction)."""
    if m == 1:
        return np.zeros(0, np.int64)
    om = np.empty(n, np.int64)
    shape, strides, cnt, pos = odometer(ip, b, nd, 1)
    for i in range(n):
        om[i] = pos[0]
        advance(shape, strides, cnt, pos)
    return om


@inline
def _runs(ip, b, nd, n, m):
    """``(A, R, C)`` when the reduced axes (those of size > 1) are one
    contiguous run -- every reduction over one axis, or over the leading or
    trailing ones: input element ``i = (a*R + r)*C + c`` then belongs to
    output ``a*C + c``, which a cursor tracks with no index map and no
    division.  ``R == 0`` when the axes are scattered (use ``_out_map``).
    A full reduction (``m == 1``) may carry no parameters at all."""
    if m == 1:
        return 1, n, 1
    shape = ip[b + 1:b + 1 + nd]
    st = ip[b + 1 + nd:b + 1 + 2 * nd]
    d0, d1 = nd, -1
    for d in range(nd):
        if shape[d] > 1 and st[d] == 0:
            d0 = min(d0, d)
            d1 = d
    for d in range(d0, d1 + 1):
        if shape[d] > 1 and st[d] != 0:
            return 0, 0, 0
    if d1 < 0:  # nothing reduced
        return n, 1, 1
    A, R, Cn = 1, 1, 1
    for d in range(nd):
        if d < d0:
            A *= shape[d]
        elif d <= d1:
            R *= shape[d]
        else:
            Cn *= shape[d]
    return A, R, Cn


@inline
def _step(a, q, c, R, Cn):
    """Advance the ``_runs`` cursor by one input element."""
    c += 1
    if c == Cn:
        c = 0
        q += 1
        if q == R:
            q = 0
            a += 1
    return a, q, c


@inline
def _softmax_vjp(T, r, xr, g, gx, ip, b, nd, n, sub):
    """softmax: gx = y (g - sum(g y)); log_softmax: gx = g - exp(y) sum(g), with
    the sums over the reduced axes (``ip`` as for reductions)."""
    A, R, Cn = _runs(ip, b, nd, n, 2)
    om = _out_map(ip, b, nd, n, 2) if R == 0 else np.zeros(0, np.int64)
    rows = A * Cn
    if R == 0:
        rows = rows_of(om)
    acc = np.zeros(rows)
    y = value(T, r)
    first = claim(T, xr)
    if R == 0:
        for i in range(n):
            acc[om[i]] += g[i] * y[i] if sub == C.SOFTMAX else g[i]
        for i in range(n):
            gx[i] = _softmax_d(sub, g[i], y[i], acc[om[i]]) + (0.0 if first else gx[i])
        return
    # input element (a, q, c) belongs to row a * Cn + c: nested loops, in the
    # same element order (the sums are the same), no branch per element
    if Cn == 1:  # the last axes reduced: the innermost loop runs along them
        for a in range(A):
            t = acc[a]
            for q in range(R):
                i = a * R + q
                t += g[i] * y[i] if sub == C.SOFTMAX else g[i]
            acc[a] = t
        for a in range(A):
            t = acc[a]
            for q in range(R):
                i = a * R + q
                gx[i] = _softmax_d(sub, g[i], y[i], t) + (0.0 if first else gx[i])
        return
    i = 0
    for a in range(A):
        for q in range(R):
            for c in range(Cn):
                acc[a * Cn + c] += g[i + c] * y[i + c] if sub == C.SOFTMAX else g[i + c]
            i += Cn
    i = 0
    for a in range(A):
        for q in range(R):
            for c in range(Cn):
                gx[i + c] = _softmax_d(sub, g[i + c], y[i + c], acc[a * Cn + c]) \
                    + (0.0 if first else gx[i + c])
            i += Cn


@inline
def _softmax_d(sub, g, y, acc):
    if sub == C.SOFTMAX:
        return y * (g - acc)
    return g - math.exp(y) * acc


@inner
def full_sum_vjp(T, r, sub):
    """sum and mean over every element (the loss of most programs): each
    input element receives the one output adjoint, scaled."""
    xr = parent(T, r, 0)
    g = adjoint_span(T, r, 1)[0]
    gx = adjoint(T, xr)
    n = gx.size
    d = g if sub == C.SUM else (g / np.float64(n) if n > 0 else 0.0)  # float64 as compiled
    if claim(T, xr):  # every element is written: assign the first time
        for i in range(n):
            gx[i] = d
    else:
        for i in range(n):
            gx[i] += d


@array_form(full_sum_vjp)
def _full_sum_arrays(T, r, sub):
    """``full_sum_vjp`` on whole arrays (the interpreted tier)."""
    xr = parent(T, r, 0)
    g = adjoint_span(T, r, 1)[0]
    gx = adjoint(T, xr)
    n = gx.size
    if n < ARRAY_MIN:
        return NotImplemented
    d = g if sub == C.SUM else (g / np.float64(n) if n > 0 else 0.0)  # float64 as compiled
    if claim(T, xr):
        gx[:] = d
    else:
        gx += d


@inner
def sum_vjp(T, r, sub):
    """sum and mean: the common reductions, a family of their own so that
    they compile without the others (kernels/dispatch.py)."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    xr = parent(T, r, 0)
    g = adjoint(T, r)
    gx = adjoint(T, xr)
    n, m = gx.size, g.size
    A, R, Cn = _runs(ip, b, nd, n, m)
    om = _out_map(ip, b, nd, n, m) if R == 0 else np.zeros(0, np.int64)
    scale = 1.0 if sub == C.SUM else (m / n if n > 0 else 0.0)
    first = claim(T, xr)  # every element is written: assign the first time
    if R == 0:
        for i in range(n):
            gx[i] = g[om[i] if m > 1 else 0] * scale + (0.0 if first else gx[i])
        return
    # input element (a, q, c) takes output (a, c): loops with no branch per
    # element, so that the innermost one vectorises
    if Cn == 1:  # the last axes reduced: the innermost loop runs along them
        for a in range(A):
            v = g[a] * scale
            for q in range(R):
                gx[a * R + q] = v + (0.0 if first else gx[a * R + q])
        return
    i = 0
    for a in range(A):
        for q in range(R):
            for c in range(Cn):
                gx[i + c] = g[a * Cn + c] * scale + (0.0 if first else gx[i + c])
            i += Cn


@array_form(sum_vjp)
def _sum_arrays(T, r, sub):
    """``sum_vjp`` on whole arrays (the interpreted tier) where the reduced
    axes are one run: input element ``(a, q, c)`` takes output ``(a, c)``."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    xr = parent(T, r, 0)
    g = adjoint(T, r)
    gx = adjoint(T, xr)
    n, m = gx.size, g.size
    A, R, Cn = _runs(ip, b, nd, n, m)
    if R == 0 or n < ARRAY_MIN:
        return NotImplemented
    scale = 1.0 if sub == C.SUM else (m / n if n > 0 else 0.0)
    v = (np.broadcast_to(g.reshape(A, 1, Cn), (A, R, Cn)) * scale).ravel()
    first = claim(T, xr)
    gx[:] = v + (0.0 if first else gx)


@inner
def reduce_vjp(T, r, sub):
    """The other reductions; ``ip`` holds ``[nd, in_shape, out_strides]``
    (0 on reduced axes).  Sum and mean run in ``sum_vjp`` (``dispatch.slot``
    sends them there), so that this family compiles without it."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    xr = parent(T, r, 0)
    g = adjoint(T, r)
    gx = adjoint(T, xr)
    n, m = gx.size, g.size
    if sub == C.SOFTMAX or sub == C.LOG_SOFTMAX:
        _softmax_vjp(T, r, xr, g, gx, ip, b, nd, n, sub)
        return
    A, R, Cn = _runs(ip, b, nd, n, m)
    om = _out_map(ip, b, nd, n, m) if R == 0 else np.zeros(0, np.int64)
    claim_zeroed(T, xr)
    x = value(T, xr)
    y = value(T, r)
    if sub == C.MAX or sub == C.MIN:
        # ties share the gradient equally (as torch.amax / jax.numpy.max do)
        ties = np.zeros(m)
        a, q, c = 0, 0, 0
        for i in range(n):
            j = (om[i] if m > 1 else 0) if R == 0 else a * Cn + c
            if x[i] == y[j] or (x[i] != x[i] and y[j] != y[j]):
                ties[j] += 1.0
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
        a, q, c = 0, 0, 0
        for i in range(n):
            j = (om[i] if m > 1 else 0) if R == 0 else a * Cn + c
            if x[i] == y[j] or (x[i] != x[i] and y[j] != y[j]):
                gx[i] += g[j] / ties[j]
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
    elif sub == C.PROD:
        # product of the others, exact with zeros present
        zeros = np.zeros(m, np.int64)
        rest = np.ones(m)
        a, q, c = 0, 0, 0
        for i in range(n):
            j = (om[i] if m > 1 else 0) if R == 0 else a * Cn + c
            if x[i] == 0.0:
                zeros[j] += 1
            else:
                rest[j] *= x[i]
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
        a, q, c = 0, 0, 0
        for i in range(n):
            j = (om[i] if m > 1 else 0) if R == 0 else a * Cn + c
            if zeros[j] == 0:
                gx[i] += g[j] * rest[j] / x[i]
            elif zeros[j] == 1 and x[i] == 0.0:
                gx[i] += g[j] * rest[j]
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
    elif sub == C.LOGSUMEXP:
        a, q, c = 0, 0, 0
        for i in range(n):
            j = (om[i] if m > 1 else 0) if R == 0 else a * Cn + c
            gx[i] += g[j] * math.exp(x[i] - y[j])
            if R != 0:
                a, q, c = _step(a, q, c, R, Cn)
    else:  # a sub code with no rule here: NaN, never a silent zero
        gx[:] = np.nan


def _out_map_arrays(ip, b, nd):
    """``_out_map`` as arrays: the output index of every input element,
    from the input shape and the output strides (0 on reduced axes)."""
    shape = [int(d) for d in ip[b + 1:b + 1 + nd]]
    om = np.zeros(shape, np.int64)
    for d in range(nd):
        step = int(ip[b + 1 + nd + d])
        if step:
            om += (np.arange(shape[d], dtype=np.int64) * step).reshape(
                [shape[d] if e == d else 1 for e in range(nd)])
    return om.ravel()


@array_form(reduce_vjp)
def _reduce_arrays(T, r, sub):
    """``reduce_vjp`` on whole arrays (the interpreted tier): the same
    per-element expressions, with the per-output accumulations (ties,
    products, softmax's sums) in input order through ``np.add.at`` /
    ``np.multiply.at``, as the loop accumulates them."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    xr = parent(T, r, 0)
    g = adjoint(T, r)
    gx = adjoint(T, xr)
    n, m = gx.size, g.size
    if n < ARRAY_MIN or sub not in _REDUCE_ARRAY_SUBS:
        return NotImplemented
    soft = sub == C.SOFTMAX or sub == C.LOG_SOFTMAX
    om = _out_map_arrays(ip, b, nd) if (m > 1 or soft) else np.zeros(n, np.int64)
    y = value(T, r)
    if soft:
        rows = int(om.max()) + 1 if n else 0
        acc = np.zeros(rows)
        np.add.at(acc, om, g * y if sub == C.SOFTMAX else g)
        if sub == C.SOFTMAX:
            d = y * (g - acc[om])
        else:
            d = g - math.exp(y) * acc[om]  # libm's, as the loop's
        first = claim(T, xr)
        gx[:] = d + (0.0 if first else gx)
        return None
    x = value(T, xr)
    gj = g[om]
    yj = y[om]
    if sub == C.MAX or sub == C.MIN:
        hit = (x == yj) | ((x != x) & (yj != yj))
        ties = np.bincount(om[hit], minlength=m).astype(np.float64)
        v = np.where(hit, gj / ties[om], 0.0)
    elif sub == C.PROD:
        nz = x != 0.0
        zeros = np.bincount(om[~nz], minlength=m)
        rest = np.ones(m)
        np.multiply.at(rest, om[nz], x[nz])
        zj, rj = zeros[om], rest[om]
        v = np.where(zj == 0, gj * rj / x, np.where((zj == 1) & ~nz, gj * rj, 0.0))
    else:  # LOGSUMEXP
        v = gj * math.exp(x - yj)
    claim_zeroed(T, xr)
    gx += v
    return None


_REDUCE_ARRAY_SUBS = (C.MAX, C.MIN, C.PROD, C.LOGSUMEXP, C.SOFTMAX, C.LOG_SOFTMAX)


@inner
def gather_vjp(T, r, sub):
    """``ip`` holds ``[m, idx_0 .. idx_{m-1}]``: output k is input ``idx_k``, or
    a filled-in zero with no input when ``idx_k`` is -1 -- or, for the subs
    in the strided form, ``[m, offset, nd, shape, strides]``.

    A multi-output record (split, unbind) has size 0 and its outputs are the
    next records, whose adjoints follow its own in the arena: one gather covers
    all of them.
    """
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    if T[SIZE][r] == 0 and m > 0:  # outputs no consumer reached hold no zeros yet
        v, seen = r + 1, 0
        while seen < m:
            claim_zeroed(T, v)
            seen += T[SIZE][v]
            v += 1
    g = adjoint_span(T, r, m)
    xr = parent(T, r, 0)
    claim_zeroed(T, xr)
    if strided(sub):  # the strided form (kernels/codes.py): no map to read
        if _transposed(ip, b + 1):
            _strided_add_columns(adjoint(T, xr), g, ip, b + 1)
        else:
            strided_add(adjoint(T, xr), g, ip, b + 1)
        return
    _scatter_add(adjoint(T, xr), g, ip, b + 1, m)


@inline
def strided(sub):
    """Whether a gather record of ``sub`` holds the strided form (codes.STRIDED)."""
    for s in C.STRIDED:
        if sub == s:
            return True
    return False


@inline
def strided_add(gx, g, ip, at):
    """``gx[offset + sum_d i_d * strides[d]] += g[k]`` over the output's
    elements k in C order, ``ip[at:]`` being ``[offset, nd, shape, strides]``:
    row by row of the last axis, the rest stepped by the odometer (no index
    map read, no division per element), in the order the index map's
    scatter adds (a broadcast, stride 0, reads an element many times)."""
    off = ip[at]
    nd = ip[at + 1]
    m = g.size
    if nd == 0:
        gx[off] += g[0]
        return
    if nd == 1:  # no odometer (its arrays cost more than a short slice's loop)
        s = ip[at + 3]
        for j in range(m):
            gx[off + j * s] += g[j]
        return
    shape, strides, cnt, pos = odometer(ip, at + 1, nd, 1)
    n = shape[nd - 1]
    s = strides[0, nd - 1]
    k = 0
    while k < m:
        p = off + pos[0]
        if s == 1:
            for j in range(n):
                gx[p + j] += g[k + j]
        else:
            for j in range(n):
                gx[p + j * s] += g[k + j]
        k += n
        advance_row(shape, strides, cnt, pos)


@inline
def _transposed(ip, at):
    """Whether the strided selection ``ip[at:]`` (``[offset, nd, shape,
    strides]``) has at least two axes, the last of them not contiguous in
    the operand and the one before it contiguous: a transpose's layout."""
    nd = ip[at + 1]
    return nd >= 2 and abs(ip[at + 1 + 2 * nd]) != 1 and abs(ip[at + 2 * nd]) == 1


@inline
def _strided_add_columns(gx, g, ip, at):
    """``strided_add`` for a transpose's layout (``_transposed``): column by
    column of the last two axes, so that the writes into ``gx`` are the
    contiguous ones and the reads of ``g`` stride (1000 x 1000: 0.98 ms,
    against 1.33 ms row by row and 1.25-1.56 ms in tiles of 8 to 128); the
    leading axes stepped by the odometer.  Each element of ``gx`` receives
    its additions in the order ``strided_add`` makes them."""
    off = ip[at]
    nd = ip[at + 1]
    m = g.size
    shape, strides, cnt, pos = odometer(ip, at + 1, nd, 1)
    n0, n1 = shape[nd - 2], shape[nd - 1]
    s0, s1 = strides[0, nd - 2], strides[0, nd - 1]
    k = 0
    while k < m:
        base = off + pos[0]
        for j in range(n1):
            p = base + j * s1
            q = k + j
            for i in range(n0):
                gx[p + i * s0] += g[q + i * n1]
        k += n0 * n1
        step_from(nd - 3, shape, strides, cnt, pos)


@inline
def _scatter_add(gx, g, ip, at, m):
    """``gx[ip[at + k]] += g[k]`` for k in order, skipping indices of -1."""
    for k in range(m):
        i = ip[at + k]
        if i >= 0:
            gx[i] += g[k]


@array_form(_scatter_add)
def _scatter_add_arrays(gx, g, ip, at, m):
    # np.add.at adds in index order, unbuffered: repeated indices accumulate
    # in the loop's order
    if m < ARRAY_MIN:
        return NotImplemented
    idx = ip[at:at + m]
    keep = idx >= 0
    np.add.at(gx, idx[keep], g[keep])


@inner
def concat_vjp(T, r, sub):
    """``ip`` holds ``[m, src(m), pos(m)]``: output k is ``args[src_k][pos_k]``."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    g = adjoint(T, r)
    for j in range(T[ARG0][r + 1] - T[ARG0][r]):
        claim_zeroed(T, parent(T, r, j))
    for k in range(m):
        gx = adjoint(T, parent(T, r, ip[b + 1 + k]))
        gx[ip[b + 1 + m + k]] += g[k]


@array_form(concat_vjp)
def _concat_arrays(T, r, sub):
    """``concat_vjp`` on whole arrays: each operand's elements scattered
    back in one indexed add (an operand's positions are distinct)."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    if m < ARRAY_MIN:
        return NotImplemented
    g = adjoint(T, r)
    src = ip[b + 1:b + 1 + m]
    pos = ip[b + 1 + m:b + 1 + 2 * m]
    k = T[ARG0][r + 1] - T[ARG0][r]
    for j in range(k):
        claim_zeroed(T, parent(T, r, j))
    for j in range(k):
        sel = src == j
        np.add.at(adjoint(T, parent(T, r, j)), pos[sel], g[sel])
    return None


@inner
def scan_vjp(T, r, sub):
    """Cumulative ops along one axis; ``ip`` holds ``[outer, n, inner]``.

    cumsum: the adjoint is the reversed cumulative sum of g.  cumprod: with
    ``S_k = g_k + x_{k+1} S_{k+1}``, ``dx_k = y_{k-1} S_k`` -- no division, so
    exact when some x are zero.
    """
    ip = T[IP]
    b = T[IP0][r]
    outer, n, inner = ip[b], ip[b + 1], ip[b + 2]
    xr = parent(T, r, 0)
    g = adjoint(T, r)
    first = claim(T, xr)
    gx = adjoint(T, xr)
    if sub != C.CUMSUM and sub != C.CUMPROD:  # no rule here: NaN, never a silent zero
        gx[:] = np.nan
        return
    x = value(T, xr)
    y = value(T, r)
    for o in range(outer):
        for i in range(inner):
            base = o * n * inner + i
            acc = 0.0
            for k in range(n - 1, -1, -1):
                j = base + k * inner
                if sub == C.CUMSUM:
                    acc += g[j]
                    d = acc
                else:
                    acc = g[j] + (x[j + inner] * acc if k < n - 1 else 0.0)
                    d = acc * (y[j - inner] if k > 0 else 1.0)
                gx[j] = d + (0.0 if first else gx[j])


@array_form(scan_vjp)
def _scan_arrays(T, r, sub):
    """The scans' VJPs on whole arrays, along the axis of ``[outer, n, inner]``.

    cumsum: the reversed cumulative sum, a sequential sum as the loop's.
    cumprod: the loop's recurrence ``S_k = g_k + x_{k+1} S_{k+1}``, ``dx_k
    = y_{k-1} S_k``, in the loop's order (a recurrence reassociated would
    change the last bits): one step along the axis at a time over every
    lane at once where the lanes are many, a plain Python loop over floats
    down each lane where they are few.
    """
    ip = T[IP]
    b = T[IP0][r]
    outer, n, inner = ip[b], ip[b + 1], ip[b + 2]
    if (sub != C.CUMSUM and sub != C.CUMPROD) or outer * n * inner < ARRAY_MIN:
        return NotImplemented
    xr = parent(T, r, 0)
    g = adjoint(T, r).reshape(outer, n, inner)
    if sub == C.CUMSUM:
        # float64 as the loop's ``acc = 0.0``, also over float32 adjoints
        d = np.cumsum(g[:, ::-1, :], axis=1, dtype=np.float64)[:, ::-1, :].ravel()
    else:
        d = _cumprod_adjoint(value(T, xr).reshape(outer, n, inner),
                             value(T, r).reshape(outer, n, inner), g)
    first = claim(T, xr)
    gx = adjoint(T, xr)
    gx[:] = d + (0.0 if first else gx)
    return None


#: lanes (``outer * inner``) from which cumprod's VJP steps along the axis
#: over all lanes at once (a few NumPy calls a step) rather than down each
#: lane in Python (about 0.2 us an element)
LANES = 32


def _cumprod_adjoint(x, y, g):
    """cumprod's ``dx`` (raveled) for ``x``, ``y = cumprod(x)`` and ``g`` of
    shape ``(outer, n, inner)``: ``scan_vjp``'s operations in its order."""
    outer, n, inner = x.shape
    d = np.empty((outer, n, inner))
    if n == 0:
        return d.ravel()
    if outer * inner >= LANES:
        acc = g[:, n - 1, :] + 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            for k in range(n - 1, -1, -1):
                if k < n - 1:
                    acc = g[:, k, :] + x[:, k + 1, :] * acc
                d[:, k, :] = acc * (y[:, k - 1, :] if k > 0 else 1.0)
        return d.ravel()
    for o in range(outer):
        for i in range(inner):  # Python floats: + and * never raise
            gl, xl, yl = g[o, :, i].tolist(), x[o, :, i].tolist(), y[o, :, i].tolist()
            out = [0.0] * n
            acc = gl[n - 1] + 0.0
            out[n - 1] = acc * (yl[n - 2] if n > 1 else 1.0)
            for k in range(n - 2, -1, -1):
                acc = gl[k] + xl[k + 1] * acc
                out[k] = acc * (yl[k - 1] if k > 0 else 1.0)
            d[o, :, i] = out
    return d.ravel()
