"""Second derivatives: ``hvp`` and ``hessian`` by forward-over-reverse on the tape.

The function is recorded once.  A forward tangent sweep (``forward.py``)
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
NumPy for all p directions at once (the rules below: nonlinear reductions,
cumprod, matmul, einsum, the linear-algebra ops -- inv, solve, det, slogdet,
cholesky, eigh, qr, svd, pinv, lstsq -- and ``tg.elementwise`` ops defined
with ``second_derivative=``), the compiled vector
sweep (``kernels/vector.py``) applies the record's first-order VJP to all
p + 1 vectors, and ``sweep_block`` resumes.  The second term vanishes for the
(piecewise) linear ops -- concatenation, cumsum, max/min, where -- so those
need the first step only.

The decompositions' rules are the tangents of their first-order VJPs
(``ops/matrix.py``) with the outputs' gradients held fixed, so they share
those VJPs' conventions and limits: symmetric gradients for cholesky, eigh
and hermitian svd / pinv; distinct eigen- and singular values where
eigenvectors or singular vectors are used, and sign-invariant functions of
the latter; constant rank for pinv and lstsq.

Ops without a second-order rule (``tg.Function``, which has no forward rule
either; ``tg.elementwise`` ops defined without ``second_derivative=``; qr with
``mode='complete'`` and more rows than columns) raise ``NotImplementedError``
naming the op, when the function's Hessian actually reaches them.
"""
import math
import threading
from typing import NamedTuple

import numpy as np

from . import forward as FW
from . import sparsity as SP
from .autograd import _freed_error
from .functional import _Slabs, _argnums, _call, _root_span, _run, _vector_bytes
from .index_maps import operand_maps, reduce_map
from .kernels import codes as C
from .kernels._views import SMALL
from .kernels.hvp import hvp_layout, sweep_block
from .ops import matrix as L
from .ops.custom import USER_OPS
from .ops.registry import REGISTRY
from .tape import current

#: memory one batched pass may use for the tangents and adjoints of all its
#: directions; a larger Hessian is computed in chunks of directions.  Chunks
#: that stay near the caches beat one pass over blocks that stream through
#: memory: Rosenbrock's 1,000 unit directions took 52 ms in one pass and
#: 24 ms in 32 MiB chunks here
HESSIAN_BYTES = 32 * 2**20


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
        if sub in (C.SUM, C.MEAN, C.MAX, C.MIN):
            return _LINEAR
        return _RULE if sub in (C.PROD, C.LOGSUMEXP, C.SOFTMAX, C.LOG_SOFTMAX) else _MISSING
    if kind == C.K_SCAN:
        if sub == C.CUMSUM:
            return _LINEAR
        return _RULE if sub == C.CUMPROD else _MISSING
    if kind == C.K_HOST:
        return _RULE if code in HOST_RULES else _MISSING
    if kind == C.K_USER:
        # its rule raises when the op was defined without second_derivative=
        return _RULE if sub in (C.USER_UNARY, C.USER_BINARY) else _MISSING
    return _MISSING


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


def _reduce2(P, r, sub):
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    tape = P.tape
    n, m = int(tape.size[q]), int(tape.size[r])
    om = reduce_map(tape, r, n) if m > 1 or sub in (C.SOFTMAX, C.LOG_SOFTMAX) else \
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
    raise _missing_error(int(tape.op[r]))


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
    if ad is None or bd is None:
        # bilinear: with one operand constant in the inputs there is no
        # second-order term (and the other operand's would be thrown away)
        return
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
    B2 = bd.reshape((p,) + (1,) * (nb + 2 - len(sb)) + sb)
    P.add(qa, _sum_rows(g2 @ np.swapaxes(B2, -1, -2), sa))
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


