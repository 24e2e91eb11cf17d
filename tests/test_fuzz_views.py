"""Differential fuzzing of views and writes against NumPy.

A seeded generator writes a random straight-line NumPy function ``f(x)``
(its source is the program: it prints, and runs unchanged on ndarrays and
on tensors) over an input of a random shape -- 0-d, 1-d to 3-d, small (at
most 16 elements, tapegrad's small path) and large (17 to 48) -- made of:

* views, nested up to 3 deep: basic indexing (ints, slices with negative
  steps, ``None``, ``...``), ``reshape`` and ``ravel`` (views where NumPy
  needs no copy, copies otherwise), ``.T``, ``transpose``, ``swapaxes``,
  ``moveaxis``, ``rollaxis``, ``squeeze``, ``expand_dims``, ``diagonal``
  and ``broadcast_to`` (read-only), ``flip`` / ``flipud`` / ``fliplr``, the
  pieces of ``split`` / ``array_split`` / ``hsplit`` / ``vsplit``, and
  copies beside them (``flatten``, a full integer index: NumPy's scalar, and
  every "view" of a NumPy scalar -- an item, or ``x * 1.0`` of a 0-d ``x`` --
  which is a new array in NumPy);
* writes into any writable variable: item and slice assignment, ``+=``,
  ``-=``, ``*=``, ``/=``, ``**= 2`` (whole or through a basic index) and
  ``np.copyto``, of constants, of values computed from ``x``, and of values
  read from the program's variables (aliased ones included: NumPy copies an
  overlapping operand first); a write into a read-only view appears inside
  ``try``/``except ValueError`` and must raise "read-only" in every run;
* reads in the middle (``acc = acc + np.sum(np.cos(v) * c)``), and a final
  loss ``acc + sum_i np.sum(np.sin(v_i) * w_i) + sum_bases np.sum(w * a ** 2)``
  over every variable, so that every view's final value reaches the loss
  with a nonzero gradient.

The generator runs each candidate line with NumPy as it goes and keeps it
only when it is valid NumPy and the values stay finite and bounded, so every
program is valid NumPy by construction; NumPy decides which results are
views (``np.shares_memory``), so copies stay copies.

Each program then runs on NumPy ndarrays (the value oracle), on tapegrad
tensors without grad, under ``tg.value_and_grad`` (value against NumPy's to
1e-12 relative, gradient against float64 central differences of the NumPy
function to 1e-6 relative and 1e-7 of the loss's scale) and, for every
fourth seed, traced (``tg.trace`` at ``x``, then ``value_and_grad`` at a
second input, against NumPy and central differences there); last, for odd
seeds, statement by statement on tensors (requires_grad for seeds 3 mod 4),
every variable read with ``.numpy()`` and compared with NumPy's after each
statement: reading a value must change nothing (``first_divergence``).  The
differences use the 5-point stencil with step 1e-4: on seeds 0..3999 their
largest error against complex-step derivatives (every program is analytic)
was under 0.1% of the tolerance.  A steep loss (``sin`` of a high power of
``x``) can still put them off by more than the tolerance (1 program in
about 18,000 in a long run): where they disagree with tapegrad they are
taken again at half the step, and their change is added to the tolerance.

Runs: ``test_fixed_seeds`` checks ``SEEDS`` (480) programs in 8 chunks in the
normal run (the file takes about 20 s on the shared 2-core machine at load
average 3.7); ``TAPEGRAD_FUZZ=long`` (as for ``tests/test_fuzz.py``; ``TAPEGRAD_LONG_FUZZ=1``
too) adds ``test_long_run``, which fuzzes for ``TAPEGRAD_FUZZ_SECONDS``
(default 600) from seed ``TAPEGRAD_FUZZ_START`` (default 1,000,000), does
not stop at failures, and prints one summary line (programs, passed, failed
by cause, seeds, time) for ``docs/reliability.md``.  A failure prints the
seeds, and for the first few the program's source and the first statement
after which a variable differs from NumPy's (``first_divergence``, with and
without grad); ``python tests/test_fuzz_views.py SEED`` prints that program
and checks it again, ``... SEED --min`` first drops every statement the
failure does not need (``minimize``).
"""
import collections
import linecache
import os
import sys
import time
import warnings

import numpy as np
import pytest

import tapegrad as tg

from oracle import central_differences, in_fresh_thread, numpy_value

LONG = (os.environ.get("TAPEGRAD_FUZZ") == "long"
        or os.environ.get("TAPEGRAD_LONG_FUZZ", "") not in ("", "0"))
SEEDS = range(480)
CHUNKS = 8
TRACE_EVERY = 4             # seeds divisible by this are traced too

