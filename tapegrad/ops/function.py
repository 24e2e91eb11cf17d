"""Custom operations: ``tg.Function`` with PyTorch's shape.

Subclass it with static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``
working on NumPy arrays; ``MyOp.apply(*args)`` runs the forward on the
values and records one host record (and one output record per output when
there are several).  The sweep hands the record to Python, which calls
``backward`` with the outputs' gradients (zeros for outputs nothing used).
An optional static ``jvp(ctx, *tangents)`` gives forward mode (``tg.jvp``,
``tg.jacfwd``) through the op, as PyTorch's ``Function.jvp``: it receives
one tangent per input of forward (an array of the input's shape, zeros
where the input carries none; None for arguments that are not tensors) and
returns one per output (None for a zero tangent).  An optional static
``batched_backward(ctx, *grads)`` serves the vector sweeps (``tg.jacobian``,
a batch of cotangents to ``tg.vjp``) with all p cotangents at once: each
gradient argument and result has a leading axis of p vectors (PyTorch's
``vmap``-able backward); without it ``backward`` runs once per vector.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> class Cube(tg.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x ** 3
...     @staticmethod
...     def backward(ctx, g):
...         (x,) = ctx.saved_tensors
...         return 3 * x ** 2 * g
>>> x = tg.tensor([1.0, 2.0], requires_grad=True)
>>> y = Cube.apply(x)
>>> y.grad_fn.name()
'CubeBackward'
>>> y.sum().backward()
>>> x.grad
tensor([3.0, 12.0])
>>> class CubeFwd(Cube):
...     @staticmethod
...     def jvp(ctx, t):
...         (x,) = ctx.saved_tensors
...         return 3 * x ** 2 * t
>>> tg.jvp(CubeFwd.apply, (np.array([1.0, 2.0]),), (np.array([1.0, 1.0]),))[1]
array([ 3., 12.])
>>> class CubeBatched(Cube):
...     @staticmethod
...     def batched_backward(ctx, g):      # g: (p, 2), one row per vector
...         (x,) = ctx.saved_tensors
...         return 3 * x ** 2 * g
>>> tg.jacobian(CubeBatched.apply)(np.array([1.0, 2.0]))
array([[ 3.,  0.],
       [ 0., 12.]])
"""
import numpy as np

from ..kernels import codes as C
from .elementwise import _operand
from ..core.registry import CONST, OUTPUT, register
from ..core.tape import current
from ..core.tensor import Tensor, _plain, _result
from .linalg._common import _flat, _known, _parents


class FunctionCtx:
    """What ``forward`` leaves for ``backward``: saved arrays, any attributes."""

    def save_for_backward(self, *arrays):
        self._saved = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                            for a in arrays)

    @property
    def saved_tensors(self):
        return getattr(self, "_saved", ())


def _function_vjp(tape, adj, r, p=None):
    """The VJP of a ``tg.Function`` record: its ``backward``; with ``p`` (a
    vector sweep's block of p adjoints, ``transform_base._Block``) its
    ``batched_backward``, whose arguments and gradients have a leading axis
    of p vectors."""
    cls, ctx, tensor_args, out_shapes, nargs = tape.host[r]
    lead = () if p is None else (p,)
    if len(out_shapes) == 1 and tape.size[r] == int(np.prod(out_shapes[0])) \
            and tape.op[r + 1 if r + 1 < tape.n else r] != OUTPUT:
        grads_out = (adj[r].reshape(lead + tuple(out_shapes[0])).copy(),)
    else:  # one OUTPUT record per output follows r
        grads_out = tuple(adj[r + 1 + k].reshape(lead + tuple(s)).copy()
                          if adj.reached.size > r + 1 + k and adj.reached[r + 1 + k]
                          else np.zeros(lead + tuple(s)) for k, s in enumerate(out_shapes))
    ctx._record = r   # where the record is now (compaction renumbers records)
    # backward is user code and may record (a nested transform, a loop of
    # ops): holding the tape's token keeps the tape from being compacted or
    # reset under the sweep that called it, whose record ids must stay valid
    with tape.walking():
        grads = (cls.backward if p is None else cls.batched_backward)(ctx, *grads_out)
    if not isinstance(grads, tuple):
        grads = (grads,)
    # PyTorch's rule: one gradient per input of forward, trailing Nones past
    # the inputs ignored; anything else is an error, never a silent drop
    if len(grads) > nargs and all(g is None for g in grads[nargs:]):
        grads = grads[:nargs]
    if len(grads) != nargs:
        raise RuntimeError(
            f"{cls.__name__}.backward returned an incorrect number of gradients (expected "
            f"{nargs}, got {len(grads)}): it must return one per input of forward (None "
            "for inputs without gradient)")
    # every gradient is checked before any is added: an error leaves the
    # adjoints as they were
    adds = []
    a0 = tape.arg0[r]
    for j, (position, shape) in enumerate(tensor_args):
        g = grads[position]
        q = tape.args[a0 + j]
        if g is None or tape.op[q] == CONST:
            continue
        g = np.asarray(g, dtype=np.float64)
        if g.shape != lead + tuple(shape):
            raise RuntimeError(
                f"{cls.__name__}.backward returned a gradient of shape {g.shape} for "
                f"input {position}, whose shape is {lead + tuple(shape)}")
        adds.append((q, g))
    for q, g in adds:
        adj.add(q, g)


