"""Fused elementwise segments of a replay: runs of same-size elementwise
records computed, and swept backwards, block by block (``CHUNK`` elements),
so that the intermediates nothing outside a segment reads live only in a
block scratch (``seg_forward``, ``seg_plan``, ``seg_backward``; the caller
is ``trace_replay._Replay``).  Element for element the same arithmetic as
the record-by-record replay and sweep: the forwards are the replay
families' loops, the VJPs elementwise_vjp.py's.
"""

import numpy as np

from . import codes as C
from ._jit import inline, inner, kernel
from .interpret import estimate_as
from ._views import OP, ARG0, SIZE, ARGS, FP, V1, RIX, PTRS, APTR, REACHED  # tape fields
from ._views import _voidptr, borrowed_tape, carray, float_dtype
# the VJP loops of a segment's records: one compiled function per family, a
# call per block and record (inlined, they made one function too large to
# compile in reasonable time and memory)
from .elementwise_vjp import binary_loops as _binary_vjp_into
from .elementwise_vjp import binary_one_side_loops as _binary_one_side_into
from .elementwise_vjp import binary_self_loops as _binary_self_into
from .elementwise_vjp import scalar_loops as _scalar_vjp_into
from .elementwise_vjp import unary_loops as _unary_vjp_into
from .replay_families import _binary_into, _scalar_into, _unary_into
from .rules import d_binary, d_scalar, d_unary


#: elements per block of a fused segment: every record's block of values and
#: adjoints stays in cache while the segment's records run over it
CHUNK = 4096
#: elements per block of an eager tape's fused reverse sweep
#: (``seg_backward_stored``): its blocks hold adjoints only (the values are
#: in storage), and each record's loops cost a fixed time per block besides
#: their elements, so fewer and longer blocks are faster there (measured on
#: ``(3*a + 2*b*b + log(c)).sum()`` at 1e6 elements, alternating: 1024,
#: 4096, 16384 elements gave 4.0, 3.1, 2.9 ms per backward)
STORED_CHUNK = 16384

_CONST = C.code(C.K_NONE, C.CONST)


@inline
def _view(T, addr, m):
    """``m`` elements at ``addr``, of the dtype of T's values (float32 in a
    float32 sweep: kernels/_views.py ``float_dtype``)."""
    return carray(_voidptr(addr), (m,), float_dtype(T))


@inline
def _vaddr(T, p, r0, slot, base, lo, w):
    """Address of element ``lo`` of record p's value: a row of the segment's
    block scratch for records without storage of their own (``slot >= 0``),
    else the record's storage (every operand of a segment has > SMALL elements)."""
    q = p - r0
    if q >= 0 and q < slot.size and slot[q] >= 0:
        return base + T[V1].itemsize * w * slot[q]
    return T[PTRS][T[RIX][p]] + T[V1].itemsize * lo


@inline
def _vaddr_or_adjoint(T, p, r0, vslot, vb, gslot, gb, lo, w):
    """``_vaddr`` for the reverse sweep: a value no VJP reads is not kept on
    an eager tape (no storage, no block row); the record's adjoint block
    stands in, as in kernels/_views.value, so that a loop shared by several
    ops loads (and ignores) memory it touches anyway."""
    q = p - r0
    if (q >= 0 and q < vslot.size and vslot[q] >= 0) or T[RIX][p] >= 0:
        return _vaddr(T, p, r0, vslot, vb, lo, w)
    return _gaddr(T, p, r0, gslot, gb, lo, w)


@inline
def _gaddr(T, p, r0, slot, base, lo, w):
    """The same for record p's adjoint."""
    q = p - r0
    if q >= 0 and q < slot.size and slot[q] >= 0:
        return base + T[V1].itemsize * w * slot[q]
    return T[APTR][p] + T[V1].itemsize * lo


