"""The reverse sweep: one compiled loop over the tape, from the root back.

Recording order is a topological order, so walking record ids downwards
visits every record after all of its consumers: no graph search and no
dependency counts.  A record is visited only if some consumer reached it.
"""
import numpy as np

from . import codes as C
from ._jit import inline, kernel
from ._views import (OP, ARG0, SIZE, IP0, ARGS, IP, FP, V1, VALS, VOFF, RIX, PTRS, APTR,  # tape fields
                     REACHED)
from ._views import (SMALL, _voidptr, adjoint, adjoint_span, alias, borrowed_tape, carray, claim,
                     claim_zeroed, fparam, parent, value)
from .dispatch import FAILED, MISSING, TABLE, VJP, VJP32, call_entry, slot
from .dtypes import float_dtype
from .interpret import estimate_as
from .rules import d_binary, d_scalar, d_unary
from .structural import strided, strided_add


@inline
def _deposit1(T, v, x):
    """Write (first time) or add ``x`` to one-element record v's adjoint."""
    gv = adjoint_span(T, v, 1)
    if claim(T, v):
        gv[0] = x
    else:
        gv[0] += x


#: indexing and stack records of at most this many elements run
#: inline in the sweep, without the call through the family table: in loops
#: over tiny arrays (an RK4 step on a 2-vector) that call, not the
#: arithmetic, was most of each record's cost.  At most ``SMALL``: their
#: values live in the value arena.
TINY = 8
#: the same for elementwise records of plain arithmetic (``arithmetic``)
TINY_ELEMENTWISE = 8
assert TINY_ELEMENTWISE <= TINY <= SMALL
_CONST = C.code(C.K_NONE, C.CONST)


@inline
def arithmetic(kind, sub):
    """Whether an elementwise op is plain arithmetic (``+ - * /`` of two
    operands or with a constant, negation, squares, views), the ops that the
    replay and sweep loops run inline for a few-element record.  The rest
    (transcendental functions, powers, ``where``) keep to the family kernels:
    their element work dwarfs the call, and inlining their rules into the
    loops again would add to the loops' compile time."""
    if kind == C.K_NARY:
        return sub == C.ADD or sub == C.SUB or sub == C.MUL or sub == C.DIV
    if kind == C.K_SCALAR:
        return (sub == C.ADDC or sub == C.MULC or sub == C.DIVC or sub == C.RSUBC
                or sub == C.RDIVC)
    return kind == C.K_UNARY and (sub == C.IDENT or sub == C.NEG or sub == C.SQUARE
                                  or sub >= C.VIEW_FIRST)


@inline
def _d_arithmetic(kind, sub, a, b, y, c):
    """``(da, db)`` of an ``arithmetic`` op, each rule called with a constant
    sub code (so that its switch folds to the one expression)."""
    if kind == C.K_NARY:
        if sub == C.ADD:
            return d_binary(C.ADD, a, b, y)
        if sub == C.SUB:
            return d_binary(C.SUB, a, b, y)
        if sub == C.MUL:
            return d_binary(C.MUL, a, b, y)
        return d_binary(C.DIV, a, b, y)
    if kind == C.K_SCALAR:
        if sub == C.ADDC:
            return d_scalar(C.ADDC, a, y, c), 0.0
        if sub == C.MULC:
            return d_scalar(C.MULC, a, y, c), 0.0
        if sub == C.DIVC:
            return d_scalar(C.DIVC, a, y, c), 0.0
        if sub == C.RSUBC:
            return d_scalar(C.RSUBC, a, y, c), 0.0
        return d_scalar(C.RDIVC, a, y, c), 0.0
    if sub == C.NEG:
        return d_unary(C.NEG, a, y), 0.0
    if sub == C.SQUARE:
        return d_unary(C.SQUARE, a, y), 0.0
    return d_unary(C.IDENT, a, y), 0.0


