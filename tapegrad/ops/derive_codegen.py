"""Writing the generated functions of ``ops/derive.py``: the user's
statements, kept as written, each differentiated step followed by its
tangent statements (first order, and the Hessian entries for the second
derivative) from the rows of ``derive_tables.py`` by the chain rule.
"""
import ast

import numpy as np

from .derive_tables import BINARY, UNARY, _BINOPS, _atom, _comps, _describe, _tan


# -- generating code ---------------------------------------------------------------------

class _Val:
    __slots__ = ("p", "tans", "const")

    def __init__(self, p, tans=None, const=None):
        self.p, self.tans, self.const = p, tans or {}, const


class _Emit:
    """Writes one generated function: the user's statements with the
    tangent statements of each differentiated step after it.

    Tangents that are zero by the code's structure are left out, not
    multiplied in: a local that no assignment connects to input ``i`` has no
    tangent in ``i`` (``deps``), and a parameter of the top function that is
    never assigned has the tangent 1 in its own input and none in the other
    (``fixed``).  So a step's partial in an operand that does not depend on
    an input never enters that input's derivative -- as in the reverse
    sweep of the built-in ops, where each operand's partial reaches that
    operand's gradient only: at ``a ** b`` with ``a < 0`` the partial in
    ``b`` (``z log a``) is NaN and ``b``'s gradient with it, while ``a``'s
    is ``b a ** (b - 1)``, not ``NaN * 0``."""

    def __init__(self, fn, mask, order, n):
        self.fn, self.order, self.n = fn, order, n
        self.first, self.second = _comps(n, order)
        self.comps = self.first + self.second
        self.act = fn.activity(tuple(bool(m) for m in mask))
        # the inputs each parameter's tangents come from: every one (True) or a set
        sets = [frozenset(range(n)) if m is True else frozenset(m or ()) for m in mask]
        self.deps = [fn.activity(tuple(i in s for s in sets)).active for i in range(n)]
        self.fixed = {}
        self.lines = []
        self.ind = 1
        self.k = 0

    def inputs_of(self, name):
        """The inputs local ``name`` may depend on."""
        return {i for i in range(self.n) if name in self.deps[i]}

    def tans_over(self, var, inputs):
        """``var``'s tangent names in the components of ``inputs`` alone."""
        return {c: _tan(var, c) for c in self.comps if set(c) <= inputs}

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
            if e.id in self.fixed:
                return _Val(e.id, dict(self.fixed[e.id]))
            return _Val(e.id, self.tans_over(e.id, self.inputs_of(e.id)))
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
            seen = set()
            for branch in (e.body, e.orelse):
                self.ind += 1
                v = self.value(branch)
                self.line(f"{z} = {v.p}")
                for c in self.comps:
                    self.line(f"{_tan(z, c)} = {v.tans.get(c) or '0.0'}")
                seen.update(v.tans)
                self.ind -= 1
                if branch is e.body:
                    self.line("else:")
            return _Val(z, {c: _tan(z, c) for c in self.comps if c in seen})
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
            ts = [t for t in ts if t != "1.0"] or ["1.0"]
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
        vals = [self.value(a) for a in e.args]
        # per argument, the inputs its tangents come from (an empty set: none)
        mask = tuple(frozenset(i for c in v.tans for i in c) if self.active(a) else False
                     for a, v in zip(e.args, vals))
        name = self.fn.d.tangent(callee, mask, self.order)
        args = []
        for v, m in zip(vals, mask):
            args.append(v.p)
            if m:
                args += [v.tans.get(c) or "0.0" for c in self.comps]
        z = self.temp()
        outs = [z] + [_tan(z, c) for c in self.comps]
        self.line(f"{', '.join(outs)} = {name}({', '.join(args)})")
        return _Val(z, self.tans_over(z, set().union(*[m for m in mask if m])))

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
        super().__init__(fn, tuple(frozenset({k}) for k in range(n)), order, n)
        assigned = {nm for names, _, _ in fn.assignments for nm in names}
        assigned |= {s.target.id for s in ast.walk(ast.Module(fn.body, []))
                     if isinstance(s, ast.For)}
        for k, p in enumerate(fn.params):
            for c in self.comps:
                self.line(f"{_tan(p, c)} = {1.0 if c == (k,) else 0.0!r}")
            if p not in assigned:   # x itself: dx/dx = 1, nothing else
                self.fixed[p] = {(k,): "1.0"}
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

