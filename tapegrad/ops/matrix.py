"""Matrix products and linear algebra: host records, whose VJP is left to
BLAS and LAPACK through NumPy.

The compiled sweep stops at a host record, this module's VJP adds the
operands' gradients into the adjoint arena with NumPy, and the sweep resumes.
Here: matmul, einsum, inv, solve, det, slogdet, cholesky, eigh and
eigvalsh.  The decompositions with several outputs (QR, SVD, pinv, lstsq)
are ``ops/decompositions.py``; this module's namespace includes them, so
that ``tg.linalg``, the NumPy protocol and the transforms' rules find every
host linear-algebra op and its op code in one place.
"""
import operator

import numpy as np

from ..kernels import codes as C
from ..kernels.blocks import sparse_products
from ..core.tape import current
from ..core.tensor import Tensor, _plain, _result
from .decompositions import (_LSTSQ, _PINV, _QR, _SVD, QRResult, SVDResult,  # noqa: F401
                             _copyltu, _pinv_vjp_core, lstsq, pinv, qr, svd, svdvals)
from .elementwise import _operand
from .host_records import _T, _data, _host, _sym, _triangle_read  # noqa: F401
from ..core.registry import CONST, OUTPUT, register


def _unbroadcast(g, shape):
    """Sum ``g`` over the leading axes that broadcasting added to ``shape``."""
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def _matmul_vjp(tape, adj, r):
    # the operands as the tape recorded them (protected from later writes)
    a0 = tape.arg0[r]
    ra, rb = tape.args[a0], tape.args[a0 + 1]
    shape_a, shape_b = tape.host[r]
    a, b = adj.value(tape, ra, shape_a), adj.value(tape, rb, shape_b)
    g = adj[r]
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g.reshape(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
                   + (a2.shape[-2], b2.shape[-1]))
    # constants need no gradient; a first contribution is written in place
    if tape.op[ra] != CONST:
        _deposit(adj, ra, a2.shape, g2, np.swapaxes(b2, -1, -2))
    if tape.op[rb] != CONST:
        _deposit(adj, rb, b2.shape, np.swapaxes(a2, -1, -2), g2)


def _deposit(adj, r, shape, x, y):
    """Add ``x @ y``, summed to ``shape``, into record r's adjoint."""
    if np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) == shape[:-2]:
        out = adj.fresh(r, shape)
        if out is not None:
            np.matmul(x, y, out=out)
            return
    adj.add(r, _unbroadcast(np.matmul(x, y), shape))


def _matmul_vjp_batched(tape, adj, r):
    """``_matmul_vjp`` for p adjoint vectors at once (vector mode: Jacobians,
    batched VJPs): ``adj[r]`` is (p, size), and each product is one BLAS call
    over all p instead of p calls."""
    a0 = tape.arg0[r]
    ra, rb = tape.args[a0], tape.args[a0 + 1]
    shape_a, shape_b = tape.host[r]
    a, b = adj.value(tape, ra, shape_a), adj.value(tape, rb, shape_b)
    g = adj[r]
    p = g.shape[0]
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g.reshape((p,) + np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
                   + (a2.shape[-2], b2.shape[-1]))
    need_a, need_b = tape.op[ra] != CONST, tape.op[rb] != CONST
    if a2.ndim == 2 and b2.ndim == 2:
        sparse = _sparse_block_products(g2, a2, b2, need_a, need_b)
        if sparse is not None:
            ga, gb = sparse
            if need_a:
                adj.add(ra, ga)
            if need_b:
                adj.add(rb, gb)
            return
    if need_a:
        if b2.ndim == 2:  # one GEMM over all p vectors: (p*m, n) @ (n, k)
            ga = (g2.reshape(-1, g2.shape[-1]) @ b2.T).reshape(g2.shape[:-1] + (b2.shape[0],))
        else:
            ga = g2 @ np.swapaxes(b2, -1, -2)
        adj.add(ra, _unbroadcast_rows(ga, a2.shape))
    if need_b:
        if a2.ndim == 2:  # one GEMM: (k, m) @ (m, p*n), as (p, k, n) again
            gm = np.moveaxis(g2, -2, 0)                      # (m, p, ..., n)
            gb = (a2.T @ gm.reshape(gm.shape[0], -1)).reshape((a2.shape[1],) + gm.shape[1:])
            gb = np.moveaxis(gb, 0, -2)
        else:
            gb = np.swapaxes(a2, -1, -2) @ g2
        adj.add(rb, _unbroadcast_rows(gb, b2.shape))


