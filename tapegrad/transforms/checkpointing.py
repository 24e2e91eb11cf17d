"""Checkpointing: recompute a segment in the backward instead of keeping its records.

``tg.checkpoint(fn, *args)`` runs ``fn`` without recording and keeps only
its inputs and outputs on the tape, as one host record.  The backward
recomputes ``fn`` on its saved inputs, with recording, differentiates that
short graph with the incoming gradients, and hands the inputs' gradients on:
memory for ``fn``'s intermediates is paid only while its own backward runs,
for the price of one more forward.  ``tg.checkpoint_loop`` applies that to a
time-stepping loop in about ``sqrt(steps)`` segments, so that its memory
grows as ``O(sqrt(steps))`` instead of ``O(steps)`` for about one extra
forward pass in all (the scheme of Chen et al., "Training deep nets with
sublinear memory cost", 2016; the binomial "revolve" schedule of Griewank
and Walther reaches ``O(log steps)`` for more recomputation).

With ``create_graph=True`` (``tg.autograd.grad``, ``backward``) the
backward recomputes ``fn`` on the arguments as tensors of the graph and
takes its gradients with ``create_graph=True`` (``Checkpoint.vjp_ops``), so
gradients through a checkpoint differentiate again to any order; what the
recomputation records stays on the tape with the gradients' graph.
(``tg.hessian`` and forward mode need a tangent rule, which a checkpoint
does not have: they raise.)

Two rules make a wrong gradient impossible, and each breach raises at the
backward, naming what to do:

* Gradients flow to the tensor arguments only.  ``fn`` must not read a
  tensor that requires grad from elsewhere (a closure, a global): pass it as
  an argument.  (Its recomputed graph would reach it, and its gradient
  could not be handed to the outer graph.)
* ``fn`` must compute the same values again: the recomputed outputs are
  compared with the forward's, bit for bit (a random draw inside ``fn``
  would break this; draw outside and pass the draw in).

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> x = tg.tensor([0.3, 0.5], requires_grad=True)
>>> y = tg.checkpoint(lambda a: tg.exp(tg.sin(a)) * 2.0, x)
>>> y.sum().backward()
>>> np.allclose(x.grad.numpy(), 2.0 * np.exp(np.sin([0.3, 0.5])) * np.cos([0.3, 0.5]))
True
"""
import math

import numpy as np

from ..ops.function import Function
from ..core.grad_mode import enable_grad, no_grad
from ..core.tape import NO_COMPACTION, current
from ..core.tensor import Tensor, tensor


def _outputs(out, who):
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        if not isinstance(o, Tensor):
            raise TypeError(f"{who}: fn must return a tensor or a tuple of tensors, "
                            f"got {type(o).__name__}")
    return outs


