"""The derivatives of a user's scalar function, derived from its source.

``tg.elementwise(f)`` without ``derivative=`` calls :func:`derive`, which
reads ``f``'s source, checks that every statement and expression in it is
one it knows how to differentiate, and writes two new Python functions in
the shapes ``ops/custom.py`` takes from a user: the derivative
(``d(x, y) -> dy/dx``, or ``d(a, b, y) -> (dy/da, dy/db)``) and the second
derivative (``d2(x, y)``, or ``d2(a, b, y) -> (d2y/da2, d2y/dadb,
d2y/db2)``).  custom.py then compiles them with Numba exactly as it compiles
hand-written ones: into the cfuncs the reverse sweep calls through a
pointer, and the ufuncs ``tg.hessian`` / ``tg.hvp`` apply.

Method: source transformation into forward mode, second order included.
The generated function keeps the user's code -- its variables under their
own names, its ``if``/``while`` tests and ``range`` bounds verbatim -- and
gives every differentiated local ``v`` its tangents: ``_tg_d0_v`` (dv/dx,
or dv/da and ``_tg_d1_v`` dv/db for a binary op) and, in the second
derivative, ``_tg_d00_v`` ... (the Hessian of ``v`` in the inputs, three
entries for a binary op).  Each compound expression is split into steps
``z = phi(u[, w])`` with a temporary per step, and each step's tangents come
from one row of the rule tables below (its first and second partials) by
the chain rule, ``z_i = phi_u u_i + phi_w w_i`` and ``z_ij = phi_u u_ij +
phi_w w_ij + phi_uu u_i u_j + phi_uw (u_i w_j + w_i u_j) + phi_ww w_i w_j``.
Why this method:

* Forward mode costs one or two tangents per value (the inputs are one or
  two scalars), needs no tape and so no bound on a loop's trip count: a
  ``while`` loop that iterates to convergence carries its tangents along,
  and the derivative is the generated code's own, branch by branch.
* The result is plain scalar Python, which Numba compiles like the
  forward: branches are taken element by element at run time, and the
  derivative is a function pointer the compiled sweep calls, as a
  hand-written one is.  Dual numbers as a Numba type would do the same at
  run time but need a Numba extension type and its overloads of every math
  function; a source transformation needs only Python's ``ast`` and fails
  early: whatever it cannot differentiate is found when ``tg.elementwise``
  is called, and named with its file and line.
* Second derivatives are generated directly (the Hessian of each value
  carried beside its gradient) rather than by transforming the first
  derivative again: one rule table serves both, and the code stays one pass
  over the user's statements.

Activity: a local is differentiated when some assignment to it reads a
differentiated value (a flow-insensitive fixed point over the function, so
a variable that is ever differentiated has tangents everywhere); loop
counters, ``int()`` results and comparisons carry none.  Where a function
is not differentiable the generated code takes a convention, the same as
tapegrad's built-in ops: ``abs`` and ``math.fabs`` have derivative
``sign(x)`` (0 at 0), ``min``/``max`` split a tie evenly, ``a ** b`` takes
the limit 0 for the ``log a`` terms at ``a == 0``; ``floor``, ``ceil``,
``trunc``, ``round``, ``int``, ``//`` and comparisons have derivative 0.
A branch is differentiated as the branch the input takes: a branch taken
on an equality (``if x == 0.0: return 1.0``) gives, at exactly that point,
the derivative of what it returns.

Calls to other Python functions (plain, or Numba ``@njit`` ones, which a
forward compiled by Numba needs) are transformed in turn, once per pattern
of differentiated arguments, into functions that return a value and its
tangents.  Globals and closure variables that are numbers are read as the
constants they are when ``tg.elementwise`` runs; Numba freezes them in the
forward when the op first compiles, and if one has changed by then (or a
called function was rebound) :func:`ready` derives again, so the
derivatives read what the compiled forward reads.  Everything else raises
:class:`DeriveError` at decoration time, naming the file, the line and the
construct.
"""
import ast
import builtins
import linecache
import math
import threading
import types

import numpy as np


class DeriveError(TypeError):
    """``tg.elementwise(f)`` cannot derive ``f``'s derivative."""


def _fail(fn_name, where, what):
    raise DeriveError(
        f"tapegrad.elementwise cannot derive the derivative of {fn_name}: {where}: {what}. "
        "Write the derivative by hand and pass it as derivative= (and second_derivative= "
        "for tg.hessian / tg.hvp)")


# -- rules -------------------------------------------------------------------------------
# Each row: the partial derivatives of z = phi(u) or z = phi(u, w) as Python
# expressions in the step's operands {u}, {w} and result {z}; None is a
# structural zero.  Unary rows: (phi_u, phi_uu).  Binary rows: (phi_u, phi_w,
# phi_uu, phi_uw, phi_ww).

_LN2 = 0.6931471805599453
_LN10 = 2.302585092994046
_SQPI2 = 1.1283791670955126   # 2 / sqrt(pi)

