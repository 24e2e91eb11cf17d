"""The ``create_graph=True`` VJP of each compiled kind, as recorded ops:
elementwise (unary, scalar, n-ary), reductions, gathers, concatenations and
scans (``create_graph.RULES`` dispatches on the kind).

Piecewise-constant factors (masks of maximum, sign of abs) are constants of
the new graph: their derivative is zero wherever it exists.  prod and
cumprod over inputs with zero entries use products of the other elements
(no division), polynomials in the input, exact at every order.  digamma's
derivative is ``polygamma(1, x)`` (``ops/special.py``), whose own
derivative is the next polygamma.
"""
import functools
import math

import numpy as np

from .index import NoRule, _tg, scatter, take
from ...core.index_maps import gather_map, operand_maps, reduce_map
from ...kernels import codes as C
from ...kernels import formulas
from ...core.tensor import Tensor


def _d_unary(W, r, sub):
    """dy/dx of record r as a tensor (or a number): its row's derivative
    (kernels/formulas.py) evaluated with tapegrad's ops, from x and y; None
    where the op is piecewise constant."""
    if sub >= C.VIEW_FIRST:
        return 1.0
    row = formulas.ROWS_BY_SUB[sub]  # a sub with no row: KeyError, never a zero
    if row.curve == formulas.CONSTANT:
        return None
    (q,) = W.parents(r)
    graphs = {"x": lambda: W.x(q), "y": lambda: W.x(r)}
    values = {"x": lambda: W.val(q), "y": lambda: W.val(r)}
    return _evaluate(_rule(row.graph or row.d, f"derivative of {row.name}"),
                     lambda v: graphs[v](), lambda v: values[v](),
                     nonzero=functools.partial(_nonzero, row.grad))


@functools.lru_cache(maxsize=None)
def _rule(src, label):
    """A row's derivative as ``create_graph`` evaluates it
    (kernels/formulas.py: graph_form): the compiled expression, the operands
    it reads as graph tensors, and its constants' compiled sources with the
    values they read."""
    graph, flats = formulas.graph_form(src)

    def reads(s):
        return sorted(formulas._names(s) & set("abxy"))
    return (compile(graph, f"<{label}>", "eval"), reads(graph),
            [(compile(f, f"<{label}>", "eval"), reads(f)) for f in flats])


def _evaluate(rule, graph_of, value_of, **extra):
    """A rule of :func:`_rule` with tapegrad's ops: the operands it reads as
    graph tensors (``graph_of(name)``), each comparison and piecewise-constant
    part a constant of the new graph computed from the values
    (``value_of(name)``; its derivative is zero wherever it exists)."""
    code, graph_names, flats = rule
    env = dict(_namespace(), _where=_where, **extra)
    env.update((v, graph_of(v)) for v in graph_names)
    with np.errstate(all="ignore"):
        for k, (fc, names) in enumerate(flats):
            env[f"_c{k}"] = eval(fc, dict(_VALUES, **{v: value_of(v) for v in names}))  # noqa: S307
    return eval(code, env)  # noqa: S307  (the row's own formula, compiled once)


class _Functions:
    """``math`` or ``np`` as a row's formula sees it in a graph: tapegrad's
    function of the same name (``np.float64`` a no-op)."""

    def __init__(self, constants):
        self.constants = constants

    def __getattr__(self, name):
        if name in self.constants:
            return self.constants[name]
        return getattr(_tg(), name)


def _nonzero(op, v):
    """``v``, where a formula divides by it: NoRule if it has zero entries."""
    if (np.asarray(v._data if isinstance(v, Tensor) else v) == 0).any():
        raise NoRule(op, "its input has zero entries")
    return v


@functools.lru_cache(maxsize=None)
def _namespace():
    tg = _tg()
    return {"math": _Functions({"pi": math.pi, "e": math.e}),
            "np": _Functions({"float64": lambda v: v}),
            "digamma": tg.digamma, "trigamma": lambda v: _special().polygamma(1, v),
            "i0e": tg.i0e, "i1e": tg.i1e, "log_ndtr": tg.log_ndtr,
            "__builtins__": {"abs": abs}, **formulas.CONSTANTS}


def _special():
    from ...ops import special
    return special


def _unary(W, r, sub, u):
    (q,) = W.parents(r)
    d = _d_unary(W, r, sub)
    if d is None:
        return
    W.add(q, u if isinstance(d, float) and d == 1.0 else u * d)


