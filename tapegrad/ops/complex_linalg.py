"""``numpy.linalg`` on complex tensors.

Two kinds of op, chosen by what keeps second derivatives exact:

* Ops with a real counterpart that has a second-order rule are written as
  real recorded ops on the parts, so ``tg.hessian``, ``hvp``, ``jvp`` and
  ``create_graph`` work through them as through the real ops:

  - ``inv`` and ``solve`` through the real embedding ``[[Ar, -Ai], [Ai, Ar]]``
    of A, which maps complex products, inverses and solves onto real ones
    exactly (``inv`` of the embedding is the embedding of the inverse);
  - ``det``, ``slogdet`` and ``cholesky`` by block elimination: the Schur
    complement ``S = A22 - A21 A11^-1 A12`` (a complex solve through the
    embedding) halves the size at each level, ``det A = det A11 det S``,
    down to 1 x 1 and 2 x 2 blocks given by their formulas.  The rows are
    first put in the order partial pivoting picks (from the values; a guard
    in a trace), so each block is the one Gaussian elimination with partial
    pivoting would factor.  The embedding alone cannot give the determinant:
    its determinant is ``|det A|^2``, without the phase.
  - ``norm`` through ``|z|`` for every order but 2, -2 and ``'nuc'``.

* Decompositions whose outputs are fixed only up to a phase (``eigh``,
  ``svd``, ``eig`` and the norms of singular values) are host records of
  their own (``tg.Function``), not real ops on the embedding, which would
  give them exactly repeated eigenvalues (each complex one twice), where
  the real ops' derivatives divide by zero.  Each has its complex VJP
  (``backward``), its forward rule (``jvp``, for ``tg.jvp``; eigenvector
  tangents in a stated gauge: eig's keeps LAPACK's normalisation, so its
  tangent is NumPy's derivative) and its VJP on tensors of the graph
  (``vjp_ops``, in the record's own outputs), so ``create_graph=True``
  differentiates their gradients again, to any order.  ``tg.hessian`` and
  ``tg.hvp`` (forward over reverse) have no rule for them and raise.  Like
  PyTorch, their gradient raises when the loss depends on the free phase
  of the vectors.

Gradients follow the complex tensors' convention (PyTorch's): for a real
loss L of ``A = Ar + i Ai``, ``A.grad = dL/dAr + i dL/dAi``.
"""
import numbers

import numpy as np

from .function import Function
from ..core.tape import current
from ..core.tensor import Tensor, _plain
from . import complex_tensor as Z
from . import elementwise as E
from . import matrix as L
from . import reductions as Rd
from . import shape as S
from .guarded import on_values


# -- operands --------------------------------------------------------------------------
def _z(x):
    """A ComplexTensor of any operand (a real one gets zero imaginary part)."""
    return Z._as_z(x)


def _value(z):
    return z.numpy()  # built part by part: no NaN from 1j * inf


def _needs(*xs):
    """Whether any operand carries a gradient (otherwise NumPy computes the result)."""
    if not current().enabled:
        return False
    for x in xs:
        if isinstance(x, Z.ComplexTensor) and x.requires_grad:
            return True
        if isinstance(x, Tensor) and x._requires_grad:
            return True
    return False


def _data(x):
    if isinstance(x, Z.ComplexTensor):
        return _value(x)
    return np.asarray(x._data if isinstance(x, Tensor) else x)


