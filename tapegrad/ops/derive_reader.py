"""Reading a user function for ``ops/derive.py``: its definition found in its
file and parsed, every name resolved and every construct checked
(``_Function``; what it cannot differentiate raises :class:`DeriveError`
naming the file and line), and which locals carry tangents
(``_Activity``).
"""
import ast
import builtins
import linecache
import math
import threading
import types

import numpy as np

from .derive_tables import (_BINOPS, _BUILTINS, _FLAT_MATH, _FLAT_NUMPY, _MATH,
                            _MATH_CONSTANTS, _NUMPY, _RESERVED, _TWO, _describe,
                            _is_dispatcher)


class DeriveError(TypeError):
    """``tg.elementwise(f)`` cannot derive ``f``'s derivative."""


def _fail(fn_name, where, what):
    raise DeriveError(
        f"tapegrad.elementwise cannot derive the derivative of {fn_name}: {where}: {what}. "
        "Write the derivative by hand and pass it as derivative= (and second_derivative= "
        "for tg.hessian / tg.hvp)")

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


#: the file name of every function ops/derive.py generates
GENERATED = "<tapegrad derived"
#: the name the op's forward is called by in a derivative read as a function of x alone
_FORWARD = "_tg_forward"


def _renamed(node):
    """A copy of a generated function's tree with its ``_tg_`` locals renamed
    (a prefix its text does not use): derived again, its locals are the
    user's, and the names the new code generates start with ``_tg_``."""
    import copy
    node = copy.deepcopy(node)
    names = {a.arg for a in node.args.posonlyargs + node.args.args}
    names |= {n.id for n in ast.walk(node)
              if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    every = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | names
    k = 1
    while any(v.startswith(f"_tgr{k}_") for v in every):
        k += 1
    new = {v: f"_tgr{k}_" + v[4:] for v in names if v.startswith("_tg_")}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in new:
            n.id = new[n.id]
        elif isinstance(n, ast.arg) and n.arg in new:
            n.arg = new[n.arg]
    return node


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
        if self.file.startswith(GENERATED):
            node = _renamed(node)   # derived code, read to derive a further order
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs:
            self.fail(node, "*args, **kwargs and keyword-only parameters are not supported")
        self.params = [p.arg for p in a.posonlyargs + a.args]
        body = [ast.Return(value=node.body, lineno=node.lineno)] \
            if isinstance(node, ast.Lambda) else node.body
        self.free = dict(zip(code.co_freevars, fn.__closure__ or ()))
        # the function derived (not a callee): a derivative of a further order
        # reads a derivative function, whose y is the op's value and which may
        # return a tuple (one entry of it is differentiated)
        top = getattr(derivation, "top", None) if not stack else None
        self.pick = None
        if top is not None:
            body = self.bind(node, body, *top)
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

    def bind(self, node, body, nin, forward, pick):
        """A derivative function ``d(x.., y)`` read as the function of x alone
        ``x.. -> d(x.., forward(x..))[pick]``: its parameter y becomes the
        local ``y = forward(x..)`` where it is read (and is dropped where it
        is not: a derived derivative never reads it)."""
        self.pick = pick
        if len(self.params) == nin:
            return body
        if len(self.params) != nin + 1:
            self.fail(node, f"{len(self.params)} parameters where a derivative of a "
                            f"{nin}-input op takes {nin} or {nin + 1}")
        y = self.params.pop()
        if not any(isinstance(n, ast.Name) and n.id == y and isinstance(n.ctx, ast.Load)
                   for s in body for n in ast.walk(s)):
            return body
        if forward is None:
            self.fail(node, f"it reads {y}, the op's value, and no forward was given")
        self.free[_FORWARD] = types.CellType(forward)
        call = ast.Call(ast.Name(_FORWARD, ast.Load()),
                        [ast.Name(p, ast.Load()) for p in self.params], [])
        ln = node.lineno
        put = ast.Assign(targets=[ast.Name(y, ast.Store())], value=call, lineno=ln)
        for n in ast.walk(put):
            n.lineno = ln
        return [put] + list(body)

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
            raw = s.value
            if self.pick is not None:   # one entry of a derivative's tuple
                if not isinstance(raw, ast.Tuple) or len(raw.elts) <= self.pick:
                    self.fail(s, f"a return that is not a tuple of at least {self.pick + 1} "
                                 "values (a binary op's derivatives return tuples)")
                raw = raw.elts[self.pick]
            value = self.expr(raw)
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

