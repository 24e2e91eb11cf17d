"""Second derivatives: ``hvp`` and ``hessian`` by forward-over-reverse on the tape.

The function is recorded once.  A forward tangent sweep (``forward.py``)
gives every record's tangents ``xdot`` for p directions.  Then one reverse
sweep carries p + 1 adjoints per record: vector 0 is the ordinary adjoint
``ybar`` (seed 1), vectors 1..p its tangents ``ybar_dot`` (seed 0).  The
tangent-linear of an op's VJP ``xbar += phi'(x)^T ybar`` is

    xbar_dot += phi'(x)^T ybar_dot + (phi''(x)[xdot])^T ybar.

The compiled sweep ``kernels/second.py: sweep_block`` applies both terms for
all p + 1 vectors at the common records (elementwise ops, ops with a
constant, sums, means, views, indexing), with no Python per record.  At any
other record it returns; then the record's ``ybar`` is complete (all its
consumers come later on the tape), the second-order term is added here with
NumPy for all p directions at once (the rules below: nonlinear reductions,
cumprod, matmul, einsum and the linear-algebra ops), the compiled vector
sweep (``kernels/vector.py``) applies the record's first-order VJP to all
p + 1 vectors, and ``sweep_block`` resumes.  The second term vanishes for the
(piecewise) linear ops -- concatenation, cumsum, max/min, where -- so those
need the first step only.

Ops without a second-order rule (the LAPACK decompositions, ``tg.Function``,
``tg.elementwise`` user ops) raise ``NotImplementedError`` naming the op,
when the function's Hessian actually reaches them.
"""
import numpy as np

from . import forward as FW
from .autograd import _freed_error
from .functional import _Slabs, _argnums, _call, _root_span, _run
from .kernels import codes as C
from .kernels._views import SMALL
from .kernels.second import hvp_layout, sweep_block
from .ops import linalg as L
from .ops.registry import REGISTRY
from .tape import current

#: memory one batched pass may use for the tangents and adjoints of all its
#: directions; a larger Hessian is computed in chunks of directions
HESSIAN_BYTES = 256 * 2**20


# -- which records need a second-order step ----------------------------------------------
_LINEAR, _RULE, _MISSING = 0, 1, 2


def _classify(code):
    """What Python must add at a record ``sweep_block`` hands back: nothing
    (_LINEAR: the compiled first-order VJP is the whole rule; elementwise
    records get here only when empty), a NumPy rule, or an error."""
    kind, sub = code >> C.SHIFT, code & C.MASK
    if kind in (C.K_NONE, C.K_UNARY, C.K_SCALAR, C.K_NARY, C.K_GATHER, C.K_CONCAT):
        return _LINEAR
    if kind == C.K_REDUCE:
        return _LINEAR if sub in (C.SUM, C.MEAN, C.MAX, C.MIN) else _RULE
    if kind == C.K_SCAN:
        return _LINEAR if sub == C.CUMSUM else _RULE
    if kind == C.K_HOST:
        return _RULE if code in HOST_RULES else _MISSING
    return _MISSING  # K_USER: a user derivative has no second derivative


# -- the pass ----------------------------------------------------------------------------
class _Pass:
    """One forward-over-reverse pass for p directions over a recorded graph."""

    def __init__(self, tape, upto, tan, adj):
        self.tape, self.tan, self.adj, self.p = tape, tan, adj, tan.p
        # the arenas' addresses, read once: ``ctypes.data`` costs microseconds
        self.bases = ((adj.A, adj.A.ctypes.data), (adj.L, adj.L.ctypes.data))

    def val(self, r):
        """Record r's recorded value, flat float64, or None if not kept."""
        tape = self.tape
        n = int(tape.size[r])
        if n > SMALL and tape.rix[r] < 0:
            # not kept (no VJP reads it); the rules read only what is kept
            return None
        return self.adj.value(tape, r, (n,))

    def dot(self, r):
        """Record r's tangents as (p, size), or None where r does not depend
        on the inputs (its tangents are zero)."""
        tan = self.tan
        if r >= tan.upto or not tan.reached[r]:
            return None
        return tan.block(r).T

    def block(self, r):
        """Record r's p + 1 adjoints as a (p + 1, size) view; a plain slice
        where they are contiguous (as_strided costs more than most steps)."""
        adj = self.adj
        n = int(adj.size[r])
        if int(adj.stride[r]) != 8 * n:  # an output of a multi-output op
            return adj.block(r)
        base, addr = self.bases[1 if adj.leaf[r] else 0]
        o = (int(adj.aptr[r]) - addr) >> 3
        return base[o:o + (self.p + 1) * n].reshape(self.p + 1, n)

    def ybar(self, r):
        return self.block(r)[0]

    def add(self, q, t):
        """Add ``t`` (p, size of q) to q's tangent adjoints (vectors 1..p)."""
        if q >= self.tan.upto or not self.tan.reached[q]:
            return  # q does not depend on the inputs: nobody reads its adjoint
        view = self.block(q)
        if self.adj.reached[q]:
            view[1:] += t.reshape(view[1:].shape)
        else:
            view[0] = 0.0
            view[1:] = t.reshape(view[1:].shape)
            self.adj.reached[q] = True

    def put(self, q, t):
        """Add ``t`` (p + 1, size of q) to all of q's adjoints; True."""
        view = self.block(q)
        if self.adj.reached[q]:
            view += t
        else:
            view[...] = t
            self.adj.reached[q] = True
        return True

    def parents(self, r):
        tape = self.tape
        return [int(q) for q in tape.args[tape.arg0[r]:tape.arg0[r + 1]]]


