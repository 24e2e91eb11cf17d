"""Reverse mode: seed the roots' adjoints, walk the graph, fill ``.grad``.

Every reverse pass -- ``backward()``, ``backward(inputs=)``,
``autograd.grad`` with or without ``create_graph``, the transforms'
``reverse`` -- is one :func:`walk` with options, over an engine (the
compiled sweep here, :class:`Sweep`; p vectors and the recorded
``create_graph`` walk in the transforms layer), so hooks, ``retain_grad``,
which records run, anomaly checks, accumulation and freeing are decided
once.  Nothing observable changes until the walk has finished without
error: ``.grad`` (leaves', inputs', retained gradients) is updated and the
graph is freed only afterwards, so a failed backward leaves the tape, other
graphs and accumulated gradients as they were.  Tensor hooks and anomaly
checks are the only Python that runs inside a sweep, and only when there
are any: the compiled sweep stops at the records that need them.
"""
import threading

import numpy as np

from . import hooks as H
from . import fused as _fused
from .fused import run as fused_run
from ..kernels._views import SMALL, V1, VALS
from .graph import origin, view_codes
from ..kernels import sweep as _sw
from ..kernels.sweep import (graph_addresses, graph_of, layout, sweep, whole_addresses,
                             whole_layout)
from ..core.liveness import SAVES
from ..core.registry import OUTPUT, REGISTRY
from ..core.tape import Tape, current
from ..core.tensor import Tensor, _plain, bound


def _seed(t, gradient):
    shape = t.shape
    if gradient is None:
        if t.size != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs; this output "
                f"has shape {shape}: pass backward(gradient) with a seed of that shape")
        return np.ones(1)
    g = gradient._data if isinstance(gradient, Tensor) else gradient
    try:
        g = np.asarray(g)
    except ValueError as e:
        raise TypeError(f"backward: the gradient is not a rectangular array: {e}") from None
    if g.dtype.kind not in "biuf":
        raise TypeError(f"backward: the gradient must be real numbers, got dtype {g.dtype}")
    if g.shape != shape and not (g.ndim == 0 and t.size == 1):
        raise RuntimeError(
            f"Mismatch in shape: gradient has shape {g.shape} and output has shape "
            f"{shape}; the gradient must have the output's shape")
    return np.asarray(g, dtype=np.float64).reshape(-1)


#: ``backward()``'s seed of a one-element root (read-only: never handed out)
_ONE = np.ones(1)
_ONE.flags.writeable = False


# -- nesting ------------------------------------------------------------------------
_nesting = threading.local()


class differentiating:
    """Marks ``leaves`` as being differentiated by a transform while its
    function runs (a context manager; frames nest per thread).

    A backward inside the function that reaches one of them would hand the
    transform a number with no derivative attached -- tapegrad does not record
    backward passes -- so ``check_nested`` raises instead.  ``strict``: any
    tensor that requires grad and is not among the inner transform's own
    inputs is refused (used where the result must carry every derivative on).
    """

    __slots__ = ("ids", "strict")

    def __init__(self, leaves, strict=False):
        self.ids = {id(x) for x in leaves}
        self.strict = strict

    def __enter__(self):
        stack = _nesting.__dict__.setdefault("stack", [])
        stack.append(self)
        return self

    def __exit__(self, *exc):
        _nesting.stack.pop()


def in_transform():
    """Whether a function transform is running a function on this thread
    (``Tensor.item`` and ``float()`` refuse to drop a gradient there)."""
    return bool(_nesting.__dict__.get("stack"))


def check_nested(tape, reached, upto, inputs=()):
    """Raise if a backward reached a leaf an enclosing transform differentiates
    (see :class:`differentiating`); nothing has changed yet when it raises."""
    stack = _nesting.__dict__.get("stack")
    if not stack:
        return
    own = {id(x) for x in inputs}
    strict = any(fr.strict for fr in stack)
    for r, leaf in tape.leaves.items():
        if r >= upto or not reached[r]:
            continue
        if any(id(leaf) in fr.ids for fr in stack) or strict and id(leaf) not in own:
            raise NotImplementedError(
                f"a backward pass inside a function being differentiated reached a tensor "
                f"the enclosing differentiation needs (shape {leaf.shape}), and tapegrad "
                "does not differentiate through backward passes: its result would carry no "
                "derivative. Compute inner derivatives with tg.grad / tg.value_and_grad on "
                "the function's own arguments (they nest), pass tensors the inner function "
                "depends on as its arguments rather than through a closure, or use "
                "tg.hessian / tg.hvp")


def _readers(tape, arg0, args, upto, graph):
    """``users(s)``: the records below ``upto`` that read record s, ascending
    -- among the records of ``graph`` only, when it is given (a backward's
    graph holds every record that matters to it, and searching it alone
    costs what the graph costs) -- and the mask of the records searched."""
    if graph is None:
        return (lambda s: np.searchsorted(arg0, np.flatnonzero(args == s), "right") - 1), None
    starts = arg0[graph]
    lens = arg0[graph + 1] - starts
    pos = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
    read, owner = tape.args[pos], np.repeat(graph, lens)
    mask = np.zeros(upto, np.bool_)
    mask[graph] = True
    return (lambda s: np.sort(owner[read == s])), mask


