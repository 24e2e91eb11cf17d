"""VJP kernel of elementwise ops that users register (``tapegrad.elementwise``).

A user op's derivative is a Numba ``cfunc``: compiled machine code at an
address known only at run time.  The record carries that address among its
integer parameters and the sweep calls it through a function pointer, so the
VJP runs inside the compiled sweep with no Python call, and the sweep itself
stays one cached function however many ops users register.  An indirect call
per element cannot be inlined or vectorised like the built-in ops' loops
(a few ns per element instead of about one), which is the price of not
recompiling the sweep for each user op.

``ip`` of a K_USER record: ``[id, d0, d1, nd, out_shape, strides...]`` where
``id`` indexes ``tapegrad.ops.custom.USER_OPS`` (for names), ``d0``/``d1``
are the addresses of the partial derivatives (``d1`` is 0 for unary ops)
and the rest is the broadcast layout of :func:`broadcast_params` (``nd`` is 0
when no operand is broadcast beyond one element).
"""
import numpy as np

from . import codes as C
from ._jit import deferred, inner
from ._views import OP, IP0, IP  # tape fields
from ._views import adjoint, advance, claim, claim_zeroed, odometer, parent, value


#: ``call_d2(addr, x, y)`` / ``call_d3(addr, a, b, y)``: a C function of
#: two or three doubles, called through its address
call_d2 = deferred("call_d2")
call_d3 = deferred("call_d3")


_CONST = C.code(C.K_NONE, C.CONST)


@inner
def user_vjp(T, r, sub):
    ip = T[IP]
    b = T[IP0][r]
    d0 = ip[b + 1]
    g = adjoint(T, r)
    y = value(T, r)
    n = g.size
    if sub == C.USER_UNARY:
        xr = parent(T, r, 0)
        x, gx = value(T, xr), adjoint(T, xr)
        if claim(T, xr):
            for i in range(n):
                gx[i] = g[i] * call_d2(d0, x[i], y[i])
        else:
            for i in range(n):
                gx[i] += g[i] * call_d2(d0, x[i], y[i])
        return
    # C.USER_BINARY, broadcasting like the built-in binary ops
    d1 = ip[b + 2]
    ar, br = parent(T, r, 0), parent(T, r, 1)
    xa, xb = value(T, ar), value(T, br)
    claim_zeroed(T, ar)
    claim_zeroed(T, br)
    ga, gb = adjoint(T, ar), adjoint(T, br)
    if sub != C.USER_BINARY:  # no rule here: NaN, never a silent zero
        ga[:] = np.nan
        gb[:] = np.nan
        return
    # a constant operand needs no partial: skip the user's code for it
    ka, kb = T[OP][ar] != _CONST, T[OP][br] != _CONST
    nd = ip[b + 3]
    ma, mb = xa.size, xb.size
    if nd == 0:
        for i in range(n):
            ia = i if ma == n else 0
            ib = i if mb == n else 0
            gi = g[i]
            if ka:
                ga[ia] += gi * call_d3(d0, xa[ia], xb[ib], y[i])
            if kb:
                gb[ib] += gi * call_d3(d1, xa[ia], xb[ib], y[i])
        return
    shape, strides, cnt, pos = odometer(ip, b + 3, nd, 2)
    for i in range(n):
        ia, ib = pos[0], pos[1]
        gi = g[i]
        if ka:
            ga[ia] += gi * call_d3(d0, xa[ia], xb[ib], y[i])
        if kb:
            gb[ib] += gi * call_d3(d1, xa[ia], xb[ib], y[i])
        advance(shape, strides, cnt, pos)
