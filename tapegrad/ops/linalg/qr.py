"""The QR decomposition (qr) with its NumPy VJP and every transform's rule,
beside its registry row."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ...core.tensor import _plain
from ..host_records import _data, _needs_grad, _record_outputs, _slot_grads
from ._common import (_T, _eye, _f64, _flat, _known, _lead, _leading, _parents, _slot,
                      _slot_bar, _tg, _tT)


def _copyltu(m):
    """The symmetric matrix whose lower triangle is m's."""
    low = np.tril(m, -1)
    return low + _T(low) + np.einsum("...ii->...i", m)[..., None] * np.eye(m.shape[-1])


def _qr_tall_vjp(Q, R, gQ, gR):
    """gA for A = QR with Q (m, n) orthonormal columns, R (n, n) invertible."""
    M = np.zeros(R.shape)
    if gR is not None:
        M = M + R @ _T(gR)
    if gQ is not None:
        M = M - _T(gQ) @ Q
    b = Q @ _copyltu(M)
    if gQ is not None:
        b = b + gQ
    # b R^-T, without forming the inverse
    return _T(np.linalg.solve(R, _T(b)))


class QRResult(tuple):
    """``(Q, R)``, unpacking as NumPy's ``QRResult`` does."""
    __slots__ = ()

    def __new__(cls, Q, R):
        return tuple.__new__(cls, (Q, R))

    Q = property(lambda self: self[0])
    R = property(lambda self: self[1])


def _qr_vjp(tape, adj, r):
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    if tape.op[ra] == CONST:
        return
    mode, Q, R, Y = tape.host[r]
    gQ, gR = _slot_grads(adj, r, (Q.shape, R.shape))
    Q, R = _f64(Q, R)
    m, n = Q.shape[-2], R.shape[-1]
    if mode == "complete" and m > n:
        if gQ is not None:
            raise RuntimeError(
                "linalg.qr: the QR decomposition is not differentiable in Q when "
                f"mode='complete' and the matrix has more rows than columns ({m} > {n}): "
                "the last columns of Q are any orthonormal basis of the complement. "
                "Use mode='reduced'")
        # R's zero rows carry nothing; Q's first n columns and R[:n] are unique
        adj.add(ra, _qr_tall_vjp(Q[..., :n], R[..., :n, :], None, gR[..., :n, :]))
        return
    k = min(m, n)
    if m >= n:
        adj.add(ra, _qr_tall_vjp(Q, R, gQ, gR))
        return
    # wide: A = [X | Y] with X = Q U square and Y = Q V, so V = Q^T Y
    U, gU = R[..., :k], None if gR is None else gR[..., :k]
    gV = None if gR is None else gR[..., k:]
    Y = np.asarray(Y, dtype=np.float64)
    if gV is not None:
        gQ = (0.0 if gQ is None else gQ) + Y @ _T(gV)
    gX = _qr_tall_vjp(Q, U, gQ, gU)
    gY = np.zeros(Y.shape) if gV is None else Q @ gV
    adj.add(ra, np.concatenate([gX, gY], axis=-1))


def _qr_tall_tangent(Q, R, dA):
    """(dQ, dR) for A = QR, Q with orthonormal columns, R square invertible.

    With C = Q^T dA R^-1 = Q^T dQ + dR R^-1 (skew plus upper triangular), the
    skew part is fixed by C's strictly lower triangle."""
    dAR = _T(np.linalg.solve(_T(R), _T(dA)))  # dA R^-1
    Cm = _T(Q) @ dAR
    low = np.tril(Cm, -1)
    Om = low - _T(low)
    return dAR - Q @ (Cm - Om), (Cm - Om) @ R


def _qr_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    mode, Q, R, Y = tape.host[r]
    Q, R = np.asarray(Q, np.float64), np.asarray(R, np.float64)
    m, n = Q.shape[-2], R.shape[-1]
    dA = tan.lead(ra, Q.shape[:-2] + (m, n))
    if mode == "complete" and m > n:
        raise NotImplementedError(
            "jvp: linalg.qr with mode='complete' and more rows than columns has no forward "
            "rule (the last columns of Q are any basis of the complement); use "
            "mode='reduced', or reverse mode")
    if m >= n:
        dQ, dR = _qr_tall_tangent(Q, R, dA)
    else:  # wide: A = [X | Y], X = Q U square, Y = Q V
        dQ, dU = _qr_tall_tangent(Q, R[..., :m], dA[..., :m])
        Yv = np.asarray(Y, np.float64)
        dV = _T(dQ) @ Yv + _T(Q) @ dA[..., m:]
        dR = np.concatenate([dU, dV], axis=-1)
    tan.put(r + 1, dQ)
    tan.put(r + 2, dR)


