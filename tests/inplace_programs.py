"""Random straight-line programs of in-place writes and create_graph steps,
and one interpreter that runs them on tapegrad or on PyTorch.

Used by ``tests/test_fuzz_inplace.py``.  Nothing here imports torch at import
time (PyTorch is no dependency of tapegrad): the torch backend imports it when
it is first used.

A program is a list of plain tuples (no tensors), so it prints, pickles and
shrinks.  ``Program.source()`` writes it out as the tapegrad code it runs.

Variables are numbered in creation order, one per producing step: leaves
(``x0 = tg.tensor(..., requires_grad=True)``, float64) and results (``v3 = ...``).
Step kinds:

``("leaf", n)``                   a new leaf holding ``Program.leaves[n]``

``("unary", name, i)``            sin cos tanh exp square neg
``("scalar", name, i, c)``        x + c, c - x, x * c, x / c, x ** 2
``("binary", name, i, j)``        + - * and ``a / (b * b + 0.5)``, broadcasting
``("reduce", name, i, axis, keepdims)``   sum, mean
``("view", i, key)``              a basic index: a view of ``v[i]``
``("tview", name, i, key)``       a unary op of a temporary view: ``sin(v[i][key])``
                                  (the view itself is dropped at once)
``("take", i, key)``              an advanced index (int array, mask): a copy
``("rec", t, kind, arg)``         an in-place write with grad mode on (recorded):
                                  ``t += c``, ``t *= c``, ``t -= c``, ``t /= c``,
                                  ``t += v``, ``t *= v``, ``t -= v``,
                                  ``t /= (v * v + 0.5)``, ``t[k] = value``,
                                  ``t[k] += c``, ``t[k] *= c``
``("raw", t, kind, arg)``         a write the graph does not see: under
                                  ``no_grad`` (``t += c``, ``t *= c``,
                                  ``t[k] = value``), ``t.data -= c``,
                                  ``t.detach()[k] = value``
``("mid", y, seed)``              ``y.backward(seed, retain_graph=True)``
``("sgd", leaf, lr)``             ``leaf.data -= lr * leaf.grad``
``("grad", y, inputs, seed, create_graph, reach)``   ``tg.autograd.grad`` (new
                                  variables, one per input; ``allow_unused=True``;
                                  ``reach``: the leaves y's graph reaches, and
                                  the inputs)
                                  (a 7th field, ``zero_none``: None gradients
                                  become zeros, in both libraries)
``("backward", y, seed, inputs)`` the final ``y.backward(seed, inputs=...)``

PyTorch runs a program in two ways:

* ``real``: exactly as written, in-place ops included (PyTorch itself);
* ``functional``: each *recorded* in-place write computed out of place, the
  new value passed up to the written view's bases and every view of the
  family taken again from the new base (PyTorch's own definition of what an
  in-place write through a view means, written out).  Writes the graph does
  not see (``no_grad``, ``.data``, ``detach()``) stay real in-place writes on
  the shared memory, so PyTorch's version counters still catch a backward
  that needs a value they overwrote.

tapegrad records an in-place write on a tensor in a graph as a functional
update that takes the tensor's place (docs/reference.md, "In-place writes, views and
nesting"): a graph that saved the old value keeps it.  PyTorch (``real``)
raises there instead ("... modified by an inplace operation") when the old
value was saved.  ``functional`` is the oracle tapegrad is held to; ``real``
checks that oracle wherever PyTorch itself gives a result.

Left out of generation, and why:

* views made by ``reshape``, ``transpose`` and the like: only basic indexing
  makes views here (``test_fuzz_views.py`` draws programs of every view op
  against NumPy and central differences); a full integer index (``v[2]`` of
  a 1-d tensor) is NumPy's scalar, a copy, which the PyTorch oracle clones;
* a right-hand side that shares memory with the tensor written into
  (``h[1:] += h[:2]``): PyTorch refuses partial overlaps, NumPy (and tapegrad)
  copy first; the value of a write is never from the written family;
* ``t.data -= c`` in PyTorch skips the version counter (a silently wrong
  gradient), so PyTorch runs it as the same write under ``no_grad``;
* ``c / x``, and unrecorded writes into a quotient ``a / b`` (a family with
  one): tapegrad keeps a value PyTorch does not and raises where PyTorch
  computes (``test_known_difference_saved_values``), unless the generator is
  asked to keep them (``known_bugs_excluded=False``); products and quotients
  with constant arrays are not generated (``tests/test_writes_and_nesting.py``
  and ``test_product_with_a_constant_array_needs_only_the_constant`` check
  them).
"""
import math

import numpy as np

UNARY = ("sin", "cos", "tanh", "exp", "square", "neg")
SCALAR = ("add", "rsub", "mul", "div", "pow2")
BINARY = ("add", "sub", "mul", "div")
CONSTS = (0.5, -1.5, 2.0, 0.25, -0.75, 3.0)
REC_KINDS = ("iadd_c", "imul_c", "isub_c", "idiv_c", "iadd_v", "imul_v", "isub_v",
             "idiv_v", "set", "item_iadd", "item_imul")
RAW_KINDS = ("ng_iadd", "ng_imul", "ng_set", "data_isub", "detach_set")
# ops whose backward reads (saves) their input: in both libraries
SAVES_INPUT_UNARY = {"sin", "cos", "square"}
SAVES_INPUT_SCALAR = {"pow2"}
BOUND = 1e4          # generated values stay below this in magnitude
BIG_SIZES = (17, 18, 20, 24)   # over 16 elements the tape keeps values by reference


# -- keys --------------------------------------------------------------------------------------
# A key is a tuple of parts: ("i", k) an int, ("s", start, stop, step) a slice,
# ("a", (k, ...)) distinct ints (advanced), ("m", nested bools) a mask of the whole shape.

def np_key(key):
    parts = []
    for p in key:
        if p[0] == "i":
            parts.append(p[1])
        elif p[0] == "s":
            parts.append(slice(p[1], p[2], p[3]))
        elif p[0] == "a":
            parts.append(np.array(p[1], dtype=np.intp))
        else:
            parts.append(np.array(p[1], dtype=bool))
    return parts[0] if len(parts) == 1 else tuple(parts)


def torch_key(key):
    import torch
    parts = []
    for p in key:
        if p[0] == "i":
            parts.append(p[1])
        elif p[0] == "s":
            parts.append(slice(p[1], p[2], p[3]))
        elif p[0] == "a":
            parts.append(torch.tensor(p[1], dtype=torch.long))
        else:
            parts.append(torch.tensor(p[1], dtype=torch.bool))
    return parts[0] if len(parts) == 1 else tuple(parts)