def _function_vjp_batched(tape, block, r):
    """A vector sweep's p adjoints at once, for a ``tg.Function`` whose class
    defines ``batched_backward``; NotImplemented (the sweep then calls
    ``backward`` once per vector) for one that does not."""
    cls = tape.host[r][0]
    if getattr(cls, "batched_backward", None) is None:
        return NotImplemented
    _function_vjp(tape, block, r, block.s.p)
    return None


def _function_jvp(tape, tan, r):
    """A tg.Function's tangents from its ``jvp(ctx, *tangents)``: one tangent
    per input of forward (the input's shape; zeros where the input carries
    none, None for arguments that are not tensors), one per output back (None:
    zero), called once per direction."""
    cls, ctx, tensor_args, out_shapes, nargs = tape.host[r]
    why = getattr(cls, "no_jvp", None)
    if why is not None:
        raise NotImplementedError(why(ctx))
    if getattr(cls, "jvp", None) is None:
        named = first_order_message(cls, "jvp")
        if named is not None:
            raise NotImplementedError(named)
        raise NotImplementedError(
            f"jvp: {cls.__name__} is a tg.Function, which defines backward() but no "
            "forward-mode rule; define a static jvp(ctx, *tangents) on it (one tangent per "
            "input of forward, one per output returned), or use reverse mode (tg.vjp, "
            "tg.jacobian, tg.grad) for functions that call it")
    ins = [tan.lead(q, shape) for q, (_, shape) in zip(_parents(tape, r), tensor_args)]
    # several outputs (or a tuple of one): OUTPUT records right after r read it
    single = not (r + 1 < tape.n and tape.op[r + 1] == OUTPUT
                  and int(tape.args[tape.arg0[r + 1]]) == r)
    outs = [np.zeros((tan.p,) + tuple(s)) for s in out_shapes]
    for k in range(tan.p):
        args = [None] * nargs
        for (position, shape), t in zip(tensor_args, ins):
            args[position] = np.zeros(shape) if t is None else np.array(t[k])
        res = cls.jvp(ctx, *args)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(out_shapes):
            raise RuntimeError(
                f"{cls.__name__}.jvp returned {len(res)} tangents, expected {len(out_shapes)}: "
                "one per output of forward (None for a zero tangent)")
        for j, (o, shape) in enumerate(zip(res, out_shapes)):
            if o is None:
                continue
            o = np.asarray(o, dtype=np.float64)
            if o.shape != tuple(shape):
                raise RuntimeError(
                    f"{cls.__name__}.jvp returned a tangent of shape {o.shape} for output "
                    f"{j}, whose shape is {tuple(shape)}")
            outs[j][k] = o
    if single:
        tan.put(r, outs[0])
    else:
        for j, o in enumerate(outs):
            tan.put(r + 1 + j, o)