def _const(a):
    """A result without gradient: a ComplexTensor, or a real tensor for real data."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return Z.ComplexTensor.constant(a)
    return _plain(np.array(a, np.float64))


def _square(z, name):
    shape = np.shape(z)
    if len(shape) < 2:
        raise np.linalg.LinAlgError(f"{len(shape)}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if shape[-1] != shape[-2]:
        raise np.linalg.LinAlgError(f"linalg.{name}: last 2 dimensions of the array must be "
                                    f"square, got shape {tuple(shape)}")
    return shape[-1]


def embed(z):
    """The real ``(..., 2n, 2m)`` matrix ``[[Ar, -Ai], [Ai, Ar]]`` of the complex
    ``(..., n, m)`` tensor z: ``embed(A) @ embed(B) = embed(A @ B)`` and
    ``inv(embed(A)) = embed(inv(A))``."""
    re, im = z.real, z.imag
    top = S.concatenate([re, E.negative(im)], axis=-1)
    bottom = S.concatenate([im, re], axis=-1)
    return S.concatenate([top, bottom], axis=-2)


def _parts(t, n, axis):
    """The two halves (real, imaginary) of a real tensor along ``axis``."""
    idx = [slice(None)] * t.ndim
    idx[axis] = slice(0, n)
    lo = t[tuple(idx)]
    idx[axis] = slice(n, 2 * n)
    return Z.ComplexTensor(lo, t[tuple(idx)])


def _H(z):
    """The conjugate transpose over the last two axes."""
    return Z.ComplexTensor(S.swapaxes(z.real, -1, -2), E.negative(S.swapaxes(z.imag, -1, -2)))


# -- inv, solve --------------------------------------------------------------------------
def inv(a):
    """``numpy.linalg.inv`` of a complex matrix (batched): the first block
    column of the inverse of its real embedding, exact to first and second
    order."""
    a = _z(a)
    n = _square(a, "inv")
    if not _needs(a):
        return _const(np.linalg.inv(_value(a)))
    y = L.inv(embed(a))
    return _parts(y[..., :, :n], n, -2)


def solve(a, b):
    """``numpy.linalg.solve`` with a complex matrix or right-hand side (batched;
    ``b`` is one vector when it is 1-D, as in NumPy 2)."""
    if not _needs(a, b):
        return _const(np.linalg.solve(_data(a), _data(b)))
    if not Z.is_complex(a):  # a real matrix: one real solve per part
        b = _z(b)
        return Z.ComplexTensor(L.solve(a, b.real), L.solve(a, b.imag))
    a = _z(a)
    n = _square(a, "solve")
    b = _z(b)
    vector = b.ndim == 1
    rhs = S.concatenate([b.real, b.imag], axis=-1 if vector else -2)
    x = L.solve(embed(a), rhs)
    return _parts(x, n, -1 if vector else -2)


# -- block elimination: det, slogdet, cholesky ------------------------------------------
def _pivot_order(ar, ai):
    """The row permutation of Gaussian elimination with partial pivoting of
    each matrix ``ar + i ai`` of a batch, as permutation matrices, their
    determinants (+-1) and whether some pivot is exactly zero (singular)."""
    a = np.array(ar + 1j * ai)
    shape = a.shape
    n = shape[-1]
    a = a.reshape((-1, n, n))
    perms = np.zeros(a.shape)
    signs = np.ones(a.shape[0])
    singular = False
    for b in range(a.shape[0]):
        m = a[b].copy()
        order = np.arange(n)
        for k in range(n):
            p = k + int(np.argmax(np.abs(m[k:, k])))
            if p != k:
                m[[k, p]] = m[[p, k]]
                order[[k, p]] = order[[p, k]]
                signs[b] = -signs[b]
            if m[k, k] == 0:
                singular = True
                continue
            m[k + 1:, k:] -= np.outer(m[k + 1:, k] / m[k, k], m[k, k:])
        perms[b, np.arange(n), order] = 1.0
    return perms.reshape(shape), signs.reshape(shape[:-2]), singular


def _blocks(a, n, k):
    return a[..., :k, :k], a[..., :k, k:], a[..., k:, :k], a[..., k:, k:]


def _det_leaves(a, n, out):
    """Append to ``out`` the determinants of the diagonal blocks whose product
    is ``det a`` (a pivoted, so that no leading block is singular)."""
    if n == 1:
        out.append(a[..., 0, 0])
        return
    if n == 2:
        out.append(a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0])
        return
    k = n // 2
    a11, a12, a21, a22 = _blocks(a, n, k)
    _det_leaves(a11, k, out)
    _det_leaves(a22 - a21 @ solve(a11, a12), n - k, out)


def _product(zs):
    out = zs[0]
    for z in zs[1:]:
        out = out * z
    return out


def _pivoted(a, name):
    """``(P a, det P)`` with P the rows' pivoting order (guarded in a trace)."""
    perm, sign, singular = on_values(_pivot_order, a.real, a.imag)
    if singular:
        raise np.linalg.LinAlgError(
            f"linalg.{name}: the complex matrix is singular (a zero pivot), where the "
            "gradient of the determinant is not implemented; compute it on "
            "z.detach() for the value alone")
    return perm @ a, sign


def det(a):
    """``numpy.linalg.det`` of a complex matrix (batched), by block
    elimination in the pivoting order: exact first and second derivatives."""
    a = _z(a)
    n = _square(a, "det")
    if not _needs(a) or n == 0:  # an empty matrix: determinant 1, nothing to differentiate
        return _const(np.linalg.det(_value(a)))
    pa, sign = _pivoted(a, "det")
    leaves = []
    _det_leaves(pa, n, leaves)
    return _product(leaves) * sign


