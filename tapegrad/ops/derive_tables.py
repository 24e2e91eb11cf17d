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

#: the deriver's names of the ops of two tensors: Python's operator's or
#: ``math``'s, else NumPy's
_BINARY_RULE_NAMES = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div",
                      "remainder": "mod"}


def _binary_rule(row):
    return _BINARY_RULE_NAMES.get(row.name) or row.math or row.name


def _template2(d):
    """A binary row's expression in a, b, y as a rule in {u}, {w}, {z} (a
    name or a number as it is, anything else in parentheses)."""
    if d is None:
        return None
    names = {"a": "_u_", "b": "_w_", "y": "_z_",
             **{k: repr(v) for k, v in formulas.CONSTANTS.items()}}
    src = formulas.substitute(d, names)
    node = ast.parse(src, mode="eval").body
    atom = isinstance(node, (ast.Name, ast.Constant)) or (
        isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant))
    src = src if atom else f"({src})"
    return src.replace("_u_", "{u}").replace("_w_", "{w}").replace("_z_", "{z}")


BINARY = {
    # the binary rows of kernels/formulas.py: the same partials the kernels use
    **{_binary_rule(r): tuple(_template2(d) for d in (r.da, r.db, *r.second))
       for r in formulas.BINARY if r.curve != formulas.CONSTANT},
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
         **{r.math: _binary_rule(r) for r in formulas.BINARY if r.math},
         **{k: k for k in ("gamma", "ldexp")}, "fabs": "abs"}
#: functions of NumPy (on scalars) by rule
_NUMPY = {**{r.name: _rule(r) for r in formulas.ROWS if _rule(r) and not r.scipy},
          **{r.name: _binary_rule(r) for r in formulas.BINARY if r.curve != formulas.CONSTANT},
          **{k: k for k in ("degrees", "radians")},
          "abs": "abs", "fabs": "abs", "float64": "float"}
#: piecewise constant or boolean: derivative 0, evaluated as written
_FLAT_MATH = {"floor", "ceil", "trunc", "isnan", "isinf", "isfinite", "factorial"}
_FLAT_NUMPY = {"floor", "ceil", "trunc", "rint", "sign", "isnan", "isinf", "isfinite",
               *(r.name for r in formulas.BINARY if r.curve == formulas.CONSTANT)}
_MATH_CONSTANTS = {"pi", "e", "tau", "inf", "nan"}
_BUILTINS = {"abs": "abs", "min": "min", "max": "max", "float": "float", "pow": "pow",
             "int": None, "round": None, "bool": None}
_TWO = {*(_binary_rule(r) for r in formulas.BINARY if r.curve != formulas.CONSTANT), "ldexp",
        "max", "min"}
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

