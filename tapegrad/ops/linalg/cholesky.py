"""The Cholesky factor (cholesky) with its NumPy VJP and every transform's rule,
beside its registry row."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ..host_records import _host, _triangle_read
from ._common import _T, _eye, _flat, _lead, _parents, _sym, _sym_t, _tg, _tT


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


def _phi(m):
    """The lower triangle with half the diagonal (the Cholesky VJP's Phi)."""
    return np.tril(m) - 0.5 * np.einsum("...ii->...i", m)[..., None] * np.eye(m.shape[-1])


def _cholesky2(P, r):
    # Abar = sym(L^-T Phi(L^T G) L^-1); d(L^-1) = -L^-1 dL L^-1
    (qa,) = P.parents(r)
    shape_a, shape_l = P.tape.host[r]
    dL = _lead(P, r, shape_l)
    if dL is None:
        return
    Lf = P.val(r).reshape(shape_l)
    G = P.ybar(r).reshape(shape_l)
    Li = np.linalg.inv(Lf)
    dLi = -(Li @ dL @ Li)
    Ph, dPh = _phi(_T(Lf) @ G), _phi(_T(dL) @ G)
    P.add(qa, _sym(_T(dLi) @ Ph @ Li + _T(Li) @ dPh @ Li + _T(Li) @ Ph @ dLi))


def _cholesky_graph(W, r, u):
    # gA = sym(L^-T Phi(L^T gL) L^-1), Phi: the lower triangle, half diagonal
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_l = W.tape.host[r]
    n = shape_l[-1]
    Lm = tg.reshape(W.x(r), shape_l)
    G = tg.reshape(u, shape_l)
    P = tg.matmul(_tT(Lm), G) * (np.tril(np.ones((n, n))) - 0.5 * _eye(n))
    Li = tg.linalg.inv(Lm)
    W.add(qa, _flat(_sym_t(tg.matmul(tg.matmul(_tT(Li), P), Li))))


_CHOLESKY = register("LinalgCholesky", C.K_HOST, C.CHOLESKY, np.linalg.cholesky,
                     host_vjp=_cholesky_vjp, reads="y",
                     replay=lambda xs, h: np.linalg.cholesky(*xs), file_arity=1,
                     jvp=_cholesky_jvp, second=_cholesky2, graph_vjp=_cholesky_graph)


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
