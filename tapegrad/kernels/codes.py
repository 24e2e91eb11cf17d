"""Op codes shared by the recorder and the kernels.

An op code is ``kind << 6 | sub``: the sweep dispatches on the kind (one
branch, one call per kernel family) and the family kernel on the sub code.
The registry (:mod:`tapegrad.ops.registry`) gives each code its name and its
forward; this file only fixes the numbers, because compiled kernels freeze
them.
"""
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

# K_UNARY subs
(IDENT, NEG, EXP, LOG, LOG1P, EXPM1, SQRT, SQUARE, SIN, COS, TAN, TANH, SINH,
 COSH, ARCSIN, ARCCOS, ARCTAN, ABS, ZERO, RECIPROCAL, EXP2, LOG2, LOG10, CBRT,
 ARCSINH, ARCCOSH, ARCTANH, DEG2RAD, RAD2DEG, FABS) = range(30)

#: K_UNARY subs from ZERO_FIRST are piecewise-constant ops (floor, ceil, ...)
#: with zero gradient, and from VIEW_FIRST on views with identity VJP (reshape,
#: squeeze, astype, ...): distinct codes only so that ``grad_fn.name()`` can
#: tell them apart.
ZERO_FIRST = 40
VIEW_FIRST = 48

# K_SCALAR subs: x op c, c op x
ADDC, MULC, DIVC, RSUBC, RDIVC, POWC, RPOWC = range(7)

# K_NARY subs
(ADD, SUB, MUL, DIV, POW, MAXIMUM, MINIMUM, WHERE, ARCTAN2, HYPOT, LOGADDEXP,
 LOGADDEXP2, FMAX, FMIN, COPYSIGN, FMOD, REMAINDER, FLOAT_POWER) = range(18)
#: K_NARY subs from here on have zero gradient (floor_divide, heaviside)
NARY_ZERO_FIRST = 40

# K_REDUCE subs
SUM, MEAN, MAX, MIN, PROD, LOGSUMEXP, SOFTMAX, LOG_SOFTMAX = range(8)

# K_SCAN subs
CUMSUM, CUMPROD = range(2)

# K_USER subs (the op itself is named by an integer parameter)
USER_UNARY, USER_BINARY = range(2)


def code(kind, sub):
    return (kind << SHIFT) | sub


# What each VJP reads besides the adjoints: its inputs' values (``x``), its
# output's value (``y``), both, or neither.  The tape keeps large values only
# when some VJP will read them, so arrays nobody needs are freed as soon as
# their tensors are (an ADD or a SUM keeps nothing).  Kept in step with the
# kernels in elementwise.py / structural.py and ops/linalg.py.
_X, _Y = 1, 2
_READS = {
    (K_UNARY, EXP): _Y, (K_UNARY, LOG): _X, (K_UNARY, LOG1P): _X,
    (K_UNARY, EXPM1): _Y, (K_UNARY, SQRT): _Y, (K_UNARY, SQUARE): _X,
    (K_UNARY, SIN): _X, (K_UNARY, COS): _X, (K_UNARY, TAN): _Y, (K_UNARY, TANH): _Y,
    (K_UNARY, SINH): _X, (K_UNARY, COSH): _X, (K_UNARY, ARCSIN): _X,
    (K_UNARY, ARCCOS): _X, (K_UNARY, ARCTAN): _X, (K_UNARY, ABS): _X,
    (K_UNARY, RECIPROCAL): _Y, (K_UNARY, EXP2): _Y, (K_UNARY, LOG2): _X,
    (K_UNARY, LOG10): _X, (K_UNARY, CBRT): _Y, (K_UNARY, ARCSINH): _X,
    (K_UNARY, ARCCOSH): _X, (K_UNARY, ARCTANH): _X, (K_UNARY, FABS): _X,
    (K_SCALAR, RDIVC): _X | _Y, (K_SCALAR, POWC): _X, (K_SCALAR, RPOWC): _Y,
    (K_NARY, MUL): _X, (K_NARY, DIV): _X | _Y, (K_NARY, POW): _X | _Y,
    (K_NARY, MAXIMUM): _X, (K_NARY, MINIMUM): _X, (K_NARY, WHERE): _X,
    (K_NARY, ARCTAN2): _X, (K_NARY, HYPOT): _X | _Y, (K_NARY, LOGADDEXP): _X | _Y,
    (K_NARY, LOGADDEXP2): _X | _Y, (K_NARY, FMAX): _X, (K_NARY, FMIN): _X,
    (K_NARY, COPYSIGN): _X, (K_NARY, FMOD): _X, (K_NARY, REMAINDER): _X,
    (K_NARY, FLOAT_POWER): _X | _Y,
    (K_REDUCE, MAX): _X | _Y, (K_REDUCE, MIN): _X | _Y, (K_REDUCE, PROD): _X | _Y,
    (K_REDUCE, LOGSUMEXP): _X | _Y,
    (K_REDUCE, SOFTMAX): _Y, (K_REDUCE, LOG_SOFTMAX): _Y,
    (K_HOST, 0): _X,             # matmul
    (K_HOST, 1): _Y,             # inv
    (K_HOST, 2): _X | _Y,        # solve
    (K_HOST, 3): _X | _Y,        # det
    (K_HOST, 4): _X,             # log|det| (slogdet)
    (K_HOST, 6): _Y,             # cholesky
    (K_HOST, 7): 0,              # eigh keeps its eigenpairs with the host record
    (K_HOST, 8): _X,             # einsum
    (K_HOST, 9): 0,              # qr keeps (Q, R) with the host record
    (K_HOST, 10): 0,             # svd keeps (U, S, Vh) with the host record
    (K_HOST, 11): _X | _Y,       # pinv
    (K_HOST, 12): 0,             # lstsq keeps a, b, x with the host record
    (K_SCAN, CUMPROD): _X | _Y,
    (K_USER, USER_UNARY): _X | _Y, (K_USER, USER_BINARY): _X | _Y,
}
#: indexed by op code: does its VJP read its inputs' / its output's values?
READS_INPUTS = [False] * (16 << SHIFT)
READS_OUTPUT = [False] * (16 << SHIFT)
for (_kind, _sub), _what in _READS.items():
    READS_INPUTS[code(_kind, _sub)] = bool(_what & _X)
    READS_OUTPUT[code(_kind, _sub)] = bool(_what & _Y)
