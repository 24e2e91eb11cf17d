"""A traced function called on tensors that require grad joins their graph.

``ft(x)`` with ``x = tg.tensor(..., requires_grad=True)`` (or inside
``tg.grad(ft)``, ``tg.jacobian(ft)``, a bigger eager computation) replays
the trace for the value and records one host record whose VJP is the
trace's own ``ft.vjp`` at the saved inputs: the gradient is the traced one,
not a silent zero of a value cut off from the graph.  Forward mode and
second order through the record raise (a ``tg.Function`` has neither rule).
The transforms of the traced function itself at plain arrays (``tg.grad(ft)``,
``tg.jacobian(ft)``, ``tg.hessian(ft)``, ``tg.hvp(ft, ...)``, ``tg.jvp(ft, ...)``)
record no such call: they run the trace's own passes over its replay.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> ft = tg.trace(lambda x: (x * x).sum(), np.ones(3))
>>> tg.grad(ft)(np.array([1.0, 2.0, 3.0]))
array([2., 4., 6.])
"""
import numpy as np

from ..ops.function import Function
from ..core.tensor import Tensor


class TracedCall(Function):
    """One call of a traced function inside an eager graph; its node is
    ``TracedCallBackward``."""

    @staticmethod
    def forward(ctx, ft, *values):
        from .tape import _signature
        ctx.ft = ft
        # copies: a later in-place write into an argument cannot change the
        # point the backward differentiates at
        ctx.save_for_backward(*values)
        ctx.positions = _signature(values)[1]
        out = ft(*values)
        ctx.multi = isinstance(out, tuple)
        return tuple(np.asarray(o) for o in out) if ctx.multi else np.asarray(out)

    @staticmethod
    def backward(ctx, *grads):
        values = ctx.saved_tensors
        ct = tuple(grads) if ctx.multi else grads[0]
        _, g = ctx.ft.vjp(*values, ct)
        gs = g if len(ctx.positions) > 1 else (g,)
        out = [None] * len(values)
        for p, gi in zip(ctx.positions, gs):
            out[p] = gi
        return (None,) + tuple(out)


    @staticmethod
    def batched_backward(ctx, *grads):
        """``backward`` for p cotangents at once (each with a leading axis p):
        one vector reverse sweep over the replay, as ``ft.jacobian`` runs
        (a Jacobian through a traced call costs one sweep, not one per row)."""
        from ..transforms.base import fresh_arenas
        values = ctx.saved_tensors
        p = grads[0].shape[0]
        cts = [np.asarray(g, dtype=np.float64).reshape(p, -1) for g in grads]
        # the vector sweep that called this still holds its adjoints in this
        # thread's reusable arenas: the replay's sweep takes arenas of its own
        with fresh_arenas():
            _, rep, gs = ctx.ft._vector(values, lambda rep: (cts, p))
        out = [None] * len(values)
        for pos, g, shape in zip(ctx.positions, gs, rep.in_shapes):
            out[pos] = g.reshape((p,) + tuple(shape))
        return (None,) + tuple(out)


def call(ft, args):
    """``ft(*args)`` recorded on the graph of the tensors among ``args``."""
    return TracedCall.apply(ft, *args)


def joins_graph(args):
    """True if a call on ``args`` must be recorded: some argument is a
    tensor that requires grad, and grad mode is on."""
    from ..core.grad_mode import is_grad_enabled
    return is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args)
