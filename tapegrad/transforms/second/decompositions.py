"""The second-order rules of the matrix decompositions: cholesky, eigh, qr,
svd, pinv and lstsq (``second_rules.HOST_RULES`` holds them by op code).

Each rule is the tangent of the op's first-order VJP (``ops/matrix.py``)
with the outputs' gradients held fixed, computed through the pass state
``second_rules._Pass`` (``P``) for all p directions at once, so the rules
share those VJPs' conventions and limits: symmetric gradients for
the records of cholesky, eigh and hermitian svd / pinv (their input is the
symmetric matrix of the triangle NumPy reads, recorded before them); distinct eigen- and singular
values where eigenvectors or singular vectors are used, and sign-invariant
functions of the latter; constant rank for pinv and lstsq.
"""
import numpy as np

from ...ops import matrix as L
from ...ops.matrix import _T


# -- decompositions: the tangent of each first-order VJP (ops/matrix.py) -------------------
# Each VJP is a formula in the input, the op's outputs (or the factors kept
# in ``tape.host``) and the outputs' gradients G.  Its tangent with G held
# fixed follows by the product rule, reading the outputs' tangents that the
# forward sweep computed (transforms/forward/host_rules.py: HOST_JVP) rather than re-deriving them,
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


def _pinv_tangent(A, X, dA):
    """d pinv(A) where the rank is constant (Golub and Pereyra); forward
    mode's pinv and lstsq tangents use it too."""
    m, n = A.shape[-2], A.shape[-1]
    dAT = _T(dA)
    return (-X @ dA @ X + X @ _T(X) @ dAT @ (np.eye(m) - A @ X)
            + (np.eye(n) - X @ A) @ dAT @ _T(X) @ X)


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
        dX = _pinv_tangent(A, X, dA)
        gA += _pinv_dot(A, X, gx @ b.T, dA, dX, gx @ _T(db))
        gb += _T(dX) @ gx
    if gres is not None:
        wr = 2.0 * (b - A @ x) * gres
        dwr = 2.0 * (db - dA @ x - A @ dx) * gres
        gb += dwr
        gA -= dwr @ x.T + wr @ _T(dx)
    P.add(qa, gA)
    P.add(qb, gb[..., 0] if vector else gb)

