"""Fused reverse sweeps over runs of large elementwise records of an eager tape.

A record-by-record sweep takes one pass over memory per record: on
``3*a + 2*b*b + log(c)`` over a million elements that is seven passes,
most of them writing an intermediate adjoint that the next VJP reads back
once.  Here a run of consecutive same-size elementwise records (with leaves
and constants between them; an add or subtraction may also take a smaller
constant broadcast into it, as ``x - m`` with the row maxima m of a
logsumexp, since only its other operand gets an adjoint) is swept block by
block instead
(kernels/fused_segments.py ``seg_backward_stored``, ``STORED_CHUNK`` elements at
a time): the adjoints that only the run's own records write and read live
in a block scratch that stays in cache, and only the adjoints of the
records outside the run (leaves, earlier records) and of run records an
earlier VJP already reached are written to memory.  The VJPs are the
sweep's own loops, applied in the same order: the results are the
record-by-record sweep's, up to the sign of a zero (a pass-through adjoint
that the sweep shares is added to a zero here).

A run's plan is made when the sweep has come down to it, from what is
reached then: every record above the run has run its VJP, so a run record
not reached yet is reached from inside the run alone, and its adjoint can
live in the block scratch.

Most runs end in a full sum or mean (the loss), whose VJP would broadcast
one number into a run record's adjoint: that reduction is left out of the
record-by-record sweep and the run starts from the constant instead
(``_constant_root``).  Through the records whose partials are constants
(adds, subtractions, scalings: ``seg_plan_stored``) the adjoints stay
constants of the plan, computed as the loops would compute each element,
and are written out only where an array needs them (a leaf's gradient, a
VJP that reads values).  For that, one record followed by a full sum or
mean of it is a run too (``(W * x).sum()``, ``exp(x).mean()``).

A run under a sum over its trailing or its leading axes (a logsumexp's
row sums of its exponentials) starts from the sum's adjoint in the same
way, when the run has its own compiled loop (engine/fused_codegen.py): each
element reads its row's number (``_sweep_summed``), where the sum's VJP
would broadcast it into an array of the run record's size that the run then
reads back.  Until that loop is compiled, the sum's VJP and the run are
swept as before and their time counts towards the loop's rent.

Fusion needs the compiled kernel; it follows the interpreted tier's rule
(kernels/interpret.py): with nothing compiled or cached the runs are swept
record by record, and the time that takes is counted until compiling the
fused kernel pays (the tier's budget), or at once with ``TAPEGRAD_INTERPRET=0``.
"""
import ctypes
import time

import numpy as np

from . import fused_codegen
from ..kernels import codes as C
from ..kernels import interpret
from ..kernels._jit import cached_bytes, kernel_cache_name
from ..kernels._views import APTR, PTRS, REACHED, RIX
from ..kernels.dtypes import float_dtype
from ..kernels.fused_segments import STORED_CHUNK, seg_backward_stored, seg_plan_stored
from ..core.tape import Tape

#: records with at least this many elements are fused.  Planning a run costs
#: about 0.1 ms of Python; below this size the intermediates stay in cache
#: anyway and the plain sweep is faster (measured, alternating the two in one
#: process: 0.38 against 0.28 ms at 1e5 elements; 5.0 against 5.2 ms at 1e6;
#: 25 against 29 ms at 4e6, on ``(3*a + 2*b*b + log(c)).sum()``)
FUSE_MIN = 1 << 18

_PASSIVE_MAX = C.CONST   # K_NONE subs a run may hold: leaves and constants
_CONST = C.code(C.K_NONE, C.CONST)


class _Rent:
    """What sweeping runs record by record has cost in this process, until
    the fused kernel is compiled (``hot``)."""
    hot = False
    spent = 0.0
    in_cache = None


def _ready():
    """Whether runs are fused now: the kernel is compiled or loadable, or
    sweeping runs unfused has cost what compiling it would."""
    if _Rent.hot:
        return True
    setting = interpret._setting()
    if setting == "force":
        return False
    if setting == 0 or seg_backward_stored.signatures:
        _Rent.hot = True
        return True
    if _Rent.in_cache is None:
        _Rent.in_cache = _cache_bytes()
    budget = min(setting, interpret.load_price(_Rent.in_cache)) if _Rent.in_cache else setting
    if _Rent.spent >= budget:
        _Rent.hot = True
    return _Rent.hot


