"""The elementwise ops of one tensor (:data:`ROWS`) and of two tensors
(:data:`BINARY`, see :class:`Binary`), one row each: the single place that
says what such an op is.

A row gives the op's number (its sub code: tape files and compiled kernels
keep it, so a row never changes number), its NumPy or SciPy name, its
``grad_fn`` name, and three formulas at one element, written once as
Python expressions in ``x`` (the input) and ``y`` (the output):

* ``f``: the forward, as a trace's replay computes it;
* ``d``: the derivative dy/dx;
* ``d2``: the second derivative, or None where it is zero (the op is then
  linear or piecewise constant).

Everything else is derived from the rows, never restated:

* the compiled switches ``f_unary``, ``d_unary`` and ``d2_unary``
  (``kernels/unary_rules.py``, generated from the rows by
  ``python tapegrad/kernels/generate.py``; ``tests/test_formulas.py``
  fails when the file is not current);
* which values the tape keeps for the op's VJP and how the op curves
  (``kernels/optable.py``): the names ``x`` and ``y`` the formulas read,
  and whether ``d2`` is given;
* the op's ``create_graph`` VJP: ``d`` evaluated with tapegrad's ops in
  place of ``math`` and ``np`` (``transforms/create_graph/kinds.py``), so it
  is differentiable to any order; ``graph`` overrides it where ``d`` calls a
  helper only the kernels have;
* the rules of ``ops/derive.py``, which differentiates users' Python
  derivative functions: ``d`` and ``d2`` with ``x``, ``y`` as its operand
  and result (rows with a ``math`` name);
* the eager functions (``ops/elementwise.py``), the NumPy protocol's table
  (``ops/numpy_api.py``) and which NumPy functions the interpreted tier
  replaces with libm's (``kernels/libm.py``, rows with ``libm``).

The formulas may call ``math``, ``np`` and the names of :data:`HELPERS`
(the kernels' special functions) and read the constants of
:data:`CONSTANTS`. Adding an op of one tensor is adding a row here (and its
export in ``tapegrad/__init__.py`` and a case in ``tests/op_cases.py``).

A binary row says the same with ``f(a, b)``, the partials ``da``, ``db``
and the second partials ``daa``, ``dab``, ``dbb`` in ``a``, ``b`` and
``y``; its switches are generated into ``kernels/binary_rules.py``, and the
same tables, ``optable.NARY`` included, follow from it.

Example
-------
>>> row = ROWS_BY_NAME["arcsinh"]
>>> row.d, row.reads, row.curve
('1.0 / math.sqrt(x * x + 1.0)', 'x', 'self')
"""
import ast
import math
from typing import NamedTuple, Optional

#: constants the formulas may read by name (the generated switches define them)
CONSTANTS = {"LN2": math.log(2.0), "LN10": math.log(10.0),
             "TWO_OVER_SQRT_PI": 2.0 / math.sqrt(math.pi),
             "HALF_SQRT_PI": 0.5 * math.sqrt(math.pi),
             "DEG": math.pi / 180.0, "RAD": 180.0 / math.pi}
#: the kernels' helpers the formulas may call (``kernels/special.py`` and
#: ``kernels/vecmath.py``); a formula calling one needs ``graph`` unless the
#: create_graph namespace knows it (digamma, trigamma)
HELPERS = ("f_special", "digamma", "trigamma", "tetragamma", "d_i0e", "d2_i0e", "d_i1e",
           "d2_i1e", "d_log_ndtr", "d2_log_ndtr", "exp_v", "log_v", "tanh_v", "divmod_floor")

#: sub codes from here on are views with the identity VJP (reshape, squeeze,
#: expand_dims, astype), registered by ``ops/shape.py``
VIEW_FIRST = 48

LINEAR, CONSTANT, SELF = "linear", "constant", "self"


class Unary(NamedTuple):
    """One elementwise op of one tensor (see the module's docstring)."""
    sub: int
    name: str                   # tapegrad's function (NumPy's or scipy.special's name)
    grad: str                   # grad_fn name: ``<grad>Backward``
    f: str
    d: str
    d2: Optional[str] = None
    math: Optional[str] = None  # Python's math function of the same meaning
    libm: bool = False          # NumPy's own loop may differ from libm in the last bit
    scipy: bool = False         # a scipy.special function (tapegrad's own kernel)
    graph: Optional[str] = None  # d as tapegrad ops, where d calls a kernel helper
    example: float = 0.5        # the docstring example's input

    @property
    def reads(self):
        """The values the derivatives read: ``x``, ``y``, both or neither."""
        names = _names(self.d) | _names(self.d2 or "0.0")
        return "".join(v for v in "xy" if v in names)

    @property
    def curve(self):
        """``self`` (a second derivative), ``linear`` or ``constant``."""
        if self.d2 is not None:
            return SELF
        return CONSTANT if self.d == "0.0" else LINEAR


