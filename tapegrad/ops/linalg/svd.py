"""The singular value decomposition (svd, svdvals) with its NumPy VJP and every
transform's rule, beside its registry row."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ...core.tensor import _plain
from ..host_records import _data, _needs_grad, _record_outputs, _slot_grads, _triangle_read
from ._common import (_T, _eye, _f64, _flat, _gap_inverse, _gaps, _known, _lead, _leading,
                      _parents, _slot, _slot_bar, _sym, _sym_t, _tg, _tT)


class SVDResult(tuple):
    """``(U, S, Vh)``, unpacking as NumPy's ``SVDResult`` does."""
    __slots__ = ()

    def __new__(cls, U, S, Vh):
        return tuple.__new__(cls, (U, S, Vh))

    U = property(lambda self: self[0])
    S = property(lambda self: self[1])
    Vh = property(lambda self: self[2])


def _svd_backward(U, s, Vh, gU, gS, gVh):
    """gA for A = U diag(s) Vh (reduced: k = min(m, n) columns of U, rows of Vh)."""
    m, k, n = U.shape[-2], s.shape[-1], Vh.shape[-1]
    inner = np.zeros(s.shape + (k,))
    if gS is not None:
        inner = inner + gS[..., None] * np.eye(k)
    extra = 0.0
    if gU is not None or gVh is not None:
        s2 = s * s
        diff = s2[..., None, :] - s2[..., :, None]  # s_j^2 - s_i^2 at (i, j)
        off = ~np.eye(k, dtype=bool)
        with np.errstate(divide="ignore"):
            F = np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)
    if gU is not None:
        UtgU = _T(U) @ gU
        inner = inner + F * (UtgU - _T(UtgU)) * s[..., None, :]
        if m > k:  # (I - U U^T) gU S^-1 V^T: the part of gU outside U's span
            extra = extra + ((gU - U @ UtgU) / s[..., None, :]) @ Vh
    if gVh is not None:
        VtgV = Vh @ _T(gVh)
        inner = inner + s[..., :, None] * (F * (VtgV - _T(VtgV)))
        if n > k:  # U S^-1 gV^T (I - V V^T)
            extra = extra + U @ ((gVh - (gVh @ _T(Vh)) @ Vh) / s[..., :, None])
    return U @ inner @ Vh + extra


def _svd_vjp(tape, adj, r):
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    if tape.op[ra] == CONST:
        return
    hermitian, shapes, U, s, Vh = tape.host[r]
    gU, gS, gVh = _slot_grads(adj, r, shapes)
    k = s.shape[-1]
    # full_matrices: only the first k columns of U / rows of Vh are determined
    gU = None if gU is None else gU[..., :k]
    gVh = None if gVh is None else gVh[..., :k, :]
    g = _svd_backward(*_f64(U, s, Vh), gU, gS, gVh)
    adj.add(ra, _sym(g) if hermitian else g)


def _svd_jvp(tape, tan, r):
    # dP = U^T dA V: dS = diag(dP); U^T dU = F o (dP S + S dP^T) and
    # V^T dV = F o (S dP + dP^T S), F_ij = 1 / (s_j^2 - s_i^2); plus the parts
    # outside the spans of U and V for non-square A
    (ra,) = _parents(tape, r)
    hermitian, shapes, U, s, Vh = tape.host[r]
    U, s, Vh = (np.asarray(v, np.float64) for v in (U, s, Vh))
    V = _T(Vh)
    m, k, n = U.shape[-2], s.shape[-1], V.shape[-2]
    dA = tan.lead(ra, U.shape[:-2] + (m, n))
    if hermitian:
        dA = _sym(dA)
    dP = _T(U) @ dA @ V
    off = ~np.eye(k, dtype=bool)
    s2 = s * s
    with np.errstate(divide="ignore"):
        F = np.where(off, 1.0 / np.where(off, s2[..., None, :] - s2[..., :, None], 1.0), 0.0)
    dU = U @ (F * (dP * s[..., None, :] + s[..., :, None] * _T(dP)))
    dV = V @ (F * (s[..., :, None] * dP + _T(dP) * s[..., None, :]))
    if m > k:
        dAV = dA @ V
        dU = dU + (dAV - U @ (_T(U) @ dAV)) / s[..., None, :]
    if n > k:
        dAU = _T(dA) @ U
        dV = dV + (dAU - V @ (Vh @ dAU)) / s[..., None, :]
    p = tan.p
    # full_matrices: the extra columns of U / rows of Vh are any basis of the
    # complement; as in the reverse rule they are held fixed (tangent zero)
    sU, sS, sVh = shapes
    full_U = np.zeros((p,) + tuple(sU))
    full_U[..., :k] = dU
    full_Vh = np.zeros((p,) + tuple(sVh))
    full_Vh[..., :k, :] = _T(dV)
    tan.put(r + 1, full_U)
    tan.put(r + 2, np.einsum("...ii->...i", dP))
    tan.put(r + 3, full_Vh)


