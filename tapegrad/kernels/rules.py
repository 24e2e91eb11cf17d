"""The scalar rules of the elementwise ops, per sub code: the forward
(``f_*``), the derivative (``d_*``) and the second derivative (``d2_*``) of
each kind side by side, one switch each, so that an op's three formulas are
written next to each other. The ops of one tensor are rows of
``formulas.py``, whose switches are generated into ``unary_rules.py``.

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

_LN2 = math.log(2.0)

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
@inline
def _fmod_floor(a, b):
    """NumPy's ``divmod`` of floats: (floor quotient, remainder with b's sign)."""
    if b == 0.0:
        return a / b, np.fmod(a, b)
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != 0.0:
        if (b < 0.0) != (mod < 0.0):
            mod += b
            div -= 1.0
    else:
        mod = math.copysign(0.0, b)
    if div != 0.0:
        fl = np.floor(div)
        if div - fl > 0.5:
            fl += 1.0
    else:
        fl = math.copysign(0.0, a / b)
    return fl, mod


@returns_float64
@inline
def f_binary(sub, a, b):
    """``a op b`` of a K_NARY sub code (not WHERE) at one element."""
    if sub == C.ADD:
        return a + b
    if sub == C.SUB:
        return a - b
    if sub == C.MUL:
        return a * b
    if sub == C.DIV:
        return a / b
    if sub == C.POW or sub == C.FLOAT_POWER:
        return np.power(a, b)
    if sub == C.MAXIMUM:
        return a if (a >= b or a != a) else b
    if sub == C.MINIMUM:
        return a if (a <= b or a != a) else b
    if sub == C.FMAX:
        return b if (a < b or a != a) else a
    if sub == C.FMIN:
        return b if (a > b or a != a) else a
    if sub == C.ARCTAN2:
        return np.arctan2(a, b)
    if sub == C.HYPOT:
        return np.hypot(a, b)
    if sub == C.LOGADDEXP:
        return np.logaddexp(a, b)
    if sub == C.LOGADDEXP2:
        return np.logaddexp2(a, b)
    if sub == C.COPYSIGN:
        return math.copysign(a, b)
    if sub == C.FMOD:
        return np.fmod(a, b)
    if sub == C.REMAINDER:
        return _fmod_floor(a, b)[1]
    if sub == C.NARY_ZERO_FIRST:  # floor_divide
        return _fmod_floor(a, b)[0]
    if sub == C.NARY_ZERO_FIRST + 1:  # heaviside(a, b): b at a == 0
        if a != a:
            return a
        if a == 0.0:
            return b
        return 1.0 if a > 0.0 else 0.0
    return unhandled(sub)


@returns_float64
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
        da = b * np.power(a, b - 1.0) if b != 0.0 else 0.0
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
        return np.exp2(a - y), np.exp2(b - y)
    if sub == C.COPYSIGN:  # |a| with b's sign
        return math.copysign(1.0, a) * math.copysign(1.0, b), 0.0
    if sub == C.FMOD:  # a - trunc(a / b) * b
        return 1.0, -float(np.trunc(a / b))
    if sub == C.REMAINDER:  # a - floor(a / b) * b
        return 1.0, -np.floor(a / b)  # a float: inf where b == 0 (math.floor would raise)
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


# -- whole-array twins of the derivative rules that branch on a value ---------------------
# The interpreted tier runs the element loops' whole-array forms
# (interpret.array_form), which call the rules above on arrays; a rule with
# ``if a > b`` cannot take arrays, so its twin here selects with np.where
# between the same expressions (every branch is computed, the unselected
# values are discarded; hence errstate ignore).  tests/test_interpret.py holds
# each twin to its element rule bit for bit, NaN, ties and zeros included.
def _pow_arrays(a, b, y):
    with np.errstate(all="ignore"):
        da = np.where(b != 0.0, b * np.power(a, b - 1.0), 0.0)
        db = np.where(a != 0.0, y * np.log(a), 0.0)
    return da, db


def _max_min_arrays(wins):
    # maximum: a wins where a > b, minimum where a < b; ties split; NaN wins
    def twin(a, b, y):
        da = np.where(wins(a, b), 1.0, np.where(wins(b, a), 0.0,
                      np.where(a == b, 0.5, np.where(a != a, 1.0, 0.0))))
        return da, 1.0 - da
    return twin


def _fmax_fmin_arrays(wins):
    # fmax/fmin: NaN loses; ties split
    def twin(a, b, y):
        da = np.where(a != a, 0.0, np.where(b != b, 1.0,
                      np.where(a == b, 0.5, np.where(wins(a, b), 1.0, 0.0))))
        return da, 1.0 - da
    return twin


def _fmod_arrays(a, b, y):
    with np.errstate(all="ignore"):
        return np.ones_like(a * b), -np.trunc(a / b)


def _remainder_arrays(a, b, y):
    with np.errstate(all="ignore"):
        return np.ones_like(a * b), -np.floor(a / b)


#: ``sub -> twin(a, b, y) -> (dy/da, dy/db)`` for the K_NARY subs whose
#: ``d_binary`` branch tests an element
BINARY_TWINS = {
    C.POW: _pow_arrays, C.FLOAT_POWER: _pow_arrays,
    C.MAXIMUM: _max_min_arrays(np.greater), C.MINIMUM: _max_min_arrays(np.less),
    C.FMAX: _fmax_fmin_arrays(np.greater), C.FMIN: _fmax_fmin_arrays(np.less),
    C.FMOD: _fmod_arrays, C.REMAINDER: _remainder_arrays,
}


@returns_float64
@inline
def d2_binary(sub, a, b, y):
    """(d2/da2, d2/da db, d2/db2) of ``y = a op b`` at one element."""
    if not nary_has_d2(sub):
        return 0.0, 0.0, 0.0
    if sub == C.MUL:
        return 0.0, 1.0, 0.0
    if sub == C.DIV:
        return 0.0, -1.0 / (b * b), 2.0 * y / (b * b)
    if sub == C.POW or sub == C.FLOAT_POWER:
        # b == 0 and b == 1 are exact zeros, also at a == 0 (0 * 0 ** -1 would
        # be NaN), as for x ** c (d2_scalar) and in tg.elementwise's derived rule
        aa = b * (b - 1.0) * np.power(a, b - 2.0) if b != 0.0 and b != 1.0 else 0.0
        if a == 0.0:  # the log terms take their limit 0, as the first derivative does
            return aa, (1.0 if b == 1.0 else 0.0), 0.0
        la = math.log(abs(a))
        return aa, np.power(a, b - 1.0) * (1.0 + b * la), y * la * la
    if sub == C.ARCTAN2:
        r2 = a * a + b * b
        q = r2 * r2
        return -2.0 * a * b / q, (a * a - b * b) / q, 2.0 * a * b / q
    if sub == C.HYPOT:
        y3 = y * y * y
        return b * b / y3, -a * b / y3, a * a / y3
    if sub == C.LOGADDEXP:
        s = math.exp(a - y) * math.exp(b - y)
        return s, -s, s
    if sub == C.LOGADDEXP2:
        s = np.exp2(a - y) * np.exp2(b - y) * _LN2
        return s, -s, s
    return unhandled(sub), unhandled(sub), unhandled(sub)
