"""VJP kernels of elementwise ops: unary, with a scalar constant, broadcasting.

Derivative conventions at non-smooth points follow PyTorch: ``abs'(0) = 0``;
``maximum``/``minimum`` split the gradient equally between tied operands.
"""
import math

import numpy as np

from . import codes as C
from ._jit import inline, kernel
from ._views import adjoint, bindex, fparam, parent, value


@kernel
def unary_vjp(T, A, r, sub):
    xr = parent(T, r, 0)
    g = adjoint(T, A, r)
    gx = adjoint(T, A, xr)
    x = value(T, xr)
    y = value(T, r)
    n = g.size
    if sub == C.IDENT or sub >= C.VIEW_FIRST:
        for i in range(n):
            gx[i] += g[i]
    elif sub == C.NEG:
        for i in range(n):
            gx[i] -= g[i]
    elif sub == C.EXP:
        for i in range(n):
            gx[i] += g[i] * y[i]
    elif sub == C.LOG:
        for i in range(n):
            gx[i] += g[i] / x[i]
    elif sub == C.LOG1P:
        for i in range(n):
            gx[i] += g[i] / (1.0 + x[i])
    elif sub == C.EXPM1:
        for i in range(n):
            gx[i] += g[i] * (y[i] + 1.0)
    elif sub == C.SQRT:
        for i in range(n):
            gx[i] += g[i] * 0.5 / y[i]
    elif sub == C.SQUARE:
        for i in range(n):
            gx[i] += g[i] * 2.0 * x[i]
    elif sub == C.SIN:
        for i in range(n):
            gx[i] += g[i] * math.cos(x[i])
    elif sub == C.COS:
        for i in range(n):
            gx[i] -= g[i] * math.sin(x[i])
    elif sub == C.TAN:
        for i in range(n):
            gx[i] += g[i] * (1.0 + y[i] * y[i])
    elif sub == C.TANH:
        for i in range(n):
            gx[i] += g[i] * (1.0 - y[i] * y[i])
    elif sub == C.SINH:
        for i in range(n):
            gx[i] += g[i] * math.cosh(x[i])
    elif sub == C.COSH:
        for i in range(n):
            gx[i] += g[i] * math.sinh(x[i])
    elif sub == C.ARCSIN:
        for i in range(n):
            gx[i] += g[i] / math.sqrt(1.0 - x[i] * x[i])
    elif sub == C.ARCCOS:
        for i in range(n):
            gx[i] -= g[i] / math.sqrt(1.0 - x[i] * x[i])
    elif sub == C.ARCTAN:
        for i in range(n):
            gx[i] += g[i] / (1.0 + x[i] * x[i])
    elif sub == C.ABS:
        for i in range(n):
            gx[i] += g[i] * np.sign(x[i])
    # C.ZERO: piecewise-constant ops pass no gradient


@kernel
def scalar_vjp(T, A, r, sub):
    xr = parent(T, r, 0)
    g = adjoint(T, A, r)
    gx = adjoint(T, A, xr)
    c = fparam(T, r, 0)
    n = g.size
    if sub == C.ADDC:
        for i in range(n):
            gx[i] += g[i]
    elif sub == C.MULC:
        for i in range(n):
            gx[i] += g[i] * c
    elif sub == C.DIVC:
        for i in range(n):
            gx[i] += g[i] / c
    elif sub == C.RSUBC:
        for i in range(n):
            gx[i] -= g[i]
    elif sub == C.RDIVC:
        x = value(T, xr)
        y = value(T, r)
        for i in range(n):
            gx[i] -= g[i] * y[i] / x[i]
    elif sub == C.POWC:
        if c != 0.0:
            x = value(T, xr)
            for i in range(n):
                gx[i] += g[i] * c * x[i] ** (c - 1.0)
    elif sub == C.RPOWC:
        if c != 0.0:
            y = value(T, r)
            lc = math.log(c)
            for i in range(n):
                gx[i] += g[i] * y[i] * lc


@inline
def _partials(sub, a, b, y):
    """(dy/da, dy/db) of a binary op at one element."""
    if sub == C.ADD:
        return 1.0, 1.0
    if sub == C.SUB:
        return 1.0, -1.0
    if sub == C.MUL:
        return b, a
    if sub == C.DIV:
        return 1.0 / b, -y / b
    if sub == C.POW:
        da = b * a ** (b - 1.0) if b != 0.0 else 0.0
        # d/db a**b = a**b log a; the limit at a == 0 (b > 0) is 0, as in PyTorch
        db = y * math.log(a) if a != 0.0 else 0.0
        return da, db
    if sub == C.MAXIMUM:
        if a > b:
            return 1.0, 0.0
        if a < b:
            return 0.0, 1.0
        if a == b:
            return 0.5, 0.5
        return (1.0, 0.0) if a != a else (0.0, 1.0)  # NaN wins, as in NumPy
    # C.MINIMUM
    if a < b:
        return 1.0, 0.0
    if a > b:
        return 0.0, 1.0
    if a == b:
        return 0.5, 0.5
    return (1.0, 0.0) if a != a else (0.0, 1.0)


@inline
def _operand_index(i, n, m, ip, b, nd, k):
    """Index into operand ``k`` (of size ``m``) for output element ``i``."""
    if m == n:
        return i
    if m == 1:
        return 0
    return bindex(i, ip, b + 1, b + 1 + nd * (k + 1), nd)


@kernel
def nary_vjp(T, A, r, sub):
    """Broadcasting binary ops and ``where``; gradients reduced to each shape.

    ``ip`` holds ``[nd, out_shape, strides of operand 0, strides of 1, ...]``.
    """
    ip = T[6]
    b = T[3][r]
    nd = ip[b]
    g = adjoint(T, A, r)
    n = g.size
    y = value(T, r)
    if sub == C.WHERE:
        cr, ar, br = parent(T, r, 0), parent(T, r, 1), parent(T, r, 2)
        cond = value(T, cr)
        ga, gb = adjoint(T, A, ar), adjoint(T, A, br)
        mc, ma, mb = cond.size, ga.size, gb.size
        for i in range(n):
            ic = _operand_index(i, n, mc, ip, b, nd, 0)
            if cond[ic] != 0.0:
                ga[_operand_index(i, n, ma, ip, b, nd, 1)] += g[i]
            else:
                gb[_operand_index(i, n, mb, ip, b, nd, 2)] += g[i]
        return
    ar, br = parent(T, r, 0), parent(T, r, 1)
    xa, xb = value(T, ar), value(T, br)
    ga, gb = adjoint(T, A, ar), adjoint(T, A, br)
    ma, mb = xa.size, xb.size
    if ma == n and mb == n:  # the common case: no broadcasting
        for i in range(n):
            da, db = _partials(sub, xa[i], xb[i], y[i])
            gi = g[i]
            ga[i] += gi * da
            gb[i] += gi * db
        return
    for i in range(n):
        ia = _operand_index(i, n, ma, ip, b, nd, 0)
        ib = _operand_index(i, n, mb, ip, b, nd, 1)
        da, db = _partials(sub, xa[ia], xb[ib], y[i])
        gi = g[i]
        ga[ia] += gi * da
        gb[ib] += gi * db