# -- decompositions: the tangent of each first-order VJP (ops/matrix.py) -------------------
# Each VJP is a formula in the input, the op's outputs (or the factors kept
# in ``tape.host``) and the outputs' gradients G.  Its tangent with G held
# fixed follows by the product rule, reading the outputs' tangents that the
# forward sweep computed (forward.py: HOST_JVP) rather than re-deriving them,
# so the two sweeps use the same derivative convention (symmetric gradients,
# the held-fixed complement columns of full_matrices SVD, ...).  Arrays carry
# the p directions on a leading axis; the recorded values broadcast over it.
def _f64(*xs):
    return [np.asarray(x, np.float64) for x in xs]


def _lead(P, q, shape):
    """Record q's tangents as ``(p,) + shape``, or None (q is independent of
    the inputs)."""
    t = P.dot(q)
    return None if t is None else t.reshape((P.p,) + tuple(shape))


def _slot_bar(P, q, shape):
    """The ordinary adjoint (vector 0) of output slot q, or None where no
    gradient reached it (its memory is not initialised then)."""
    adj = P.adj
    if q >= adj.reached.size or not adj.reached[q]:
        return None
    return P.ybar(q).reshape(shape)


def _phi(m):
    """The lower triangle with half the diagonal (the Cholesky VJP's Phi)."""
    return np.tril(m) - 0.5 * np.einsum("...ii->...i", m)[..., None] * np.eye(m.shape[-1])


def _cholesky2(P, r):
    # Abar = sym(L^-T Phi(L^T G) L^-1); d(L^-1) = -L^-1 dL L^-1
    (qa,) = P.parents(r)
    shape_a, shape_l = P.tape.host[r]
    dL = _lead(P, r, shape_l)
    if dL is None:
        return
    Lf = P.val(r).reshape(shape_l)
    G = P.ybar(r).reshape(shape_l)
    Li = np.linalg.inv(Lf)
    dLi = -(Li @ dL @ Li)
    Ph, dPh = _phi(_T(Lf) @ G), _phi(_T(dL) @ G)
    P.add(qa, L._sym(_T(dLi) @ Ph @ Li + _T(Li) @ dPh @ Li + _T(Li) @ Ph @ dLi))