def _reduce_map(tape, r, n):
    """The output element of each of the n input elements (``ip`` as for
    reductions: ``[nd, in_shape, out_strides]``, nothing for a full one)."""
    b = int(tape.ip0[r])
    nd = int(tape.ip[b]) if b else 0
    if nd == 0:
        return np.zeros(n, np.int64)
    shape = tuple(int(s) for s in tape.ip[b + 1:b + 1 + nd])
    st = tape.ip[b + 1 + nd:b + 1 + 2 * nd]
    return (st[:, None] * np.indices(shape).reshape(nd, -1)).sum(axis=0)


def _reduce2(P, r, sub):
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    tape = P.tape
    n, m = int(tape.size[q]), int(tape.size[r])
    om = _reduce_map(tape, r, n) if m > 1 or sub in (C.SOFTMAX, C.LOG_SOFTMAX) else \
        np.zeros(n, np.int64)
    g, y, yd = P.ybar(r), P.val(r), P.dot(r)  # yd: the output's tangents
    if sub == C.SOFTMAX:
        # xbar = y (g - sum(g y)); its tangent with g fixed
        rows = int(om.max()) + 1 if n else 0
        gy = np.bincount(om, g * y, rows)
        gyd = np.zeros((P.p, rows))
        np.add.at(gyd.T, om, (g * yd).T)
        P.add(q, yd * (g - gy[om]) - y * gyd[:, om])
        return
    if sub == C.LOG_SOFTMAX:
        # xbar = g - exp(y) sum(g)
        rows = int(om.max()) + 1 if n else 0
        gs = np.bincount(om, g, rows)
        P.add(q, -(np.exp(y) * gs[om]) * yd)
        return
    x = P.val(q)
    if sub == C.LOGSUMEXP:
        # xbar_i = g_j exp(x_i - y_j)
        s = np.exp(x - y[om])
        P.add(q, (g[om] * s) * (xd - yd[:, om]))
        return
    if sub == C.PROD:
        # xbar_i = g_j y_j / x_i; with no zeros its tangent is
        # g_j (ydot_j / x_i - y_j xdot_i / x_i^2)
        if np.any(x == 0.0):
            raise NotImplementedError(
                "hessian: prod over an array with zero entries has no second-order rule "
                "yet (the first-order one handles zeros)")
        P.add(q, g[om] * (yd[:, om] / x - y[om] * xd / (x * x)))
        return
    raise AssertionError(sub)


def _scan2(P, r, sub):
    # cumprod (no zeros): xbar_k = sum_{j>=k} g_j y_j / x_k; its tangent is
    # sum_{j>=k} g_j (ydot_j / x_k - y_j xdot_k / x_k^2)
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    tape = P.tape
    b = int(tape.ip0[r])
    shape = (int(tape.ip[b]), int(tape.ip[b + 1]), int(tape.ip[b + 2]))
    x = P.val(q)
    if np.any(x == 0.0):
        raise NotImplementedError(
            "hessian: cumprod over an array with zero entries has no second-order rule "
            "yet (the first-order one handles zeros)")
    g, y, yd = P.ybar(r), P.val(r), P.dot(r)

    def rcumsum(t):  # sum over j >= k along the scanned axis, p leading
        t = t.reshape((-1,) + shape)
        return np.flip(np.cumsum(np.flip(t, 2), axis=2), 2).reshape(t.shape[0], -1)

    P.add(q, rcumsum(g * yd) / x - rcumsum(g * y) * xd / (x * x))