def check_stale(tape, reached, upto, inputs=None, graph=None, own=False):
    """Raise PyTorch's in-place error if a backward used a saved value that
    was written in place after it was recorded (``Tape.stale``).

    ``inputs``: the records of ``backward(inputs=...)`` / ``autograd.grad``'s
    inputs; then only records with one of them below (on a path from the
    root down to one) count -- PyTorch runs no other node -- though the sweep
    reached more; and, with ``own``, the inputs' own records: PyTorch's
    ``backward(inputs=)`` runs a non-leaf input's node (``autograd.grad``
    does not), so a write into a value that node saved raises there alone.
    ``graph``: the records the backward's graph holds (``Adjoints.order``),
    if it has them."""
    if not tape.stale:
        return
    from ..kernels.codes import K_HOST, SHIFT
    from ..kernels.optable import READS_INPUTS, READS_OUTPUT
    arg0 = tape.arg0[:upto + 1]
    args = tape.args[:int(arg0[-1])]
    users_of, searched = _readers(tape, arg0, args, upto, graph)
    on_path = None
    for s, what in _with_views(tape, arg0, args, upto, users_of, searched, graph).items():
        if s >= upto or searched is not None and not searched[s]:
            continue
        users = users_of(s)
        if reached[s] and READS_OUTPUT[int(tape.op[s])]:
            users = np.append(users, s)
        for c in users:
            op = int(tape.op[c])
            if reached[c] and (READS_INPUTS[op] or READS_OUTPUT[op] and c == s
                               or op >> SHIFT == K_HOST and not _checks_own_reads(tape, c)):
                if _reads_only_the_constant(tape, c, s):
                    continue
                if inputs is not None:
                    # PyTorch's autograd.grad runs a node only if an input lies
                    # below it, not the inputs' own nodes: a write into an input
                    # whose node saved its value (exp's) is no error by itself
                    if on_path is None:
                        on_path = _depends_on(arg0, args, upto, inputs)
                    if not (own and on_path[c] or on_path[args[arg0[c]:arg0[c + 1]]].any()):
                        continue
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been "
                    f"modified by an inplace operation: {what}, saved by "
                    f"{REGISTRY[op].name}Backward (record {c}), was written in place after "
                    "the graph was recorded. Record the graph again after the write, or "
                    "write into a copy (x = x.copy() / x * 1.0)")


def _with_views(tape, arg0, args, upto, users_of, searched, graph=None):
    """``tape.stale`` and, with the same note, every record below ``upto`` that
    is a view of a stale one (and views of those): a write into a tensor
    reaches the values of the views taken of it, live or not, as in PyTorch.
    ``users_of`` and ``searched``: see :func:`_readers`; ``graph``: the
    records searched, when a graph search gave them."""
    views = view_codes()
    marked = tape.stale
    if searched is None:
        work = [s for s in marked if s < upto]
    elif graph is not None and len(marked) > len(graph):
        # graphs kept alive beside this one, marked by every write of a loop,
        # cost this backward nothing: it looks at its own records
        work = sorted(s for s in graph.tolist() if s < upto and s in marked)
    else:
        work = [s for s in marked if s < upto and searched[s]]
    stale = {s: marked[s] for s in work}
    while work:
        s = work.pop()
        for c in users_of(s):
            c = int(c)
            if c in stale or args[arg0[c]] != s:
                continue
            if int(tape.op[c]) in views or c in tape.aliases:
                stale[c] = stale[s]
                work.append(c)
    return stale


def _reads_only_the_constant(tape, c, s):
    """Whether record c, a product or quotient with a constant operand (an
    ndarray, which gets no gradient), needs nothing of operand s's value: the
    derivative of ``s * k`` and of ``s / k`` in s reads only k, as PyTorch's
    saves only k there."""
    from ..kernels import codes as C
    op = int(tape.op[c])
    if op not in (_MUL, _DIV) or c == s:
        return False
    a0 = int(tape.arg0[c])
    if int(tape.arg0[c + 1]) - a0 != 2:
        return False
    a, b = int(tape.args[a0]), int(tape.args[a0 + 1])
    const = C.code(C.K_NONE, C.CONST)
    if a == s and b != s and int(tape.op[b]) == const:
        return True
    return op == _MUL and b == s and a != s and int(tape.op[a]) == const


def _depends_on(arg0, args, upto, recs):
    """Which records ``0 .. upto-1`` depend on one of the records ``recs``
    (recording order is topological: one pass upwards)."""
    dep = np.zeros(upto, np.bool_)
    recs = [int(r) for r in recs if 0 <= r < upto]
    if not recs:
        return dep
    dep[recs] = True
    for r in range(min(recs) + 1, upto):
        if not dep[r]:
            a, b = arg0[r], arg0[r + 1]
            if b > a and dep[args[a:b]].any():
                dep[r] = True
    return dep


def _checks_own_reads(tape, c):
    """Whether host record c is a ``tg.Function`` whose backward checks the
    values it reads itself (a create_graph gradient: its pass over the first
    graph runs ``check_stale`` on the records it reads), so that a write into
    one of its parents is no error unless that pass reads the value."""
    h = tape.host.get(int(c))
    return isinstance(h, tuple) and bool(h) and getattr(h[0], "checks_own_reads", False)


