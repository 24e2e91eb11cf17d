"""VJP kernels of elementwise ops: unary, with a scalar constant, broadcasting.

Each op's derivative is written once, as a scalar function of the input and
output values (``rules.py``: ``d_unary``, ``d_scalar``, ``d_binary``, beside
the op's forward and second derivative).  The array kernels here call them
in loops specialised per op (the sub code is a compile-time
constant in each branch, so the switch folds away and the loop vectorises);
the sweep calls them directly for one-element records.

Derivative conventions at non-smooth points follow PyTorch: ``abs'(0) = 0``;
``maximum``/``minimum`` split the gradient equally between tied operands.
"""
import numpy as np

from . import codes as C
from ._jit import inline, inner
from .interpret import ARRAY_MIN, array_form, python_copy
from ._views import OP, IP0, IP  # tape fields
from ._views import (adjoint, advance, advance_row, alias, claim, claim_zeroed, fparam, odometer,
                     parent, value)
from .rules import BINARY_TWINS, d_binary, d_scalar, d_unary
from .special_arrays import derivative as special_derivative

# -- array kernels ---------------------------------------------------------------
_CONST = C.code(C.K_NONE, C.CONST)


@inline
def _put(gx, i, v, first):
    """``gx[i] = v`` on the first write to an unzeroed adjoint, else ``+=``.

    A select rather than two loops: the old value is read (and ignored) on
    first writes, which costs a read stream but halves the compiled code;
    the loops below are specialised per op and compile time adds up.
    """
    gx[i] = v + (0.0 if first else gx[i])


@inline
def _unary_loop(sub, g, x, y, gx, first):
    for i in range(g.size):
        _put(gx, i, g[i] * d_unary(sub, x[i], y[i]), first)


# The loops' whole-array forms, for the interpreted tier (interpret.array_form):
# the same rule on whole arrays, every output written after all is computed.
def _d_arrays(sub, a, b, y):
    """``d_binary`` on arrays: the rule itself, or its twin where the rule
    branches on a value (rules.BINARY_TWINS).  Plain Python, called only
    from the interpreted tier's array forms, so it calls the rule's Python
    copy, never the compiled rule."""
    twin = BINARY_TWINS.get(sub)
    if twin is not None:
        return python_copy(twin)(a, b, y)
    return python_copy(d_binary)(sub, a, b, y)


@array_form(_unary_loop)
def _unary_arrays(sub, g, x, y, gx, first):
    if g.size < ARRAY_MIN:
        return NotImplemented
    d = special_derivative(sub, x, y)   # a special function: its own small kernel
    v = g * (d_unary(sub, x, y) if d is None else d)
    gx[:] = v + (0.0 if first else gx)


# The VJP loops of each family with the common subs compiled for a constant
# sub (the switch folds away and the loop vectorises; the rest share one loop
# with the switch).  One kernel per family, shared by the sweep's VJPs below
# and by replay's fused segments (kernels/replay.py), which call them block
# by block.
@inner
def unary_loops(sub, g, x, y, gx, first):
    if sub == C.IDENT or sub >= C.VIEW_FIRST:
        _unary_loop(C.IDENT, g, x, y, gx, first)
    elif sub == C.NEG:
        _unary_loop(C.NEG, g, x, y, gx, first)
    elif sub == C.EXP:
        _unary_loop(C.EXP, g, x, y, gx, first)
    elif sub == C.LOG:
        _unary_loop(C.LOG, g, x, y, gx, first)
    elif sub == C.SQUARE:
        _unary_loop(C.SQUARE, g, x, y, gx, first)
    elif sub == C.TANH:
        _unary_loop(C.TANH, g, x, y, gx, first)
    else:
        _unary_loop(sub, g, x, y, gx, first)


@inner
def unary_vjp(T, r, sub):
    xr = parent(T, r, 0)
    g, gx = adjoint(T, r), adjoint(T, xr)
    x, y = value(T, xr), value(T, r)
    if (sub == C.IDENT or sub >= C.VIEW_FIRST) and alias(T, xr, r):
        return
    unary_loops(sub, g, x, y, gx, claim(T, xr))


@inline
def _scalar_loop(sub, g, x, y, c, gx, first):
    for i in range(g.size):
        _put(gx, i, g[i] * d_scalar(sub, x[i], y[i], c), first)


@array_form(_scalar_loop)
def _scalar_arrays(sub, g, x, y, c, gx, first):
    if g.size < ARRAY_MIN:
        return NotImplemented
    v = g * d_scalar(sub, x, y, c)
    gx[:] = v + (0.0 if first else gx)