class Checkpoint(Function):
    """The host record of one checkpointed call (see the module docstring);
    its node is ``CheckpointBackward``."""

    @staticmethod
    def forward(ctx, fn, is_tensor, *values):
        ctx.fn, ctx.is_tensor = fn, is_tensor
        # the saved inputs are copies: an in-place write into an argument
        # after the call cannot change what the backward recomputes from
        ctx.save_for_backward(*values)
        with no_grad():
            outs = _outputs(fn(*_arguments(values, is_tensor, leaves=False)), "tg.checkpoint")
        ctx.single = len(outs) == 1
        ctx.values = tuple(np.array(o._data, copy=True) for o in outs)
        return ctx.values[0] if ctx.single else ctx.values

    @staticmethod
    def backward(ctx, *grads):
        tape = current()
        # the outer backward is running on this tape: it must not be
        # compacted (renumbered) while the recomputation records on it
        check_at, tape.check_at = tape.check_at, NO_COMPACTION
        try:
            with enable_grad():
                args = _arguments(ctx.saved_tensors, ctx.is_tensor, leaves=True)
                start = tape.n
                outs = _outputs(ctx.fn(*args), "tg.checkpoint")
                _check_closed(tape, start, args)
                _check_same(outs, ctx.values)
                leaves = [a for a, t in zip(args, ctx.is_tensor) if t]
                from ..engine.backward import grad
                used = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
                if used:
                    got = grad([o for o, _ in used], leaves,
                               grad_outputs=[g for _, g in used], allow_unused=True)
                else:
                    got = [None] * len(leaves)
        finally:
            tape.check_at = max(check_at, tape.n)
        it = iter(got)
        per_arg = []
        for t in ctx.is_tensor:
            g = next(it) if t else None
            per_arg.append(None if g is None else np.asarray(
                g.numpy() if isinstance(g, Tensor) else g, dtype=np.float64))
        return (None, None) + tuple(per_arg)


    @staticmethod
    def vjp_ops(ctx, u, inputs):
        """The VJP as recorded ops, for ``create_graph=True``: ``fn`` is
        recomputed on the arguments as tensors of the graph (``inputs``),
        and its gradients are taken with ``create_graph=True``, so they
        differentiate again to any order.  ``u``: the outputs' adjoints,
        flat and concatenated."""
        from ..engine.backward import grad
        values = ctx.saved_tensors
        tape = current()
        args, wrt = [], []
        for k, (v, t) in enumerate(zip(values, ctx.is_tensor)):
            if not t:
                args.append(v)
                continue
            a = inputs(k + 2, v)   # float64, as the walk computes
            if not isinstance(a, Tensor):   # a tensor that requires no grad: a constant
                args.append(tensor(np.asarray(v)))
                continue
            dtype = np.asarray(v).dtype
            args.append(a if dtype == a.dtype else a.astype(dtype))
            wrt.append(len(args) - 1)
        with enable_grad():
            start = tape.n
            outs = _outputs(ctx.fn(*args), "tg.checkpoint")
            _check_closed(tape, start, args, own_records=True)
            _check_same(outs, ctx.values)
            # sum(o * u) as one recorded scalar: its gradient is the VJP, and
            # it depends on u (a tensor of the graph) as much as on fn's inputs
            total, at = None, 0
            for o, v in zip(outs, ctx.values):
                if o.requires_grad:
                    term = (o.reshape(-1) * u[at:at + v.size]).sum()
                    total = term if total is None else total + term
                at += v.size
            got = (grad([total], [args[k] for k in wrt], create_graph=True, allow_unused=True)
                   if total is not None and wrt else [None] * len(wrt))
        out = [None] * len(args)
        for k, g in zip(wrt, got):
            out[k] = g
        return (None, None) + tuple(out)


def _arguments(values, is_tensor, leaves):
    """The call's arguments again: tensors (leaves that require grad, for the
    recomputation) where tensors were passed, the other values as passed."""
    return [tensor(v, requires_grad=leaves) if t else v for v, t in zip(values, is_tensor)]


def _check_closed(tape, start, args, own_records=False):
    """Raise if the recomputed records read a tensor that requires grad and
    is not one of the arguments (its gradient would be lost).  With
    ``own_records`` the arguments are tensors of the graph (``vjp_ops``),
    whose records before ``start`` the recomputation may read."""
    own = {id(a) for a in args if isinstance(a, Tensor)}
    recs = ({int(a._rec) for a in args if isinstance(a, Tensor) and a.requires_grad
             and tape.is_live(getattr(a, "_tok", None))} if own_records else set())
    op, arg0, args_ = tape.op, tape.arg0, tape.args
    from ..core.registry import CONST, LEAF
    n = tape.n
    for r in range(start, n):
        end = arg0[r + 1] if r + 1 < n else tape.na   # arg0[n] is written with record n
        foreign = [int(args_[j]) for j in range(arg0[r], end)
                   if args_[j] < start and op[args_[j]] != CONST and int(args_[j]) not in recs]
        if op[r] == LEAF and id(tape.leaves.get(r)) not in own:
            foreign.append(r)   # a leaf first used here
        if foreign:
            raise RuntimeError(
                "tg.checkpoint: fn reads a tensor that requires grad and is not one of "
                f"its arguments (tape record {foreign[0]}); its gradient cannot reach the "
                "outer graph. Pass it as an argument: tg.checkpoint(fn, x, w) with "
                "fn(x, w), or detach it if it needs no gradient")