def _names(src):
    return {n.id for n in ast.walk(ast.parse(src, mode="eval")) if isinstance(n, ast.Name)}


U = Unary
ROWS = (
    U(0, "positive", "Positive", "x", "1.0"),
    U(1, "negative", "Neg", "-x", "-1.0"),
    U(2, "exp", "Exp", "exp_v(x)", "y", "y", math="exp", libm=True),
    U(3, "log", "Log", "log_v(x)", "1.0 / x", "-1.0 / (x * x)", math="log", libm=True),
    U(4, "log1p", "Log1p", "np.log1p(x)", "1.0 / (1.0 + x)",
      "-1.0 / ((1.0 + x) * (1.0 + x))", math="log1p", libm=True),
    U(5, "expm1", "Expm1", "np.expm1(x)", "y + 1.0", "y + 1.0", math="expm1", libm=True),
    U(6, "sqrt", "Sqrt", "np.sqrt(x)", "0.5 / y", "-0.25 / (y * y * y)", math="sqrt"),
    U(7, "square", "Square", "x * x", "2.0 * x", "2.0"),
    U(8, "sin", "Sin", "np.sin(x)", "math.cos(x)", "-math.sin(x)", math="sin", libm=True),
    U(9, "cos", "Cos", "np.cos(x)", "-math.sin(x)", "-math.cos(x)", math="cos", libm=True),
    U(10, "tan", "Tan", "np.tan(x)", "1.0 + y * y", "2.0 * y * (1.0 + y * y)", math="tan",
      libm=True),
    U(11, "tanh", "Tanh", "tanh_v(x)", "1.0 - y * y", "-2.0 * y * (1.0 - y * y)", math="tanh",
      libm=True),
    U(12, "sinh", "Sinh", "np.sinh(x)", "math.cosh(x)", "math.sinh(x)", math="sinh", libm=True),
    U(13, "cosh", "Cosh", "np.cosh(x)", "math.sinh(x)", "math.cosh(x)", math="cosh", libm=True),
    U(14, "arcsin", "Asin", "np.arcsin(x)", "1.0 / math.sqrt(1.0 - x * x)",
      "x / np.power(1.0 - x * x, 1.5)", math="asin", libm=True),
    U(15, "arccos", "Acos", "np.arccos(x)", "-1.0 / math.sqrt(1.0 - x * x)",
      "-x / np.power(1.0 - x * x, 1.5)", math="acos", libm=True),
    U(16, "arctan", "Atan", "np.arctan(x)", "1.0 / (1.0 + x * x)",
      "-2.0 * x / ((1.0 + x * x) * (1.0 + x * x))", math="atan", libm=True),
    U(17, "absolute", "Abs", "abs(x)", "np.sign(x)"),
    U(18, "sign", "Sign", "np.sign(x)", "0.0"),
    U(19, "reciprocal", "Reciprocal", "1.0 / x", "-y * y", "2.0 * y * y * y"),
    U(20, "exp2", "Exp2", "np.exp2(x)", "y * LN2", "y * LN2 * LN2", math="exp2", libm=True),
    U(21, "log2", "Log2", "np.log2(x)", "1.0 / (x * LN2)", "-1.0 / (x * x * LN2)",
      math="log2", libm=True),
    U(22, "log10", "Log10", "np.log10(x)", "1.0 / (x * LN10)", "-1.0 / (x * x * LN10)",
      math="log10", libm=True),
    U(23, "cbrt", "Cbrt", "np.cbrt(x)", "1.0 / (3.0 * y * y)",
      "-2.0 / (9.0 * (y * ((y * y) * (y * y))))", math="cbrt", libm=True),
    U(24, "arcsinh", "Asinh", "np.arcsinh(x)", "1.0 / math.sqrt(x * x + 1.0)",
      "-x / np.power(x * x + 1.0, 1.5)", math="asinh", libm=True),
    U(25, "arccosh", "Acosh", "np.arccosh(x)", "1.0 / math.sqrt(x * x - 1.0)",
      "-x / np.power(x * x - 1.0, 1.5)", math="acosh", libm=True, example=1.5),
    U(26, "arctanh", "Atanh", "np.arctanh(x)", "1.0 / (1.0 - x * x)",
      "2.0 * x / ((1.0 - x * x) * (1.0 - x * x))", math="atanh", libm=True),
    U(27, "deg2rad", "Deg2rad", "x * DEG", "DEG", math="radians"),
    U(28, "rad2deg", "Rad2deg", "x * RAD", "RAD", math="degrees"),
    U(29, "fabs", "Fabs", "abs(x)", "np.sign(x)", math="fabs"),
    # scipy.special's functions, computed by tapegrad's own kernels (kernels/special.py)
    U(30, "erf", "Erf", "f_special(sub, np.float64(x))", "TWO_OVER_SQRT_PI * math.exp(-x * x)",
      "-2.0 * x * TWO_OVER_SQRT_PI * math.exp(-x * x)", math="erf", scipy=True),
    U(31, "erfc", "Erfc", "f_special(sub, np.float64(x))",
      "-TWO_OVER_SQRT_PI * math.exp(-x * x)", "2.0 * x * TWO_OVER_SQRT_PI * math.exp(-x * x)",
      math="erfc", scipy=True),
    # y' = sqrt(pi)/2 exp(y^2), y'' = 2 y y'^2
    U(32, "erfinv", "Erfinv", "f_special(sub, np.float64(x))", "HALF_SQRT_PI * math.exp(y * y)",
      "2.0 * y * (HALF_SQRT_PI * math.exp(y * y)) * (HALF_SQRT_PI * math.exp(y * y))",
      scipy=True),
    U(33, "gammaln", "Gammaln", "f_special(sub, np.float64(x))", "digamma(np.float64(x))",
      "trigamma(np.float64(x))", math="lgamma", scipy=True),
    U(34, "digamma", "Digamma", "f_special(sub, np.float64(x))", "trigamma(np.float64(x))",
      "tetragamma(np.float64(x))", scipy=True),
    # i0e' = i1e - sign(x) i0e; i1e' = i0e - i1e (sign(x) + 1/x), 1/2 at 0
    U(35, "i0e", "I0e", "f_special(sub, np.float64(x))", "d_i0e(np.float64(x), np.float64(y))",
      "d2_i0e(np.float64(x), np.float64(y))", scipy=True, graph="i1e(x) - np.sign(x) * y"),
    U(36, "i1e", "I1e", "f_special(sub, np.float64(x))", "d_i1e(np.float64(x), np.float64(y))",
      "d2_i1e(np.float64(x), np.float64(y))", scipy=True,
      graph="i0e(x) - y * (np.sign(x) + 1.0 / nonzero(x))"),
    U(37, "log_ndtr", "LogNdtr", "f_special(sub, np.float64(x))", "d_log_ndtr(np.float64(x))",
      "d2_log_ndtr(np.float64(x))", scipy=True,
      graph="math.exp(-0.5 * x * x - log_ndtr(x)) / math.sqrt(2.0 * math.pi)"),
    # piecewise constant: recorded (graphs stay connected), zero gradient; distinct
    # codes only so that grad_fn.name() tells them apart
    U(40, "floor", "Floor", "np.floor(x)", "0.0"),
    U(41, "ceil", "Ceil", "np.ceil(x)", "0.0"),
    U(42, "trunc", "Trunc", "np.trunc(x)", "0.0"),
    U(43, "rint", "Rint", "np.rint(x)", "0.0"),
    # round with decimals=0 (a trace checks that no other was used)
    U(44, "round", "Round", "np.rint(x)", "0.0"),
)
del U

