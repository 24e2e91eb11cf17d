"""Gradients of tensors with respect to tensors: :func:`reverse` (p seed
vectors of the roots through one reverse sweep, gradients for given
tensors, leaves or not), PyTorch's ``torch.autograd.grad``
(:func:`autograd_grad`), and ``Tensor.backward``'s ``create_graph=True``
and ``inputs=`` paths, which it binds into ``tensor.bound``.

``create_graph=True`` records the backward as ops (``transforms/create_graph/walk.py``);
where a record on the way has no such formula, the gradients are one
second-order record (``_GraphGrad``), differentiable once more.  The
function transforms of ``transforms/functional.py`` are built on :func:`reverse`.

Each is ``autograd.walk`` -- the one walk over the graph that decides
hooks, ``retain_grad``, which records run, accumulation and freeing -- with
its options, over an engine: ``autograd.Sweep`` (one vector),
:class:`_Vectors` (p vectors) or ``create_graph.Recorded``.
"""
import numpy as np

from ..engine.backward import (Sweep, _freed_error, _seed, _target_records, check_stale, graph_tape,
                       root_span, walk)
from ..ops.function import Function
from ..core.grad_mode import enable_grad
from ..core.tape import current
from ..core.tensor import Tensor, bound, tensor
from .base import _Slabs, _run, fresh_arenas


def reverse(roots, seeds, inputs, retain_graph=False, allow_unused=True, own=False,
            hooks=True, accumulate=False, refuse=None):
    """``sum_i seeds_i^T d roots_i / d input`` for every input, p vectors at once.

    ``roots`` are tensors, ``seeds`` arrays of shape ``(p,) + root.shape``;
    ``inputs`` are tensors (leaves or not).  Returns one ``(p,) + input.shape``
    float64 array per input (float32 for one vector through a float32 graph),
    or None for an input no root depends on.  Leaves' ``.grad`` are not
    touched, unless ``accumulate`` (``backward(inputs=)``: the gradients go
    into the inputs' ``.grad``, and None is returned).  One walk
    (``autograd.walk``): the hooks on the way and the inputs' run, retained
    gradients are filled.  ``own``: a non-leaf input's own record runs, and
    the values it saved count for the in-place check (``backward(inputs=)``:
    see ``autograd.check_stale``); ``hooks``, ``refuse``: see
    ``autograd.walk``.
    """
    p = seeds[0].shape[0]
    if p == 0 or all(s.size == 0 for s in seeds):  # nothing to push back
        return [None if p else np.zeros((0,) + x.shape) for x in inputs]
    live = [(t, s) for t, s in zip(roots, seeds) if t._requires_grad]
    direct = [(t, s.reshape(p, -1).copy()) for t, s in live if t._tok is None]  # leaf roots
    graph = [(t, s) for t, s in live if t._tok is not None]
    tape = graph_tape([t for t, _ in graph],
                      "gradients must be computed on the thread that recorded the graph")
    opts = dict(accumulate=accumulate, retain_graph=retain_graph, own=own, hooks=hooks,
                refuse=refuse)
    if tape is None:
        out = walk(None, None, 0, inputs, direct, **opts)
    else:
        with tape.walking():
            upto = max(root_span(tape, t._rec) for t, _ in graph)
            if p > 1:
                eng = _Vectors(tape, upto, p)
            else:  # float32 roots of a float32 graph: a float32 sweep (autograd.Adjoints)
                eng = Sweep(tape, upto, None,
                            all(t.dtype == np.float32 for t, _ in graph))
            for t, s in graph:
                eng.seed(t._rec, s.reshape(p, -1))
            out = walk(tape, eng, upto, inputs, direct, **opts)
    if accumulate:
        return None
    return [None if g is None else g.reshape((p,) + x.shape) for g, x in zip(out, inputs)]


class _Vectors(Sweep):
    """The walk's engine for p adjoint vectors at once (``_Slabs``; the
    block sweep of ``transform_base._run``).  Hooks see each vector alone."""

    def __init__(self, tape, upto, p):
        self.tape, self.p = tape, p
        self.adj = adj = _Slabs(tape, upto, p)
        self.T = tape.arrays(adj) + (adj.reached,)
        self.reached = adj.reached
        self.order = None
        self.checked = False

    def seed(self, r, s):
        view = self.adj.block(r)
        if self.reached[r]:  # two roots on one record
            view += s.reshape(view.shape)
        else:
            view[...] = s.reshape(view.shape)
        self.reached[r] = True

    def run(self, start, stop):
        _run(self.tape, self.adj, self.T, start, stop, self.p)

    def grad(self, r):
        return self.adj.block(r)

    def capture(self, r):
        return self.adj.rows(r)

    def leaf(self, q):
        return self.adj.rows(q)  # the arenas are reused: a copy

    def finish(self, ran):
        if ran is not None:
            self.tape.after_backward(ran, self.T)