@inner
def _seg_record_fwd(T, r, r0, slot, base, lo, m):
    op, arg0, args = T[OP], T[ARG0], T[ARGS]
    code = op[r]
    kind = code >> C.SHIFT
    sub = code & C.MASK
    y = _view(T, _vaddr(T, r, r0, slot, base, lo, CHUNK), m)
    x = _view(T, _vaddr(T, args[arg0[r]], r0, slot, base, lo, CHUNK), m)
    if kind == C.K_UNARY:
        _unary_into(sub, x, y)
    elif kind == C.K_SCALAR:
        _scalar_into(sub, x, T[FP][r], y)
    elif kind == C.K_NARY:
        _binary_into(sub, x, _view(T, _vaddr(T, args[arg0[r] + 1], r0, slot, base, lo, CHUNK), m), y)
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
    T = borrowed_tape(T)  # helpers taking T count no references (see there)
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
    T = borrowed_tape(T)  # helpers taking T count no references (see there)
    vb, gb = vs.ctypes.data, gs.ctypes.data
    for lo in range(start, n, CHUNK):
        m = min(CHUNK, n - lo)
        for r in range(r0, r1):
            if need[r - r0]:
                _seg_record_fwd(T, r, r0, slot, vb, lo, m)
        _seg_block_backward(T, r0, r1, lo, m, slot, slot, reach, write, assign, vb, gb, CHUNK)


@inline
def _linear(kind, sub, c):
    """``(True, da, db)`` when the record's partial derivatives are constants
    (the rules of rules.py at a constant sub code, whose value they do not
    read): then a constant adjoint gives its operands constant contributions
    (a sum's broadcast seed through the adds and scalings above it).
    ``(False, 0, 0)`` for every other op."""
    if kind == C.K_UNARY:
        if sub == C.IDENT or sub >= C.VIEW_FIRST:
            return True, d_unary(C.IDENT, 0.0, 0.0), 0.0
        if sub == C.NEG:
            return True, d_unary(C.NEG, 0.0, 0.0), 0.0
    elif kind == C.K_SCALAR:
        if sub == C.ADDC:
            return True, d_scalar(C.ADDC, 0.0, 0.0, c), 0.0
        if sub == C.MULC:
            return True, d_scalar(C.MULC, 0.0, 0.0, c), 0.0
        if sub == C.DIVC:
            return True, d_scalar(C.DIVC, 0.0, 0.0, c), 0.0
        if sub == C.RSUBC:
            return True, d_scalar(C.RSUBC, 0.0, 0.0, c), 0.0
    elif kind == C.K_NARY:
        if sub == C.ADD:
            da, db = d_binary(C.ADD, 0.0, 0.0, 0.0)
            return True, da, db
        if sub == C.SUB:
            da, db = d_binary(C.SUB, 0.0, 0.0, 0.0)
            return True, da, db
    return False, 0.0, 0.0


