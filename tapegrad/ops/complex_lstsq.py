"""``numpy.linalg.qr``, ``pinv`` and ``lstsq`` on complex tensors.

* ``pinv`` and ``lstsq`` go through the real embedding ``[[Ar, -Ai], [Ai, Ar]]``
  of A (:func:`complex_linalg.embed`): the embedding maps products and
  conjugate transposes onto real ones, so the Moore-Penrose conditions of
  ``pinv(A)`` are those of ``pinv(embed(A))`` and the pseudo-inverse of the
  embedding is the embedding of the pseudo-inverse; a least-squares problem
  ``min |A x - b|`` is the real one ``min |embed(A) [xr; xi] - [br; bi]|``,
  with the same minimum-norm solution and residuals.  Their singular values
  are A's, each twice, so the cutoffs are NumPy's for A (passed explicitly).
  The real ops have second-order rules: ``tg.hessian``, ``hvp`` and
  ``create_graph`` go through them, exact where the rank is constant.

* ``qr``: LAPACK (and so NumPy and PyTorch) makes R's diagonal real, which
  fixes the factors up to the signs of that diagonal (constant nearby), so
  the derivative is defined; it is a host record with its complex VJP
  (``tg.Function``), first order only.  The VJP is PyTorch's: for
  ``m >= n``, ``M = gR R^H - Q^H gQ``, ``N`` the Hermitian matrix with M's
  strict upper triangle and the real part of its diagonal, and
  ``gA = (gQ + Q N) R^-H``; for ``m < n`` the first m columns as a square
  QR and the rest through ``R[:, m:] = Q^H A[:, m:]``.
"""
import numpy as np

from .function import Function
from . import complex_linalg as ZL
from . import complex_tensor as Z
from . import matrix as L


def _matrix(a, name):
    if np.ndim(a) < 2:
        raise np.linalg.LinAlgError(f"{np.ndim(a)}-dimensional array given. Array must be "
                                    "at least two-dimensional")
    return np.shape(a)[-2:]


# -- pinv, lstsq: through the real embedding --------------------------------------------
def pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """``numpy.linalg.pinv`` of a complex matrix (batched), through the real
    embedding: exact first and second derivatives where the rank is constant
    (Golub and Pereyra), as the real pseudo-inverse's.  With
    ``hermitian=True`` only the lower triangle is read, as NumPy's."""
    a = ZL._z(a)
    m, n = _matrix(a, "pinv")
    if rcond is not None and rtol is not None:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    cut = rcond if rcond is not None else rtol if rtol is not None else \
        max(m, n) * np.finfo(np.float64).eps   # NumPy's default, for A (not its embedding)
    if not ZL._needs(a):
        return ZL._const(np.linalg.pinv(ZL._value(a), rcond=cut, hermitian=hermitian))
    if hermitian:   # NumPy reads a's lower triangle: the embedding of what it reads
        a = ZL._hermitian_read(a)
    x = L.pinv(ZL.embed(a), rcond=cut, hermitian=hermitian)   # (..., 2n, 2m)
    return ZL._parts(x[..., :, :m], n, -2)


def lstsq(a, b, rcond=None):
    """``numpy.linalg.lstsq`` with a complex matrix or right-hand side:
    ``(x, residuals, rank, s)`` as NumPy's (2-D ``a``, 1-D or 2-D ``b``).
    ``x`` and the residuals (real, when NumPy returns them) carry gradient in
    ``a`` and ``b``, to first and second order, through the real embedding;
    ``rank`` and ``s`` are NumPy's plain values."""
    ad, bd = ZL._data(a), ZL._data(b)
    if np.ndim(ad) != 2:
        raise np.linalg.LinAlgError(f"{np.ndim(ad)}-dimensional array given. Array must be "
                                    "two-dimensional")
    x, res, rank, s = np.linalg.lstsq(ad, bd, rcond)
    if not ZL._needs(a, b):
        return ZL._const(x), ZL._const(np.real(res)), rank, s
    m, n = ad.shape
    cut = rcond if rcond is not None else np.finfo(np.float64).eps * max(m, n)
    za, zb = ZL._z(a), ZL._z(b)
    from . import shape as S
    rhs = S.concatenate([zb.real, zb.imag], axis=0)
    xe, rese, _, _ = L.lstsq(ZL.embed(za), rhs, cut)
    xz = ZL._parts(xe, n, 0)
    if np.size(res) == 0:
        return xz, ZL._const(np.zeros(0)), rank, s
    return xz, rese, rank, s


# -- qr: a host record with its complex VJP ---------------------------------------------
def _hm(m):
    return np.conj(np.swapaxes(m, -1, -2))


