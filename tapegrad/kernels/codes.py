"""Op codes shared by the recorder and the kernels.

An op code is ``kind << 6 | sub``: the sweep dispatches on the kind (one
branch, one call per kernel family) and the family kernel on the sub code.
The registry (:mod:`tapegrad.core.registry`) gives each code its name and its
forward; this file only fixes the numbers, because compiled kernels freeze
them.
"""
from .formulas import NARY_ZERO_FIRST, VIEW_FIRST, WHERE, binary_codes as _binary_codes  # noqa: F401
from .formulas import codes as _unary_codes

SHIFT = 6
MASK = (1 << SHIFT) - 1

# kinds ----------------------------------------------------------------------
K_NONE = 0     # no VJP: leaves, constants, multi-output slots, freed stubs
K_UNARY = 1    # y = f(x), elementwise
K_SCALAR = 2   # y = f(x, c) with a Python-number constant c
K_NARY = 3     # broadcasting elementwise ops of tensors (binary, where)
K_REDUCE = 4   # reductions over axes
K_GATHER = 5   # y is a selection of x's elements (index map): views, indexing
K_CONCAT = 6   # y gathers from several inputs (concatenate, stack)
K_HOST = 7     # VJP applied by Python/NumPy (BLAS-bound: matmul)
K_SCAN = 8     # cumulative ops along an axis (cumsum, cumprod)
K_USER = 9     # elementwise ops registered by users (derivative via pointer)

# K_NONE subs
LEAF, CONST, OUTPUT, FREED = 0, 1, 2, 3

# K_UNARY subs: the rows of formulas.py name them (C.EXP, C.ARCSINH, ...;
# IDENT, NEG, ABS and ZERO for positive, negative, absolute and sign)
globals().update(_unary_codes())

#: K_UNARY subs from ZERO_FIRST are piecewise-constant ops (floor, ceil, ...)
#: with zero gradient, and from VIEW_FIRST on views with identity VJP (reshape,
#: squeeze, astype, ...): distinct codes only so that ``grad_fn.name()`` can
#: tell them apart.
ZERO_FIRST = 40

# K_SCALAR subs: x op c, c op x
ADDC, MULC, DIVC, RSUBC, RDIVC, POWC, RPOWC = range(7)

# K_NARY subs: the binary rows of formulas.py name them (C.ADD, C.SUB, C.MUL, C.DIV,
# C.POW, C.HYPOT, ...); WHERE (where(cond, a, b)) is written by hand in each
# kernel; from NARY_ZERO_FIRST on they have zero gradient (floor_divide, heaviside)
globals().update(_binary_codes())

# K_REDUCE subs
SUM, MEAN, MAX, MIN, PROD, LOGSUMEXP, SOFTMAX, LOG_SOFTMAX = range(8)

# K_HOST subs: each op's registry row (core/registry.py) holds its rules
(MATMUL, INV, SOLVE, DET, SLOGDET, FUNCTION, CHOLESKY, EIGH, EINSUM, QR, SVD, PINV, LSTSQ,
 FFT) = range(14)

# K_SCAN subs
CUMSUM, CUMPROD = range(2)

# K_GATHER subs (named in ops/shape.py).  INDEX: any selection, ``ip``
# ``[m, its m indices]`` (-1: a filled-in zero).  The STRIDED ones select
# what a NumPy view of the operand would -- basic indexing (SLICE),
# transposes, broadcast_to, flip, diagonal, and unbind's outputs one after
# the other (a moveaxis) -- and hold ``[m, offset, nd, shape, strides]`` in
# place of the map: output element ``(i_0, ..)`` in C order reads operand
# element ``offset + sum_d i_d * strides[d]``.  Every compiled loop over a
# tape (reverse, vector, block, forward) reads that form; a trace's replay
# holds the Index record of the same map (``_Replay._build``).
TRANSPOSE, INDEX, EXPAND, SWAPAXES, UNBIND = 0, 1, 2, 3, 5
MOVEAXIS, FLIP, DIAGONAL, SLICE = 6, 7, 11, 20
STRIDED = (TRANSPOSE, EXPAND, SWAPAXES, UNBIND, MOVEAXIS, FLIP, DIAGONAL, SLICE)

# K_USER subs (the op itself is named by an integer parameter)
USER_UNARY, USER_BINARY = range(2)


def code(kind, sub):
    return (kind << SHIFT) | sub