class _Spec:
    """What a nested ``value_and_grad`` record needs for its VJP."""
    __slots__ = ("at", "primals", "nums", "connected", "value", "outputs", "s", "leaves",
                 "where", "missing")



# -- PyTorch's torch.autograd.grad ------------------------------------------------------
def _as_list(x):
    return [x] if isinstance(x, Tensor) else list(x)


def autograd_grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
                  allow_unused=False):
    """PyTorch's ``torch.autograd.grad``: the gradients of ``outputs`` (seeded
    with ``grad_outputs``) with respect to ``inputs``, as a tuple of tensors;
    no ``.grad`` is touched.  Exposed as ``tapegrad.engine.backward.grad``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> (g,) = tg.autograd.grad((x * x).sum(), x)
    >>> g, x.grad
    (tensor([2.0, 4.0]), None)
    """
    outputs, inputs = _as_list(outputs), _as_list(inputs)
    for x in inputs:
        if not isinstance(x, Tensor):
            raise TypeError(f"grad: inputs must be tensors, got {type(x).__name__}")
        if not x._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    grad_outputs = _as_list(grad_outputs) if not isinstance(grad_outputs, (list, tuple)) \
        else list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad_outputs has {len(grad_outputs)} entries for "
                           f"{len(outputs)} outputs")
    seeds = []
    for t, g in zip(outputs, grad_outputs):
        if not isinstance(t, Tensor) or not t._requires_grad:
            raise RuntimeError(
                "element 0 of tensors does not require grad and does not have a grad_fn")
        seeds.append(_seed(t, g)[None, :])
    if create_graph:
        return _graph_grad(outputs, seeds, inputs, allow_unused,
                           graph_seeds=[_graph_seed(g) for g in grad_outputs])
    gs = reverse(outputs, seeds, inputs, retain_graph=bool(retain_graph))
    _check_used(gs, inputs, allow_unused)
    return tuple(None if g is None else tensor(g[0].reshape(x.shape).astype(x.dtype, copy=False))
                 for g, x in zip(gs, inputs))


def _check_used(gs, inputs, allow_unused):
    """PyTorch's error for an input no output reaches (gradient None), unless
    ``allow_unused``."""
    if allow_unused:
        return
    for i, (g, x) in enumerate(zip(gs, inputs)):
        if g is None:
            raise RuntimeError(
                f"One of the differentiated Tensors (input {i}, shape {x.shape}) appears "
                "to not have been used in the graph. Set allow_unused=True if this is "
                "the desired behavior.")


def _further_order(name):
    return (f"create_graph=True: the graph contains a gradient computed with "
            f"create_graph=True through {name}, which has no differentiable backward "
            "formula: that gradient differentiates once more (backward, or autograd.grad "
            "without create_graph), but not to a further order")


class _GraphGrad(Function):
    """Gradients computed with ``create_graph=True`` through an op without a
    differentiable backward formula (``create_graph.NoRule``), as one record
    over every leaf that requires grad in the graph they came from: it
    differentiates once more (second order), not further."""

    @staticmethod
    def no_jvp(ctx):  # forward mode over it is a third derivative
        return _further_order(ctx.spec.missing)

    # The record's parents are s (the seeded sum of the outputs, whose graph the
    # backward differentiates again) and the leaves.  s is a parent and not an
    # attribute of ctx: the tape must not hold a tensor of its own graph (its
    # epoch token would keep the tape from ever resetting), and as a parent,
    # s's graph lives exactly as long as a tensor that reaches this record.
    checks_own_reads = True   # backward checks the in-place writes its pass reads

    @staticmethod
    def forward(ctx, spec, s, *leaves):
        ctx.spec = spec
        return spec.outputs if len(spec.outputs) > 1 else spec.outputs[0]

    @staticmethod
    def backward(ctx, *us):
        # cotangents u of the gradients g = d s / d x (s = sum of seeds * outputs):
        # leaf z receives sum_x d2 s / (dz dx) u_x, one forward-over-reverse pass
        # over the retained graph with tangent u on the inputs and 0 elsewhere
        from .second.passes import _hvp_pass
        spec = ctx.spec
        tape = current()
        s = _At(int(tape.args[tape.arg0[ctx._record]]))
        if tape.freed[s._rec]:
            raise _freed_error()
        tangents = [np.zeros((1, z.size)) for z in spec.leaves]
        for k, u in zip(spec.where, us):
            tangents[k] = tangents[k] + np.asarray(u, dtype=np.float64).reshape(1, -1)
        upto = root_span(tape, s._rec)
        # every LEAF record of each leaf below s: a leaf written in place since
        # (no_grad, .data) records anew when next used, and the first graph
        # reads its older record, which its ._lrec no longer names
        recs = {}
        for q, z in tape.leaves.items():
            if q < upto:
                recs.setdefault(id(z), []).append(q)
        which, leaves, rs = [], [], []
        for k, z in enumerate(spec.leaves):
            for q in recs.get(id(z), ()):
                which.append(k)
                leaves.append(z)
                rs.append(q)
        out = [np.zeros(z.size) for z in spec.leaves]
        if rs:
            with fresh_arenas():
                res, used = _hvp_pass(tape, s, leaves, rs, lambda j: tangents[which[j]], 1)
                if used is not None:
                    # a value of the first graph written in place since it was
                    # recorded raises here, as the first graph's own backward would
                    check_stale(tape, used[0], upto)
            for k, (_, hv) in zip(which, res):
                out[k] = out[k] + hv[0]
        return (None, None) + tuple(o.reshape(z.shape) for z, o in zip(spec.leaves, out))