def key_src(key):
    out = []
    for p in key:
        if p[0] == "i":
            out.append(str(p[1]))
        elif p[0] == "s":
            a, b, s = ("" if v is None else str(v) for v in p[1:])
            out.append(f"{a}:{b}" + (f":{s}" if s not in ("", "1") else ""))
        elif p[0] == "a":
            out.append(f"np.array({list(p[1])})")
        else:
            out.append(f"np.array({np.array(p[1]).tolist()})")
    return ", ".join(out)


def is_basic(key):
    return all(p[0] in "is" for p in key)


def key_shape(shape, key):
    return np.empty(shape)[np_key(key)].shape


# -- programs ----------------------------------------------------------------------------------
class Program:
    def __init__(self, family, leaves, steps, compare, notes=()):
        self.family = family
        self.leaves = leaves          # list of float64 arrays
        self.steps = steps            # list of tuples (see the module docstring)
        self.compare = compare        # the variables whose final values are compared
        self.notes = tuple(notes)     # shapes of the program (for the coverage test)

    def has_recorded_write_before(self, si):
        return any(s[0] == "rec" for s in self.steps[:si])

    def source(self):
        lines = ["import numpy as np, tapegrad as tg"]
        n = 0
        name = {}

        def new():
            nonlocal n
            name[n] = f"v{n}"
            n += 1
            return name[n - 1]

        for s in self.steps:
            kind = s[0]
            if kind == "leaf":
                name[n] = f"x{n}"
                n += 1
                lines.append(f"{name[n - 1]} = tg.tensor({_lit(self.leaves[s[1]])}, "
                             "requires_grad=True)")
            elif kind == "unary":
                x = name[s[2]]
                expr = {"square": f"tg.square({x})", "neg": f"-{x}"}.get(s[1], f"tg.{s[1]}({x})")
                lines.append(f"{new()} = {expr}")
            elif kind == "scalar":
                x, c = name[s[2]], s[3]
                expr = {"add": f"{x} + {c}", "rsub": f"{c} - {x}", "mul": f"{x} * {c}",
                        "div": f"{x} / {c}", "pow2": f"{x} ** 2"}[s[1]]
                lines.append(f"{new()} = {expr}")
            elif kind == "binary":
                a, b = name[s[2]], name[s[3]]
                expr = {"add": f"{a} + {b}", "sub": f"{a} - {b}", "mul": f"{a} * {b}",
                        "div": f"{a} / ({b} * {b} + 0.5)"}[s[1]]
                lines.append(f"{new()} = {expr}")
            elif kind == "reduce":
                lines.append(f"{new()} = {name[s[2]]}.{s[1]}(axis={s[3]}, keepdims={s[4]})")
            elif kind in ("view", "take"):
                lines.append(f"{new()} = {name[s[1]]}[{key_src(s[2])}]")
            elif kind == "tview":
                x = f"{name[s[2]]}[{key_src(s[3])}]"
                expr = {"square": f"tg.square({x})", "neg": f"-{x}"}.get(s[1], f"tg.{s[1]}({x})")
                lines.append(f"{new()} = {expr}")
            elif kind == "rec":
                lines.append(_write_src(name, s))
            elif kind == "raw":
                lines.append(_write_src(name, s))
            elif kind == "mid":
                lines.append(f"{name[s[1]]}.backward({_lit(s[2])}, retain_graph=True)")
            elif kind == "sgd":
                lines.append(f"{name[s[1]]}.data -= {s[2]} * {name[s[1]]}.grad")
            elif kind == "grad":
                outs = [new() for _ in s[2]]
                ins = ", ".join(name[i] for i in s[2])
                seed = "None" if s[3] is None else f"[{_lit(s[3])}]"
                lines.append(f"{', '.join(outs)}, = tg.autograd.grad([{name[s[1]]}], [{ins}], "
                             f"{seed}, create_graph={s[4]}, allow_unused=True)")
                if len(s) > 6 and s[6]:
                    for o, i in zip(outs, s[2]):
                        lines.append(f"{o} = tg.zeros({name[i]}.shape) if {o} is None else {o}")
            elif kind == "backward":
                ins = "" if s[3] is None else ", inputs=[" + ", ".join(name[i] for i in s[3]) + "]"
                lines.append(f"{name[s[1]]}.backward({_lit(s[2])}{ins})")
        return "\n".join(lines)

    def __repr__(self):
        return f"<{self.family} program>\n{self.source()}\n# compared: " \
               f"{sorted(self.compare)}"


def _lit(a):
    if a is None:
        return "None"
    if isinstance(a, float):
        return repr(a)
    return f"np.array({np.asarray(a).tolist()!r})"


def _val_src(name, val):
    if val[0] == "f":
        return repr(val[1])
    if val[0] == "c":
        return _lit(val[1])
    return f"{name[val[1]]} * {val[2]}"


def _write_src(name, s):
    _, t, kind, arg = s
    t = name[t]
    if kind in ("iadd_c", "imul_c", "isub_c", "idiv_c"):
        op = {"iadd_c": "+=", "imul_c": "*=", "isub_c": "-=", "idiv_c": "/="}[kind]
        return f"{t} {op} {arg}"
    if kind in ("iadd_v", "imul_v", "isub_v"):
        op = {"iadd_v": "+=", "imul_v": "*=", "isub_v": "-="}[kind]
        return f"{t} {op} {name[arg]}"
    if kind == "idiv_v":
        return f"{t} /= ({name[arg]} * {name[arg]} + 0.5)"
    if kind == "set":
        return f"{t}[{key_src(arg[0])}] = {_val_src(name, arg[1])}"
    if kind in ("item_iadd", "item_imul"):
        op = "+=" if kind == "item_iadd" else "*="
        return f"{t}[{key_src(arg[0])}] {op} {arg[1]}"
    if kind == "ng_iadd":
        return f"with tg.no_grad(): {t} += {arg}"
    if kind == "ng_imul":
        return f"with tg.no_grad(): {t} *= {arg}"
    if kind == "ng_set":
        return f"with tg.no_grad(): {t}[{key_src(arg[0])}] = {_val_src(name, arg[1])}"
    if kind == "data_isub":
        return f"{t}.data -= {arg}"
    if kind == "detach_set":
        return f"{t}.detach()[{key_src(arg[0])}] = {_val_src(name, arg[1])}"
    raise AssertionError(kind)