@inner
def scalar_loops(sub, g, x, y, c, gx, first):
    if sub == C.ADDC:
        _scalar_loop(C.ADDC, g, x, y, c, gx, first)
    elif sub == C.MULC:
        _scalar_loop(C.MULC, g, x, y, c, gx, first)
    else:
        _scalar_loop(sub, g, x, y, c, gx, first)


@inner
def scalar_vjp(T, r, sub):
    xr = parent(T, r, 0)
    g, gx = adjoint(T, r), adjoint(T, xr)
    x, y = value(T, xr), value(T, r)
    c = fparam(T, r)
    if sub == C.ADDC and alias(T, xr, r):
        return
    scalar_loops(sub, g, x, y, c, gx, claim(T, xr))


@inline
def _operand_index(i, n, m):
    """Index into an operand of size ``m`` for output element ``i`` when no
    operand is broadcast beyond a single element (``ip`` has ``nd == 0``)."""
    return i if m == n else 0


@inline
def _binary_same_shape(sub, g, xa, xb, y, ga, gb, first):
    for i in range(g.size):
        da, db = d_binary(sub, xa[i], xb[i], y[i])
        gi = g[i]
        _put(ga, i, gi * da, first)
        _put(gb, i, gi * db, first)


@array_form(_binary_same_shape)
def _binary_same_shape_arrays(sub, g, xa, xb, y, ga, gb, first):
    if g.size < ARRAY_MIN:
        return NotImplemented
    da, db = _d_arrays(sub, xa, xb, y)
    va, vb = g * da, g * db
    ga[:] = va + (0.0 if first else ga)
    gb[:] = vb + (0.0 if first else gb)


@inline
def _binary_one_side(sub, g, xa, xb, y, gx, first, left):
    """Same-shape binary VJP into one operand only (the other is a constant,
    whose adjoint nobody reads: writing it would be a wasted output stream)."""
    for i in range(g.size):
        da, db = d_binary(sub, xa[i], xb[i], y[i])
        _put(gx, i, g[i] * (da if left else db), first)


@array_form(_binary_one_side)
def _binary_one_side_arrays(sub, g, xa, xb, y, gx, first, left):
    if g.size < ARRAY_MIN:
        return NotImplemented
    da, db = _d_arrays(sub, xa, xb, y)
    v = g * (da if left else db)
    gx[:] = v + (0.0 if first else gx)


@inline
def _binary_self(sub, g, x, y, gx, first):
    for i in range(g.size):
        da, db = d_binary(sub, x[i], x[i], y[i])
        _put(gx, i, g[i] * (da + db), first)


@array_form(_binary_self)
def _binary_self_arrays(sub, g, x, y, gx, first):
    if g.size < ARRAY_MIN:
        return NotImplemented
    da, db = _d_arrays(sub, x, x, y)
    v = g * (da + db)
    gx[:] = v + (0.0 if first else gx)


_BOTH, _LEFT, _RIGHT, _SELF = 0, 1, 2, 3


@inner
def _binary_any(sub, g, xa, xb, y, ga, gb, first, mode):
    """The VJP loop of the less common binary subs, for every operand case
    (``mode``: both operands, the left or right one only, or ``x op x`` into
    ``ga``).  One loop with the whole ``d_binary`` switch, shared by the
    three kernels below: a copy in each would optimise that switch three
    times over (compile time) for loops bound by their transcendental
    functions anyway."""
    for i in range(g.size):
        da, db = d_binary(sub, xa[i], xb[i], y[i])
        gi = g[i]
        if mode == _BOTH:
            _put(ga, i, gi * da, first)
            _put(gb, i, gi * db, first)
        elif mode == _LEFT:
            _put(ga, i, gi * da, first)
        elif mode == _RIGHT:
            _put(gb, i, gi * db, first)
        else:
            _put(ga, i, gi * (da + db), first)


@array_form(_binary_any)
def _binary_any_arrays(sub, g, xa, xb, y, ga, gb, first, mode):
    if g.size < ARRAY_MIN:
        return NotImplemented
    da, db = _d_arrays(sub, xa, xb, y)
    if mode == _BOTH:
        va, vb = g * da, g * db
        ga[:] = va + (0.0 if first else ga)
        gb[:] = vb + (0.0 if first else gb)
    elif mode == _LEFT:
        va = g * da
        ga[:] = va + (0.0 if first else ga)
    elif mode == _RIGHT:
        vb = g * db
        gb[:] = vb + (0.0 if first else gb)
    else:
        va = g * (da + db)
        ga[:] = va + (0.0 if first else ga)


