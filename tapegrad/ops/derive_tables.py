"""The rule tables of ``ops/derive.py``'s source transformation: the first
and second partial derivatives of each step ``z = phi(u[, w])`` as Python
expressions, the math, NumPy and builtin functions it knows, and the names
it gives tangents in the generated code.
"""
import ast
import math

from ..kernels import formulas

# -- rules -------------------------------------------------------------------------------
# Each row: the partial derivatives of z = phi(u) or z = phi(u, w) as Python
# expressions in the step's operands {u}, {w} and result {z}; None is a
# structural zero.  Unary rows: (phi_u, phi_uu).  Binary rows: (phi_u, phi_w,
# phi_uu, phi_uw, phi_ww).

_LN2 = 0.6931471805599453
_LN10 = 2.302585092994046
_SQPI2 = 1.1283791670955126   # 2 / sqrt(pi)

#: the deriver's names of the ops of one tensor (``math``'s, where it has one)
_RULE_NAMES = {"negative": "neg", "absolute": "abs", "square": "square"}


def _template(d):
    """A formula row's expression in x, y as a rule in {u}, {z}."""
    if d is None:
        return None
    names = {"x": "_u_", "y": "_z_", "digamma": "_tg_digamma", "trigamma": "_tg_trigamma",
             **{k: repr(v) for k, v in formulas.CONSTANTS.items()}}
    src = formulas.substitute(d, names)
    return "(" + src.replace("_u_", "{u}").replace("_z_", "{z}") + ")"


def _rule(row):
    return _RULE_NAMES.get(row.name, row.math)


UNARY = {
    # the rows of kernels/formulas.py: the same derivatives the kernels use
    **{_rule(r): (_template(r.d), _template(r.d2)) for r in formulas.ROWS
       if _rule(r) and r.name != "fabs"},
    # math.gamma: a function the deriver reads, not an op of tapegrad's
    "gamma": ("({z} * _tg_digamma({u}))",
              "({z} * (_tg_digamma({u}) * _tg_digamma({u}) + _tg_trigamma({u})))"),
}

_R2 = "({u} * {u} + {w} * {w})"
BINARY = {
    "add": ("1.0", "1.0", None, None, None),
    "sub": ("1.0", "-1.0", None, None, None),
    "mul": ("{w}", "{u}", None, "1.0", None),
    "div": ("(1.0 / {w})", "(-{z} / {w})", None, "(-1.0 / ({w} * {w}))",
            "(2.0 * {z} / ({w} * {w}))"),
    "mod": ("1.0", "(-math.floor({u} / {w}))", None, None, None),     # u - floor(u/w) w
    "fmod": ("1.0", "(-float(math.trunc({u} / {w})))", None, None, None),
    # d/dw u**w = u**w log u; the log terms' limit at u == 0 is 0
    "pow": ("({w} * {u} ** ({w} - 1.0) if {w} != 0.0 else 0.0)",
            "({z} * math.log({u}) if {u} != 0.0 else 0.0)",
            # w == 0 and w == 1 are exact zeros, also at u == 0 (0 * 0 ** -1 would be NaN)
            "({w} * ({w} - 1.0) * {u} ** ({w} - 2.0) if {w} != 0.0 and {w} != 1.0 else 0.0)",
            "({u} ** ({w} - 1.0) * (1.0 + {w} * math.log(abs({u}))) if {u} != 0.0 "
            "else (1.0 if {w} == 1.0 else 0.0))",
            "({z} * math.log(abs({u})) ** 2 if {u} != 0.0 else 0.0)"),
    "atan2": (f"({{w}} / {_R2})", f"(-{{u}} / {_R2})", f"(-2.0 * {{u}} * {{w}} / {_R2} ** 2)",
              f"(({{u}} * {{u}} - {{w}} * {{w}}) / {_R2} ** 2)",
              f"(2.0 * {{u}} * {{w}} / {_R2} ** 2)"),
    "hypot": ("({u} / {z})", "({w} / {z})", "({w} * {w} / {z} ** 3)",
              "(-{u} * {w} / {z} ** 3)", "({u} * {u} / {z} ** 3)"),
    "copysign": ("(math.copysign(1.0, {u}) * math.copysign(1.0, {w}))", None, None, None,
                 None),
    "ldexp": ("math.ldexp(1.0, {w})", None, None, None, None),
    # Python's max(u, w) is u unless w > u (so u on NaN); a tie splits evenly
    "max": ("(1.0 if {u} > {w} else (0.0 if {u} < {w} else (0.5 if {u} == {w} else 1.0)))",
            "(0.0 if {u} > {w} else (1.0 if {u} < {w} else (0.5 if {u} == {w} else 0.0)))",
            None, None, None),
    "min": ("(1.0 if {u} < {w} else (0.0 if {u} > {w} else (0.5 if {u} == {w} else 1.0)))",
            "(0.0 if {u} < {w} else (1.0 if {u} > {w} else (0.5 if {u} == {w} else 0.0)))",
            None, None, None),
}