from ..kernels import codes as _C  # noqa: E402  (op codes of check_stale)
_MUL, _DIV = _C.code(_C.K_NARY, _C.MUL), _C.code(_C.K_NARY, _C.DIV)


def _freed_error():
    return RuntimeError(
        "Trying to backward through the graph a second time (or directly access "
        "saved values after they have already been freed). Saved intermediate "
        "values of the graph are freed when you call .backward(). Specify "
        "retain_graph=True if you need to backward through the graph a second time.")


class Adjoints:
    """The adjoints of records ``0 .. upto-1``, in two arenas.

    Leaves' adjoints get a fresh arena of their own, so a leaf's gradient can
    be handed out as a view of it without copying and without keeping the
    arena of intermediate adjoints alive; that one is the tape's scratch
    buffer, reused from one backward to the next.  Neither is zeroed: the
    first VJP to reach a record writes its adjoint (see ``claim`` in
    kernels/_views.py), and ``reached`` says which have been written.
    ``aptr`` holds each record's adjoint address for the kernels; ``adj[r]``
    is a NumPy view for Python (host records, leaves).
    """

    #: whether the adjoints are float32 (a float32 sweep: see ``_float32_graph``)
    float32 = False
    #: the arenas' addresses, when known (None: read them off the arrays)
    lbase = abase = None

    def __init__(self, tape, upto, first=None, float32=False):
        """``first``: lay out only the graph that records ``first .. upto-1``
        reach (``order`` lists it, descending), in time that grows with that
        graph and not with the rest of the tape; None: every record below
        ``upto`` (``order`` is None).  ``float32``: the root is float32 --
        then the adjoints are float32 if the whole graph is
        (:func:`_float32_graph`)."""
        if first is None and not (float32 and tape.f32[:upto].any()):
            # a float64 whole layout (small graphs): one compiled call fills
            # arrays made here (one that returns arrays pays more to hand
            # them over than a small layout costs)
            self.order = None
            self.voff, self.off = np.empty(upto, np.int64), np.empty(upto, np.int64)
            self.leaf, self.aptr = np.empty(upto, np.bool_), np.empty(upto, np.int64)
            A = tape.scratch
            if A is None:
                tape.scratch = A = np.empty(1024)
            self.L, self.lbase, self.abase, inner = whole_layout(
                tape.op, tape.size, upto, SMALL, self.voff, self.off, self.leaf, self.aptr,
                A[:1], A.size)
            if A.size < inner:
                tape.scratch = A = np.empty(max(inner, 1024))
                self.lbase, self.abase = whole_addresses(self.off, self.leaf, self.L[:1], A[:1],
                                                         upto, self.aptr)
            self.A = A
            self.size = tape.size
            self.reached = np.zeros(upto, np.bool_)
            return
        if first is None:
            self.order = None
            self.voff, self.off, self.leaf, inner, outer = layout(tape.op, tape.size, upto, SMALL)
        else:
            self.voff = tape.voff  # mid-size values' offsets, kept as they are recorded
            # records are written once, when recorded: the graph of a root
            # changes only when the tape is compacted or reset (a new
            # ``lkey``), so a retained graph's next backward reuses it; a
            # record freed since changes ``n_freed``, and the search runs again
            key = (tape.lkey, first, upto, tape.n_freed)
            if tape.graph is not None and tape.graph[0] == key:
                found = tape.graph[1]
            else:
                # the marks the search leaves are exactly the graph's records
                seen = tape.zeros(np.uint8, upto)
                found = graph_of(tape.op, tape.size, tape.arg0, tape.args, first, upto, seen)
                tape.rezero(seen, found[0])
                tape.graph = (key, found)
            self.order, self.off, self.leaf, inner, outer = found
        if float32 and _float32_graph(tape, upto, self.order, self.leaf):
            self.float32 = True
            if tape.scratch32 is None or tape.scratch32.size < inner:
                tape.scratch32 = np.empty(max(inner, 1024), np.float32)
            self.A = tape.scratch32
            self.L = np.empty(outer, np.float32)
        else:
            if tape.scratch is None or tape.scratch.size < inner:
                tape.scratch = np.empty(max(inner, 1024))
            self.A = tape.scratch
            self.L = np.empty(outer)
        self.size = tape.size
        whole = self.order is None
        # (the arenas' first elements stand for them: the interpreted tier
        # prices a call by the sizes of the arrays it is given)
        self.aptr, self.lbase, self.abase = graph_addresses(
            _NO_ORDER if whole else self.order, self.off, self.leaf, self.L[:1], self.A[:1],
            upto, whole)
        # with a graph, only its records are ever reached: backward() gives
        # the marks back to the tape's scratch (Tape.rezero)
        self.reached = (np.zeros(upto, np.bool_) if self.order is None
                        else tape.zeros(np.bool_, upto))

    def __getitem__(self, r):
        # from the address: the sweep may have let r share a consumer's adjoint
        if self.leaf[r]:
            base, b0 = self.L, self.lbase
        else:
            base, b0 = self.A, self.abase
        if b0 is None:
            b0 = base.ctypes.data
        o = (int(self.aptr[r]) - b0) // base.itemsize
        return base[o:o + self.size[r]]

    def tape_arrays(self, tape):
        """The tuple the sweep reads (kernels/_views.py): ``tape.arrays`` and
        ``reached``; a float32 sweep reads float32 copies of the small values
        (``v1``, ``vals``), whose dtype tells its kernels apart."""
        T = tape.arrays(self) + (self.reached,)
        if self.float32:
            # (records outside the graph may hold float64 numbers that
            # overflow float32: their entries are never read)
            with np.errstate(over="ignore"):
                T = T[:V1] + (T[V1][:tape.n].astype(np.float32),
                              T[VALS][:max(tape.nv, 1)].astype(np.float32)) + T[VALS + 1:]
        return T

    def value(self, tape, r, shape):
        """Record r's recorded value (float64, or float32 for a large float32
        value), for a host VJP."""
        n = tape.size[r]
        if n == 1:
            flat = tape.v1[r:r + 1]
        elif n <= SMALL:
            o = self.voff[r]
            flat = tape.vals[o:o + n]
        else:
            flat = np.ravel(tape.refs[tape.rix[r]])
        return flat.reshape(shape)

    def fresh(self, r, shape):
        """Record r's adjoint, reshaped, for a VJP to write with ``out=`` -- or
        None if it already holds a contribution (then use ``add``)."""
        if self.reached[r]:
            return None
        self.reached[r] = True
        return self[r].reshape(shape)

    def add(self, r, g):
        """Accumulate ``g`` (any shape with r's size) into record r's adjoint."""
        view = self[r]
        if self.reached[r]:
            view += g.reshape(-1)
        else:
            view[:] = g.reshape(-1)
            self.reached[r] = True