# -- the generator -----------------------------------------------------------------------------
class Var:
    def __init__(self, shape, leaf, bound, deps, base=None, key=None, root=None):
        self.shape, self.leaf, self.bound, self.deps = shape, leaf, bound, deps
        self.base, self.key = base, key
        self.root = root
        self.dead = False          # not used again (see the known-bug exclusions)
        self.saved = False         # an op that saves its input read it
        self.has_grad = False      # a leaf that a mid backward reached
        self.quotient = False      # a / b: tapegrad saves the quotient (PyTorch does not)
        self.none = False          # a gradient that is None (an unused input)
        self.gradient = False      # the result of a grad step (it may require no grad)


class Draw:
    """What the generator draws from: Hypothesis's ``draw`` or a NumPy generator."""

    def __init__(self, draw=None, rng=None):
        self._draw, self._rng = draw, rng

    def int(self, lo, hi):
        if self._draw is not None:
            from hypothesis import strategies as st
            return self._draw(st.integers(lo, hi))
        return int(self._rng.integers(lo, hi + 1))

    def choice(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def bool(self, p=0.5):
        if self._draw is not None:
            from hypothesis import strategies as st
            # integers shrink towards 0: the "False" side is the simpler program
            return self._draw(st.integers(0, 999)) >= 1000 * (1 - p)
        return bool(self._rng.random() < p)

    def values(self, shape, lo=-2.0, hi=2.0):
        n = int(np.prod(shape, dtype=np.int64))
        if self._draw is not None:
            from hypothesis import strategies as st
            vals = self._draw(st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False,
                                                 width=32),
                                       min_size=n, max_size=n))
            return np.array(vals, dtype=np.float64).reshape(shape)
        return np.round(self._rng.uniform(lo, hi, size=shape), 3).astype(np.float64)


