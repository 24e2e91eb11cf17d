"""VJP kernels of elementwise ops: unary, with a scalar constant, broadcasting.

Each op's derivative is written once, as a scalar function of the input and
output values (``d_unary``, ``d_scalar``, ``d_binary``).  The array kernels
call them in loops specialised per op (the sub code is a compile-time
constant in each branch, so the switch folds away and the loop vectorises);
the sweep calls them directly for one-element records.

Derivative conventions at non-smooth points follow PyTorch: ``abs'(0) = 0``;
``maximum``/``minimum`` split the gradient equally between tied operands.
"""
import math

import numpy as np

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)

from . import codes as C
from ._jit import inline, inner
from ._views import (adjoint, advance, alias, claim, claim_zeroed, fparam, odometer,
                     parent, value)
from .unhandled import unhandled


@inline
def d_unary(sub, x, y):
    """dy/dx of ``y = f(x)`` at one element."""
    if sub == C.IDENT or sub >= C.VIEW_FIRST:
        return 1.0
    if sub == C.NEG:
        return -1.0
    if sub == C.EXP:
        return y
    if sub == C.LOG:
        return 1.0 / x
    if sub == C.LOG1P:
        return 1.0 / (1.0 + x)
    if sub == C.EXPM1:
        return y + 1.0
    if sub == C.SQRT:
        return 0.5 / y
    if sub == C.SQUARE:
        return 2.0 * x
    if sub == C.SIN:
        return math.cos(x)
    if sub == C.COS:
        return -math.sin(x)
    if sub == C.TAN:
        return 1.0 + y * y
    if sub == C.TANH:
        return 1.0 - y * y
    if sub == C.SINH:
        return math.cosh(x)
    if sub == C.COSH:
        return math.sinh(x)
    if sub == C.ARCSIN:
        return 1.0 / math.sqrt(1.0 - x * x)
    if sub == C.ARCCOS:
        return -1.0 / math.sqrt(1.0 - x * x)
    if sub == C.ARCTAN:
        return 1.0 / (1.0 + x * x)
    if sub == C.ABS or sub == C.FABS:
        return np.sign(x)
    if sub == C.RECIPROCAL:
        return -y * y
    if sub == C.EXP2:
        return y * _LN2
    if sub == C.LOG2:
        return 1.0 / (x * _LN2)
    if sub == C.LOG10:
        return 1.0 / (x * _LN10)
    if sub == C.CBRT:
        return 1.0 / (3.0 * y * y)
    if sub == C.ARCSINH:
        return 1.0 / math.sqrt(x * x + 1.0)
    if sub == C.ARCCOSH:
        return 1.0 / math.sqrt(x * x - 1.0)
    if sub == C.ARCTANH:
        return 1.0 / (1.0 - x * x)
    if sub == C.DEG2RAD:
        return math.pi / 180.0
    if sub == C.RAD2DEG:
        return 180.0 / math.pi
    if sub == C.ZERO or C.ZERO_FIRST <= sub < C.VIEW_FIRST:  # piecewise constant
        return 0.0
    return unhandled(sub)


@inline
def d_scalar(sub, x, y, c):
    """dy/dx of ``y = x op c`` or ``y = c op x`` at one element."""
    if sub == C.ADDC:
        return 1.0
    if sub == C.MULC:
        return c
    if sub == C.DIVC:
        return 1.0 / c
    if sub == C.RSUBC:
        return -1.0
    if sub == C.RDIVC:
        return -y / x
    if sub == C.POWC:
        # squares and cubes (the common exponents) without a pow() call per
        # element, which also keeps the loop vectorised; the same numbers,
        # since x ** 1.0 and x ** 2.0 are exact
        if c == 2.0:
            return 2.0 * x
        if c == 3.0:
            return 3.0 * (x * x)
        return c * x ** (c - 1.0) if c != 0.0 else 0.0
    if sub == C.RPOWC:  # d c**x = c**x log c; the limit for c == 0 is 0
        return y * math.log(c) if c != 0.0 else 0.0
    return unhandled(sub)