def _float32_graph(tape, upto, order, leaf):
    """Whether the graph below ``upto`` sweeps in float32: its records (those
    of ``order``, or, for a tape laid out whole, every record below
    ``upto``) hold large values (more than ``SMALL`` elements), every one of
    them is float32 (``tape.f32``), and so is every leaf among them.
    Anything float64 keeps the sweep in float64, as do small values only:
    a float32 sweep would save them nothing and compile every kernel a
    second time."""
    if not tape.f32[:upto].any():  # the common no, without indexing the graph
        return False
    recs = np.arange(upto) if order is None else order
    big = tape.size[recs] > SMALL
    if not big.any() or not tape.f32[recs[big]].all():
        return False
    leaves = tape.leaves
    for r in recs[leaf[recs]].tolist():
        x = leaves.get(r)
        if x is not None and x.dtype != np.float32:
            return False
    return True


#: ``graph_addresses``' order for a whole layout (it walks every record)
_NO_ORDER = np.zeros(0, np.int64)

#: tapes up to this many records are laid out whole at backward (see backward)
GRAPH_SEARCH_FROM = 4096
#: stale records (Tape.stale) from which a backward searches its graph on any
#: tape: the in-place check then looks at the graph's records only
STALE_SEARCH_FROM = 32


# -- the walk ---------------------------------------------------------------------------
# ``backward()``, ``backward(inputs=)``, ``autograd.grad`` (with or without
# ``create_graph``) and the function transforms' ``reverse`` are one walk over
# the graph (:func:`walk`), with options: which gradients are wanted (every
# leaf reached, or given tensors), whether they go into ``.grad`` or are
# returned, whether the graph is freed.  What the backward does at each
# record -- compiled sweep, or recorded ops for ``create_graph`` -- is the
# walk's *engine*: :class:`Sweep` here (one adjoint vector), p vectors at once
# and the recorded walk in the transforms layer (``tensor_grads``,
# ``create_graph``).  Hooks, ``retain_grad``, which records run, anomaly
# checks, accumulation and freeing are decided once, in the walk.


def root_span(tape, root):
    """Records a backward from ``root`` covers: up to root, plus the later
    outputs of root's multi-output op (its VJP reads them as one span)."""
    upto = root + 1
    if tape.op[root] == OUTPUT:  # the op's later outputs belong to its VJP's span
        u = root - 1 - int(tape.ip[tape.ip0[root]])
        while upto < tape.n and tape.op[upto] == OUTPUT and tape.args[tape.arg0[upto]] == u:
            upto += 1
    return upto


def graph_tape(roots, who="backward()"):
    """The tape of the roots that are not leaves, checked: this thread's, and
    none of them freed (None when every root is a leaf)."""
    tape = None
    for t in roots:
        if t._tok is None:
            continue
        if tape is None:
            tape = t._tok.tape
            if tape is None:           # its epoch is over: the graph was freed
                raise _freed_error()
            if tape is not current():
                raise RuntimeError(f"{who} must run on the thread that recorded the graph")
        if t._tok.tape is not tape or tape.freed[t._rec]:
            raise _freed_error()
    return tape