#: a block of adjoint vectors with at most this share of nonzeros takes the
#: sparse product in ``_sparse_block_products`` (a GEMM does its
#: multiply-adds several times faster than the row-by-row sums, so the sparse
#: form must skip most of them to win; kept where NumPy's gathers needed it)
SPARSE_SHARE = 1 / 16


def _sparse_block_products(g, a, b, need_a, need_b):
    """``(g @ b.T, a.T @ g)`` for a block ``g`` (p, m, k) of adjoint vectors
    that is mostly zeros, or None when it is not (``b`` may be None when
    ``need_a`` is false).

    Jacobians seed unit vectors, and elementwise ops keep them sparse: the
    block reaching ``tanh(A @ x) * x``'s matmul holds one nonzero per vector.
    Then each product is a sum of scaled rows of an operand, one per nonzero,
    instead of a dense GEMM over all p vectors (which costs p times a VJP);
    ``kernels/blocks.py`` finds the nonzeros and sums the rows.
    """
    a = np.ascontiguousarray(a, np.float64)
    bt = np.ascontiguousarray(b.T, np.float64) if need_a else _NO_ROWS
    ok, ga, gbt = sparse_products(np.ascontiguousarray(g, np.float64), a, bt, bool(need_a),
                                  bool(need_b), SPARSE_SHARE)
    if not ok:
        return None
    return (ga if need_a else None), (np.swapaxes(gbt, -1, -2) if need_b else None)


_NO_ROWS = np.zeros((0, 0))


def _unbroadcast_rows(g, shape):
    """``_unbroadcast`` of each of g's rows (axis 0 holds the p vectors)."""
    extra = g.ndim - 1 - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(1, 1 + extra)))
    axes = tuple(i + 1 for i, n in enumerate(shape) if n == 1 and g.shape[i + 1] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


_MATMUL = register("Mm", C.K_HOST, C.MATMUL, np.matmul, host_vjp=_matmul_vjp,
                   batched_vjp=_matmul_vjp_batched, reads="x",
                   replay=lambda xs, h: np.matmul(*xs), file_arity=2)


def matmul(a, b):
    """``numpy.matmul`` (the ``@`` operator), batched over leading axes.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> W = tg.tensor(np.eye(2), requires_grad=True)
    >>> (tg.tensor([1.0, 2.0]) @ W).sum().backward()
    >>> W.grad
    tensor([[1.0, 1.0],
            [2.0, 2.0]])
    """
    ad = a._data if isinstance(a, Tensor) else np.asarray(a)
    bd = b._data if isinstance(b, Tensor) else np.asarray(b)
    if np.ndim(ad) == 0 or np.ndim(bd) == 0:
        raise ValueError("matmul: operands must not be scalars; use * for scaling")
    data = np.matmul(ad, bd)
    need = any(isinstance(x, Tensor) and x._requires_grad for x in (a, b))
    tape = current()
    if not need or not tape.enabled:
        return _plain(data)
    r = tape.record(_MATMUL, (_operand(tape, a), _operand(tape, b)), data, inputs=(ad, bd))
    tape.host[r] = (np.shape(ad), np.shape(bd))
    return _result(tape, r, data)


# -- inverse, solve, determinants: LAPACK through NumPy -----------------------


def _inv_vjp(tape, adj, r):
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    shape_a, shape_y = tape.host[r]
    Y = adj.value(tape, r, shape_y)
    G = adj[r].reshape(shape_y)
    if tape.op[ra] != CONST:
        adj.add(ra, -_T(Y) @ G @ _T(Y))


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

def _cholesky_vjp(tape, adj, r):
    # gA = sym(L^-T Phi(L^T gL) L^-1), Phi: lower triangle with half diagonal
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    if tape.op[ra] == CONST:
        return
    shape_a, shape_l = tape.host[r]
    L = adj.value(tape, r, shape_l)
    G = adj[r].reshape(shape_l)
    P = np.tril(_T(L) @ G)
    P = P - 0.5 * np.einsum("...ii->...i", P)[..., None] * np.eye(P.shape[-1])
    Linv = np.linalg.inv(L)
    adj.add(ra, _sym(_T(Linv) @ P @ Linv))


def _eigh_vjp(tape, adj, r):
    # gA = V (diag(gw) + F * (V^T gV)) V^T, F_ij = 1 / (w_j - w_i) off the diagonal
    (ra,) = tape.args[tape.arg0[r]:tape.arg0[r] + 1]
    if tape.op[ra] == CONST:
        return
    w, V = tape.host[r][1]
    gw = adj[r + 1].reshape(w.shape) if adj.reached[r + 1] else np.zeros(w.shape)
    gV = adj[r + 2].reshape(V.shape) if adj.reached.size > r + 2 and adj.reached[r + 2] \
        else np.zeros(V.shape)
    diff = w[..., None, :] - w[..., :, None]
    n = w.shape[-1]
    off = ~np.eye(n, dtype=bool)
    F = np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)
    inner = F * (_T(V) @ gV)
    inner = inner + gw[..., None] * np.eye(n)
    adj.add(ra, _sym(V @ inner @ _T(V)))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum_parse(subscripts, shapes):
    """Subscripts with ``...`` written out as letters: ``(ins, out)``.

    The VJPs need one letter per axis: each ellipsis gets fresh letters,
    right-aligned across operands as NumPy broadcasts them.
    """
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    ins = ins.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(shapes)} operands")
    free = [c for c in _LETTERS if c not in spec]
    n_ell = [len(shp) - (len(s) - 3) if "..." in s else 0 for s, shp in zip(ins, shapes)]
    width = max(n_ell, default=0)
    ell, free = free[:width], free[width:]
    ins = [s.replace("...", "".join(ell[width - k:])) for s, k in zip(ins, n_ell)]
    if not arrow:  # implicit output: the ellipsis axes, then indices seen once, sorted
        seen = "".join(ins)
        out = "".join(ell) + "".join(sorted(c for c in set(seen)
                                            if seen.count(c) == 1 and c not in ell))
    else:
        out = out.replace("...", "".join(ell))
    return ins, out