def slogdet(a):
    """``numpy.linalg.slogdet`` of a complex matrix: ``(sign, logabsdet)``,
    sign the complex phase ``det / |det|`` and logabsdet real; both carry
    gradient (the phase's is that of ``arg det``)."""
    a = _z(a)
    n = _square(a, "slogdet")
    if not _needs(a) or n == 0:
        s, l = np.linalg.slogdet(_value(a))
        return _const(s), _const(l)
    pa, sign = _pivoted(a, "slogdet")
    leaves = []
    _det_leaves(pa, n, leaves)
    mags = [Z.absolute(d) for d in leaves]
    logabs = Rd.sum(S.stack([E.log(m) for m in mags], axis=-1), axis=-1)
    phase = _product([d / m for d, m in zip(leaves, mags)]) * sign
    return phase, logabs


def _cholesky_rec(a, n):
    if n == 1:
        d = E.sqrt(a.real[..., :1, :1])
        return Z.ComplexTensor(d, E.multiply(d, 0.0))
    k = n // 2
    a11, _, a21, a22 = _blocks(a, n, k)
    l11 = _cholesky_rec(a11, k)
    l21 = _H(solve(l11, _H(a21)))          # A21 L11^-H
    l22 = _cholesky_rec(a22 - l21 @ _H(l21), n - k)
    zeros = np.zeros(np.shape(a11)[:-1] + (n - k,))
    top = Z.ComplexTensor(S.concatenate([l11.real, zeros], -1),
                          S.concatenate([l11.imag, zeros], -1))
    bottom = Z.ComplexTensor(S.concatenate([l21.real, l22.real], -1),
                             S.concatenate([l21.imag, l22.imag], -1))
    return Z.ComplexTensor(S.concatenate([top.real, bottom.real], -2),
                           S.concatenate([top.imag, bottom.imag], -2))


def _hermitian_read(a, UPLO="L"):
    """The Hermitian matrix NumPy's eigh and cholesky factor: the strict
    triangle ``UPLO`` of ``a``, its conjugate transpose, and the real part of
    the diagonal (LAPACK reads nothing else).  Recorded, so the gradient is
    that of NumPy's function for any input: it lies on the triangle read."""
    n = a.shape[-1]
    k = -1 if UPLO == "L" else 1
    cut = np.tril if UPLO == "L" else np.triu
    strict = Z.ComplexTensor(cut(a.real, k), cut(a.imag, k))
    return strict + _H(strict) + np.eye(n) * a.real


def cholesky(a, upper=False):
    """``numpy.linalg.cholesky`` of a complex Hermitian positive-definite
    matrix (batched): the lower factor L with ``A = L L^H`` (``upper=True``:
    ``L^H``), by block elimination, exact to first and second order.

    Like NumPy, it reads the lower triangle (and the real part of the
    diagonal), and the gradient is that of NumPy's function: it lies on the
    lower triangle, as the real op's.  For a Hermitian A, ``(g + g^H) / 2``
    of it is the Hermitian form PyTorch gives (the same derivative along
    every Hermitian perturbation, all a Cholesky factor of a Hermitian matrix
    responds to).
    """
    a = _z(a)
    n = _square(a, "cholesky")
    value = np.linalg.cholesky(_value(a))   # NumPy's errors (not positive definite)
    if not _needs(a) or n == 0:
        return _const(_Hm(value) if upper else value)
    out = _cholesky_rec(_hermitian_read(a), n)
    return _H(out) if upper else out


# -- norms ------------------------------------------------------------------------------
def norm(x, ord=None, axis=None, keepdims=False):
    """``numpy.linalg.norm`` of a complex tensor: every order is a norm of
    ``|x|`` except the matrix norms 2, -2 and ``'nuc'``, of the singular
    values."""
    from . import composite as K
    x = _z(x)
    nd = x.ndim
    ax = (axis,) if isinstance(axis, (int, np.integer)) else axis
    matrix = (ax is not None and len(ax) == 2) or (ax is None and ord is not None and nd == 2)
    if matrix and ord in (2, -2, "nuc"):
        ax = (-2, -1) if ax is None else tuple(ax)
        moved = Z.ComplexTensor(S.moveaxis(x.real, ax, (-2, -1)),
                                S.moveaxis(x.imag, ax, (-2, -1)))
        s = svdvals(moved)
        out = Rd.sum(s, axis=-1) if ord == "nuc" else (Rd.max(s, axis=-1) if ord == 2
                                                       else Rd.min(s, axis=-1))
        if keepdims:
            shape = list(np.shape(x))
            for a_ in ax:
                shape[a_] = 1
            out = out.reshape(tuple(shape))
        return out
    return K.norm(Z.absolute(x), ord=ord, axis=axis, keepdims=keepdims)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    from . import composite as K
    return K.vector_norm(Z.absolute(_z(x)), axis=axis, keepdims=keepdims, ord=ord)


