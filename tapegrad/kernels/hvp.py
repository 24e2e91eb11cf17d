"""Forward-over-reverse in one compiled sweep: the Hessian's inner loop.

``tapegrad.transforms.second.passes`` carries p + 1 adjoints per record: vector 0 is the
ordinary adjoint ``ybar`` (seed 1), vectors 1..p its tangents ``ybar_dot``
along the p directions whose tangents ``xdot`` a forward sweep has put on
the records.  The tangent-linear of an op's VJP ``xbar += phi'(x)^T ybar`` is

    xbar_dot += phi'(x)^T ybar_dot + (phi''(x)[xdot])^T ybar.

``sweep_block`` applies both terms, for all p + 1 vectors, at the records that
make up nearly every scientific objective: elementwise ops of one and two
operands (with broadcasting), ops with a Python constant, sums and means,
views and indexing.  Anything else -- host records (matmul, LAPACK), the
nonlinear reductions, scans, user ops, multi-output ops -- hands control back
to Python, which applies that one record's rules and resumes the sweep, so a
function made only of the common ops runs with no Python per record.

Layouts: record v's p + 1 adjoints are rows ``stride[v]`` bytes apart from
``T[APTR][v]`` (``kernels/vector.py``); its tangents are a ``(size, p)`` block
at ``tptr[v]`` (``kernels/tangents.py``).  A record whose tangent the forward
sweep did not reach does not depend on the inputs, so no adjoint written to
it could ever reach a differentiated leaf: the sweep skips such records and
never writes to them.

Without the second-order terms the same sweep is plain vector reverse mode
(``transform_base._run``): Jacobians and batched VJPs take the common records
as whole (p, size) blocks instead of one vector at a time.
"""

import numpy as np

from . import codes as C
from ._jit import inline, kernel
from ._views import OP, ARG0, SIZE, IP0, ARGS, IP, FP, RIX, PTRS, APTR, REACHED  # tape fields
from ._views import _voidptr, carray, advance, claim, odometer, parent, value
from .dispatch import (FAILED, MISSING, SIG_CTX, Families, call_entry_ctx, load_block_ctx,
                       load_tape)
from .tangents import fwd_layout
from .structural import _out_map, strided
from .sweep import layout
from .rules import (d2_binary, d2_scalar, d2_unary, d_binary, d_scalar, d_unary, nary_has_d2,
                    scalar_has_d2, unary_has_d2)
from .vector import vec_layout

_CONST = C.code(C.K_NONE, C.CONST)
_OUTPUT = C.code(C.K_NONE, C.OUTPUT)


