"""Second derivatives: ``hvp`` and ``hessian`` by forward-over-reverse on the tape.

The function is recorded once.  A forward tangent sweep (``transforms/forward/sweep.py``)
gives every record's tangents ``xdot`` for p directions.  Then one reverse
sweep carries p + 1 adjoints per record: vector 0 is the ordinary adjoint
``ybar`` (seed 1), vectors 1..p its tangents ``ybar_dot`` (seed 0).  The
tangent-linear of an op's VJP ``xbar += phi'(x)^T ybar`` is

    xbar_dot += phi'(x)^T ybar_dot + (phi''(x)[xdot])^T ybar.

The compiled sweep ``kernels/hvp.py: sweep_block`` applies both terms for
all p + 1 vectors at the common records (elementwise ops, ops with a
constant, sums, means, views, indexing), with no Python per record.  At any
other record it returns; then the record's ``ybar`` is complete (all its
consumers come later on the tape), the second-order term is added here with
NumPy for all p directions at once (the rules: nonlinear reductions,
cumprod, matmul, einsum, the linear-algebra ops -- inv, solve, det, slogdet,
cholesky, eigh, qr, svd, pinv, lstsq -- and ``tg.elementwise`` ops defined
with ``second_derivative=``), the compiled vector
sweep (``kernels/vector.py``) applies the record's first-order VJP to all
p + 1 vectors, and ``sweep_block`` resumes.  The second term vanishes for the
(piecewise) linear ops -- concatenation, cumsum, max/min, where -- so those
need the first step only.  The rules and the pass state they work on are in
:mod:`tapegrad.transforms.second.rules`; this module lays out and runs the passes and
holds the drivers (``hvp``, ``hessian``, ``sparse_hessian``,
``hessian_sparsity``, and ``replay_hessian`` for traced functions).

Ops without a second-order rule (``tg.Function``, which has no forward rule
either; ``tg.elementwise`` ops defined without ``second_derivative=``; qr with
``mode='complete'`` and more rows than columns) raise ``NotImplementedError``
naming the op, when the function's Hessian actually reaches them.
"""
import math
import threading
from typing import NamedTuple

import numpy as np

from ..forward import sweep as FW
from .. import sparsity as SP
from ...engine.backward import _freed_error
from ..base import (_Slabs, _argnums, _call_complex, _connected, _root_span, _run,
                             _trace_inputs, _vector_bytes)
from ...ops.complex_core import ComplexTensor
from ...kernels._views import SMALL
from ...kernels.hvp import hvp_layout, sweep_block
from .rules import (  # noqa: F401  (HOST_RULES: part of this module's API)
    HOST_RULES, _CLASS, _MISSING, _RULE, NoSecondOrder, _Pass, _missing_error, _second_order)
from ...core.tape import current
from ...core.tensor import bound

#: memory one batched pass may use for the tangents and adjoints of all its
#: directions; a larger Hessian is computed in chunks of directions.  Chunks
#: that stay near the caches beat one pass over blocks that stream through
#: memory: Rosenbrock's 1,000 unit directions took 52 ms in one pass and
#: 24 ms in 32 MiB chunks here
HESSIAN_BYTES = 32 * 2**20


