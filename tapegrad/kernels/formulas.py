"""The elementwise ops of one tensor, one row each: the single place that
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
           "d2_i1e", "d_log_ndtr", "d2_log_ndtr", "exp_v", "log_v", "tanh_v")

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