EPS = 1e-4                  # step of the 5-point central difference (error O(EPS**4))
VALUE_RTOL = 1e-12
GRAD_RTOL, GRAD_ATOL = 1e-6, 1e-7
BOUND = 50.0                # every variable stays below this in magnitude
MAX_DEPTH = 3               # views of views of views

SMALL_SHAPES = [(), (1,), (5,), (6,), (2, 3), (3, 2), (4, 4), (1, 4), (2, 1, 3), (2, 2, 2),
                (3, 1), (2, 2, 3)]
LARGE_SHAPES = [(40,), (48,), (6, 8), (4, 12), (5, 9), (8, 3), (4, 3, 4), (2, 5, 4),
                (3, 1, 16), (2, 4, 6)]

VIEW_OPS = ("index", "reshape", "ravel", "T", "transpose", "swapaxes", "moveaxis",
            "rollaxis", "squeeze", "expand_dims", "diagonal", "broadcast_to", "flip",
            "split", "flatten")
WRITE_KINDS = ("item", "slice", "whole", "+=", "-=", "*=", "/=", "**=", "copyto")
VALUE_KINDS = ("const", "const_array", "input", "input_array", "variable", "alias")


# -- programs -------------------------------------------------------------------------------
_SHOWN = collections.deque()    # the programs whose source tracebacks can show


class Program:
    """A seed, an input array and the statements of the body of ``f(x)``."""

    def __init__(self, seed, x, lines, notes):
        self.seed = seed
        self.x = x
        self.lines = lines
        self.notes = notes          # Counter of what the program does (coverage)

    def source(self):
        body = "\n".join("    " + ln for ln in "\n".join(self.lines).split("\n"))
        return (f"import numpy as np\n\n\ndef f(x):\n{body}\n\n\n"
                f"x = np.array({self.x.tolist()!r})\n")

    def function(self):
        """``f`` compiled from the source (its lines show in tracebacks)."""
        name = f"<views fuzz program, seed {self.seed}>"
        src = self.source()
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        _SHOWN.append(name)
        while len(_SHOWN) > 32:             # long runs: keep the last few only
            linecache.cache.pop(_SHOWN.popleft(), None)
        ns = {"np": np}
        exec(compile(src, name, "exec"), ns)
        return ns["f"]

    def __str__(self):
        return f"# seed {self.seed}\n{self.source()}"


def _run_lines(lines, x):
    """The namespace after running lines on the ndarray x (NumPy's semantics)."""
    ns = {"np": np, "x": x.copy()}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            exec("\n".join(lines), ns)
    return ns