#: below this many multiply-adds (the plain loop's count: the product of
#: every index's extent) ``np.einsum``'s own loop beats ``optimize=True``,
#: whose path search and BLAS calls cost 10-20 us and, on a busy machine,
#: start BLAS's thread pool (tens of ms): 2x2 to 32x32 products measured
#: 5.5 us against 18.9 us at 8x16x8, even at 32x32x32, 3.4x slower
#: without optimize at 64x64x64
EINSUM_LOOP_WORK = 1 << 15


def einsum_by_size(spec, *ops):
    """``np.einsum(spec, *ops)``, through BLAS (``optimize=True``) only where
    the contraction is large enough to pay for it (``EINSUM_LOOP_WORK``)."""
    terms = spec.split("->")[0].split(",")
    optimize = True  # an ellipsis, or a spec NumPy refuses: its path search says why
    if "." not in spec and all(len(t.strip()) == np.ndim(op) for t, op in zip(terms, ops)):
        extent = {}
        for term, op in zip(terms, ops):
            for c, n in zip(term.strip(), np.shape(op)):
                extent[c] = max(extent.get(c, 1), n)
        work = 1
        for n in extent.values():
            work *= n
        optimize = work >= EINSUM_LOOP_WORK
    return np.einsum(spec, *ops, optimize=optimize)


def _einsum_vjp(tape, adj, r):
    ins, out, *shapes, out_shape = tape.host[r]
    a0 = tape.arg0[r]
    parents = [tape.args[a0 + k] for k in range(len(ins))]
    values = [adj.value(tape, p, s) for p, s in zip(parents, shapes)]
    g = adj[r].reshape(out_shape)
    size = {}  # each index's extent after broadcasting (1 gives way, even to 0)
    for s, shp in zip(ins, shapes):
        for c, n in zip(s, shp):
            if size.get(c, 1) == 1:
                size[c] = n
    for k, p in enumerate(parents):
        if tape.op[p] == CONST:
            continue
        others = [ins[j] for j in range(len(ins)) if j != k]
        present = set(out).union(*others)
        uniq = "".join(dict.fromkeys(ins[k]))  # a repeated index (diagonal) once
        kept = "".join(c for c in uniq if c in present)
        spec = ",".join([out] + others) + "->" + kept
        gk = einsum_by_size(spec, g, *[values[j] for j in range(len(ins)) if j != k])
        own = dict(zip(ins[k], shapes[k]))
        # indices summed within operand k alone: its gradient is broadcast there
        for axis, c in enumerate(uniq):
            if c not in present:
                gk = np.expand_dims(gk, axis)
        gk = np.broadcast_to(gk, tuple(own[c] if c not in present else size[c] for c in uniq))
        # axes of operand k that broadcasting stretched: sum back to length 1
        stretched = tuple(i for i, c in enumerate(uniq) if own[c] == 1 and gk.shape[i] != 1)
        if stretched:
            gk = gk.sum(axis=stretched, keepdims=True)
        if len(uniq) == len(ins[k]):
            adj.add(p, np.ascontiguousarray(np.broadcast_to(gk, shapes[k])))
        else:  # a diagonal's gradient lands on the diagonal, zero elsewhere
            full = np.zeros(shapes[k])
            strides = {}
            for c, st in zip(ins[k], full.strides):
                strides[c] = strides.get(c, 0) + st
            diag = np.lib.stride_tricks.as_strided(
                full, tuple(own[c] for c in uniq), tuple(strides[c] for c in uniq),
                writeable=True)
            diag[...] = gk
            adj.add(p, full)