def _cache_bytes():
    """The bytes of the fused kernel in the cache (0: not there).  Whatever
    object the name is bound to now: once Numba is loaded (by another
    graph's backward) it is the dispatcher, and taking that for "not
    cached" swept runs unfused until they had cost a compilation's budget."""
    return cached_bytes(kernel_cache_name(seg_backward_stored))


def runs(tape, T, start, stop, order):
    """Runs of fusable records among records ``start .. stop+1`` (those of
    ``order`` when given): ``(r0, r1, n, fusable)`` ascending, where
    ``fusable`` marks the records of ``r0 .. r1-1`` the run sweeps."""
    # the common case first, in one pass over the span (or, for a graph
    # search's order, over the graph: never over unrelated records)
    span = tape.size[stop + 1:start + 1] if order is None else tape.size[order]
    if span.size < 2 or span.max() < FUSE_MIN:
        return []
    if order is None:
        recs, size = np.arange(stop + 1, start + 1), span
    else:
        recs = order[(order > stop) & (order <= start)][::-1]
        size = tape.size[recs]
    big = size >= FUSE_MIN
    if np.count_nonzero(big) < 2:
        return []
    op = tape.op[recs]
    kind, sub = op >> C.SHIFT, op & C.MASK
    fus = big & ((kind == C.K_UNARY) | (kind == C.K_SCALAR)
                 | ((kind == C.K_NARY) & (sub != C.WHERE)))
    cand = np.flatnonzero(fus)
    a0, a1 = tape.arg0[recs[cand]], tape.arg0[recs[cand] + 1]
    args, psize = tape.args, tape.size
    two = (a1 - a0) == 2
    pa = args[a0]
    pb = args[a0 + two]   # the second parent, or the first again
    fa, fb = psize[pa] == size[cand], psize[pb] == size[cand]
    # an add or subtraction may take a smaller constant broadcast into it
    # (``x - m`` with m the row maxima): the other operand's adjoint is the
    # record's, and the constant's is never written (see fused_codegen.plan
    # and fused_segments._record_backward for the values that stand in)
    lin = two & (kind[cand] == C.K_NARY) & ((sub[cand] == C.ADD) | (sub[cand] == C.SUB))
    ca, cb = tape.op[pa] == _CONST, tape.op[pb] == _CONST
    same = (fa & fb) | (lin & ((fa & cb) | (fb & ca)))
    fus[cand] &= same & ~tape.freed[recs[cand]]
    passive = (kind == C.K_NONE) & (sub <= _PASSIVE_MAX)
    # the scan over a few records, on Python lists (an element of a NumPy
    # array costs a scalar object per look)
    fl, pl, sl = fus.tolist(), passive.tolist(), size.tolist()
    out, i, k = [], 0, len(fl)
    while i < k:
        if not fl[i]:
            i += 1
            continue
        m, e, last, count = sl[i], i + 1, i, 1
        while e < k and (pl[e] or (fl[e] and sl[e] == m)):
            if fl[e]:
                last = e
                count += 1
            e += 1
        if count >= 2 or _full_reduction_of(tape, int(recs[i])):
            r0, r1 = int(recs[i]), int(recs[last]) + 1
            mask = np.zeros(r1 - r0, np.bool_)
            mask[recs[i:last + 1][fus[i:last + 1]] - r0] = True
            if _parents_alive(tape, T, r0, r1, mask):
                out.append((r0, r1, int(m), mask))
        i = last + 1
    return out


def _full_reduction_of(tape, r):
    """Whether record r + 1 is a full sum or mean of record r: a run of r
    alone then starts from that reduction's constant adjoint (``run``,
    ``_constant_root``) and writes only its operands' adjoints, where the
    record-by-record sweep first broadcasts the constant into r's adjoint
    and reads it back (``(W * x).sum()``: one pass over memory instead of
    three)."""
    q = r + 1
    return (q < tape.n and int(tape.op[q]) in _FULL and tape.size[q] == 1
            and tape.arg0[q + 1] - tape.arg0[q] == 1 and int(tape.args[tape.arg0[q]]) == r)