class _Gen:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.notes = collections.Counter()

    # random helpers
    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p):
        return bool(self.rng.random() < p)

    def const(self):
        return self.pick((0.5, -1.5, 2.0, 0.25, -0.75, 1.25, 3.0, -2.5))

    # keys ----------------------------------------------------------------------------------
    def key(self, shape, full_int=False):
        """A basic index of an array of this shape, as source text (or None)."""
        if full_int:
            if not shape or 0 in shape:
                return None
            parts = [str(int(self.rng.integers(-d, d))) for d in shape]
            return ", ".join(parts)
        parts = []
        n = int(self.rng.integers(1, len(shape) + 1)) if shape else 1
        for d in shape[:n]:
            r = self.rng.random()
            if r < 0.25:
                parts.append(str(int(self.rng.integers(-d, d))))
            elif r < 0.35:
                parts.append(":")
            else:
                step = self.pick((1, 1, 2, -1, -2, None))
                lo = int(self.rng.integers(0, d))
                hi = int(self.rng.integers(lo + 1, d + 1))
                if step is not None and step < 0:
                    lo, hi = hi - 1, (lo - 1 if lo > 0 else None)
                a = "" if (lo == 0 and (step is None or step > 0)) else str(lo)
                b = "" if hi is None or (step is not None and step > 0 and hi == d) else str(hi)
                parts.append(f"{a}:{b}" + ("" if step in (None, 1) else f":{step}"))
        if self.chance(0.15):
            parts.insert(int(self.rng.integers(0, len(parts) + 1)), "None")
        if self.chance(0.15) and len(parts) < len(shape) + 1:
            parts.insert(int(self.rng.integers(0, len(parts) + 1)), "...")
        if not shape and not parts:
            return "..."
        if not parts:
            return None
        return ", ".join(parts)

    # view ops ------------------------------------------------------------------------------
    def view_expr(self, name, shape):
        """(op, source of a view of name): an expression, (expression, k) for the k
        pieces of a split, or None where the op drawn does not fit the shape."""
        nd = len(shape)
        op = self.pick(VIEW_OPS)
        if op == "index":
            k = "..." if not shape else self.key(shape)
            return op, f"{name}[{k}]" if k is not None else None
        if op == "reshape":
            size = int(np.prod(shape))
            new = self._factor(size)
            if self.chance(0.3) and new:
                new = new[:-1] + (-1,)
            form = self.pick(("m", "f"))
            t = "(" + ", ".join(map(str, new)) + ("," if len(new) == 1 else "") + ")"
            return op, (f"{name}.reshape{t}" if form == "m" and len(new) else
                        f"np.reshape({name}, {t})")
        if op == "ravel":
            return op, self.pick((f"{name}.ravel()", f"np.ravel({name})", f"{name}.reshape(-1)"))
        if op == "T":
            return op, f"{name}.T"
        if op == "transpose":
            if nd < 2:
                return op, f"np.transpose({name})"
            p = tuple(int(i) for i in self.rng.permutation(nd))
            return op, self.pick((f"{name}.transpose{p}", f"np.transpose({name}, {p})"))
        if op == "swapaxes":
            if nd < 2:
                return op, None
            i, j = (int(v) for v in self.rng.integers(-nd, nd, 2))
            return op, self.pick((f"np.swapaxes({name}, {i}, {j})", f"{name}.swapaxes({i}, {j})"))
        if op == "moveaxis":
            if nd < 2:
                return op, None
            i, j = (int(v) for v in self.rng.integers(-nd, nd, 2))
            return op, f"np.moveaxis({name}, {i}, {j})"
        if op == "rollaxis":
            if nd < 2:
                return op, None
            i = int(self.rng.integers(-nd, nd))
            j = int(self.rng.integers(0, nd + 1))
            return op, f"np.rollaxis({name}, {i}, {j})"
        if op == "squeeze":
            ones = [i for i, d in enumerate(shape) if d == 1]
            if ones and self.chance(0.5):
                return op, self.pick((f"np.squeeze({name}, axis={self.pick(ones)})",
                                      f"{name}.squeeze({self.pick(ones)})"))
            return op, self.pick((f"np.squeeze({name})", f"{name}.squeeze()"))
        if op == "expand_dims":
            if nd >= 4:
                return op, None
            ax = int(self.rng.integers(-(nd + 1), nd + 1))
            return op, f"np.expand_dims({name}, {ax})"
        if op == "diagonal":
            if nd < 2:
                return op, None
            if self.chance(0.5):
                return op, f"{name}.diagonal()"
            a1, a2 = (int(v) for v in self.rng.choice(nd, 2, replace=False))
            off = int(self.rng.integers(-1, 2))
            return op, f"np.diagonal({name}, {off}, {a1}, {a2})"
        if op == "broadcast_to":
            if nd >= 4:
                return op, None
            k = self.pick((2, 3))
            new = (k,) + tuple(shape)
            if shape and 1 in shape and self.chance(0.5):
                new = tuple(3 if d == 1 else d for d in shape)
            return op, f"np.broadcast_to({name}, {new})"
        if op == "flip":
            forms = [f"np.flip({name})"]
            if nd >= 1:
                ax = int(self.rng.integers(-nd, nd))
                forms += [f"np.flip({name}, {ax})", f"np.flipud({name})", f"{name}[::-1]"]
            if nd >= 2:
                forms += [f"np.fliplr({name})"]
            return op, self.pick(forms)
        if op == "split":
            if nd < 1:
                return op, None
            ax = int(self.rng.integers(0, nd))
            d = shape[ax]
            form = self.pick(("split", "array_split", "hsplit", "vsplit"))
            if form == "split":
                ks = [k for k in (2, 3, 4) if d % k == 0 and k <= d]
                if not ks:
                    return op, None
                k = self.pick(ks)
                return op, (f"np.split({name}, {k}, axis={ax})", k)
            if form == "array_split":
                k = self.pick((2, 3))
                return op, (f"np.array_split({name}, {k}, axis={ax})", k)
            hax = 0 if nd == 1 else 1
            if form == "hsplit":
                ks = [k for k in (1, 2, 3) if shape[hax] % k == 0]
                k = self.pick(ks)
                return op, (f"np.hsplit({name}, {k})", k)
            if nd < 2:
                return op, None
            ks = [k for k in (1, 2, 3) if shape[0] % k == 0]
            k = self.pick(ks)
            return op, (f"np.vsplit({name}, {k})", k)
        if op == "flatten":
            return op, f"{name}.flatten()"
        raise AssertionError(op)

    def _factor(self, size):
        """A random shape of 0 to 3 dims with this many elements."""
        if size == 1 and self.chance(0.3):
            return ()
        dims, left = [], size
        for _ in range(int(self.rng.integers(0, 3))):
            divs = [k for k in range(1, left + 1) if left % k == 0]
            k = self.pick(divs)
            dims.append(k)
            left //= k
        dims.append(left)
        if self.chance(0.2) and len(dims) < 3:
            dims.insert(int(self.rng.integers(0, len(dims) + 1)), 1)
        return tuple(int(self.rng.permutation(dims)[i]) for i in range(len(dims)))

    # values --------------------------------------------------------------------------------
    def value(self, shape, state, xsize):
        """Source of a value to write into a region of this shape."""
        n = int(np.prod(shape))
        kind = self.pick(VALUE_KINDS)
        t = "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
        if kind == "const" or (kind == "const_array" and not shape):
            return kind, repr(self.const())
        if kind == "const_array":
            lo = self.const()
            return kind, f"np.linspace({lo}, {lo + 1.0}, {n}).reshape({t})"
        if kind == "input" or (kind == "input_array" and (not shape or n > xsize)):
            i = int(self.rng.integers(0, xsize))
            return "input", self.pick((f"np.sin(x.ravel()[{i}])", f"x.ravel()[{i}] ** 2",
                                       f"np.cos(np.sum(x) * 0.3)"))
        if kind == "input_array":
            start = int(self.rng.integers(0, xsize - n + 1))
            return kind, f"np.cos(x.ravel()[{start}:{start + n}]).reshape({t})"
        names = [nm for nm, v in state.items() if np.ndim(v) <= len(shape) and
                 _broadcasts(np.shape(v), shape)]
        if kind == "alias" and names:
            return kind, self.pick(names)
        if names and self.chance(0.7):
            return "variable", f"np.tanh({self.pick(names)})"
        nm = self.pick(list(state))
        return "variable", f"0.1 * np.sum(np.sin({nm}))"

    def factor_value(self, shape, state, xsize, divide):
        """A multiplier or divisor away from zero."""
        if self.chance(0.5):
            return "const", repr(self.pick((2.0, -4.0, 1.25, 0.5)) if divide else self.const())
        kind, v = self.value(shape, state, xsize)
        if kind in ("const", "const_array"):
            return kind, v
        return kind, f"(1.5 + np.cos({v}))" if divide else f"(1.0 + 0.5 * np.sin({v}))"