@inline
def _tiny_elementwise(T, r, kind, sub, n):
    """The VJP of an ``arithmetic`` record of ``2 <= n <= TINY_ELEMENTWISE``
    elements whose operands have n or one element, inline, with the numbers
    of the family kernels (elementwise_vjp.py: ``unary_vjp``, ``scalar_vjp``,
    ``nary_vjp``, ``broadcast_vjp``) case for case: aliasing for
    pass-through ops, ``x op x`` folded into one partial, constants'
    adjoints left unwritten, a broadcast operand zeroed then accumulated, a
    first write ``v + 0.0``.  False (nothing done) for other operand sizes."""
    op, size, args = T[OP], T[SIZE], T[ARGS]
    a = args[T[ARG0][r]]
    b = args[T[ARG0][r] + 1] if kind == C.K_NARY else a
    ma, mb = size[a], size[b]
    if not ((ma == n or (kind == C.K_NARY and ma == 1)) and (mb == n or mb == 1)):
        return False
    g, y = adjoint(T, r), value(T, r)
    xa, xb, ga, gb = value(T, a), value(T, b), adjoint(T, a), adjoint(T, b)
    fp = T[FP]
    wa, wb, fold = True, kind == C.K_NARY, False
    fa, fb = False, False
    if ma != n or mb != n:
        # broadcast_vjp: x + c, x - c, c + x with a one-element constant c
        # hand x the adjoint (alias); otherwise both adjoints zeroed
        # (constants' too), then added to
        if kind == C.K_NARY and op[b] == _CONST and ma == n and (sub == C.ADD or sub == C.SUB) \
                and alias(T, a, r):
            return True
        if kind == C.K_NARY and op[a] == _CONST and mb == n and sub == C.ADD and alias(T, b, r):
            return True
        claim_zeroed(T, a)
        claim_zeroed(T, b)
        wa, wb = op[a] != _CONST, op[b] != _CONST
    else:
        if kind == C.K_NARY and a == b:
            fold, wb = True, False
        elif ((kind == C.K_UNARY and (sub == C.IDENT or sub >= C.VIEW_FIRST))
              or (kind == C.K_SCALAR and sub == C.ADDC)
              or (kind == C.K_NARY and (sub == C.ADD or sub == C.SUB))) and alias(T, a, r):
            if kind != C.K_NARY:
                return True
            wa = False
        if kind == C.K_NARY and not fold:
            wa, wb = wa and op[a] != _CONST, op[b] != _CONST
        if wa:
            fa = claim(T, a)
        if wb:
            fb = claim(T, b)
    c = fp[r]
    for i in range(n):
        ia = i if ma == n else 0
        ib = i if mb == n else 0
        da, db = _d_arithmetic(kind, sub, xa[ia], xb[ib], y[i], c)
        gi = g[i]
        if fold:
            ga[i] = gi * (da + db) + (0.0 if fa else ga[i])
            continue
        if wa:
            ga[ia] = gi * da + (0.0 if fa else ga[ia])
        if wb:
            gb[ib] = gi * db + (0.0 if fb else gb[ib])
    return True


@inline
def _tiny_structural(T, r, kind, sub):
    """``gather_vjp`` (one output record) and ``concat_vjp`` of a record of
    ``n <= TINY`` elements, inline: the same steps in the same order."""
    ip = T[IP]
    b = T[IP0][r]
    m = ip[b]  # the output's elements: n
    g = adjoint(T, r)
    if kind == C.K_GATHER:
        xr = parent(T, r, 0)
        claim_zeroed(T, xr)
        gx = adjoint(T, xr)
        if strided(sub):
            strided_add(gx, g, ip, b + 1)
            return
        for k in range(m):
            i = ip[b + 1 + k]
            if i >= 0:
                gx[i] += g[k]
        return
    for j in range(T[ARG0][r + 1] - T[ARG0][r]):
        claim_zeroed(T, parent(T, r, j))
    for k in range(m):
        gx = adjoint(T, parent(T, r, ip[b + 1 + k]))
        gx[ip[b + 1 + m + k]] += g[k]


#: ``mmk`` of a tape whose matmuls all go to Python (eager tapes)
NO_MATMULS = np.zeros(0, np.int64)
#: record ids ``4095 .. 0``, descending: ``sweep``'s order over a span of a
#: small tape laid out whole
_DOWN = np.arange(4095, -1, -1, dtype=np.int64)


