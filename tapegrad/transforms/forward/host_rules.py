"""Forward mode's host rules: the tangents of host records (matmul, einsum,
inv, solve, the determinants, cholesky, eigh, QR, SVD, pinv, lstsq, the FFTs,
``tg.Function``), computed with NumPy on ``(p,) + shape`` tangent arrays.

The compiled tangent sweep (``transforms/forward/sweep.py: _sweep``) stops at a host record
and calls its rule here from ``HOST_JVP``; each rule reads the record's
values and its parents' tangents through the ``forward._Tangents`` it is
given and writes the output's.  Kept apart from the sweep and the drivers
(``jvp``, ``jacfwd``) because the rules are linear algebra, one per host op,
that grows with the host ops while the sweep does not; ``transforms/forward/sweep.py``'s
namespace includes them.
"""
import numpy as np

from ...ops.function import _FUNCTION, first_order_message
from ...kernels import codes as C
from ...ops import fft as FF
from ...ops import matrix as L
from ...core.registry import OUTPUT
from ..second.decompositions import _pinv_tangent

# -- host rules: the tangents of host records, with NumPy ------------------------------------
# Each rule reads its parents' tangents as (p,) + shape arrays (None: the
# parent does not depend on the inputs) and writes its output's.  Ops whose
# reverse rule is the "symmetric gradient" (cholesky, eigh, hermitian svd and
# pinv) take the symmetric part of the input tangent, so J t agrees with the
# reverse-mode Jacobian; their input is the symmetric matrix of the triangle
# NumPy reads (``host_records._triangle_read``), so both are NumPy's derivative.
def _T(m):
    return np.swapaxes(m, -1, -2)


def _sym(m):
    return 0.5 * (m + _T(m))


def _parents(tape, r):
    a0 = tape.arg0[r]
    return [int(q) for q in tape.args[a0:tape.arg0[r + 1]]]


def _pad(t, nd):
    """``(p,) + shape`` tangents with unit axes after p up to ``nd`` axes of
    shape, so that batch axes line up when they broadcast."""
    return t.reshape(t.shape[:1] + (1,) * (nd + 1 - t.ndim) + t.shape[1:])


def _sum_terms(*terms):
    got = [t for t in terms if t is not None]
    return got[0] if len(got) == 1 else sum(got[1:], got[0])


def _matmul_jvp(tape, tan, r):
    ra, rb = _parents(tape, r)
    shape_a, shape_b = tape.host[r]
    a, b = tan.value(tape, ra, shape_a), tan.value(tape, rb, shape_b)
    da, db = tan.trail(ra, shape_a), tan.trail(rb, shape_b)  # shape + (p,)
    p = tan.p
    if a.ndim <= 2 and b.ndim <= 2:
        # the p directions trail: a @ db is one GEMM over all of them
        terms = []
        if db is not None:
            flat = db.reshape(b.shape[0], -1)
            # unit tangents (a Jacobian) stay sparse through elementwise ops:
            # then a @ db sums scaled columns of a instead of a dense GEMM
            sparse = (L._sparse_block_products(flat[None], a.T, None, False, True)
                      if a.ndim == 2 else None)
            t = sparse[1][0] if sparse is not None else a @ flat
            terms.append(t.reshape(a.shape[:-1] + b.shape[1:] + (p,)))
        if da is not None:
            t = np.tensordot(da, b, axes=([a.ndim - 1], [0]))  # a[:-1] + (p,) + b[1:]
            terms.append(np.moveaxis(t, a.ndim - 1, -1))
        blk = tan.block(r)
        blk[...] = _sum_terms(*terms).reshape(blk.shape)  # (-1, p) is ambiguous for p = 0
        return
    # batched operands: promote vectors, align batch axes, p leading
    nb = max(a.ndim, b.ndim, 2) - 2
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    a2 = a2.reshape((1,) * (nb + 2 - a2.ndim) + a2.shape)
    b2 = b2.reshape((1,) * (nb + 2 - b2.ndim) + b2.shape)
    terms = []
    if da is not None:
        terms.append(np.moveaxis(da, -1, 0).reshape((p,) + a2.shape) @ b2)
    if db is not None:
        terms.append(a2 @ np.moveaxis(db, -1, 0).reshape((p,) + b2.shape))
    t = _sum_terms(*terms)
    if a.ndim == 1:
        t = t[..., 0, :]
    if b.ndim == 1:
        t = t[..., 0]
    tan.put(r, t)