class Gen:
    """Builds one program step by step, keeping for each variable its shape,
    a bound on its values (no overflow), the leaves its graph reaches and its
    view family (base, key, root)."""

    def __init__(self, d, family, known_bugs_excluded=True):
        self.d, self.family = d, family
        self.exclude = known_bugs_excluded
        self.vars, self.leaves, self.steps, self.notes = [], [], [], set()
        self.first_graph_end = None   # create_graph: variables before this are the first graph

    # variables -----------------------------------------------------------------------------
    def add(self, var):
        self.vars.append(var)
        return len(self.vars) - 1

    def alive(self, pred=lambda v: True):
        return [k for k, v in enumerate(self.vars) if not v.dead and pred(v)]

    def family_of(self, k):
        root = self.vars[k].root
        return [m for m, v in enumerate(self.vars) if v.root == root]

    def ancestors(self, k):
        out = []
        while self.vars[k].base is not None:
            k = self.vars[k].base
            out.append(k)
        return out

    def descendants(self, k):
        out, frontier = [], {k}
        for m, v in enumerate(self.vars):
            if v.base in frontier:
                out.append(m)
                frontier.add(m)
        return out

    def leaf_family(self, k):
        return self.vars[self.vars[k].root].leaf

    def new_leaf(self, shape):
        self.leaves.append(self.d.values(shape))
        self.steps.append(("leaf", len(self.leaves) - 1))
        k = self.add(Var(shape, True, 2.0, frozenset()))
        self.vars[k].root = k
        self.vars[k].deps = frozenset([k])
        return k

    def leaf_vars(self):
        return [k for k, v in enumerate(self.vars) if v.leaf]

    def op_result(self, shape, bound, deps):
        k = self.add(Var(shape, False, bound, frozenset(deps)))
        self.vars[k].root = k
        return k

    # shapes ----------------------------------------------------------------------------------
    def base_shape(self):
        big = self.d.bool(0.2)
        if self.d.bool(0.5):
            return (self.d.choice(BIG_SIZES),) if big else (self.d.int(1, 5),)
        if big:
            return (self.d.int(3, 4), self.d.choice((6, 7, 8)))
        return (self.d.int(1, 4), self.d.int(1, 4))

    def basic_key(self, shape):
        d = self.d
        if len(shape) == 0:
            return None

        def sl(n):
            start = d.int(0, n - 1)
            step = d.choice((1, 1, 2))
            stop = d.choice([None] + list(range(start + 1, n + 1)))
            if d.bool(0.15):              # negative bounds
                return ("s", start - n, None if stop is None or stop == n else stop - n, step)
            return ("s", start, stop, step)

        if len(shape) == 1:
            n = shape[0]
            if d.bool(0.25):
                return (("i", d.int(-n, n - 1)),)
            return (sl(n),)
        m, n = shape
        form = d.int(0, 4)
        if form == 0:
            return (("i", d.int(-m, m - 1)),)
        if form == 1:
            return (sl(m),)
        if form == 2:
            return (("s", None, None, 1), ("i", d.int(0, n - 1)))
        if form == 3:
            return (sl(m), sl(n))
        return (("i", d.int(0, m - 1)), sl(n))

    def advanced_key(self, shape):
        d = self.d
        if len(shape) == 0:
            return None
        if d.bool(0.4):
            mask = d.values(shape, 0.0, 1.0) > 0.5
            if not mask.any():
                mask.flat[d.int(0, mask.size - 1)] = True
            return (("m", mask.tolist()),)
        if len(shape) == 2 and d.bool(0.4):
            n = shape[1]
            cols = self.distinct(n)
            return (("s", None, None, 1), ("a", cols))
        return (("a", self.distinct(shape[0])),)

    def distinct(self, n):
        k = self.d.int(1, min(n, 4))
        pool = list(range(n))
        out = []
        for _ in range(k):
            out.append(pool.pop(self.d.int(0, len(pool) - 1)))
        if self.d.bool(0.3):
            out = [i - n for i in out]       # negative indices
        return tuple(out)

    def broadcast_partner(self, shape, exclude=()):
        """An alive variable whose shape broadcasts to ``shape`` (the result stays ``shape``)."""
        ok = []
        for k in self.alive():
            if k in exclude:
                continue
            try:
                if np.broadcast_shapes(self.vars[k].shape, shape) == tuple(shape):
                    ok.append(k)
            except ValueError:
                pass
        return self.d.choice(ok) if ok else None

    # steps -----------------------------------------------------------------------------------
    def step_unary(self):
        i = self.d.choice(self.alive())
        v = self.vars[i]
        name = self.d.choice(UNARY)
        bound = {"sin": 1.0, "cos": 1.0, "tanh": 1.0, "neg": v.bound,
                 "exp": math.exp(min(v.bound, 50)), "square": v.bound ** 2}[name]
        if name == "exp" and v.bound > 2.5 or bound > BOUND:
            return False
        if name in SAVES_INPUT_UNARY:
            v.saved = True
        self.op_result(v.shape, bound, v.deps)
        self.steps.append(("unary", name, i))
        return True

    def step_scalar(self):
        i = self.d.choice(self.alive())
        v = self.vars[i]
        name = self.d.choice(SCALAR)
        c = self.d.choice(CONSTS)
        bound = {"add": v.bound + abs(c), "rsub": v.bound + abs(c), "mul": v.bound * abs(c),
                 "div": v.bound / abs(c), "pow2": v.bound ** 2}[name]
        if bound > BOUND:
            return False
        if name in SAVES_INPUT_SCALAR:
            v.saved = True
        self.op_result(v.shape, bound, v.deps)
        self.steps.append(("scalar", name, i, c))
        return True

    def step_binary(self):
        i = self.d.choice(self.alive())
        a = self.vars[i]
        if self.d.bool(0.25):
            j = self.new_leaf(self.d.choice([a.shape, a.shape[-1:], ()]))
        else:
            ok = [k for k in self.alive() if _broadcasts(self.vars[k].shape, a.shape)]
            j = self.d.choice(ok)
        b = self.vars[j]
        if self.d.bool(0.5):
            i, j, a, b = j, i, b, a
        name = self.d.choice(BINARY)
        shape = np.broadcast_shapes(a.shape, b.shape)
        bound = {"add": a.bound + b.bound, "sub": a.bound + b.bound,
                 "mul": a.bound * b.bound, "div": 2 * a.bound}[name]
        if bound > BOUND or (name == "div" and b.bound ** 2 > BOUND):
            return False
        if name in ("mul", "div"):
            a.saved = b.saved = True
        k = self.op_result(shape, bound, a.deps | b.deps)
        self.vars[k].quotient = name == "div"
        self.steps.append(("binary", name, i, j))
        return True

    def step_reduce(self):
        i = self.d.choice(self.alive())
        v = self.vars[i]
        name = self.d.choice(("sum", "mean"))
        axis = None if v.shape == () or self.d.bool(0.4) else self.d.int(0, len(v.shape) - 1)
        keepdims = self.d.bool(0.3)
        shape = np.empty(v.shape).sum(axis=axis, keepdims=keepdims).shape
        bound = v.bound * (int(np.prod(v.shape)) if name == "sum" else 1)
        if bound > BOUND:
            return False
        self.op_result(shape, bound, v.deps)
        self.steps.append(("reduce", name, i, axis, keepdims))
        return True

    def step_view(self):
        cands = self.alive(lambda v: v.shape != ())
        if not cands:
            return False
        inner = [k for k in cands if not self.vars[self.vars[k].root].leaf]
        i = self.d.choice(inner if inner and self.d.bool(0.6) else cands)
        v = self.vars[i]
        key = self.basic_key(v.shape)
        shape = key_shape(v.shape, key)
        if 0 in shape:
            return False
        k = self.add(Var(shape, False, v.bound, v.deps, base=i, key=key, root=v.root))
        del k
        self.steps.append(("view", i, key))
        return True

    def step_tview(self):
        cands = self.alive(lambda v: v.shape != ())
        if not cands:
            return False
        i = self.d.choice(cands)
        v = self.vars[i]
        key = self.basic_key(v.shape)
        shape = key_shape(v.shape, key)
        name = self.d.choice(UNARY)
        bound = {"sin": 1.0, "cos": 1.0, "tanh": 1.0, "neg": v.bound,
                 "exp": math.exp(min(v.bound, 50)), "square": v.bound ** 2}[name]
        if 0 in shape or name == "exp" and v.bound > 2.5 or bound > BOUND:
            return False
        self.op_result(shape, bound, v.deps)
        self.steps.append(("tview", name, i, key))
        self.notes.add("temporary_view")
        return True

    def step_take(self):
        cands = self.alive(lambda v: v.shape != ())
        if not cands:
            return False
        i = self.d.choice(cands)
        v = self.vars[i]
        key = self.advanced_key(v.shape)
        shape = key_shape(v.shape, key)
        if 0 in shape:
            return False
        k = self.op_result(shape, v.bound, v.deps)
        self.steps.append(("take", i, key))
        return True

    def value_for(self, shape, target, allow_var=True):
        """A right-hand side for ``t[key] = value`` of the indexed shape ``shape``."""
        fam = set(self.family_of(target))
        form = self.d.int(0, 2 if allow_var else 1)
        if form == 0:
            c = self.d.choice(CONSTS)
            return ("f", c), abs(c), frozenset()
        if form == 1:
            return ("c", self.d.values(shape)), 2.0, frozenset()
        j = self.broadcast_partner(shape, exclude=fam)   # never the written memory itself
        if j is None:
            c = self.d.choice(CONSTS)
            return ("f", c), abs(c), frozenset()
        c = self.d.choice(CONSTS)
        return ("v", j, c), self.vars[j].bound * abs(c), self.vars[j].deps

    def step_rec(self):
        # a recorded write: grad mode on.  Into a leaf that requires grad, or a view of one,
        # both libraries refuse at once; rarely drawn, it ends the program.
        if self.d.bool(0.06):
            t = self.d.choice(self.alive(lambda v: self.vars[v.root].leaf))
            if self.vars[t].shape and self.d.bool(0.5):
                self.steps.append(("rec", t, "set", ((("i", 0),), ("f", 1.0))))
            else:
                self.steps.append(("rec", t, "iadd_c", 1.0))
            self.notes.add("rec_into_leaf")
            return "end"
        cands = self.alive(lambda v: not self.vars[v.root].leaf)
        if not cands:
            return False
        views = [k for k in cands if self.vars[k].base is not None]
        t = self.d.choice(views if views and self.d.bool(0.5) else cands)
        tv = self.vars[t]
        kind = self.d.choice(REC_KINDS)
        fam = self.family_of(t)
        deps = tv.deps
        if kind in ("iadd_c", "imul_c", "isub_c", "idiv_c"):
            c = self.d.choice(CONSTS)
            arg = c
            bound = {"iadd_c": tv.bound + abs(c), "isub_c": tv.bound + abs(c),
                     "imul_c": tv.bound * abs(c), "idiv_c": tv.bound / abs(c)}[kind]
        elif kind in ("iadd_v", "imul_v", "isub_v", "idiv_v"):
            j = self.broadcast_partner(tv.shape, exclude=set(fam))
            if j is None:
                return False
            arg = j
            b = self.vars[j].bound
            bound = {"iadd_v": tv.bound + b, "isub_v": tv.bound + b, "imul_v": tv.bound * b,
                     "idiv_v": 2 * tv.bound}[kind]
            if kind == "idiv_v" and b * b > BOUND:
                return False
            if kind in ("imul_v", "idiv_v"):
                self.vars[j].saved = True
            deps = deps | self.vars[j].deps
        else:
            if tv.shape == ():
                return False
            key = self.basic_key(tv.shape) if self.d.bool(0.5) else self.advanced_key(tv.shape)
            kshape = key_shape(tv.shape, key)
            if 0 in kshape:
                return False
            if kind == "set":
                val, vb, vdeps = self.value_for(kshape, t)
                arg = (key, val)
                bound = max(tv.bound, vb)
                deps = deps | vdeps
            else:
                c = self.d.choice(CONSTS)
                arg = (key, c)
                bound = tv.bound + abs(c) if kind == "item_iadd" else tv.bound * max(1, abs(c))
        if bound > BOUND:
            return False
        self.steps.append(("rec", t, kind, arg))
        if kind in ("imul_v", "idiv_v"):
            tv.saved = True
        if kind == "idiv_v":
            tv.quotient = True
        root_deps = frozenset().union(*(self.vars[m].deps for m in fam)) | deps
        for m in fam:
            self.vars[m].bound = max(self.vars[m].bound, bound)
            self.vars[m].deps = root_deps
        if tv.base is not None:
            self.notes.add("rec_into_view")
        if self.descendants(t):
            self.notes.add("rec_into_viewed")
        return True

    def step_raw(self, target=None):
        """A write no graph records, into ``target`` or a variable drawn."""
        def ok(v):
            if not self.exclude:
                return True
            k = self.vars.index(v)
            # DIFFERENCE (test_known_difference_saved_values): tapegrad's a / b saves the
            # quotient, which PyTorch does not, so an unrecorded write into it raises in
            # tapegrad alone.  No unrecorded writes into a quotient's family.
            if any(self.vars[m].quotient for m in self.family_of(k)):
                return False
            return True

        cands = self.alive(ok)
        if target is not None:
            cands = [k for k in cands if k == target]
        if not cands:
            return False
        t = self.d.choice(cands)
        tv = self.vars[t]
        kind = self.d.choice(RAW_KINDS)
        if kind in ("ng_set", "detach_set"):
            if tv.shape == ():
                return False
            key = self.basic_key(tv.shape) if self.d.bool(0.5) else self.advanced_key(tv.shape)
            kshape = key_shape(tv.shape, key)
            if 0 in kshape:
                return False
            val, vb, _ = self.value_for(kshape, t, allow_var=False)
            arg, bound = (key, val), max(tv.bound, vb)
        else:
            c = self.d.choice(CONSTS)
            arg = c
            bound = tv.bound * abs(c) if kind == "ng_imul" else tv.bound + abs(c)
        if bound > BOUND:
            return False
        self.steps.append(("raw", t, kind, arg))
        for m in self.family_of(t):
            self.vars[m].bound = max(self.vars[m].bound, bound)
        if tv.leaf:
            self.notes.add("raw_into_leaf")
        elif self.leaf_family(t):
            self.notes.add("raw_into_leaf_view")
        if self.descendants(t):
            self.notes.add("raw_into_viewed")
        return True

    def seed_for(self, shape):
        if shape == () and self.d.bool(0.3):
            return None
        return self.d.values(shape)

    def step_mid(self):
        y = self.d.choice(self.alive())
        self.steps.append(("mid", y, self.seed_for(self.vars[y].shape)))
        for k in self.vars[y].deps:
            self.vars[k].has_grad = True
        if self.d.bool(0.6):
            self.step_sgd()                  # a training step: p.data -= lr * p.grad
        return True

    def step_sgd(self):
        cands = self.alive(lambda v: v.leaf and v.has_grad)
        if not cands:
            return False
        k = self.d.choice(cands)
        self.steps.append(("sgd", k, 0.01))
        for m in self.family_of(k):
            self.vars[m].bound += 10.0        # |lr * grad| is not known: a wide margin
        return True

    STEPS = {"unary": (step_unary, 3), "scalar": (step_scalar, 2), "binary": (step_binary, 2),
             "reduce": (step_reduce, 1), "view": (step_view, 2), "take": (step_take, 1),
             "tview": (step_tview, 1),
             "rec": (step_rec, 4), "raw": (step_raw, 3), "mid": (step_mid, 0.5),
             "sgd": (step_sgd, 0.5)}

    def random_steps(self, n, kinds):
        weights = {k: self.STEPS[k][1] for k in kinds}
        names = [k for k in kinds for _ in range(int(weights[k] * 2))]
        done = 0
        tries = 0
        while done < n and tries < 6 * n:
            tries += 1
            kind = self.d.choice(names)
            r = self.STEPS[kind][0](self)
            if r == "end":
                return "end"
            if r:
                done += 1
        return None