UNARY = {
    "neg": ("-1.0", None),
    "exp": ("{z}", "{z}"),
    "expm1": ("({z} + 1.0)", "({z} + 1.0)"),
    "exp2": (f"({{z}} * {_LN2!r})", f"({{z}} * {_LN2 * _LN2!r})"),
    "log": ("(1.0 / {u})", "(-1.0 / ({u} * {u}))"),
    "log2": (f"(1.0 / ({{u}} * {_LN2!r}))", f"(-1.0 / ({{u}} * {{u}} * {_LN2!r}))"),
    "log10": (f"(1.0 / ({{u}} * {_LN10!r}))", f"(-1.0 / ({{u}} * {{u}} * {_LN10!r}))"),
    "log1p": ("(1.0 / (1.0 + {u}))", "(-1.0 / ((1.0 + {u}) * (1.0 + {u})))"),
    "sqrt": ("(0.5 / {z})", "(-0.25 / ({z} * {z} * {z}))"),
    "cbrt": ("(1.0 / (3.0 * ({z} * {z})))", "(-2.0 / (9.0 * {z} ** 5))"),
    "sin": ("math.cos({u})", "(-{z})"),
    "cos": ("(-math.sin({u}))", "(-{z})"),
    "tan": ("(1.0 + {z} * {z})", "(2.0 * {z} * (1.0 + {z} * {z}))"),
    "asin": ("(1.0 / math.sqrt(1.0 - {u} * {u}))", "({u} / (1.0 - {u} * {u}) ** 1.5)"),
    "acos": ("(-1.0 / math.sqrt(1.0 - {u} * {u}))", "(-{u} / (1.0 - {u} * {u}) ** 1.5)"),
    "atan": ("(1.0 / (1.0 + {u} * {u}))",
             "(-2.0 * {u} / ((1.0 + {u} * {u}) * (1.0 + {u} * {u})))"),
    "sinh": ("math.cosh({u})", "{z}"),
    "cosh": ("math.sinh({u})", "{z}"),
    "tanh": ("(1.0 - {z} * {z})", "(-2.0 * {z} * (1.0 - {z} * {z}))"),
    "asinh": ("(1.0 / math.sqrt({u} * {u} + 1.0))", "(-{u} / ({u} * {u} + 1.0) ** 1.5)"),
    "acosh": ("(1.0 / math.sqrt({u} * {u} - 1.0))", "(-{u} / ({u} * {u} - 1.0) ** 1.5)"),
    "atanh": ("(1.0 / (1.0 - {u} * {u}))",
              "(2.0 * {u} / ((1.0 - {u} * {u}) * (1.0 - {u} * {u})))"),
    "erf": (f"({_SQPI2!r} * math.exp(-{{u}} * {{u}}))",
            f"({-2 * _SQPI2!r} * {{u}} * math.exp(-{{u}} * {{u}}))"),
    "erfc": (f"({-_SQPI2!r} * math.exp(-{{u}} * {{u}}))",
             f"({2 * _SQPI2!r} * {{u}} * math.exp(-{{u}} * {{u}}))"),
    "lgamma": ("_tg_digamma({u})", "_tg_trigamma({u})"),
    "gamma": ("({z} * _tg_digamma({u}))",
              "({z} * (_tg_digamma({u}) * _tg_digamma({u}) + _tg_trigamma({u})))"),
    "abs": ("np.sign({u})", None),
    "square": ("(2.0 * {u})", "2.0"),
    "degrees": (repr(180.0 / math.pi), None),
    "radians": (repr(math.pi / 180.0), None),
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
_MATH = {**{k: k for k in ("exp", "expm1", "log2", "log10", "log1p", "sqrt", "sin", "cos",
                           "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                           "acosh", "atanh", "erf", "erfc", "lgamma", "gamma", "degrees",
                           "radians", "atan2", "hypot", "copysign", "fmod", "pow", "ldexp")},
         "fabs": "abs", "log": "log"}
#: functions of NumPy (on scalars) by rule
_NUMPY = {**{k: k for k in ("exp", "expm1", "exp2", "log", "log2", "log10", "log1p", "sqrt",
                            "cbrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "hypot",
                            "copysign", "degrees", "radians", "fmod")},
          "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
          "arccosh": "acosh", "arctanh": "atanh", "arctan2": "atan2", "abs": "abs",
          "absolute": "abs", "fabs": "abs", "power": "pow", "deg2rad": "radians",
          "rad2deg": "degrees", "square": "square", "maximum": "max", "minimum": "min",
          "fmax": "max", "fmin": "min", "float64": "float"}
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


# -- reading a function ------------------------------------------------------------------

_trees = {}   # file name -> (its text, its parsed tree): the last version read
_trees_lock = threading.Lock()


def _tree_of(filename, globs):
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, globs)
    if not lines:
        return None, None
    text = "".join(lines)
    with _trees_lock:
        got = _trees.get(filename)
        if got is None or got[0] != text:
            try:
                got = (text, ast.parse(text, filename))
            except SyntaxError:
                return lines, None
            _trees[filename] = got
    return lines, got[1]


def _definition(fn):
    """The ``def`` or ``lambda`` node of ``fn`` in its file, and the file's lines."""
    code = fn.__code__
    lines, tree = _tree_of(code.co_filename, fn.__globals__)
    name = getattr(fn, "__qualname__", fn.__name__)
    if tree is None:
        raise DeriveError(
            f"tapegrad.elementwise cannot derive the derivative of {name}: its source cannot be "
            f"read ({code.co_filename!r}: a function made by exec or eval, or typed into an "
            "interactive session?). Define it in a file, or pass derivative=")
    first = code.co_firstlineno
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if node.name == code.co_name and start == first:
                found.append(node)
        elif isinstance(node, ast.Lambda) and code.co_name == "<lambda>" \
                and node.lineno == first:
            found.append(node)
    params = list(code.co_varnames[:code.co_argcount])
    found = [f for f in found if [a.arg for a in f.args.posonlyargs + f.args.args] == params]
    if len(found) > 1 and hasattr(code, "co_positions"):
        spots = [(ln, c) for ln, _, c, ec in code.co_positions()
                 if ln is not None and c is not None and ec is not None and ec > c]
        found = [f for f in found
                 if all((f.lineno, f.col_offset) <= s <= (f.end_lineno, f.end_col_offset)
                        for s in spots)]
    if len(found) > 1 and len({ast.dump(f) for f in found}) == 1:
        found = found[:1]   # the same text twice: either is the function
    if len(found) != 1:
        raise DeriveError(
            f"tapegrad.elementwise cannot derive the derivative of {name}: its definition "
            f"cannot be told apart in {code.co_filename}:{first} (several lambdas on one "
            "line?). Define it with def, or pass derivative=")
    return found[0], lines