def _parents_alive(tape, T, r0, r1, mask):
    """False if a run record reads a value a freed graph released (the
    record-by-record sweep reports that; the run leaves it to it)."""
    recs = np.flatnonzero(mask) + r0
    a0 = tape.arg0[recs]
    two = tape.arg0[recs + 1] - a0 == 2   # run records have one or two parents
    ps = np.concatenate((tape.args[a0], tape.args[a0[two] + 1]))
    k = T[RIX][ps]
    k = k[k >= 0]
    return not np.any(T[PTRS][k] == 0)


def sweep_run(T, r0, r1, n, mask, root=-1, g=0.0):
    """The fused reverse sweep over one run, planned from what is reached now;
    ``root >= 0``: that record of the run, not reached yet, enters with the
    constant adjoint ``g`` (see ``_constant_root``)."""
    reached = T[REACHED]
    if root < 0 and not reached[r0:r1][mask].any():
        return  # nothing above reaches the run (another graph on the tape)
    gslot, plan, loop, fn = _planned(T, r0, r1, mask, root, g)
    if fn is not None:
        fused_codegen.run(fn, loop, n)
    else:
        gs = np.empty((max(int(np.count_nonzero(gslot >= 0)), 1), STORED_CHUNK),
                      float_dtype(T))
        t0 = time.perf_counter()
        seg_backward_stored(T, r0, r1, n, gslot, *plan, gs)
        if loop is not None:
            fused_codegen.spent(loop, time.perf_counter() - t0)
    # the run's records count as reached, as after the record-by-record
    # sweep (the graph is freed, and checked for stale values, by that mark)
    reached[r0:r1] |= plan[0]


def _planned(T, r0, r1, mask, root, g, bcast=None):
    """``(gslot, plan, loop, fn)`` of a run: the block-scratch slots of the
    records reached only inside it, ``seg_plan_stored``'s plan (which marks
    the run's outside operands reached), the generated loop's plan (None if
    the loops do not know the run) and its compiled loop (None while the
    shared kernel sweeps that structure)."""
    internal = mask & ~T[REACHED][r0:r1]
    gslot = np.where(internal, np.cumsum(internal) - 1, -1).astype(np.int64)
    plan = seg_plan_stored(T, r0, r1, gslot, root, g)
    loop = fused_codegen.plan(T, r0, r1, gslot, *plan, dtype=float_dtype(T), bcast=bcast)
    fn = fused_codegen.loop_for(loop) if loop is not None else None
    return gslot, plan, loop, fn


_FULL = (C.code(C.K_REDUCE, C.SUM), C.code(C.K_REDUCE, C.MEAN))


def _reduces_run(tape, r0, r1, start, mask):
    """Whether record r1, the one after the run, is a sum or mean of every
    element of a run record (the loss of most programs), whose VJP hands the
    run a constant adjoint."""
    return (r1 <= start and int(tape.op[r1]) in _FULL and tape.size[r1] == 1
            and r0 <= int(tape.args[tape.arg0[r1]]) < r1
            and mask[int(tape.args[tape.arg0[r1]]) - r0])


_SUM = C.code(C.K_REDUCE, C.SUM)


def _sums_run(tape, r0, r1, start, mask):
    """Whether record r1, the one after the run, is a sum over some axes of a
    run record (a logsumexp's row sums of its exponentials), whose VJP
    broadcasts its adjoint into that record's."""
    if not (r1 <= start and int(tape.op[r1]) == _SUM and tape.size[r1] > 1
            and tape.arg0[r1 + 1] - tape.arg0[r1] == 1):
        return False
    p = int(tape.args[tape.arg0[r1]])
    return r0 <= p < r1 and bool(mask[p - r0])


def _summed_axes(tape, r):
    """``(inner, leading)`` of sum record r: element i of its operand reads
    element ``i // inner`` of its adjoint (``leading`` False: the trailing
    axes were summed) or ``i % inner`` (True: the leading ones) -- or None
    for any other choice of axes."""
    ip, b = tape.ip, int(tape.ip0[r])
    nd = int(ip[b])
    shape = ip[b + 1:b + 1 + nd].tolist()
    strides = ip[b + 1 + nd:b + 1 + 2 * nd].tolist()
    summed = [st == 0 for st, d in zip(strides, shape) if d != 1]
    dims = [d for d in shape if d != 1]
    k = summed.index(True) if True in summed else len(summed)
    if 0 < k < len(summed) and all(summed[k:]):        # trailing axes
        return int(np.prod(dims[k:])), False
    k = summed.index(False) if False in summed else len(summed)
    if 0 < k < len(summed) and not any(summed[k:]):    # leading axes
        return int(np.prod(dims[k:])), True
    return None