# -- the pass ----------------------------------------------------------------------------
class HvpPlan:
    """Everything a forward-over-reverse pass from ``root`` needs except the
    recorded values: which records depend on the leaves ``recs`` (None for
    a leaf the root does not depend on), the tangent and adjoint layouts
    for p directions, their arenas and the kernels' view of the tape.

    An eager ``hvp``/``hessian`` builds one per call and borrows this
    thread's scratch arenas.  A traced function may keep one (``own=True``:
    arenas of its own) and ``run`` it again after replaying new values into
    the same records.
    """

    def __init__(self, tape, root, recs, p, own=False):
        self.upto = upto = _root_span(tape, root)
        # a leaf recorded after the root cannot reach it
        self.tape, self.root, self.p = tape, root, p
        self.recs = [r if r is not None and r < upto else None for r in recs]
        live = [r for r in self.recs if r is not None]
        self.live = bool(live)
        if not live:
            return
        tape.arg0[tape.n] = tape.na  # closes the last record's parents
        (voff, treached, toff, total, zsize, aoff, stride, leaf, inner, outer) = hvp_layout(
            tape.op, tape.size, tape.arg0, tape.args, tape.rix, upto, SMALL,
            np.array(live, np.int64), p + 1, root)
        self.tan = FW._Tangents.laid_out(tape, upto, voff, treached, toff, total, min(live),
                                         zsize)
        self.tan.alloc(p, own=own)
        self.adj = adj = _Slabs.laid_out(tape, upto, p + 1, voff, aoff, stride, leaf, inner,
                                         outer, own=own)
        # the vector sweep moves adjoint addresses around (pass-through VJPs
        # hand theirs on): a rerun starts from these
        self.aptr0 = adj.aptr.copy() if own else None
        self.root_at = ((int(adj.aptr[root]) - adj.A.ctypes.data) >> 3
                        if int(adj.stride[root]) == 8 and not adj.leaf[root] else None)

    def seed(self, fill=None, seeds=None):
        """Write the directions into the leaves' tangents: ``fill(k, block)``
        fills leaf k's (size, p) block, or ``seeds(k)`` gives its (p, size)
        directions.  They stay there across runs (no sweep writes a leaf's
        tangents)."""
        for k, r in enumerate(self.recs):
            if r is not None:
                if fill is not None:
                    fill(k, self.tan.block(r))
                else:
                    self.tan.block(r)[...] = seeds(k).T

    def run(self, into):
        """Sweep, and write per leaf the gradient (size,) and the p
        Hessian-vector products (p, size) into ``into``'s pairs of arrays
        (left as they are for leaves the root does not depend on).  Returns
        what ``tape.after_backward`` needs to free the graph (None when no
        sweep ran)."""
        if not self.live:
            return None
        tape, tan, adj, p, root = self.tape, self.tan, self.adj, self.p, self.root
        T = tape.arrays(tan) + (tan.reached,)
        FW._sweep(tape, tan, T)
        if self.aptr0 is not None:
            adj.aptr[:] = self.aptr0
            adj.reached[:] = False
        T = T[:12] + (adj.aptr, adj.reached)  # the same tape view, the adjoints' addresses
        if self.root_at is not None:  # one element, p + 1 vectors in a row (arena A)
            o = self.root_at
            adj.A[o:o + p + 1] = 0.0
            adj.A[o] = 1.0
        else:  # a leaf, or a slot of a multi-output op (vectors interleaved with the others')
            blk = adj.block(root)
            blk[...] = 0.0
            blk[0] = 1.0
        adj.reached[root] = True
        P = None
        start = self.upto - 1
        while True:
            s = sweep_block(T, tape.freed, start, -1, p + 1, adj.stride, tan.aptr,
                            tan.reached, True)
            if s == -1:
                break
            if s < -1:
                raise _freed_error()
            # a record the compiled sweep leaves to Python: its ybar is complete
            cls = _CLASS[int(tape.op[s])]
            if cls == _MISSING:
                raise _missing_error(int(tape.op[s]), tape, s)
            if cls == _RULE:
                P = P or _Pass(tape, self.upto, tan, adj)
                _second_order(P, s)
            _run(tape, adj, T, s, s - 1, p + 1)  # its first-order VJP, all vectors
            start = s - 1
        for k, r in enumerate(self.recs):
            if r is not None and adj.reached[r]:
                b = adj.block(r)
                g, hv = into[k]
                g[...] = b[0]
                hv[...] = b[1:]
        return adj.reached, T


def _hvp_pass(tape, out, leaves, recs, seeds, p, fill=None, into=None):
    """Gradient and p Hessian-vector products of scalar ``out``.

    ``seeds(k)``: leaf k's p directions as (p, size); or ``fill(k, block)``
    writes them into the (size, p) tangent block itself (cheaper for unit
    directions).  Returns per leaf ``(grad (size,), hv (p, size))`` float64
    (zeros where out does not depend on the leaf) -- written into the arrays
    ``into`` when given -- and what ``tape.after_backward`` needs to free the
    graph (None when the sweep did not run)."""
    res = into if into is not None else [(np.zeros(x.size), np.zeros((p, x.size)))
                                         for x in leaves]
    plan = HvpPlan(tape, out._rec, recs, p)
    if not plan.live:
        return res, None
    plan.seed(fill, seeds)
    return res, plan.run(res)