# -- decompositions: complex VJPs, first order ------------------------------------------
def _Hm(m):
    return np.conj(np.swapaxes(m, -1, -2))


def _reciprocal_gaps(w):
    """``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal, 0 on it."""
    diff = w[..., None, :] - w[..., :, None]
    n = w.shape[-1]
    off = ~np.eye(n, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)


def _phase_check(imag_diag, scale, name, what):
    """PyTorch's check: the loss must not depend on the vectors' free phases."""
    tol = 1e-8 * max(1.0, float(np.max(np.abs(scale), initial=0.0)))
    if np.max(np.abs(imag_diag), initial=0.0) > tol:
        raise RuntimeError(
            f"linalg.{name}: the {what} of a complex matrix are fixed only up to a phase "
            "(multiplication of each by e^(i phi)), and this loss depends on that phase, "
            "so its gradient is not defined. Use a loss invariant to it (|v|, v v^H, the "
            "values alone...)")


def _cz(g_re, g_im):
    return g_re + 1j * g_im


def _no_hessian(what):
    """What tg.hessian / tg.hvp say at a decomposition's record."""
    return (f"{what} has no forward-over-reverse rule, which tg.hessian and tg.hvp use; "
            "its second derivatives come from create_graph=True (tg.autograd.grad(..., "
            "create_graph=True), then differentiate the gradient), and tg.jvp goes through it")


def _diag(m):
    return np.einsum("...ii->...i", m)


# the decompositions' VJPs on tensors of the graph (``vjp_ops``, for create_graph=True)
def _pieces(u, shapes):
    """The outputs' adjoints, flat and concatenated in ``u``, one per shape."""
    out, at = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        out.append(np.reshape(u[at:at + n], shape))
        at += n
    return out


def _gaps_t(w):
    """``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal, 0 on it, of a real or
    complex tensor ``w`` (distinct values: the first order's check)."""
    n = w.shape[-1]
    diff = np.expand_dims(w, -2) - np.expand_dims(w, -1)
    return (1.0 - np.eye(n)) / (diff + np.eye(n))


def _diag_t(m):
    """The diagonal of a real or complex tensor over its last two axes."""
    if isinstance(m, Z.ComplexTensor):
        return Z.ComplexTensor(_diag_t(m.real), _diag_t(m.imag))
    return Rd.sum(m * np.eye(m.shape[-1]), axis=-1)


class LinalgEighComplex(Function):
    no_second_order = _no_hessian("eigh of a complex tensor")

    @staticmethod
    def forward(ctx, ar, ai, uplo):
        w, v = np.linalg.eigh(ar + 1j * ai, uplo)
        ctx.w, ctx.v = w, v
        return w, np.ascontiguousarray(v.real), np.ascontiguousarray(v.imag)

    @staticmethod
    def backward(ctx, gw, gvr, gvi):
        w, v = ctx.w, ctx.v
        c = _Hm(v) @ _cz(gvr, gvi)
        _phase_check(np.imag(np.einsum("...ii->...i", c)), c, "eigh", "eigenvectors")
        inner = _reciprocal_gaps(w) * (c - _Hm(c)) * 0.5
        inner = inner + gw[..., None] * np.eye(w.shape[-1])
        g = v @ inner @ _Hm(v)
        g = 0.5 * (g + _Hm(g))   # the Hermitian gradient, as the real op's symmetric one
        return g.real, g.imag, None

    @staticmethod
    def jvp(ctx, dar, dai, _uplo):
        # P = V^H herm(dA) V: dw = diag(P) (real), V^H dV = F o P with
        # F_ij = 1 / (w_j - w_i) and a zero diagonal (each vector's phase held),
        # the transpose of backward
        w, v = ctx.w, ctx.v
        da = _cz(dar, dai)
        P = _Hm(v) @ (0.5 * (da + _Hm(da))) @ v
        dv = v @ (_reciprocal_gaps(w) * P)
        return np.real(_diag(P)), dv.real, dv.imag

    vjp_ops_outputs = True

    @staticmethod
    def vjp_ops(ctx, u, _inputs, outputs):
        """backward on tensors of the graph (``create_graph=True``), in the
        record's own outputs: a further order differentiates through it again."""
        w = outputs(0, ctx.w)
        v = Z.ComplexTensor(outputs(1, ctx.v.real), outputs(2, ctx.v.imag))
        gw, gvr, gvi = _pieces(u, (ctx.w.shape, ctx.v.shape, ctx.v.shape))
        c = _H(v) @ Z.ComplexTensor(gvr, gvi)
        inner = (c - _H(c)) * (_gaps_t(w) * 0.5) + \
            np.expand_dims(gw, -1) * np.eye(ctx.w.shape[-1])
        g = v @ inner @ _H(v)
        g = (g + _H(g)) * 0.5
        return g.real, g.imag, None