@inner
def binary_self_loops(sub, g, x, y, gx, first):
    if sub == C.MUL:
        _binary_self(C.MUL, g, x, y, gx, first)
    else:
        _binary_any(sub, g, x, x, y, gx, gx, first, _SELF)


@inner
def binary_loops(sub, g, xa, xb, y, ga, gb, first):
    if sub == C.ADD:
        _binary_same_shape(C.ADD, g, xa, xb, y, ga, gb, first)
    elif sub == C.SUB:
        _binary_same_shape(C.SUB, g, xa, xb, y, ga, gb, first)
    elif sub == C.MUL:
        _binary_same_shape(C.MUL, g, xa, xb, y, ga, gb, first)
    else:
        _binary_any(sub, g, xa, xb, y, ga, gb, first, _BOTH)


@inner
def binary_one_side_loops(sub, g, xa, xb, y, gx, first, left):
    if sub == C.MUL:
        _binary_one_side(C.MUL, g, xa, xb, y, gx, first, left)
    elif sub == C.SUB:
        _binary_one_side(C.SUB, g, xa, xb, y, gx, first, left)
    else:
        _binary_any(sub, g, xa, xb, y, gx, gx, first, _LEFT if left else _RIGHT)


@inner
def nary_vjp(T, r, sub):
    """Binary ops whose operands have the output's shape (the common case).

    Records with a broadcast operand, and ``where``, go to
    :func:`broadcast_vjp` (``dispatch.slot`` tells them apart), so that a
    program without broadcasting never compiles the odometer loops.
    """
    g = adjoint(T, r)
    ar, br = parent(T, r, 0), parent(T, r, 1)
    xa, xb, y = value(T, ar), value(T, br), value(T, r)
    ga, gb = adjoint(T, ar), adjoint(T, br)
    if ar == br:  # x op x: both partials to one adjoint
        binary_self_loops(sub, g, xa, y, ga, claim(T, ar))
        return
    ca, cb = T[OP][ar] == _CONST, T[OP][br] == _CONST
    if (sub == C.ADD or sub == C.SUB) and alias(T, ar, r):
        # a now owns g as its adjoint; b receives +-g (unless b is a constant)
        if cb:
            return
        first = claim(T, br)
        if sub == C.ADD:
            _unary_loop(C.IDENT, g, xb, y, gb, first)
        else:
            _unary_loop(C.NEG, g, xb, y, gb, first)
        return
    if ca or cb:  # x op constant, constant op x
        if ca and cb:
            return
        xr = br if ca else ar
        binary_one_side_loops(sub, g, xa, xb, y, adjoint(T, xr), claim(T, xr), cb)
        return
    fa, fb = claim(T, ar), claim(T, br)
    first = fa and fb
    if fa != fb:  # one was written before: accumulate into both
        if fa:
            ga[:] = 0.0
        else:
            gb[:] = 0.0
    binary_loops(sub, g, xa, xb, y, ga, gb, first)


@inline
def _broadcast_flat(sub, g, xa, xb, y, ga, gb, ca, cb):
    """The VJP of a binary op whose operands are full-size or one element,
    into zeroed adjoints (a constant operand's is not written)."""
    n, ma, mb = g.size, xa.size, xb.size
    for i in range(n):
        ia = _operand_index(i, n, ma)
        ib = _operand_index(i, n, mb)
        da, db = d_binary(sub, xa[ia], xb[ib], y[i])
        if not ca:
            ga[ia] += g[i] * da
        if not cb:
            gb[ib] += g[i] * db


def _add_in_order(acc, v):
    """``acc + v[0] + v[1] + ...`` summed left to right, as a loop does (a
    cumulative sum is sequential; ``np.sum`` is pairwise).  A float32
    adjoint that takes float64 terms rounds after each, as the loop stores
    each sum (a Python loop: float32 sweeps only)."""
    if acc.dtype == np.float32 and v.dtype != np.float32:
        a, f32 = float(acc), np.float32
        for t in v.tolist():
            a = float(f32(a + t))
        return f32(a)
    return np.cumsum(np.concatenate((np.array([acc]), v)))[-1]