def _broadcasts(src, dst):
    try:
        return np.broadcast_shapes(src, dst) == tuple(dst)
    except ValueError:
        return False


def _is_array(v):
    return isinstance(v, np.ndarray)


def _bounded(ns, names):
    for nm in names:
        v = np.asarray(ns[nm])
        if not np.all(np.isfinite(v)) or np.any(np.abs(v) > BOUND):
            return False
    return True


def make_program(seed):
    """The program of this seed (deterministic)."""
    g = _Gen(seed)
    shape = g.pick(SMALL_SHAPES) if g.chance(0.55) else g.pick(LARGE_SHAPES)
    x = np.round(g.rng.uniform(-1.5, 1.5, shape), 4)
    x = np.asarray(x, dtype=np.float64)
    xsize = x.size
    # for a 0-d x, x * 1.0 is a NumPy scalar (a ufunc's 0-d result): its "views" are
    # new arrays and += makes a new scalar; (x * 1.0)[...] is a 0-d array
    zero_d_array = not shape and g.chance(0.6)
    lines = ["acc = 0.0", "a0 = (x * 1.0)[...]" if zero_d_array else "a0 = x * 1.0"]
    names = ["a0"]
    depth = {"a0": 0}
    bases = ["a0"]
    ns = _run_lines(lines, x)
    n_steps = int(g.rng.integers(4, 15))
    steps = tries = 0
    while steps < n_steps and tries < 200:
        tries += 1
        r = g.rng.random()
        state = {nm: ns[nm] for nm in names}
        if r < 0.06 and len(bases) < 2:               # a second base
            nm = f"a{len(names)}"
            expr = g.pick(("np.tanh(x) + 0.5", "np.sin(x) * 2.0"))
            line = f"{nm} = ({expr})[...]" if not shape else f"{nm} = {expr}"
            cand = [line]
            new = [nm]
            note = ("base",)
        elif r < 0.45:                                # a view (or a copy beside them)
            srcs = [nm for nm in names if isinstance(ns[nm], (np.ndarray, np.generic))
                    and depth[nm] < MAX_DEPTH]     # NumPy scalars too: their views copy
            if not srcs:
                continue
            src = g.pick(srcs)
            op, expr = g.view_expr(src, np.shape(ns[src]))
            if expr is None:
                continue
            if isinstance(expr, tuple):            # split: unpack, or take one piece
                expr, k = expr
                if g.chance(0.5) or k == 1:
                    j = int(g.rng.integers(0, k))
                    new = [f"v{len(names)}"]
                    cand = [f"{new[0]} = {expr}[{j}]"]
                else:
                    new = [f"v{len(names) + i}" for i in range(k)]
                    cand = [f"{', '.join(new)} = {expr}"]
            else:
                new = [f"v{len(names)}"]
                cand = [f"{new[0]} = {expr}"]
            note = ("view", op)
        elif r < 0.88:                                # a write
            targets = [nm for nm in names if not _is_array(ns[nm]) or ns[nm].flags.writeable]
            if not targets:
                continue
            views = [nm for nm in targets if depth[nm] > 0]
            t = g.pick(views if views and g.chance(0.6) else targets)   # mostly through views
            cand, note = _write(g, t, ns[t], state, xsize)
            if cand is None:
                continue
            new = []
        elif r < 0.93:                                # a write NumPy refuses (read-only)
            ro = [nm for nm in names if _is_array(ns[nm]) and not ns[nm].flags.writeable]
            if not ro:
                continue
            t = g.pick(ro)
            w, note = _write(g, t, ns[t], state, xsize)
            if w is None:
                continue
            cand = ["\n".join(["try:"] + ["    " + ln for ln in w] + [
                "except ValueError as e:",
                "    assert 'read-only' in str(e), e",
                "else:",
                "    raise AssertionError('a write into a read-only view did not raise')"])]
            new = []
            note = ("read_only_write",) + note[1:]
        else:                                         # a read in the middle
            nm = g.pick(names)
            cand = [f"acc = acc + np.sum(np.cos({nm}) * {g.const()})"]
            new = []
            note = ("read",)
        try:
            trial = _run_lines(lines + cand, x)
        except Exception:
            continue
        if not _bounded(trial, names + new) or not np.isfinite(trial["acc"]):
            continue
        if any(np.size(trial[nm]) == 0 for nm in new):   # no empty views
            continue
        for nm in new:
            if nm.startswith("a"):
                depth[nm] = 0
                bases.append(nm)
            else:
                depth[nm] = depth[src] + 1 if (_is_array(trial[nm]) and np.shares_memory(
                    trial[nm], trial[src])) else 0
                g.notes["copy" if depth[nm] == 0 else "view"] += 1
                if not _is_array(trial[src]):
                    g.notes["view_of_scalar"] += 1
        lines += cand
        names += new
        ns = trial
        steps += 1
        g.notes[note] += 1
        if note[0] == "view":
            g.notes["depth%d" % max(depth[nm] for nm in new)] += 1
    # the loss: every variable's final value, with weights
    loss = ["loss = acc"]
    for nm in names:
        v = ns[nm]
        if _is_array(v) and v.ndim:
            t = "(" + ", ".join(map(str, v.shape)) + ("," if v.ndim == 1 else "") + ")"
            w = f"np.linspace(0.5, 1.5, {v.size}).reshape({t})"
            loss.append(f"loss = loss + np.sum(np.sin({nm}) * {w})")
            if nm in bases:
                loss.append(f"loss = loss + np.sum({nm} ** 2 * {w})")
        else:
            loss.append(f"loss = loss + np.sum(np.sin({nm}) * {g.const()})")
            if nm in bases:
                loss.append(f"loss = loss + np.sum({nm} ** 2)")
    lines += loss + ["return loss"]
    g.notes["size_" + ("0d" if not shape else "small" if x.size <= 16 else "large")] += 1
    g.notes["ndim%d" % len(shape)] += 1
    return Program(seed, x, lines, g.notes)