def _scalar_out(f, args, nums, who):
    """Record f with fresh leaves at ``nums``: ``(leaves, out, pairs)``.  A
    complex argument gets two real leaves, its real and imaginary parts
    (``pairs`` as in ``base._call_complex``: None when all are real)."""
    leaves, out, pairs = _call_complex(f, args, nums, who)
    if type(out) is ComplexTensor:
        raise TypeError(
            f"{who}: the function returned a complex value; tg.{who} needs one real number. "
            "Differentiate a real function of it (np.real(w), np.imag(w), np.abs(w) ** 2); "
            "for a holomorphic f, f''(z)[i, j] = H[i, 0, j, 0] - 1j * H[i, 0, j, 1] where H is "
            "tg.hessian of np.real(f(z)) (the last axis of each side: real, imaginary part)")
    if out.size != 1:
        raise TypeError(f"{who}: the function must return one number (a scalar); this one "
                        f"returned shape {out.shape}. For vector functions take the "
                        "Jacobian (tg.jacobian) of the gradient by hand, or sum first")
    return leaves, out, pairs


def _pair_order(leaves, pairs):
    """For a Hessian over complex arguments: ``(order, shapes)``, where
    ``order`` lists the leaves' element indices argument by argument, a
    complex argument's real and imaginary parts interleaved (its elements
    have shape ``z.shape + (2,)``: ``[..., 0]`` the real part, ``[..., 1]``
    the imaginary), and ``shapes`` gives each argument's shape in that
    layout; ``(None, leaves' shapes)`` when every argument is real."""
    if pairs is None:
        return None, [x.shape for x in leaves]
    starts = np.cumsum([0] + [int(x.size) for x in leaves])
    order, shapes = [], []
    for pr in pairs:
        if type(pr) is tuple:
            a, b = pr
            m = int(leaves[a].size)
            order.append(np.stack([starts[a] + np.arange(m), starts[b] + np.arange(m)],
                                  -1).ravel())
            shapes.append(tuple(leaves[a].shape) + (2,))
        else:
            order.append(np.arange(starts[pr], starts[pr + 1]))
            shapes.append(tuple(leaves[pr].shape))
    return np.concatenate(order).astype(np.int64), shapes


def _drive(leaves, out, p, seeds, fill=None):
    """Run the pass (in chunks of directions when large) and free the graph.

    ``seeds(k, lo, hi)``: leaf k's directions lo .. hi-1 as (hi - lo, size),
    or ``fill(k, lo, hi, block)`` writes them into the (size, hi - lo)
    tangent block."""
    if not out._requires_grad or out._tok is None:
        # independent of the inputs, or the output is an input itself: f is
        # constant or linear, and its Hessian is zero
        grads = [np.zeros(x.size) for x in leaves]
        if out._tok is None:
            for k, x in enumerate(leaves):
                if x is out:
                    grads[k][:] = 1.0
        return grads, [np.zeros((p, x.size)) for x in leaves]
    tape = current()
    if not tape.is_live(out._tok) or tape.freed[out._rec]:
        raise _freed_error()
    with tape.walking():  # no compaction under the walks (see forward.push)
        try:
            return _drive_walks(tape, leaves, out, p, seeds, fill)
        except NoSecondOrder as e:
            missing = e
    return _drive_by_create_graph(leaves, out, p, seeds, fill, missing)