# -- views ----------------------------------------------------------------------------------
@inline
def _adj(T, stride, v, p1):
    """Record v's p + 1 adjoints as rows of a 2-d view (row length: the
    stride; only the first ``size[v]`` columns are v's)."""
    return carray(_voidptr(T[APTR][v]), (p1, stride[v] // 8), np.float64)


@inline
def _tan(tptr, v, n, p):
    """Record v's tangents, ``(n, p)``."""
    return carray(_voidptr(tptr[v]), (n, p), np.float64)


@inline
def _take(T, stride, q, n, p1, whole):
    """Claim q's adjoints for a VJP that writes ``n`` of its elements; zero
    them first when this is the first write and the VJP accumulates (it
    does not write every element once: ``whole`` False).  Returns the view
    and whether writes may assign (first write, whole)."""
    G = _adj(T, stride, q, p1)
    first = claim(T, q)
    if first and not whole:
        for k in range(p1):
            for i in range(n):
                G[k, i] = 0.0
    return G, first and whole


@inline
def _scaled(T, stride, r, q, d, tptr, p1, c2):
    """Elementwise one-operand rule: q's adjoints ``+= d * r's``, and, when
    ``c2`` (per element: ``ybar * f''``) is given, its tangents ``+= c2 *
    xdot``."""
    n = d.size
    G = _adj(T, stride, r, p1)
    Gq, first = _take(T, stride, q, n, p1, True)
    for k in range(p1):
        if first:
            for i in range(n):
                Gq[k, i] = G[k, i] * d[i]
        else:
            for i in range(n):
                Gq[k, i] += G[k, i] * d[i]
    if c2.size:
        # rows of the adjoints inner (the tangents are read across rows):
        # faster than writing across the adjoints' rows (measured)
        xd = _tan(tptr, q, n, p1 - 1)
        for k in range(1, p1):
            for i in range(n):
                Gq[k, i] += c2[i] * xd[i, k - 1]


@inline
def _one_operand(T, stride, r, kind, sub, tptr, treached, p1, second):
    """Elementwise ops of one tensor (K_UNARY, or K_SCALAR with the record's
    constant)."""
    q = parent(T, r, 0)
    if not treached[q]:
        return
    n = T[SIZE][r]
    x, y = value(T, q), value(T, r)
    c = T[FP][r]
    unary = kind == C.K_UNARY
    d = np.empty(n)
    for i in range(n):
        d[i] = d_unary(sub, x[i], y[i]) if unary else d_scalar(sub, x[i], y[i], c)
    has_d2 = unary_has_d2(sub) if unary else scalar_has_d2(sub)
    c2 = np.empty(n if second and has_d2 else 0)
    if c2.size:
        G = _adj(T, stride, r, p1)
        for i in range(n):
            c2[i] = G[0, i] * (d2_unary(sub, x[i], y[i]) if unary
                               else d2_scalar(sub, x[i], y[i], c))
    _scaled(T, stride, r, q, d, tptr, p1, c2)


@inline
def _operand_maps(T, r, n, ma, mb):
    """Per output element, the element of each operand it reads (``ip`` as
    in ``nary_vjp``)."""
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    ia = np.empty(n, np.int64)
    ib = np.empty(n, np.int64)
    if nd == 0:  # every operand full-size or a single element
        for i in range(n):
            ia[i] = i if ma == n else 0
            ib[i] = i if mb == n else 0
        return ia, ib
    shape, strides, cnt, pos = odometer(ip, b, nd, 2)
    for i in range(n):
        ia[i] = pos[0]
        ib[i] = pos[1]
        advance(shape, strides, cnt, pos)
    return ia, ib


@inline
def _binary(T, stride, r, sub, tptr, treached, p1, second):
    ar, br = parent(T, r, 0), parent(T, r, 1)
    ta = treached[ar] and T[OP][ar] != _CONST
    tb = treached[br] and T[OP][br] != _CONST
    if not ta and not tb:
        return
    n = T[SIZE][r]
    p = p1 - 1
    xa, xb, y = value(T, ar), value(T, br), value(T, r)
    ma, mb = T[SIZE][ar], T[SIZE][br]
    ia, ib = _operand_maps(T, r, n, ma, mb)
    da = np.empty(n)
    db = np.empty(n)
    for i in range(n):
        da[i], db[i] = d_binary(sub, xa[ia[i]], xb[ib[i]], y[i])
    G = _adj(T, stride, r, p1)
    second = second and nary_has_d2(sub)
    if second:
        # the second-order terms, per element: operand j's tangent adjoint
        # gets ybar * (d2_ja * adot + d2_jb * bdot)
        haa, hab, hbb = np.empty(n), np.empty(n), np.empty(n)
        for i in range(n):
            g0 = G[0, i]
            aa, ab, bb = d2_binary(sub, xa[ia[i]], xb[ib[i]], y[i])
            haa[i], hab[i], hbb[i] = g0 * aa, g0 * ab, g0 * bb
        xda = _tan(tptr, ar, ma, p) if treached[ar] else _tan(tptr, ar, 0, p)
        xdb = _tan(tptr, br, mb, p) if treached[br] else _tan(tptr, br, 0, p)
    for j in range(2):
        if (j == 0 and not ta) or (j == 1 and not tb):
            continue
        q = ar if j == 0 else br
        m = ma if j == 0 else mb
        idx = ia if j == 0 else ib
        d = da if j == 0 else db
        # one write per element only when q is full-size and not both operands
        Gq, first = _take(T, stride, q, m, p1, m == n and ar != br)
        for k in range(p1):
            if first:
                for i in range(n):
                    Gq[k, i] = G[k, i] * d[i]
            elif m == n:  # full size: the map is the identity, and this vectorises
                for i in range(n):
                    Gq[k, i] += G[k, i] * d[i]
            else:
                for i in range(n):
                    Gq[k, idx[i]] += G[k, i] * d[i]
        if second and ma == n and mb == n and treached[ar] and treached[br]:
            # no broadcasting: rows of the adjoints in the inner loop
            hs = haa if j == 0 else hab
            ho = hab if j == 0 else hbb
            for k in range(p):
                for i in range(n):
                    Gq[k + 1, i] += hs[i] * xda[i, k] + ho[i] * xdb[i, k]
        elif second:
            hs = haa if j == 0 else hab  # multiplies a's tangent
            ho = hab if j == 0 else hbb  # multiplies b's tangent
            for i in range(n):
                qi = idx[i]
                if treached[ar]:
                    h, ai = hs[i], ia[i]
                    if h != 0.0:
                        for k in range(p):
                            Gq[k + 1, qi] += h * xda[ai, k]
                if treached[br]:
                    h, bi = ho[i], ib[i]
                    if h != 0.0:
                        for k in range(p):
                            Gq[k + 1, qi] += h * xdb[bi, k]


@inline
def _sum(T, stride, r, sub, treached, p1):
    q = parent(T, r, 0)
    if not treached[q]:
        return
    ip = T[IP]
    b = T[IP0][r]
    n, m = T[SIZE][q], T[SIZE][r]
    scale = 1.0 if sub == C.SUM else (m / n if n > 0 else 0.0)
    om = _out_map(ip, b, ip[b], n, m)
    G = _adj(T, stride, r, p1)
    Gq, first = _take(T, stride, q, n, p1, True)
    for k in range(p1):
        for i in range(n):
            v = G[k, om[i] if m > 1 else 0] * scale
            Gq[k, i] = v + (0.0 if first else Gq[k, i])


@inline
def _gather(T, stride, r, sub, treached, p1):
    q = parent(T, r, 0)
    if not treached[q]:
        return
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]
    G = _adj(T, stride, r, p1)
    Gq, _ = _take(T, stride, q, T[SIZE][q], p1, False)
    if strided(sub):  # the strided form (kernels/codes.py): no map to read
        _strided_block(Gq, G, ip, b + 1, m, p1)
        return
    j0 = ip[b + 1] if m else 0
    run = j0 >= 0
    for i in range(m):
        if ip[b + 1 + i] != j0 + i:
            run = False
            break
    if run:  # a slice (x[1:], x[:-1]): a shifted add, which vectorises
        for k in range(p1):
            for i in range(m):
                Gq[k, j0 + i] += G[k, i]
        return
    for k in range(p1):
        for i in range(m):
            j = ip[b + 1 + i]
            if j >= 0:
                Gq[k, j] += G[k, i]


@inline
def _strided_block(Gq, G, ip, at, m, p1):
    """``Gq[k, offset + sum_d i_d * strides[d]] += G[k, i]`` for each of the p1
    rows, i walking the output in C order with the odometer (``ip[at:]``:
    ``[offset, nd, shape, strides]``)."""
    off = ip[at]
    nd = ip[at + 1]
    if nd == 0:
        for k in range(p1):
            Gq[k, off] += G[k, 0]
        return
    shape, strides, cnt, pos = odometer(ip, at + 1, nd, 1)
    for i in range(m):
        j = off + pos[0]
        for k in range(p1):
            Gq[k, j] += G[k, i]
        advance(shape, strides, cnt, pos)


# -- the block sweep: its families compiled on first use ----------------------------
# Each rule group is a C entry point called through BLOCK's table, as the
# reverse sweeps call their VJP families (kernels/dispatch.py); the context
# tuple (strides, tangent addresses, ...) crosses the call by address.
def _one_operand_entry(tp, cp, r, sub):
    T = load_tape(tp)
    stride, tptr, treached, p1, second = load_block_ctx(cp)
    _one_operand(T, stride, r, T[OP][r] >> C.SHIFT, sub, tptr, treached, p1, second)
    return 1


def _binary_entry(tp, cp, r, sub):
    stride, tptr, treached, p1, second = load_block_ctx(cp)
    _binary(load_tape(tp), stride, r, sub, tptr, treached, p1, second)
    return 1


def _sum_entry(tp, cp, r, sub):
    stride, tptr, treached, p1, second = load_block_ctx(cp)
    _sum(load_tape(tp), stride, r, sub, treached, p1)
    return 1


def _gather_entry(tp, cp, r, sub):
    stride, tptr, treached, p1, second = load_block_ctx(cp)
    _gather(load_tape(tp), stride, r, sub, treached, p1)
    return 1


#: the block sweep's rule groups, by slot (-1 from ``block_slot``: Python)


@inline
def block_slot(T, r, kind, sub):
    """The BLOCK slot of a ``kind, sub`` record; -1: Python applies its rules."""
    if kind == C.K_UNARY or kind == C.K_SCALAR:
        return C.K_UNARY
    if kind == C.K_NARY and sub != C.WHERE:
        return C.K_NARY
    if kind == C.K_REDUCE and (sub == C.SUM or sub == C.MEAN):
        return C.K_REDUCE
    if kind == C.K_GATHER:
        return C.K_GATHER
    return -1


BLOCK = Families("hvp", SIG_CTX, {
    C.K_UNARY: (_one_operand_entry, "one-operand block VJPs"),
    C.K_NARY: (_binary_entry, "binary block VJPs"),
    C.K_REDUCE: (_sum_entry, "sum/mean block VJPs"),
    C.K_GATHER: (_gather_entry, "indexing/shape block VJPs"),
}, block_slot)


def sweep_block(T, freed, start, stop, p1, stride, tptr, treached, second):
    """Apply the VJPs of reached records ``start .. stop+1`` to p1 adjoint
    vectors at once, each record's as a (p1, size) block -- with ``second``,
    forward-over-reverse: vector 0 is ``ybar`` and the second-order terms go
    to vectors 1..p1-1 (module docstring); without, plain vector reverse mode
    (Jacobians, batched VJPs; ``treached`` then marks every record).

    Returns -1 when done, ``r >= 0`` at a record this sweep does not handle
    (Python applies its rules and resumes at ``r - 1``), and ``-2 - r`` for a
    record freed by an earlier backward.
    """
    ctx = (stride, tptr, treached, p1, bool(second))

    return BLOCK.run(_sweep_block, (T, freed, start, stop, ctx, BLOCK.table), 2)


@kernel
def _sweep_block(T, freed, start, stop, ctx, table):
    """``sweep_block``'s compiled loop; ``MISSING - r`` / ``FAILED - r`` as
    the reverse sweep's."""
    op, arg0, args, reached = T[OP], T[ARG0], T[ARGS], T[REACHED]
    rix, ptrs = T[RIX], T[PTRS]
    treached = ctx[2]
    for r in range(start, stop, -1):
        if not reached[r] or not treached[r]:
            continue  # independent of the inputs: nothing here reaches them
        if freed[r]:
            return -2 - r
        for j in range(arg0[r], arg0[r + 1]):
            q = args[j]
            if rix[q] >= 0 and ptrs[rix[q]] == 0:
                return -2 - q
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        if kind == C.K_NONE:
            if code == _OUTPUT:
                return r
            continue  # a leaf: nothing below it
        if T[SIZE][r] == 0:
            return r  # a multi-output op: its outputs' adjoints form one span
        k = block_slot(T, r, kind, sub)
        if k < 0:
            return r
        f = table[k]
        if f == 0:
            return MISSING - r
        if call_entry_ctx(f, T, ctx, r, sub) != 1:
            return FAILED - r
    return -1


@kernel
def hvp_layout(op, size, arg0, args, rix, upto, small, seeds, p1, root):
    """Where everything of a pass over records ``0 .. upto-1`` lives, in one
    call from Python (separate calls and their NumPy glue cost more than the
    Hessian of a small function takes to compute).

    Returns ``(voff, treached, toff, total, zsize, aoff, stride, leaf, inner,
    outer)``: mid-size values' offsets (``layout``); which records depend on
    the ``seeds`` records and lead to the roots ``root .. upto-1``, their
    tangent offsets and count (``fwd_layout``);
    the room an unreached record's unkept large value needs when a loop loads
    it through its tangent address; and the adjoint layout for p1 vectors
    (``vec_layout``).
    """
    voff = layout(op, size, upto, small)[0]
    treached = np.zeros(upto, np.bool_)
    start = upto
    for s in seeds:
        treached[s] = True
        start = min(start, s)
    toff, total = fwd_layout(op, arg0, args, size, start, upto, treached, root)
    zsize = 1
    for r in range(upto):
        if not treached[r] and size[r] > small and rix[r] < 0:
            zsize = max(zsize, size[r])
    aoff, stride, leaf, inner, outer = vec_layout(op, size, arg0, args, upto, p1)
    return voff, treached, toff, total, zsize, aoff, stride, leaf, inner, outer