def eigh(a, UPLO="L"):
    """``numpy.linalg.eigh`` of a complex Hermitian matrix: real eigenvalues and
    complex eigenvectors, differentiable in reverse and forward mode and
    with ``create_graph=True`` (not by ``tg.hessian``).  A loss of the
    eigenvectors must not depend on their phases (else the gradient
    raises, as PyTorch's); eigenvector gradients need distinct eigenvalues.
    Like NumPy, it reads the triangle ``UPLO`` (and the diagonal's real
    part), and the gradient is that of NumPy's function, on that triangle
    (see :func:`cholesky` for its Hermitian form)."""
    a = _z(a)
    _square(a, "eigh")
    if not _needs(a):
        w, v = np.linalg.eigh(_value(a), UPLO)
        return _const(w), _const(v)
    h = _hermitian_read(a, UPLO)
    w, vr, vi = LinalgEighComplex.apply(h.real, h.imag, UPLO)
    return w, Z.ComplexTensor(vr, vi)


def eigvalsh(a, UPLO="L"):
    return eigh(a, UPLO)[0]


def _svd_backward_complex(u, s, vh, gu, gs, gvh):
    """gA for A = U diag(s) Vh, complex, reduced (k = min(m, n))."""
    m, k, n = u.shape[-2], s.shape[-1], vh.shape[-1]
    inner = np.zeros(s.shape + (k,), complex)
    if gs is not None:
        inner = inner + gs[..., None] * np.eye(k)
    extra = 0.0
    if gu is not None or gvh is not None:
        s2 = s * s
        F = _reciprocal_gaps(s2)
        cu = _Hm(u) @ gu if gu is not None else np.zeros(inner.shape, complex)
        cv = vh @ _Hm(gvh) if gvh is not None else np.zeros(inner.shape, complex)
        _phase_check(np.imag(np.einsum("...ii->...i", cu + cv)), cu + cv, "svd",
                     "singular vectors")
        inner = inner + F * (cu - _Hm(cu)) * s[..., None, :]
        inner = inner + s[..., :, None] * (F * (cv - _Hm(cv)))
        # the phase of u_i against v_i: determined; put on u (cu's imaginary diagonal)
        inner = inner + 1j * np.imag(np.einsum("...ii->...i", cu))[..., None] * np.eye(k) \
            / s[..., :, None]
        if gu is not None and m > k:
            extra = extra + ((gu - u @ cu) / s[..., None, :]) @ vh
        if gvh is not None and n > k:
            extra = extra + u @ ((gvh - (gvh @ _Hm(vh)) @ vh) / s[..., :, None])
    return u @ inner @ vh + extra


def _svd_vjp_graph(u, s, vh, gu, gs, gvh):
    """:func:`_svd_backward_complex` on tensors of the graph: ``(gA.real, gA.imag)``."""
    m, k, n = u.shape[-2], s.shape[-1], vh.shape[-1]
    si, sj = np.expand_dims(s, -1), np.expand_dims(s, -2)
    if gu is None:   # singular values alone
        g = u @ (np.expand_dims(gs, -1) * vh)
        return g.real, g.imag
    F = _gaps_t(s * s)
    cu, cv = _H(u) @ gu, vh @ _H(gvh)
    inner = F * (cu - _H(cu)) * sj + si * (F * (cv - _H(cv)))
    inner = inner + np.expand_dims(gs, -1) * np.eye(k)
    # the phase of u_i against v_i (cu's imaginary diagonal), on u
    inner = inner + 1j * np.expand_dims(np.imag(_diag_t(cu)), -1) * (np.eye(k) / si)
    g = u @ inner @ vh
    if m > k:
        g = g + ((gu - u @ cu) / sj) @ vh
    if n > k:
        g = g + u @ ((gvh - (gvh @ _H(vh)) @ vh) / si)
    return g.real, g.imag