def _drive_by_create_graph(leaves, out, p, seeds, fill, missing):
    """``_drive`` where the forward-over-reverse pass met an op without a
    second-order rule (a tg.Function with ``vjp_ops``, prod over zeros):
    the gradient recorded with create_graph, and per direction v the
    gradient of its dot product with v -- reverse over reverse, one pass per
    direction.  ``missing`` (the pass's error) is raised where create_graph
    cannot record through the graph either."""
    try:
        gs = bound.autograd_grad([out], list(leaves), create_graph=True, allow_unused=True)
    except NotImplementedError as e:
        raise missing from e
    grads = [np.zeros(x.size) if g is None else np.asarray(g._data, np.float64).reshape(-1)
             for x, g in zip(leaves, gs)]
    dirs = []
    for k, x in enumerate(leaves):
        if fill is not None:
            blk = np.zeros((x.size, p))
            fill(k, 0, p, blk)
            dirs.append(blk.T)
        else:
            dirs.append(np.asarray(seeds(k, 0, p), np.float64).reshape(p, x.size))
    hvs = [np.zeros((p, x.size)) for x in leaves]
    live = [(k, g.reshape(-1)) for k, g in enumerate(gs) if g is not None and g._requires_grad]
    for d in range(p if live else 0):
        dot = None
        for k, g in live:
            term = (g * dirs[k][d]).sum()
            dot = term if dot is None else dot + term
        hs = bound.autograd_grad([dot], list(leaves), retain_graph=True, allow_unused=True)
        for k, h in enumerate(hs):
            if h is not None:
                hvs[k][d] = np.asarray(h._data, np.float64).reshape(-1)
    return grads, hvs


