"""The inverse, linear solves and determinants (inv, solve, det, slogdet) with
their NumPy VJPs and every transform's rule, beside their registry rows."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ...core.tensor import Tensor
from ..host_records import _host
from ._common import (_T, _flat, _pad, _parents, _sum_rows, _sum_terms, _sum_to, _tg, _tT,
                      _unbroadcast)


# -- inv ---------------------------------------------------------------------------------
def _inv_vjp(tape, adj, r):
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    shape_a, shape_y = tape.host[r]
    Y = adj.value(tape, r, shape_y)
    G = adj[r].reshape(shape_y)
    if tape.op[ra] != CONST:
        adj.add(ra, -_T(Y) @ G @ _T(Y))


def _inv_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_y = tape.host[r]
    Y = tan.value(tape, r, shape_y)
    tan.put(r, -(Y @ tan.lead(ra, shape_a) @ Y))


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


def _inv_graph(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_y = W.tape.host[r]
    Y = tg.reshape(W.x(r), shape_y)
    G = tg.reshape(u, shape_y)
    W.add(qa, _flat(-tg.matmul(tg.matmul(_tT(Y), G), _tT(Y))))


_INV = register("LinalgInv", C.K_HOST, C.INV, np.linalg.inv, host_vjp=_inv_vjp, reads="y",
                replay=lambda xs, h: np.linalg.inv(*xs), file_arity=1,
                jvp=_inv_jvp, second=_inv2, graph_vjp=_inv_graph)


def inv(a):
    """``numpy.linalg.inv``, batched over leading axes."""
    return _host(_INV, np.linalg.inv, (a,))


# -- solve -------------------------------------------------------------------------------
def _solve_vjp(tape, adj, r):
    a0 = tape.arg0[r]
    ra, rb = tape.args[a0], tape.args[a0 + 1]
    shape_a, shape_b, shape_x = tape.host[r]
    A = adj.value(tape, ra, shape_a)
    X = adj.value(tape, r, shape_x)
    G = adj[r].reshape(shape_x)
    vector = len(shape_b) == 1
    GB = np.linalg.solve(_T(A), G[..., None] if vector else G)
    if tape.op[rb] != CONST:
        adj.add(rb, _unbroadcast(GB[..., 0] if vector else GB, shape_b))
    if tape.op[ra] != CONST:
        Xm = X[..., None] if vector else X
        # -(GB X^T) as (-GB) X^T: negating the small factor is exact, and the
        # product goes straight into A's adjoint when it is the first
        # contribution and of A's shape (no array of A's size made, negated
        # and copied: two thirds of this VJP's time at 64 x 32 x 32)
        nGB, Xt = np.negative(GB), _T(Xm)
        out = (adj.fresh(ra, shape_a)
               if np.broadcast_shapes(GB.shape[:-2], Xt.shape[:-2]) == tuple(shape_a[:-2])
               else None)
        if Xm.shape[-1] == 1:  # one right-hand side: an outer product, no GEMM
            gA = np.multiply(nGB, Xt, out=out)
        else:
            gA = np.matmul(nGB, Xt, out=out)
        if out is None:
            adj.add(ra, _unbroadcast(gA, shape_a))


def _solve_jvp(tape, tan, r):
    # A X = B:  A dX = dB - dA X
    ra, rb = _parents(tape, r)
    shape_a, shape_b, shape_x = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    X = tan.value(tape, r, shape_x)
    vector = len(shape_b) == 1
    Xm = X[..., None] if vector else X
    dA, dB = tan.lead(ra, shape_a), tan.lead(rb, shape_b)
    # batch axes broadcast against X's: align them behind the leading p
    rhs = _sum_terms(None if dB is None else _pad(dB[..., None] if vector else dB, Xm.ndim),
                     None if dA is None else -(_pad(dA, Xm.ndim) @ Xm))
    dX = np.linalg.solve(A, rhs)
    tan.put(r, dX[..., 0] if vector else dX)


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


def _solve_graph(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    shape_a, shape_b, shape_x = W.tape.host[r]
    vector = len(shape_b) == 1
    A = tg.reshape(W.x(qa), shape_a)
    X = tg.reshape(W.x(r), shape_x)
    G = tg.reshape(u, shape_x)
    Gm = tg.expand_dims(G, -1) if vector else G
    GB = tg.linalg.solve(_tT(A), Gm)
    if W.dep[qb]:
        W.add(qb, _flat(_sum_to(GB[..., 0] if vector else GB, tuple(shape_b))))
    if W.dep[qa]:
        Xm = tg.expand_dims(X, -1) if vector else X
        W.add(qa, _flat(_sum_to(-tg.matmul(GB, _tT(Xm)), tuple(shape_a))))


_SOLVE = register("LinalgSolve", C.K_HOST, C.SOLVE, np.linalg.solve, host_vjp=_solve_vjp,
                  reads="xy", replay=lambda xs, h: np.linalg.solve(*xs), file_arity=2,
                  jvp=_solve_jvp, second=_solve2, graph_vjp=_solve_graph)


def solve(a, b):
    """``numpy.linalg.solve``, batched; differentiable in both operands
    (complex operands: ``complex_linalg.solve``, which ``numpy.linalg.solve``
    reaches through ``numpy_api``)."""
    return _host(_SOLVE, np.linalg.solve, (a, b))


# -- det and slogdet ---------------------------------------------------------------------
def _det_like_vjp(tape, adj, r, times_det):
    """d det(A) = det(A) A^-T, d log|det(A)| = A^-T, times the output's gradient."""
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    if tape.op[ra] == CONST:
        return
    shape_a, shape_d = tape.host[r]
    w = adj[r].reshape(shape_d)
    if times_det:
        w = w * adj.value(tape, r, shape_d)
    adj.add(ra, w[..., None, None] * _T(np.linalg.inv(adj.value(tape, ra, shape_a))))