class LinalgSvdComplex(Function):
    no_second_order = _no_hessian("svd of a complex tensor")

    @staticmethod
    def forward(ctx, ar, ai, full, compute_uv):
        a = ar + 1j * ai
        ctx.full, ctx.only_s = bool(full and compute_uv), not compute_uv
        if not compute_uv:
            u, s, vh = np.linalg.svd(a, full_matrices=False)
            ctx.k = s.shape[-1]
            ctx.f = (u, s, vh)
            ctx.ar, ctx.ai = np.array(ar), np.array(ai)   # vjp_ops factors them again
            return s
        u, s, vh = np.linalg.svd(a, full_matrices=full)
        k = s.shape[-1]
        ctx.k = k
        ctx.f = (u[..., :k], s, vh[..., :k, :])
        ctx.outs = (u, vh)   # as returned (full_matrices: more than k columns / rows)
        return (np.ascontiguousarray(u.real), np.ascontiguousarray(u.imag), s,
                np.ascontiguousarray(vh.real), np.ascontiguousarray(vh.imag))

    @staticmethod
    def backward(ctx, *grads):
        u, s, vh = ctx.f
        k = ctx.k
        if len(grads) == 1:
            g = u @ (grads[0][..., None] * vh)
            return g.real, g.imag, None, None
        gur, gui, gs, gvr, gvi = grads
        gu = _cz(gur, gui)[..., :k]
        gvh = _cz(gvr, gvi)[..., :k, :]
        gu = None if not gu.any() else gu
        gvh = None if not gvh.any() else gvh
        g = _svd_backward_complex(u, s, vh, gu, gs, gvh)
        return g.real, g.imag, None, None

    @staticmethod
    def jvp(ctx, dar, dai, _full, _compute_uv):
        # dP = U^H dA V: ds = Re diag(dP); U^H dU = F o (dP S + S dP^H) and
        # V^H dV = F o (S dP + dP^H S), F_ij = 1 / (s_j^2 - s_i^2), plus the
        # parts of dA V S^-1 outside U's span and of dA^H U S^-1 outside V's
        # (non-square A).  The diagonal of U^H dU is i Im(diag dP) / s and that
        # of V^H dV zero: the phase between u_i and v_i is fixed, each pair's
        # own phase held, as in backward.  Full matrices: the columns past k
        # are held fixed, as in backward.
        u, s, vh = ctx.f
        k = ctx.k
        da = _cz(dar, dai)
        v = _Hm(vh)
        dP = _Hm(u) @ da @ v
        ds = np.real(_diag(dP))
        if ctx.only_s:
            return ds
        F = _reciprocal_gaps(s * s)
        sj, si = s[..., None, :], s[..., :, None]
        dP_h = _Hm(dP)
        om_u = F * (dP * sj + si * dP_h) + 1j * np.imag(_diag(dP))[..., None] * np.eye(k) / si
        du = u @ om_u
        dv = v @ (F * (si * dP + dP_h * sj))
        m, n = u.shape[-2], vh.shape[-1]
        if m > k:
            du = du + (da @ v - u @ dP) / sj
        if n > k:
            dv = dv + (_Hm(da) @ u - v @ dP_h) / sj
        du_full = np.zeros(u.shape[:-1] + ((m,) if ctx.full else (k,)), complex)
        du_full[..., :k] = du
        dvh_full = np.zeros(vh.shape[:-2] + (n if ctx.full else k, n), complex)
        dvh_full[..., :k, :] = _Hm(dv)
        return du_full.real, du_full.imag, ds, dvh_full.real, dvh_full.imag

    vjp_ops_outputs = True

    @staticmethod
    def vjp_ops(ctx, u, inputs, outputs):
        """backward on tensors of the graph (``create_graph=True``), in the
        record's own outputs; with ``compute_uv=False``, in the factors of a
        new record of the same input (the same call to LAPACK: the same
        factors), whose singular vectors enter as ``u_i v_i^H`` only, free of
        their phases."""
        k = ctx.k
        s0 = ctx.f[1]
        if ctx.only_s:
            ur, ui, s, vr, vi = LinalgSvdComplex.apply(inputs(0, ctx.ar), inputs(1, ctx.ai),
                                                       False, True)
            U, Vh = Z.ComplexTensor(ur, ui), Z.ComplexTensor(vr, vi)
            return _svd_vjp_graph(U, s, Vh, None, np.reshape(u, s0.shape), None) + (None, None)
        u0, vh0 = ctx.outs
        ur, ui = outputs(0, u0.real), outputs(1, u0.imag)
        s = outputs(2, s0)
        vr, vi = outputs(3, vh0.real), outputs(4, vh0.imag)
        U = Z.ComplexTensor(ur, ui)[..., :k]
        Vh = Z.ComplexTensor(vr, vi)[..., :k, :]
        gur, gui, gs, gvr, gvi = _pieces(u, (u0.shape, u0.shape, s0.shape, vh0.shape,
                                             vh0.shape))
        gu = Z.ComplexTensor(gur, gui)[..., :k]
        gvh = Z.ComplexTensor(gvr, gvi)[..., :k, :]
        return _svd_vjp_graph(U, s, Vh, gu, gs, gvh) + (None, None)


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """``numpy.linalg.svd`` of a complex matrix (batched): ``(U, S, Vh)``,
    differentiable in reverse and forward mode and with ``create_graph=True``
    (not by ``tg.hessian``).  A loss of U and Vh must not depend on
    the phases of the singular-vector pairs (else the gradient raises, as
    PyTorch's); as for real matrices, only the first ``min(m, n)`` columns
    of U and rows of Vh carry gradient."""
    from .matrix import SVDResult
    a = _z(a)
    if a.ndim < 2:
        raise np.linalg.LinAlgError(f"{a.ndim}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if hermitian:
        raise NotImplementedError(
            "linalg.svd(..., hermitian=True) of a complex tensor is not implemented; "
            "use hermitian=False (the same factors up to phases)")
    if not _needs(a):
        out = np.linalg.svd(_value(a), full_matrices, compute_uv)
        return SVDResult(*map(_const, out)) if compute_uv else _const(out)
    if not compute_uv:
        return LinalgSvdComplex.apply(a.real, a.imag, full_matrices, False)
    ur, ui, s, vr, vi = LinalgSvdComplex.apply(a.real, a.imag, full_matrices, True)
    return SVDResult(Z.ComplexTensor(ur, ui), s, Z.ComplexTensor(vr, vi))


def svdvals(x):
    return svd(x, compute_uv=False)


class LinalgEig(Function):
    no_second_order = _no_hessian("eig")

    @staticmethod
    def forward(ctx, ar, ai):
        a = ar if ai is None else ar + 1j * ai
        w, v = np.linalg.eig(a)
        ctx.w, ctx.v, ctx.complex_in = w, v, ai is not None
        ctx.complex_out = w.dtype.kind == "c"
        if not ctx.complex_out:
            return w, v
        return (np.ascontiguousarray(w.real), np.ascontiguousarray(w.imag),
                np.ascontiguousarray(v.real), np.ascontiguousarray(v.imag))

    @staticmethod
    def backward(ctx, *grads):
        w, v = ctx.w, ctx.v
        if ctx.complex_out:
            gwr, gwi, gvr, gvi = grads
            gw, gv = _cz(gwr, gwi), _cz(gvr, gvi)
        else:
            gw, gv = grads
        vhv = _Hm(v) @ v
        c = _Hm(v) @ gv
        _phase_check(np.imag(np.einsum("...ii->...i", c)), c, "eig", "eigenvectors")
        re_diag = np.real(np.einsum("...ii->...i", c))
        inner = np.conj(_reciprocal_gaps(w)) * (c - vhv * re_diag[..., None, :])
        inner = inner + gw[..., None] * np.eye(w.shape[-1])
        g = np.linalg.solve(_Hm(v), inner @ _Hm(v))   # V^-H (...) V^H
        if not ctx.complex_in:
            return np.real(g), None
        return g.real, g.imag

    @staticmethod
    def jvp(ctx, dar, dai):
        # E = V^-1 dA V: dw = diag(E), dV = V (F o E + D), F_ij = 1 / (w_j - w_i)
        # and D diagonal.  Re D keeps each vector at unit length, Re(v_i^H dv_i)
        # = 0; Im D keeps LAPACK's phase, the largest entry of each vector
        # real.  backward (which raises for a loss of the phase) is the
        # transpose of this for every loss it accepts.
        w, v = ctx.w.astype(complex), ctx.v.astype(complex)
        da = dar if dai is None else _cz(dar, dai)
        E = np.linalg.solve(v, da @ v)
        X = v @ (_reciprocal_gaps(w) * E)
        re = -np.real(np.sum(np.conj(v) * X, axis=-2))
        top = np.argmax(np.abs(v), axis=-2)[..., None, :]
        vk = np.take_along_axis(v, top, -2)[..., 0, :]
        xk = np.take_along_axis(X, top, -2)[..., 0, :]
        im = -(np.imag(xk) + re * np.imag(vk)) / np.real(vk)
        dw, dv = _diag(E), X + v * (re + 1j * im)[..., None, :]
        if not ctx.complex_out:
            return np.real(dw), np.real(dv)
        return dw.real, dw.imag, dv.real, dv.imag

    vjp_ops_outputs = True

    @staticmethod
    def vjp_ops(ctx, u, _inputs, outputs):
        """backward on tensors of the graph (``create_graph=True``), in the
        record's own outputs: a further order differentiates through it again."""
        ws, vs = ctx.w.shape, ctx.v.shape
        if ctx.complex_out:
            w = Z.ComplexTensor(outputs(0, ctx.w.real), outputs(1, ctx.w.imag))
            v = Z.ComplexTensor(outputs(2, ctx.v.real), outputs(3, ctx.v.imag))
            gwr, gwi, gvr, gvi = _pieces(u, (ws, ws, vs, vs))
            gw, gv = Z.ComplexTensor(gwr, gwi), Z.ComplexTensor(gvr, gvi)
            vh = _H(v)
        else:
            w, v = outputs(0, ctx.w), outputs(1, ctx.v)
            gw, gv = _pieces(u, (ws, vs))
            vh = np.swapaxes(v, -1, -2)
        c = vh @ gv
        inner = np.conj(_gaps_t(w)) * (c - (vh @ v) * np.expand_dims(np.real(_diag_t(c)), -2))
        inner = inner + np.expand_dims(gw, -1) * np.eye(ws[-1])
        g = np.linalg.solve(vh, inner @ vh)
        if not ctx.complex_in:
            return np.real(g), None
        return g.real, g.imag


def eig(a):
    """``numpy.linalg.eig`` of a real or complex square matrix (batched):
    ``(eigenvalues, eigenvectors)``, differentiable in reverse and forward
    mode and with ``create_graph=True`` (not by ``tg.hessian``).  As in
    NumPy, a real matrix whose eigenvalues are all real gives real results,
    otherwise complex ones.  Eigenvectors are normalised as LAPACK's: unit
    length, the largest entry real, which their forward-mode tangents keep
    (``tg.jvp`` gives the derivative of NumPy's eigenvectors themselves); a
    loss of them must not depend on their phases (else the gradient raises,
    as PyTorch's), and their derivatives need distinct eigenvalues."""
    complex_in = Z.is_complex(a)
    za = _z(a) if complex_in else None
    if np.ndim(za if complex_in else _data(a)) < 2:
        raise np.linalg.LinAlgError("Array must be at least two-dimensional")
    if not _needs(a):
        w, v = np.linalg.eig(_data(a))
        return _const(w), _const(v)
    outs = LinalgEig.apply(za.real, za.imag) if complex_in else LinalgEig.apply(a, None)
    if len(outs) == 2:
        return tuple(outs)
    wr, wi, vr, vi = outs
    return Z.ComplexTensor(wr, wi), Z.ComplexTensor(vr, vi)


def eigvals(a):
    return eig(a)[0]


# -- NumPy's names ----------------------------------------------------------------------
def _matrix_power(a, n):
    if not isinstance(n, numbers.Integral):
        raise TypeError("exponent must be an integer")
    if n < 0:
        return _matrix_power(inv(a), -n)
    result, base = None, Z._as_z(a)
    while n:
        if n & 1:
            result = base if result is None else Z.matmul(result, base)
        n >>= 1
        if n:
            base = Z.matmul(base, base)
    if result is None:
        return Z._z(np.broadcast_to(np.eye(a.shape[-1]), a.shape).copy(), None)
    return result



FUNCTIONS = {
    np.linalg.matrix_power: _matrix_power,
    np.linalg.inv: inv, np.linalg.solve: solve, np.linalg.det: det,
    np.linalg.slogdet: slogdet, np.linalg.cholesky: cholesky, np.linalg.eigh: eigh,
    np.linalg.eigvalsh: eigvalsh, np.linalg.svd: svd, np.linalg.eig: eig,
    np.linalg.eigvals: eigvals, np.linalg.norm: norm, np.linalg.matrix_norm: matrix_norm,
    np.linalg.vector_norm: vector_norm,
}
if hasattr(np.linalg, "svdvals"):
    FUNCTIONS[np.linalg.svdvals] = svdvals
#: differentiable to first order only on complex tensors (docs/make_function_table.py;
#: complex_lstsq.py adds qr)
FIRST_ORDER_ONLY = set()
#: on complex tensors: reverse and forward mode and create_graph=True to any order, but
#: no tg.hessian / tg.hvp (forward over reverse); the norms for the orders 2, -2, 'nuc'
NO_HESSIAN = {np.linalg.eigh, np.linalg.eigvalsh, np.linalg.svd, np.linalg.eig,
              np.linalg.eigvals, getattr(np.linalg, "svdvals", np.linalg.svd)}
PARTLY_NO_HESSIAN = {np.linalg.norm, np.linalg.matrix_norm}
Z.FUNCTIONS.update(FUNCTIONS)