class Sweep:
    """The walk's engine for one adjoint vector: the compiled sweep over
    :class:`Adjoints` (record by record, checking each gradient, in anomaly
    mode).  Adjoints are arrays; ``grad(r)`` is record r's as a ``(1, size)``
    view, which hooks may write."""

    record = False
    p = 1

    def __init__(self, tape, upto, first, float32=False):
        """``first``: the lowest root (its graph may be searched)."""
        tape.arg0[tape.n] = tape.na  # closes the last record's parents for graph_of
        # a fresh tape of a few thousand records is laid out whole, faster than
        # the graph search; past that, only the roots' graph (its cost must not
        # grow with unrelated graphs that live on the tape); and so too once the
        # tape holds freed records (graphs backwarded while others stayed alive:
        # a whole layout would size the adjoint arenas by every record the tape
        # ever held), or many stale ones, which the in-place check looks at in
        # the graph
        search = (upto > GRAPH_SEARCH_FROM or tape.n_freed > 0
                  or len(tape.stale) > STALE_SEARCH_FROM)
        self.tape = tape
        self.adj = adj = Adjoints(tape, upto, first if search and first is not None else None,
                                  float32)
        # the tape's scratch arena is this walk's until it is done: a walk
        # nested in it (a host VJP that differentiates: tg.checkpoint's
        # recomputation) lays its adjoints out in an arena of its own
        if adj.float32:
            tape.scratch32 = None
        else:
            tape.scratch = None
        self.T = adj.tape_arrays(tape)
        self.reached = adj.reached
        self.order = adj.order
        self.checked = type(tape) is not Tape  # anomaly mode swaps the tape's class

    def seed(self, r, s):
        self.adj.add(r, s)

    def run(self, start, stop):
        """Sweep records ``start .. stop+1``."""
        if self.checked:
            from .anomaly import checked_run
            checked_run(self.tape, self.adj, self.T, start, stop, _run)
        else:
            _run(self.tape, self.adj, self.T, start, stop)

    def reached_at(self, r):
        return bool(self.reached[r])

    def grad(self, r):
        """Record r's adjoint, a view hooks may write (one vector: flat)."""
        return self.adj[r]

    def capture(self, r):
        """Record r's adjoint as it is now (a parent may take its memory over)."""
        return self.adj[r][None, :].copy()

    def leaf(self, q):
        # a view of the leaf arena, which is this walk's own
        return self.adj[q][None, :]

    @staticmethod
    def add(a, b):
        return a + b

    def reached_leaves(self, upto):
        """(leaf, gradient) of every leaf record the sweep reached, in record
        order; the gradient is a view of the leaf arena."""
        tape, adj, reached, graph = self.tape, self.adj, self.reached, self.order
        if graph is None or len(tape.leaves) < graph.size:
            # (only the graph's records are ever reached: with fewer leaves on
            # the tape than records in the graph, the leaves are the shorter list,
            # and both are in record order)
            return [(leaf, adj[r]) for r, leaf in tape.leaves.items()
                    if r < upto and reached[r]]
        return [(tape.leaves[r], adj[r])
                for r in graph[adj.leaf[graph] & reached[graph]][::-1].tolist()
                if r in tape.leaves]

    def checks(self, upto, recs, inputs, own):
        tape = self.tape
        if self.checked and tape.sums:
            from .anomaly import check_saved
            check_saved(tape, self.reached)
        check_stale(tape, self.reached, upto, recs, graph=self.order, own=own)
        check_nested(tape, self.reached, upto, inputs)

    def finish(self, ran):
        """Free the op records ``ran`` marks that saved values (None: keep
        the graph), and give the scratch arrays back."""
        tape = self.tape
        if ran is not None:
            tape.after_backward(ran, self.T, self.order)
        if self.order is not None:
            tape.rezero(self.reached, self.order)
        if self.adj.float32:
            tape.scratch32 = self.adj.A
        else:
            tape.scratch = self.adj.A

    @staticmethod
    def store(x, g):
        """Accumulate gradient ``g`` (x's size) into ``x.grad``."""
        _accumulate(x, g.reshape(x.shape))


def backward(t, gradient=None, retain_graph=False):
    if not t._requires_grad:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn: "
            "create the inputs with requires_grad=True and compute the output with "
            "grad enabled (not under tg.no_grad())")
    if gradient is None and t._tok is not None and _quick(t, retain_graph):
        return
    # (a scalar root's implicit seed is a shared one: every use below copies it)
    seed = _ONE if gradient is None and t.size == 1 else _seed(t, gradient)
    if t._tok is None:  # a leaf: d t / d t = identity (never keep the caller's array)
        walk(None, None, 0, None, [(t, seed[None, :].copy())], retain_graph=retain_graph)
        return
    tape = t._tok.tape
    if tape is None:                   # its epoch is over: the graph was freed
        raise _freed_error()
    if tape is not current():
        raise RuntimeError("backward() must run on the thread that recorded the graph")
    root = t._rec
    if t._tok.tape is not tape or tape.freed[root]:
        raise _freed_error()
    # held for the whole walk: host VJPs and hooks are user code that may
    # record ops, and a compaction (renumbering records) must wait until the
    # sweep that walks them is over (tape_liveness.compact)
    with tape.walking():
        upto = root + 1 if tape.op[root] != OUTPUT else root_span(tape, root)
        eng = Sweep(tape, upto, root, t.dtype == np.float32)
        eng.adj.add(root, seed)
        walk(tape, eng, upto, None, retain_graph=retain_graph)


# -- a small backward in one call ---------------------------------------------------------
# The common backward -- ``loss.backward()`` of a one-element float64 loss in
# a training loop, on a tape without hooks, host records, in-place writes or
# freed records -- has nothing for Python to do between the layout and the
# gradients: :func:`~tapegrad.kernels.sweep.quick_backward` lays the
# adjoints out, seeds, sweeps and, when the backward ran every op record,
# frees them, in one compiled call that reads the tape through an array of
# addresses the tape keeps (``Tape.quick``).  Every other backward, and
# this one wherever that call declines, is the walk below; the two run the
# same sweep over the same layout, so their gradients are the same bits.

