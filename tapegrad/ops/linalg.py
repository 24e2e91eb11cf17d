"""Matrix products: host records, whose VJP is left to BLAS through NumPy.

The compiled sweep stops at a host record, this module's VJP adds the
operands' gradients into the adjoint arena with NumPy, and the sweep resumes.
"""
import numpy as np

from ..kernels import codes as C
from ..tape import current
from ..tensor import Tensor, _plain, _result
from .elementwise import _operand, multiply
from .registry import CONST, register


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