_INV = register("LinalgInv", C.K_HOST, C.INV, np.linalg.inv, host_vjp=_inv_vjp, reads="y",
                replay=lambda xs, h: np.linalg.inv(*xs), file_arity=1)
_SOLVE = register("LinalgSolve", C.K_HOST, C.SOLVE, np.linalg.solve, host_vjp=_solve_vjp,
                  reads="xy", replay=lambda xs, h: np.linalg.solve(*xs), file_arity=2)
_DET = register("LinalgDet", C.K_HOST, C.DET, np.linalg.det, host_vjp=_det_vjp, reads="xy",
                replay=lambda xs, h: np.linalg.det(*xs), file_arity=1)
_LOGABSDET = register("LinalgSlogdet", C.K_HOST, C.SLOGDET, None, host_vjp=_logabsdet_vjp,
                      reads="x", replay=lambda xs, h: np.linalg.slogdet(*xs)[1], file_arity=1)


_CHOLESKY = register("LinalgCholesky", C.K_HOST, C.CHOLESKY, np.linalg.cholesky,
                     host_vjp=_cholesky_vjp, reads="y",
                     replay=lambda xs, h: np.linalg.cholesky(*xs), file_arity=1)
# the decompositions with several outputs keep them with the host record
_EIGH = register("LinalgEigh", C.K_HOST, C.EIGH, np.linalg.eigh, host_vjp=_eigh_vjp, reads="",
                 not_replayable="multi-output host op")


_EINSUM = register("Einsum", C.K_HOST, C.EINSUM, np.einsum, host_vjp=_einsum_vjp, reads="x",
                   replay=lambda xs, h: np.einsum(",".join(h[0]) + "->" + h[1], *xs),
                   host_extra=2, file_arity="subscripts")


def _einsum_sublists(args):
    """NumPy's interleaved form ``einsum(op0, sublist0, op1, sublist1, ...,
    [sublist_out])`` as ``(subscripts, operands)``: integers 0-25 become
    ``A``-``Z`` and 26-51 ``a``-``z`` (as NumPy maps them, so the implicit
    output keeps their order), ``Ellipsis`` becomes ``...``."""
    args = list(args)
    out = args.pop() if len(args) % 2 else None

    def letters(sub):
        try:
            items = list(sub)
        except TypeError:
            raise TypeError("einsum: in the interleaved form each operand is followed by a "
                            f"list of subscripts, got {type(sub).__name__}") from None
        s = []
        for v in items:
            if v is Ellipsis:
                s.append("...")
                continue
            try:
                k = operator.index(v)
            except TypeError:
                raise TypeError("einsum: subscripts in a sublist must be integers or "
                                f"Ellipsis, got {v!r}") from None
            if not 0 <= k < 52:
                raise ValueError(f"einsum: subscript {k} is not within the valid range [0, 52)")
            s.append(chr(ord("A") + k) if k < 26 else chr(ord("a") + k - 26))
        return "".join(s)

    spec = ",".join(letters(sub) for sub in args[1::2])
    if out is not None:
        spec += "->" + letters(out)
    return spec, tuple(args[0::2])