class _At:
    """A record id where the passes of transforms/second/passes.py take a tensor (``._rec``)."""
    __slots__ = ("_rec",)

    def __init__(self, rec):
        self._rec = rec


def _graph_seed(g):
    """A seed that is a tensor of a graph (``grad_outputs=[v]`` with v
    requiring grad), flat and float64, for a recorded walk: its gradient
    then reaches v too, as in PyTorch; None for any other seed."""
    if not (isinstance(g, Tensor) and g._requires_grad and current().enabled):
        return None
    return (g if g.dtype == np.float64 else g.astype(np.float64)).reshape(-1)


def _graph_grad(outputs, seeds, inputs, allow_unused, own=False, accumulate=False,
                graph_seeds=None):
    """``autograd.grad(..., create_graph=True)``: gradients that are tensors
    of the graph, so they can be differentiated again, to any order
    (:mod:`tapegrad.transforms.create_graph.walk`); with ``accumulate``
    (``backward(create_graph=True)``) they go into the inputs' ``.grad``.
    ``graph_seeds``: per output, the seed as a tensor of the graph, or None.
    A graph with an op that has no differentiable backward formula there
    gets one second-order node (``_GraphGrad``) instead, with respect to
    leaves only."""
    from .create_graph import walk as CG
    tape = current()
    # a numeric pass first, without hooks: it raises what the graph's own
    # backward would (freed graph, values written in place) and tells which
    # inputs the outputs reach; the recorded walk then runs the hooks
    gs = reverse(outputs, seeds, inputs, retain_graph=True, own=own, hooks=False)
    _check_used(gs, inputs, allow_unused)
    upto = max([root_span(tape, t._rec) for t in outputs if tape.is_live(t._tok)] or [0])
    graph_seeds = graph_seeds or [None] * len(outputs)
    direct = [(t, tensor(np.asarray(v, np.float64).reshape(-1)) if gs is None else gs)
              for t, v, gs in zip(outputs, seeds, graph_seeds)
              if t._tok is None and t._requires_grad]
    # the walk records: no compaction may renumber the records it reads
    with tape.walking():
        recs = _target_records(tape, inputs, upto)
        try:
            eng = CG.Recorded(tape, outputs, seeds, inputs, upto, recs, graph_seeds)
        except CG.NoRule as e:
            eng = e
        if not isinstance(eng, CG.NoRule):
            res = walk(tape, eng, upto, inputs, direct, accumulate=accumulate,
                       retain_graph=True, own=own, present=[g is not None for g in gs])
            if accumulate:
                return None
            return tuple(None if w is None else _as_input(w, x) for w, x in zip(res, inputs))
    res = _second_order_grad(outputs, seeds, inputs, allow_unused, eng)
    if accumulate:
        for x, g in zip(inputs, res):
            if g is not None:
                CG.Recorded.store(x, g)
        return None
    return res


def _as_input(w, x):
    """Gradient tensor ``w`` (flat) in input x's shape and dtype."""
    if w.shape != x.shape:
        w = w.reshape(x.shape)
    return w if x.dtype == np.float64 else w.astype(x.dtype)