def _write(g, t, v, state, xsize):
    """Lines writing into variable t (value v), and a note."""
    if not _is_array(v):                           # a NumPy scalar: augmented ops rebind it
        op = g.pick(("+=", "-=", "*=", "/=", "**="))
        if op == "**=":
            return [f"{t} **= 2"], ("write", op, "const")
        kind, val = (g.factor_value((), state, xsize, op == "/=") if op in ("*=", "/=")
                     else g.value((), state, xsize))
        return [f"{t} {op} {val}"], ("write", op, kind)
    kind_w = g.pick(WRITE_KINDS)
    shape = v.shape
    if kind_w == "item":
        k = g.key(shape, full_int=True) if shape else "()"
        if k is None:
            return None, None
        region = ()
        kind, val = g.value(region, state, xsize)
        return [f"{t}[{k}] = {val}"], ("write", "item", kind)
    # the region written: the whole variable or a basic index of it
    keyed = kind_w == "slice" or (kind_w not in ("whole",) and shape and g.chance(0.4))
    k = g.key(shape) if keyed and shape else None
    if kind_w == "slice" and k is None:
        k = "..."
    target = f"{t}[{k}]" if k is not None else t
    try:
        region = v[_eval_key(k)].shape if k is not None else shape
    except Exception:
        return None, None
    if kind_w in ("slice", "whole"):
        kind, val = g.value(region, state, xsize)
        lhs = target if k is not None else f"{t}[...]"
        return [f"{lhs} = {val}"], ("write", kind_w, kind)
    if kind_w == "copyto":
        kind, val = g.value(region, state, xsize)
        return [f"np.copyto({target}, {val})"], ("write", "copyto", kind)
    if kind_w == "**=":
        return [f"{target} **= 2"], ("write", "**=", "const")
    if kind_w in ("*=", "/="):
        kind, val = g.factor_value(region, state, xsize, kind_w == "/=")
    else:
        kind, val = g.value(region, state, xsize)
    return [f"{target} {kind_w} {val}"], ("write", kind_w, kind)