def _qr_tall_dot(Q, R, gQ, gR, dQ, dR, dgQ=None):
    """The tangent of ``_qr_tall_vjp(Q, R, gQ, gR)`` along (dQ, dR),
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
    b = Q @ _copyltu(M)
    db = dQ @ _copyltu(M) + Q @ _copyltu(dM)
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


def _copyltu_t(m):
    n = m.shape[-1]
    low = m * np.tril(np.ones((n, n)), -1)
    return low + _tT(low) + m * _eye(n)


def _qr_tall_graph(Q, R, gQ, gR):
    """gA for A = QR, Q (m, n) orthonormal columns, R (n, n) invertible."""
    tg = _tg()
    M = None
    if gR is not None:
        M = tg.matmul(R, _tT(gR))
    if gQ is not None:
        t = tg.matmul(_tT(gQ), Q)
        M = -t if M is None else M - t
    b = tg.matmul(Q, _copyltu_t(M))
    if gQ is not None:
        b = b + gQ
    return _tT(tg.linalg.solve(R, _tT(b)))  # b R^-T


def _qr_graph(W, r, u):
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
        W.add(qa, _flat(_qr_tall_graph(Q[..., :n], R[..., :n, :], None, gR[..., :n, :])))
        return
    if m >= n:
        W.add(qa, _flat(_qr_tall_graph(Q, R, gQ, gR)))
        return
    # wide: A = [X | Y] with X = Q U square and Y = Q V, so V = Q^T Y
    k = m
    shape_a = Qv.shape[:-2] + (m, n)
    U = R[..., :k]
    gU = None if gR is None else gR[..., :k]
    gV = None if gR is None else gR[..., k:]
    if gV is not None:
        Yt = _leading(W, qa, shape_a, Y, (Ellipsis, slice(m, None)))
        t = tg.matmul(Yt, _tT(gV))
        gQ = t if gQ is None else gQ + t
    gX = _qr_tall_graph(Q, U, gQ, gU)
    gY = tg.matmul(Q, gV) if gV is not None else np.zeros(Y.shape)
    W.add(qa, _flat(tg.concatenate([gX, gY], axis=-1)))


_QR = register("LinalgQr", C.K_HOST, C.QR, np.linalg.qr, host_vjp=_qr_vjp, reads="",
               not_replayable="multi-output host op",
               jvp=_qr_jvp, second=_qr2, graph_vjp=_qr_graph)


def qr(a, mode="reduced"):
    """``numpy.linalg.qr``: ``(Q, R)`` as two outputs of one record (slots 0
    and 1), batched over leading axes.

    Differentiable for ``mode='reduced'`` (any shape: the wide case ``m < n``
    too), ``mode='r'`` (R only) and ``mode='complete'`` when ``m <= n``.  With
    ``mode='complete'`` and ``m > n`` the last ``m - n`` columns of Q are any
    basis of the complement, so a gradient through Q raises (one through R
    alone works); ``mode='raw'`` is not differentiable.  The gradient needs
    R's diagonal nonzero (A of full rank).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = tg.tensor([[3.0, 1.0], [4.0, 2.0]], requires_grad=True)
    >>> Q, R = tg.linalg.qr(A)
    >>> R
    tensor([[-5.0, -2.2],
            [0.0, 0.4]], grad_fn=<LinalgQrBackward>)
    >>> R[0, 0].backward()          # R[0, 0] = -|A[:, 0]|
    >>> A.grad
    tensor([[-0.6, 0.0],
            [-0.8, 0.0]])
    """
    ad = _data(a)
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"linalg.qr: unrecognized mode {mode!r}")
    if not _needs_grad(a):
        return np.linalg.qr(ad, mode) if mode == "raw" else (
            _plain(np.linalg.qr(ad, mode)) if mode == "r"
            else QRResult(*map(_plain, np.linalg.qr(ad, mode))))
    if mode == "raw":
        raise NotImplementedError(
            "linalg.qr: mode='raw' (Householder reflectors) is not differentiable; "
            "use mode='reduced'")
    if np.ndim(ad) < 2:
        raise np.linalg.LinAlgError(
            f"{np.ndim(ad)}-dimensional array given. Array must be at least two-dimensional")
    Q, R = np.linalg.qr(ad, "reduced" if mode == "r" else mode)
    # a wide matrix's VJP reads its last columns (a copy: the tape keeps none)
    m, n = np.shape(ad)[-2:]
    Y = np.array(ad[..., m:]) if m < n else None
    q, r_ = _record_outputs(_QR, (a,), (Q, R), (mode, Q, R, Y))
    return r_ if mode == "r" else QRResult(q, r_)