def _qr_tall_vjp(q, r, gq, gr):
    """gA of A = Q R (m >= n, reduced; R's diagonal real)."""
    mm = gr @ _hm(r) - _hm(q) @ gq
    up = np.triu(mm, 1)
    n = mm.shape[-1]
    sym = up + _hm(up) + np.real(np.einsum("...ii->...i", mm))[..., None] * np.eye(n)
    b = gq + q @ sym
    # b R^-H: solve R X^H = b^H
    return _hm(np.linalg.solve(r, _hm(b)))


def _qr_vjp(a, q, r, gq, gr):
    m, n = a.shape[-2], a.shape[-1]
    if m >= n:
        return _qr_tall_vjp(q, r, gq, gr)
    y, gu, gv = a[..., :, m:], gr[..., :, :m], gr[..., :, m:]
    gx = _qr_tall_vjp(q, r[..., :, :m], gq + y @ _hm(gv), gu)
    return np.concatenate([gx, q @ gv], axis=-1)


def _check_rank(r, k):
    d = np.abs(np.einsum("...ii->...i", r[..., :k, :k]))
    if not (d > 0).all():
        raise np.linalg.LinAlgError(
            "linalg.qr: the gradient of the QR factors of a complex matrix needs R's "
            "diagonal nonzero (A of full rank); this matrix is rank-deficient")


class LinalgQrComplex(Function):
    """The QR factors of a complex matrix (first order: a host record)."""

    first_order_only = "qr of a complex tensor"

    @staticmethod
    def forward(ctx, ar, ai, mode):
        a = ar + 1j * ai
        q, r = np.linalg.qr(a, "reduced")
        ctx.a, ctx.q, ctx.r, ctx.mode = a, q, r, mode
        m, n = a.shape[-2:]
        if mode == "complete" and m > n:
            qc, rc = np.linalg.qr(a, "complete")
            ctx.full = qc.shape
            q, r = qc, rc
        parts = lambda z: (np.ascontiguousarray(z.real), np.ascontiguousarray(z.imag))  # noqa
        if mode == "r":
            return parts(r)
        return parts(q) + parts(r)

    @staticmethod
    def backward(ctx, *grads):
        a, q, r = ctx.a, ctx.q, ctx.r
        m, n = a.shape[-2:]
        k = min(m, n)
        if ctx.mode == "r":
            gq, gr = np.zeros(q.shape, complex), ZL._cz(*grads)
        else:
            gq, gr = ZL._cz(grads[0], grads[1]), ZL._cz(grads[2], grads[3])
        if ctx.mode == "complete" and m > n:
            if gq[..., :, n:].any():
                raise RuntimeError(
                    "linalg.qr(mode='complete') of a complex matrix with more rows than "
                    "columns: the last m - n columns of Q are any orthonormal basis of the "
                    "complement, so a loss of them has no gradient; use mode='reduced'")
            gq, gr = gq[..., :, :n], gr[..., :n, :]
        _check_rank(r, k)
        g = _qr_vjp(a, q, r, gq, gr)
        return g.real, g.imag, None


def qr(a, mode="reduced"):
    """``numpy.linalg.qr`` of a complex matrix (batched): ``(Q, R)`` as NumPy's
    (R's diagonal real, as LAPACK makes it), differentiable to first order for
    ``mode='reduced'`` (tall and wide), ``'r'`` and ``'complete'`` (a gradient
    through the complement's columns of Q raises, as for real matrices);
    ``mode='raw'`` gives values only.  The gradient needs A of full rank."""
    if mode not in ("reduced", "complete", "r", "raw"):
        raise ValueError(f"linalg.qr: unrecognized mode {mode!r}")
    a = ZL._z(a)
    _matrix(a, "qr")
    if not ZL._needs(a):
        out = np.linalg.qr(ZL._value(a), mode)
        if mode == "raw":
            return out
        return ZL._const(out) if mode == "r" else L.QRResult(*map(ZL._const, out))
    if mode == "raw":
        raise NotImplementedError(
            "linalg.qr(mode='raw') of a complex tensor that requires grad is not "
            "differentiable (Householder reflectors); use mode='reduced', or z.detach()")
    outs = LinalgQrComplex.apply(a.real, a.imag, mode)
    if mode == "r":
        return Z.ComplexTensor(*outs)
    qr_, qi, rr, ri = outs
    return L.QRResult(Z.ComplexTensor(qr_, qi), Z.ComplexTensor(rr, ri))


FUNCTIONS = {np.linalg.qr: qr, np.linalg.pinv: pinv, np.linalg.lstsq: lstsq}
Z.FUNCTIONS.update(FUNCTIONS)
ZL.FIRST_ORDER_ONLY.add(np.linalg.qr)