def sweep(T, freed, start, stop, order=None, mmk=NO_MATMULS):
    """Run VJPs of reached records ``start, start-1, ..., stop+1``: those of
    ``order`` (record ids, descending: the graph :func:`graph_of` found), or
    every record in that range.

    Returns -1 when done, ``r >= 0`` when record r is a host record (Python
    applies its VJP, marks its parents and resumes at ``r - 1``), and
    ``-2 - r`` when record r was freed by an earlier backward.  ``stop`` is
    -1 for a whole sweep; Python passes a record id to get control back when
    that record's adjoint is complete (tensor hooks, anomaly checks) without
    the loop testing anything per record.

    A matmul record r with ``mmk[r] > 0`` (its inner dimension: a trace's
    small matmuls; ``mmk`` may be shorter than the tape) runs here
    (kernels/small_matmul.py), not in Python.

    The VJP families a tape uses are compiled the first time a sweep meets
    them (kernels/dispatch.py); the compiled loop hands back here for that.
    """
    if order is None:
        # ``start .. stop+1`` descending: a view of one made once costs less
        # than a new one
        order = _DOWN[_DOWN.size - 1 - start:_DOWN.size - 1 - stop] \
            if stop < start < _DOWN.size else np.arange(start, stop, -1)
    if float_dtype(T) == np.float32:  # a float32 sweep: the float32 families
        return VJP32.run(_sweep, (T, freed, order, start, stop, mmk, VJP32.table), 3)
    return VJP.run(_sweep, (T, freed, order, start, stop, mmk, TABLE), 3)


@kernel
def _sweep(T, freed, order, start, stop, mmk, table):
    """``sweep``'s compiled loop over the records of ``order`` in
    ``(stop, start]``; returns ``MISSING - r`` at a record whose family has no
    entry in ``table`` yet (before touching it), ``FAILED - r`` when its
    kernel raised."""
    # the inline paths' helpers take T: borrowed, they count no references
    # (T0, the caller's, goes to the family entries: their signature's type)
    T0, T = T, borrowed_tape(T)
    op, arg0, size, args, v1, reached = T[OP], T[ARG0], T[SIZE], T[ARGS], T[V1], T[REACHED]
    rix, ptrs = T[RIX], T[PTRS]
    # the first position at or below start: order is descending
    lo, hi = 0, order.size
    while lo < hi:
        mid = (lo + hi) // 2
        if order[mid] > start:
            lo = mid + 1
        else:
            hi = mid
    for k in range(lo, order.size):
        r = order[k]
        if r <= stop:
            break
        if not reached[r]:
            continue
        if freed[r]:
            return -2 - r
        for j in range(arg0[r], arg0[r + 1]):
            p = args[j]
            if rix[p] >= 0 and ptrs[rix[p]] == 0:
                # a parent from a freed graph whose value was released: the
                # backward would reach that graph and fail there anyway
                return -2 - p
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        if (kind == C.K_HOST or kind > C.K_USER) and (
                kind != C.K_HOST or r >= mmk.size or mmk[r] == 0):
            # Python applies host VJPs (but for the small matmuls: the family
            # of slot K_HOST below); a kind with no kernel goes there too and
            # fails loudly (the registry admits none)
            return r
        n = size[r]
        if n == 1 and kind <= C.K_NARY and kind != C.K_NONE and sub != C.WHERE:
            # one-element elementwise record: its operands have one element
            # too, so skip the views and loops (scalar code's hot path)
            g = adjoint_span(T, r, 1)[0]
            a = args[arg0[r]]
            if kind == C.K_UNARY:
                _deposit1(T, a, g * d_unary(sub, v1[a], v1[r]))
            elif kind == C.K_SCALAR:
                _deposit1(T, a, g * d_scalar(sub, v1[a], v1[r], fparam(T, r)))
            else:
                b = args[arg0[r] + 1]
                da, db = d_binary(sub, v1[a], v1[b], v1[r])
                _deposit1(T, a, g * da)
                _deposit1(T, b, g * db)
            continue
        if 1 < n <= TINY_ELEMENTWISE and arithmetic(kind, sub) \
                and _tiny_elementwise(T, r, kind, sub, n):
            continue
        if kind == C.K_NONE:
            # an OUTPUT record hands the gradient to its op record
            for j in range(arg0[r], arg0[r + 1]):
                reached[args[j]] = True
            continue
        if 0 < n <= TINY and (kind == C.K_GATHER or kind == C.K_CONCAT):
            _tiny_structural(T, r, kind, sub)
            continue
        f = table[slot(T, r, kind, sub)]
        if f == 0:
            return MISSING - r
        # a small matmul's family takes its inner dimension for the sub code
        if call_entry(f, T0, r, mmk[r] if kind == C.K_HOST else sub) != 1:
            return FAILED - r
    return -1