def _drive_walks(tape, leaves, out, p, seeds, fill):
    upto = _root_span(tape, out._rec)
    recs = _recs_below(tape, leaves, upto)
    per_dir = _vector_bytes(tape, upto) * 2  # an adjoint and a tangent per direction
    chunk = int(max(1, min(p, HESSIAN_BYTES // per_dir))) if p else 1
    grads = [np.zeros(x.size) for x in leaves]
    hvs = [np.zeros((p, x.size)) for x in leaves]
    freeing = None
    for lo in range(0, max(p, 1), chunk):
        hi = min(p, lo + chunk)
        used = _hvp_pass(tape, out, leaves, recs, lambda k: seeds(k, lo, hi), hi - lo,
                         fill=fill and (lambda k, blk: fill(k, lo, hi, blk)),
                         into=[(g, hv[lo:hi]) for g, hv in zip(grads, hvs)])[1]
        freeing = used or freeing
    if freeing is not None:
        tape.after_backward(*freeing)
    return grads, hvs


def _unit_fill(starts):
    """``fill`` for the unit directions over all leaves' elements: direction
    j is 1 at element j (``starts``: where each leaf's elements begin)."""
    def fill(k, lo, hi, blk):
        blk[...] = 0.0
        j = np.arange(max(lo, starts[k]), min(hi, starts[k + 1]))
        blk[j - starts[k], j - lo] = 1.0
    return fill


def hvp(f, primals, tangents, batched=None):
    """``(grad, hvp)``: the gradient of scalar ``f`` and its Hessian times
    ``tangents``, exactly, by forward-over-reverse.

    JAX's signature, as ``tg.jvp``: ``primals`` and ``tangents`` are tuples
    with one entry per positional argument of ``f``, each tangent of its
    primal's shape.  ``f`` is differentiated with respect to every primal
    and must return one number.  Both results are tuples with one array per
    primal (the input's shape and dtype): ``grad[i] = df/dx_i`` and
    ``hvp[i] = sum_j d2f/(dx_i dx_j) tangents[j]`` -- what
    ``jax.jvp(jax.grad(f, argnums=all), primals, tangents)`` returns.

    A batch of p directions goes through one pass together: give every
    tangent the shape ``(p,) + primal.shape`` and each ``hvp[i]`` has shape
    ``(p,) + primal.shape`` (``batched`` as in ``tg.jvp``).

    A complex primal z = x + iy takes a complex (or real) tangent v and is
    differentiated over its real and imaginary parts: its ``grad`` is
    ``df/dx + 1j df/dy`` (``tg.grad``'s convention) and its ``hvp`` the
    derivative of that gradient along v, both complex128.

    Ops with no second-order rule raise ``NotImplementedError`` naming the
    op (see ``tapegrad.transforms.second.passes``).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: (x ** 3).sum()
    >>> g, hv = tg.hvp(f, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    >>> g[0], hv[0]                          # 3 x^2, and 6 x * v
    (array([ 3., 12.]), array([6., 0.]))
    """
    primals, tangents, traced = FW.primals_and_tangents(f, primals, tangents, "hvp", "_hessian")
    if traced:
        return f.hvp(primals, tangents, batched=batched)
    leaves, out, pairs = _scalar_out(f, primals, tuple(range(len(primals))), "hvp")
    ts, p, batch = FW._check_tangents(leaves, FW._leaf_tangents(tangents, pairs), batched)
    flat = [t.reshape(p, -1) for t in ts]
    grads, hvs = _drive(leaves, out, p, lambda k, lo, hi: flat[k][lo:hi])
    gs, hs = [], []
    for x, g, hv in zip(leaves, grads, hvs):
        dt = x.dtype if x.dtype.kind == "f" else np.float64
        gs.append(g.reshape(x.shape).astype(dt, copy=False))
        hv = hv.reshape((p,) + x.shape).astype(dt, copy=False)
        hs.append(hv if batch else hv[0])
    if pairs is not None:  # a complex primal's two parts as d/dRe + 1j d/dIm
        gs = [_join(gs, pr) for pr in pairs]
        hs = [_join(hs, pr) for pr in pairs]
    return tuple(gs), tuple(hs)


def _join(arrays, pr):
    """The array of one primal from per-leaf arrays: a complex primal's
    ``(re, im)`` leaves give ``re + 1j im`` (complex128, built part by part so
    that an infinite part makes no NaN)."""
    if type(pr) is not tuple:
        return arrays[pr]
    re, im = arrays[pr[0]], arrays[pr[1]]
    z = np.empty(np.shape(re), np.complex128)
    z.real, z.imag = re, im
    return z


#: ``sparse="auto"``: a Hessian over fewer input elements than this is computed
#: densely unless f recorded the same graph on the previous call (finding the
#: pattern costs about as much as n directions then)
SPARSE_MIN = 128


class SparseHessian(NamedTuple):
    """A Hessian as coordinates: ``H[rows[k], cols[k]] = data[k]`` over the
    flattened inputs (all ``argnums`` inputs' elements in order), both
    triangles; every position not listed is structurally zero.

    ``colors`` is how many Hessian-vector products computed it.
    ``scipy.sparse.coo_array((h.data, (h.rows, h.cols)), shape=h.shape)``
    makes it a SciPy matrix; ``toarray()`` a dense one.
    """
    data: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    shape: tuple
    colors: int

    @classmethod
    def zero(cls, n):
        """The Hessian of a constant or linear function of n inputs."""
        e = np.zeros(0, np.int64)
        return cls(np.zeros(0), e, e, (n, n), 0)

    def toarray(self):
        H = np.zeros(self.shape, self.data.dtype)
        H[self.rows, self.cols] = self.data
        return H


class _Colouring(NamedTuple):
    """A Hessian's pattern (``rows``, ``cols``), its p colours and where each
    nonzero sits in the products of the coloured directions
    (``sparsity.recovery``)."""
    rows: np.ndarray
    cols: np.ndarray
    color: np.ndarray
    p: int
    take: np.ndarray

    def hessian(self, hv, n, coo):
        """From the products ``hv`` (p, n): dense, or a ``SparseHessian``."""
        h = SparseHessian(hv.reshape(-1)[self.take], self.rows, self.cols, (n, n), self.p)
        return h if coo else h.toarray()


def split_blocks(H, shapes, dtypes):
    """The (n, n) Hessian over several inputs' elements as a tuple of tuples
    ``H[i][j]`` of shape ``shapes[i] + shapes[j]``, in the inputs' result
    dtypes -- ``jax.hessian``'s layout."""
    shapes = [tuple(s) for s in shapes]
    starts = np.cumsum([0] + [math.prod(s) for s in shapes])
    res = []
    for i, (si, di) in enumerate(zip(shapes, dtypes)):
        row = []
        for j, (sj, dj) in enumerate(zip(shapes, dtypes)):
            blk = H[starts[i]:starts[i + 1], starts[j]:starts[j + 1]]
            row.append(blk.reshape(si + sj).astype(np.result_type(di, dj), copy=False))
        res.append(tuple(row))
    return tuple(res)


def _coloring(tape, root, recs, starts, mode, memo=None):
    """A ``_Colouring`` when the Hessian should come from coloured
    directions (``mode``: True, or "auto": when it pays), else None.

    ``memo`` (a dict an eager ``tg.hessian(f)`` keeps) remembers the answer
    for the last graph f recorded (``sparsity.signature``): a function called
    again with the same graph pays for its pattern once.  Then "auto" colours
    below ``SPARSE_MIN`` too, from the second call on, where the pattern
    would cost more than it saves if found on every call.
    """
    n = int(starts[-1])
    if mode is False or n == 0:
        return None
    if mode == "auto_traced":  # a trace finds its pattern once: worth it from 8 on
        if n < 8:
            return None
        mode, memo, small = "auto", None, False
    else:
        small = mode == "auto" and n < SPARSE_MIN
    sig = None
    if memo is not None:
        sig = SP.signature(tape, root, recs, starts)
        if sig is not None and memo.get("sig") == sig and (mode, "found") in memo:
            return memo[(mode, "found")]
        if small and memo.get("sig") != sig:
            memo.clear()
            memo["sig"] = sig  # seen once: dense now, the pattern if it comes again
            return None
    elif small:
        return None
    found = None
    try:
        # "auto" gives up on patterns that hold over a quarter of H
        rows, cols = SP.pattern(tape, root, recs, starts,
                                limit=n * n // 8 if mode == "auto" else None)
        color, p = SP.colors(rows, cols, n)
        if mode is True or 2 * p <= n:
            found = _Colouring(rows, cols, color, p, SP.recovery(rows, cols, color, p, n))
    except SP.TooDense:
        pass
    if memo is not None and sig is not None:
        if memo.get("sig") != sig:
            memo.clear()
            memo["sig"] = sig
        memo[(mode, "found")] = found
    return found


def _check_sparse(sparse, who):
    if sparse not in (True, False, "auto"):
        raise ValueError(f"{who}: sparse must be True, False or 'auto', not {sparse!r}")


def _leaf_recs(leaves, out):
    """The leaves' records below out's span, or None when no pass is needed
    (f is constant or its output is an input; ``_drive`` handles those) or
    possible (a freed graph: ``_drive`` raises)."""
    if not out._requires_grad or out._tok is None:
        return None
    tape = current()
    if not tape.is_live(out._tok) or tape.freed[out._rec]:
        return None
    return _recs_below(tape, leaves, _root_span(tape, out._rec))


def _recs_below(tape, leaves, upto):
    """Each leaf's record, None for one recorded after ``upto`` (it cannot
    reach the root) or in another epoch."""
    return [x._lrec if x._ltok is tape.lkey and x._lrec < upto else None for x in leaves]


def _hessian_flat(f, args, nums, sparse, who, memo=None):
    """Record f and return ``(layout, H)``: H an (n, n) array over all the
    arguments' elements, or a ``SparseHessian`` when ``sparse`` is "coo";
    ``layout`` is per argument ``(shape, dtype)`` of its elements, a complex
    argument's ``z.shape + (2,)`` float64 (``_pair_order``); ``memo`` as for
    ``_coloring``."""
    leaves, out, pairs = _scalar_out(f, args, nums, who)
    order, shapes = _pair_order(leaves, pairs)
    layout = [(s, x.dtype) for s, x in zip(shapes, leaves)] if order is None else \
        [(s, np.float64) for s in shapes]
    H = _hessian_leaves(leaves, out, sparse, memo)
    if order is not None:
        if isinstance(H, SparseHessian):
            rows, cols = _renumber(order, H.rows, H.cols)
            k = np.lexsort((cols, rows))
            H = H._replace(data=H.data[k], rows=rows[k], cols=cols[k])
        else:
            H = H[np.ix_(order, order)]
    return layout, H


def _renumber(order, rows, cols):
    """Leaf-element coordinates ``(rows, cols)`` in the arguments' layout
    (``_pair_order``'s ``order``)."""
    at = np.empty(order.size, np.int64)
    at[order] = np.arange(order.size)
    return at[rows], at[cols]


def _hessian_leaves(leaves, out, sparse, memo):
    """``_hessian_flat`` over the leaves' elements."""
    n, starts, unit = FW.unit_directions(leaves)
    recs = _leaf_recs(leaves, out)
    coo = sparse == "coo"
    found = None if recs is None else _coloring(current(), out._rec, recs, starts,
                                                True if coo else sparse, memo)
    if (coo and found is None) or (found is not None and found.p == 0):
        # constant or linear f: nothing to compute (the graph goes with f's tensors)
        return SparseHessian.zero(n) if coo else np.zeros((n, n))
    if found is None:
        _, hvs = _drive(leaves, out, n, unit, fill=_unit_fill(starts))
        # hvs[i][k] = H e_k restricted to input i: column k of H's rows for i
        return np.concatenate(hvs, axis=1).T if n else np.zeros((0, 0))
    S = SP.seeds(found.color, found.p)
    _, hvs = _drive(leaves, out, found.p, lambda k, lo, hi: S[lo:hi, starts[k]:starts[k + 1]])
    return found.hessian(np.concatenate(hvs, axis=1), n, coo)


def hessian(f, argnums=0, *, sparse="auto"):
    """The Hessian of scalar ``f``, shape ``in.shape + in.shape``, as a function.

    Exact, by forward-over-reverse on the tape: the unit directions of the
    inputs at ``argnums`` go through one forward tangent sweep and one
    reverse sweep with n + 1 adjoints per record (in chunks of directions
    when they would take more than ``tapegrad.transforms.second.passes.HESSIAN_BYTES``).  With
    a tuple ``argnums`` the result is a tuple of tuples, ``H[i][j]`` of shape
    ``in_i.shape + in_j.shape`` (as ``jax.hessian``).  Results have the
    inputs' dtypes.  ``f`` must return one number.  A complex argument z
    counts as the real array ``np.stack([z.real, z.imag], -1)``: its blocks
    have shape ``z.shape + (2,)`` on its side, float64.

    ``sparse``: with True, the Hessian's structural sparsity pattern is found
    on the recorded graph and the columns that share no row are pushed
    through as one direction (``tapegrad.transforms.sparsity``) -- a banded Hessian
    of any size takes a handful of directions instead of n.  The function
    keeps its colouring while f records the same graph (per thread), so
    the pattern is found once.  "auto" (the default) colours from
    ``SPARSE_MIN`` input elements on, and below that from the second call
    that records the same graph, when it needs at most half as many
    directions; False always takes all n.  The result is the same dense
    array either way; ``tg.sparse_hessian`` returns only the nonzeros.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.hessian(lambda x: (x[0] ** 2) * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    """
    _check_sparse(sparse, "hessian")
    memo = threading.local()  # tapes are per thread, and so is the graph f recorded

    def hessian_f(*args, **kwargs):
        single, nums = _argnums(argnums, len(args), "hessian")
        if kwargs:  # passed to f, not differentiated
            return hessian(lambda *xs: f(*xs, **kwargs), argnums, sparse=sparse)(*args)
        if hasattr(f, "_hessian") and not _connected(args):
            inputs = _trace_inputs(args, nums)
            if inputs is not None:  # a traced function at plain arrays: see hvp
                H, shapes, dtypes = f._hessian(args, False)
                rows = split_blocks(H, shapes, dtypes)
                at = [inputs.index(n) for n in nums]
                res = tuple(tuple(rows[i][j] for j in at) for i in at)
                return res[0][0] if single else res
        layout, H = _hessian_flat(f, args, nums, sparse, "hessian", memo.__dict__)
        res = split_blocks(H, [s for s, _ in layout], [d for _, d in layout])
        return res[0][0] if single else res
    hessian_f.__name__ = f"hessian({getattr(f, '__name__', 'f')})"
    return hessian_f


def sparse_hessian(f, argnums=0):
    """The Hessian of scalar ``f`` as its nonzeros, a :class:`SparseHessian`,
    as a function -- for Hessians too large to hold densely.

    The structural pattern found on the recorded graph gives the positions
    (a superset of the nonzeros at every point: a branch not taken still
    counts), a colouring of its columns the directions, and one
    forward-over-reverse pass with that many directions the values
    (``tapegrad.transforms.sparsity``).  Over several ``argnums`` the inputs' elements
    are numbered one after the other, in order.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
    >>> h = tg.sparse_hessian(f)(np.ones(10_000))    # Rosenbrock: tridiagonal
    >>> h.shape, h.rows.size, h.colors
    ((10000, 10000), 29998, 3)
    >>> h.data[:3]                                   # H[0, 0], H[0, 1], H[1, 0]
    array([ 802., -400., -400.])
    """
    memo = threading.local()

    def sparse_hessian_f(*args):
        _, nums = _argnums(argnums, len(args), "sparse_hessian")
        return _hessian_flat(f, args, nums, "coo", "sparse_hessian", memo.__dict__)[1]
    sparse_hessian_f.__name__ = f"sparse_hessian({getattr(f, '__name__', 'f')})"
    return sparse_hessian_f


def hessian_sparsity(f, argnums=0):
    """Where the Hessian of scalar ``f`` can be nonzero, as a function
    returning sorted ``(rows, cols)`` over the flattened inputs (both
    triangles): the structural pattern of ``tapegrad.transforms.sparsity``, found from
    the recorded graph without computing any derivative -- what an
    optimiser's sparse Hessian structure wants.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> rows, cols = tg.hessian_sparsity(lambda x: (x[:-1] * x[1:]).sum())(np.ones(3))
    >>> rows, cols                  # x0 x1 + x1 x2: only the off-diagonal pairs
    (array([0, 1, 1, 2]), array([1, 0, 2, 1]))
    """
    def hessian_sparsity_f(*args):
        _, nums = _argnums(argnums, len(args), "hessian_sparsity")
        leaves, out, pairs = _scalar_out(f, args, nums, "hessian_sparsity")
        n, starts, _ = FW.unit_directions(leaves)
        recs = _leaf_recs(leaves, out)
        if recs is None:
            e = np.zeros(0, np.int64)
            return e, e
        rows, cols = SP.pattern(current(), out._rec, recs, starts)
        order, _ = _pair_order(leaves, pairs)
        if order is None:
            return rows, cols
        rows, cols = _renumber(order, rows, cols)
        k = np.lexsort((cols, rows))
        return rows[k], cols[k]
    hessian_sparsity_f.__name__ = f"hessian_sparsity({getattr(f, '__name__', 'f')})"
    return hessian_sparsity_f


def replay_hessian(rep, coo=False):
    """The Hessian of a replayed trace with one output element, as an (n, n)
    float64 array over all its inputs' elements (a ``SparseHessian`` with
    ``coo``), after ``rep.forward(xs, full=True)``
    (``traced_function.TracedFunction.hessian``).

    The pass's layout, arenas and directions depend only on the records, so
    the trace keeps them (an :class:`HvpPlan` with arenas of its own) and each
    call only replays the values and runs the two sweeps.  The directions are
    the coloured ones of ``tapegrad.transforms.sparsity`` when they are at most half of
    the n unit directions (the pattern is found once, with the plan), else
    the unit directions.
    """
    sizes = [math.prod(s) for s in rep.in_shapes]
    n = sum(sizes)
    plan = rep.__dict__.get("_hessian_plan")
    if plan is None or plan[0] is not rep or (coo and plan[1] is not None and plan[2] is None):
        # a clone inherits its original's; a dense plan gets its colouring
        # when the nonzeros are asked for
        plan = rep._hessian_plan = (rep,) + _replay_plan(rep, sizes, n, coo)
    _, hp, found = plan
    if hp is None:  # constant, or nothing can be nonzero: no pass
        return SparseHessian.zero(n) if coo else np.zeros((n, n))
    into = [(np.zeros(m), np.zeros((hp.p, m))) for m in sizes]
    hp.run(into)
    hv = np.concatenate([h for _, h in into], axis=1)
    if found is None:  # unit directions
        return hv.T
    return found.hessian(hv, n, coo)


def _replay_plan(rep, sizes, n, coo):
    """``(HvpPlan or None, _Colouring or None)`` for a trace."""
    if rep.root is None or not n:
        return None, None
    starts = np.cumsum([0] + sizes)
    recs = list(rep.leaf_rec)
    found = _coloring(rep, rep.root, recs, starts, True if coo else "auto_traced")
    if found is None:
        plan = HvpPlan(rep, rep.root, recs, n, own=True)
        fill = _unit_fill(starts)
        plan.seed(fill=lambda k, blk: fill(k, 0, n, blk))
        return plan, None
    if found.p == 0:  # nothing can be nonzero: no pass
        return None, found
    S = SP.seeds(found.color, found.p)
    plan = HvpPlan(rep, rep.root, recs, found.p, own=True)
    plan.seed(seeds=lambda k: S[:, starts[k]:starts[k + 1]])
    return plan, found