ROWS_BY_NAME = {r.name: r for r in ROWS}
ROWS_BY_SUB = {r.sub: r for r in ROWS}
#: the constant names of kernels/codes.py (``C.ARCSINH``) by sub code
CODE_NAMES = {r.sub: {"positive": "IDENT", "negative": "NEG", "absolute": "ABS",
                      "sign": "ZERO"}.get(r.name, r.name.upper()) for r in ROWS}


def codes():
    """``{constant name: sub code}`` of the rows, for ``kernels/codes.py``."""
    return {CODE_NAMES[r.sub]: r.sub for r in ROWS}


# -- the ops of two tensors -------------------------------------------------------------------
#: K_NARY sub codes from here on are piecewise constant (zero gradient)
NARY_ZERO_FIRST = 40
#: where(cond, a, b): a K_NARY op of three operands, written by hand in each kernel
WHERE = 7

CROSS, QUOTIENT, ALL = "cross", "quotient", "all"
_SECOND = ("daa", "dab", "dbb")


class Binary(NamedTuple):
    """One elementwise op of two tensors, ``y = f(a, b)`` (K_NARY, broadcasting).

    ``f`` is the forward at one element; ``da``, ``db`` the first partials
    and ``daa``, ``dab``, ``dbb`` the second, as expressions in ``a``, ``b``
    and ``y``; None is a structural zero.  A partial may be a conditional
    expression (``u if c else v``) where the op branches on a value: the
    interpreted tier's whole-array form takes ``np.where`` for it, the
    ``create_graph`` rule a mask of the values.  ``graph_da`` / ``graph_db``
    replace ``da`` / ``db`` in ``create_graph`` where the expression's
    unselected branch would put NaN into the next derivative (``power``'s
    ``log a`` at ``a == 0``).
    """
    sub: int
    name: str                   # tapegrad's function (NumPy's name)
    grad: str                   # grad_fn name: ``<grad>Backward``
    f: str
    da: Optional[str]
    db: Optional[str]
    daa: Optional[str] = None
    dab: Optional[str] = None
    dbb: Optional[str] = None
    math: Optional[str] = None  # Python's math function of the same meaning
    libm: bool = False          # f calls NumPy's function of this name, whose loop may
                                # differ from libm (kernels/libm.py stands in for it)
    graph_da: Optional[str] = None
    graph_db: Optional[str] = None

    @property
    def reads(self):
        """The values the derivatives read: some of ``a``, ``b``, ``y``."""
        names = set()
        for src in (self.da, self.db, *self.second):
            names |= _names(src or "0.0")
        return "".join(v for v in "aby" if v in names)

    @property
    def second(self):
        return tuple(getattr(self, k) for k in _SECOND)

    @property
    def curve(self):
        """``linear``, ``constant``, ``cross`` (only d2y/da db), ``quotient``
        (that and d2y/db2) or ``all``."""
        given = {k for k in _SECOND if getattr(self, k) is not None}
        if not given:
            return CONSTANT if self.da is None and self.db is None else LINEAR
        return {frozenset({"dab"}): CROSS,
                frozenset({"dab", "dbb"}): QUOTIENT}.get(frozenset(given), ALL)