def _scalar(W, r, sub, u):
    (q,) = W.parents(r)
    c = float(W.tape.fp[r])
    if sub == C.ADDC:
        d = u
    elif sub == C.MULC:
        d = u * c
    elif sub == C.DIVC:
        d = u / c
    elif sub == C.RSUBC:
        d = -u
    elif sub == C.RDIVC:  # c / x
        d = -u * W.x(r) / W.x(q)
    elif sub == C.POWC:  # x ** c
        d = u * (c * W.x(q) ** (c - 1.0)) if c != 0.0 else None
    elif sub == C.RPOWC:  # c ** x; the limit for c == 0 is 0 (as the kernels')
        d = None if c in (0.0, 1.0) else u * W.x(r) * (math.log(c) if c > 0.0 else math.nan)
    else:
        raise KeyError(sub)
    W.add(q, d)


def _nary(W, r, sub, u):
    """where's rule, or the binary row's partials (kernels/formulas.py)
    evaluated with tapegrad's ops: each comparison and piecewise-constant
    part a constant of the new graph, computed from the values."""
    ps = W.parents(r)
    m = W.size(r)
    if sub == C.WHERE:
        qc, qa, qb = ps
        cond = W.val(qc) != 0
        ic, ia, ib = _maps(W, r, m, ps)
        cond = cond[ic] if ic is not None else np.broadcast_to(cond, (m,))
        W.add(qa, _back(u * cond.astype(np.float64), ia, W.size(qa)))
        W.add(qb, _back(u * (~cond).astype(np.float64), ib, W.size(qb)))
        return
    row = formulas.BINARY_BY_SUB[sub]  # a sub with no row: KeyError, never a zero
    if row.curve == formulas.CONSTANT:
        return
    qa, qb = ps
    ia, ib = _maps(W, r, m, ps)
    graphs = {"a": lambda: _at(W.x(qa), ia, m), "b": lambda: _at(W.x(qb), ib, m),
              "y": lambda: W.x(r)}
    values = {"a": lambda: _atv(W.val(qa), ia, m), "b": lambda: _atv(W.val(qb), ib, m),
              "y": lambda: W.val(r)}
    seen = {}

    def at(table, name):  # each operand gathered once for both partials
        if (id(table), name) not in seen:
            seen[id(table), name] = table[name]()
        return seen[id(table), name]
    for q, idx, side in ((qa, ia, "a"), (qb, ib, "b")):
        src = getattr(row, "graph_d" + side) or getattr(row, "d" + side)
        if not W.dep[q] or src is None:  # None: the partial is zero
            continue
        d = _evaluate(_rule(src, f"d{side} of {row.name}"), lambda v: at(graphs, v),
                      lambda v: at(values, v))
        W.add(q, _back(u * d, idx, W.size(q)))


def _where(mask, u, v):
    """``u`` where ``mask``, else ``v``: a recorded op where either is a tensor."""
    if isinstance(u, Tensor) or isinstance(v, Tensor):
        return _tg().where(mask, u, v)
    return np.where(mask, u, v)


#: the namespace of a formula's piecewise-constant parts, computed from the values
_VALUES = {"np": np, "math": np, "abs": np.abs, "float": np.asarray, "__builtins__": {},
           **formulas.CONSTANTS}


def _maps(W, r, m, ps, at=0):
    return operand_maps(W.tape, r, m, [W.size(q) for q in ps], at)


def _user(W, r, sub, u):
    """A ``tg.elementwise`` op: ``u * dy/dx`` with the derivative op
    (``ops/derivative_ops.py``), itself a user op, differentiable again."""
    from ...ops.custom import USER_OPS
    from ...ops.derivative_ops import derivative_op
    op = USER_OPS[int(W.tape.ip[int(W.tape.ip0[r])])]
    ps = W.parents(r)
    if sub == C.USER_UNARY:
        (q,) = ps
        W.add(q, u * derivative_op(op, 0)(W.x(q)))
        return
    m = W.size(r)
    maps = _maps(W, r, m, ps, at=3)   # after [op id, two derivative addresses]
    xs = [_at(W.x(q), idx, m) for q, idx in zip(ps, maps)]
    for j, (q, idx) in enumerate(zip(ps, maps)):
        if W.dep[q]:
            W.add(q, _back(u * derivative_op(op, j)(*xs), idx, W.size(q)))


def _at(t, idx, m):
    """Operand value ``t`` at the m output elements (its map ``idx``)."""
    if idx is None:
        return t
    if isinstance(t, np.ndarray):
        return t[idx]
    return take(t, idx)


def _atv(v, idx, m):
    if idx is None:
        return v
    return v[idx]


def _back(t, idx, n):
    """The adjoint ``t`` of the m output elements, summed into the operand's n."""
    if idx is None:
        return t
    if isinstance(t, np.ndarray):
        return np.bincount(idx, t, minlength=n)
    return scatter(t, idx, n)