def _svd2(P, u):
    # the tangent of _svd_backward(U, s, Vh, gU, gS, gVh) term by term;
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
    P.add(qa, _sym(t) if hermitian else t)


def _svd_graph(W, r, u):
    # gA for A = U diag(s) Vh, reduced to k = min(m, n) (as _svd_backward)
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
        UtgU = tg.matmul(_tT(U), gU)
        t = F * (UtgU - _tT(UtgU)) * sj
        inner = t if inner is None else inner + t
        if m > k:  # (I - U U^T) gU S^-1 V^T: the part of gU outside U's span
            terms.append(tg.matmul((gU - tg.matmul(U, UtgU)) / sj, Vh))
    if gVh is not None:
        VtgV = tg.matmul(Vh, _tT(gVh))
        t = si * (F * (VtgV - _tT(VtgV)))
        inner = t if inner is None else inner + t
        if n > k:  # U S^-1 gV^T (I - V V^T)
            terms.append(tg.matmul(U, (gVh - tg.matmul(tg.matmul(gVh, _tT(Vh)), Vh)) / si))
    g = tg.matmul(tg.matmul(U, inner), Vh) if inner is not None else None
    for t in terms:
        g = t if g is None else g + t
    if g is None:
        return
    W.add(qa, _flat(_sym_t(g) if hermitian else g))


_SVD = register("LinalgSvd", C.K_HOST, C.SVD, np.linalg.svd, host_vjp=_svd_vjp, reads="",
                not_replayable="multi-output host op",
                jvp=_svd_jvp, second=_svd2, graph_vjp=_svd_graph)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """``numpy.linalg.svd``: ``(U, S, Vh)`` as three outputs of one record
    (slots 0, 1, 2), or ``S`` alone with ``compute_uv=False``; batched.

    The gradient is the standard one for the reduced SVD, with the extra terms
    for non-square matrices.  With ``full_matrices=True`` and ``m != n`` the
    last columns of U (rows of Vh) are any basis of a complement: as PyTorch
    does, only the first ``min(m, n)`` of them carry gradient.  Gradients
    through U and Vh are undefined (infinite) for repeated or zero singular
    values, and only defined for functions invariant to the signs of the
    singular-vector pairs; the gradient of S alone is always fine.  With
    ``hermitian=True`` NumPy factors the symmetric matrix of ``a``'s lower
    triangle (through ``eigh``), and the gradient lies on that triangle (as
    for ``eigh``).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = tg.tensor([[3.0, 0.0], [0.0, -2.0]], requires_grad=True)
    >>> U, S, Vh = tg.linalg.svd(A)
    >>> S
    tensor([3.0, 2.0], grad_fn=<LinalgSvdBackward>)
    >>> S.sum().backward()           # d sum(S) / dA = U Vh
    >>> A.grad
    tensor([[1.0, 0.0],
            [0.0, -1.0]])
    """
    ad = _data(a)
    if not _needs_grad(a):
        out = np.linalg.svd(ad, full_matrices, compute_uv, hermitian)
        return SVDResult(*map(_plain, out)) if compute_uv else _plain(out)
    if np.ndim(ad) < 2:
        raise np.linalg.LinAlgError(
            f"{np.ndim(ad)}-dimensional array given. Array must be at least two-dimensional")
    if hermitian:
        a = _triangle_read(a)
        ad = _data(a)
    U, s, Vh = np.linalg.svd(ad, full_matrices and compute_uv, True, hermitian)
    k = s.shape[-1]
    saved = (hermitian, (U.shape, s.shape, Vh.shape), U[..., :k], s, Vh[..., :k, :])
    outs = _record_outputs(_SVD, (a,), (U, s, Vh), saved)
    return SVDResult(*outs) if compute_uv else outs[1]


def svdvals(x):
    """``numpy.linalg.svdvals``: the singular values, differentiable (the
    gradient is ``U diag(gS) Vh``, fine for repeated values too).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.linalg.svdvals(tg.tensor([[0.0, 2.0], [1.0, 0.0]]))
    tensor([2.0, 1.0])
    """
    return svd(x, compute_uv=False)