def _inv_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_y = tape.host[r]
    Y = tan.value(tape, r, shape_y)
    tan.put(r, -(Y @ tan.lead(ra, shape_a) @ Y))


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


def _cholesky_jvp(tape, tan, r):
    # A = L L^T:  L^-1 dA L^-T = X + X^T with X = L^-1 dL lower triangular, so
    # dL = L Phi(L^-1 dA L^-T), Phi: the lower triangle with half its diagonal
    (ra,) = _parents(tape, r)
    shape_a, shape_l = tape.host[r]
    L = tan.value(tape, r, shape_l)
    Linv = np.linalg.inv(L)
    S = Linv @ _sym(tan.lead(ra, shape_a)) @ _T(Linv)
    n = L.shape[-1]
    Phi = np.tril(S) - 0.5 * np.eye(n) * S
    tan.put(r, L @ Phi)


def _eigh_jvp(tape, tan, r):
    # A V = V W:  with P = V^T dA V, dw = diag(P), V^T dV = F o P,
    # F_ij = 1 / (w_j - w_i) off the diagonal (as in the reverse rule)
    (ra,) = _parents(tape, r)
    shape_a, (w, V) = tape.host[r]
    w, V = np.asarray(w, np.float64), np.asarray(V, np.float64)
    P = _T(V) @ _sym(tan.lead(ra, shape_a)) @ V
    n = w.shape[-1]
    off = ~np.eye(n, dtype=bool)
    diff = w[..., None, :] - w[..., :, None]
    F = np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)
    tan.put(r + 1, np.einsum("...ii->...i", P))
    tan.put(r + 2, V @ (F * P))


def _einsum_jvp(tape, tan, r):
    # linear in each operand: the sum over operands of the einsum with that
    # operand replaced by its tangents, which carry one more index for p
    ins, out, *shapes, out_shape = tape.host[r]
    parents = _parents(tape, r)
    values = [tan.value(tape, q, s) for q, s in zip(parents, shapes)]
    extra = next(c for c in L._LETTERS if c not in "".join(ins) + out)
    terms = []
    for k, (q, s) in enumerate(zip(parents, shapes)):
        t = tan.lead(q, s)
        if t is None:
            continue
        spec = ",".join(extra + ins[j] if j == k else ins[j] for j in range(len(ins)))
        ops = [t if j == k else values[j] for j in range(len(ins))]
        terms.append(L.einsum_by_size(spec + "->" + extra + out, *ops))
    tan.put(r, np.broadcast_to(_sum_terms(*terms), (tan.p,) + tuple(out_shape)))


def _qr_tall(Q, R, dA):
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
        dQ, dR = _qr_tall(Q, R, dA)
    else:  # wide: A = [X | Y], X = Q U square, Y = Q V
        dQ, dU = _qr_tall(Q, R[..., :m], dA[..., :m])
        Yv = np.asarray(Y, np.float64)
        dV = _T(dQ) @ Yv + _T(Q) @ dA[..., m:]
        dR = np.concatenate([dU, dV], axis=-1)
    tan.put(r + 1, dQ)
    tan.put(r + 2, dR)


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


def _pinv_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    hermitian, shape_a, shape_x = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    X = tan.value(tape, r, shape_x)
    dA = tan.lead(ra, shape_a)
    tan.put(r, _pinv_tangent(A, X, _sym(dA) if hermitian else dA))


