"""The scalar rules of the elementwise ops, per sub code: the forward
(``f_*``), the derivative (``d_*``) and the second derivative (``d2_*``) of
each kind side by side, one switch each, so that an op's three formulas are
written next to each other. The ops of one and of two tensors are rows of
``formulas.py``, whose switches are generated into ``unary_rules.py`` and
``binary_rules.py``; the ops with a constant (``x op c``) are written here.

Every switch ends in ``unhandled(sub)`` (NaN compiled; the registry's check
runs them as Python and refuses a code that reaches it). What each rule
reads and how the op curves is the op's row in ``optable.py``;
``tests/test_optable.py`` checks the rules against those rows. The array
loops that apply them live in ``elementwise_vjp.py`` (VJPs), ``replay.py``
(forwards), ``tangents.py`` and ``hvp.py`` (tangents and second order).
The forwards follow NumPy's definitions, NaN and infinity handling included.
"""
import math

import numpy as np

from . import codes as C
from . import optable
from ._jit import inline
from .interpret import returns_float64  # the interpreted tier casts as compiled
from .unhandled import unhandled

# -- second derivatives, per sub code -----------------------------------------------------
# Each reads only the values the tape keeps for the op's VJP (optable.READS_*).
# The *_has_d2 predicates say which subs have a nonzero second derivative
# (kernels/optable.py: their curve); every such sub must have a branch in its
# d2_* function, whose last branch is ``unhandled`` (NaN), not a zero.
_UNARY_D2 = optable.has_d2_array(C.K_UNARY)
_SCALAR_D2 = optable.has_d2_array(C.K_SCALAR)
_NARY_D2 = optable.has_d2_array(C.K_NARY)


@inline
def unary_has_d2(sub):
    return _UNARY_D2[sub]


@inline
def scalar_has_d2(sub):
    return _SCALAR_D2[sub]


@inline
def nary_has_d2(sub):
    return _NARY_D2[sub]


# -- one operand: y = f(x) -----------------------------------------------------------------
# generated from formulas.py's rows
from .unary_rules import d2_unary, d_unary, f_unary  # noqa: E402,F401


# -- with a constant: y = x op c, c op x -----------------------------------------------
@returns_float64
@inline
def f_scalar(sub, x, c):
    """``x op c`` or ``c op x`` of a K_SCALAR sub code (``x - c`` is ADDC of -c)."""
    if sub == C.ADDC:
        return x + c
    if sub == C.MULC:
        return x * c
    if sub == C.DIVC:
        return x / c
    if sub == C.RSUBC:
        return c - x
    if sub == C.RDIVC:
        return c / x
    if sub == C.POWC:
        return x * x if c == 2.0 else np.power(x, c)  # a square: no pow() per element
    if sub == C.RPOWC:
        return np.power(c, x)
    return unhandled(sub)


@returns_float64
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
        return c * np.power(x, c - 1.0) if c != 0.0 else 0.0
    if sub == C.RPOWC:  # d c**x = c**x log c; the limit for c == 0 is 0
        return y * math.log(c) if c != 0.0 else 0.0
    return unhandled(sub)


@returns_float64
@inline
def d2_scalar(sub, x, y, c):
    """d^2y/dx^2 of ``y = x op c`` or ``c op x`` (0 for the linear subs)."""
    if not scalar_has_d2(sub):
        return 0.0
    if sub == C.RDIVC:  # c / x
        return 2.0 * y / (x * x)
    if sub == C.POWC:  # x ** c
        if c == 0.0 or c == 1.0:
            return 0.0
        if c == 2.0:  # squares and cubes without a pow() per element
            return 2.0
        if c == 3.0:
            return 6.0 * x
        return c * (c - 1.0) * np.power(x, c - 2.0)
    if sub == C.RPOWC:  # c ** x
        if c == 0.0:
            return 0.0
        lc = math.log(c)
        return y * lc * lc
    return unhandled(sub)


# -- two operands: y = a op b -----------------------------------------------------------
# generated from formulas.py's binary rows, with the whole-array twins of the
# derivative rules that branch on a value (for the interpreted tier)
from .binary_rules import BINARY_TWINS, d2_binary, d_binary, f_binary  # noqa: E402,F401