def _eval_key(k):
    return eval(f"np.s_[{k}]", {"np": np})


# -- the checks -----------------------------------------------------------------------------
class Mismatch(AssertionError):
    def __init__(self, cause, detail):
        super().__init__(f"{cause}: {detail}")
        self.cause = cause


def second_input(x):
    return x + 0.25 * np.cos(3.0 * np.arange(x.size)).reshape(x.shape)


def _value_close(got, want, what):
    if not np.isclose(got, want, rtol=VALUE_RTOL, atol=1e-12 * max(1.0, abs(want))):
        raise Mismatch(f"{what} value", f"tapegrad {got!r}, NumPy {want!r}")


def _grad_close(got, f, x, want_value, what):
    want = central_differences(f, x)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != x.shape:
        raise Mismatch(f"{what} gradient", f"shape {got.shape} for input {x.shape}")
    atol = GRAD_ATOL * max(1.0, abs(want_value))
    bad = ~np.isclose(got, want, rtol=GRAD_RTOL, atol=atol)
    if bad.any():
        # where they disagree, the differences again at half the step: their change
        # bounds their own error (about 16 times what is left at the finer step), which
        # only matters for a steep loss (sin of a large power of x)
        i = np.flatnonzero(bad.reshape(-1))
        finer = central_differences(f, x, EPS / 2, indices=i)
        own = np.abs(finer - want).reshape(-1)[i]
        want.reshape(-1)[i] = finer.reshape(-1)[i]
        bad.reshape(-1)[i] = np.abs(got.reshape(-1)[i] - want.reshape(-1)[i]) > (
            atol + GRAD_RTOL * np.abs(want.reshape(-1)[i]) + own)
    if bad.any():
        i = np.flatnonzero(bad.reshape(-1))
        raise Mismatch(f"{what} gradient",
                       f"{bad.sum()} of {x.size} elements differ from central differences, "
                       f"at flat {i[:6].tolist()}: tapegrad {got.reshape(-1)[i[:6]].tolist()}, "
                       f"differences {want.reshape(-1)[i[:6]].tolist()}")


def _guard(what, fn):
    try:
        return fn()
    except Mismatch:
        raise
    except Exception as e:
        msg = " ".join(str(e).split())[:200]
        raise Mismatch(f"{what} raised {type(e).__name__}", msg) from e


def check_program(prog, trace=None, observe=None):
    """Run prog on NumPy, on plain tensors, under value_and_grad (traced, and
    read after every statement, by default on the seeds the module docstring
    says); raise Mismatch naming the first difference."""
    f = prog.function()
    x = prog.x
    want = numpy_value(f, x)

    plain = _guard("plain tensor", lambda: in_fresh_thread(
        lambda: float(np.asarray(f(tg.tensor(x.copy())).numpy()))))
    _value_close(plain, want, "plain tensor")

    value, g = _guard("value_and_grad", lambda: in_fresh_thread(
        lambda: tg.value_and_grad(f)(x.copy())))
    _value_close(float(value), want, "value_and_grad")
    _grad_close(g, f, x, want, "value_and_grad")

    if trace if trace is not None else prog.seed % TRACE_EVERY == 0:
        x2 = second_input(x)

        def traced():
            ft = tg.trace(f, x.copy())
            v, gr = ft.value_and_grad(x2.copy())
            return float(v), np.array(gr, copy=True)
        v2, g2 = _guard("traced", lambda: in_fresh_thread(traced))
        want2 = numpy_value(f, x2)
        _value_close(v2, want2, "traced (second input)")
        _grad_close(g2, f, x2, want2, "traced (second input)")

    # odd seeds, statement by statement, every variable read (.numpy()) and compared
    # after each: reading a value must change nothing later (with requires_grad for
    # seeds 3 mod 4)
    if observe if observe is not None else prog.seed % 2 == 1:
        grad = prog.seed % 4 == 3
        diff = _guard("read after every statement", lambda: first_divergence(prog, grad))
        if diff is not None:
            raise Mismatch(f"read after every statement ({'grad' if grad else 'no grad'})",
                           diff)


