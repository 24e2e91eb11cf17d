"""Recording the host linear-algebra ops and reading their adjoints: one
output (``_host``) or several (``_record_outputs``, one OUTPUT record per
slot, and ``_slot_grads`` for the gradients that reached them), and the
matrix helpers their VJPs share.
"""
import numpy as np

from ..core.tape import current
from ..core.tensor import Tensor, _plain, _result
from .elementwise import _operand
from ..core.registry import OUTPUT
from .shape import swapaxes, tril, triu


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

def _sym(m):
    return 0.5 * (m + _T(m))

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


def _triangle_read(a, UPLO="L"):
    """The symmetric matrix that NumPy's ``eigh`` and ``cholesky`` factor: the
    triangle ``UPLO`` of ``a`` reflected onto the other, which LAPACK never
    reads. Recorded with index ops, so that every derivative (reverse,
    forward, second order, ``create_graph``, replay) is the derivative of
    NumPy's function for any input, symmetric or not: the gradient lies on
    the triangle read, its off-diagonal entries carrying both halves.
    Only a tensor that requires grad pays for it (four O(n^2) records)."""
    if not (isinstance(a, Tensor) and a._requires_grad and current().enabled):
        return a
    if UPLO == "L":
        return tril(a) + swapaxes(tril(a, -1), -1, -2)
    return triu(a) + swapaxes(triu(a, 1), -1, -2)