_POW_DA = "b * np.power(a, b - 1.0) if b != 0.0 else 0.0"
# d/db a**b = a**b log a; the limit at a == 0 (b > 0) is 0, as in PyTorch
_POW_DB = "y * math.log(a) if a != 0.0 else 0.0"
# b == 0 and b == 1 are exact zeros, also at a == 0 (0 * 0 ** -1 would be NaN), as
# for x ** c (d2_scalar); the log terms take their limit 0 at a == 0
_POW_D2 = ("b * (b - 1.0) * np.power(a, b - 2.0) if b != 0.0 and b != 1.0 else 0.0",
           "(1.0 if b == 1.0 else 0.0) if a == 0.0 else "
           "np.power(a, b - 1.0) * (1.0 + b * math.log(abs(a)))",
           "0.0 if a == 0.0 else y * math.log(abs(a)) * math.log(abs(a))")
# log's argument kept away from 0 too: the masked branch's own derivative stays finite
_POW_GRAPH_DB = "y * math.log(np.where(a != 0.0, a, 1.0)) if a != 0.0 else 0.0"
_R4 = "((a * a + b * b) * (a * a + b * b))"
_LSE = "math.exp(a - y) * math.exp(b - y)"
_LSE2 = "np.exp2(a - y) * np.exp2(b - y) * LN2"