def _known_functions():
    """``(module, name)`` of every math and NumPy function with a rule."""
    return [(mod, attr) for mod, names in ((math, set(_MATH) | _FLAT_MATH),
                                          (np, set(_NUMPY) | _FLAT_NUMPY))
            for attr in sorted(names) if hasattr(mod, attr)]


class _Function:
    """One user function, read and normalised: every name resolved (locals
    kept, numbers made constants, math and NumPy functions spelled
    ``math.f`` / ``np.f``, user functions ``_tg_p<k>``), every construct
    checked."""

    def __init__(self, derivation, fn, stack):
        self.d = derivation
        self.fn = fn
        self.name = getattr(fn, "__qualname__", fn.__name__)
        self.stack = stack
        code = fn.__code__
        self.file = code.co_filename
        node, self.lines = _definition(fn)
        if isinstance(node, ast.AsyncFunctionDef):
            self.fail(node, "an async function")
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs:
            self.fail(node, "*args, **kwargs and keyword-only parameters are not supported")
        self.params = [p.arg for p in a.posonlyargs + a.args]
        body = [ast.Return(value=node.body, lineno=node.lineno)] \
            if isinstance(node, ast.Lambda) else node.body
        self.free = dict(zip(code.co_freevars, fn.__closure__ or ()))
        self.locals = set(self.params)
        for sub in body:
            for n in ast.walk(sub):
                if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                    self.locals.add(n.id)
        for v in sorted(self.locals):
            if v.startswith("_tg_"):
                self.fail(node, f"the name {v} (names starting with _tg_ are the generated "
                                "code's)")
            if v in _RESERVED:
                self.fail(node, f"a local variable named {v} (the derivative's code calls "
                                f"{v}; rename the variable)")
        self.assignments = []   # (target names, value expression, augmented)
        self.returns = []
        self.activities = {}
        self.body = self.block(body)

    def activity(self, mask):
        got = self.activities.get(mask)
        if got is None:
            got = self.activities[mask] = _Activity(self, mask)
        return got

    # errors name the line
    def where(self, node):
        ln = getattr(node, "lineno", None)
        if ln is None:
            return self.file
        text = self.lines[ln - 1].strip() if 0 < ln <= len(self.lines) else ""
        return f"{self.file}:{ln}: `{text}`" if text else f"{self.file}:{ln}"

    def fail(self, node, what):
        _fail(self.stack[0].name if self.stack else self.name, self.where(node), what)

    # statements
    def block(self, body):
        out = []
        for s in body:
            s = self.stmt(s)
            if s is not None:
                out.append(s)
        return out

    def stmt(self, s):
        t = type(s)
        if t is ast.Expr:
            if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                return None   # a docstring
            self.fail(s, "an expression statement (a call for its side effects?) is not "
                         "supported")
        if t is ast.Assign:
            value = self.expr(s.value)
            targets = []
            for tg in s.targets:
                if isinstance(tg, ast.Name):
                    targets.append(tg.id)
                elif isinstance(tg, ast.Tuple) and len(s.targets) == 1 \
                        and isinstance(s.value, ast.Tuple) and len(tg.elts) == len(value.elts) \
                        and all(isinstance(e, ast.Name) for e in tg.elts):
                    names = [e.id for e in tg.elts]
                    for nm, v in zip(names, value.elts):
                        self.assignments.append(([nm], v, False))
                    return ast.Assign(targets=[ast.Tuple([ast.Name(n, ast.Store())
                                                          for n in names], ast.Store())],
                                      value=value, lineno=s.lineno)
                else:
                    self.fail(s, "only assignments to local names (a = ..., or a, b = u, w) "
                                 "are supported")
            if isinstance(value, ast.Tuple):
                self.fail(s, "a tuple value (only a, b = u, w unpacks one)")
            self.assignments.append((targets, value, False))
            return ast.Assign(targets=[ast.Name(n, ast.Store()) for n in targets], value=value,
                              lineno=s.lineno)
        if t is ast.AnnAssign:
            if not isinstance(s.target, ast.Name) or s.value is None:
                self.fail(s, "only annotated assignments of a local name with a value are "
                             "supported")
            return self.stmt(ast.Assign(targets=[s.target], value=s.value, lineno=s.lineno))
        if t is ast.AugAssign:
            if not isinstance(s.target, ast.Name):
                self.fail(s, "only augmented assignments to local names are supported")
            if type(s.op) not in _BINOPS:
                self.fail(s, f"the operator {type(s.op).__name__} is not supported")
            name = s.target.id
            value = ast.BinOp(left=ast.Name(name, ast.Load()), op=s.op,
                              right=self.expr(s.value), lineno=s.lineno)
            self.assignments.append(([name], value, False))
            return ast.Assign(targets=[ast.Name(name, ast.Store())], value=value,
                              lineno=s.lineno)
        if t is ast.If:
            return ast.If(test=self.expr(s.test), body=self.block(s.body),
                          orelse=self.block(s.orelse), lineno=s.lineno)
        if t is ast.While:
            return ast.While(test=self.expr(s.test), body=self.block(s.body),
                             orelse=self.block(s.orelse), lineno=s.lineno)
        if t is ast.For:
            it = s.iter
            ok = (isinstance(s.target, ast.Name) and isinstance(it, ast.Call)
                  and isinstance(it.func, ast.Name) and it.func.id == "range"
                  and it.func.id not in self.locals and not it.keywords
                  and 1 <= len(it.args) <= 3 and self.lookup(it.func)[1] is range)
            if not ok:
                self.fail(s, "only `for name in range(...)` loops are supported")
            args = [self.expr(a) for a in it.args]
            return ast.For(target=ast.Name(s.target.id, ast.Store()),
                           iter=ast.Call(func=ast.Name("range", ast.Load()), args=args,
                                         keywords=[]),
                           body=self.block(s.body), orelse=self.block(s.orelse),
                           lineno=s.lineno)
        if t is ast.Return:
            if s.value is None:
                self.fail(s, "a return without a value")
            value = self.expr(s.value)
            if isinstance(value, ast.Tuple):
                self.fail(s, "a function that returns a tuple (only scalar functions can be "
                             "differentiated)")
            self.returns.append(value)
            return ast.Return(value=value, lineno=s.lineno)
        if t in (ast.Break, ast.Continue, ast.Pass):
            return s
        if t is ast.Assert:
            return ast.Assert(test=self.expr(s.test),
                              msg=self.expr(s.msg) if s.msg is not None else None,
                              lineno=s.lineno)
        if t is ast.Raise:
            exc = s.exc
            call = exc if isinstance(exc, ast.Call) else None
            target = call.func if call is not None else exc
            ok = (s.cause is None and isinstance(target, ast.Name)
                  and target.id not in self.locals
                  and (call is None or (not call.keywords and all(
                      isinstance(a, ast.Constant) for a in call.args)))
                  and isinstance(self.lookup(target)[1], type)
                  and issubclass(self.lookup(target)[1], Exception)
                  and self.lookup(target)[0] == "builtin")
            if not ok:
                self.fail(s, "only `raise BuiltinError(constants...)` is supported")
            return s
        what = {ast.Try: "try/except", ast.With: "a with statement",
                ast.Global: "a global statement (writing to globals)",
                ast.Nonlocal: "a nonlocal statement (writing to an enclosing scope)",
                ast.FunctionDef: "a function defined inside the function",
                ast.ClassDef: "a class definition", ast.Import: "an import",
                ast.ImportFrom: "an import", ast.Delete: "del"}.get(t, t.__name__)
        if hasattr(ast, "TryStar") and t is ast.TryStar:
            what = "try/except"
        if hasattr(ast, "Match") and t is ast.Match:
            what = "a match statement"
        self.fail(s, f"{what} is not supported")

    # names
    def lookup(self, node):
        """``(where, value)`` of a name that is not local: closure, global or builtin."""
        name = node.id
        if name in self.free:
            try:
                v = self.free[name].cell_contents
            except ValueError:
                self.fail(node, f"the closure variable {name} is not set yet")
            self.d.reads.append((self.free[name], None, v))
            return "closure", v
        g = self.fn.__globals__
        if name in g:
            self.d.reads.append((g, name, g[name]))
            return "global", g[name]
        b = g.get("__builtins__", builtins)
        b = b if isinstance(b, dict) else vars(b)
        if name in b:
            return "builtin", b[name]
        self.fail(node, f"the name {name} is not defined")

    def constant(self, node, v):
        if isinstance(v, (bool, np.bool_)):
            return ast.Constant(bool(v))
        if isinstance(v, (int, np.integer)):
            return ast.Constant(int(v))
        v = float(v)
        if v != v:
            return ast.Attribute(ast.Name("math", ast.Load()), "nan", ast.Load())
        if math.isinf(v):
            inf = ast.Attribute(ast.Name("math", ast.Load()), "inf", ast.Load())
            return inf if v > 0 else ast.UnaryOp(ast.USub(), inf)
        return ast.Constant(v)

    def global_value(self, node):
        """A non-local name read as a value: a number, or the math / numpy module."""
        where, v = self.lookup(node)
        if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
            return self.constant(node, v)
        kind = "a module" if isinstance(v, types.ModuleType) else "a function" if callable(v) else f"a {type(v).__name__}"
        self.fail(node, f"the {where} {node.id} is {kind} used as a value; only numbers can "
                        "be read from outside the function (and called functions, math and "
                        "numpy)")

    def callee(self, node):
        """What a call calls: ('rule', name, spelling), ('flat', spelling),
        ('builtin', name) or ('user', _Function)."""
        f = node.func
        if isinstance(f, ast.Name):
            if f.id in self.locals:
                self.fail(node, f"a call of the local variable {f.id}")
            where, v = self.lookup(f)
            if where == "builtin" and f.id in _BUILTINS and v is getattr(builtins, f.id):
                return ("builtin", f.id)
            return self.function_value(node, f.id, v)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                and f.value.id not in self.locals:
            _, mod = self.lookup(f.value)
            if mod is math or mod is np:
                return self.module_function(node, mod, f.attr)
        self.fail(node, f"a call of {ast.unparse(f)}, which is not a math or numpy function "
                        "or a Python function tapegrad can read")

    def module_function(self, node, mod, attr):
        spell = ("math." if mod is math else "np.") + attr
        table, flat = (_MATH, _FLAT_MATH) if mod is math else (_NUMPY, _FLAT_NUMPY)
        if attr in table and hasattr(mod, attr):
            return ("rule", table[attr], spell)
        if attr in flat and hasattr(mod, attr):
            return ("flat", spell)
        self.fail(node, f"{spell} has no derivative rule in tapegrad")

    def function_value(self, node, name, v):
        for mod, attr in _known_functions():
            if getattr(mod, attr) is v:
                return self.module_function(node, mod, attr)
        py = getattr(v, "py_func", v) if _is_dispatcher(v) else v
        if isinstance(py, types.FunctionType):
            return ("user", self.d.function(py, v, self.stack + [self], node))
        self.fail(node, f"a call of {name} ({type(v).__name__}), which is not a math or "
                        "numpy function or a Python function tapegrad can read")

    # expressions
    def expr(self, e):
        out = self._expr(e)
        if getattr(out, "lineno", None) is None and getattr(e, "lineno", None) is not None:
            ast.copy_location(out, e)   # errors found later still name the line
        return out

    def _expr(self, e):
        t = type(e)
        if t is ast.Constant:
            if isinstance(e.value, (bool, int, float)):
                return self.constant(e, e.value)
            if isinstance(e.value, str):
                return e
            self.fail(e, f"the constant {e.value!r} is not a real number")
        if t is ast.Name:
            if e.id in self.locals:
                return ast.Name(e.id, ast.Load())
            return self.global_value(e)
        if t is ast.Attribute:
            if isinstance(e.value, ast.Name) and e.value.id not in self.locals:
                _, mod = self.lookup(e.value)
                if (mod is math or mod is np) and e.attr in _MATH_CONSTANTS:
                    return self.constant(e, getattr(mod, e.attr))
            self.fail(e, f"attribute access {ast.unparse(e)} (only math and numpy constants "
                         "and functions are read)")
        if t is ast.BinOp:
            if type(e.op) not in _BINOPS:
                self.fail(e, f"the operator {type(e.op).__name__} is not supported")
            return ast.BinOp(self.expr(e.left), e.op, self.expr(e.right))
        if t is ast.UnaryOp:
            v = self.expr(e.operand)
            if isinstance(e.op, ast.USub) and isinstance(v, ast.Constant) \
                    and not isinstance(v.value, bool):
                return ast.Constant(-v.value)
            return ast.UnaryOp(e.op, v)
        if t is ast.BoolOp:
            return ast.BoolOp(e.op, [self.expr(v) for v in e.values])
        if t is ast.Compare:
            return ast.Compare(self.expr(e.left), e.ops, [self.expr(v) for v in e.comparators])
        if t is ast.IfExp:
            return ast.IfExp(self.expr(e.test), self.expr(e.body), self.expr(e.orelse))
        if t is ast.Tuple:
            return ast.Tuple([self.expr(v) for v in e.elts], ast.Load())
        if t is ast.Call:
            if e.keywords or any(isinstance(a, ast.Starred) for a in e.args):
                self.fail(e, "keyword and starred arguments are not supported")
            kind = self.callee(e)
            args = [self.expr(a) for a in e.args]
            n = len(args)
            if kind[0] == "builtin":
                name = kind[1]
                ok = {"abs": n == 1, "float": n == 1, "pow": n == 2, "int": n == 1,
                      "bool": n == 1, "round": n in (1, 2), "min": n >= 2, "max": n >= 2}[name]
                if not ok:
                    self.fail(e, f"{name}() with {n} arguments is not supported")
                func = ast.Name(name, ast.Load())
            elif kind[0] in ("rule", "flat"):
                rule = kind[1] if kind[0] == "rule" else None
                want = (2,) if rule in _TWO else (1,)
                if kind[0] == "rule" and n not in want:
                    self.fail(e, f"{kind[2]}() with {n} arguments")
                mod, attr = kind[-1].split(".")
                func = ast.Attribute(ast.Name(mod, ast.Load()), attr, ast.Load())
            else:
                callee = kind[1]
                if n != len(callee.params):
                    self.fail(e, f"{callee.name}() takes {len(callee.params)} arguments, "
                                 f"called with {n}")
                func = ast.Name(callee.ref, ast.Load())
            call = ast.Call(func, args, [])
            call.kind = kind
            return call
        self.fail(e, f"{_describe(e)} is not supported")


