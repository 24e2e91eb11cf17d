"""Least squares (lstsq) with its NumPy VJP and every transform's rule, beside
its registry row."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ...core.tensor import _plain
from ..host_records import _data, _needs_grad, _record_outputs, _slot_grads
from ._common import (_T, _f64, _flat, _known, _lead, _parents, _slot, _slot_bar, _sum_terms,
                      _tg, _tT)
from .pinv import _pinv_core_graph, _pinv_dot, _pinv_tangent, _pinv_vjp_core


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


def _lstsq_graph(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    cutoff, shapes, Av, bv, xv = W.tape.host[r]
    gx = _slot(W, r, 0, shapes[0])
    gres = _slot(W, r, 1, shapes[1]) if len(shapes) > 1 else None
    A, b, x = _known(W, qa, Av), _known(W, qb, bv), _known(W, r + 1, xv)
    vector = bv.ndim == 1
    if vector:
        b, x = tg.reshape(b, (-1, 1)), tg.reshape(x, (-1, 1))
        gx = None if gx is None else tg.reshape(gx, (-1, 1))
    gA = gb = None
    if gx is not None:
        # x = pinv(A) b: through pinv's derivative (constant rank)
        X = tg.linalg.pinv(A, rcond=cutoff)
        if W.dep[qa]:
            gA = _pinv_core_graph(A, X, tg.matmul(gx, _tT(b)))
        gb = tg.matmul(_tT(X), gx)
    if gres is not None:
        # |b - A x|^2 at the minimiser: A^T (b - A x) = 0, so x's own change
        # does not contribute
        wr = 2.0 * (b - tg.matmul(A, x)) * gres
        gb = wr if gb is None else gb + wr
        t = tg.matmul(wr, _tT(x))
        gA = -t if gA is None else gA - t
    if gA is not None and W.dep[qa]:
        W.add(qa, _flat(gA))
    if gb is not None and W.dep[qb]:
        W.add(qb, _flat(gb))


_LSTSQ = register("LinalgLstsq", C.K_HOST, C.LSTSQ, np.linalg.lstsq, host_vjp=_lstsq_vjp,
                  reads="", not_replayable="multi-output host op",
                  jvp=_lstsq_jvp, second=_lstsq2, graph_vjp=_lstsq_graph)


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