# -- host rules ----------------------------------------------------------------------------
def _sum_rows(t, shape):
    """Sum (p,) + broadcast shape ``t`` back to (p,) + shape."""
    extra = t.ndim - 1 - len(shape)
    if extra:
        t = t.sum(axis=tuple(range(1, 1 + extra)))
    axes = tuple(i + 1 for i, s in enumerate(shape) if s == 1 and t.shape[i + 1] != 1)
    return t.sum(axis=axes, keepdims=True) if axes else t


def _matmul2(P, r):
    # y = A B: Abar_dot += ybar Bdot^T, Bbar_dot += Adot^T ybar
    qa, qb = P.parents(r)
    shape_a, shape_b = P.tape.host[r]
    ad, bd = P.dot(qa), P.dot(qb)
    p = P.p
    g = P.ybar(r)
    a1, b1 = len(shape_a) == 1, len(shape_b) == 1
    sa = (1,) + tuple(shape_a) if a1 else tuple(shape_a)
    sb = tuple(shape_b) + (1,) if b1 else tuple(shape_b)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    nb = len(batch)
    # the p directions lead; every operand's batch axes are padded to nb so
    # that they line up behind p when they broadcast
    g2 = g.reshape((1,) + batch + (sa[-2], sb[-1]))
    # with A = B the two terms land on one record and together are right
    if bd is not None:
        B2 = bd.reshape((p,) + (1,) * (nb + 2 - len(sb)) + sb)
        P.add(qa, _sum_rows(g2 @ np.swapaxes(B2, -1, -2), sa))
    if ad is not None:
        A2 = ad.reshape((p,) + (1,) * (nb + 2 - len(sa)) + sa)
        P.add(qb, _sum_rows(np.swapaxes(A2, -1, -2) @ g2, sb))


def _T(m):
    return np.swapaxes(m, -1, -2)


def _inv2(P, r):
    # Abar = -Y^T G Y^T, Y = A^-1: its tangent with G fixed
    (qa,) = P.parents(r)
    shape_a, shape_y = P.tape.host[r]
    Yd = P.dot(r)
    if Yd is None:
        return
    Y = P.val(r).reshape(shape_y)
    G = P.ybar(r).reshape(shape_y)
    Yd = Yd.reshape((P.p,) + tuple(shape_y))
    P.add(qa, -(_T(Yd) @ G @ _T(Y) + _T(Y) @ G @ _T(Yd)))


def _det_like2(P, r, det):
    # det: Abar = g d A^-T; log|det|: Abar = g A^-T; d(A^-1) = -A^-1 Adot A^-1
    (qa,) = P.parents(r)
    shape_a, shape_d = P.tape.host[r]
    Ad = P.dot(qa)
    if Ad is None:
        return
    A = P.val(qa).reshape(shape_a)
    Ai = np.linalg.inv(A)
    g = P.ybar(r).reshape(shape_d)[..., None, None]
    dAiT = -_T(Ai @ Ad.reshape((P.p,) + tuple(shape_a)) @ Ai)
    if det:
        d = P.val(r).reshape(shape_d)[..., None, None]
        dd = P.dot(r).reshape((P.p,) + tuple(shape_d))[..., None, None]
        P.add(qa, g * (dd * _T(Ai) + d * dAiT))
    else:
        P.add(qa, g * dAiT)


def _solve2(P, r):
    # X = A^-1 B: Bbar = A^-T G, Abar = -Bbar X^T; their tangents with G
    # fixed: dBbar = -A^-T Adot^T Bbar, dAbar = -dBbar X^T - Bbar Xdot^T
    qa, qb = P.parents(r)
    shape_a, shape_b, shape_x = P.tape.host[r]
    Ad, Xd = P.dot(qa), P.dot(r)
    if Xd is None:
        return
    p = P.p
    vector = len(shape_b) == 1
    A = P.val(qa).reshape(shape_a)
    X = P.val(r).reshape(shape_x)
    G = P.ybar(r).reshape(shape_x)
    Xm, Gm = (X[..., None], G[..., None]) if vector else (X, G)
    Xdm = Xd.reshape((p,) + tuple(shape_x))
    Xdm = Xdm[..., None] if vector else Xdm
    GB = np.linalg.solve(_T(A), Gm)  # Bbar
    dA = -(GB[None] @ _T(Xdm))
    if Ad is not None:
        dGB = -np.linalg.solve(_T(A)[None], _T(Ad.reshape((p,) + tuple(shape_a))) @ GB[None])
        dA = dA - dGB @ _T(Xm)[None]
        P.add(qb, _sum_rows(dGB[..., 0] if vector else dGB, tuple(shape_b)))
    P.add(qa, _sum_rows(dA, tuple(shape_a)))