#: functions of ``math`` by the rule they take (1 or 2 operands)
_MATH = {**{r.math: _rule(r) for r in formulas.ROWS if r.math and _rule(r)},
         **{k: k for k in ("gamma", "atan2", "hypot", "copysign", "fmod", "pow", "ldexp")},
         "fabs": "abs"}
#: functions of NumPy (on scalars) by rule
_NUMPY = {**{r.name: _rule(r) for r in formulas.ROWS if _rule(r) and not r.scipy},
          **{k: k for k in ("hypot", "copysign", "degrees", "radians", "fmod")},
          "arctan2": "atan2", "abs": "abs", "fabs": "abs", "power": "pow", "maximum": "max",
          "minimum": "min", "fmax": "max", "fmin": "min", "float64": "float"}
#: piecewise constant or boolean: derivative 0, evaluated as written
_FLAT_MATH = {"floor", "ceil", "trunc", "isnan", "isinf", "isfinite", "factorial"}
_FLAT_NUMPY = {"floor", "ceil", "trunc", "rint", "sign", "isnan", "isinf", "isfinite"}
_MATH_CONSTANTS = {"pi", "e", "tau", "inf", "nan"}
_BUILTINS = {"abs": "abs", "min": "min", "max": "max", "float": "float", "pow": "pow",
             "int": None, "round": None, "bool": None}
_TWO = {"atan2", "hypot", "copysign", "fmod", "pow", "ldexp", "max", "min"}
#: names the generated code itself calls: a local of the same name would hide them
_RESERVED = {"math", "np", "abs", "float", "range"}

_BINOPS = {ast.Add: ("+", "add"), ast.Sub: ("-", "sub"), ast.Mult: ("*", "mul"),
           ast.Div: ("/", "div"), ast.Pow: ("**", "pow"), ast.Mod: ("%", "mod"),
           ast.FloorDiv: ("//", None)}


# -- names -------------------------------------------------------------------------------

def _comps(n, order):
    first = [(i,) for i in range(n)]
    second = [(i, j) for i in range(n) for j in range(i, n)] if order == 2 else []
    return first, second


def _tan(var, c):
    return f"_tg_d{''.join(map(str, c))}_{var}"


def _atom(s):
    return s if s.isidentifier() else f"({s})"


def _is_dispatcher(v):
    return type(v).__module__.startswith("numba") and hasattr(v, "py_func")


def _describe(node):
    return {ast.Subscript: "indexing", ast.Attribute: "attribute access",
            ast.Lambda: "a lambda inside the function", ast.Tuple: "a tuple",
            ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set",
            ast.ListComp: "a comprehension", ast.GeneratorExp: "a generator",
            ast.JoinedStr: "an f-string", ast.NamedExpr: "an assignment expression (:=)",
            ast.Starred: "a starred expression"}.get(type(node), type(node).__name__)

