"""Matrix products of a few elements inside the compiled loops: the forward
(``mm_forward``, replay) and the VJP (``mm_vjp``, reverse sweep) of a matmul
record ``(m, k) @ (k, n)`` whose operands are 1-d or 2-d (a 1-d left operand
one row, a 1-d right operand one column).

A matmul is a host record: eager code and large products leave it to
NumPy's BLAS.  In a traced program of small arrays (an ODE right-hand side
``M @ x`` in an RK4 loop) handing each product back to Python cost far more
than its few multiply-adds, so the replay and the sweep of a trace run the
products of at most :data:`SMALL_MATMUL` multiply-adds here, by plain loops
(the trace decides which: ``trace_batch._BatchMethods._plan_matmuls``).
Plain loops sum each element in index order, one product at a time, where
BLAS blocks and fuses: the results agree with NumPy's to rounding, not bit
for bit.  Every replay of a trace, and ``grad_batch``'s batched kernel,
runs these same loops, so they agree with each other exactly.

The loops read the sizes from the record: the callers pass ``k``, the inner
dimension, and ``m``, ``n`` follow from the operands' element counts (the
trace checked ``size = m*k, k*n, m*n`` when it chose the record).  No
allocation: the operands, the output and the adjoints are views of the
tape's memory.  The interpreted tier runs the whole-array forms below,
the same products and sums in the same order.
"""
import numpy as np

from . import codes as C
from ._jit import inner
from ._views import OP, ARG0, SIZE, ARGS  # tape fields
from ._views import adjoint_span, claim, value
from .interpret import array_form

#: the most multiply-adds (``m * k * n``) of a matmul that a trace's replay
#: and sweep compute in these loops: a 64x64 matrix times a vector, a 16x16
#: product.  The loops cost about 0.4 ns a multiply-add in each of their
#: three products (the forward, the VJP's two), a host record's forward and
#: VJP through Python about 30 us whatever the size: at this bound the loops
#: take 5 us of that, and the two break even near a 32x32 product.
SMALL_MATMUL = 4096

_CONST = C.code(C.K_NONE, C.CONST)


@inner
def mm_forward(T, r, k):
    """Record r's value: ``a @ b``, each element summed over ``l = 0 .. k-1``
    in order from 0.0."""
    a0 = T[ARG0][r]
    ra, rb = T[ARGS][a0], T[ARGS][a0 + 1]
    size = T[SIZE]
    m, nn = size[ra] // k, size[rb] // k
    a, b, y = value(T, ra), value(T, rb), value(T, r)
    for i in range(m):
        for j in range(nn):
            acc = 0.0
            for l in range(k):
                acc += a[i * k + l] * b[l * nn + j]
            y[i * nn + j] = acc


@inner
def mm_vjp(T, r, k):
    """Record r's VJP: ``g @ b.T`` into a's adjoint (each element summed over
    the columns in order) and ``a.T @ g`` into b's (over the rows in order),
    written at the first contribution and added after, none into a constant
    operand."""
    a0 = T[ARG0][r]
    ra, rb = T[ARGS][a0], T[ARGS][a0 + 1]
    size = T[SIZE]
    m, nn = size[ra] // k, size[rb] // k
    a, b, g = value(T, ra), value(T, rb), adjoint_span(T, r, m * nn)
    if T[OP][ra] != _CONST:
        ga = adjoint_span(T, ra, m * k)
        first = claim(T, ra)
        for i in range(m):
            for l in range(k):
                acc = 0.0
                for j in range(nn):
                    acc += g[i * nn + j] * b[l * nn + j]
                if first:
                    ga[i * k + l] = acc
                else:
                    ga[i * k + l] += acc
    if T[OP][rb] != _CONST:
        gb = adjoint_span(T, rb, k * nn)
        first = claim(T, rb)
        for l in range(k):
            for j in range(nn):
                acc = 0.0
                for i in range(m):
                    acc += a[i * k + l] * g[i * nn + j]
                if first:
                    gb[l * nn + j] = acc
                else:
                    gb[l * nn + j] += acc


#: the whole-array forms take over from this many multiply-adds: below, the
#: loops' few iterations cost less than the NumPy calls
ARRAY_WORK = 64


@array_form(mm_forward)
def _mm_forward_arrays(T, r, k):
    """``mm_forward`` on whole arrays (the interpreted tier): one product of
    a column of a and a row of b per ``l``, added in order."""
    a0 = T[ARG0][r]
    ra, rb = T[ARGS][a0], T[ARGS][a0 + 1]
    m, nn = T[SIZE][ra] // k, T[SIZE][rb] // k
    if m * k * nn < ARRAY_WORK:
        return NotImplemented
    a = value(T, ra).reshape(m, k)
    b = value(T, rb).reshape(k, nn)
    acc = np.zeros((m, nn))
    for l in range(k):
        acc += a[:, l:l + 1] * b[l:l + 1, :]
    value(T, r)[:] = acc.reshape(-1)


@array_form(mm_vjp)
def _mm_vjp_arrays(T, r, k):
    """``mm_vjp`` on whole arrays (the interpreted tier), the sums in the
    loops' order."""
    a0 = T[ARG0][r]
    ra, rb = T[ARGS][a0], T[ARGS][a0 + 1]
    m, nn = T[SIZE][ra] // k, T[SIZE][rb] // k
    if m * k * nn < ARRAY_WORK:
        return NotImplemented
    a = value(T, ra).reshape(m, k)
    b = value(T, rb).reshape(k, nn)
    g = adjoint_span(T, r, m * nn).reshape(m, nn)
    if T[OP][ra] != _CONST:
        acc = np.zeros((m, k))
        for j in range(nn):
            acc += g[:, j:j + 1] * b[:, j].reshape(1, k)
        ga = adjoint_span(T, ra, m * k)
        if claim(T, ra):
            ga[:] = acc.reshape(-1)
        else:
            ga += acc.reshape(-1)
    if T[OP][rb] != _CONST:
        acc = np.zeros((k, nn))
        for i in range(m):
            acc += a[i].reshape(k, 1) * g[i:i + 1, :]
        gb = adjoint_span(T, rb, k * nn)
        if claim(T, rb):
            gb[:] = acc.reshape(-1)
        else:
            gb += acc.reshape(-1)