@array_form(_broadcast_flat)
def _broadcast_flat_arrays(sub, g, xa, xb, y, ga, gb, ca, cb):
    n, ma, mb = g.size, xa.size, xb.size
    if n < ARRAY_MIN:
        return NotImplemented
    da, db = _d_arrays(sub, xa if ma == n else xa[0], xb if mb == n else xb[0], y)
    va = g * np.broadcast_to(da, (n,))
    vb = g * np.broadcast_to(db, (n,))
    ta = None if ca else (ga + va if ma == n else _add_in_order(ga[0], va))
    tb = None if cb else (gb + vb if mb == n else _add_in_order(gb[0], vb))
    if ta is not None:
        ga[:] = ta
    if tb is not None:
        gb[:] = tb


@inner
def broadcast_vjp(T, r, sub):
    """Broadcasting binary ops and ``where``; gradients reduced to each shape.

    ``ip`` holds ``[nd, out_shape, strides of operand 0, strides of 1, ...]``
    (just ``[0]`` when no operand is broadcast beyond a single element).
    """
    ip = T[IP]
    b = T[IP0][r]
    nd = ip[b]
    g = adjoint(T, r)
    n = g.size
    if sub == C.WHERE:
        cr, ar, br = parent(T, r, 0), parent(T, r, 1), parent(T, r, 2)
        cond = value(T, cr)
        claim_zeroed(T, ar)
        claim_zeroed(T, br)
        ga, gb = adjoint(T, ar), adjoint(T, br)
        mc, ma, mb = cond.size, ga.size, gb.size
        if nd == 0:  # every operand full-size or a single element
            for i in range(n):
                if cond[_operand_index(i, n, mc)] != 0.0:
                    ga[_operand_index(i, n, ma)] += g[i]
                else:
                    gb[_operand_index(i, n, mb)] += g[i]
            return
        shape, strides, cnt, pos = odometer(ip, b, nd, 3)
        for i in range(n):
            if cond[pos[0]] != 0.0:
                ga[pos[1]] += g[i]
            else:
                gb[pos[2]] += g[i]
            advance(shape, strides, cnt, pos)
        return
    ar, br = parent(T, r, 0), parent(T, r, 1)
    xa, xb, y = value(T, ar), value(T, br), value(T, r)
    ga, gb = adjoint(T, ar), adjoint(T, br)
    ma, mb = xa.size, xb.size
    ca, cb = T[OP][ar] == _CONST, T[OP][br] == _CONST
    # x + c, x - c, c + x with a broadcast constant c (a bias, a shift):
    # x has the output's shape and receives g unchanged -- it takes g's
    # memory as its adjoint (see alias) instead of a copy
    if cb and ma == n and (sub == C.ADD or sub == C.SUB) and alias(T, ar, r):
        return
    if ca and mb == n and sub == C.ADD and alias(T, br, r):
        return
    claim_zeroed(T, ar)
    claim_zeroed(T, br)
    if nd == 0:  # every operand full-size or a single element
        _broadcast_flat(sub, g, xa, xb, y, ga, gb, ca, cb)
        return
    shape, strides, cnt, pos = odometer(ip, b, nd, 2)
    inner = shape[nd - 1]
    sa, sb = strides[0, nd - 1], strides[1, nd - 1]
    for i in range(0, n, max(inner, 1)):
        _broadcast_rows(sub, g, xa, xb, y, ga, gb, ca, cb, i, inner, pos[0], pos[1], sa, sb)
        advance_row(shape, strides, cnt, pos)


@inline
def _broadcast_row(sub, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb):
    """One row of the last axis of a broadcasting VJP: element ``i0 + j``
    reads operand elements ``ia + j*sa`` and ``ib + j*sb`` (stride 0: a
    broadcast axis, whose adjoint accumulates in element order)."""
    for j in range(inner):
        i = i0 + j
        da, db = d_binary(sub, xa[ia], xb[ib], y[i])
        if not ca:
            ga[ia] += g[i] * da
        if not cb:
            gb[ib] += g[i] * db
        ia += sa
        ib += sb


@inline
def _broadcast_rows(sub, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb):
    # the common subs with a constant sub: their derivative folds into the loop
    if sub == C.ADD:
        _broadcast_row(C.ADD, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb)
    elif sub == C.SUB:
        _broadcast_row(C.SUB, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb)
    elif sub == C.MUL:
        _broadcast_row(C.MUL, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb)
    elif sub == C.DIV:
        _broadcast_row(C.DIV, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb)
    else:
        _broadcast_row(sub, g, xa, xb, y, ga, gb, ca, cb, i0, inner, ia, ib, sa, sb)
