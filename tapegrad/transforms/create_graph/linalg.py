"""The ``create_graph=True`` VJPs of the host ops, as recorded ops: matmul,
einsum, inv, solve, det and slogdet, the decompositions (cholesky, eigh,
qr, svd, pinv, lstsq) and ``tg.Function``'s ``vjp_ops`` (``HOST``, by op
code).

The decompositions are their compiled VJPs (``ops/matrix.py``, ``ops/decompositions.py``) written on
tensors: the factors are the op's own output records, so a further order
differentiates through the same formula again.  Their limits are the first
order's: symmetric gradients for the records of cholesky, eigh and
hermitian svd / pinv (whose input is the symmetric matrix of the triangle
NumPy reads, recorded before them), constant rank for pinv and lstsq.
"""
import numpy as np

from .index import _tg
from ...ops.function import _FUNCTION
from ...kernels import codes as C
from ...kernels._views import SMALL
from ...ops import matrix as L
from ...core.tensor import _result


# host ops: matmul, einsum, inv, solve, det, slogdet
def _T(m):
    return _tg().swapaxes(m, -1, -2)


def _sum_to(t, shape):
    """Sum a broadcast ``t`` back to ``shape``."""
    tg = _tg()
    extra = t.ndim - len(shape)
    if extra:
        t = tg.sum(t, axis=tuple(range(extra)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and t.shape[i] != 1)
    if axes:
        t = tg.sum(t, axis=axes, keepdims=True)
    return t


def _flat(t):
    return _tg().reshape(t, (-1,))


def _matmul(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    shape_a, shape_b = W.tape.host[r]
    a1, b1 = len(shape_a) == 1, len(shape_b) == 1
    sa = (1,) + tuple(shape_a) if a1 else tuple(shape_a)
    sb = tuple(shape_b) + (1,) if b1 else tuple(shape_b)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    G = tg.reshape(u, batch + (sa[-2], sb[-1]))
    if W.dep[qa]:
        B = tg.reshape(W.x(qb), sb)
        W.add(qa, _flat(_sum_to(tg.matmul(G, _T(B)), sa)))
    if W.dep[qb]:
        A = tg.reshape(W.x(qa), sa)
        W.add(qb, _flat(_sum_to(tg.matmul(_T(A), G), sb)))


def _inv(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_y = W.tape.host[r]
    Y = tg.reshape(W.x(r), shape_y)
    G = tg.reshape(u, shape_y)
    W.add(qa, _flat(-tg.matmul(tg.matmul(_T(Y), G), _T(Y))))


def _solve(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    shape_a, shape_b, shape_x = W.tape.host[r]
    vector = len(shape_b) == 1
    A = tg.reshape(W.x(qa), shape_a)
    X = tg.reshape(W.x(r), shape_x)
    G = tg.reshape(u, shape_x)
    Gm = tg.expand_dims(G, -1) if vector else G
    GB = tg.linalg.solve(_T(A), Gm)
    if W.dep[qb]:
        W.add(qb, _flat(_sum_to(GB[..., 0] if vector else GB, tuple(shape_b))))
    if W.dep[qa]:
        Xm = tg.expand_dims(X, -1) if vector else X
        W.add(qa, _flat(_sum_to(-tg.matmul(GB, _T(Xm)), tuple(shape_a))))


def _det_like(W, r, u, det):
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_d = W.tape.host[r]
    A = tg.reshape(W.x(qa), shape_a)
    g = tg.reshape(u, tuple(shape_d) + (1, 1))
    AiT = _T(tg.linalg.inv(A))
    if det:
        d = tg.reshape(W.x(r), tuple(shape_d) + (1, 1))
        W.add(qa, _flat(g * d * AiT))
    else:
        W.add(qa, _flat(g * AiT))


def _einsum(W, r, u):
    tg = _tg()
    tape = W.tape
    ins, out, *shapes, out_shape = tape.host[r]
    parents = W.parents(r)
    values = [tg.reshape(W.x(p), s) for p, s in zip(parents, shapes)]
    g = tg.reshape(u, out_shape)
    size = {}
    for s, shp in zip(ins, shapes):
        for c, n in zip(s, shp):
            if size.get(c, 1) == 1:
                size[c] = n
    for k, p in enumerate(parents):
        if not W.dep[p]:
            continue
        others = [ins[j] for j in range(len(ins)) if j != k]
        present = set(out).union(*others)
        # an index repeated within the operand ("ii", "lli") reads its
        # diagonal: the gradient of the diagonal first, over the distinct
        # indices, then laid on the diagonal (below)
        uniq = "".join(dict.fromkeys(ins[k]))
        kept = "".join(c for c in uniq if c in present)
        spec = ",".join([out] + others) + "->" + kept
        gk = tg.einsum(spec, g, *[values[j] for j in range(len(ins)) if j != k])
        own = dict(zip(ins[k], shapes[k]))
        for axis, c in enumerate(uniq):
            if c not in present:
                gk = tg.expand_dims(gk, axis)
        gk = tg.broadcast_to(gk, tuple(own[c] if c not in present else size[c]
                                       for c in uniq))
        stretched = tuple(i for i, c in enumerate(uniq) if own[c] == 1 and gk.shape[i] != 1)
        if stretched:
            gk = tg.sum(gk, axis=stretched, keepdims=True)
        if len(uniq) != len(ins[k]):
            gk = _on_diagonal(tg, gk, uniq, ins[k], own, "".join(ins) + out)
        W.add(p, _flat(tg.broadcast_to(gk, shapes[k])))


def _on_diagonal(tg, gk, uniq, spec, own, used):
    """``gk`` (indices ``uniq``) laid on the diagonal of an operand whose
    subscripts ``spec`` repeat some of them: each repeat gets a fresh index
    tied to the first by an identity matrix, a constant of the graph."""
    fresh = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                 if c not in used)
    seen, full, eyes, ties = set(), "", [], []
    for c in spec:
        if c in seen:
            f = next(fresh)
            full += f
            ties.append(c + f)
            eyes.append(np.eye(own[c]))
        else:
            seen.add(c)
            full += c
    return tg.einsum(",".join([uniq] + ties) + "->" + full, gk, *eyes)


# the decompositions: each VJP of ops/matrix.py, on tensors of the graph.  The
# factors are the op's output records (their values kept with the host
# record), so differentiating a formula again runs through the same VJP.
def _slot(W, r, s, shape):
    """The adjoint of output slot s of multi-output record r, shaped, or None."""
    a = W.adj.get(r + 1 + s)
    return None if a is None else _tg().reshape(a, shape)


def _known(W, q, value):
    """Record q as a tensor of the graph whose value (not necessarily kept on
    the tape: the host record holds it) is ``value``."""
    value = np.asarray(value, np.float64)
    if int(W.tape.op[q]) == C.code(C.K_NONE, C.CONST):
        return value
    h = W.handles.get(q)
    if h is None:  # flat, as every handle (the rules of other records read it)
        h = W.handles[q] = _result(W.tape, q, value.reshape(-1))
    return _tg().reshape(h, value.shape)


def _leading(W, q, shape, part, index):
    """``x[index]`` of record q (of ``shape``) as a tensor of the graph, where
    only that part's value, ``part``, may be known: the rest is filled with
    zeros in a tensor of its own, never cached as the record's handle, so no
    other formula reads the filler."""
    tape = W.tape
    n = int(np.prod(shape))
    if n <= SMALL or tape.rix[q] >= 0 or q in W.handles \
            or int(tape.op[q]) == C.code(C.K_NONE, C.CONST):
        t = W.x(q)
    else:
        full = np.zeros(shape)
        full[index] = part
        t = _result(tape, q, full)
    tg = _tg()
    return tg.reshape(t, shape)[index]


def _eye(n):
    return np.eye(n)


def _off(n):
    return 1.0 - np.eye(n)


def _gaps(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it (distinct w: check)."""
    tg = _tg()
    n = w.shape[-1]
    diff = tg.expand_dims(w, -2) - tg.expand_dims(w, -1)
    return _off(n) / (diff + _eye(n))


def _sym_t(m):
    return 0.5 * (m + _T(m))


def _cholesky(W, r, u):
    # gA = sym(L^-T Phi(L^T gL) L^-1), Phi: the lower triangle, half diagonal
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_l = W.tape.host[r]
    n = shape_l[-1]
    Lm = tg.reshape(W.x(r), shape_l)
    G = tg.reshape(u, shape_l)
    P = tg.matmul(_T(Lm), G) * (np.tril(np.ones((n, n))) - 0.5 * _eye(n))
    Li = tg.linalg.inv(Lm)
    W.add(qa, _flat(_sym_t(tg.matmul(tg.matmul(_T(Li), P), Li))))


def _eigh(W, r, u):
    # gA = sym(V (diag(gw) + F o (V^T gV)) V^T)
    tg = _tg()
    (qa,) = W.parents(r)
    _shape_a, (w, V) = W.tape.host[r]
    n = w.shape[-1]
    gw, gV = _slot(W, r, 0, w.shape), _slot(W, r, 1, V.shape)
    Vt = _known(W, r + 2, V)
    inner = None
    if gw is not None:
        inner = tg.expand_dims(gw, -1) * _eye(n)
    if gV is not None:
        K = _gaps(_known(W, r + 1, w)) * tg.matmul(_T(Vt), gV)
        inner = K if inner is None else inner + K
    W.add(qa, _flat(_sym_t(tg.matmul(tg.matmul(Vt, inner), _T(Vt)))))


def _copyltu_t(m):
    n = m.shape[-1]
    low = m * np.tril(np.ones((n, n)), -1)
    return low + _T(low) + m * _eye(n)


def _qr_tall(Q, R, gQ, gR):
    """gA for A = QR, Q (m, n) orthonormal columns, R (n, n) invertible."""
    tg = _tg()
    M = None
    if gR is not None:
        M = tg.matmul(R, _T(gR))
    if gQ is not None:
        t = tg.matmul(_T(gQ), Q)
        M = -t if M is None else M - t
    b = tg.matmul(Q, _copyltu_t(M))
    if gQ is not None:
        b = b + gQ
    return _T(tg.linalg.solve(R, _T(b)))  # b R^-T


def _qr(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    mode, Qv, Rv, Y = W.tape.host[r]
    gQ, gR = _slot(W, r, 0, Qv.shape), _slot(W, r, 1, Rv.shape)
    Q, R = _known(W, r + 1, Qv), _known(W, r + 2, Rv)
    m, n = Qv.shape[-2], Rv.shape[-1]
    if mode == "complete" and m > n:
        if gQ is not None:  # the compiled backward, run first, raised already
            raise RuntimeError("linalg.qr: not differentiable in Q for mode='complete' "
                               f"with more rows than columns ({m} > {n})")
        W.add(qa, _flat(_qr_tall(Q[..., :n], R[..., :n, :], None, gR[..., :n, :])))
        return
    if m >= n:
        W.add(qa, _flat(_qr_tall(Q, R, gQ, gR)))
        return
    # wide: A = [X | Y] with X = Q U square and Y = Q V, so V = Q^T Y
    k = m
    shape_a = Qv.shape[:-2] + (m, n)
    U = R[..., :k]
    gU = None if gR is None else gR[..., :k]
    gV = None if gR is None else gR[..., k:]
    if gV is not None:
        Yt = _leading(W, qa, shape_a, Y, (Ellipsis, slice(m, None)))
        t = tg.matmul(Yt, _T(gV))
        gQ = t if gQ is None else gQ + t
    gX = _qr_tall(Q, U, gQ, gU)
    gY = tg.matmul(Q, gV) if gV is not None else np.zeros(Y.shape)
    W.add(qa, _flat(tg.concatenate([gX, gY], axis=-1)))


def _svd(W, r, u):
    # gA for A = U diag(s) Vh, reduced to k = min(m, n) (ops/decompositions._svd_backward)
    tg = _tg()
    (qa,) = W.parents(r)
    hermitian, (sU, sS, sVh), Uk, s, Vhk = W.tape.host[r]
    k = s.shape[-1]
    m, n = sU[-2], sVh[-1]
    gU, gS, gVh = (_slot(W, r, j, sh) for j, sh in enumerate((sU, sS, sVh)))
    # full_matrices: only the first k columns of U / rows of Vh carry gradient
    gU = None if gU is None else gU[..., :k]
    gVh = None if gVh is None else gVh[..., :k, :]
    U = _leading(W, r + 1, sU, Uk, (Ellipsis, slice(0, k)))
    Vh = _leading(W, r + 3, sVh, Vhk, (Ellipsis, slice(0, k), slice(None)))
    st = _known(W, r + 2, s)
    sj, si = tg.expand_dims(st, -2), tg.expand_dims(st, -1)
    inner = None
    terms = []
    if gS is not None:
        inner = tg.expand_dims(gS, -1) * _eye(k)
    if gU is not None or gVh is not None:
        F = _gaps(st * st)
    if gU is not None:
        UtgU = tg.matmul(_T(U), gU)
        t = F * (UtgU - _T(UtgU)) * sj
        inner = t if inner is None else inner + t
        if m > k:  # (I - U U^T) gU S^-1 V^T: the part of gU outside U's span
            terms.append(tg.matmul((gU - tg.matmul(U, UtgU)) / sj, Vh))
    if gVh is not None:
        VtgV = tg.matmul(Vh, _T(gVh))
        t = si * (F * (VtgV - _T(VtgV)))
        inner = t if inner is None else inner + t
        if n > k:  # U S^-1 gV^T (I - V V^T)
            terms.append(tg.matmul(U, (gVh - tg.matmul(tg.matmul(gVh, _T(Vh)), Vh)) / si))
    g = tg.matmul(tg.matmul(U, inner), Vh) if inner is not None else None
    for t in terms:
        g = t if g is None else g + t
    if g is None:
        return
    W.add(qa, _flat(_sym_t(g) if hermitian else g))


def _pinv_core(A, X, G):
    """gA for X = pinv(A) where the rank is constant, G the gradient of X."""
    tg = _tg()
    m, n = A.shape[-2], A.shape[-1]
    mm = tg.matmul
    XT = _T(X)
    g = -mm(mm(XT, G), XT)
    g = g + mm(mm(mm(np.eye(m) - mm(A, X), _T(G)), X), XT)
    g = g + mm(mm(mm(XT, X), _T(G)), np.eye(n) - mm(X, A))
    return g


def _pinv(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    hermitian, shape_a, shape_x = W.tape.host[r]
    A = tg.reshape(W.x(qa), shape_a)
    X = tg.reshape(W.x(r), shape_x)
    g = _pinv_core(A, X, tg.reshape(u, shape_x))
    W.add(qa, _flat(_sym_t(g) if hermitian else g))


def _lstsq(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    cutoff, shapes, Av, bv, xv = W.tape.host[r]
    gx = _slot(W, r, 0, shapes[0])
    gres = _slot(W, r, 1, shapes[1]) if len(shapes) > 1 else None
    A, b, x = _known(W, qa, Av), _known(W, qb, bv), _known(W, r + 1, xv)
    vector = bv.ndim == 1
    if vector:
        b, x = tg.reshape(b, (-1, 1)), tg.reshape(x, (-1, 1))
        gx = None if gx is None else tg.reshape(gx, (-1, 1))
    gA = gb = None
    if gx is not None:
        # x = pinv(A) b: through pinv's derivative (constant rank)
        X = tg.linalg.pinv(A, rcond=cutoff)
        if W.dep[qa]:
            gA = _pinv_core(A, X, tg.matmul(gx, _T(b)))
        gb = tg.matmul(_T(X), gx)
    if gres is not None:
        # |b - A x|^2 at the minimiser: A^T (b - A x) = 0, so x's own change
        # does not contribute
        wr = 2.0 * (b - tg.matmul(A, x)) * gres
        gb = wr if gb is None else gb + wr
        t = tg.matmul(wr, _T(x))
        gA = -t if gA is None else gA - t
    if gA is not None and W.dep[qa]:
        W.add(qa, _flat(gA))
    if gb is not None and W.dep[qb]:
        W.add(qb, _flat(gb))


def _function(W, r, u):
    tape = W.tape
    cls, ctx, tensor_args, out_shapes, nargs = tape.host[r]
    parents = W.parents(r)
    where = {position: q for (position, _shape), q in zip(tensor_args, parents)}
    # argument ``position`` as a tensor of the graph, of the given value
    # (the Function keeps its inputs; the tape need not)
    inputs = lambda position, value: _known(W, where[position], value)  # noqa: E731
    if getattr(cls, "vjp_ops_outputs", False):
        # and its output j (one OUTPUT record each after r), so that a formula
        # in the outputs (a decomposition's factors) differentiates through
        # this record again, as the decompositions' rules above do
        grads = cls.vjp_ops(ctx, u, inputs, lambda j, value: _known(W, r + 1 + j, value))
    else:
        grads = cls.vjp_ops(ctx, u, inputs)
    for (position, _shape), q in zip(tensor_args, parents):
        g = grads[position]
        if g is not None:
            W.add(q, _flat(g))


HOST = {L._MATMUL: _matmul, L._INV: _inv, L._SOLVE: _solve,
        L._DET: lambda W, r, u: _det_like(W, r, u, True),
        L._LOGABSDET: lambda W, r, u: _det_like(W, r, u, False),
        L._EINSUM: _einsum, _FUNCTION: _function,
        L._CHOLESKY: _cholesky, L._EIGH: _eigh, L._QR: _qr,
        L._SVD: _svd, L._PINV: _pinv, L._LSTSQ: _lstsq}