def _reduce(W, r, sub, u):
    (q,) = W.parents(r)
    n, m = W.size(q), W.size(r)
    om = reduce_map(W.tape, r, n) if m > 1 or sub in (C.SOFTMAX, C.LOG_SOFTMAX) else \
        np.zeros(n, np.int64)
    tg = _tg()
    if sub == C.SUM:
        W.add(q, take(u, om))
    elif sub == C.MEAN:
        W.add(q, take(u, om) * (m / n if n else 0.0))
    elif sub in (C.MAX, C.MIN):
        x, y = W.val(q), W.val(r)
        hit = (x == y[om]) | ((x != x) & (y[om] != y[om]))
        ties = np.bincount(om, hit.astype(np.float64), m)
        W.add(q, take(u, om) * np.where(hit, 1.0 / np.maximum(ties, 1.0)[om], 0.0))
    elif sub == C.PROD:
        if (W.val(q) != 0).all():  # y / x
            W.add(q, take(u * W.x(r), om) / W.x(q))
        elif n:
            W.add(q, _prod_others(W.x(q), om, m, n) * take(u, om))
    elif sub == C.LOGSUMEXP:
        W.add(q, take(u, om) * tg.exp(W.x(q) - take(W.x(r), om)))
    elif sub == C.SOFTMAX:
        y = W.x(r)
        rows = int(om.max()) + 1 if n else 0
        W.add(q, y * (u - take(scatter(u * y, om, rows), om)))
    elif sub == C.LOG_SOFTMAX:
        y = W.x(r)
        rows = int(om.max()) + 1 if n else 0
        W.add(q, u - tg.exp(y) * take(scatter(u, om, rows), om))
    else:
        raise KeyError(sub)


def _prod_others(x, om, m, n):
    """The product of the other elements of each element's group (``om``: its
    output), exact with zeros: the exclusive cumulative products from both
    sides, a polynomial in x, so every further order is exact too."""
    tg = _tg()
    perm = np.argsort(om, kind="stable")  # each output's elements, in a row
    k = n // m
    X = tg.reshape(take(x, perm), (m, k))
    one = np.ones((m, 1))
    left = tg.cumprod(tg.concatenate([one, X[:, :k - 1]], axis=1), axis=1)
    right = tg.flip(tg.cumprod(tg.concatenate([one, tg.flip(X[:, 1:], 1)], axis=1),
                               axis=1), 1)
    return scatter(tg.reshape(left * right, (-1,)), perm, n)


#: the most elements of the zero-safe cumprod formula (n^2 along the scan)
_CUMPROD_ZERO_MAX = 1 << 22


def _gather(W, r, sub, u):
    tape = W.tape
    (q,) = W.parents(r)
    W.add(q, scatter(u, gather_map(tape, r), W.size(q)))


def _concat(W, r, sub, u):
    tape = W.tape
    b = int(tape.ip0[r])
    m = int(tape.ip[b])
    src = tape.ip[b + 1:b + 1 + m]
    pos = tape.ip[b + 1 + m:b + 1 + 2 * m]
    for j, q in enumerate(W.parents(r)):
        if not W.dep[q]:
            continue
        ks = np.flatnonzero(src == j)
        W.add(q, scatter(take(u, ks), pos[ks], W.size(q)))


def _scan(W, r, sub, u):
    tape = W.tape
    tg = _tg()
    (q,) = W.parents(r)
    b = int(tape.ip0[r])
    shape = (int(tape.ip[b]), int(tape.ip[b + 1]), int(tape.ip[b + 2]))

    def rcumsum(t):  # sum over j >= k along the scanned axis
        t = tg.reshape(t, shape)
        return tg.reshape(tg.flip(tg.cumsum(tg.flip(t, 1), axis=1), 1), (-1,))
    if sub == C.CUMSUM:
        W.add(q, rcumsum(u))
    elif sub == C.CUMPROD:
        if (W.val(q) != 0).all():
            W.add(q, rcumsum(u * W.x(r)) / W.x(q))
            return
        # with zeros: dy_j/dx_k = prod_{i <= j, i != k} x_i (k <= j), each row k
        # a cumprod of x with x_k replaced by 1: polynomial, exact to any order
        a, n, c = shape
        X = tg.expand_dims(tg.reshape(W.x(q), shape), 1)            # (a, 1, n, c)
        eye = np.eye(n)[None, :, :, None]
        Cp = tg.cumprod(X * (1.0 - eye) + eye, axis=2)               # (a, k, j, c)
        U = tg.expand_dims(tg.reshape(u, shape), 1)
        upper = np.triu(np.ones((n, n)))[None, :, :, None]           # j >= k
        W.add(q, tg.reshape(tg.sum(U * Cp * upper, axis=2), (-1,)))
    else:
        raise KeyError(sub)