class _Quick:
    """The addresses ``quick_backward`` reads for one tape (``Q``) and the
    arrays behind them: the tape's, which the tape holds (the addresses are
    good while it holds these very arrays: ``fits``), and buffers of its own
    for the value offsets, adjoint addresses, reached marks and reached
    leaves it writes."""

    __slots__ = ("Q", "op", "args", "ip", "vals", "ptrs", "A", "voff", "aptr", "reached", "out",
                 "outer", "declined")

    def __init__(self, tape):
        # (the call runs graphs of at most _DOWN.size records: no buffer needs more)
        cap = min(len(tape.op), _sw._DOWN.size)
        self.op, self.args, self.ip, self.vals = tape.op, tape.args, tape.ip, tape.vals
        self.ptrs, self.A = tape.ptrs, tape.scratch
        self.voff, self.aptr = np.empty(cap, np.int64), np.empty(cap, np.int64)
        self.reached = np.zeros(cap, np.bool_)
        self.out = np.empty(3 * cap, np.int64)
        arrays = (tape.op, tape.arg0, tape.size, tape.ip0, tape.args, tape.ip, tape.fp, tape.v1,
                  tape.vals, self.voff, tape.rix, tape.ptrs, self.aptr, self.reached, tape.freed,
                  SAVES, _sw.TABLE, _sw._DOWN, self.A, self.out)
        assert len(arrays) == _sw.Q_N
        self.Q = np.array([a.ctypes.data for a in arrays] + [a.size for a in arrays], np.int64)
        self.outer = 0      # the last leaf arena's size
        self.declined = None  # the epoch (Tape.lkey) in which the call last declined

    def fits(self, tape):
        return (self.op is tape.op and self.args is tape.args and self.ip is tape.ip
                and self.vals is tape.vals and self.ptrs is tape.ptrs and self.A is tape.scratch)


class _Laid:
    """What ``Tape.arrays`` reads of a layout (:class:`Adjoints`'s
    ``voff``/``aptr``), for the quick backward's ``after_backward``."""

    __slots__ = ("voff", "aptr")
    float32 = False

    def __init__(self, voff, aptr):
        self.voff, self.aptr = voff, aptr


_QUICK = []   # quick_backward, once it may run (kernels/sweep.py: quick_runner)


def _quick(t, retain_graph):
    """``backward()`` of ``t`` (a non-leaf, seed 1) in one compiled call, if
    it is the common case; False (nothing done) where :func:`walk` must run.
    (No local holds the epoch token: a traceback that keeps a frame would
    keep the token, which stops compaction: core/liveness.py.)"""
    tape = t._tok.tape
    if type(tape) is not Tape or tape is not current() or t._tok.tape is not tape:
        return False  # (anomaly mode and traces have tapes of their own classes)
    if (tape.hooks or tape.stale or tape.host or tape.n_freed or tape.held32 or H.LEAF_HOOKS
            or tape.max_size >= _fused.FUSE_MIN or tape.scratch is None
            or _nesting.__dict__.get("stack")):
        return False
    data = t._data
    root = t._rec
    upto = root + 1
    if (data.size != 1 or upto > GRAPH_SEARCH_FROM
            or tape.max_size > SMALL and data.dtype != np.float64):
        return False
    if not _QUICK:
        run = _sw.quick_runner()
        if run is None:
            return False
        _QUICK.append(run)
    run = _QUICK[0]
    if len(tape.refs) > tape.nptrs:
        tape.addresses()
    q = tape.quick
    if q is None or not q.fits(tape):
        q = tape.quick = _Quick(tape)
    elif q.declined is tape.lkey:
        return False
    L = np.empty(q.outer)
    status, count, k = run(q.Q, L, upto, root, tape.n, tape.na, tape.n_none, retain_graph)
    if status == _sw.Q_LEAF_ARENA:
        q.outer = count
        L = np.empty(count)
        status, count, k = run(q.Q, L, upto, root, tape.n, tape.na, tape.n_none, retain_graph)
    if status == _sw.Q_GENERAL:
        q.declined = tape.lkey
        return False
    if k:
        out = q.out[:3 * k].tolist()
        leaves = tape.leaves
        for i in range(0, 3 * k, 3):
            leaf = leaves.get(out[i])
            if leaf is not None:
                o = out[i + 1]
                _accumulate(leaf, L[o:o + out[i + 2]].reshape(leaf.shape))
    if not retain_graph:
        if status == _sw.Q_ALL_FREED:
            tape.n_freed += count
            tape.n_spent = tape.n - tape.n_none - tape.n_freed
            tape.settled()
        else:
            laid = _Laid(q.voff[:upto], q.aptr[:upto])
            reached = q.reached[:upto]
            tape.after_backward(reached, tape.arrays(laid) + (reached,))
    return True