def einsum(subscripts, *operands):
    """``numpy.einsum`` with explicit or implicit output, differentiable in
    every operand: ``...`` broadcasting, and repeated indices within one
    operand (diagonals such as ``'ii->i'``, ``'ii'``, ``'iij->j'``), whose
    gradient lands on that diagonal.  Subscripts are a string, or NumPy's
    interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (integer
    sublists, ``Ellipsis`` for ``...``), which is translated to one.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor(np.ones((2, 3)), requires_grad=True)
    >>> tg.einsum("ij,j->i", a, np.arange(3.0))
    tensor([3.0, 3.0], grad_fn=<EinsumBackward>)
    >>> m = tg.tensor(np.ones((2, 2)), requires_grad=True)
    >>> tg.einsum("ii", m).backward()      # the trace: gradient on the diagonal
    >>> m.grad
    tensor([[1.0, 0.0],
            [0.0, 1.0]])
    >>> np.einsum(a, [0, 1], np.arange(3.0), [1], [0])   # the interleaved form
    tensor([3.0, 3.0], grad_fn=<EinsumBackward>)
    """
    if not isinstance(subscripts, str):
        subscripts, operands = _einsum_sublists((subscripts,) + operands)
    ins, out = _einsum_parse(subscripts, [np.shape(x._data if isinstance(x, Tensor) else x)
                                          for x in operands])
    return _host(_EINSUM, lambda *d: einsum_by_size(subscripts, *d),  # BLAS when large
                 operands, extra=(ins, out))


def cholesky(a):
    """``numpy.linalg.cholesky`` (lower factor), batched.

    Like NumPy, only the lower triangle of ``a`` is read, and the gradient is
    that of NumPy's function: it lies on the lower triangle. For a symmetric
    ``a``, ``(g + g.T) / 2`` of it is the symmetric form that PyTorch and
    JAX give (the same derivative along every symmetric perturbation).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = tg.tensor([[4.0, 2.0], [2.0, 3.0]], requires_grad=True)
    >>> np.linalg.cholesky(A)[1, 0].backward()   # L[1, 0] = A[1, 0] / sqrt(A[0, 0])
    >>> A.grad
    tensor([[-0.125, 0.0],
            [0.5, 0.0]])
    """
    return _host(_CHOLESKY, np.linalg.cholesky, (_triangle_read(a),))


def eigh(a, UPLO="L"):
    """``numpy.linalg.eigh``: ``(eigenvalues, eigenvectors)``, two outputs of one
    record (slots 0 and 1), batched.

    Like NumPy, only the triangle ``UPLO`` of ``a`` is read, and the gradient
    is that of NumPy's function: it lies on that triangle (see
    :func:`cholesky` for its symmetric form). Eigenvector gradients are
    undefined for repeated eigenvalues (as in every framework); eigenvalue
    gradients are fine.
    """
    a = _triangle_read(a, UPLO)
    ad = a._data if isinstance(a, Tensor) else np.asarray(a)
    w, V = np.linalg.eigh(ad, UPLO)
    tape = current()
    if not (isinstance(a, Tensor) and a._requires_grad and tape.enabled):
        return _plain(w), _plain(V)
    u = tape.record(_EIGH, (_operand(tape, a),), np.zeros(0))
    tape.host[u] = (np.shape(ad), (w, V))  # the eigenpairs, for the VJP
    outs = []
    for s, value in enumerate((w, V)):
        r = tape.record(OUTPUT, (u,), value, (s,))
        outs.append(_result(tape, r, value))
    return tuple(outs)


def inv(a):
    """``numpy.linalg.inv``, batched over leading axes."""
    return _host(_INV, np.linalg.inv, (a,))


def solve(a, b):
    """``numpy.linalg.solve``, batched; differentiable in both operands
    (complex operands: ``complex_linalg.solve``, which ``numpy.linalg.solve``
    reaches through ``numpy_api``)."""
    return _host(_SOLVE, np.linalg.solve, (a, b))


def det(a):
    """``numpy.linalg.det``, batched."""
    return _host(_DET, np.linalg.det, (a,))


def slogdet(a):
    """``numpy.linalg.slogdet``: ``(sign, logabsdet)``; the sign carries no
    gradient and comes back as a plain array."""
    ad = a._data if isinstance(a, Tensor) else np.asarray(a)
    sign, _ = np.linalg.slogdet(ad)
    return sign, _host(_LOGABSDET, lambda m: np.linalg.slogdet(m)[1], (a,))


def eigvalsh(a, UPLO="L"):
    """``numpy.linalg.eigvalsh``: the eigenvalues of :func:`eigh`, ascending.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = tg.tensor([[2.0, 1.0], [1.0, 2.0]], requires_grad=True)
    >>> tg.linalg.eigvalsh(A)[1].backward()   # d w_max = v^T dA v, lower triangle read
    >>> A.grad
    tensor([[0.5, 0.0],
            [1.0, 0.5]])
    """
    return eigh(a, UPLO)[0]