def _det_vjp(tape, adj, r):
    _det_like_vjp(tape, adj, r, True)


def _logabsdet_vjp(tape, adj, r):
    _det_like_vjp(tape, adj, r, False)


def _trace_inv(A, dA):
    """tr(A^-1 dA) over the last two axes."""
    return np.einsum("...ij,...ji->...", np.linalg.inv(A), dA)


def _det_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_d = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    tan.put(r, tan.value(tape, r, shape_d) * _trace_inv(A, tan.lead(ra, shape_a)))


def _logabsdet_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_d = tape.host[r]
    tan.put(r, _trace_inv(tan.value(tape, ra, shape_a), tan.lead(ra, shape_a)))


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


def _det2(P, r):
    _det_like2(P, r, True)


def _logabsdet2(P, r):
    _det_like2(P, r, False)


def _det_like_graph(W, r, u, det):
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_d = W.tape.host[r]
    A = tg.reshape(W.x(qa), shape_a)
    g = tg.reshape(u, tuple(shape_d) + (1, 1))
    AiT = _tT(tg.linalg.inv(A))
    if det:
        d = tg.reshape(W.x(r), tuple(shape_d) + (1, 1))
        W.add(qa, _flat(g * d * AiT))
    else:
        W.add(qa, _flat(g * AiT))


def _det_graph(W, r, u):
    _det_like_graph(W, r, u, True)


def _logabsdet_graph(W, r, u):
    _det_like_graph(W, r, u, False)


_DET = register("LinalgDet", C.K_HOST, C.DET, np.linalg.det, host_vjp=_det_vjp, reads="xy",
                replay=lambda xs, h: np.linalg.det(*xs), file_arity=1,
                jvp=_det_jvp, second=_det2, graph_vjp=_det_graph)
_LOGABSDET = register("LinalgSlogdet", C.K_HOST, C.SLOGDET, None, host_vjp=_logabsdet_vjp,
                      reads="x", replay=lambda xs, h: np.linalg.slogdet(*xs)[1], file_arity=1,
                      jvp=_logabsdet_jvp, second=_logabsdet2, graph_vjp=_logabsdet_graph)


def det(a):
    """``numpy.linalg.det``, batched."""
    return _host(_DET, np.linalg.det, (a,))


def slogdet(a):
    """``numpy.linalg.slogdet``: ``(sign, logabsdet)``; the sign carries no
    gradient and comes back as a plain array."""
    ad = a._data if isinstance(a, Tensor) else np.asarray(a)
    sign, _ = np.linalg.slogdet(ad)
    return sign, _host(_LOGABSDET, lambda m: np.linalg.slogdet(m)[1], (a,))
