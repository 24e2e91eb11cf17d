"""Matrix products and linear algebra: host records, whose VJP is left to
BLAS and LAPACK through NumPy.

The compiled sweep stops at a host record, the op's VJP adds the operands'
gradients into the adjoint arena with NumPy, and the sweep resumes.  Here:
matmul, its VJPs and its rules for every transform, beside its registry
row.  The other host linear-algebra ops (einsum, inv, solve, det, slogdet,
cholesky, eigh, eigvalsh, qr, svd, svdvals, pinv, lstsq) live the same way
in ``ops/linalg/``, one module per op or small family; this module's
namespace includes them, so that ``tg.linalg`` and the NumPy protocol find
every host linear-algebra op and its op code in one place.
"""
import numpy as np

from ..kernels import codes as C
from ..kernels.blocks import sparse_products
from ..core.tape import current
from ..core.tensor import Tensor, _plain, _result
# the ops registered before matmul, in the order the registry has always had
from .linalg.qr import _QR, QRResult, _copyltu, qr  # noqa: F401
from .linalg.svd import _SVD, SVDResult, svd, svdvals  # noqa: F401
from .linalg.pinv import _PINV, _pinv_vjp_core, pinv  # noqa: F401
from .linalg.lstsq import _LSTSQ, lstsq  # noqa: F401
from .elementwise import _operand
from .host_records import _T, _data, _host, _sym, _triangle_read  # noqa: F401
from .linalg._common import (_flat, _parents, _sum_rows, _sum_terms, _sum_to, _tg, _tT,
                             _unbroadcast)
from ..core.registry import CONST, register


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
            sparse = (_sparse_block_products(flat[None], a.T, None, False, True)
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


def _matmul2(P, r):
    # y = A B: Abar_dot += ybar Bdot^T, Bbar_dot += Adot^T ybar
    qa, qb = P.parents(r)
    shape_a, shape_b = P.tape.host[r]
    ad, bd = P.dot(qa), P.dot(qb)
    if ad is None or bd is None:
        # bilinear: with one operand constant in the inputs there is no
        # second-order term (and the other operand's would be thrown away)
        return
    p = P.p
    g = P.ybar(r)
    a1, b1 = len(shape_a) == 1, len(shape_b) == 1
    sa = (1,) + tuple(shape_a) if a1 else tuple(shape_a)
    sb = tuple(shape_b) + (1,) if b1 else tuple(shape_b)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    nb = len(batch)
    # the p directions lead; every operand's batch axes are padded to nb so
    # that they line up behind p when they broadcast
    g2 = g.reshape((1,) + batch + (sa[-2], sb[-1]))
    # with A = B the two terms land on one record and together are right
    B2 = bd.reshape((p,) + (1,) * (nb + 2 - len(sb)) + sb)
    P.add(qa, _sum_rows(g2 @ np.swapaxes(B2, -1, -2), sa))
    A2 = ad.reshape((p,) + (1,) * (nb + 2 - len(sa)) + sa)
    P.add(qb, _sum_rows(np.swapaxes(A2, -1, -2) @ g2, sb))


def _matmul_graph(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    shape_a, shape_b = W.tape.host[r]
    a1, b1 = len(shape_a) == 1, len(shape_b) == 1
    sa = (1,) + tuple(shape_a) if a1 else tuple(shape_a)
    sb = tuple(shape_b) + (1,) if b1 else tuple(shape_b)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    G = tg.reshape(u, batch + (sa[-2], sb[-1]))
    if W.dep[qa]:
        B = tg.reshape(W.x(qb), sb)
        W.add(qa, _flat(_sum_to(tg.matmul(G, _tT(B)), sa)))
    if W.dep[qb]:
        A = tg.reshape(W.x(qa), sa)
        W.add(qb, _flat(_sum_to(tg.matmul(_tT(A), G), sb)))


_MATMUL = register("Mm", C.K_HOST, C.MATMUL, np.matmul, host_vjp=_matmul_vjp,
                   batched_vjp=_matmul_vjp_batched, reads="x",
                   replay=lambda xs, h: np.matmul(*xs), file_arity=2,
                   jvp=_matmul_jvp, second=_matmul2, graph_vjp=_matmul_graph)


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


# the rest of the host linear algebra, registered after matmul
from .linalg.solve import (_DET, _INV, _LOGABSDET, _SOLVE, det, inv, slogdet,  # noqa: E402,F401
                           solve)
from .linalg.cholesky import _CHOLESKY, cholesky  # noqa: E402,F401
from .linalg.eigh import _EIGH, eigh, eigvalsh  # noqa: E402,F401
from .linalg.einsum import (_EINSUM, _LETTERS, EINSUM_LOOP_WORK,  # noqa: E402,F401
                            _einsum_parse, _einsum_sublists, einsum, einsum_by_size)