def _broadcasts(shape, to):
    try:
        return np.broadcast_shapes(shape, to) == tuple(to)
    except ValueError:
        return False


def make_inplace_program(d, known_bugs_excluded=True):
    """In-place writes (recorded and not), views, reductions, backward passes in the middle
    and SGD steps, then a final backward with a random seed (sometimes ``inputs=``)."""
    g = Gen(d, "inplace", known_bugs_excluded)
    shape = g.base_shape()
    g.new_leaf(shape)
    for _ in range(d.int(0, 2)):
        g.new_leaf(d.choice([shape, shape[-1:], ()]))
    end = g.random_steps(d.int(2, 9), list(Gen.STEPS))
    if end is None:
        y = g.choice_output()
        seed = g.seed_for(g.vars[y].shape)
        inputs = None
        deps = sorted(g.vars[y].deps)
        if deps and d.bool(0.2):
            inputs = tuple(k for k in deps if d.bool(0.6)) or (deps[0],)
        g.steps.append(("backward", y, seed, inputs))
    return g.finish()


def make_create_graph_program(d, known_bugs_excluded=True):
    """A first gradient with ``create_graph=True`` (``tg.autograd.grad``), then a function of
    it (gradient penalty, Hessian-vector product written by hand, mixed with the inputs)
    differentiated again: by ``backward`` into ``.grad`` or by ``tg.autograd.grad``.
    Third and higher orders and non-leaf inputs: tests/test_create_graph.py."""
    g = Gen(d, "create_graph", known_bugs_excluded)
    shape = g.base_shape()
    g.new_leaf(shape)
    for _ in range(d.int(0, 1)):
        g.new_leaf(d.choice([shape, shape[-1:], ()]))
    fwd = ["unary", "scalar", "binary", "reduce", "view", "take", "tview", "rec"]
    if d.bool(0.3):
        fwd.append("raw")
    if g.random_steps(d.int(1, 5), fwd) == "end":
        return g.finish()
    y = g.choice_output()
    yv = g.vars[y]
    inputs = tuple(sorted(yv.deps))
    if len(inputs) > 1 and d.bool(0.3):
        inputs = (d.choice(inputs),)
    unused = [k for k in g.leaf_vars() if k not in yv.deps]
    if unused and d.bool(0.3):
        # an input y does not reach: None with allow_unused=True (the case with every
        # input unused is test_create_graph_with_no_used_input_gives_none)
        inputs = tuple(sorted(inputs + (d.choice(unused),)))
    seed = g.seed_for(yv.shape)
    g.steps.append(("grad", y, inputs, seed, True, tuple(sorted(yv.deps | set(inputs)))))
    g.first_graph_end = len(g.vars)
    grads = []
    for k in inputs:
        grads.append(g.op_result(g.vars[k].shape, BOUND / 100, yv.deps))
        g.vars[grads[-1]].gradient = True
        if k not in yv.deps:                      # None: compared, never used
            g.vars[grads[-1]].dead = g.vars[grads[-1]].none = True
            grads.pop()
    form = d.choice(("penalty", "hvp", "mixed", "free"))
    g.notes.add(form)
    if form in ("penalty", "mixed"):
        for gk in grads:                           # sum(g * g) by the tensors' own ops
            g.steps.append(("binary", "mul", gk, gk))
            g.op_result(g.vars[gk].shape, BOUND, g.vars[gk].deps)
            g.steps.append(("reduce", "sum", len(g.vars) - 1, None, False))
            g.op_result((), BOUND, g.vars[gk].deps)
    elif form == "hvp":                            # sum(g * u), u constant: H u
        for gk in grads:
            u = g.new_leaf(g.vars[gk].shape)       # a leaf: its .grad is g's value, checked too
            g.steps.append(("binary", "mul", gk, u))
            g.op_result(g.vars[gk].shape, BOUND, g.vars[gk].deps | {u})
            g.steps.append(("reduce", "sum", len(g.vars) - 1, None, False))
            g.op_result((), BOUND, g.vars[gk].deps | {u})
    if form in ("mixed", "free"):
        post = ["unary", "scalar", "binary", "reduce", "view", "take", "tview", "rec"]
        if d.bool(0.4):
            post.append("raw")                     # a write between the two backward passes
        # the gradients' own bounds are not known: no exp of them (bound large)
        if g.random_steps(d.int(1, 4), post) == "end":
            return g.finish()
    z = g.choice_output()
    zseed = g.seed_for(g.vars[z].shape)
    if d.bool(0.5):
        g.steps.append(("backward", z, zseed, None))
    else:
        outs = tuple(g.leaf_vars())
        g.steps.append(("grad", z, outs, zseed, False, ()))
        for k in outs:
            g.op_result(g.vars[k].shape, BOUND, frozenset())
    return g.finish()


