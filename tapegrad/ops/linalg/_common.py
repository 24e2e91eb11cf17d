"""The small helpers the host linear-algebra rules share -- array math, and
readers of the context object a transform hands each rule (the tangent
store ``tan``, the second-order pass ``P``, the create_graph walk ``W``).
"""
import sys

import numpy as np

from ...kernels import codes as C
from ...kernels._views import SMALL
from ...core.tensor import _result
from ..host_records import _T, _f64, _sym  # noqa: F401  (shared through this module)


def _unbroadcast(g, shape):
    """Sum ``g`` over the leading axes that broadcasting added to ``shape``."""
    extra = g.ndim - len(shape)
    if extra:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g


def _parents(tape, r):
    a0 = tape.arg0[r]
    return [int(q) for q in tape.args[a0:tape.arg0[r + 1]]]


def _pad(t, nd):
    """``(p,) + shape`` tangents with unit axes after p up to ``nd`` axes of
    shape, so that batch axes line up when they broadcast."""
    return t.reshape(t.shape[:1] + (1,) * (nd + 1 - t.ndim) + t.shape[1:])


def _sum_terms(*terms):
    got = [t for t in terms if t is not None]
    return got[0] if len(got) == 1 else sum(got[1:], got[0])


# -- second order: readers of the pass P -------------------------------------------------
def _lead(P, q, shape):
    """Record q's tangents as ``(p,) + shape``, or None (q is independent of
    the inputs)."""
    t = P.dot(q)
    return None if t is None else t.reshape((P.p,) + tuple(shape))


def _slot_bar(P, q, shape):
    """The ordinary adjoint (vector 0) of output slot q, or None where no
    gradient reached it (its memory is not initialised then)."""
    adj = P.adj
    if q >= adj.reached.size or not adj.reached[q]:
        return None
    return P.ybar(q).reshape(shape)


def _gap_inverse(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it, and the mask."""
    off = ~np.eye(w.shape[-1], dtype=bool)
    diff = w[..., None, :] - w[..., :, None]
    with np.errstate(divide="ignore"):
        return np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)


def _sum_rows(t, shape):
    """Sum (p,) + broadcast shape ``t`` back to (p,) + shape."""
    extra = t.ndim - 1 - len(shape)
    if extra:
        t = t.sum(axis=tuple(range(1, 1 + extra)))
    axes = tuple(i + 1 for i, s in enumerate(shape) if s == 1 and t.shape[i + 1] != 1)
    return t.sum(axis=axes, keepdims=True) if axes else t


# -- create_graph: the formulas on tensors of the graph, through the walk W --------------
def _tg():
    # the package's ops by name, looked up when a rule runs (``import tapegrad``
    # has completed by then): no import of the layers above
    return sys.modules["tapegrad"]


def _tT(m):
    return _tg().swapaxes(m, -1, -2)


def _sum_to(t, shape):
    """Sum a broadcast ``t`` back to ``shape``."""
    tg = _tg()
    extra = t.ndim - len(shape)
    if extra:
        t = tg.sum(t, axis=tuple(range(extra)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and t.shape[i] != 1)
    if axes:
        t = tg.sum(t, axis=axes, keepdims=True)
    return t


def _flat(t):
    return _tg().reshape(t, (-1,))


def _slot(W, r, s, shape):
    """The adjoint of output slot s of multi-output record r, shaped, or None."""
    a = W.adj.get(r + 1 + s)
    return None if a is None else _tg().reshape(a, shape)


def _known(W, q, value):
    """Record q as a tensor of the graph whose value (not necessarily kept on
    the tape: the host record holds it) is ``value``."""
    value = np.asarray(value, np.float64)
    if int(W.tape.op[q]) == C.code(C.K_NONE, C.CONST):
        return value
    h = W.handles.get(q)
    if h is None:  # flat, as every handle (the rules of other records read it)
        h = W.handles[q] = _result(W.tape, q, value.reshape(-1))
    return _tg().reshape(h, value.shape)


def _leading(W, q, shape, part, index):
    """``x[index]`` of record q (of ``shape``) as a tensor of the graph, where
    only that part's value, ``part``, may be known: the rest is filled with
    zeros in a tensor of its own, never cached as the record's handle, so no
    other formula reads the filler."""
    tape = W.tape
    n = int(np.prod(shape))
    if n <= SMALL or tape.rix[q] >= 0 or q in W.handles \
            or int(tape.op[q]) == C.code(C.K_NONE, C.CONST):
        t = W.x(q)
    else:
        full = np.zeros(shape)
        full[index] = part
        t = _result(tape, q, full)
    tg = _tg()
    return tg.reshape(t, shape)[index]


def _eye(n):
    return np.eye(n)


def _off(n):
    return 1.0 - np.eye(n)


def _gaps(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it (distinct w: check)."""
    tg = _tg()
    n = w.shape[-1]
    diff = tg.expand_dims(w, -2) - tg.expand_dims(w, -1)
    return _off(n) / (diff + _eye(n))


def _sym_t(m):
    return 0.5 * (m + _tT(m))
