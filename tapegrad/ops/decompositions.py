"""The decompositions with several outputs -- QR, SVD (and svdvals), the
pseudo-inverse and least squares -- as host records whose VJPs run in NumPy;
``ops/matrix.py`` re-exports them with the rest of the linear algebra.
"""
import numpy as np

from ..kernels import codes as C
from ..core.tensor import _plain
from .host_records import (_T, _data, _f64, _host, _needs_grad, _record_outputs, _slot_grads, _sym,
                           _triangle_read)
from ..core.registry import CONST, register


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


class SVDResult(tuple):
    """``(U, S, Vh)``, unpacking as NumPy's ``SVDResult`` does."""
    __slots__ = ()

    def __new__(cls, U, S, Vh):
        return tuple.__new__(cls, (U, S, Vh))

    U = property(lambda self: self[0])
    S = property(lambda self: self[1])
    Vh = property(lambda self: self[2])


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


_QR = register("LinalgQr", C.K_HOST, C.QR, np.linalg.qr, host_vjp=_qr_vjp, reads="",
               not_replayable="multi-output host op")


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


_SVD = register("LinalgSvd", C.K_HOST, C.SVD, np.linalg.svd, host_vjp=_svd_vjp, reads="",
                not_replayable="multi-output host op")


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

def _pinv_vjp_core(A, X, G):
    """gA for X = pinv(A) (constant rank), G the gradient of X."""
    m, n = A.shape[-2], A.shape[-1]
    XT = _T(X)
    g = -XT @ G @ XT
    g = g + (np.eye(m) - A @ X) @ _T(G) @ X @ XT
    g = g + XT @ X @ _T(G) @ (np.eye(n) - X @ A)
    return g


def _pinv_vjp(tape, adj, r):
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    if tape.op[ra] == CONST:
        return
    hermitian, shape_a, shape_x = tape.host[r]
    A = adj.value(tape, ra, shape_a)
    X = adj.value(tape, r, shape_x)
    g = _pinv_vjp_core(A, X, adj[r].reshape(shape_x))
    adj.add(ra, _sym(g) if hermitian else g)


_PINV = register("LinalgPinv", C.K_HOST, C.PINV, np.linalg.pinv, host_vjp=_pinv_vjp, reads="xy",
                 replay=lambda xs, h: np.linalg.pinv(xs[0], hermitian=h[0]), host_extra=1,
                 file_arity=1)


def pinv(a, rcond=None, hermitian=False, **kwargs):
    """``numpy.linalg.pinv`` (Moore-Penrose pseudo-inverse), batched.

    The gradient is the derivative of the pseudo-inverse where the rank is
    constant (Golub and Pereyra): right for full-rank matrices, and for
    rank-deficient ones whose small singular values are exactly zero, not
    merely below ``rcond``.  With ``hermitian=True`` only ``a``'s lower
    triangle is read, as NumPy's, and the gradient lies on it (as ``eigh``'s).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor([[2.0], [0.0]], requires_grad=True)
    >>> p = tg.linalg.pinv(a)
    >>> p
    tensor([[0.5, 0.0]], grad_fn=<LinalgPinvBackward>)
    >>> p[0, 0].backward()
    >>> a.grad
    tensor([[-0.25],
            [0.0]])
    """
    if rcond is not None:
        kwargs["rcond"] = rcond
    if hermitian:
        a = _triangle_read(a)
    return _host(_PINV, lambda d: np.linalg.pinv(d, hermitian=hermitian, **kwargs), (a,),
                 extra=(hermitian,))


def _lstsq_vjp(tape, adj, r):
    a0 = tape.arg0[r]
    ra, rb = tape.args[a0], tape.args[a0 + 1]
    cutoff, shapes, A, b, x = tape.host[r]
    gx, gres = (_slot_grads(adj, r, shapes) + [None])[:2]
    A, b, x = _f64(A, b, x)
    vector = b.ndim == 1
    if vector:
        b, x = b[:, None], x[:, None]
        gx = None if gx is None else gx[:, None]
    gA, gb = np.zeros(A.shape), np.zeros(b.shape)
    if gx is not None:
        # x = pinv(A) b: through pinv's derivative (constant rank)
        X = np.linalg.pinv(A, rcond=cutoff)
        gA += _pinv_vjp_core(A, X, gx @ _T(b))
        gb += _T(X) @ gx
    if gres is not None:
        # residuals |b - A x|^2 at the minimiser x: A^T (b - A x) = 0, so x's
        # own change does not contribute
        wr = 2.0 * (b - A @ x) * gres
        gb += wr
        gA -= wr @ _T(x)
    if tape.op[ra] != CONST:
        adj.add(ra, gA)
    if tape.op[rb] != CONST:
        adj.add(rb, gb[:, 0] if vector else gb)


_LSTSQ = register("LinalgLstsq", C.K_HOST, C.LSTSQ, np.linalg.lstsq, host_vjp=_lstsq_vjp,
                  reads="", not_replayable="multi-output host op")


def lstsq(a, b, rcond=None):
    """``numpy.linalg.lstsq``: ``(x, residuals, rank, s)`` like NumPy (2-D
    ``a``, 1-D or 2-D ``b``, no batching, as NumPy).

    ``x`` is differentiable in ``a`` and ``b`` (through the pseudo-inverse's
    derivative: right for full column rank, and where the rank is constant),
    and so are the ``residuals`` when NumPy returns them (full column rank,
    more rows than columns); ``rank`` and ``s`` are plain arrays.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    >>> b = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> x, res, rank, s = tg.linalg.lstsq(A, b)
    >>> x
    tensor([0.5, 2.0], grad_fn=<LinalgLstsqBackward>)
    >>> res
    tensor([9.0], grad_fn=<LinalgLstsqBackward>)
    >>> res.backward()              # d |b - A x|^2 / db = 2 (b - A x)
    >>> b.grad
    tensor([0.0, 0.0, 6.0])
    """
    ad, bd = _data(a), _data(b)
    x, res, rank, s = np.linalg.lstsq(ad, bd, rcond)
    if not _needs_grad(a, b):
        return _plain(x), _plain(res), rank, s
    m, n = ad.shape
    cutoff = np.finfo(np.result_type(ad, bd, np.float32)).eps * max(m, n) \
        if rcond is None else rcond
    outs = (x, res) if res.size else (x,)
    saved = (cutoff, tuple(o.shape for o in outs), np.array(ad), np.array(bd), x)
    got = _record_outputs(_LSTSQ, (a, b), outs, saved)
    return got[0], got[1] if res.size else _plain(res), rank, s