def _function_graph(W, r, u):
    """create_graph: the gradients from the class's ``vjp_ops`` (a VJP written
    in tapegrad's ops), added through the walk ``W``."""
    tape = W.tape
    cls, ctx, tensor_args, out_shapes, nargs = tape.host[r]
    parents = W.parents(r)
    where = {position: q for (position, _shape), q in zip(tensor_args, parents)}
    # argument ``position`` as a tensor of the graph, of the given value
    # (the Function keeps its inputs; the tape need not)
    inputs = lambda position, value: _known(W, where[position], value)  # noqa: E731
    if getattr(cls, "vjp_ops_outputs", False):
        # and its output j (one OUTPUT record each after r), so that a formula
        # in the outputs (a decomposition's factors) differentiates through
        # this record again, as the decompositions' rules (ops/linalg/) do
        grads = cls.vjp_ops(ctx, u, inputs, lambda j, value: _known(W, r + 1 + j, value))
    else:
        grads = cls.vjp_ops(ctx, u, inputs)
    for (position, _shape), q in zip(tensor_args, parents):
        g = grads[position]
        if g is not None:
            W.add(q, _flat(g))


_FUNCTION = register("Function", C.K_HOST, C.FUNCTION, None, host_vjp=_function_vjp,
                     batched_vjp=_function_vjp_batched, reads="",
                     not_replayable="tg.Function runs user Python", jvp=_function_jvp,
                     second="a tg.Function's backward works on arrays",
                     graph_vjp=_function_graph)


def first_order_message(cls, how=None):
    """The error for a derivative beyond the first (``how``: the transform, a
    prefix) that reaches a record of the tg.Function ``cls``, naming the op when
    the class says what it is (``first_order_only``), else None."""
    what = getattr(cls, "first_order_only", None)
    if what is None:
        return None
    return (f"{how + ': ' if how else ''}{what} has first-order derivatives only (its backward, "
            f"{cls.__name__}, works on arrays: no forward-mode or second-order rule); "
            "tg.grad, tg.vjp, tg.jacobian and backward() work through it, tg.hessian, "
            "tg.hvp, tg.jvp and create_graph=True do not")


class Function:
    """Base class of custom operations (see the module docstring)."""

    #: what the op is, for errors of higher derivatives that reach it ("eigh of a
    #: complex tensor"): :func:`first_order_message`; None names the class
    first_order_only = None

    #: forward mode: a subclass defines ``jvp(ctx, *tangents)`` as a staticmethod
    #: (see the module docstring); None: the op has no forward-mode rule
    jvp = None

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("a tg.Function subclass must define forward(ctx, *args)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("a tg.Function subclass must define backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args):
        """Run ``forward`` on the arguments' values and record it."""
        values = [a._data if isinstance(a, Tensor) else a for a in args]
        ctx = FunctionCtx()
        outs = cls.forward(ctx, *values)
        single = not isinstance(outs, tuple)
        outs = (outs,) if single else outs
        outs = tuple(np.asarray(o) for o in outs)
        tape = current()
        need = tape.enabled and any(isinstance(a, Tensor) and a._requires_grad for a in args)
        if not need:
            plain = tuple(_plain(o if o.ndim else o[()]) for o in outs)
            return plain[0] if single else plain
        tensor_args = [(i, np.shape(a._data)) for i, a in enumerate(args)
                       if isinstance(a, Tensor)]
        parents = tuple(_operand(tape, args[i]) for i, _ in tensor_args)
        shapes = tuple(o.shape for o in outs)
        if single:
            r = tape.record(_FUNCTION, parents, outs[0])
            tape.host[r] = (cls, ctx, tensor_args, shapes, len(args))
            return _result(tape, r, outs[0] if outs[0].ndim else outs[0][()])
        u = tape.record(_FUNCTION, parents, np.zeros(0))
        tape.host[u] = (cls, ctx, tensor_args, shapes, len(args))
        results = []
        for s, o in enumerate(outs):
            rr = tape.record(OUTPUT, (u,), o, (s,))
            results.append(_result(tape, rr, o if o.ndim else o[()]))
        return tuple(results)
