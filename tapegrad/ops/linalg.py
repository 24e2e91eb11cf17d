"""Matrix products: host records, whose VJP is left to BLAS through NumPy.

The compiled sweep stops at a host record, this module's VJP adds the
operands' gradients into the adjoint arena with NumPy, and the sweep resumes.
"""
import numpy as np

from ..kernels import codes as C
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


_MATMUL = register("Mm", C.K_HOST, 0, np.matmul, host_vjp=_matmul_vjp)


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


def dot(a, b):
    """``numpy.dot`` for scalars, vectors and matrices.

    N-d ``dot`` (sum over the last axis of a and second-to-last of b) is not
    supported yet: use :func:`matmul`.
    """
    nda, ndb = np.ndim(a), np.ndim(b)
    if nda == 0 or ndb == 0:
        return multiply(a, b)
    if nda > 2 or ndb > 2:
        raise NotImplementedError(
            "tapegrad.dot supports operands of at most 2 dimensions; for stacks "
            "of matrices use tapegrad.matmul (the @ operator)")
    return matmul(a, b)



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
        adj.add(ra, _unbroadcast(-GB @ _T(X[..., None] if vector else X), shape_a))


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


def _einsum_parse(subscripts, n):
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise NotImplementedError("tapegrad.einsum: '...' is not supported yet; "
                                  "write the axes out")
    ins, _, out = spec.partition("->")
    ins = ins.split(",")
    if len(ins) != n:
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {n} operands")
    if "->" not in spec:  # implicit output: indices seen once, sorted
        seen = "".join(ins)
        out = "".join(sorted(c for c in set(seen) if seen.count(c) == 1))
    for s in ins:
        if len(set(s)) != len(s):
            raise NotImplementedError(
                f"tapegrad.einsum: repeated index in one operand ({s!r}, a diagonal) "
                "is not supported yet; use tg.diagonal")
    return ins, out


def _einsum_vjp(tape, adj, r):
    ins, out, *shapes, out_shape = tape.host[r]
    a0 = tape.arg0[r]
    parents = [tape.args[a0 + k] for k in range(len(ins))]
    values = [adj.value(tape, p, s) for p, s in zip(parents, shapes)]
    g = adj[r].reshape(out_shape)
    for k, p in enumerate(parents):
        if tape.op[p] == CONST:
            continue
        others = [ins[j] for j in range(len(ins)) if j != k]
        present = set(out).union(*others)
        kept = "".join(c for c in ins[k] if c in present)
        spec = ",".join([out] + others) + "->" + kept
        gk = np.einsum(spec, g, *[values[j] for j in range(len(ins)) if j != k],
                       optimize=True)
        # indices summed within operand k alone: its gradient is broadcast there
        for axis, c in enumerate(ins[k]):
            if c not in present:
                gk = np.expand_dims(gk, axis)
        adj.add(p, np.broadcast_to(gk, shapes[k]))


_INV = register("LinalgInv", C.K_HOST, 1, np.linalg.inv, host_vjp=_inv_vjp)
_SOLVE = register("LinalgSolve", C.K_HOST, 2, np.linalg.solve, host_vjp=_solve_vjp)
_DET = register("LinalgDet", C.K_HOST, 3, np.linalg.det, host_vjp=_det_vjp)
_LOGABSDET = register("LinalgSlogdet", C.K_HOST, 4, None, host_vjp=_logabsdet_vjp)


_CHOLESKY = register("LinalgCholesky", C.K_HOST, 6, np.linalg.cholesky,
                     host_vjp=_cholesky_vjp)
_EIGH = register("LinalgEigh", C.K_HOST, 7, np.linalg.eigh, host_vjp=_eigh_vjp)


_EINSUM = register("Einsum", C.K_HOST, 8, np.einsum, host_vjp=_einsum_vjp)


def einsum(subscripts, *operands):
    """``numpy.einsum`` with explicit or implicit output, differentiable in
    every operand.  Not supported yet: ``...`` and repeated indices within
    one operand (diagonals).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor(np.ones((2, 3)), requires_grad=True)
    >>> tg.einsum("ij,j->i", a, np.arange(3.0))
    tensor([3.0, 3.0], grad_fn=<EinsumBackward>)
    """
    ins, out = _einsum_parse(subscripts, len(operands))
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
    """``numpy.linalg.solve``, batched; differentiable in both operands."""
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