def _check_same(outs, values):
    for k, (o, v) in enumerate(zip(outs, values)):
        got = np.asarray(o._data)
        if got.shape != v.shape or not np.array_equal(got, v, equal_nan=True):
            raise RuntimeError(
                f"tg.checkpoint: recomputing fn gave different values for output {k} than "
                "its forward did, so the gradient would be wrong. fn must compute the same "
                "values from the same inputs: draw random numbers outside it and pass them "
                "in, and do not let it depend on state that changes between the calls")


def checkpoint(fn, *args):
    """``fn(*args)``, with its intermediate records recomputed in the backward
    instead of kept (``torch.utils.checkpoint``, ``jax.checkpoint``).

    ``fn`` takes tensors (and any other values) and returns a tensor or a
    tuple of tensors; gradients flow to the tensor arguments.  See the module
    docstring for the two rules the backward checks.

    >>> import tapegrad as tg
    >>> w = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> x = tg.tensor([3.0, 4.0], requires_grad=True)
    >>> (tg.checkpoint(lambda x, w: (x * w).sum(), x, w) ** 2).backward()
    >>> w.grad
    tensor([66.0, 88.0])
    """
    if not callable(fn):
        raise TypeError(f"tg.checkpoint: the first argument must be a function, got "
                        f"{type(fn).__name__}")
    is_tensor = tuple(isinstance(a, Tensor) for a in args)
    return Checkpoint.apply(fn, is_tensor, *args)


def checkpoint_loop(step, state, steps, *params, segments=None):
    """Run ``state = step(state, *params)`` ``steps`` times, keeping the
    records of about ``sqrt(steps)`` segments' boundaries only.

    ``state`` is a tensor or a tuple of tensors (``step`` returns the same);
    ``params`` are tensors (or values) every step reads, whose gradients the
    backward accumulates.  The backward recomputes one segment at a time, so
    the tape holds about ``segments + steps / segments`` steps' records
    (``2 sqrt(steps)`` at the default ``segments = ceil(sqrt(steps))``)
    instead of ``steps``, for one more forward pass in all.

    >>> import numpy as np, tapegrad as tg
    >>> k = tg.tensor(0.5, requires_grad=True)
    >>> y = tg.checkpoint_loop(lambda y, k: y - 0.01 * k * y, tg.tensor(1.0), 100, k)
    >>> y.backward()
    >>> bool(np.isclose(k.grad.item(), 100 * -0.01 * (1 - 0.005) ** 99))
    True
    """
    if not callable(step):
        raise TypeError(f"tg.checkpoint_loop: step must be a function, got "
                        f"{type(step).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"tg.checkpoint_loop: steps must be a non-negative integer, got "
                         f"{steps!r}")
    steps = int(steps)
    if segments is None:
        segments = max(1, math.isqrt(max(steps - 1, 0)) + 1)
    if isinstance(segments, bool) or not isinstance(segments, (int, np.integer)) \
            or segments < 1:
        raise ValueError(f"tg.checkpoint_loop: segments must be a positive integer, got "
                         f"{segments!r}")
    tuple_state = isinstance(state, tuple)
    n_state = len(state) if tuple_state else 1
    bounds = np.linspace(0, steps, min(int(segments), max(steps, 1)) + 1).round().astype(int)

    def run(count):
        def segment(*xs):
            s = tuple(xs[:n_state]) if tuple_state else xs[0]
            ps = xs[n_state:]
            for _ in range(count):
                s = step(s, *ps)
                if tuple_state != isinstance(s, tuple) or (tuple_state and len(s) != n_state):
                    raise TypeError("tg.checkpoint_loop: step must return a state of the "
                                    "same structure as it was given")
            return s
        return segment

    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            xs = tuple(state) if tuple_state else (state,)
            state = checkpoint(run(int(hi - lo)), *xs, *params)
    return state