# -- activity ----------------------------------------------------------------------------

class _Activity:
    """Which locals of a function carry tangents, given which parameters do."""

    def __init__(self, fn, mask):
        self.fn = fn
        self.active = {p for p, m in zip(fn.params, mask) if m}
        changed = True
        while changed:
            changed = False
            for names, value, _ in fn.assignments:
                if self.of(value):
                    for n in names:
                        if n not in self.active:
                            self.active.add(n)
                            changed = True
        self.returns = any(self.of(r) for r in fn.returns)

    def of(self, e):
        t = type(e)
        if t is ast.Name:
            return e.id in self.active
        if t is ast.BinOp:
            return not isinstance(e.op, ast.FloorDiv) and (self.of(e.left) or self.of(e.right))
        if t is ast.UnaryOp:
            return isinstance(e.op, (ast.USub, ast.UAdd)) and self.of(e.operand)
        if t is ast.BoolOp:
            return any(self.of(v) for v in e.values)
        if t is ast.IfExp:
            return self.of(e.body) or self.of(e.orelse)
        if t is ast.Call:
            kind = e.kind
            if kind[0] == "flat" or (kind[0] == "builtin" and _BUILTINS[kind[1]] is None):
                return False
            mask = tuple(self.of(a) for a in e.args)
            if kind[0] == "user":
                return any(mask) and kind[1].activity(mask).returns
            return any(mask)
        return False   # constants, comparisons