@inline
def d_binary(sub, a, b, y):
    """(dy/da, dy/db) of ``y = a op b`` at one element."""
    if sub == C.ADD:
        return 1.0, 1.0
    if sub == C.SUB:
        return 1.0, -1.0
    if sub == C.MUL:
        return b, a
    if sub == C.DIV:
        return 1.0 / b, -y / b
    if sub == C.POW or sub == C.FLOAT_POWER:
        da = b * a ** (b - 1.0) if b != 0.0 else 0.0
        # d/db a**b = a**b log a; the limit at a == 0 (b > 0) is 0, as in PyTorch
        db = y * math.log(a) if a != 0.0 else 0.0
        return da, db
    if sub == C.ARCTAN2:
        r2 = a * a + b * b
        return b / r2, -a / r2
    if sub == C.HYPOT:
        return a / y, b / y
    if sub == C.LOGADDEXP:
        return math.exp(a - y), math.exp(b - y)
    if sub == C.LOGADDEXP2:
        return 2.0 ** (a - y), 2.0 ** (b - y)
    if sub == C.COPYSIGN:  # |a| with b's sign
        return math.copysign(1.0, a) * math.copysign(1.0, b), 0.0
    if sub == C.FMOD:  # a - trunc(a / b) * b
        return 1.0, -float(np.trunc(a / b))
    if sub == C.REMAINDER:  # a - floor(a / b) * b
        return 1.0, -math.floor(a / b)
    if sub == C.FMAX or sub == C.FMIN:  # NaN loses (it wins in maximum/minimum)
        if a != a:
            return 0.0, 1.0
        if b != b:
            return 1.0, 0.0
        if a == b:
            return 0.5, 0.5
        return (1.0, 0.0) if (a > b) == (sub == C.FMAX) else (0.0, 1.0)
    if sub >= C.NARY_ZERO_FIRST:  # piecewise constant (floor_divide, heaviside)
        return 0.0, 0.0
    if sub == C.MAXIMUM:
        if a > b:
            return 1.0, 0.0
        if a < b:
            return 0.0, 1.0
        if a == b:
            return 0.5, 0.5
        return (1.0, 0.0) if a != a else (0.0, 1.0)  # NaN wins, as in NumPy
    if sub == C.MINIMUM:
        if a < b:
            return 1.0, 0.0
        if a > b:
            return 0.0, 1.0
        if a == b:
            return 0.5, 0.5
        return (1.0, 0.0) if a != a else (0.0, 1.0)
    return unhandled(sub), unhandled(sub)


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


@inline
def _binary_one_side(sub, g, xa, xb, y, gx, first, left):
    """Same-shape binary VJP into one operand only (the other is a constant,
    whose adjoint nobody reads: writing it would be a wasted output stream)."""
    for i in range(g.size):
        da, db = d_binary(sub, xa[i], xb[i], y[i])
        _put(gx, i, g[i] * (da if left else db), first)


@inline
def _binary_self(sub, g, x, y, gx, first):
    for i in range(g.size):
        da, db = d_binary(sub, x[i], x[i], y[i])
        _put(gx, i, g[i] * (da + db), first)


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
    ca, cb = T[0][ar] == _CONST, T[0][br] == _CONST
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


@inner
def broadcast_vjp(T, r, sub):
    """Broadcasting binary ops and ``where``; gradients reduced to each shape.

    ``ip`` holds ``[nd, out_shape, strides of operand 0, strides of 1, ...]``
    (just ``[0]`` when no operand is broadcast beyond a single element).
    """
    ip = T[5]
    b = T[3][r]
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
    ca, cb = T[0][ar] == _CONST, T[0][br] == _CONST
    claim_zeroed(T, ar)
    claim_zeroed(T, br)
    if nd == 0:  # every operand full-size or a single element
        for i in range(n):
            ia = _operand_index(i, n, ma)
            ib = _operand_index(i, n, mb)
            da, db = d_binary(sub, xa[ia], xb[ib], y[i])
            if not ca:
                ga[ia] += g[i] * da
            if not cb:
                gb[ib] += g[i] * db
        return
    shape, strides, cnt, pos = odometer(ip, b, nd, 2)
    for i in range(n):
        ia, ib = pos[0], pos[1]
        da, db = d_binary(sub, xa[ia], xb[ib], y[i])
        if not ca:
            ga[ia] += g[i] * da
        if not cb:
            gb[ib] += g[i] * db
        advance(shape, strides, cnt, pos)