B = Binary
BINARY = (
    B(0, "add", "Add", "a + b", "1.0", "1.0"),
    B(1, "subtract", "Sub", "a - b", "1.0", "-1.0"),
    B(2, "multiply", "Mul", "a * b", "b", "a", dab="1.0"),
    B(3, "divide", "Div", "a / b", "1.0 / b", "-y / b", dab="-1.0 / (b * b)",
      dbb="2.0 * y / (b * b)"),
    B(4, "power", "Pow", "np.power(a, b)", _POW_DA, _POW_DB, *_POW_D2, math="pow", libm=True,
      graph_db=_POW_GRAPH_DB),
    # a tie splits the gradient evenly; NaN wins, as in NumPy
    B(5, "maximum", "Maximum", "a if (a >= b or a != a) else b",
      "1.0 if a > b else (0.0 if a < b else (0.5 if a == b else (1.0 if a != a else 0.0)))",
      "0.0 if a > b else (1.0 if a < b else (0.5 if a == b else (0.0 if a != a else 1.0)))"),
    B(6, "minimum", "Minimum", "a if (a <= b or a != a) else b",
      "1.0 if a < b else (0.0 if a > b else (0.5 if a == b else (1.0 if a != a else 0.0)))",
      "0.0 if a < b else (1.0 if a > b else (0.5 if a == b else (0.0 if a != a else 1.0)))"),
    B(8, "arctan2", "Atan2", "np.arctan2(a, b)", "b / (a * a + b * b)", "-a / (a * a + b * b)",
      f"-2.0 * a * b / {_R4}", f"(a * a - b * b) / {_R4}", f"2.0 * a * b / {_R4}",
      math="atan2", libm=True),
    B(9, "hypot", "Hypot", "np.hypot(a, b)", "a / y", "b / y", "b * b / (y * y * y)",
      "-a * b / (y * y * y)", "a * a / (y * y * y)", math="hypot", libm=True),
    B(10, "logaddexp", "Logaddexp", "np.logaddexp(a, b)", "math.exp(a - y)", "math.exp(b - y)",
      _LSE, f"-({_LSE})", _LSE, libm=True),
    B(11, "logaddexp2", "Logaddexp2", "np.logaddexp2(a, b)", "np.exp2(a - y)",
      "np.exp2(b - y)", _LSE2, f"-({_LSE2})", _LSE2, libm=True),
    # a tie splits the gradient evenly; NaN loses (it wins in maximum/minimum)
    B(12, "fmax", "Fmax", "b if (a < b or a != a) else a",
      "0.0 if a != a else (1.0 if b != b else (0.5 if a == b else (1.0 if a > b else 0.0)))",
      "1.0 if a != a else (0.0 if b != b else (0.5 if a == b else (0.0 if a > b else 1.0)))"),
    B(13, "fmin", "Fmin", "b if (a > b or a != a) else a",
      "0.0 if a != a else (1.0 if b != b else (0.5 if a == b else (1.0 if a < b else 0.0)))",
      "1.0 if a != a else (0.0 if b != b else (0.5 if a == b else (0.0 if a < b else 1.0)))"),
    # |a| with b's sign
    B(14, "copysign", "Copysign", "math.copysign(a, b)",
      "math.copysign(1.0, a) * math.copysign(1.0, b)", None, math="copysign"),
    # a - trunc(a / b) * b
    B(15, "fmod", "Fmod", "np.fmod(a, b)", "1.0", "-float(np.trunc(a / b))", math="fmod"),
    # a - floor(a / b) * b; a float floor: inf where b == 0 (math.floor would raise)
    B(16, "remainder", "Remainder", "divmod_floor(a, b)[1]", "1.0", "-np.floor(a / b)"),
    B(17, "float_power", "FloatPower", "np.power(a, b)", _POW_DA, _POW_DB, *_POW_D2,
      graph_db=_POW_GRAPH_DB),
    # piecewise constant: recorded (graphs stay connected), zero gradient
    B(40, "floor_divide", "FloorDivide", "divmod_floor(a, b)[0]", None, None),
    # heaviside(a, b): b at a == 0
    B(41, "heaviside", "Heaviside",
      "a if a != a else (b if a == 0.0 else (1.0 if a > 0.0 else 0.0))", None, None),
)
del B

BINARY_BY_NAME = {r.name: r for r in BINARY}
BINARY_BY_SUB = {r.sub: r for r in BINARY}
#: the constant names of kernels/codes.py (``C.MUL``) by K_NARY sub code
BINARY_CODE_NAMES = {r.sub: {"subtract": "SUB", "multiply": "MUL", "divide": "DIV",
                             "power": "POW"}.get(r.name, r.name.upper()) for r in BINARY}


def binary_codes():
    """``{constant name: sub code}`` of the binary rows, for ``kernels/codes.py``."""
    return {BINARY_CODE_NAMES[r.sub]: r.sub for r in BINARY}