def _parents_by_var(steps):
    """Each variable's direct operands, from the steps (in creation order)."""
    out = []
    for s in steps:
        kind = s[0]
        if kind == "leaf":
            out.append(())
        elif kind in ("unary", "reduce", "tview"):
            out.append((s[2],))
        elif kind == "scalar":
            out.append((s[2],))
        elif kind == "binary":
            out.append((s[2], s[3]))
        elif kind in ("view", "take"):
            out.append((s[1],))
        elif kind == "grad":
            out.extend([(s[1],) + tuple(s[2])] * len(s[2]))
    return out


def _ancestors(steps, k):
    par = _parents_by_var(steps)
    seen, todo = set(), [k]
    while todo:
        for q in par[todo.pop()]:
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return seen


def _grad_level(g, y, inputs, create_graph, zero_none):
    """A ``grad`` step of y with respect to ``inputs``: its outputs are new variables
    (None outputs replaced by zeros where ``zero_none``, in both libraries alike)."""
    yv = g.vars[y]
    g.steps.append(("grad", y, inputs, g.seed_for(yv.shape), create_graph,
                    tuple(sorted(yv.deps)), zero_none))
    out = []
    for k in inputs:
        out.append(g.op_result(g.vars[k].shape, BOUND / 100, yv.deps))
        g.vars[out[-1]].gradient = True
    return out


def _scalar_of(g, grads, form):
    """sum(g * g) (a penalty) or sum(g * u) for a new leaf u (a product with a
    direction) of each gradient, summed: one scalar variable."""
    total = None
    for gk in grads:
        if form == "hvp":
            u = g.new_leaf(g.vars[gk].shape)
            g.steps.append(("binary", "mul", gk, u))
            deps = g.vars[gk].deps | {u}
        else:
            g.steps.append(("binary", "mul", gk, gk))
            deps = g.vars[gk].deps
        g.op_result(g.vars[gk].shape, BOUND, deps)
        g.steps.append(("reduce", "sum", len(g.vars) - 1, None, False))
        k = g.op_result((), BOUND, deps)
        if total is not None:
            g.steps.append(("binary", "add", total, k))
            k = g.op_result((), BOUND, g.vars[total].deps | deps)
        total = k
    return total