class _Probe:
    """A stand-in for the adjoints a host VJP writes: it reads one record's
    value as a given array, the output's adjoint as ``ybar``, and collects
    what the VJP adds to each record."""

    def __init__(self, P, r, swap, with_value):
        self.P, self.r, self.swap, self.with_value = P, r, swap, with_value
        self.got = {}

    def value(self, tape, q, shape):
        if q == self.swap:
            return self.with_value.reshape(shape)
        return self.P.adj.value(tape, q, shape)

    def __getitem__(self, q):
        assert q == self.r
        return self.P.ybar(q)

    def add(self, q, g):
        g = np.asarray(g, np.float64).reshape(-1)
        self.got[q] = self.got.get(q, 0.0) + g


def _einsum2(P, r):
    # multilinear: the term for operand i is its VJP with operand j's value
    # replaced by j's tangent, for every j != i, one direction at a time
    parents = P.parents(r)
    if len(set(parents)) != len(parents):
        raise NotImplementedError(
            "hessian: einsum with one tensor as several operands has no second-order "
            "rule yet")
    vjp = REGISTRY[int(P.tape.op[r])].host_vjp
    for j in parents:
        dj = P.dot(j)
        if dj is None:
            continue
        acc = {}
        for k in range(P.p):
            probe = _Probe(P, r, j, dj[k])
            vjp(P.tape, probe, r)
            for q, t in probe.got.items():
                if q != j:
                    acc.setdefault(q, np.zeros((P.p, t.size)))[k] += t
        for q, t in acc.items():
            P.add(q, t)


#: op code -> second-order rule(pass, r) for host ops
HOST_RULES = {L._MATMUL: _matmul2, L._EINSUM: _einsum2, L._INV: _inv2, L._SOLVE: _solve2,
              L._DET: lambda P, r: _det_like2(P, r, True),
              L._LOGABSDET: lambda P, r: _det_like2(P, r, False)}

_FAMILY = {C.K_REDUCE: _reduce2, C.K_SCAN: _scan2}


def _second_order(P, r):
    code = int(P.tape.op[r])
    kind = code >> C.SHIFT
    if kind == C.K_HOST:
        HOST_RULES[code](P, r)
    else:
        _FAMILY[kind](P, r, code & C.MASK)


_CLASS = np.array([_classify(c) for c in range(16 << C.SHIFT)], np.int8)