# -- generating code ---------------------------------------------------------------------

class _Val:
    __slots__ = ("p", "tans", "const")

    def __init__(self, p, tans=None, const=None):
        self.p, self.tans, self.const = p, tans or {}, const


class _Emit:
    """Writes one generated function: the user's statements with the
    tangent statements of each differentiated step after it."""

    def __init__(self, fn, mask, order, n):
        self.fn, self.order, self.n = fn, order, n
        self.first, self.second = _comps(n, order)
        self.comps = self.first + self.second
        self.act = fn.activity(mask)
        self.lines = []
        self.ind = 1
        self.k = 0

    def line(self, s):
        self.lines.append("    " * self.ind + s)

    def temp(self):
        self.k += 1
        return f"_tg_{self.k}"

    def active(self, e):
        return self.act.of(e)

    # values
    def value(self, e):
        """Emit what computes ``e``; return its value and tangents."""
        if not self.active(e):
            if isinstance(e, ast.Constant):
                return _Val(repr(e.value), const=e.value)
            if isinstance(e, ast.Name) or (isinstance(e, ast.Attribute)
                                            and isinstance(e.value, ast.Name)):
                return _Val(ast.unparse(e))
            t = self.temp()
            self.line(f"{t} = {ast.unparse(e)}")
            return _Val(t)
        t = type(e)
        if t is ast.Name:
            return _Val(e.id, {c: _tan(e.id, c) for c in self.comps})
        if t is ast.BinOp:
            u, w = self.value(e.left), self.value(e.right)
            sym, rule = _BINOPS[type(e.op)]
            z = self.temp()
            self.line(f"{z} = {_atom(u.p)} {sym} {_atom(w.p)}")
            return self.binary(rule, z, u, w)
        if t is ast.UnaryOp:
            u = self.value(e.operand)
            if isinstance(e.op, ast.UAdd):
                return u
            z = self.temp()
            self.line(f"{z} = -{_atom(u.p)}")
            return self.chain(z, [u], UNARY["neg"][:1], {})
        if t is ast.IfExp:
            z = self.temp()
            self.line(f"if {ast.unparse(e.test)}:")
            for branch in (e.body, e.orelse):
                self.ind += 1
                v = self.value(branch)
                self.line(f"{z} = {v.p}")
                for c in self.comps:
                    self.line(f"{_tan(z, c)} = {v.tans.get(c) or '0.0'}")
                self.ind -= 1
                if branch is e.body:
                    self.line("else:")
            return _Val(z, {c: _tan(z, c) for c in self.comps})
        if t is ast.Call:
            return self.call(e)
        if t is ast.BoolOp:
            self.fn.fail(e, "`and`/`or` on differentiated values (write it with if/else)")
        self.fn.fail(e, f"{_describe(e)} is not supported")

    def call(self, e):
        kind = e.kind
        if kind[0] == "user":
            return self.user_call(e, kind[1])
        vals = [self.value(a) for a in e.args]
        func = ast.unparse(e.func)
        rule = kind[1]
        if rule == "float":       # float(v), np.float64(v)
            return vals[0]
        if rule in ("min", "max"):
            acc = vals[0]
            for w in vals[1:]:
                z = self.temp()
                self.line(f"{z} = {func}({acc.p}, {w.p})")   # max, or np.maximum
                acc = self.binary(rule, z, acc, w)
            return acc
        z = self.temp()
        self.line(f"{z} = {func}({', '.join(v.p for v in vals)})")
        if len(vals) == 1:
            d1, d2 = UNARY[rule]
            return self.chain(z, vals, [d1], {(0, 0): d2} if d2 else {})
        return self.binary(rule, z, *vals)

    def binary(self, rule, z, u, w):
        if rule is None:          # //: piecewise constant
            return _Val(z)
        if rule == "pow" and w.const is not None and not isinstance(w.const, bool):
            k = w.const           # x ** c, the common case: no log, no pow per derivative
            if k == 0:
                d1 = d2 = None
            elif k == 1:
                d1, d2 = "1.0", None
            elif k == 2:
                d1, d2 = "(2.0 * {u})", "2.0"
            elif k == 3:
                d1, d2 = "(3.0 * ({u} * {u}))", "(6.0 * {u})"
            else:
                d1 = f"({float(k)!r} * {{u}} ** {k - 1!r})"
                d2 = f"({float(k * (k - 1))!r} * {{u}} ** {k - 2!r})"
            return self.chain(z, [u, w], [d1, None], {(0, 0): d2} if d2 else {})
        du, dw, duu, duw, dww = BINARY[rule]
        second = {key: f for key, f in (((0, 0), duu), ((0, 1), duw), ((1, 1), dww)) if f}
        return self.chain(z, [u, w], [du, dw], second)

    def chain(self, z, args, first, second):
        """The tangents of the step ``z = phi(*args)`` from its partials."""
        names = {"z": z, "u": _atom(args[0].p), "w": _atom(args[1].p) if len(args) > 1 else ""}
        made = {}

        def factor(tpl):
            if tpl not in made:
                s = tpl.format(**names)
                if s.isidentifier() or _number(s):
                    made[tpl] = s
                else:
                    f = self.temp()
                    self.line(f"{f} = {s}")
                    made[tpl] = f
            return made[tpl]

        def times(f, *ts):
            f = factor(f)
            prod = " * ".join(ts)
            if f == "1.0":
                return prod
            if f == "-1.0":
                return f"-{prod}" if len(ts) == 1 else f"-({prod})"
            return f"{f} * {prod}"

        tans = {}
        for c in self.comps:
            terms = []
            for k, a in enumerate(args):
                t = a.tans.get(c)
                if t is not None and first[k] is not None:
                    terms.append(times(first[k], t))
            if len(c) == 2:
                i, j = c
                for (k, m), f in second.items():
                    ak, am = args[k].tans, args[m].tans
                    pairs = [(ak.get((i,)), am.get((j,)))]
                    if k != m:
                        pairs.append((am.get((i,)), ak.get((j,))))
                    pairs = [f"{p} * {q}" for p, q in pairs if p is not None and q is not None]
                    if pairs:
                        terms.append(times(f, f"({' + '.join(pairs)})" if len(pairs) > 1
                                           else pairs[0]))
            if terms:
                tans[c] = _tan(z, c)
                self.line(f"{tans[c]} = {' + '.join(terms)}")
        return _Val(z, tans)

    def user_call(self, e, callee):
        mask = tuple(self.active(a) for a in e.args)
        vals = [self.value(a) for a in e.args]
        name = self.fn.d.tangent(callee, mask, self.order)
        args = []
        for v, m in zip(vals, mask):
            args.append(v.p)
            if m:
                args += [v.tans.get(c) or "0.0" for c in self.comps]
        z = self.temp()
        outs = [z] + [_tan(z, c) for c in self.comps]
        self.line(f"{', '.join(outs)} = {name}({', '.join(args)})")
        return _Val(z, {c: _tan(z, c) for c in self.comps})

    # statements
    def assign(self, name, v):
        self.line(f"{name} = {v.p}")
        if name in self.act.active:
            for c in self.comps:
                self.line(f"{_tan(name, c)} = {v.tans.get(c) or '0.0'}")

    def block(self, body):
        start = len(self.lines)
        for s in body:
            self.stmt(s)
        if len(self.lines) == start:
            self.line("pass")

    def nested(self, head, body, orelse=()):
        self.line(head)
        self.ind += 1
        self.block(body)
        self.ind -= 1
        if orelse:
            self.line("else:")
            self.ind += 1
            self.block(orelse)
            self.ind -= 1

    def stmt(self, s):
        t = type(s)
        self.fn.d.primals_in(s)
        if t is ast.Assign:
            target = s.targets[0]
            if isinstance(target, ast.Tuple):
                vals = []
                for v in s.value.elts:     # all values first: a, b = b, a + b
                    v = self.value(v)
                    tmp = self.temp()
                    self.line(f"{tmp} = {v.p}")
                    tans = {}
                    for c, tv in v.tans.items():
                        tans[c] = _tan(tmp, c)
                        self.line(f"{tans[c]} = {tv}")
                    vals.append(_Val(tmp, tans))
                for nm, v in zip(target.elts, vals):
                    self.assign(nm.id, v)
                return
            v = self.value(s.value)
            for target in s.targets:
                self.assign(target.id, v)
        elif t is ast.If:
            self.nested(f"if {ast.unparse(s.test)}:", s.body, s.orelse)
        elif t is ast.While:
            self.nested(f"while {ast.unparse(s.test)}:", s.body, s.orelse)
        elif t is ast.For:
            self.line(f"for {s.target.id} in {ast.unparse(s.iter)}:")
            self.ind += 1
            if s.target.id in self.act.active:
                for c in self.comps:
                    self.line(f"{_tan(s.target.id, c)} = 0.0")
            self.block(s.body)
            self.ind -= 1
            if s.orelse:
                self.line("else:")
                self.ind += 1
                self.block(s.orelse)
                self.ind -= 1
        elif t is ast.Return:
            self.ret(self.value(s.value))
        else:   # break, continue, pass, assert, raise
            self.line(ast.unparse(s))

    def ret(self, v):
        raise NotImplementedError