def make_higher_order_program(d, known_bugs_excluded=True):
    """Gradients of gradients to the third (sometimes fourth) order with
    ``create_graph=True`` at every level but the last, with respect to leaves and
    to non-leaf tensors of the graph (intermediates, and a lower level's gradients):
    each level a penalty ``sum(g * g)`` or a product with a direction leaf, then
    sometimes more ops; the last level by ``backward`` or ``tg.autograd.grad``.
    Gradients that come back None (an input a level does not reach) are replaced
    by zeros in both libraries, so later levels can use every gradient."""
    g = Gen(d, "higher_order", known_bugs_excluded)
    shape = g.base_shape()
    g.new_leaf(shape)
    for _ in range(d.int(0, 1)):
        g.new_leaf(d.choice([shape, shape[-1:], ()]))
    fwd = ["unary", "scalar", "binary", "reduce", "view", "take", "tview", "rec"]
    if d.bool(0.2):
        fwd.append("raw")
    if g.random_steps(d.int(1, 5), fwd) == "end":
        return g.finish()
    y = g.choice_output()
    levels = 3 if d.bool(0.8) else 4
    g.notes.add("third" if levels == 3 else "fourth")
    post = ["unary", "scalar", "binary", "reduce", "view", "take", "tview"]
    start = 0                     # the first variable of this level's own computation
    prev = []                     # the last level's gradients
    for level in range(1, levels):
        if level == 1 and d.bool(0.35):
            # a write no graph records into an intermediate y's graph read, which
            # the non-leaf input below is drawn from now and then
            written = [k for k in sorted(_ancestors(g.steps, y))
                       if not g.vars[k].leaf and not g.vars[k].dead]
            if written:
                g.step_raw(target=d.choice(written))
        leaves = [k for k in g.leaf_vars() if k in g.vars[y].deps] or g.leaf_vars()[:1]
        inputs = list(leaves if d.bool(0.7) else [d.choice(leaves)])
        # A non-leaf input: an intermediate y was computed from by the program's own ops.
        # From a second level on, only those of this level (the last gradients and what
        # was computed from them): an intermediate of an earlier level reaches y also
        # through the backward formulas, and whether a formula reads it (the quotient
        # a / b in tapegrad's division rule, not in PyTorch's) is each library's choice.
        nonleaf = [k for k in sorted(_ancestors(g.steps, y))
                   if k >= start and not g.vars[k].leaf and not g.vars[k].dead]
        if len(prev) > 1:
            # gradients of one call with several inputs: tapegrad computes one from
            # another (the adjoint of an intermediate is the tensor it returns, then
            # carried on to the leaves), the harness's PyTorch returns clones, so a
            # path from a sibling gradient to this one is each library's choice
            nonleaf = [k for k in nonleaf if k not in prev]
        if nonleaf and d.bool(0.4):
            # now and then one written without a record (raw) after y's graph read
            # it: its gradient is the one with respect to the value that graph read
            raw = {m for st in g.steps if st[0] == "raw" for m in g.family_of(st[1])}
            written = [k for k in nonleaf if k in raw]
            k = d.choice(written if written and d.bool(0.8) else nonleaf)
            inputs.append(k)
            g.notes.add("nonleaf" if level == 1 else "wrt_gradient")
            if k in raw:
                g.notes.add("written_input")
        inputs = tuple(sorted(set(inputs)))
        start = len(g.vars)
        grads = prev = _grad_level(g, y, inputs, True, True)
        y = _scalar_of(g, grads, d.choice(("penalty", "hvp")))
        if d.bool(0.3):                          # more ops on the way to the next level
            before = len(g.vars)
            if g.random_steps(d.int(1, 2), post) == "end":
                return g.finish()
            if len(g.vars) > before:
                y = g.choice_output(lambda k: k >= before or k == y)
    if d.bool(0.5):
        g.steps.append(("backward", y, g.seed_for(g.vars[y].shape), None))
    else:
        _grad_level(g, y, tuple(g.leaf_vars()), False, True)
    return g.finish()


def _choice_output(self, pred=lambda k: True):
    alive = [k for k in self.alive() if pred(k)]
    # mostly the newest variable (the end of the chain), sometimes any
    return alive[-1] if self.d.bool(0.6) else self.d.choice(alive)


def _finish(self):
    compare = [k for k, v in enumerate(self.vars) if not v.dead or v.none]
    return Program(self.family, self.leaves, self.steps, compare, sorted(self.notes))


Gen.choice_output = _choice_output
Gen.finish = _finish


# -- the interpreter ---------------------------------------------------------------------------
class Result:
    def __init__(self):
        self.error = None          # (step index, exception type name, message)
        self.values = {}           # variable -> final value (ndarray), or None
        self.grads = []            # per leaf: .grad as ndarray, or None
        self.grads_kept = True     # tapegrad: a failed backward left every .grad as it was


class _TG:
    name = "tapegrad"

    def __init__(self):
        import tapegrad as tg
        self.m = tg

    def leaf(self, a):
        return self.m.tensor(a.copy(), requires_grad=True)

    def const(self, a):
        return a.copy()                     # an ndarray operand, as user code writes it

    def key(self, key):
        return np_key(key)

    def unary(self, name, x):
        m = self.m
        return {"sin": m.sin, "cos": m.cos, "tanh": m.tanh, "exp": m.exp,
                "square": m.square, "neg": lambda t: -t}[name](x)

    def no_grad(self):
        return self.m.no_grad()

    def numpy(self, t):
        return None if t is None else np.array(t.numpy(), dtype=np.float64, copy=True)

    def data_isub(self, t, c):
        t.data -= c

    def sgd(self, t, lr):
        t.data -= lr * t.grad

    def autograd_grad(self, y, xs, seed, create_graph):
        seed = None if seed is None else [seed]
        return self.m.autograd.grad([y], xs, seed, create_graph=create_graph, allow_unused=True)

    def clone(self, t):
        return t * 1.0

    def zeros(self, shape):
        return self.m.zeros(shape)


class _Torch:
    name = "torch"

    def __init__(self):
        import torch
        self.m = torch

    def leaf(self, a):
        return self.m.tensor(a.copy(), dtype=self.m.float64, requires_grad=True)

    def const(self, a):
        return self.m.tensor(np.asarray(a, dtype=np.float64))

    def key(self, key):
        return torch_key(key)

    def unary(self, name, x):
        m = self.m
        return {"sin": m.sin, "cos": m.cos, "tanh": m.tanh, "exp": m.exp,
                "square": m.square, "neg": lambda t: -t}[name](x)

    def no_grad(self):
        return self.m.no_grad()

    def numpy(self, t):
        return None if t is None else np.array(t.detach().numpy(), dtype=np.float64, copy=True)

    def data_isub(self, t, c):
        # ``t.data -= c`` in PyTorch bypasses the version counter (no error, a silently
        # wrong gradient); tapegrad's .data writes count as writes.  The equivalent that
        # PyTorch does check: the same write under no_grad.
        with self.m.no_grad():
            t -= c

    def sgd(self, t, lr):
        with self.m.no_grad():
            t -= lr * t.grad

    def autograd_grad(self, y, xs, seed, create_graph):
        seed = None if seed is None else [self.const(seed)]
        outs = self.m.autograd.grad([y], xs, seed, create_graph=create_graph, allow_unused=True)
        # PyTorch may hand back one tensor for several inputs (the gradient of a + b for
        # both), or an expanded one (stride 0, which refuses in-place writes); tapegrad
        # gives each input its own array.  A clone each (differentiable: an identity).
        return [None if o is None else o.clone() for o in outs]

    def clone(self, t):
        return t.clone()

    def zeros(self, shape):
        return self.m.zeros(shape, dtype=self.m.float64)