_sweep.what = "the reverse sweep"
estimate_as(_sweep, "arrays")


@kernel
def consumed(T, n, freed):
    """Mask of records that some not-freed record among the first n reads."""
    arg0, args = T[ARG0], T[ARGS]
    keep = np.zeros(n, np.bool_)
    for r in range(n):
        if not freed[r]:
            for j in range(arg0[r], arg0[r + 1]):
                keep[args[j]] = True
    return keep


estimate_as(consumed, "records")
_OUTPUT = C.code(C.K_NONE, C.OUTPUT)
_LEAF = C.code(C.K_NONE, C.LEAF)


@inline
def _is_multi(op, size, r):
    """Record r is a multi-output op whose outputs are the next records."""
    return size[r] == 0 and ((op[r] >> C.SHIFT) == C.K_GATHER or (op[r] >> C.SHIFT) == C.K_HOST)


@inline
def _scan_down(op, size, arg0, args, first, upto, seen, nxt):
    """Mark the graph (``seen[r] = 1``) by one reverse pass from ``upto - 1``
    (recording order is topological: every parent lies below its consumer),
    stopping once no marked record with parents is left below the cursor.
    Records without parents (leaves, constants) are marked and listed but
    never waited for, so a graph that reaches parameters recorded long ago
    stops where its earliest op is.  Returns ``(lo, k, head)``: the lowest
    record the pass visited, the records marked, and the first of the
    parentless ones among them, linked through ``nxt`` (-1 ends the list: a
    list in place, as a growing array costs its references in the loop, a
    few times the pass itself); ``lo == -1`` once the pass has
    crossed many more unrelated records than it found (graphs interleaved
    on the tape: the depth-first search then costs less)."""
    head = -1
    pending = 0
    k = 0
    for r in range(first, upto):
        seen[r] = 1
        k += 1
        pending += 1
    r = upto - 1
    while r >= 0 and pending > 0:
        if seen[r] == 1:
            if r >= first or arg0[r + 1] > arg0[r]:
                pending -= 1
            for j in range(arg0[r], arg0[r + 1]):
                p = args[j]
                if seen[p] == 0:
                    seen[p] = 1
                    k += 1
                    if arg0[p + 1] > arg0[p]:
                        pending += 1
                    else:
                        nxt[p] = head
                        head = p
            if _is_multi(op, size, r):
                j = r + 1
                while j < upto and op[j] == _OUTPUT and args[arg0[j]] == r:
                    if seen[j] == 0:
                        seen[j] = 1
                        k += 1
                    j += 1
        elif upto - r > 4096 + 16 * k:
            return -1, 0, head
        r -= 1
    return r + 1, k, head


