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
from ._views import OP, ARG0, ARGS, FP, RIX, PTRS, APTR, REACHED  # tape fields
from ._views import _voidptr, borrowed_tape, carray
# the VJP loops of a segment's records: one compiled function per family, a
# call per block and record (inlined, they made one function too large to
# compile in reasonable time and memory)
from .elementwise_vjp import binary_loops as _binary_vjp_into
from .elementwise_vjp import binary_one_side_loops as _binary_one_side_into
from .elementwise_vjp import binary_self_loops as _binary_self_into
from .elementwise_vjp import scalar_loops as _scalar_vjp_into
from .elementwise_vjp import unary_loops as _unary_vjp_into
from .replay_families import _binary_into, _scalar_into, _unary_into


#: elements per block of a fused segment: every record's block of values and
#: adjoints stays in cache while the segment's records run over it
CHUNK = 4096

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
def _vaddr_or_adjoint(T, p, r0, vslot, vb, gslot, gb, lo):
    """``_vaddr`` for the reverse sweep: a value no VJP reads is not kept on
    an eager tape (no storage, no block row); the record's adjoint block
    stands in, as in kernels/_views.value, so that a loop shared by several
    ops loads (and ignores) memory it touches anyway."""
    q = p - r0
    if (q >= 0 and q < vslot.size and vslot[q] >= 0) or T[RIX][p] >= 0:
        return _vaddr(T, p, r0, vslot, vb, lo)
    return _gaddr(T, p, r0, gslot, gb, lo)


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
        _seg_block_backward(T, r0, r1, lo, m, slot, slot, reach, write, assign, vb, gb)


@kernel
def seg_backward_stored(T, r0, r1, n, gslot, reach, write, assign, gs):
    """``seg_backward`` over a segment of an eager tape, where every value a
    VJP reads was kept when it was recorded: nothing is recomputed, and only
    the adjoints of the records ``gslot`` marks (>= 0: reached from inside the
    segment alone) live in the block scratch ``gs``."""
    T = borrowed_tape(T)  # helpers taking T count no references (see there)
    stored = np.empty(0, np.int64)  # no value lives in a block scratch
    gb = gs.ctypes.data
    for lo in range(0, n, CHUNK):
        m = min(CHUNK, n - lo)
        _seg_block_backward(T, r0, r1, lo, m, stored, gslot, reach, write, assign, 0, gb)


@inline
def _seg_block_backward(T, r0, r1, lo, m, vslot, gslot, reach, write, assign, vb, gb):
    """One block (elements ``lo .. lo+m-1``) of a segment's reverse sweep:
    values at ``vslot``'s rows of ``vb`` or in storage, adjoints at
    ``gslot``'s rows of ``gb`` or at the records' adjoint addresses."""
    op, arg0, args, fp = T[OP], T[ARG0], T[ARGS], T[FP]
    for r in range(r1 - 1, r0 - 1, -1):
        q = r - r0
        if not reach[q]:
            continue
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        a0 = arg0[r]
        g = _view(_gaddr(T, r, r0, gslot, gb, lo), m)
        y = _view(_vaddr_or_adjoint(T, r, r0, vslot, vb, gslot, gb, lo), m)
        pa = args[a0]
        xa = _view(_vaddr_or_adjoint(T, pa, r0, vslot, vb, gslot, gb, lo), m)
        ga = _view(_gaddr(T, pa, r0, gslot, gb, lo), m)
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
        xb = _view(_vaddr_or_adjoint(T, pb, r0, vslot, vb, gslot, gb, lo), m)
        if pb == pa:  # x op x: both partials to one adjoint
            if wa:
                _binary_self_into(sub, g, xa, y, ga, fa)
            continue
        gbv = _view(_gaddr(T, pb, r0, gslot, gb, lo), m)
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