def first_divergence(prog, requires_grad):
    """The first statement after which a variable of prog differs between
    NumPy and tapegrad (tensors with or without requires_grad), as text, or
    None: where to look first.  It reads every variable (``.numpy()``) after
    every statement, which must change nothing (``check_program`` holds every
    program to that); where it does, it can point at another statement than
    the program's own failure."""
    def run():
        ns_np = {"np": np, "x": prog.x.copy()}
        ns_tg = {"np": np, "x": tg.tensor(prog.x.copy(), requires_grad=requires_grad)}
        for st in prog.lines:
            if st.startswith("return"):
                return None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(st, ns_np)
            try:
                exec(st, ns_tg)
            except Exception as e:
                return f"{st!r} raised {type(e).__name__}: {e}"
            for k, v in ns_np.items():
                if k in ("np", "x", "e", "__builtins__"):
                    continue
                t = ns_tg[k]
                t = t.detach().numpy() if isinstance(t, tg.Tensor) else np.asarray(t)
                if np.shape(t) != np.shape(v) or not np.allclose(t, v, rtol=1e-12, atol=1e-12):
                    return (f"after {st!r}: {k} is {np.round(t, 4).tolist()} in tapegrad, "
                            f"{np.round(v, 4).tolist()} in NumPy")
        return None
    return in_fresh_thread(run)


def _report(failures, limit=3):
    causes = collections.Counter(c for _, c, _ in failures)
    head = "; ".join(f"{n} x {c}" for c, n in causes.most_common())
    seeds = ", ".join(str(p.seed) for p, _, _ in failures)
    shown = "\n\n".join(
        f"seed {p.seed}: {m}\n  first difference without grad: {first_divergence(p, False)}"
        f"\n  first difference with grad: {first_divergence(p, True)}\n{p.source()}"
        for p, _, m in failures[:limit])
    return (f"{len(failures)} programs failed ({head}); seeds {seeds} "
            f"(python tests/test_fuzz_views.py SEED [--min] reruns one)\n\n{shown}")


# -- the tests ------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fixed_seeds(chunk):
    failures = []
    for seed in SEEDS[chunk::CHUNKS]:
        prog = make_program(seed)
        try:
            check_program(prog)
        except Mismatch as e:
            failures.append((prog, e.cause, str(e)))
    assert not failures, _report(failures)


def test_generator_is_deterministic_and_valid_numpy():
    for seed in (0, 1, 12345):
        a, b = make_program(seed), make_program(seed)
        assert a.source() == b.source()
        assert np.isfinite(numpy_value(a.function(), a.x))


def test_generator_covers_views_writes_and_shapes():
    """The fixed seeds use every view op (nested to depth 3, copies beside
    views), every write kind with every kind of value, writes into read-only
    views, reads in the middle, and 0-d, small and large inputs of 0 to 3 dims."""
    notes = collections.Counter()
    for seed in SEEDS:
        notes.update(make_program(seed).notes)
    ops = {k[1] for k in notes if isinstance(k, tuple) and k[0] == "view"}
    assert ops >= set(VIEW_OPS), sorted(set(VIEW_OPS) - ops)
    writes = {k[1] for k in notes if isinstance(k, tuple) and k[0] == "write"}
    assert writes >= set(WRITE_KINDS), sorted(set(WRITE_KINDS) - writes)
    values = {k[2] for k in notes if isinstance(k, tuple) and k[0] == "write"}
    assert values >= {"const", "const_array", "input", "input_array", "variable", "alias"}, values
    assert notes[("read",)] >= 20 and notes[("base",)] >= 5
    assert sum(n for k, n in notes.items()
               if isinstance(k, tuple) and k[0] == "read_only_write") >= 10
    for k in ("depth1", "depth2", "depth3", "copy", "view", "view_of_scalar", "size_0d",
              "size_small", "size_large", "ndim0", "ndim1", "ndim2", "ndim3"):
        assert notes[k] >= 3, (k, notes[k])