@inline
def _search(op, size, arg0, args, first, upto, seen):
    """Mark the graph depth-first (``seen[r] = 2``); returns the records."""
    stack = np.empty(64, np.int64)
    out = np.empty(64, np.int64)
    top = 0
    k = 0
    for r in range(first, upto):
        if seen[r] != 2:
            seen[r] = 2
            stack[top] = r
            top += 1
    while top > 0:
        top -= 1
        r = stack[top]
        if k == out.size:
            grown = np.empty(2 * out.size, np.int64)
            grown[:k] = out
            out = grown
        out[k] = r
        k += 1
        need = top + (arg0[r + 1] - arg0[r]) + 1
        if need > stack.size:
            grown = np.empty(2 * need, np.int64)
            grown[:top] = stack[:top]
            stack = grown
        for j in range(arg0[r], arg0[r + 1]):
            p = args[j]
            if seen[p] != 2:
                seen[p] = 2
                stack[top] = p
                top += 1
        if _is_multi(op, size, r):
            j = r + 1
            while j < upto and op[j] == _OUTPUT and args[arg0[j]] == r:
                if seen[j] != 2:
                    seen[j] = 2
                    if top == stack.size:
                        grown = np.empty(2 * stack.size, np.int64)
                        grown[:top] = stack[:top]
                        stack = grown
                    stack[top] = j
                    top += 1
                j += 1
    return out[:k]


@kernel
def graph_of(op, size, arg0, args, first, upto, seen):
    """The records that records ``first .. upto-1`` reach (a root and the
    later outputs of its op), and their adjoints' layout, in time that grows
    with that graph alone, not with the rest of the tape.

    Returns ``(order, aoff, leaf, inner, outer)``: the records in descending
    order (the order the sweep visits them: recording order is topological),
    each one's adjoint offset and whether it is a leaf (arrays of ``upto``
    entries, set for the graph's records only: the others are never read),
    and the two adjoint arenas' sizes.  The outputs of a multi-output record
    in the graph are in it together, in consecutive adjoints, since its VJP
    reads them as one span.  ``seen`` (``upto`` uint8 zeros, from the
    caller: a fresh zeroed allocation costs nothing for the pages never
    touched) holds the marks.
    """
    nxt = np.empty(upto, np.int64)  # only the parentless records' entries are written
    lo, k, head = _scan_down(op, size, arg0, args, first, upto, seen, nxt)
    if lo >= 0:
        # the pass's span in order, after the parentless records it marked
        # below the span (parameters recorded long before)
        order = np.empty(k, np.int64)
        i = 0
        while head >= 0:
            if head < lo:
                order[i] = head
                i += 1
            head = nxt[head]
        order[:i] = np.sort(order[:i])
        for r in range(lo, upto):
            if seen[r] == 1:
                order[i] = r
                i += 1
    else:
        order = np.sort(_search(op, size, arg0, args, first, upto, seen))
        k = order.size
    aoff = np.empty(upto, np.int64)
    leaf = np.empty(upto, np.bool_)
    inner = 0
    outer = 0
    for i in range(k):  # ascending: a multi-output record's outputs stay consecutive
        r = order[i]
        is_leaf = op[r] == _LEAF
        leaf[r] = is_leaf
        if is_leaf:
            aoff[r] = outer
            outer += size[r]
        else:
            aoff[r] = inner
            inner += size[r]
    return order[::-1].copy(), aoff, leaf, inner, outer


estimate_as(graph_of, "records")


@kernel
def graph_addresses(order, aoff, leaf, L, A, upto, whole):
    """Adjoint addresses of records ``0 .. upto-1`` (``whole``) or of the
    graph's records ``order`` (the other entries are never read), laid out
    at ``aoff`` in the arenas that start where ``L`` (leaves) and ``A`` (the
    rest) do -- arrays over their first elements --; and the two arenas'
    addresses, which Python would pay a microsecond each for."""
    aptr = np.empty(upto, np.int64)
    lbase, abase, item = L.ctypes.data, A.ctypes.data, L.itemsize
    if whole:
        for r in range(upto):
            aptr[r] = aoff[r] * item + (lbase if leaf[r] else abase)
    else:
        for i in range(order.size):
            r = order[i]
            aptr[r] = aoff[r] * item + (lbase if leaf[r] else abase)
    return aptr, lbase, abase


estimate_as(graph_addresses, "records")