def _lstsq_jvp(tape, tan, r):
    # x = pinv(A) b; residuals |b - A x|^2, whose derivative through x
    # vanishes at the minimiser (A^T (b - A x) = 0)
    ra, rb = _parents(tape, r)
    cutoff, shapes, A, b, x = tape.host[r]
    A, b, x = (np.asarray(v, np.float64) for v in (A, b, x))
    vector = b.ndim == 1
    b2, x2 = (b[:, None], x[:, None]) if vector else (b, x)
    dA, db = tan.lead(ra, A.shape), tan.lead(rb, b.shape)
    if db is not None and vector:
        db = db[..., None]
    X = np.linalg.pinv(A, rcond=cutoff)
    dx = _sum_terms(None if dA is None else _pinv_tangent(A, X, dA) @ b2,
                    None if db is None else X @ db)
    tan.put(r + 1, dx[..., 0] if vector else dx)
    if len(shapes) > 1:
        res = b2 - A @ x2
        dres = _sum_terms(None if db is None else db, None if dA is None else -(dA @ x2))
        tan.put(r + 2, 2.0 * (res * dres).sum(axis=-2))


def _function_jvp(tape, tan, r):
    """A tg.Function's tangents from its ``jvp(ctx, *tangents)``: one tangent
    per input of forward (the input's shape; zeros where the input carries
    none, None for arguments that are not tensors), one per output back (None:
    zero), called once per direction."""
    cls, ctx, tensor_args, out_shapes, nargs = tape.host[r]
    why = getattr(cls, "no_jvp", None)
    if why is not None:
        raise NotImplementedError(why(ctx))
    if getattr(cls, "jvp", None) is None:
        named = first_order_message(cls, "jvp")
        if named is not None:
            raise NotImplementedError(named)
        raise NotImplementedError(
            f"jvp: {cls.__name__} is a tg.Function, which defines backward() but no "
            "forward-mode rule; define a static jvp(ctx, *tangents) on it (one tangent per "
            "input of forward, one per output returned), or use reverse mode (tg.vjp, "
            "tg.jacobian, tg.grad) for functions that call it")
    ins = [tan.lead(q, shape) for q, (_, shape) in zip(_parents(tape, r), tensor_args)]
    # several outputs (or a tuple of one): OUTPUT records right after r read it
    single = not (r + 1 < tape.n and tape.op[r + 1] == OUTPUT
                  and int(tape.args[tape.arg0[r + 1]]) == r)
    outs = [np.zeros((tan.p,) + tuple(s)) for s in out_shapes]
    for k in range(tan.p):
        args = [None] * nargs
        for (position, shape), t in zip(tensor_args, ins):
            args[position] = np.zeros(shape) if t is None else np.array(t[k])
        res = cls.jvp(ctx, *args)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(out_shapes):
            raise RuntimeError(
                f"{cls.__name__}.jvp returned {len(res)} tangents, expected {len(out_shapes)}: "
                "one per output of forward (None for a zero tangent)")
        for j, (o, shape) in enumerate(zip(res, out_shapes)):
            if o is None:
                continue
            o = np.asarray(o, dtype=np.float64)
            if o.shape != tuple(shape):
                raise RuntimeError(
                    f"{cls.__name__}.jvp returned a tangent of shape {o.shape} for output "
                    f"{j}, whose shape is {tuple(shape)}")
            outs[j][k] = o
    if single:
        tan.put(r, outs[0])
    else:
        for j, o in enumerate(outs):
            tan.put(r + 1 + j, o)


#: op code -> rule(tape, tangents, r) for every host op; a host op registered
#: without an entry here makes forward mode raise NotImplementedError
HOST_JVP = {
    L._MATMUL: _matmul_jvp,
    L._INV: _inv_jvp,
    L._SOLVE: _solve_jvp,
    L._DET: _det_jvp,
    L._LOGABSDET: _logabsdet_jvp,
    L._CHOLESKY: _cholesky_jvp,
    L._EIGH: _eigh_jvp,
    L._EINSUM: _einsum_jvp,
    L._QR: _qr_jvp,
    L._SVD: _svd_jvp,
    L._PINV: _pinv_jvp,
    L._LSTSQ: _lstsq_jvp,
    FF._FFT: FF._fft_jvp,
    _FUNCTION: _function_jvp,
}
assert all(c >> C.SHIFT == C.K_HOST for c in HOST_JVP)
