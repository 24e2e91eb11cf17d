"""Matrix products: host records, whose VJP is left to BLAS through NumPy.

The compiled sweep stops at a host record, this module's VJP adds the
operands' gradients into the adjoint arena with NumPy, and the sweep resumes.
"""
import operator

import numpy as np

from ..kernels import codes as C
from ..kernels.blocks import sparse_products
from ..tape import current
from ..tensor import Tensor, _plain, _result
from .elementwise import _operand, multiply
from .registry import CONST, OUTPUT, register


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


_MATMUL = register("Mm", C.K_HOST, 0, np.matmul, host_vjp=_matmul_vjp,
                   batched_vjp=_matmul_vjp_batched)


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
def _T(m):
    return np.swapaxes(m, -1, -2)


def _host(code, forward, inputs, extra=()):
    """Record a host op of tensor/array ``inputs`` computed by ``forward``.

    Its VJP finds ``extra + (input shapes..., output shape)`` in ``tape.host``.
    """
    datas = [x._data if isinstance(x, Tensor) else np.asarray(x) for x in inputs]
    data = forward(*datas)
    need = any(isinstance(x, Tensor) and x._requires_grad for x in inputs)
    tape = current()
    if not need or not tape.enabled:
        return _plain(data)
    parents = tuple(_operand(tape, x) for x in inputs)
    r = tape.record(code, parents, data, inputs=tuple(datas))
    tape.host[r] = tuple(extra) + tuple(np.shape(d) for d in datas) + (np.shape(data),)
    return _result(tape, r, data)


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
        if Xm.shape[-1] == 1:  # one right-hand side: an outer product, no GEMM
            gA = np.multiply(GB, _T(Xm))
            np.negative(gA, out=gA)
        else:
            gA = -GB @ _T(Xm)
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


def _sym(m):
    return 0.5 * (m + _T(m))


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
        gk = np.einsum(spec, g, *[values[j] for j in range(len(ins)) if j != k],
                       optimize=True)
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


_INV = register("LinalgInv", C.K_HOST, 1, np.linalg.inv, host_vjp=_inv_vjp)
_SOLVE = register("LinalgSolve", C.K_HOST, 2, np.linalg.solve, host_vjp=_solve_vjp)
_DET = register("LinalgDet", C.K_HOST, 3, np.linalg.det, host_vjp=_det_vjp)
_LOGABSDET = register("LinalgSlogdet", C.K_HOST, 4, None, host_vjp=_logabsdet_vjp)


_CHOLESKY = register("LinalgCholesky", C.K_HOST, 6, np.linalg.cholesky,
                     host_vjp=_cholesky_vjp)
_EIGH = register("LinalgEigh", C.K_HOST, 7, np.linalg.eigh, host_vjp=_eigh_vjp)


_EINSUM = register("Einsum", C.K_HOST, 8, np.einsum, host_vjp=_einsum_vjp)


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
    return _host(_EINSUM, lambda *d: np.einsum(subscripts, *d, optimize=True),  # BLAS
                 operands, extra=(ins, out))


def cholesky(a):
    """``numpy.linalg.cholesky`` (lower factor), batched.

    Like NumPy, only the lower triangle of ``a`` is read; the gradient is the
    symmetric one (as PyTorch's and JAX's): perturbing ``a`` and ``a.T``
    alike.
    """
    return _host(_CHOLESKY, np.linalg.cholesky, (a,))


def eigh(a, UPLO="L"):
    """``numpy.linalg.eigh``: ``(eigenvalues, eigenvectors)``, two outputs of one
    record (slots 0 and 1), batched; the gradient is the symmetric one.

    Eigenvector gradients are undefined for repeated eigenvalues (as in every
    framework); eigenvalue gradients are fine.
    """
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


# -- decompositions with several outputs: QR, SVD, least squares ---------------
def _needs_grad(*xs):
    return any(isinstance(x, Tensor) and x._requires_grad for x in xs) and current().enabled


def _record_outputs(code, inputs, outs, saved):
    """Record one op with several outputs: a record for the op, whose VJP finds
    ``saved`` in ``tape.host``, then one OUTPUT record per output slot (so a
    consumer's ``next_functions`` shows ``(node, slot)``)."""
    tape = current()
    u = tape.record(code, tuple(_operand(tape, x) for x in inputs), np.zeros(0))
    tape.host[u] = saved
    return [_result(tape, tape.record(OUTPUT, (u,), v, (s,)), v) for s, v in enumerate(outs)]


def _slot_grads(adj, r, shapes):
    """The gradients that reached output slots ``0..`` of record r (None where
    none did), as float64 arrays of the given shapes."""
    out = []
    for s, shape in enumerate(shapes):
        q = r + 1 + s
        reached = q < adj.reached.size and adj.reached[q]
        out.append(adj[q].reshape(shape) if reached else None)
    return out


def _data(x):
    return x._data if isinstance(x, Tensor) else np.asarray(x)


def _f64(*xs):
    return [np.asarray(x, dtype=np.float64) for x in xs]


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


_QR = register("LinalgQr", C.K_HOST, 9, np.linalg.qr, host_vjp=_qr_vjp)


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


_SVD = register("LinalgSvd", C.K_HOST, 10, np.linalg.svd, host_vjp=_svd_vjp)


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
    ``hermitian=True`` the gradient is the symmetric one (as for ``eigh``).

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


def eigvalsh(a, UPLO="L"):
    """``numpy.linalg.eigvalsh``: the eigenvalues of :func:`eigh`, ascending.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = tg.tensor([[2.0, 1.0], [1.0, 2.0]], requires_grad=True)
    >>> tg.linalg.eigvalsh(A)[1].backward()   # d w_max / dA = v v^T
    >>> A.grad
    tensor([[0.5, 0.5],
            [0.5, 0.5]])
    """
    return eigh(a, UPLO)[0]


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


_PINV = register("LinalgPinv", C.K_HOST, 11, np.linalg.pinv, host_vjp=_pinv_vjp)


def pinv(a, rcond=None, hermitian=False, **kwargs):
    """``numpy.linalg.pinv`` (Moore-Penrose pseudo-inverse), batched.

    The gradient is the derivative of the pseudo-inverse where the rank is
    constant (Golub and Pereyra): right for full-rank matrices, and for
    rank-deficient ones whose small singular values are exactly zero, not
    merely below ``rcond``.  With ``hermitian=True`` it is the symmetric one.

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


_LSTSQ = register("LinalgLstsq", C.K_HOST, 12, np.linalg.lstsq, host_vjp=_lstsq_vjp)


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
