"""Vector reverse mode: p adjoint vectors per record in one compiled sweep.

ADOL-C's vector reverse mode pushes many seed vectors through the tape in one
pass.  Here every record keeps ``p`` adjoints side by side: record ``v``'s
k-th adjoint lives ``k * stride[v]`` bytes after its first (``vec_layout``).
The sweep walks the tape once; at each record it applies the very same VJP
kernels as the scalar sweep, once per vector, after moving the addresses of
the records that VJP touches (the record, its outputs' span, its parents) to
that vector.  Each kernel's first-write-or-accumulate choice (``claim``) must
be the same for every vector, so the parents' ``reached`` flags are put back
before each one.  Pass-through VJPs that hand a record's memory to its parent
(``alias``) do so vector by vector; the parent then keeps the record's first
address and, having the same stride, finds every vector where it should.

A record's p adjoints are contiguous (the outputs of a multi-output op are
interleaved as one group, since its VJP reads them as one span), so a batched
host VJP sees a (p, size) block, and memory that no VJP writes (constants'
adjoints) is never touched.

The one-vector sweep stays the fast path for ``backward``; this one serves
Jacobians and batched VJPs, where the tape walk, the value lookups and the
Python calls at host records are paid once for all p vectors.
"""
import numpy as np

from . import codes as C
from ._jit import kernel
from .interpret import estimate_as
from ._views import OP, ARG0, SIZE, ARGS, RIX, PTRS, APTR, REACHED  # tape fields
from .dispatch import FAILED, MISSING, TABLE, VJP, call_entry, slot

_LEAF = C.code(C.K_NONE, C.LEAF)
_CONST = C.code(C.K_NONE, C.CONST)
_OUTPUT = C.code(C.K_NONE, C.OUTPUT)


@kernel
def vec_layout(op, size, arg0, args, n, p):
    """Adjoint offsets (elements, in the leaves' or the other arena) and
    strides (bytes between consecutive vectors) of records ``0 .. n-1`` for p
    vectors; returns ``(aoff, stride, leaf, inner, outer)``."""
    aoff = np.empty(n, np.int64)
    stride = np.empty(n, np.int64)
    leaf = np.empty(n, np.bool_)
    inner = 0
    outer = 0
    r = 0
    while r < n:
        s = size[r]
        is_leaf = op[r] == _LEAF
        leaf[r] = is_leaf
        if op[r] == _OUTPUT:  # a group of outputs of one op: interleaved
            u = args[arg0[r]]
            e = r
            total = 0
            while e < n and op[e] == _OUTPUT and args[arg0[e]] == u:
                total += size[e]
                e += 1
            stride[u] = total * 8  # the op record reads the group as one span
            o = inner
            for v in range(r, e):
                leaf[v] = False
                aoff[v] = o
                stride[v] = total * 8
                o += size[v]
            inner += total * p
            r = e
            continue
        stride[r] = s * 8
        if is_leaf:
            aoff[r] = outer
            outer += s * p
        elif op[r] == _CONST:
            # nothing reads a constant's adjoints (some VJPs write them rather
            # than test): all p vectors share one row, so a large constant
            # (the matrix of A @ x) does not cost p copies of itself
            aoff[r] = inner
            stride[r] = 0
            inner += s
        else:
            aoff[r] = inner
            inner += s * p
        r += 1
    return aoff, stride, leaf, inner, outer


@kernel
def touched(T, r, out):
    """Records whose adjoints record r's VJP reads or writes: r, the OUTPUT
    records of a multi-output r (one span), its distinct parents.  Fills
    ``out`` and returns the count."""
    op, arg0, args = T[OP], T[ARG0], T[ARGS]
    k = 0
    out[k] = r
    k += 1
    v = r + 1
    if T[SIZE][r] == 0:
        while v < op.size and op[v] == _OUTPUT and args[arg0[v]] == r:
            out[k] = v
            k += 1
            v += 1
    for j in range(arg0[r], arg0[r + 1]):
        p = args[j]
        seen = False
        for i in range(k):
            if out[i] == p:
                seen = True
        if not seen:
            out[k] = p
            k += 1
    return k


estimate_as(touched, "records")


def sweep_vec(T, freed, start, stop, p, stride):
    """``sweep`` for p adjoint vectors; same returns (-1 done, r at a host
    record, ``-2 - r`` for a freed record)."""
    return VJP.run(_sweep_vec, (T, freed, start, stop, p, stride, TABLE), 2)


@kernel
def _sweep_vec(T, freed, start, stop, p, stride, table):
    """``sweep_vec``'s compiled loop (returns as ``sweep``'s)."""
    op, arg0, args, reached, aptr = T[OP], T[ARG0], T[ARGS], T[REACHED], T[APTR]
    rix, ptrs = T[RIX], T[PTRS]
    vs = np.empty(64, np.int64)
    saved = np.empty(64, np.bool_)
    for r in range(start, stop, -1):
        if not reached[r]:
            continue
        # the scalar sweep's checks, repeated: factored into a helper (inlined
        # or called) they made that sweep 6-12x slower per record (measured)
        if freed[r]:
            return -2 - r
        for j in range(arg0[r], arg0[r + 1]):
            q = args[j]
            if rix[q] >= 0 and ptrs[rix[q]] == 0:
                return -2 - q
        code = op[r]
        kind = code >> C.SHIFT
        sub = code & C.MASK
        if kind == C.K_HOST or kind > C.K_USER:  # as in ``sweep``
            return r
        if kind == C.K_NONE:  # an OUTPUT record hands over to its op record
            for j in range(arg0[r], arg0[r + 1]):
                reached[args[j]] = True
            continue
        f = table[slot(T, r, kind, sub)]
        if f == 0:
            return MISSING - r
        need = 1 + (arg0[r + 1] - arg0[r]) + (op.size - r if T[SIZE][r] == 0 else 0)
        if need > vs.size:
            vs = np.empty(need, np.int64)
            saved = np.empty(need, np.bool_)
        nv = touched(T, r, vs)
        for i in range(nv):
            saved[i] = reached[vs[i]]
        for k in range(p):
            for i in range(nv):
                v = vs[i]
                reached[v] = saved[i]
                aptr[v] += k * stride[v]
            ok = call_entry(f, T, r, sub)
            for i in range(nv):
                v = vs[i]
                aptr[v] -= k * stride[v]
            if ok != 1:
                return FAILED - r
    return -1