def complex_step_gradient(f, x):
    """The exact gradient of f at x (to rounding) by the complex step: every
    generated program is analytic, and NumPy runs it on complex arrays."""
    g = np.empty(x.shape)
    flat = g.reshape(-1)
    for i in range(x.size):
        e = np.zeros(x.size, dtype=complex)
        e[i] = 1e-30j
        flat[i] = np.imag(np.sum(f(x.astype(complex) + e.reshape(x.shape)))) / 1e-30
    return g


def test_central_differences_agree_with_the_complex_step():
    """The gradient oracle itself: on these seeds the 5-point differences are
    within a tenth of the tolerance of the exact gradient."""
    for seed in SEEDS[::10]:
        prog = make_program(seed)
        f, x = prog.function(), prog.x
        exact = complex_step_gradient(f, x)
        atol = GRAD_ATOL * max(1.0, abs(numpy_value(f, x)))
        np.testing.assert_allclose(central_differences(f, x), exact, rtol=GRAD_RTOL / 10,
                                   atol=atol / 10, err_msg=str(prog))


def test_the_check_catches_a_write_that_does_not_reach_the_base():
    """Not vacuous: a program whose NumPy value depends on a write through a
    reshape, run against the same program with the write into a copy."""
    good = Program(0, np.array([0.3, -0.7, 1.1, 0.4]),
                   ["a0 = x * 1.0", "v1 = a0.reshape(2, 2)", "v1[0, 1] = 2.0",
                    "return np.sum(np.sin(a0)) + np.sum(a0 ** 2)"], collections.Counter())
    bad = Program(0, good.x, ["a0 = x * 1.0", "v1 = a0.reshape(2, 2) * 1.0", "v1[0, 1] = 2.0",
                              "return np.sum(np.sin(a0)) + np.sum(a0 ** 2)"],
                  collections.Counter())
    fg, fb = good.function(), bad.function()
    assert numpy_value(fg, good.x) != numpy_value(fb, bad.x)
    with pytest.raises(Mismatch, match="value"):
        _value_close(numpy_value(fb, bad.x), numpy_value(fg, good.x), "copy")
    with pytest.raises(Mismatch, match="gradient"):
        _grad_close(central_differences(fb, bad.x), fg, good.x, 1.0, "copy")


@pytest.mark.skipif(not LONG, reason="long fuzzing run: set TAPEGRAD_FUZZ=long")
def test_long_run():
    seconds = float(os.environ.get("TAPEGRAD_FUZZ_SECONDS", "600"))
    start = int(os.environ.get("TAPEGRAD_FUZZ_START", "1000000"))
    t0 = time.perf_counter()
    seed, passed, traced, lines = start, 0, 0, 0
    failures, causes = [], collections.Counter()
    while time.perf_counter() - t0 < seconds:
        prog = make_program(seed)
        lines += len(prog.lines)
        traced += seed % TRACE_EVERY == 0
        try:
            check_program(prog)
            passed += 1
        except Mismatch as e:
            causes[e.cause] += 1
            if sum(1 for _, c, _ in failures if c == e.cause) < 2:
                failures.append((prog, e.cause, str(e)))
        seed += 1
    n = seed - start
    by_cause = ", ".join(f"{c}: {k}" for c, k in causes.most_common()) or "none"
    print(f"\nviews fuzz: {n} programs ({lines} lines, {traced} traced), {passed} passed, "
          f"{n - passed} failed (seeds {start}..{seed - 1}, {time.perf_counter() - t0:.0f} s); "
          f"failures by cause: {by_cause}")
    assert not failures, _report(failures, limit=6)


def minimize(prog, trace=None, observe=None):
    """The program with every statement dropped whose removal keeps it valid
    NumPy and failing with the same cause (greedy, to a fixed point)."""
    def cause(p):
        try:                                       # still valid NumPy
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with np.errstate(all="raise"):
                    numpy_value(p.function(), p.x)
        except Exception:
            return None
        try:
            check_program(p, trace=trace, observe=observe)
        except Mismatch as e:
            return e.cause
        return None
    want = cause(prog)
    if want is None:
        return prog
    lines, changed = list(prog.lines), True
    while changed:
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            if lines[i] == "return loss":
                continue
            p = Program(prog.seed, prog.x, lines[:i] + lines[i + 1:], prog.notes)
            if cause(p) == want:
                lines, changed = p.lines, True
    return Program(prog.seed, prog.x, lines, prog.notes)


if __name__ == "__main__":
    # python tests/test_fuzz_views.py SEED [--min]: show and check one program
    # (--min: first drop every statement the failure does not need)
    p = make_program(int(sys.argv[1]))
    if "--min" in sys.argv[2:]:
        p = minimize(p)
    print(p)
    for grad in (False, True):
        print(f"first difference {'with' if grad else 'without'} grad: {first_divergence(p, grad)}")
    check_program(p)
    print("ok")