def _sweep_summed(tape, T, r0, r1, n, mask):
    """The run swept from the sum r1's adjoint, broadcast in its own loop
    (fused_codegen.plan's ``bcast``): True when done.  Else nothing is
    changed, and the caller sweeps r1's VJP and then the run; the return is
    then the loop that would have run (its rent is what that costs: see
    fused_codegen.loop_for), or None."""
    reached = T[REACHED]
    p = int(tape.args[tape.arg0[r1]])
    if not reached[r1] or reached[p] or tape.freed[r1]:
        return None
    k = T[RIX][p]
    if k >= 0 and T[PTRS][k] == 0:
        return None   # a released value: the sweep reports it
    axes = _summed_axes(tape, r1)
    if axes is None:
        return None
    saved = reached.copy()   # the plan marks the run's outside operands reached
    _, plan, loop, fn = _planned(T, r0, r1, mask, -2 - p, 0.0, (p, int(T[APTR][r1]), *axes))
    if fn is None:
        reached[:] = saved
        return loop
    fused_codegen.run(fn, loop, n)
    reached[r0:r1] |= plan[0]
    return True


def _constant_root(tape, T, r1):
    """``(p, g)``: the reduction r1's operand p and the constant that r1's
    VJP (kernels/structural.py ``full_sum_vjp``) would write into every
    element of p's adjoint -- when that VJP would be the first write to it
    and nothing stops the sweep at r1 -- else ``(-1, 0.0)``, and r1 is left
    to the record-by-record sweep."""
    reached = T[REACHED]
    p = int(tape.args[tape.arg0[r1]])
    if not reached[r1] or reached[p] or tape.freed[r1]:
        return -1, 0.0
    k = T[RIX][p]
    if k >= 0 and T[PTRS][k] == 0:
        return -1, 0.0  # a released value: the sweep reports it
    # r1's adjoint: one element of the sweep's dtype (float32 or float64)
    c = ctypes.c_float if float_dtype(T) == np.float32 else ctypes.c_double
    g = c.from_address(int(T[APTR][r1])).value
    if int(tape.op[r1]) == _FULL[1]:
        n = int(tape.size[p])
        g = g / n if n > 0 else 0.0
        if c is ctypes.c_float:  # rounded as the mean's VJP stores it in a float32 sweep
            g = float(np.float32(g))
    return p, g


def run(tape, T, start, stop, order, plain):
    """Sweep records ``start .. stop+1`` (of ``order``, when given): the runs
    of large elementwise records fused, the rest through ``plain(start,
    stop)``, the record-by-record sweep over that span."""
    segs = runs(tape, T, start, stop, order) \
        if type(tape) is Tape and tape.max_size >= FUSE_MIN else []
    if not segs:
        plain(start, stop)
        return
    fuse = _ready()
    for r0, r1, n, mask in reversed(segs):
        if fuse and _reduces_run(tape, r0, r1, start, mask):
            if start > r1:  # records above the reduction (none when it is the root)
                plain(start, r1)
            p, g = _constant_root(tape, T, r1)
            if p < 0:
                plain(r1, r1 - 1)
            sweep_run(T, r0, r1, n, mask, p, g)
        elif fuse and _sums_run(tape, r0, r1, start, mask):
            if start > r1:
                plain(start, r1)
            loop = _sweep_summed(tape, T, r0, r1, n, mask)
            if loop is not True:  # swept as the sum's VJP, then the run
                t0 = time.perf_counter()
                plain(r1, r1 - 1)
                sweep_run(T, r0, r1, n, mask)
                if loop is not None:
                    fused_codegen.spent(loop, time.perf_counter() - t0)
        else:
            plain(start, r1 - 1)
            if fuse:
                sweep_run(T, r0, r1, n, mask)
            else:
                t0 = time.perf_counter()
                plain(r1 - 1, r0 - 1)
                _Rent.spent += time.perf_counter() - t0
        start = r0 - 1
    plain(start, stop)