# -- the generated switches -------------------------------------------------------------------
_HEAD = '''"""Generated by ``python tapegrad/kernels/generate.py`` from the rows of
``kernels/formulas.py``; edit the rows, not this file (``tests/test_formulas.py``
checks that it is current).

The scalar rules of the elementwise ops of one tensor, per sub code: the
forward ``f_unary``, the derivative ``d_unary`` and the second derivative
``d2_unary``. Every switch ends in ``unhandled(sub)`` (NaN compiled; the
registry's check runs them as Python and refuses a code that reaches it).
"""
import math

import numpy as np

from . import codes as C
from . import optable
from ._jit import inline
from .interpret import returns_float64  # the interpreted tier casts as compiled
from .special import (d2_i0e, d2_i1e, d2_log_ndtr, d_i0e, d_i1e, d_log_ndtr,  # noqa: F401
                      digamma, f_special, tetragamma, trigamma)
from .unhandled import unhandled
from .vecmath import exp_v, log_v, tanh_v  # noqa: F401  (vectorised; array forms interpreted)

'''


def _switch(name, doc, params, rows, expr, view, default):
    out = ["", "", "@returns_float64", "@inline", f"def {name}({params}):", f'    """{doc}"""']
    out += ["    if sub >= C.VIEW_FIRST:", f"        return {view}"]
    for r in rows:
        e = expr(r)
        if e is not None:
            out += [f"    if sub == C.{CODE_NAMES[r.sub]}:", f"        return {e}"]
    out.append(f"    return {default}")
    return out


def render():
    """The source of ``kernels/unary_rules.py``."""
    lines = [_HEAD.rstrip("\n"), ""]
    lines += [f"{k} = {v!r}" for k, v in CONSTANTS.items()]
    lines += ["_HAS_D2 = optable.has_d2_array(C.K_UNARY)"]
    lines += _switch("f_unary", "``f(x)`` of a K_UNARY sub code at one element.", "sub, x",
                     ROWS, lambda r: r.f, "x", "unhandled(sub)")
    lines += _switch("d_unary", "dy/dx of ``y = f(x)`` at one element.", "sub, x, y",
                     ROWS, lambda r: r.d, "1.0", "unhandled(sub)")
    d2 = _switch("d2_unary", "d^2y/dx^2 of ``y = f(x)`` at one element (0 where the op is "
                 "linear).", "sub, x, y", ROWS, lambda r: r.d2, "0.0", "unhandled(sub)")
    # the ops without a second derivative return 0 before the branches
    d2[6:6] = ["    if not _HAS_D2[sub]:", "        return 0.0"]
    lines += d2
    return "\n".join(lines) + "\n"


_BINARY_HEAD = '''"""Generated by ``python tapegrad/kernels/generate.py`` from the rows of
``kernels/formulas.py``; edit the rows, not this file (``tests/test_formulas.py``
checks that it is current).

The scalar rules of the elementwise ops of two tensors, per K_NARY sub code
(``where`` has its own branch in every kernel): the forward ``f_binary``,
the partials ``d_binary`` and the second partials ``d2_binary``. Every
switch ends in ``unhandled(sub)`` (NaN compiled; the registry's check runs
them as Python and refuses a code that reaches it).

``BINARY_TWINS``: the whole-array forms of the partials that branch on a
value, for the interpreted tier (``interpret.array_form``): a rule with
``if a > b`` cannot take arrays, so its twin selects with ``np.where``
between the same expressions (every branch is computed, the unselected
values discarded; hence errstate ignore). ``tests/test_interpret.py`` holds
each twin to its element rule bit for bit.
"""
import math

import numpy as np

from . import codes as C
from . import optable
from ._jit import inline
from .floor_division import divmod_floor  # noqa: F401
from .interpret import returns_float64  # the interpreted tier casts as compiled
from .unhandled import unhandled

'''


def _group(rows, expr):
    """``[(subs, expression)]``: rows with the same expression share a branch."""
    out = {}
    for r in rows:
        e = expr(r)
        if e is not None:
            out.setdefault(e, []).append(r.sub)
    return [(subs, e) for e, subs in out.items()]


def _test(subs):
    return " or ".join(f"sub == C.{BINARY_CODE_NAMES[s]}" for s in subs)


def _value(src):
    """A return value: a conditional expression in parentheses."""
    if src is None:
        return "0.0"
    node = ast.parse(src, mode="eval").body
    return f"({src})" if isinstance(node, (ast.IfExp, ast.Lambda)) else src