class _Top(_Emit):
    """The derivative functions custom.py takes: ``(x, y) -> dy/dx`` and
    ``(x, y) -> d2y/dx2``, or ``(a, b, y) -> (dy/da, dy/db)`` and
    ``(a, b, y) -> (d2y/da2, d2y/dadb, d2y/db2)``."""

    def __init__(self, fn, order):
        n = len(fn.params)
        super().__init__(fn, (True,) * n, order, n)
        for k, p in enumerate(fn.params):
            for c in self.comps:
                self.line(f"{_tan(p, c)} = {1.0 if c == (k,) else 0.0!r}")
        self.block(fn.body)

    def ret(self, v):
        out = [v.tans.get(c) or "0.0" for c in (self.first if self.order == 1 else self.second)]
        self.line(f"return {out[0]}" if len(out) == 1 else f"return ({', '.join(out)})")


class _Tangent(_Emit):
    """A called function as one returning its value and tangents, the
    tangents of its differentiated parameters passed after each."""

    def __init__(self, fn, mask, order, n):
        super().__init__(fn, mask, order, n)
        for p, m in zip(fn.params, mask):
            if not m and p in self.act.active:   # passed a constant, assigned a variable later
                for c in self.comps:
                    self.line(f"{_tan(p, c)} = 0.0")
        self.block(fn.body)

    def ret(self, v):
        out = [f"float({v.p})"] + [v.tans.get(c) or "0.0" for c in self.comps]
        self.line(f"return ({', '.join(out)})")