def walk(tape, eng, upto, targets=None, direct=(), *, accumulate=True, retain_graph=False,
         own=False, hooks=True, refuse=None, present=None):
    """The backward from the roots ``eng`` was seeded with, over records
    ``< upto`` of ``tape``: PyTorch's semantics, once for every path.

    ``targets``: None -- every leaf the roots reach gets its gradient
    (``backward()``); else the tensors whose gradients are wanted (leaves
    or not: ``backward(inputs=)``, ``autograd.grad``): only the records on
    a path from a root down to one of them run, as PyTorch runs only those
    nodes, and only their hooks fire.  ``direct``: ``(leaf, gradient)`` of
    roots that are leaves themselves.  ``accumulate``: add the gradients
    into ``.grad`` (else return them, one per target, None for one the roots
    do not reach).  ``own`` (``backward(inputs=)``): a non-leaf target's own
    record runs too, as PyTorch runs its node there (``autograd.grad`` does
    not).  ``hooks``: run tensor hooks and fill retained gradients (off for a
    check pass).  ``refuse``: raise it (a callable giving the exception) if a
    hook replaces a gradient.  ``present`` (a recorded walk): which targets
    the roots reach, known from a numeric pass (a target reached only through
    ops of zero derivative gets zeros).

    At each record with hooks (or ``retain_grad``), and at each non-leaf
    target, the sweep stops: every consumer has run, so the record's adjoint
    is complete; its hooks see it and may replace it, the retained gradient
    is noted (after the hooks, as PyTorch's), and a target's is taken.  A
    leaf's hooks see its whole gradient (the sum over its records), all
    before anything is stored.  Nothing observable changes until the walk
    has finished without error: ``.grad`` (leaves', targets', retained
    ones) is written, and the graph freed, only at the end.
    """
    if targets is None:
        recs = flat = None
        nonleaf = ()
        floor = -1
    else:
        recs = _target_records(tape, targets, upto) if eng is not None else [None] * len(targets)
        flat = sorted({q for rs in recs if rs for q in rs})
        nonleaf = {rs[0] for x, rs in zip(targets, recs) if rs and x._tok is not None}
        # autograd.grad runs no record below its inputs, as PyTorch runs no
        # node there: nothing below the lowest input reaches an input, and
        # what lies there stays unfreed for a later backward.  With no input
        # on this tape the whole sweep runs, which reports a freed graph.
        floor = (flat[0] - 1 if own else flat[0]) if flat else -1
    retained = []
    captured = {}
    if eng is not None:
        hooked = ()
        if hooks and tape.hooks:
            H.follow_retained(tape)
            hooked = [r for r, h in tape.hooks.items() if floor <= r < upto and h]
            if hooked and flat is not None:
                hooked = _on_path(tape, hooked, flat)
        stops = sorted(set(hooked).union(r for r in nonleaf if r >= floor), reverse=True) \
            if nonleaf else sorted(hooked, reverse=True) if hooked else ()
        start = upto - 1
        for h in stops:
            eng.run(start, h)
            if eng.reached_at(h):
                if h in hooked:
                    _visit(tape, eng, h, retained, refuse)
                if h in nonleaf:
                    captured[h] = eng.capture(h)
            start = h
        eng.run(start, floor)
        eng.checks(upto, flat, targets or (), own)
    # the gradients, and the leaves' hooks on them, before anything is stored
    if targets is None:
        pairs = eng.reached_leaves(upto) if eng is not None else []
        pairs += direct
        if hooks and H.LEAF_HOOKS:
            pairs = _leaf_hooked(pairs, eng, refuse)
        out = None
    else:
        out = []
        for i, (x, rs) in enumerate(zip(targets, recs)):
            g = None
            if rs:
                if x._tok is not None:
                    g = captured.get(rs[0])
                else:
                    for q in rs:
                        if eng.reached_at(q):
                            g = eng.leaf(q) if g is None else eng.add(g, eng.leaf(q))
            for d, s in direct:
                if d is x:
                    g = s if g is None else g + s if eng is None else eng.add(g, s)
            if g is None and present is not None and present[i]:
                g = eng.zeros(x)  # reached only through ops of zero derivative
            out.append(g)
        if hooks and H.LEAF_HOOKS:
            record = eng is not None and eng.record
            after = {}
            for i, (x, g) in enumerate(zip(targets, out)):
                if g is not None and x._tok is None and id(x) in H.LEAF_HOOKS:
                    if id(x) not in after:
                        after[id(x)] = H.leaf_hooked(x, g, record, refuse)
                    out[i] = after[id(x)]
        pairs = zip(targets, out) if accumulate else ()
    store = Sweep.store if eng is None else eng.store
    if accumulate:
        for x, g in pairs:
            if g is None:
                continue
            if x._tok is not None and not hasattr(x, "_grad"):
                x._grad = None  # a non-leaf named in inputs= gets a .grad (PyTorch)
            store(x, g)
    for owner, g in retained:
        if accumulate and targets is not None and any(owner is x for x in targets):
            continue  # an input of backward(inputs=) that retains: its .grad once
        store(owner, g)
    if eng is not None:
        ran = None
        if not retain_graph:
            ran = eng.reached
            # only the records the walk ran are freed: not those below its
            # lowest input, nor (autograd.grad) an input's own
            if floor >= 0:
                ran[:floor + 1] = False
            if nonleaf and not own:
                ran[list(nonleaf)] = False
        eng.finish(ran)
    return out


