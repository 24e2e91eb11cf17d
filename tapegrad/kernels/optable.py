"""The elementwise ops' table: one row per sub code of the three elementwise
kinds, saying which values its derivative rules read and how it curves.

Everything that depends on those two facts is derived from here, never
restated: which values the tape keeps for a record (``codes.READS_*``),
which intermediates a fused replay segment recomputes in its reverse sweep
(``tracing``), which ops have a second derivative (``kernels/hvp.py``:
the ``*_has_d2`` predicates) and which operands an op's second derivative
couples in a Hessian's sparsity pattern (``sparsity``).

``reads`` lists the values the first and second derivative read (the
second reads nothing the first does not): for one-operand ops ``x`` (the
input) and ``y`` (the output); for two-operand ops ``a``, ``b`` and ``y``.
``tests/test_optable.py`` checks each row against the compiled rules: a
derivative evaluated with every value it is said not to read replaced by
NaN must not change.

``curve`` is one of

* ``LINEAR``: second derivative zero (almost everywhere): identity, negation,
  additions, ``abs``, ``maximum``, ``copysign``, ...;
* ``CONSTANT``: piecewise constant, first derivative zero too (``floor``,
  ``sign``, ``floor_divide``, ...);
* ``SELF``: one operand, a nonzero second derivative;
* ``CROSS``: ``a * b``: only the mixed second partial;
* ``QUOTIENT``: ``a / b``: the mixed partial and the one in ``b``;
* ``ALL``: every pair of operands (``power``, ``hypot``, ...).

The rows of the ops of one and of two tensors are derived from
``formulas.py``, where such an op is added; the ops with a constant
(``SCALAR``) and ``where`` are written here. The registry refuses a code
that has no row here or no branch in one of the switches.
"""
import numpy as np

from . import codes as C
from . import formulas
from .formulas import ALL, CONSTANT, CROSS, LINEAR, QUOTIENT, SELF

#: one tensor: derived from the formulas' rows (what d and d2 read; whether d2 is given)
UNARY = {
    **{r.sub: (r.reads, r.curve) for r in formulas.ROWS},
    # reshape, squeeze, unsqueeze, astype: views with the identity VJP
    **{C.VIEW_FIRST + i: ("", LINEAR) for i in range(4)},
}

SCALAR = {  # x op c, c op x (c: the record's constant)
    C.ADDC: ("", LINEAR), C.MULC: ("", LINEAR), C.DIVC: ("", LINEAR),
    C.RSUBC: ("", LINEAR), C.RDIVC: ("xy", SELF),
    C.POWC: ("x", SELF),    # x ** c: linear for c in (0, 1), a property of the record
    C.RPOWC: ("y", SELF),
}

#: two tensors: derived from the binary rows (what the partials read; which
#: second partials are given)
NARY = {
    **{r.sub: (r.reads, r.curve) for r in formulas.BINARY},
    C.WHERE: ("a", LINEAR),  # where(cond, a, b) reads its condition, operand 0
}

TABLE = {C.K_UNARY: UNARY, C.K_SCALAR: SCALAR, C.K_NARY: NARY}

# What the VJPs of the other kinds read: their inputs' values (x), their
# output's (y), both or neither (a code missing here reads neither).  Kept in
# step with the kernels in structural.py; a host op's row says it when it is
# registered (core/registry.py: ``reads``), which calls set_reads.
OTHER_READS = {
    (C.K_REDUCE, C.MAX): "xy", (C.K_REDUCE, C.MIN): "xy", (C.K_REDUCE, C.PROD): "xy",
    (C.K_REDUCE, C.LOGSUMEXP): "xy", (C.K_REDUCE, C.SOFTMAX): "y",
    (C.K_REDUCE, C.LOG_SOFTMAX): "y",
    (C.K_SCAN, C.CUMPROD): "xy",
    (C.K_USER, C.USER_UNARY): "xy", (C.K_USER, C.USER_BINARY): "xy",
}


def row(kind, sub):
    """``(reads, curve)`` of elementwise op ``kind, sub``; KeyError if the
    table has no row for it (the registry refuses such a code)."""
    return TABLE[kind][sub]


def reads_inputs(kind, sub):
    return any(v in row(kind, sub)[0] for v in "xab")


def reads_output(kind, sub):
    return "y" in row(kind, sub)[0]


def has_d2(kind, sub):
    return row(kind, sub)[1] in (SELF, CROSS, QUOTIENT, ALL)


def has_d2_array(kind):
    """``has_d2`` of every sub code of ``kind`` as a boolean array (what the
    compiled second-order rules index).  A sub with no row is True, so that
    its second derivative reaches the switch's NaN branch, never a zero."""
    out = np.ones(C.MASK + 1, np.bool_)
    for sub, (_reads, curve) in TABLE[kind].items():
        out[sub] = curve in (SELF, CROSS, QUOTIENT, ALL)
    return out


def _reads_by_code():
    inputs = [False] * (16 << C.SHIFT)
    output = [False] * (16 << C.SHIFT)
    rows = {(k, sub): r for k, t in TABLE.items() for sub, (r, _c) in t.items()}
    rows.update(OTHER_READS)
    for (kind, sub), r in rows.items():
        inputs[C.code(kind, sub)] = any(v in r for v in "xab")
        output[C.code(kind, sub)] = "y" in r
    return inputs, output


#: indexed by op code: does its VJP read its inputs' / its output's values?
#: (the tape keeps large values only when some VJP will read them, so arrays
#: nobody needs are freed as soon as their tensors are: an ADD or a SUM
#: keeps nothing)
READS_INPUTS, READS_OUTPUT = _reads_by_code()


def set_reads(kind, sub, reads):
    """Record what the VJP of op ``kind, sub`` (not elementwise) reads."""
    OTHER_READS[(kind, sub)] = reads
    code = C.code(kind, sub)
    READS_INPUTS[code] = any(v in reads for v in "xab")
    READS_OUTPUT[code] = "y" in reads
