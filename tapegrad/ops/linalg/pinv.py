"""The pseudo-inverse (pinv) with its NumPy VJP and every transform's rule,
beside its registry row; lstsq's rules reuse its derivative from here."""
import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ..host_records import _host, _triangle_read
from ._common import _T, _flat, _lead, _parents, _sym, _sym_t, _tg, _tT


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


def _pinv_tangent(A, X, dA):
    """d pinv(A) where the rank is constant (Golub and Pereyra); forward
    mode's pinv and lstsq tangents use it too."""
    m, n = A.shape[-2], A.shape[-1]
    dAT = _T(dA)
    return (-X @ dA @ X + X @ _T(X) @ dAT @ (np.eye(m) - A @ X)
            + (np.eye(n) - X @ A) @ dAT @ _T(X) @ X)


def _pinv_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    hermitian, shape_a, shape_x = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    X = tan.value(tape, r, shape_x)
    dA = tan.lead(ra, shape_a)
    tan.put(r, _pinv_tangent(A, X, _sym(dA) if hermitian else dA))


def _pinv_dot(A, X, G, dA, dX, dG=None):
    """The tangent of ``_pinv_vjp_core(A, X, G)`` along (dA, dX, dG)."""
    m, n = A.shape[-2], A.shape[-1]
    XT, dXT, GT = _T(X), _T(dX), _T(G)
    RA, RX = np.eye(m) - A @ X, np.eye(n) - X @ A  # the projectors' complements
    t = -(dXT @ G @ XT + XT @ G @ dXT)
    t = t - (dA @ X + A @ dX) @ GT @ X @ XT + RA @ GT @ (dX @ XT + X @ dXT)
    t = t + (dXT @ X + XT @ dX) @ GT @ RX - XT @ X @ GT @ (dX @ A + X @ dA)
    if dG is not None:  # the core is linear in G
        t = t + _pinv_vjp_core(A, X, dG)
    return t


def _pinv2(P, r):
    (qa,) = P.parents(r)
    hermitian, shape_a, shape_x = P.tape.host[r]
    dA, dX = _lead(P, qa, shape_a), _lead(P, r, shape_x)
    if dA is None:
        return
    A = P.val(qa).reshape(shape_a)
    X = P.val(r).reshape(shape_x)
    t = _pinv_dot(A, X, P.ybar(r).reshape(shape_x), dA, dX)
    P.add(qa, _sym(t) if hermitian else t)


def _pinv_core_graph(A, X, G):
    """gA for X = pinv(A) where the rank is constant, G the gradient of X."""
    tg = _tg()
    m, n = A.shape[-2], A.shape[-1]
    mm = tg.matmul
    XT = _tT(X)
    g = -mm(mm(XT, G), XT)
    g = g + mm(mm(mm(np.eye(m) - mm(A, X), _tT(G)), X), XT)
    g = g + mm(mm(mm(XT, X), _tT(G)), np.eye(n) - mm(X, A))
    return g


def _pinv_graph(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    hermitian, shape_a, shape_x = W.tape.host[r]
    A = tg.reshape(W.x(qa), shape_a)
    X = tg.reshape(W.x(r), shape_x)
    g = _pinv_core_graph(A, X, tg.reshape(u, shape_x))
    W.add(qa, _flat(_sym_t(g) if hermitian else g))


_PINV = register("LinalgPinv", C.K_HOST, C.PINV, np.linalg.pinv, host_vjp=_pinv_vjp, reads="xy",
                 replay=lambda xs, h: np.linalg.pinv(xs[0], hermitian=h[0]), host_extra=1,
                 file_arity=1, jvp=_pinv_jvp, second=_pinv2, graph_vjp=_pinv_graph)


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