def _target_records(tape, targets, upto):
    """Each target's records below ``upto``: a leaf's LEAF records (a leaf
    written in place since a graph used it has an older one too: the graphs
    may reach either), a non-leaf's own -- for one written without a record
    since a graph read it, the record before the write, whose adjoint holds
    every use of it (``graph.origin``) -- or None."""
    older = {}
    if tape.stale:
        for r, z in tape.leaves.items():
            if r < upto:
                older.setdefault(id(z), []).append(r)  # the tape holds its leaves
    recs = []
    for x in targets:
        if x._tok is None:
            rs = older.get(id(x), [])
            if not rs and x._ltok is tape.lkey and x._lrec < upto:
                rs = [x._lrec]
            recs.append(rs or None)
        elif tape.is_live(x._tok):
            r = origin(tape, x._rec)
            recs.append([r] if r < upto else None)
        else:
            recs.append(None)
    return recs


def _on_path(tape, hooked, flat):
    """The hooked records that lie on a path from a root down to a target
    record (``flat``): PyTorch runs those nodes only, and their hooks."""
    from ..kernels.sweep import live_records
    targets = set(flat)
    tape.arg0[tape.n] = tape.na
    cols = (tape.op, tape.arg0, tape.size, None, tape.args)
    out = []
    for h in hooked:
        below = [q for q in flat if q < h]
        if h in targets or below and \
                live_records(cols, h + 1, np.array([h], np.int64))[below].any():
            out.append(h)
    return out


def _visit(tape, eng, r, retained, refuse):
    """Record r's hooks on its complete adjoint (hooks.run_record_hooks);
    in anomaly mode an error there is told where r was recorded."""
    try:
        H.run_record_hooks(tape, eng, r, retained, refuse)
    except Exception as e:
        if type(tape) is not Tape:
            from .anomaly import note
            note(e, tape, r)
        raise


def _leaf_hooked(pairs, eng, refuse):
    """``(leaf, gradient)`` pairs after the leaves' hooks: a leaf's hooks see
    its whole gradient once (the sum over its records), as PyTorch's
    AccumulateGrad node does."""
    if not any(id(x) in H.LEAF_HOOKS for x, _ in pairs):
        return pairs
    total = {}
    for x, g in pairs:
        k = id(x)
        total[k] = (x, g) if k not in total else (x, total[k][1] + g)
    done = {k: (x, H.leaf_hooked(x, g, eng is not None and eng.record, refuse))
            for k, (x, g) in total.items()}
    out, seen = [], set()
    for x, _ in pairs:
        if id(x) not in seen:
            seen.add(id(x))
            out.append(done[id(x)])
    return out


def _run(tape, adj, T, start, stop):
    """Sweep records ``start .. stop+1`` (those of ``adj.order``, when it has
    one): runs of large elementwise records fused (engine/fused.py), the
    rest record by record."""
    if tape.max_size < _fused.FUSE_MIN:   # (read at each call: a stress mode lowers it)
        # no value large enough to fuse (fused.run would find no run): the
        # record-by-record sweep at once, without the closure
        _sweep_records(tape, adj, T, start, stop)
        return
    fused_run(tape, T, start, stop, adj.order,
              lambda start, stop: _sweep_records(tape, adj, T, start, stop))


def _sweep_records(tape, adj, T, start, stop):
    """The compiled sweep over ``start .. stop+1``, host VJPs where it stops."""
    freed = tape.freed
    while True:
        arg0 = tape.arg0  # (a host VJP that records may have grown it)
        if arg0[start + 1] == arg0[stop + 1]:
            # no record of the span has parents (leaves, constants below the
            # last host record): no VJP to run, no compiled call
            return
        s = sweep(T, freed, start, stop, adj.order)
        if s == -1:
            return
        if s < -1:
            raise _freed_error()
        REGISTRY[int(tape.op[s])].host_vjp(tape, adj, s)
        start = s - 1


#: accumulation into ``.grad`` is a read-modify-write that NumPy runs with the
#: GIL released; leaves hash onto these locks so two threads backpropagating
#: into one leaf never lose an update, while different leaves rarely contend
_LOCKS = tuple(threading.Lock() for _ in range(64))


def _accumulate(leaf, g):
    """Add ``g`` (a view of the leaf arena, or the seed) into ``leaf.grad``."""
    g = g.astype(leaf.dtype, copy=False)
    with _LOCKS[(id(leaf) >> 4) & 63]:
        if leaf._grad is None:
            leaf._grad = _plain(g if g.ndim else g[()])
        else:
            old = leaf._grad._data
            if isinstance(old, np.ndarray) and old.flags.writeable:
                old += g
            else:
                leaf._grad._data = np.asarray(old + g)[()] if np.ndim(old) == 0 else old + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """PyTorch's ``torch.autograd.grad`` (see :func:`tapegrad.transforms.functional.autograd_grad`).

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor(3.0, requires_grad=True)
    >>> tg.autograd.grad(x * x, [x])
    (tensor(6.0),)
    """
    return bound.autograd_grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                               allow_unused)   # transforms/functional.py's, bound there


# Tensor.backward runs this (create_graph and inputs= run transforms/functional.py's)
bound.bind(backward=backward, in_transform=in_transform)