def _missing_error(code):
    name = REGISTRY[code].name if code in REGISTRY else str(code)
    return NotImplementedError(
        f"hessian/hvp: the op {name} has no second-order (forward-over-reverse) rule; "
        "second derivatives cover elementwise ops, reductions (sum, mean, max, min, prod, "
        "logsumexp, softmax, log_softmax), shape and indexing ops, cumsum, cumprod, matmul, "
        "einsum, linalg.inv, solve, det and slogdet")


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
        self.tape, self.root, self.recs, self.p = tape, root, list(recs), p
        self.upto = upto = _root_span(tape, root)
        live = [r for r in self.recs if r is not None]
        self.live = bool(live)
        if not live:
            return
        tape.arg0[tape.n] = tape.na  # closes the last record's parents
        (voff, treached, toff, total, zsize, aoff, stride, leaf, inner, outer) = hvp_layout(
            tape.op, tape.size, tape.arg0, tape.args, tape.rix, upto, SMALL,
            np.array(live, np.int64), p + 1)
        self.tan = FW._Tangents.laid_out(tape, upto, voff, treached, toff, total, min(live),
                                         zsize)
        self.tan.alloc(p, own=own)
        self.adj = adj = _Slabs.laid_out(tape, upto, p + 1, voff, aoff, stride, leaf, inner,
                                         outer, own=own)
        # the vector sweep moves adjoint addresses around (pass-through VJPs
        # hand theirs on): a rerun starts from these
        self.aptr0 = adj.aptr.copy() if own else None
        self.root_at = ((int(adj.aptr[root]) - adj.A.ctypes.data) >> 3
                        if int(adj.stride[root]) == 8 else None)

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
        if self.root_at is not None:  # one element, p + 1 vectors in a row (arena A: no leaf)
            o = self.root_at
            adj.A[o:o + p + 1] = 0.0
            adj.A[o] = 1.0
        else:  # a slot of a multi-output op: its vectors are interleaved with the others'
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
                raise _missing_error(int(tape.op[s]))
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
    leaves, out = _call(f, args, nums, who)
    if out.size != 1:
        raise TypeError(f"{who}: the function must return one number (a scalar); this one "
                        f"returned shape {out.shape}. For vector functions take the "
                        "Jacobian (tg.jacobian) of the gradient by hand, or sum first")
    return leaves, out


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
    if out._tok is not tape.tok or tape.freed[out._rec]:
        raise _freed_error()
    upto = _root_span(tape, out._rec)
    recs = [x._lrec if x._ltok is tape.lkey and x._lrec < upto else None for x in leaves]
    per_dir = max(int(tape.size[:upto].sum()), 1) * 8 * 2
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

    Ops with no second-order rule raise ``NotImplementedError`` naming the
    op (see ``tapegrad.second``).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: (x ** 3).sum()
    >>> g, hv = tg.hvp(f, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    >>> g[0], hv[0]                          # 3 x^2, and 6 x * v
    (array([ 3., 12.]), array([6., 0.]))
    """
    primals = FW._as_tuple(primals, "primals")
    tangents = FW._as_tuple(tangents, "tangents")
    if len(primals) != len(tangents):
        raise ValueError(f"hvp: {len(primals)} primals but {len(tangents)} tangents; give "
                         "one tangent per primal")
    leaves, out = _scalar_out(f, primals, tuple(range(len(primals))), "hvp")
    ts, p, batch = FW._check_tangents(leaves, tangents, batched)
    flat = [t.reshape(p, -1) for t in ts]
    grads, hvs = _drive(leaves, out, p, lambda k, lo, hi: flat[k][lo:hi])
    gs, hs = [], []
    for x, g, hv in zip(leaves, grads, hvs):
        dt = x.dtype if x.dtype.kind == "f" else np.float64
        gs.append(g.reshape(x.shape).astype(dt, copy=False))
        hv = hv.reshape((p,) + x.shape).astype(dt, copy=False)
        hs.append(hv if batch else hv[0])
    return tuple(gs), tuple(hs)


def hessian(f, argnums=0):
    """The Hessian of scalar ``f``, shape ``in.shape + in.shape``, as a function.

    Exact, by forward-over-reverse on the tape: all n unit directions of the
    inputs at ``argnums`` go through one forward tangent sweep and one
    reverse sweep with n + 1 adjoints per record (in chunks of directions
    when they would take more than ``tapegrad.second.HESSIAN_BYTES``).  With
    a tuple ``argnums`` the result is a tuple of tuples, ``H[i][j]`` of shape
    ``in_i.shape + in_j.shape`` (as ``jax.hessian``).  Results have the
    inputs' dtypes.  ``f`` must return one number.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.hessian(lambda x: (x[0] ** 2) * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    """
    def hessian_f(*args):
        single, nums = _argnums(argnums, len(args), "hessian")
        leaves, out = _scalar_out(f, args, nums, "hessian")
        n, starts, unit = FW.unit_directions(leaves)
        _, hvs = _drive(leaves, out, n, unit, fill=_unit_fill(starts))
        # hvs[i][k] = H e_k restricted to input i: column k of H's rows for i
        H = np.concatenate(hvs, axis=1).T if n else np.zeros((0, 0))  # (n, n)
        res = []
        for i, xi in enumerate(leaves):
            row = []
            for j, xj in enumerate(leaves):
                blk = H[starts[i]:starts[i + 1], starts[j]:starts[j + 1]]
                dt = np.result_type(xi.dtype, xj.dtype)
                row.append(blk.reshape(xi.shape + xj.shape).astype(dt, copy=False))
            res.append(tuple(row))
        return res[0][0] if single else tuple(res)
    hessian_f.__name__ = f"hessian({getattr(f, '__name__', 'f')})"
    return hessian_f