def _is_number(v):
    return isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))


def _number(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


# -- one derivation ----------------------------------------------------------------------

class _Derivation:
    """The generated functions of one op, in one namespace, and the Numba
    dispatchers the namespace gets once they compile (:func:`ready`)."""

    count = 0
    count_lock = threading.Lock()

    def __init__(self):
        from ..kernels import special
        # callable from Python as they are; ready() puts their dispatchers here
        self.ns = {"math": math, "np": np, "__builtins__": builtins,
                   "_tg_digamma": special.digamma, "_tg_trigamma": special.trigamma}
        self.functions = {}   # id(py function) -> _Function
        self.jit = {}         # namespace name -> function to compile with Numba
        self.tangents = {}    # (id, mask, order) -> name
        self.special = False
        self.n = 1
        self.done = False
        self.jitted = False
        self.reads = []       # (globals dict or closure cell, name or None, value read)
        self.forward = None
        self.use = ()         # the functions ready() hands out
        self.lock = threading.RLock()

    def function(self, py, value, stack, node):
        if any(f.fn is py for f in stack):
            stack[-1].fail(node, f"a recursive call of {py.__name__}")
        got = self.functions.get(id(py))
        if got is None:
            got = _Function(self, py, stack)
            got.ref = f"_tg_p{len(self.functions)}"
            got.value = value
            self.functions[id(py)] = got
        return got

    def primal(self, fn):
        """The user function itself, callable from the generated code."""
        if fn.ref not in self.ns:
            self.ns[fn.ref] = fn.value
            if not _is_dispatcher(fn.value):
                self.jit[fn.ref] = fn.value

    def primals_in(self, s):
        # calls inside tests and bounds, which stay as the user wrote them
        for sub in ast.walk(s):
            if isinstance(sub, ast.Call) and getattr(sub, "kind", ("",))[0] == "user":
                self.primal(sub.kind[1])

    def tangent(self, fn, mask, order):
        key = (id(fn.fn), mask, order)
        name = self.tangents.get(key)
        if name is None:
            name = self.tangents[key] = f"_tg_t{len(self.tangents)}"
            n = self.n
            em = _Tangent(fn, mask, order, n)
            params = []
            for p, m in zip(fn.params, mask):
                params.append(p)
                if m:
                    params += [_tan(p, c) for c in em.comps]
            self.jit[name] = self.define(name, params, em.lines, fn)
        return name

    def define(self, name, params, lines, fn, qual=None):
        src = f"def {name}({', '.join(params)}):\n" + "\n".join(lines) + "\n"
        if "_tg_digamma(" in src or "_tg_trigamma(" in src:
            self.special = True
        with _Derivation.count_lock:
            _Derivation.count += 1
            filename = f"<tapegrad derived {_Derivation.count}: {qual or name} of {fn.name}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), self.ns)
        out = self.ns.pop(name) if qual else self.ns[name]
        out.__qualname__ = out.__name__ = qual or name
        return out

    def stale(self):
        """Whether a global or closure variable read when the derivative was
        derived has changed since (a number to another value, a function or
        module to another object)."""
        missing = object()
        for where, name, old in self.reads:
            if name is None:
                try:
                    now = where.cell_contents
                except ValueError:
                    return True
            else:
                now = where.get(name, missing)
            if now is old:
                continue
            if not (_is_number(now) and _is_number(old) and type(now) is type(old)
                    and (now == old or (now != now and old != old))):
                return True
        return False

    def ready(self, role):
        """The derived function ``role`` (0: derivative, 1: second
        derivative), its callees Numba dispatchers.  The first call (when the
        op compiles, right after Numba compiled the forward, freezing the
        globals it reads) derives again if a global or closure variable the
        derivation read has changed since ``tg.elementwise`` ran, so that the
        derivatives read the values the compiled forward does."""
        with self.lock:
            if not self.done:
                if self.stale():
                    fresh = derive(self.forward)
                    fresh[0]._tg_derivation._jit()
                    self.use = fresh
                else:
                    self._jit()
                self.done = True
            return self.use[role]

    def _jit(self):
        with self.lock:
            if self.jitted:
                return
            import numba
            if self.special:
                from ..kernels import _jit, special
                _jit.materialize()
                for nm in ("digamma", "trigamma"):
                    d = getattr(special, nm)
                    self.ns["_tg_" + nm] = getattr(d, "dispatcher", None) or d
            for name, f in self.jit.items():
                self.ns[name] = numba.njit(error_model="numpy")(f)
            self.jitted = True


def derive(forward):
    """The derivative and second derivative of the scalar function
    ``forward`` (one or two parameters), as Python functions in the shapes
    ``tg.elementwise`` takes from a user.  Raises :class:`DeriveError` when
    something in ``forward`` (or a function it calls) cannot be
    differentiated.  ``inspect.getsource`` shows the generated code."""
    py = getattr(forward, "py_func", forward) if _is_dispatcher(forward) else forward
    if not isinstance(py, types.FunctionType):
        raise DeriveError(
            f"tapegrad.elementwise cannot derive the derivative of {forward!r}: only Python "
            "functions (def or lambda) are read; wrap it (lambda x: ...) or pass derivative=")
    d = _Derivation()
    fn = d.function(py, forward, [], None)
    d.n = n = len(fn.params)
    y = "_tg_y"
    d.forward = forward
    out = []
    for order, what in ((1, "derivative"), (2, "second_derivative")):
        em = _Top(fn, order)
        g = d.define(f"_tg_{what}", fn.params + [y], em.lines, fn,
                     qual=f"{fn.fn.__name__}_{what}")
        g.__doc__ = f"The {what.replace('_', ' ')} of {fn.name}, derived by tapegrad."
        g._tg_derivation = d
        g._tg_role = order - 1
        out.append(g)
    d.use = tuple(out)
    return d.use


def ready(fn):
    """``fn``, or when it is a derived derivative the function to compile
    for it: its callees made Numba dispatchers (Numba is loaded only now,
    when the op first compiles), derived again if a global or closure
    variable it read has changed since (:meth:`_Derivation.ready`)."""
    d = getattr(fn, "_tg_derivation", None)
    if d is None:
        return fn
    return d.ready(fn._tg_role)