def _gap_inverse(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it, and the mask."""
    off = ~np.eye(w.shape[-1], dtype=bool)
    diff = w[..., None, :] - w[..., :, None]
    with np.errstate(divide="ignore"):
        return np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)


def _eigh2(P, u):
    # Abar = sym(V (diag(gw) + F o (V^T gV)) V^T); dF = -F^2 o (dw_j - dw_i)
    (qa,) = P.parents(u)
    shape_a, (w, V) = P.tape.host[u]
    w, V = _f64(w, V)
    dw, dV = _lead(P, u + 1, w.shape), _lead(P, u + 2, V.shape)
    gw, gV = _slot_bar(P, u + 1, w.shape), _slot_bar(P, u + 2, V.shape)
    if dw is None or (gw is None and gV is None):
        return
    n = w.shape[-1]
    inner = np.zeros(V.shape)
    dinner = np.zeros((P.p,) + V.shape)
    if gw is not None:
        inner = inner + gw[..., None] * np.eye(n)
    if gV is not None:
        F = _gap_inverse(w)
        K = _T(V) @ gV
        dF = -(F * F) * (dw[..., None, :] - dw[..., :, None])
        inner = inner + F * K
        dinner = dinner + dF * K + F * (_T(dV) @ gV)
    P.add(qa, L._sym(dV @ inner @ _T(V) + V @ dinner @ _T(V) + V @ inner @ _T(dV)))


def _qr_tall_dot(Q, R, gQ, gR, dQ, dR, dgQ=None):
    """The tangent of ``linalg._qr_tall_vjp(Q, R, gQ, gR)`` along (dQ, dR),
    and along dgQ where gQ itself moves (the wide case's gQ holds Y)."""
    M = np.zeros(R.shape)
    dM = np.zeros(dR.shape)
    if gR is not None:
        M = M + R @ _T(gR)
        dM = dM + dR @ _T(gR)
    if gQ is not None:
        M = M - _T(gQ) @ Q
        dM = dM - _T(gQ) @ dQ
    if dgQ is not None:
        dM = dM - _T(dgQ) @ Q
    b = Q @ L._copyltu(M)
    db = dQ @ L._copyltu(M) + Q @ L._copyltu(dM)
    if gQ is not None:
        b = b + gQ
    if dgQ is not None:
        db = db + dgQ
    gA = _T(np.linalg.solve(R, _T(b)))  # b R^-T
    # d(b R^-T) = (db - b R^-T dR^T) R^-T
    return _T(np.linalg.solve(R[None], _T(db - gA @ _T(dR))))


def _qr2(P, u):
    (qa,) = P.parents(u)
    mode, Q, R, Y = P.tape.host[u]
    Q, R = _f64(Q, R)
    m, n = Q.shape[-2], R.shape[-1]
    dQ, dR = _lead(P, u + 1, Q.shape), _lead(P, u + 2, R.shape)
    gQ, gR = _slot_bar(P, u + 1, Q.shape), _slot_bar(P, u + 2, R.shape)
    if dR is None or (gQ is None and gR is None):
        return
    if mode == "complete" and m > n:  # the forward sweep has no rule for it either
        raise NotImplementedError(
            "hessian: linalg.qr with mode='complete' and more rows than columns has no "
            "second-order rule; use mode='reduced'")
    if m >= n:
        P.add(qa, _qr_tall_dot(Q, R, gQ, gR, dQ, dR))
        return
    # wide: A = [X | Y], X = Q U, V = Q^T Y; gQ gains Y gV^T, and gY = Q gV
    dA = _lead(P, qa, Q.shape[:-2] + (m, n))
    gU = None if gR is None else gR[..., :m]
    gV = None if gR is None else gR[..., m:]
    dgQ = None
    if gV is not None:
        gQ = (0.0 if gQ is None else gQ) + np.asarray(Y, np.float64) @ _T(gV)
        dgQ = dA[..., m:] @ _T(gV)
    dgX = _qr_tall_dot(Q, R[..., :m], gQ, gU, dQ, dR[..., :m], dgQ)
    dgY = np.zeros(dA[..., m:].shape) if gV is None else dQ @ gV
    P.add(qa, np.concatenate([dgX, dgY], axis=-1))


def _svd2(P, u):
    # the tangent of linalg._svd_backward(U, s, Vh, gU, gS, gVh) term by term;
    # F_ij = 1 / (s_j^2 - s_i^2), dF = -F^2 o (2 s_j ds_j - 2 s_i ds_i)
    (qa,) = P.parents(u)
    hermitian, shapes, U, s, Vh = P.tape.host[u]
    U, s, Vh = _f64(U, s, Vh)
    sU, sS, sVh = shapes
    k = s.shape[-1]
    ds = _lead(P, u + 2, sS)
    gU, gS, gVh = (_slot_bar(P, u + 1 + j, sh) for j, sh in enumerate(shapes))
    if ds is None or (gU is None and gS is None and gVh is None):
        return
    # full_matrices: only the first k columns of U / rows of Vh carry gradient
    dU = _lead(P, u + 1, sU)[..., :k]
    dVh = _lead(P, u + 3, sVh)[..., :k, :]
    gU = None if gU is None else gU[..., :k]
    gVh = None if gVh is None else gVh[..., :k, :]
    m, n = U.shape[-2], Vh.shape[-1]
    sj, si = s[..., None, :], s[..., :, None]
    dsj, dsi = ds[..., None, :], ds[..., :, None]
    inner = np.zeros(s.shape + (k,))
    dinner = np.zeros((P.p,) + s.shape + (k,))
    terms = []
    if gS is not None:
        inner = inner + gS[..., None] * np.eye(k)
    if gU is not None or gVh is not None:
        F = _gap_inverse(s * s)
        ds2 = 2.0 * s * ds
        dF = -(F * F) * (ds2[..., None, :] - ds2[..., :, None])
    if gU is not None:
        UtgU, dUtgU = _T(U) @ gU, _T(dU) @ gU
        K, dK = UtgU - _T(UtgU), dUtgU - _T(dUtgU)
        inner = inner + F * K * sj
        dinner = dinner + (dF * K + F * dK) * sj + F * K * dsj
        if m > k:  # ((gU - U U^T gU) / s_j) Vh
            E = gU - U @ UtgU
            dE = -(dU @ UtgU + U @ dUtgU)
            terms += [(dE / sj - E * dsj / (sj * sj)) @ Vh, (E / sj) @ dVh]
    if gVh is not None:
        VtgV, dVtgV = Vh @ _T(gVh), dVh @ _T(gVh)
        K, dK = VtgV - _T(VtgV), dVtgV - _T(dVtgV)
        inner = inner + si * (F * K)
        dinner = dinner + dsi * (F * K) + si * (dF * K + F * dK)
        if n > k:  # U ((gVh - gVh Vh^T Vh) / s_i)
            E = gVh - (gVh @ _T(Vh)) @ Vh
            dE = -((gVh @ _T(dVh)) @ Vh + (gVh @ _T(Vh)) @ dVh)
            terms += [dU @ (E / si), U @ (dE / si - E * dsi / (si * si))]
    t = dU @ inner @ Vh + U @ dinner @ Vh + U @ inner @ dVh
    for term in terms:
        t = t + term
    P.add(qa, L._sym(t) if hermitian else t)


def _pinv_dot(A, X, G, dA, dX, dG=None):
    """The tangent of ``linalg._pinv_vjp_core(A, X, G)`` along (dA, dX, dG)."""
    m, n = A.shape[-2], A.shape[-1]
    XT, dXT, GT = _T(X), _T(dX), _T(G)
    RA, RX = np.eye(m) - A @ X, np.eye(n) - X @ A  # the projectors' complements
    t = -(dXT @ G @ XT + XT @ G @ dXT)
    t = t - (dA @ X + A @ dX) @ GT @ X @ XT + RA @ GT @ (dX @ XT + X @ dXT)
    t = t + (dXT @ X + XT @ dX) @ GT @ RX - XT @ X @ GT @ (dX @ A + X @ dA)
    if dG is not None:  # the core is linear in G
        t = t + L._pinv_vjp_core(A, X, dG)
    return t


def _pinv2(P, r):
    (qa,) = P.parents(r)
    hermitian, shape_a, shape_x = P.tape.host[r]
    dA, dX = _lead(P, qa, shape_a), _lead(P, r, shape_x)
    if dA is None:
        return
    A = P.val(qa).reshape(shape_a)
    X = P.val(r).reshape(shape_x)
    t = _pinv_dot(A, X, P.ybar(r).reshape(shape_x), dA, dX)
    P.add(qa, L._sym(t) if hermitian else t)


def _lstsq2(P, u):
    # x = pinv(A) b: gA = pinv_core(A, X, gx b^T), gb = X^T gx; residuals
    # |b - A x|^2: wr = 2 (b - A x) gres, gb += wr, gA -= wr x^T
    qa, qb = P.parents(u)
    cutoff, shapes, A, b, x = P.tape.host[u]
    A, b, x = _f64(A, b, x)
    p = P.p
    dA, db, dx = _lead(P, qa, A.shape), _lead(P, qb, b.shape), _lead(P, u + 1, shapes[0])
    gx = _slot_bar(P, u + 1, shapes[0])
    gres = _slot_bar(P, u + 2, shapes[1]) if len(shapes) > 1 else None
    if dx is None or (gx is None and gres is None):
        return
    vector = b.ndim == 1
    if vector:
        b, x, dx = b[:, None], x[:, None], dx[..., None]
        gx = None if gx is None else gx[:, None]
        db = None if db is None else db[..., None]
    dA = np.zeros((p,) + A.shape) if dA is None else dA
    db = np.zeros((p,) + b.shape) if db is None else db
    gA, gb = np.zeros((p,) + A.shape), np.zeros((p,) + b.shape)
    if gx is not None:
        X = np.linalg.pinv(A, rcond=cutoff)
        dX = FW._pinv_tangent(A, X, dA)
        gA += _pinv_dot(A, X, gx @ b.T, dA, dX, gx @ _T(db))
        gb += _T(dX) @ gx
    if gres is not None:
        wr = 2.0 * (b - A @ x) * gres
        dwr = 2.0 * (db - dA @ x - A @ dx) * gres
        gb += dwr
        gA -= dwr @ x.T + wr @ _T(dx)
    P.add(qa, gA)
    P.add(qb, gb[..., 0] if vector else gb)


# -- user elementwise ops (tg.elementwise with second_derivative=) -------------------------
def _user_maps(tape, r, n, ma, mb):
    """The element of each operand that each of the n output elements reads
    (``ip`` as ``kernels/user.py`` documents: ``[id, d0, d1, nd, shape,
    strides of a, strides of b]``)."""
    maps = operand_maps(tape, r, n, (ma, mb), at=3)
    return [np.arange(n) if mp is None else mp for mp in maps]


def _scatter(t, idx, m):
    """Sum the (p, n) ``t`` into (p, m) by the operand index map ``idx``."""
    if idx.size == m and m == t.shape[1]:
        return t
    out = np.zeros((t.shape[0], m))
    np.add.at(out.T, idx, t.T)
    return out


def _user2(P, r, sub):
    # xbar = g f'(x): its tangent with g fixed is g f''(x) xdot; for two
    # operands abar_dot = g (f_aa adot + f_ab bdot), bbar_dot = g (f_ab adot + f_bb bdot)
    tape = P.tape
    op = USER_OPS[int(tape.ip[int(tape.ip0[r])])]
    rules = op.second_rules()
    if rules is None:
        raise NotImplementedError(
            f"hessian/hvp: the tg.elementwise op {op.name} ({REGISTRY[int(tape.op[r])].name}) "
            "has no second derivative; define it with tg.elementwise(forward, derivative, "
            "second_derivative=d2) to use it in tg.hessian / tg.hvp")
    g, y = P.ybar(r), P.val(r)
    if sub == C.USER_UNARY:
        (q,) = P.parents(r)
        xd = P.dot(q)
        if xd is not None:
            P.add(q, (g * rules[0](P.val(q), y)) * xd)
        return
    qa, qb = P.parents(r)
    ad, bd = P.dot(qa), P.dot(qb)
    if ad is None and bd is None:
        return
    xa, xb = P.val(qa), P.val(qb)
    ia, ib = _user_maps(tape, r, y.size, xa.size, xb.size)
    a, b = xa[ia], xb[ib]
    haa, hab, hbb = (g * f(a, b, y) for f in rules)
    ta = 0.0 if ad is None else ad[:, ia]
    tb = 0.0 if bd is None else bd[:, ib]
    if ad is not None:
        P.add(qa, _scatter(haa * ta + hab * tb, ia, xa.size))
    if bd is not None:
        P.add(qb, _scatter(hab * ta + hbb * tb, ib, xb.size))


#: op code -> second-order rule(pass, r) for host ops
HOST_RULES = {L._MATMUL: _matmul2, L._EINSUM: _einsum2, L._INV: _inv2, L._SOLVE: _solve2,
              L._DET: lambda P, r: _det_like2(P, r, True),
              L._LOGABSDET: lambda P, r: _det_like2(P, r, False),
              L._CHOLESKY: _cholesky2, L._EIGH: _eigh2, L._QR: _qr2, L._SVD: _svd2,
              L._PINV: _pinv2, L._LSTSQ: _lstsq2}

_FAMILY = {C.K_REDUCE: _reduce2, C.K_SCAN: _scan2, C.K_USER: _user2}


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
        "einsum, linalg.inv, solve, det, slogdet, cholesky, eigh, qr, svd, pinv and lstsq, "
        "and tg.elementwise ops defined with second_derivative=")


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
    if out._tok is not tape.tok or tape.freed[out._rec]:
        return None
    return _recs_below(tape, leaves, _root_span(tape, out._rec))


def _recs_below(tape, leaves, upto):
    """Each leaf's record, None for one recorded after ``upto`` (it cannot
    reach the root) or in another epoch."""
    return [x._lrec if x._ltok is tape.lkey and x._lrec < upto else None for x in leaves]


def _hessian_flat(f, args, nums, sparse, who, memo=None):
    """Record f and return ``(leaves, H)``: H an (n, n) array over all the
    leaves' elements, or a ``SparseHessian`` when ``sparse`` is "coo";
    ``memo`` as for ``_coloring``."""
    leaves, out = _scalar_out(f, args, nums, who)
    n, starts, unit = FW.unit_directions(leaves)
    recs = _leaf_recs(leaves, out)
    coo = sparse == "coo"
    found = None if recs is None else _coloring(current(), out._rec, recs, starts,
                                                True if coo else sparse, memo)
    if (coo and found is None) or (found is not None and found.p == 0):
        # constant or linear f: nothing to compute (the graph goes with f's tensors)
        return leaves, SparseHessian.zero(n) if coo else np.zeros((n, n))
    if found is None:
        _, hvs = _drive(leaves, out, n, unit, fill=_unit_fill(starts))
        # hvs[i][k] = H e_k restricted to input i: column k of H's rows for i
        return leaves, (np.concatenate(hvs, axis=1).T if n else np.zeros((0, 0)))
    S = SP.seeds(found.color, found.p)
    _, hvs = _drive(leaves, out, found.p, lambda k, lo, hi: S[lo:hi, starts[k]:starts[k + 1]])
    return leaves, found.hessian(np.concatenate(hvs, axis=1), n, coo)


def hessian(f, argnums=0, *, sparse="auto"):
    """The Hessian of scalar ``f``, shape ``in.shape + in.shape``, as a function.

    Exact, by forward-over-reverse on the tape: the unit directions of the
    inputs at ``argnums`` go through one forward tangent sweep and one
    reverse sweep with n + 1 adjoints per record (in chunks of directions
    when they would take more than ``tapegrad.second.HESSIAN_BYTES``).  With
    a tuple ``argnums`` the result is a tuple of tuples, ``H[i][j]`` of shape
    ``in_i.shape + in_j.shape`` (as ``jax.hessian``).  Results have the
    inputs' dtypes.  ``f`` must return one number.

    ``sparse``: with True, the Hessian's structural sparsity pattern is found
    on the recorded graph and the columns that share no row are pushed
    through as one direction (``tapegrad.sparsity``) -- a banded Hessian
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

    def hessian_f(*args):
        single, nums = _argnums(argnums, len(args), "hessian")
        leaves, H = _hessian_flat(f, args, nums, sparse, "hessian", memo.__dict__)
        res = split_blocks(H, [x.shape for x in leaves], [x.dtype for x in leaves])
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
    (``tapegrad.sparsity``).  Over several ``argnums`` the inputs' elements
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
    triangles): the structural pattern of ``tapegrad.sparsity``, found from
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
        leaves, out = _scalar_out(f, args, nums, "hessian_sparsity")
        n, starts, _ = FW.unit_directions(leaves)
        recs = _leaf_recs(leaves, out)
        if recs is None:
            e = np.zeros(0, np.int64)
            return e, e
        return SP.pattern(current(), out._rec, recs, starts)
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
    the coloured ones of ``tapegrad.sparsity`` when they are at most half of
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