def _binary_switch(name, doc, params, head, groups, fallback):
    out = ["", "", "@returns_float64", "@inline", f"def {name}({params}):", f'    """{doc}"""']
    out += head
    for subs, e in groups:
        out += [f"    if {_test(subs)}:", *_shared(e, 8)]
    out.append(f"    return {fallback}")
    return out


def _shared(values, indent):
    """``return values``, where a value that repeats an earlier one or negates
    it (``s, -s, s``: logaddexp's second partials) reads it from a local, so
    the compiled code negates the product it computes once, as written."""
    top = ast.parse(values, mode="eval").body
    parts = [ast.unparse(v) for v in top.elts] if isinstance(top, ast.Tuple) else [values]
    named = {}
    for i, p in enumerate(parts):
        node = ast.parse(p, mode="eval").body
        neg = ast.unparse(node.operand) if isinstance(node, ast.UnaryOp) and \
            isinstance(node.op, ast.USub) else None
        for j, q in enumerate(parts[:i]):
            if q in (p, neg) and isinstance(ast.parse(q, mode="eval").body, ast.BinOp):
                named.setdefault(j, f"s{j}")
    if not named or len(parts) == 1:
        return _return(values, indent)
    pad = " " * indent
    lines = [f"{pad}{named[j]} = {parts[j]}" for j in sorted(named)]
    by_src = {parts[j]: named[j] for j in named}
    ret = []
    for p in parts:
        node = ast.parse(p, mode="eval").body
        if p in by_src:
            ret.append(by_src[p])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and \
                ast.unparse(node.operand) in by_src:
            ret.append("-" + by_src[ast.unparse(node.operand)])
        else:
            ret.append(p)
    return lines + _return(", ".join(ret), indent)


def _return(values, indent):
    """``return values``, one value a line where one line would be long."""
    pad = " " * indent
    if len(pad) + 7 + len(values) <= 99:
        return [f"{pad}return {values}"]
    parts = [ast.unparse(v) for v in ast.parse(values, mode="eval").body.elts]
    parts = [f"({p})" if isinstance(ast.parse(p, mode="eval").body, ast.IfExp) else p
             for p in parts]
    return [f"{pad}return ("] + [f"{pad}    {p}," for p in parts[:-1]] + \
        [f"{pad}    {parts[-1]})"]


def _twin_name(r):
    return f"_{r.name}_arrays"


def _needs_twin(r):
    return any(array_form(s) != s for s in (r.da, r.db) if s is not None)


def render_binary():
    """The source of ``kernels/binary_rules.py``."""
    lines = [_BINARY_HEAD.rstrip("\n"), ""]
    read = set().union(*(_names(s) for r in BINARY for s in (r.f, r.da, r.db, *r.second) if s))
    lines += [f"{k} = {v!r}" for k, v in CONSTANTS.items() if k in read]
    lines += ["_HAS_D2 = optable.has_d2_array(C.K_NARY)"]
    smooth = [r for r in BINARY if r.sub < NARY_ZERO_FIRST]
    if any(r.curve != CONSTANT for r in BINARY if r.sub >= NARY_ZERO_FIRST):
        raise ValueError(f"K_NARY sub codes from {NARY_ZERO_FIRST} are piecewise constant")
    lines += _binary_switch(
        "f_binary", "``f(a, b)`` of a K_NARY sub code (not WHERE) at one element.",
        "sub, a, b", [], _group(BINARY, lambda r: _value(r.f)), "unhandled(sub)")
    lines += _binary_switch(
        "d_binary", "(dy/da, dy/db) of ``y = f(a, b)`` at one element.", "sub, a, b, y",
        ["    if sub >= C.NARY_ZERO_FIRST:  # piecewise constant", "        return 0.0, 0.0"],
        _group(smooth, lambda r: f"{_value(r.da)}, {_value(r.db)}"),
        "unhandled(sub), unhandled(sub)")
    lines += _binary_switch(
        "d2_binary", "(d2y/da2, d2y/da db, d2y/db2) at one element (0 where linear).",
        "sub, a, b, y",
        ["    if not _HAS_D2[sub]:", "        return 0.0, 0.0, 0.0"],
        _group([r for r in BINARY if r.curve in (CROSS, QUOTIENT, ALL)],
               lambda r: ", ".join(_value(s) for s in r.second)),
        "unhandled(sub), unhandled(sub), unhandled(sub)")
    twins = {}
    for r in smooth:
        if _needs_twin(r):
            key = (r.da, r.db)
            if key not in twins:
                twins[key] = _twin_name(r)
                da = array_form(r.da) if r.da is not None else "0.0"
                db = array_form(r.db) if r.db is not None else "0.0"
                lines += ["", "", f"def {twins[key]}(a, b, y):",
                          f'    """``d_binary`` of {r.name} on whole arrays."""',
                          '    with np.errstate(all="ignore"):', *_return(f"{da}, {db}", 8)]
    lines += ["", "", "#: ``sub -> twin(a, b, y) -> (dy/da, dy/db)`` for the K_NARY subs whose",
              "#: ``d_binary`` branch tests an element", "BINARY_TWINS = {"]
    lines += [f"    C.{BINARY_CODE_NAMES[r.sub]}: {twins[(r.da, r.db)]},"
              for r in smooth if (r.da, r.db) in twins]
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- the formulas in the other namespaces ------------------------------------------------------
class _Rename(ast.NodeTransformer):
    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        new = self.names.get(node.id)
        if new is None:
            return node
        return ast.copy_location(ast.parse(new, mode="eval").body, node)