def run(prog, lib, functional=False):
    """Run ``prog`` on ``lib`` ("tg" or "torch"); with ``functional`` (torch only) the
    recorded writes are computed out of place (see the module docstring).  Returns a
    Result holding only NumPy arrays and strings: no tensor outlives the call."""
    B = _TG() if lib == "tg" else _Torch()
    res = Result()
    vals, parent, leaves, leaf_vars = [], {}, [], set()

    def value(val):
        if val[0] == "f":
            return val[1]
        if val[0] == "c":
            return B.const(val[1])
        return vals[val[1]] * val[2]

    def root(k):
        while k in parent:
            k = parent[k][0]
        return k

    def grads():
        return [B.numpy(x.grad) for x in leaves]

    def rec_write(t, kind, arg):
        x = vals[t]
        if kind in ("iadd_c", "imul_c", "isub_c", "idiv_c"):
            return {"iadd_c": lambda: x + arg, "imul_c": lambda: x * arg,
                    "isub_c": lambda: x - arg, "idiv_c": lambda: x / arg}[kind]()
        if kind in ("iadd_v", "imul_v", "isub_v"):
            o = vals[arg]
            return {"iadd_v": lambda: x + o, "imul_v": lambda: x * o,
                    "isub_v": lambda: x - o}[kind]()
        if kind == "idiv_v":
            return x / (vals[arg] * vals[arg] + 0.5)
        y = B.clone(x)                     # a fresh tensor no graph saved: written in place
        key = B.key(arg[0])
        if kind == "set":
            y[key] = value(arg[1])
        elif kind == "item_iadd":
            y[key] += arg[1]
        else:
            y[key] *= arg[1]
        return y

    def rec_inplace(t, kind, arg):
        if kind == "iadd_c":
            vals[t] += arg
        elif kind == "imul_c":
            vals[t] *= arg
        elif kind == "isub_c":
            vals[t] -= arg
        elif kind == "idiv_c":
            vals[t] /= arg
        elif kind == "iadd_v":
            vals[t] += vals[arg]
        elif kind == "imul_v":
            vals[t] *= vals[arg]
        elif kind == "isub_v":
            vals[t] -= vals[arg]
        elif kind == "idiv_v":
            vals[t] /= (vals[arg] * vals[arg] + 0.5)
        elif kind == "set":
            vals[t][B.key(arg[0])] = value(arg[1])
        elif kind == "item_iadd":
            vals[t][B.key(arg[0])] += arg[1]
        elif kind == "item_imul":
            vals[t][B.key(arg[0])] *= arg[1]
        else:
            raise AssertionError(kind)

    def raw_write(t, kind, arg):
        if kind == "ng_iadd":
            with B.no_grad():
                vals[t] += arg
        elif kind == "ng_imul":
            with B.no_grad():
                vals[t] *= arg
        elif kind == "ng_set":
            with B.no_grad():
                vals[t][B.key(arg[0])] = value(arg[1])
        elif kind == "data_isub":
            B.data_isub(vals[t], arg)
        elif kind == "detach_set":
            vals[t].detach()[B.key(arg[0])] = value(arg[1])
        else:
            raise AssertionError(kind)

    for si, s in enumerate(prog.steps):
        kind = s[0]
        backward_step = kind in ("mid", "backward", "grad")
        before = grads() if backward_step and lib == "tg" else None
        try:
            if kind == "leaf":
                leaf_vars.add(len(vals))
                vals.append(B.leaf(prog.leaves[s[1]]))
                leaves.append(vals[-1])
            elif kind == "unary":
                vals.append(B.unary(s[1], vals[s[2]]))
            elif kind == "scalar":
                x, c = vals[s[2]], s[3]
                vals.append({"add": lambda: x + c, "rsub": lambda: c - x, "mul": lambda: x * c,
                             "div": lambda: x / c, "pow2": lambda: x ** 2}[s[1]]())
            elif kind == "binary":
                a, b = vals[s[2]], vals[s[3]]
                vals.append({"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                             "div": lambda: a / (b * b + 0.5)}[s[1]]())
            elif kind == "reduce":
                x = vals[s[2]]
                if lib == "tg":
                    vals.append(getattr(x, s[1])(axis=s[3], keepdims=s[4]))
                elif s[3] is None and not s[4]:
                    vals.append(getattr(x, s[1])())
                else:
                    dim = tuple(range(x.ndim)) if s[3] is None else s[3]
                    f = B.m.sum if s[1] == "sum" else B.m.mean
                    vals.append(f(x, dim=dim, keepdim=s[4]))
            elif kind == "view":
                x = vals[s[1]]
                if len(s[2]) == x.ndim and all(p[0] == "i" for p in s[2]):
                    # one integer per axis: NumPy's scalar, a copy, which
                    # tapegrad follows where PyTorch makes a view
                    v = x[B.key(s[2])]
                    vals.append(v if lib == "tg" else v.clone())
                else:
                    parent[len(vals)] = (s[1], B.key(s[2]))
                    vals.append(x[B.key(s[2])])
            elif kind == "take":
                vals.append(vals[s[1]][B.key(s[2])])
            elif kind == "tview":
                vals.append(B.unary(s[1], vals[s[2]][B.key(s[3])]))
            elif kind == "rec":
                t = s[1]
                if not functional or root(t) in leaf_vars:
                    rec_inplace(t, s[2], s[3])
                else:
                    new = rec_write(t, s[2], s[3])
                    k, cur = t, new
                    while k in parent:                      # up to the bases
                        b, key = parent[k]
                        nb = B.clone(vals[b])
                        nb[key] = cur
                        k, cur = b, nb
                    r = k
                    vals[r] = cur
                    for m in sorted(parent):                # every view again, from the base
                        if root(m) == r:
                            b, key = parent[m]
                            vals[m] = vals[b][key]
            elif kind == "raw":
                raw_write(s[1], s[2], s[3])
            elif kind == "mid":
                seed = None if s[2] is None else B.const(s[2])
                vals[s[1]].backward(seed, retain_graph=True)
            elif kind == "sgd":
                B.sgd(vals[s[1]], s[2])
            elif kind == "grad":
                outs = list(B.autograd_grad(vals[s[1]], [vals[k] for k in s[2]], s[3], s[4]))
                if len(s) > 6 and s[6]:          # zero_none: None -> zeros, no graph
                    outs = [B.zeros(tuple(vals[k].shape)) if o is None else o
                            for o, k in zip(outs, s[2])]
                vals.extend(outs)
            elif kind == "backward":
                seed = None if s[2] is None else B.const(s[2])
                ins = None if s[3] is None else [vals[k] for k in s[3]]
                vals[s[1]].backward(seed, inputs=ins)
            else:
                raise AssertionError(kind)
        except Exception as e:  # noqa: BLE001 - every error is part of the comparison
            res.error = (si, type(e).__name__, str(e))
            if before is not None:
                after = grads()
                res.grads_kept = all(_same(a, b) for a, b in zip(before, after))
            break
    if res.error is None:
        res.values = {k: B.numpy(vals[k]) for k in prog.compare if k < len(vals)}
        res.grads = grads()
    return res


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