@kernel
def live_records(T, n, roots):
    """Records that the given roots can reach (their graphs), as a mask.

    The outputs of a multi-output record are kept together, since its VJP
    reads their adjoints as one span.
    """
    op, arg0, size, args = T[OP], T[ARG0], T[SIZE], T[ARGS]
    keep = np.zeros(n, np.bool_)
    for r in roots:
        keep[r] = True
    for r in range(n - 1, -1, -1):
        if keep[r]:
            for j in range(arg0[r], arg0[r + 1]):
                keep[args[j]] = True
    for r in range(n):
        if keep[r] and size[r] == 0 and ((op[r] >> C.SHIFT) == C.K_GATHER
                                          or (op[r] >> C.SHIFT) == C.K_HOST):
            j = r + 1
            while j < n and op[j] == _OUTPUT and args[arg0[j]] == r:
                keep[j] = True
                j += 1
    return keep


estimate_as(live_records, "records")



@kernel
def layout(op, size, n, small):
    """Where the values and adjoints of records ``0 .. n-1`` live, in one pass.

    Returns ``(voff, aoff, leaf, inner, outer)``: offsets of mid-size values
    in the arena, adjoint offsets (leaves' in their own arena), which records
    are leaves, and the two adjoint arenas' sizes.
    """
    voff = np.empty(n, np.int64)
    aoff = np.empty(n, np.int64)
    leaf = np.empty(n, np.bool_)
    inner, outer = _lay_out(op, size, n, small, voff, aoff, leaf)
    return voff, aoff, leaf, inner, outer


@inline
def _lay_out(op, size, n, small, voff, aoff, leaf):
    """:func:`layout`'s pass, into the given arrays; returns ``(inner, outer)``."""
    v = 0
    inner = 0
    outer = 0
    for r in range(n):
        s = size[r]
        voff[r] = v
        if 1 < s <= small:
            v += s
        is_leaf = op[r] == _LEAF
        leaf[r] = is_leaf
        if is_leaf:
            aoff[r] = outer
            outer += s
        else:
            aoff[r] = inner
            inner += s
    return inner, outer


@kernel
def whole_layout(op, size, n, small, voff, aoff, leaf, aptr, A, asize):
    """:func:`layout` and :func:`graph_addresses` of a float64 backward laid
    out whole, in one call, written into the given arrays (``n`` entries
    each): for a small graph each compiled call, and each array one hands
    back to Python (about half a microsecond), costs more than the work.

    ``A``: the scratch arena's first element (``asize`` elements in all).
    Returns ``(L, lbase, abase, inner)``: the leaf arena (fresh, ``outer``
    elements), the arenas' addresses and the scratch elements the layout
    needs; when ``asize < inner`` the addresses are not written and abase
    is 0 (give a larger arena to :func:`whole_addresses`)."""
    inner, outer = _lay_out(op, size, n, small, voff, aoff, leaf)
    L = np.empty(outer, np.float64)
    lbase = L.ctypes.data
    if asize < inner:
        return L, lbase, lbase - lbase, inner  # (0 of the addresses' unsigned type)
    abase = A.ctypes.data
    for r in range(n):
        aptr[r] = aoff[r] * 8 + (lbase if leaf[r] else abase)
    return L, lbase, abase, inner


@kernel
def whole_addresses(aoff, leaf, L, A, n, aptr):
    """:func:`graph_addresses` of a whole layout, written into ``aptr``;
    returns the arenas' addresses ``(lbase, abase)`` (``L``, ``A``: their
    first elements)."""
    lbase, abase, item = L.ctypes.data, A.ctypes.data, L.itemsize
    for r in range(n):
        aptr[r] = aoff[r] * item + (lbase if leaf[r] else abase)
    return lbase, abase


@kernel
def free_graph(op, freed, reached, order, n, unfreed):
    """Mark the reached op records of ``order`` (a graph search's records)
    freed; ``(no op record below n is left unfreed, the records it freed)``.
    ``unfreed``: how many op records the tape's counts say were unfreed
    before; the scan of the tape that confirms the first answer runs only
    when none is left by that count."""
    mine = np.empty(order.size, np.int64)
    k = 0
    for i in range(order.size):
        r = order[i]
        if reached[r] and (op[r] >> C.SHIFT) != C.K_NONE and not freed[r]:
            freed[r] = True
            mine[k] = r
            k += 1
    if unfreed - k > 0:
        return False, mine[:k]
    for r in range(n):
        if (op[r] >> C.SHIFT) != C.K_NONE and not freed[r]:
            return False, mine[:k]
    return True, mine[:k]


