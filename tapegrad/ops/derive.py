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
from one row of the rule tables (``derive_tables.py``) (its first and second partials) by
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

Here: one derivation (``_Derivation``: the generated functions' namespace
and their Numba dispatchers), :func:`derive` and :func:`ready`.  Reading
and checking the user's functions is ``derive_reader.py``, the rule tables
``derive_tables.py``, writing the generated code ``derive_codegen.py``.
"""
import ast
import builtins
import linecache
import math
import threading
import types

import numpy as np

from .derive_codegen import _is_number, _Tangent, _Top
from .derive_reader import DeriveError, _Function
from .derive_tables import _is_dispatcher, _tan


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
        self.top = None       # (nin, value_of, pick): see derive()
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
                    fresh = derive(self.forward, *(self.top or ()))
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


def derive(forward, nin=None, value_of=None, pick=None):
    """The derivative and second derivative of the scalar function
    ``forward`` (one or two parameters), as Python functions in the shapes
    ``tg.elementwise`` takes from a user.  Raises :class:`DeriveError` when
    something in ``forward`` (or a function it calls) cannot be
    differentiated.  ``inspect.getsource`` shows the generated code.

    With ``nin``, ``forward`` is a derivative function of an ``nin``-input
    op -- a user's or a derived one, ``d(x.., y)`` or ``d(x..)`` -- and what
    is differentiated is ``x.. -> d(x.., value_of(x..))[pick]``: the
    derivative of a further order (``pick``: the entry of a tuple a binary
    op's derivatives return; None for a scalar)."""
    py = getattr(forward, "py_func", forward) if _is_dispatcher(forward) else forward
    if not isinstance(py, types.FunctionType):
        raise DeriveError(
            f"tapegrad.elementwise cannot derive the derivative of {forward!r}: only Python "
            "functions (def or lambda) are read; wrap it (lambda x: ...) or pass derivative=")
    d = _Derivation()
    if nin is not None:
        d.top = (nin, value_of, pick)   # read by derive_reader._Function.bind
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
