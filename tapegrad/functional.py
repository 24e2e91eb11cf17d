"""Derivatives of functions: grad, value_and_grad, vjp, jacobian, gradcheck,
and ``tapegrad.autograd.grad``.

All of them record the function once on the tape and run one reverse sweep.
Several seed vectors (a batch of cotangents, or the m rows of a Jacobian) go
through that one sweep together: vector reverse mode, every record carrying
p adjoints (``kernels/vector.py``).  Gradients are returned as arrays and are
never accumulated into any tensor's ``.grad``.
"""
import math

import numpy as np

from .autograd import Adjoints, _freed_error, check_nested, check_stale, differentiating
from .function import Function
from .grad_mode import enable_grad
from .tape import current
from .tensor import Tensor, bound, tensor
from .ops.complex_tensor import ComplexTensor, is_complex
from .transform_base import (_Slabs, _argnums, _call_complex, _cast, _connected, _pair_up,
                             _root_span, _run, _value, _vector_bytes, fresh_arenas)

#: adjoint memory a Jacobian may use at once (p vectors of every record);
#: larger ones are computed in chunks of rows
JACOBIAN_BYTES = 256 * 2**20


def replay_reverse(rep, seeds, p):
    """Vector reverse mode over a replayed trace (``trace_replay._Replay``) whose
    every record holds its value (``forward(..., full=True)``): ``seeds`` has
    one ``(p, size)`` float64 array (or None: zero) per output; returns one
    ``(p, size)`` float64 array per input, ``sum_k seeds_k^T d out_k / d
    input`` for all p vectors from one compiled sweep (in chunks of vectors
    when their adjoints would take more than ``JACOBIAN_BYTES``) -- what a
    traced Jacobian or batch of cotangents needs, where a sweep per vector
    would pay the whole tape p times.
    """
    sizes = [math.prod(s) for s in rep.in_shapes]
    out = [np.zeros((p, m)) for m in sizes]
    roots = [(int(r), s) for r, s in zip(rep.roots, seeds) if r is not None and s is not None]
    if not roots or p == 0:
        return out
    upto = max(_root_span(rep, r) for r, _ in roots)
    chunk = int(max(2, min(p, JACOBIAN_BYTES // _vector_bytes(rep, upto))))
    for lo in range(0, p, chunk):
        hi = min(p, lo + chunk)
        if hi - lo == 1:  # a last single vector: the ordinary sweep
            gs = rep.backward([None if s is None else s[lo] for s in seeds])
            for o, g in zip(out, gs):
                o[lo] = np.ravel(g)
            continue
        adj = _Slabs(rep, upto, hi - lo)
        T = rep.arrays(adj) + (adj.reached,)
        for r, s in roots:
            view = adj.block(r)
            if adj.reached[r]:  # two outputs on one record
                view += s[lo:hi]
            else:
                view[...] = s[lo:hi]
                adj.reached[r] = True
        _run(rep, adj, T, upto - 1, -1, hi - lo)
        for o, r in zip(out, rep.leaf_rec):
            if r < upto and adj.reached[r]:
                o[lo:hi] = adj.block(r)
    return out


def reverse(roots, seeds, inputs, retain_graph=False, allow_unused=True):
    """``sum_i seeds_i^T d roots_i / d input`` for every input, p vectors at once.

    ``roots`` are tensors, ``seeds`` arrays of shape ``(p,) + root.shape``;
    ``inputs`` are tensors (leaves or not).  Returns one ``(p,) + input.shape``
    float64 array per input, or None for an input no root depends on.  Leaves'
    ``.grad`` are not touched.
    """
    p = seeds[0].shape[0]
    out = [None] * len(inputs)
    if p == 0 or all(s.size == 0 for s in seeds):  # nothing to push back
        return [None if p else np.zeros((0,) + x.shape) for x in inputs]
    live = [(t, s) for t, s in zip(roots, seeds) if t._requires_grad]
    direct = [(t, s) for t, s in live if t._tok is None]  # a root that is a leaf
    graph = [(t, s) for t, s in live if t._tok is not None]
    for t, s in direct:
        for i, x in enumerate(inputs):
            if x is t:
                out[i] = s.reshape((p,) + t.shape).copy() if out[i] is None else out[i] + s
    if not graph:
        return out
    tape = current()
    for t, _ in graph:
        if t._tok.tape is not tape:
            raise RuntimeError("gradients must be computed on the thread that recorded "
                               "the graph")
        if t._tok is not tape.tok or tape.freed[t._rec]:
            raise _freed_error()
    upto = max(_root_span(tape, t._rec) for t, _ in graph)
    adj = _Slabs(tape, upto, p) if p > 1 else Adjoints(tape, upto)
    T = tape.arrays(adj) + (adj.reached,)
    for t, s in graph:
        s = s.reshape(p, -1)
        view = adj.block(t._rec) if p > 1 else adj[t._rec][None, :]
        if adj.reached[t._rec]:  # two roots on one record
            view += s
        else:
            view[...] = s
        adj.reached[t._rec] = True
    # each input's record; non-leaves are read when the sweep reaches them,
    # before a parent can take over their memory (see ``alias``)
    rec = [None] * len(inputs)
    # a leaf written in place since a graph used it has an older LEAF record
    # too (its next use records the new value): the graphs may reach either
    older = {}
    if tape.stale:
        for r, z in tape.leaves.items():
            if r < upto:
                older.setdefault(id(z), []).append(r)
    for i, x in enumerate(inputs):
        if x._tok is None:
            rs = older.get(id(x), [])   # the tape holds its leaves: ids are theirs
            if not rs and x._ltok is tape.lkey and x._lrec < upto:
                rs = [x._lrec]
            rec[i] = rs or None
        elif x._tok is tape.tok and x._rec < upto:
            rec[i] = x._rec
    stops = sorted({r for i, r in enumerate(rec) if r is not None and inputs[i]._tok is not None},
                   reverse=True)
    start = upto - 1
    grabbed = {}
    for h in stops:
        _run(tape, adj, T, start, h, p)
        if adj.reached[h]:
            grabbed[h] = adj.rows(h) if p > 1 else adj[h][None, :].copy()
        start = h
    _run(tape, adj, T, start, -1, p)
    for i, (x, r) in enumerate(zip(inputs, rec)):
        if r is None:
            continue
        for q in (r if x._tok is None else (r,)):
            if q in grabbed:
                g = grabbed[q]
            elif x._tok is None and adj.reached[q]:
                # one vector: a view of the leaf arena, which is this call's own
                g = adj.rows(q) if p > 1 else adj[q][None, :]
            else:
                continue
            g = g.reshape((p,) + x.shape)
            out[i] = g if out[i] is None else out[i] + g
    check_stale(tape, adj.reached, upto,
                [q for r in rec if r is not None for q in (r if isinstance(r, list) else (r,))])
    check_nested(tape, adj.reached, upto, inputs)
    if not retain_graph:
        tape.after_backward(adj.reached, T)
    return out


# -- helpers for the function transforms --------------------------------------------
# -- the transforms -------------------------------------------------------------------
def value_and_grad(f, argnums=0):
    """``f`` and its gradient in one pass: a function returning ``(value, grad)``.

    ``f`` must return one number (a one-element tensor or array); its
    arguments at ``argnums`` may be arrays, numbers or tensors, and their
    gradients come back as ndarrays of the same shapes and dtypes (a tuple
    when ``argnums`` is a tuple).  The pair is what
    ``scipy.optimize.minimize(fun, x0, jac=True)`` expects.

    A complex argument (complex array or number, ``tg.ComplexTensor``)
    reaches ``f`` as a ComplexTensor of two fresh real leaves, and its
    gradient is complex128, ``dL/dRe + 1j dL/dIm`` (PyTorch's convention:
    ``z - lr * g`` descends).  ``f`` itself must return a real number.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: (x ** 2).sum()
    >>> value, g = tg.value_and_grad(f)(np.array([1.0, 2.0]))
    >>> float(value), g
    (5.0, array([2., 4.]))
    """
    def value_and_grad_f(*args):
        single, nums = _argnums(argnums, len(args), "value_and_grad")
        connected = _connected(args)
        if connected:
            return _nested_value_and_grad(f, args, single, nums, connected)
        leaves, out, pairs = _call_complex(f, args, nums, "value_and_grad")
        if type(out) is ComplexTensor:
            raise TypeError(
                "grad requires a function with one real output number; this one returned a "
                "complex tensor: differentiate a real loss of it, such as "
                "(np.abs(z) ** 2).sum() or np.real(z).sum(), or use tg.vjp with a complex "
                "cotangent")
        if out.size != 1:
            raise TypeError(
                f"grad requires a function with one output number; this one returned shape "
                f"{out.shape}: use tg.jacobian, or tg.vjp with a cotangent")
        gs = reverse([out], [np.ones((1, 1))], leaves)
        grads = tuple(_cast(None if g is None else g[0], x.numpy())
                      for g, x in zip(gs, leaves))
        if pairs is not None:
            grads = tuple(_pair_up(grads, pairs))
        value = float(out.detach().numpy().reshape(()))
        return value, (grads[0] if single else grads)
    value_and_grad_f.__name__ = f"value_and_grad({getattr(f, '__name__', 'f')})"
    return value_and_grad_f


class _Spec:
    """What a nested ``value_and_grad`` record needs for its VJP."""
    __slots__ = ("at", "primals", "nums", "connected", "value", "outputs", "s", "leaves",
                 "where", "missing")


def _nested_value_and_grad(f, args, single, nums, connected):
    """``value_and_grad(f)`` at arguments that are themselves being differentiated.

    The value and gradient are computed at the arguments' values as usual,
    then recorded as one op whose inputs are the tensors among ``args``, so
    an enclosing ``grad``, ``jacobian`` or ``backward`` differentiates through
    them.  Its VJP is a Hessian-vector product: for cotangents ``c`` (of the
    value) and ``v`` (of the gradients), input ``i`` receives
    ``c df/dx_i + sum_j H_ij v_j`` -- the Hessian being symmetric -- computed
    exactly by ``tg.hvp``'s forward-over-reverse pass.  A third level of
    nesting would need the derivative of that pass and raises
    NotImplementedError from ``tg.hvp`` (its op has no forward rule).
    """
    for i in nums:
        if is_complex(args[i]):
            raise NotImplementedError(
                f"value_and_grad: argument {i} is complex and argument {connected[0]} is being "
                "differentiated by an enclosing transform; gradients with respect to complex "
                "arguments do not nest. Pass the real and imaginary parts as one real array "
                "v and build z = tg.complex(v[:n], v[n:]) inside f")
    diff = sorted(set(nums) | set(connected))
    fixed = list(args)
    primals = [np.array(args[i]._data if isinstance(args[i], Tensor) else args[i],
                        dtype=np.float64) for i in diff]

    def at(*xs):
        full = list(fixed)
        for i, x in zip(diff, xs):
            full[i] = x
        return f(*full)

    with differentiating((), strict=True):
        value, grads = value_and_grad(at, argnums=tuple(range(len(diff))))(*primals)
    spec = _Spec()
    spec.at, spec.primals, spec.nums, spec.connected = at, tuple(primals), nums, connected
    spec.value = value
    spec.outputs = tuple(np.asarray(grads[diff.index(a)]) for a in nums)
    outs = _GradOf.apply(spec, *[args[i] for i in connected])
    value_t, grads_t = outs[0], outs[1:]
    return value_t, (grads_t[0] if single else tuple(grads_t))


class _GradOf(Function):
    """The value and gradient of a function, as one differentiable record."""

    @staticmethod
    def forward(ctx, spec, *xs):
        ctx.spec = spec
        return (np.asarray(spec.value, dtype=np.float64),) + spec.outputs

    @staticmethod
    def backward(ctx, c, *vs):
        with fresh_arenas():
            return _GradOf._vjp(ctx, c, *vs)

    @staticmethod
    def _vjp(ctx, c, *vs):
        from .second import hvp
        spec = ctx.spec
        diff = sorted(set(spec.nums) | set(spec.connected))
        tangents = [np.zeros_like(x) for x in spec.primals]
        for a, v in zip(spec.nums, vs):
            tangents[diff.index(a)] = tangents[diff.index(a)] + v
        g, hv = hvp(spec.at, spec.primals, tuple(tangents))
        c = float(np.asarray(c))
        return (None,) + tuple(c * g[diff.index(i)] + hv[diff.index(i)]
                               for i in spec.connected)


def grad(f, argnums=0):
    """The gradient of a scalar function, as a function.

    Transforms nest: called on a tensor that is itself being differentiated
    (inside another ``tg.grad``, ``tg.jacobian`` or before a ``backward``),
    it returns tensors that carry the derivative on, so ``tg.grad(tg.grad(f))``
    is the second derivative and ``tg.jacobian(tg.grad(f))`` the Hessian.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> df = tg.grad(lambda x, y: (x * y).sum(), argnums=(0, 1))
    >>> df(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    (array([3., 4.]), array([1., 2.]))
    >>> float(tg.grad(tg.grad(lambda x: x ** 3))(2.0))     # 6 x
    12.0
    """
    vg = value_and_grad(f, argnums)

    def grad_f(*args):
        return vg(*args)[1]
    grad_f.__name__ = f"grad({getattr(f, '__name__', 'f')})"
    return grad_f


def vjp(f, *primals):
    """``(f(*primals), vjp_fn)``: ``vjp_fn(cotangent)`` gives ``cotangent^T J`` for
    every primal, as a tuple of arrays.

    ``vjp_fn`` may be called many times.  A batch of cotangents (shape
    ``(p,) + out.shape``) goes through one vector sweep and gives arrays of
    shape ``(p,) + primal.shape``.

    Complex primals give complex128 results ``dL/dRe + 1j dL/dIm`` as in
    ``grad``; for a complex output (a ComplexTensor) the cotangent c may be
    complex, and the result is the gradient of the real
    ``sum(Re(c) Re(out) + Im(c) Im(out))``, as ``torch.autograd.grad``
    computes with ``grad_outputs=c``.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> out, vjp_fn = tg.vjp(lambda x: x * np.array([1.0, 2.0, 3.0]), np.ones(3))
    >>> vjp_fn(np.array([1.0, 1.0, 0.0]))
    (array([1., 2., 0.]),)
    >>> vjp_fn(np.eye(3))[0]       # three cotangents at once: the Jacobian
    array([[1., 0., 0.],
           [0., 2., 0.],
           [0., 0., 3.]])
    """
    leaves, out, pairs = _call_complex(f, primals, tuple(range(len(primals))), "vjp")
    cplx = type(out) is ComplexTensor
    if cplx:
        value = out.detach().numpy()
        value = value[()] if value.ndim == 0 else value
        roots = [out.real, out.imag]
    else:
        value = _value(out)
        roots = [out]

    def vjp_fn(cotangent):
        if cplx:
            c = cotangent.detach().numpy() if type(cotangent) is ComplexTensor else \
                cotangent._data if isinstance(cotangent, Tensor) else cotangent
            c = np.asarray(c, dtype=np.complex128)
        else:
            if is_complex(cotangent):
                raise TypeError("vjp: the function's output is real, so the cotangent must be "
                                "real too; got a complex one")
            c = np.asarray(cotangent._data if isinstance(cotangent, Tensor) else cotangent,
                           dtype=np.float64)
        if c.shape == out.shape:
            batch = False
            c = c[None]
        elif c.shape[1:] == out.shape and c.ndim == out.ndim + 1:
            batch = True
        else:
            raise ValueError(
                f"vjp: the cotangent has shape {c.shape}; it must have the output's shape "
                f"{out.shape}, or (p,) + {out.shape} for a batch of p cotangents")
        if not any(t._requires_grad for t in roots):
            gs = [None] * len(leaves)
        elif cplx:
            # the gradient of the real sum(Re(c) * Re(out) + Im(c) * Im(out))
            gs = reverse(roots, [np.ascontiguousarray(c.real), np.ascontiguousarray(c.imag)],
                         leaves, retain_graph=True)
        else:
            gs = reverse([out], [c], leaves, retain_graph=True)
        res = []
        for g, x in zip(gs, leaves):
            like = x.numpy()
            g = np.zeros((c.shape[0],) + like.shape) if g is None else g
            g = g.astype(like.dtype, copy=False)
            res.append(g if batch else g[0])
        return tuple(_pair_up(res, pairs))
    return value, vjp_fn


def jacobian(f, argnums=0, *, mode="auto"):
    """The Jacobian of ``f``, shape ``out.shape + in.shape``, as a function.

    Computed by vector reverse mode: the output's m unit seeds go through one
    compiled sweep together (in chunks of rows when the adjoints of all m
    would take more than ``tapegrad.functional.JACOBIAN_BYTES``) -- or by
    forward mode (:func:`tapegrad.jacfwd`: the n unit tangents in one tangent
    sweep) when the inputs have at most half as many elements as the output
    (``2 n <= m``), where n directions cost less than m vectors.  A function
    that uses an op without a forward rule (a ``tg.Function``) always takes
    reverse mode.  ``mode='reverse'`` or ``'forward'`` forces one (forward
    raises NotImplementedError for such ops).

    Of a complex argument (and a real output) the Jacobian is complex128,
    each row the gradient ``d out_i/dRe + 1j d out_i/dIm`` as in ``grad``; a
    complex output raises TypeError (there is no single convention).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> tg.jacobian(lambda x: np.tanh(A @ x) * 0 + A @ x)(np.zeros(2))
    array([[1., 2.],
           [3., 4.]])
    """
    if mode not in ("auto", "reverse", "forward"):
        raise ValueError(f"jacobian: mode must be 'auto', 'reverse' or 'forward', got {mode!r}")

    def jacobian_f(*args):
        single, nums = _argnums(argnums, len(args), "jacobian")
        leaves, out, pairs = _call_complex(f, args, nums, "jacobian")
        if type(out) is ComplexTensor:
            raise TypeError(
                "jacobian: the function returned a complex tensor, and the Jacobian of a "
                "complex output has no single convention (of a complex argument it is one "
                "complex number per pair of elements only where f is holomorphic). Take the "
                "Jacobians of its real and imaginary parts, tg.jacobian(lambda *a: "
                "np.real(f(*a))) and the same with np.imag, or use tg.vjp with complex "
                "cotangents")
        m = out.size
        gs = None
        if mode == "forward" and out._requires_grad:
            from . import forward
            gs = forward.forward_jacobian(leaves, out)
        elif mode == "auto":
            gs = _forward_jacobian(leaves, out)
        if gs is not None:
            pass
        elif not out._requires_grad or m == 0:
            gs = [None] * len(leaves)
        else:
            tape = current()
            per_vector = _vector_bytes(tape, out._rec + 1) if out._tok else 8
            chunk = int(max(1, min(m, JACOBIAN_BYTES // per_vector)))
            eye = np.eye(m)
            parts = []
            for lo in range(0, m, chunk):
                hi = min(m, lo + chunk)
                parts.append(reverse([out], [eye[lo:hi].reshape((hi - lo,) + out.shape)],
                                     leaves, retain_graph=hi < m))
            gs = [None if any(p[i] is None for p in parts) else
                  np.concatenate([p[i] for p in parts]) for i in range(len(leaves))]
        res = []
        for g, x in zip(gs, leaves):
            like = x.numpy()
            J = np.zeros(out.shape + like.shape) if g is None else g.reshape(
                out.shape + like.shape)
            res.append(J.astype(like.dtype, copy=False))
        if pairs is not None:
            res = _pair_up(res, pairs)
        return res[0] if single else tuple(res)
    jacobian_f.__name__ = f"jacobian({getattr(f, '__name__', 'f')})"
    return jacobian_f


def _forward_jacobian(leaves, out):
    """The Jacobian by forward mode when ``2 n <= m`` (see ``jacobian``), else
    None; None as well when an op on the way has no forward rule."""
    if not out._requires_grad or 2 * sum(int(x.size) for x in leaves) > out.size:
        return None
    from . import forward  # imports this module
    try:
        return forward.forward_jacobian(leaves, out)
    except NotImplementedError:
        return None


# -- PyTorch's torch.autograd.grad ------------------------------------------------------
def _as_list(x):
    return [x] if isinstance(x, Tensor) else list(x)


def autograd_grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
                  allow_unused=False):
    """PyTorch's ``torch.autograd.grad``: the gradients of ``outputs`` (seeded
    with ``grad_outputs``) with respect to ``inputs``, as a tuple of tensors;
    no ``.grad`` is touched.  Exposed as ``tapegrad.autograd.grad``.

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
    from .autograd import _seed
    seeds = []
    for t, g in zip(outputs, grad_outputs):
        if not isinstance(t, Tensor) or not t._requires_grad:
            raise RuntimeError(
                "element 0 of tensors does not require grad and does not have a grad_fn")
        seeds.append(_seed(t, g)[None, :])
    if create_graph:
        return _graph_grad(outputs, seeds, inputs, allow_unused)
    gs = reverse(outputs, seeds, inputs, retain_graph=bool(retain_graph))
    res = []
    for i, (g, x) in enumerate(zip(gs, inputs)):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors (input {i}, shape {x.shape}) appears "
                    "to not have been used in the graph. Set allow_unused=True if this is "
                    "the desired behavior.")
            res.append(None)
        else:
            res.append(tensor(g[0].reshape(x.shape).astype(x.dtype, copy=False)))
    return tuple(res)


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
        from .second import _hvp_pass
        spec = ctx.spec
        tape = current()
        s = _At(int(tape.args[tape.arg0[ctx._record]]))
        if tape.freed[s._rec]:
            raise _freed_error()
        tangents = [np.zeros((1, z.size)) for z in spec.leaves]
        for k, u in zip(spec.where, us):
            tangents[k] = tangents[k] + np.asarray(u, dtype=np.float64).reshape(1, -1)
        upto = _root_span(tape, s._rec)
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
    """A record id where the passes of second.py take a tensor (``._rec``)."""
    __slots__ = ("_rec",)

    def __init__(self, rec):
        self._rec = rec


def _graph_grad(outputs, seeds, inputs, allow_unused):
    """``autograd.grad(..., create_graph=True)``: gradients that are tensors
    of the graph, so they can be differentiated again, to any order
    (:mod:`tapegrad.create_graph`).  A graph with an op that has no
    differentiable backward formula there gets one second-order node
    (``_GraphGrad``) instead, with respect to leaves only."""
    from . import create_graph as CG
    tape = current()
    # the numeric backward first: it raises what the graph's own backward
    # would (freed graph, values written in place) and tells which inputs
    # the outputs reach
    gs = reverse(outputs, seeds, inputs, retain_graph=True)
    for i, (g, x) in enumerate(zip(gs, inputs)):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"One of the differentiated Tensors (input {i}, shape {x.shape}) appears "
                "to not have been used in the graph. Set allow_unused=True if this is "
                "the desired behavior.")
    upto = max([_root_span(tape, t._rec) for t in outputs if t._tok is tape.tok] or [0])
    try:
        walked = CG.graph_grad(tape, outputs, seeds, inputs, upto)
    except CG.NoRule as e:
        return _second_order_grad(outputs, seeds, inputs, allow_unused, e)
    res = []
    for g, w, x in zip(gs, walked, inputs):
        if g is None:
            res.append(None)
            continue
        if w is None:  # reached only through ops of zero derivative
            w = tensor(np.zeros(x.size))
        if w.shape != x.shape:
            w = w.reshape(x.shape)
        res.append(w if x.dtype == np.float64 else w.astype(x.dtype))
    return tuple(res)


def _second_order_grad(outputs, seeds, inputs, allow_unused, missing):
    """The gradients as one ``_GraphGrad`` node (differentiable once more),
    for a graph through an op without a differentiable backward formula
    (``missing``, a ``create_graph.NoRule``)."""
    from .kernels.sweep import live_records
    from .ops import reductions as Rd
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
    gs = reverse([s], [np.ones((1, 1))], inputs, retain_graph=True)
    for i, (g, x) in enumerate(zip(gs, inputs)):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"One of the differentiated Tensors (input {i}, shape {x.shape}) appears "
                "to not have been used in the graph. Set allow_unused=True if this is "
                "the desired behavior.")
    if s._tok is None:  # an input is the output: no graph to differentiate again
        return tuple(None if g is None else tensor(g[0].reshape(x.shape).astype(x.dtype))
                     for g, x in zip(gs, inputs))
    tape.arg0[tape.n] = tape.na
    upto = _root_span(tape, s._rec)
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


_GraphGrad.__name__ = _GradOf.__name__ = "Grad"  # grad_fn shows GradBackward


def backward_graph(t, gradient, inputs=None):
    """``t.backward(gradient, create_graph=True)``: accumulate into the leaves'
    ``.grad`` gradients that are themselves differentiable tensors."""
    from .autograd import _seed
    from .kernels.sweep import live_records
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
            upto = _root_span(tape, t._rec)
            live = live_records((tape.op, tape.arg0, tape.size, None, tape.args), upto,
                                np.array([t._rec], np.int64))
            inputs = [z for r, z in sorted(tape.leaves.items()) if r < upto and live[r]]
    else:
        inputs = _as_list(inputs)
    if not inputs:
        return
    gs = _graph_grad([t], [seed], inputs, allow_unused=True)
    for x, g in zip(inputs, gs):
        if g is None:
            continue
        old = getattr(x, "_grad", None)
        x._grad = g if old is None else old + g


def backward_to(t, gradient, retain_graph, inputs):
    """``t.backward(gradient, retain_graph, inputs=inputs)``: accumulate into
    the given tensors' ``.grad`` only."""
    from .autograd import _accumulate, _seed
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
    gs = reverse([t], [seed], inputs, retain_graph=retain_graph)
    for x, g in zip(inputs, gs):
        if g is not None:
            if x._tok is not None and not hasattr(x, "_grad"):
                x._grad = None  # a non-leaf named in inputs= gets a .grad (PyTorch)
            _accumulate(x, g[0].reshape(x.shape))


# -- gradcheck ------------------------------------------------------------------------
class GradcheckError(RuntimeError):
    """Raised by :func:`gradcheck` when analytic and numerical derivatives differ."""


def gradcheck(f, *inputs, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True):
    """Compare ``f``'s Jacobian from the reverse sweep, and from the forward
    tangent sweep where every op has a forward rule, with central differences.

    Every input is perturbed element by element in float64 (``eps``); an
    element fails when ``|analytic - numerical| > atol + rtol * |numerical|``.
    Returns True, or raises :class:`GradcheckError` naming the mode and the
    worst element (or returns False with ``raise_exception=False``).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.gradcheck(lambda x, y: np.sin(x) * y, np.array([0.1, 0.2]), np.array([1.0, 2.0]))
    True
    """
    xs = [np.array(x.detach().numpy() if isinstance(x, Tensor) else x, dtype=np.float64)
          for x in inputs]
    nums = tuple(range(len(xs)))
    jacs = {"reverse sweep": jacobian(f, argnums=nums, mode="reverse")(*xs)}
    try:
        jacs["forward tangent sweep"] = jacobian(f, argnums=nums, mode="forward")(*xs)
    except NotImplementedError:  # an op without a forward rule (a tg.Function)
        pass

    def plain(*args):
        out = f(*[tensor(a) for a in args])
        return np.asarray(out.detach().numpy() if isinstance(out, Tensor) else out,
                          dtype=np.float64)
    numeric = []
    for i, x in enumerate(xs):
        cols = []
        for j in np.ndindex(x.shape):
            hi = [a.copy() for a in xs]
            lo = [a.copy() for a in xs]
            hi[i][j] += eps
            lo[i][j] -= eps
            cols.append((j, (plain(*hi) - plain(*lo)) / (2 * eps)))
        numeric.append(cols)
    worst = (0.0, None)
    for how, jac in jacs.items():
        for i, (x, J) in enumerate(zip(xs, jac)):
            out_shape = J.shape[:J.ndim - x.ndim]
            for j, num in numeric[i]:
                num = num.reshape(out_shape)
                ana = J[(Ellipsis,) + j]
                err = np.abs(ana - num) - (atol + rtol * np.abs(num))
                if err.size and err.max() > worst[0]:
                    o = tuple(int(c) for c in np.unravel_index(int(err.argmax()), err.shape))
                    worst = (err.max(), (how, i, j, o, float(ana[o]), float(num[o])))
    if worst[1] is None:
        return True
    how, i, j, o, a, n = worst[1]
    msg = (f"Jacobian mismatch for input {i}: d output{list(o)} / d input"
           f"{[int(c) for c in j]} is {a!r} from the {how} but {n!r} by central "
           f"differences (atol={atol}, rtol={rtol}, eps={eps})")
    if raise_exception:
        raise GradcheckError(msg)
    return False


# Tensor.backward(create_graph=True), backward(inputs=...) and tg.autograd.grad run these
bound.bind(backward_graph=backward_graph, backward_to=backward_to, autograd_grad=autograd_grad)