@kernel
def seg_plan_stored(T, r0, r1, gslot, root, g):
    """``seg_plan`` for ``seg_backward_stored``, with constant adjoints.

    ``root >= 0``: record ``root`` of the segment (one of ``gslot``'s) enters
    with the constant adjoint ``g`` (a full sum's or mean's VJP, which then
    writes no array); ``root <= -2``: record ``-2 - root`` enters with an
    adjoint the caller's loop sets (a sum over some axes broadcast back:
    fused_codegen.plan), ``g`` unused.  A record whose adjoint is a constant and whose
    partials are constants (``_linear``) gives its operands constants: those
    of records in the block scratch stay numbers of the plan (``cval``), and
    are written into a block only where an array meets them (``prefill``:
    the operand's block holds the constant before a VJP accumulates into
    it) or where a VJP that reads values needs its adjoint as an array
    (``fillown``: its row, which nothing else writes, is filled once); those
    of the other records are written block by block
    (``cfill``, the value ``cv``).  Each constant is what the loops would
    compute element by element: the same product ``g * d`` and the same
    sum ``v + (0 or the earlier adjoint)``.

    Returns ``(reach, write, assign, linear, fillown, prefill, cfill, cv,
    cval)``; marks the reached records outside the segment."""
    op, arg0, args, reached, fp = T[OP], T[ARG0], T[ARGS], T[REACHED], T[FP]
    k = r1 - r0
    reach = np.zeros(k, np.bool_)
    write = np.zeros(2 * k, np.bool_)
    assign = np.zeros(2 * k, np.bool_)
    linear = np.zeros(k, np.bool_)
    fillown = np.zeros(k, np.bool_)
    prefill = np.zeros(2 * k, np.bool_)
    cfill = np.zeros(2 * k, np.bool_)
    cv = np.zeros(2 * k)
    cval = np.zeros(k)
    const = np.zeros(k, np.bool_)
    if root >= 0:
        reach[root - r0] = True
        const[root - r0] = True
        cval[root - r0] = g
    elif root <= -2:  # record -2 - root enters with an array (fused_codegen.plan's ``bcast``)
        reach[-2 - root - r0] = True
    for r in range(r1 - 1, r0 - 1, -1):
        q = r - r0
        code = op[r]
        kind = code >> C.SHIFT
        if kind == C.K_NONE:
            continue
        if gslot[q] < 0:
            reach[q] = reached[r]
        if not reach[q]:
            continue
        lin, da, db = _linear(kind, code & C.MASK, fp[r])
        out_const = const[q] and lin
        linear[q] = out_const
        fillown[q] = const[q] and not lin
        a0 = arg0[r]
        na = arg0[r + 1] - a0
        both = na == 2 and args[a0 + 1] == args[a0]  # x op x: both partials to one adjoint
        for j in range(na):
            p = args[a0 + j]
            if op[p] == _CONST or (j == 1 and p == args[a0]):
                continue  # a constant's adjoint is never read; x op x writes once
            s = 2 * q + j
            write[s] = True
            pq = p - r0
            inside = pq >= 0 and pq < k and gslot[pq] >= 0
            first = not reach[pq] if inside else not reached[p]
            assign[s] = first
            if out_const:
                v = cval[q] * ((da + db) if both else (da if j == 0 else db))
                if inside and (first or const[pq]):
                    # rounded as the loops store an adjoint (float32 in a
                    # float32 sweep), so that the two sweeps agree bit for bit
                    cval[pq] = float_dtype(T)(v + (0.0 if first else cval[pq]))
                    const[pq] = True
                else:
                    cfill[s] = True
                    cv[s] = v
            elif inside and not first and const[pq]:
                prefill[s] = True  # the constant so far, then the array added
                const[pq] = False
            if inside:
                reach[pq] = True
            else:
                reached[p] = True
    return reach, write, assign, linear, fillown, prefill, cfill, cv, cval


estimate_as(seg_plan_stored, "records")


@inline
def _fill(gx, m, v, first):
    """A constant contribution to a block, as ``_put`` adds one element's."""
    for i in range(m):
        gx[i] = v + (0.0 if first else gx[i])


@inline
def _set(gx, m, v):
    for i in range(m):
        gx[i] = v