def substitute(src, names):
    """``src`` with each name of ``names`` replaced by the given source text
    (a whole name, never a part of one).

    >>> substitute("1.0 / math.sqrt(x * x + 1.0)", {"x": "u"})
    '1.0 / math.sqrt(u * u + 1.0)'
    """
    tree = _Rename(names).visit(ast.parse(src, mode="eval"))
    return ast.unparse(tree)


class _ArrayForm(ast.NodeTransformer):
    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        return ast.copy_location(_call("np.where", [node.test, node.body, node.orelse]), node)

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        fn = "np.logical_and" if isinstance(node.op, ast.And) else "np.logical_or"
        out = node.values[0]
        for v in node.values[1:]:
            out = _call(fn, [out, v])
        return ast.copy_location(out, node)

    def visit_Call(self, node):
        node = self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1:
            return node.args[0]
        return node


def _call(fn, args):
    return ast.Call(ast.parse(fn, mode="eval").body, args, [])


def array_form(src):
    """``src`` on whole arrays: a conditional expression ``u if c else v`` is
    ``np.where(c, u, v)``, ``and``/``or`` are ``np.logical_and``/``_or``,
    ``float(v)`` is ``v``; the same IEEE operations on each element.

    >>> array_form("b * a if b != 0.0 else 0.0")
    'np.where(b != 0.0, b * a, 0.0)'
    """
    tree = _ArrayForm().visit(ast.parse(src, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree))


#: functions whose value is piecewise constant: a ``create_graph`` rule
#: computes them from the values, as constants of the new graph
_FLAT = {"np.sign", "np.trunc", "np.floor", "np.ceil", "np.rint", "math.floor",
         "math.trunc", "math.ceil"}


class _GraphForm(ast.NodeTransformer):
    def __init__(self):
        self.flat = []

    def constant(self, node):
        self.flat.append(ast.unparse(node))
        return ast.Name(f"_c{len(self.flat) - 1}", ast.Load())

    def visit_Compare(self, node):
        return self.constant(node)

    def visit_BoolOp(self, node):
        return self.constant(node)

    def visit_IfExp(self, node):
        test = self.constant(node.test)
        return _call("_where", [test, self.visit(node.body), self.visit(node.orelse)])

    def visit_Call(self, node):
        fn = ast.unparse(node.func)
        if fn in _FLAT or (fn in ("math.copysign", "np.copysign")
                           and isinstance(node.args[0], ast.Constant)):
            return self.constant(node)
        if fn == "float" and len(node.args) == 1:
            return self.visit(node.args[0])
        return self.generic_visit(node)


def graph_form(src):
    """``(graph, constants)``: ``src`` as a ``create_graph`` rule evaluates it.
    Each comparison and piecewise-constant call (``np.floor``, the sign
    ``math.copysign(1.0, v)``) is computed from the values and named
    ``_c0``, ``_c1``, ... (``constants`` lists their sources); ``u if c else
    v`` is ``_where(c, u, v)``; ``float(v)`` is ``v``.

    >>> graph_form("y * math.log(a) if a != 0.0 else 0.0")
    ('_where(_c0, y * math.log(a), 0.0)', ['a != 0.0'])
    """
    g = _GraphForm()
    tree = g.visit(ast.parse(src, mode="eval"))
    return ast.unparse(ast.fix_missing_locations(tree)), g.flat