def _second_order_grad(outputs, seeds, inputs, allow_unused, missing):
    """The gradients as one ``_GraphGrad`` node (differentiable once more),
    for a graph through an op without a differentiable backward formula
    (``missing``, a ``create_graph.NoRule``)."""
    from ..kernels.sweep import live_records
    from ..ops import reductions as Rd
    why = f" ({missing.why})" if missing.why else ""
    for i, x in enumerate(inputs):
        if x._tok is not None:
            raise NotImplementedError(
                f"create_graph=True: input {i} (shape {x.shape}) is not a leaf, and the "
                f"graph goes through {missing.name}, which has no differentiable backward "
                f"formula{why}; through it tapegrad differentiates gradients again only "
                "with respect to leaves. Make the input a leaf (h = "
                "h.detach().requires_grad_()) and compute from it, or use tg.hessian / tg.hvp")
    if missing.through is not None:
        raise NotImplementedError(_further_order(missing.through))
    tape = current()
    with enable_grad():
        s = None
        for t, v in zip(outputs, seeds):
            term = Rd.sum(t * v.reshape(t.shape)) if t.size != 1 or v[0, 0] != 1.0 \
                else Rd.sum(t)
            s = term if s is None else s + term
    # the hooks run here, once; the node's backward differentiates the graph
    # itself, which a hook's new gradient is not part of
    gs = reverse([s], [np.ones((1, 1))], inputs, retain_graph=True,
                 refuse=lambda: NotImplementedError(
                     f"create_graph=True: a tensor hook replaced a gradient in a graph that "
                     f"goes through {missing.name}, which has no differentiable backward "
                     f"formula{why}; through it tapegrad differentiates the gradients once "
                     "more as one node, which cannot include what a hook computes. Use a "
                     "hook that returns None there, or create_graph=False"))
    _check_used(gs, inputs, allow_unused)
    if s._tok is None:  # an input is the output: no graph to differentiate again
        return tuple(None if g is None else tensor(g[0].reshape(x.shape).astype(x.dtype))
                     for g, x in zip(gs, inputs))
    tape.arg0[tape.n] = tape.na
    upto = root_span(tape, s._rec)
    live = live_records((tape.op, tape.arg0, tape.size, None, tape.args), upto,
                        np.array([s._rec], np.int64))
    leaves = [z for r, z in sorted(tape.leaves.items()) if r < upto and live[r]]
    for x in inputs:
        if not any(z is x for z in leaves):
            leaves.append(x)
    used = [i for i, g in enumerate(gs) if g is not None]
    if not used:  # allow_unused, and no input reached: nothing to differentiate again
        return (None,) * len(inputs)
    spec = _Spec()
    spec.missing = missing.name
    spec.leaves = leaves
    spec.where = [next(k for k, z in enumerate(leaves) if z is inputs[i]) for i in used]
    spec.outputs = tuple(np.asarray(gs[i][0].reshape(inputs[i].shape), dtype=np.float64)
                         for i in used)
    outs = _GraphGrad.apply(spec, s, *leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    res = [None] * len(inputs)
    for i, o in zip(used, outs):
        res[i] = o if inputs[i].dtype == np.float64 else o.astype(inputs[i].dtype)
    return tuple(res)


_GraphGrad.__name__ = "Grad"  # grad_fn shows GradBackward


def backward_graph(t, gradient, inputs=None):
    """``t.backward(gradient, create_graph=True)``: accumulate into the leaves'
    ``.grad`` gradients that are themselves differentiable tensors."""
    from ..kernels.sweep import live_records
    if not t._requires_grad:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn")
    seed = _seed(t, gradient)[None, :]
    if inputs is None:
        if t._tok is None:
            inputs = [t]
        else:
            tape = current()
            tape.arg0[tape.n] = tape.na
            upto = root_span(tape, t._rec)
            live = live_records((tape.op, tape.arg0, tape.size, None, tape.args), upto,
                                np.array([t._rec], np.int64))
            inputs = [z for r, z in sorted(tape.leaves.items()) if r < upto and live[r]]
    else:
        inputs = _as_list(inputs)
    if not inputs:
        return
    _graph_grad([t], [seed], inputs, allow_unused=True, own=True, accumulate=True,
                graph_seeds=[_graph_seed(gradient)])


def backward_to(t, gradient, retain_graph, inputs):
    """``t.backward(gradient, retain_graph, inputs=inputs)``: accumulate into
    the given tensors' ``.grad`` only."""
    inputs = _as_list(inputs)
    if not inputs:
        raise RuntimeError("backward: inputs= was given but is empty; pass the tensors "
                           "to accumulate gradients into, or leave inputs out")
    for x in inputs:
        if not isinstance(x, Tensor) or not x._requires_grad:
            raise RuntimeError("backward: every tensor in inputs= must require grad; "
                               f"got {type(x).__name__ if not isinstance(x, Tensor) else x!r}")
    if not t._requires_grad:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn")
    seed = _seed(t, gradient)[None, :]
    reverse([t], [seed], inputs, retain_graph=retain_graph, own=True, accumulate=True)


# Tensor.backward(create_graph=True), backward(inputs=...) and tg.autograd.grad run these
bound.bind(backward_graph=backward_graph, backward_to=backward_to, autograd_grad=autograd_grad)