@kernel
def free_reached(op, freed, reached, n):
    """Mark the reached op records freed; ``(no op record is left unfreed,
    how many op records are freed)``."""
    all_freed = True
    n_freed = 0
    m = reached.size
    for r in range(n):
        if (op[r] >> C.SHIFT) == C.K_NONE:
            continue
        if r < m and reached[r]:
            freed[r] = True
        if freed[r]:
            n_freed += 1
        else:
            all_freed = False
    return all_freed, n_freed


# -- a small backward in one call ----------------------------------------------------
# ``quick_backward`` reads the tape through one array of addresses (``Q``):
# a tuple of 14 arrays costs Numba about a microsecond to unpack at every
# call from Python, more than the whole sweep of a small graph.  Slots
# ``OP .. REACHED`` are the tape tuple's (kernels/_views.py; ``VOFF``,
# ``APTR`` and ``REACHED`` are buffers of the tape's own, filled by each
# call), then these; each slot's element count is at ``Q_N + slot``.
Q_FREED, Q_SAVES, Q_TABLE, Q_DOWN, Q_ARENA, Q_OUT = range(14, 20)
Q_N = 20
#: ``quick_backward``'s first return: swept and nothing freed (Python frees
#: what the backward ran, as after any sweep); swept, and every op record of
#: the tape is now freed or spent; the leaf arena must have another size
#: (the second return); not swept (the general path runs the backward)
Q_SWEPT, Q_ALL_FREED, Q_LEAF_ARENA, Q_GENERAL = 0, 1, 2, 3
_FIRST_OP = 1 << C.SHIFT