@kernel
def seg_backward_stored(T, r0, r1, n, gslot, reach, write, assign, linear, fillown, prefill,
                        cfill, cv, cval, gs):
    """``seg_backward`` over a segment of an eager tape, where every value a
    VJP reads was kept when it was recorded: nothing is recomputed, and only
    the adjoints of the records ``gslot`` marks (>= 0: reached from inside the
    segment alone) live in the block scratch ``gs``.  Constant adjoints as
    ``seg_plan_stored`` planned them: a record of ``linear`` writes only the
    constant contributions ``cfill`` marks."""
    T = borrowed_tape(T)  # helpers taking T count no references (see there)
    stored = np.empty(0, np.int64)  # no value lives in a block scratch
    arg0, args = T[ARG0], T[ARGS]
    gb = gs.ctypes.data
    w = STORED_CHUNK
    for r in range(r0, r1):
        # a constant adjoint that a VJP reads as an array: its block row is
        # written by nothing else (every contribution to it was a constant),
        # so it is filled once for every block
        if reach[r - r0] and fillown[r - r0]:
            _set(_view(T, _gaddr(T, r, r0, gslot, gb, 0, w), min(w, n)), min(w, n), cval[r - r0])
    for lo in range(0, n, w):
        m = min(w, n - lo)
        for r in range(r1 - 1, r0 - 1, -1):
            q = r - r0
            if not reach[q]:
                continue
            a0 = arg0[r]
            if linear[q]:
                for j in range(arg0[r + 1] - a0):
                    if cfill[2 * q + j]:
                        gx = _view(T, _gaddr(T, args[a0 + j], r0, gslot, gb, lo, w), m)
                        _fill(gx, m, cv[2 * q + j], assign[2 * q + j])
                continue
            for j in range(arg0[r + 1] - a0):
                if prefill[2 * q + j]:
                    p = args[a0 + j]
                    _set(_view(T, _gaddr(T, p, r0, gslot, gb, lo, w), m), m, cval[p - r0])
            _record_backward(T, r, r0, lo, m, stored, gslot, write, assign, 0, gb, w)


@inline
def _seg_block_backward(T, r0, r1, lo, m, vslot, gslot, reach, write, assign, vb, gb, w):
    """One block (elements ``lo .. lo+m-1``) of a segment's reverse sweep:
    values at ``vslot``'s rows of ``vb`` or in storage, adjoints at
    ``gslot``'s rows of ``gb`` or at the records' adjoint addresses."""
    for r in range(r1 - 1, r0 - 1, -1):
        if reach[r - r0]:
            _record_backward(T, r, r0, lo, m, vslot, gslot, write, assign, vb, gb, w)


@inline
def _record_backward(T, r, r0, lo, m, vslot, gslot, write, assign, vb, gb, w):
    """Record r's VJP over one block (see ``_seg_block_backward``)."""
    op, arg0, args, fp = T[OP], T[ARG0], T[ARGS], T[FP]
    q = r - r0
    code = op[r]
    kind = code >> C.SHIFT
    sub = code & C.MASK
    a0 = arg0[r]
    g = _view(T, _gaddr(T, r, r0, gslot, gb, lo, w), m)
    y = _view(T, _vaddr_or_adjoint(T, r, r0, vslot, vb, gslot, gb, lo, w), m)
    pa = args[a0]
    xa = _view(T, _vaddr_or_adjoint(T, pa, r0, vslot, vb, gslot, gb, lo, w), m)
    ga = _view(T, _gaddr(T, pa, r0, gslot, gb, lo, w), m)
    wa, fa = write[2 * q], assign[2 * q]
    if kind == C.K_UNARY:
        if wa:
            _unary_vjp_into(sub, g, xa, y, ga, fa)
        return
    if kind == C.K_SCALAR:
        if wa:
            _scalar_vjp_into(sub, g, xa, y, fp[r], ga, fa)
        return
    if kind != C.K_NARY:  # segments hold elementwise records only
        ga[:] = np.nan
        return
    pb = args[a0 + 1]
    xb = _view(T, _vaddr_or_adjoint(T, pb, r0, vslot, vb, gslot, gb, lo, w), m)
    size = T[SIZE]
    # a constant smaller than the record, broadcast into an add or a
    # subtraction (fused_backward.runs lets only those in): its partial reads
    # no value, and its own memory is shorter than the block, so the other
    # operand's block stands in for the values the shared loop loads
    if size[pb] != size[r]:
        xb = xa
    elif size[pa] != size[r]:
        xa = xb
    if pb == pa:  # x op x: both partials to one adjoint
        if wa:
            _binary_self_into(sub, g, xa, y, ga, fa)
        return
    gbv = _view(T, _gaddr(T, pb, r0, gslot, gb, lo, w), m)
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
