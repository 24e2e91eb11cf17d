"""The symmetric eigendecomposition (eigh, eigvalsh) with its NumPy VJP and
every transform's rule, beside its registry row."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, OUTPUT, register
from ...core.tape import current
from ...core.tensor import Tensor, _plain, _result
from ..elementwise import _operand
from ..host_records import _triangle_read
from ._common import (_T, _eye, _f64, _flat, _gap_inverse, _gaps, _known, _lead, _parents,
                      _slot, _slot_bar, _sym, _sym_t, _tg, _tT)


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
    P.add(qa, _sym(dV @ inner @ _T(V) + V @ dinner @ _T(V) + V @ inner @ _T(dV)))


def _eigh_graph(W, r, u):
    # gA = sym(V (diag(gw) + F o (V^T gV)) V^T)
    tg = _tg()
    (qa,) = W.parents(r)
    _shape_a, (w, V) = W.tape.host[r]
    n = w.shape[-1]
    gw, gV = _slot(W, r, 0, w.shape), _slot(W, r, 1, V.shape)
    Vt = _known(W, r + 2, V)
    inner = None
    if gw is not None:
        inner = tg.expand_dims(gw, -1) * _eye(n)
    if gV is not None:
        K = _gaps(_known(W, r + 1, w)) * tg.matmul(_tT(Vt), gV)
        inner = K if inner is None else inner + K
    W.add(qa, _flat(_sym_t(tg.matmul(tg.matmul(Vt, inner), _tT(Vt)))))


# a decomposition with several outputs keeps them with its host record
_EIGH = register("LinalgEigh", C.K_HOST, C.EIGH, np.linalg.eigh, host_vjp=_eigh_vjp, reads="",
                 not_replayable="multi-output host op",
                 jvp=_eigh_jvp, second=_eigh2, graph_vjp=_eigh_graph)


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