@kernel
def quick_backward(Q, L, upto, root, n, na, n_none, retain):
    """The backward of a float64 one-element root ``root`` over records
    ``0 .. upto-1``, laid out whole, in one call from Python: the layout of
    :func:`whole_layout` (leaf adjoints in ``L``, the others in the tape's
    scratch arena), the seed 1, :func:`_sweep` in the order :func:`sweep`
    gives it, then -- unless ``retain`` -- the freeing of
    ``Tape.after_backward`` when the backward ran every op record of the tape
    (a training loop's step; any other case is left to it).

    Returns ``(status, count, leaves)``: ``Q_GENERAL`` when this path does
    not apply (the root is an output slot or freed, record ``count`` below
    it is one whose VJP Python runs, the scratch arena is smaller than
    ``count`` adjoint elements, the sweep stopped at record ``count``'s code
    -- a family not compiled yet, a freed record --, or the tape has more
    than 4,096 records below ``upto``: nothing observable has changed then),
    ``Q_LEAF_ARENA`` when ``L`` must have ``count`` elements; else the op
    records freed (``count``) and the reached leaf records (``leaves`` of
    them: record, offset in ``L``, size, three entries each in ``Q_OUT``)."""
    N = Q_N
    T = (carray(_voidptr(Q[OP]), (Q[N + OP],), np.int64),
         carray(_voidptr(Q[ARG0]), (Q[N + ARG0],), np.int64),
         carray(_voidptr(Q[SIZE]), (Q[N + SIZE],), np.int64),
         carray(_voidptr(Q[IP0]), (Q[N + IP0],), np.int64),
         carray(_voidptr(Q[ARGS]), (Q[N + ARGS],), np.int64),
         carray(_voidptr(Q[IP]), (Q[N + IP],), np.int64),
         carray(_voidptr(Q[FP]), (Q[N + FP],), np.float64),
         carray(_voidptr(Q[V1]), (Q[N + V1],), np.float64),
         carray(_voidptr(Q[VALS]), (Q[N + VALS],), np.float64),
         carray(_voidptr(Q[VOFF]), (upto,), np.int64),
         carray(_voidptr(Q[RIX]), (Q[N + RIX],), np.int64),
         carray(_voidptr(Q[PTRS]), (Q[N + PTRS],), np.int64),
         carray(_voidptr(Q[APTR]), (upto,), np.int64),
         carray(_voidptr(Q[REACHED]), (upto,), np.bool_))
    freed = carray(_voidptr(Q[Q_FREED]), (Q[N + Q_FREED],), np.bool_)
    op, size, arg0 = T[OP], T[SIZE], T[ARG0]
    voff, aptr, reached = T[VOFF], T[APTR], T[REACHED]
    if upto > Q[N + Q_DOWN] or op[root] == _OUTPUT or freed[root]:
        return Q_GENERAL, 0, 0  # (its order is a view of _DOWN's 4,096 record ids)
    arg0[n] = na  # closes the last record's parents
    v = 0
    inner = 0
    outer = 0
    for r in range(upto):  # _lay_out's offsets
        kind = op[r] >> C.SHIFT
        if kind == C.K_HOST or kind > C.K_USER:
            # Python runs its VJP (_sweep hands it back): the walk, before
            # anything is swept twice
            return Q_GENERAL, r, 0
        s = size[r]
        voff[r] = v
        if 1 < s <= SMALL:
            v += s
        if op[r] == _LEAF:
            aptr[r] = outer
            outer += s
        else:
            aptr[r] = inner
            inner += s
        reached[r] = False
    if outer != L.size:
        return Q_LEAF_ARENA, outer, 0
    if inner > Q[N + Q_ARENA]:
        return Q_GENERAL, inner, 0
    lbase, abase = L.ctypes.data, Q[Q_ARENA]
    for r in range(upto):
        aptr[r] = aptr[r] * 8 + (lbase if op[r] == _LEAF else abase)
    adjoint_span(T, root, 1)[0] = 1.0
    reached[root] = True
    down = Q[N + Q_DOWN]
    order = carray(_voidptr(Q[Q_DOWN] + 8 * (down - upto)), (upto,), np.int64)
    mmk = carray(_voidptr(Q[Q_DOWN]), (0,), np.int64)
    table = carray(_voidptr(Q[Q_TABLE]), (Q[N + Q_TABLE],), np.int64)
    # np.int64(-1), not the literal: Numba would compile _sweep again for it
    s = _sweep(T, freed, order, upto - 1, np.int64(-1), mmk, table)
    if s != -1:
        return Q_GENERAL, s, 0
    out = carray(_voidptr(Q[Q_OUT]), (Q[N + Q_OUT],), np.int64)
    k = 0
    for r in range(upto):
        if reached[r] and op[r] == _LEAF:
            out[3 * k] = r
            out[3 * k + 1] = (aptr[r] - lbase) // 8
            out[3 * k + 2] = size[r]
            k += 1
    if retain:
        return Q_SWEPT, 0, k
    saves = carray(_voidptr(Q[Q_SAVES]), (Q[N + Q_SAVES],), np.bool_)
    hits = 0
    new = 0
    for r in range(upto):
        if reached[r] and op[r] >= _FIRST_OP:
            hits += 1
            if saves[op[r]]:
                new += 1
    if new == 0 or hits != n - n_none:
        return Q_SWEPT, 0, k
    # it ran every op record of the tape (Tape.after_backward's ``ran_all``):
    # those that saved values are freed, the rest spent
    for r in range(upto):
        if reached[r] and op[r] >= _FIRST_OP and saves[op[r]]:
            freed[r] = True
    return Q_ALL_FREED, new, k


def quick_runner():
    """:func:`quick_backward`, called as a plain compiled function, once the
    sweep it calls is compiled; None before (the interpreted tier runs
    backwards record by record: kernels/interpret.py)."""
    if not getattr(_sweep, "overloads", None):
        return None
    from ._numba import CPUDispatcher
    run = quick_backward
    if type(run) is not CPUDispatcher:
        # compiled on its first call (or loaded from the cache), never
        # interpreted: it is only called once the process compiles its sweeps
        run.__class__ = CPUDispatcher
    return run
