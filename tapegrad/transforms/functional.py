"""Derivatives of functions: grad, value_and_grad, vjp, jacobian, gradcheck;
and, from ``transforms/reverse.py``, ``tapegrad.engine.backward.grad`` (``autograd_grad``)
and the sweep they all run (``reverse``).

All of them record the function once on the tape and run one reverse sweep.
Several seed vectors (a batch of cotangents, or the m rows of a Jacobian) go
through that one sweep together: vector reverse mode, every record carrying
p adjoints (``kernels/vector.py``).  Gradients are returned as arrays and are
never accumulated into any tensor's ``.grad``.
"""
import math

import numpy as np

from ..engine.backward import differentiating
from ..ops.elementwise import positive
from ..ops.function import Function
from ..core.tape import current
from ..core.tensor import Tensor, tensor
from ..ops.complex_tensor import ComplexTensor, is_complex
# reverse: the sweep every transform here runs; autograd_grad, backward_graph and
# backward_to are part of this module's namespace (tapegrad.transforms.functional)
from .create_graph.index import NoRule
from .reverse import _Spec, autograd_grad, backward_graph, backward_to, reverse  # noqa: F401
from .base import (_Slabs, _argnums, _call_complex, _call_tree, _cast, _connected,
                             _pair_up, _root_span, _run, _trace_inputs, _tree_build,
                             _tree_flatten, _tree_match, _tree_str, _value, _vector_bytes,
                             fresh_arenas)

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

# -- the transforms -------------------------------------------------------------------
def value_and_grad(f, argnums=0, has_aux=False):
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
    Called on arguments that an enclosing transform differentiates (as
    ``grad`` describes), such a gradient is a ComplexTensor of the two
    parts' gradient tensors, and a ComplexTensor argument that requires grad
    carries its derivative through.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: (x ** 2).sum()
    >>> value, g = tg.value_and_grad(f)(np.array([1.0, 2.0]))
    >>> float(value), g
    (5.0, array([2., 4.]))

    Keyword arguments of the returned function reach ``f`` and are not
    differentiated (as in JAX).  With ``has_aux=True`` (JAX's), ``f`` returns
    a pair ``(value, aux)`` and the result is ``((value, aux), grad)``; the
    tensors in ``aux`` (also inside tuples, lists and dicts) come back as
    plain arrays (NumPy scalars for 0-d ones), as the gradients do.

    >>> f = lambda w, X: (((X @ w) ** 2).sum(), X @ w)
    >>> (value, pred), g = tg.value_and_grad(f, has_aux=True)(np.ones(2), X=np.eye(2))
    >>> pred
    array([1., 1.])
    """
    if has_aux:
        return _with_aux(value_and_grad, f, argnums, "value_and_grad")

    def value_and_grad_f(*args, **kwargs):
        single, nums = _argnums(argnums, len(args), "value_and_grad")
        if kwargs:
            return value_and_grad(_bind_kwargs(f, kwargs), argnums)(*args)
        connected = _connected(args)
        if connected:
            return _nested_value_and_grad(f, args, single, nums, connected)
        if hasattr(f, "_scalar_value_and_grad"):
            done = _traced_value_and_grad(f, args, nums)
            if done is not None:
                return done[0], (done[1][0] if single else done[1])
        leaves, out, pairs = _call_complex(f, args, nums, "value_and_grad")
        out = _one_number(out)
        gs = reverse([out], [np.ones((1, 1))], leaves)
        grads = tuple(_cast(None if g is None else g[0], x.numpy())
                      for g, x in zip(gs, leaves))
        if pairs is not None:
            grads = tuple(_pair_up(grads, pairs))
        value = float(out.detach().numpy().reshape(()))
        return value, (grads[0] if single else grads)
    value_and_grad_f.__name__ = f"value_and_grad({getattr(f, '__name__', 'f')})"
    return value_and_grad_f


def _traced_value_and_grad(f, args, nums):
    """``value_and_grad`` of a traced function (``tg.trace``) at plain real
    arguments whose differentiated ones are all trace inputs (float arrays
    and numbers): the trace's own replay and reverse sweep, without
    recording the call on the tape as an op and sweeping that (which costs a
    second forward replay and copies of every gradient).  The same values
    and gradients as the general path (tests/test_traced_transforms.py);
    None where that path must run: tensors or complex numbers among the
    arguments, a differentiated argument the trace treats as static (an int),
    or a function that does not return one element."""
    inputs = _trace_inputs(args, nums)
    if inputs is None:
        return None
    done = f._scalar_value_and_grad(args)
    if done is None:
        return None
    value, gs = done
    grads = []
    for n in nums:
        like = np.asarray(args[n])
        g = np.asarray(gs[inputs.index(n)]).reshape(like.shape)
        grads.append(_cast(g[()] if g.ndim == 0 else g, like))  # 0-d: a NumPy scalar, as there
    return float(np.asarray(value).reshape(())), tuple(grads)


def _nested_value_and_grad(f, args, single, nums, connected):
    """``value_and_grad(f)`` at arguments that are themselves being differentiated.

    The gradient is recorded on the tape with ``create_graph``
    (``_recorded_value_and_grad``), so an enclosing ``grad``, ``jacobian``,
    ``hessian`` or ``backward`` differentiates it as any other ops, to any
    order of nesting.

    Where ``create_graph`` cannot record through an op of ``f`` (a
    ``tg.Function`` whose backward works on arrays), the value and gradient
    are computed at the arguments' values as usual, then recorded as one op
    whose inputs are the tensors among ``args``.  Its VJP is a
    Hessian-vector product: for cotangents ``c`` (of the value) and ``v``
    (of the gradients), input ``i`` receives ``c df/dx_i + sum_j H_ij v_j``
    -- the Hessian being symmetric -- computed exactly by ``tg.hvp``'s
    forward-over-reverse pass (that op has no second order of its own).

    Complex arguments (differentiated ones, and ComplexTensors that require
    grad) go through ``_nested_complex``: the same, over their real and
    imaginary parts.
    """
    split = _complex_split(args, nums)
    if split is not None:
        return _nested_complex(f, args, single, nums, split)
    try:
        return _recorded_value_and_grad(f, args, single, nums)
    except (NoRule, NotImplementedError):
        pass  # an op that create_graph cannot record through: the one-op form below
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


def _one_number(out):
    """``out``, a tensor of one real number (a number or array of one
    element becomes one); TypeError naming what to do otherwise."""
    if type(out) is ComplexTensor:
        raise TypeError(
            "grad requires a function with one real output number; this one returned a "
            "complex tensor: differentiate a real loss of it, such as "
            "(np.abs(z) ** 2).sum() or np.real(z).sum(), or use tg.vjp with a complex "
            "cotangent")
    if not isinstance(out, Tensor):
        out = tensor(np.asarray(out, dtype=np.float64))
    if out.size != 1:
        raise TypeError(
            f"grad requires a function with one output number; this one returned shape "
            f"{out.shape}: use tg.jacobian, or tg.vjp with a cotangent")
    return out


def _recorded_value_and_grad(f, args, single, nums):
    """``value_and_grad(f)`` recorded on the tape: each differentiated
    argument becomes a new variable of this level (a fresh record of a
    tensor, so that a closure over the same tensor stays a constant of this
    level; a new leaf for a number or array), and its gradient is taken with
    ``create_graph``, as ops that the enclosing levels differentiate again."""
    xs = list(args)
    for i in nums:
        a = args[i]
        if isinstance(a, Tensor) and a._requires_grad:
            xs[i] = positive(a)  # a new record of a's value, with a as its parent
        else:
            xs[i] = tensor(np.array(getattr(a, "_data", a), dtype=np.float64),
                           requires_grad=True)
    out = _one_number(f(*xs))
    if not out._requires_grad:  # f does not depend on its arguments
        grads = tuple(np.zeros_like(xs[i]._data) for i in nums)
    else:
        gs = autograd_grad([out], [xs[i] for i in nums], create_graph=True, allow_unused=True)
        grads = tuple(np.zeros_like(xs[i]._data) if g is None else g
                      for i, g in zip(nums, gs))
    return out.reshape(()), (grads[0] if single else grads)


def _complex_split(args, nums):
    """For ``_nested_value_and_grad``: per argument, its index among real
    arguments, or the indices ``(re, im)`` of its two parts where it is
    complex and differentiated (at ``nums``) or a ComplexTensor that
    requires grad; None when there is no such argument."""
    where, k, any_complex = [], 0, False
    for i, a in enumerate(args):
        if (i in nums and is_complex(a)) or (
                type(a) is ComplexTensor and (a.real._requires_grad or a.imag._requires_grad)):
            where.append((k, k + 1))
            k += 2
            any_complex = True
        else:
            where.append(k)
            k += 1
    return where if any_complex else None


def _nested_complex(f, args, single, nums, where):
    """``_nested_value_and_grad`` with complex arguments: each one (see
    ``_complex_split``) becomes two real arguments, its real and imaginary
    parts (the tensors of a ComplexTensor, which may require grad), and f is
    called with the ComplexTensor of the two.  The real machinery then
    differentiates with respect to the parts, and the gradient of a complex
    argument comes back as the ComplexTensor ``d/dRe + 1j d/dIm`` of the two
    parts' gradient tensors, which carry the derivative on."""
    flat = []
    for a, w in zip(args, where):
        if type(w) is tuple:
            flat += [a.real, a.imag] if type(a) is ComplexTensor else [np.real(a), np.imag(a)]
        else:
            flat.append(a)

    def real_f(*xs):
        return f(*[ComplexTensor(xs[w[0]], xs[w[1]]) if type(w) is tuple else xs[w]
                   for w in where])
    real_f.__name__ = getattr(f, "__name__", "f")
    real_nums = tuple(j for i in nums for j in (where[i] if type(where[i]) is tuple
                                                  else (where[i],)))
    value, grads = _nested_value_and_grad(real_f, flat, False, real_nums, _connected(flat))
    res, k = [], 0
    for i in nums:
        if type(where[i]) is tuple:
            res.append(ComplexTensor(grads[k], grads[k + 1]))
            k += 2
        else:
            res.append(grads[k])
            k += 1
    return value, (res[0] if single else tuple(res))


class _GradOf(Function):
    """The value and gradient of a function, as one differentiable record."""

    #: what a second-order pass through this record (a third level) says
    no_second_order = (
        "a gradient nested inside another goes to any order, except through an op whose "
        "backward works on arrays (the FFTs, a tg.Function without vjp_ops): there tg.grad "
        "nests two deep (tg.grad(tg.grad(f)), tg.jacobian(tg.grad(f)), tg.hessian, tg.hvp). "
        "For higher orders through a tg.Function, give it a vjp_ops method (its backward in "
        "tapegrad's ops)")

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
        from .second.passes import hvp
        spec = ctx.spec
        diff = sorted(set(spec.nums) | set(spec.connected))
        tangents = [np.zeros_like(x) for x in spec.primals]
        for a, v in zip(spec.nums, vs):
            tangents[diff.index(a)] = tangents[diff.index(a)] + v
        g, hv = hvp(spec.at, spec.primals, tuple(tangents))
        c = float(np.asarray(c))
        return (None,) + tuple(c * g[diff.index(i)] + hv[diff.index(i)]
                               for i in spec.connected)

    @staticmethod
    def jvp(ctx, _, *ts):
        """Forward mode through the record (``tg.jvp`` of a gradient, a
        Hessian-vector product written as jvp of grad): along tangents ``t``
        of the connected inputs the value moves by ``g . t`` and the
        gradient by ``H t``, by one forward-over-reverse pass."""
        with fresh_arenas():
            return _GradOf._jvp(ctx, *ts)

    @staticmethod
    def _jvp(ctx, *ts):
        from .second.passes import hvp
        spec = ctx.spec
        diff = sorted(set(spec.nums) | set(spec.connected))
        tangents = [np.zeros_like(x) for x in spec.primals]
        for i, t in zip(spec.connected, ts):
            tangents[diff.index(i)] = tangents[diff.index(i)] + np.reshape(t, np.shape(
                tangents[diff.index(i)]))
        g, hv = hvp(spec.at, spec.primals, tuple(tangents))
        value = sum(float((g[diff.index(i)] * tangents[diff.index(i)]).sum())
                    for i in spec.connected)
        return (np.asarray(value),) + tuple(np.asarray(hv[diff.index(a)]) for a in spec.nums)


_GradOf.__name__ = "Grad"  # grad_fn shows GradBackward


def _bind_kwargs(f, kwargs):
    """f with keyword arguments bound (they are not differentiated)."""
    def bound(*args):
        return f(*args, **kwargs)
    bound.__name__ = getattr(f, "__name__", "f")
    return bound


def _plain_aux(aux):
    """``aux`` with every tensor in it (inside tuples, lists and dicts too)
    a plain array, as the transforms return gradients."""
    if isinstance(aux, Tensor):
        return _value(aux)
    if type(aux) is ComplexTensor:
        v = aux.detach().numpy()
        return v[()] if v.ndim == 0 else v.copy()
    if isinstance(aux, tuple) and hasattr(aux, "_fields"):  # a namedtuple
        return type(aux)(*map(_plain_aux, aux))
    if isinstance(aux, (tuple, list)):
        return type(aux)(map(_plain_aux, aux))
    if isinstance(aux, dict):
        return type(aux)((k, _plain_aux(v)) for k, v in aux.items())
    return aux


def _with_aux(transform, f, argnums, who):
    """``transform(f, argnums, has_aux=True)``: f returns ``(value, aux)``;
    the transform of the value, with aux beside it (``((value, aux), grad)``
    for value_and_grad, ``(grad, aux)`` for grad)."""
    def call(*args, **kwargs):
        box = []

        def value_only(*xs):
            out = f(*xs, **kwargs)
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise TypeError(
                    f"{who}(f, has_aux=True): f must return a pair (value, aux); got "
                    f"{type(out).__name__}" + (f" of length {len(out)}"
                                               if isinstance(out, (tuple, list)) else ""))
            box[:] = [out[1]]
            return out[0]
        value_only.__name__ = getattr(f, "__name__", "f")
        value, g = value_and_grad(value_only, argnums)(*args)
        aux = _plain_aux(box[0])
        return ((value, aux), g) if transform is value_and_grad else (g, aux)
    call.__name__ = f"{who}({getattr(f, '__name__', 'f')})"
    return call


def grad(f, argnums=0, has_aux=False):
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

    Keyword arguments reach ``f`` undifferentiated; ``has_aux=True`` (f
    returns ``(value, aux)``) gives ``(grad, aux)``, as in JAX (see
    :func:`value_and_grad`).
    """
    if has_aux:
        return _with_aux(grad, f, argnums, "grad")
    vg = value_and_grad(f, argnums)

    def grad_f(*args, **kwargs):
        return vg(*args, **kwargs)[1]
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

    A function may return several outputs: a tuple, list or dict of them,
    nested (JAX's pytrees).  Then ``f(*primals)`` comes back in that
    structure and ``vjp_fn`` takes a cotangent of the same structure, one
    array per output (tuples and lists stand for each other); all go
    through one reverse sweep.

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
    >>> (total, doubled), vjp_fn = tg.vjp(lambda x: (x.sum(), 2 * x), np.ones(2))
    >>> vjp_fn((1.0, np.array([0.0, 1.0])))
    (array([1., 3.]),)
    """
    leaves, outs, tree, pairs = _call_tree(f, primals, tuple(range(len(primals))), "vjp")
    values = []
    for out in outs:
        if type(out) is ComplexTensor:
            value = out.detach().numpy()
            values.append(value[()] if value.ndim == 0 else value)
        else:
            values.append(_value(out))

    def vjp_fn(cotangent):
        if tree is None:
            cts = [cotangent]
        else:
            cts = []
            if not _tree_match(tree, cotangent, cts):
                raise TypeError(
                    f"vjp: the cotangent must have the structure of the function's output, "
                    f"{_tree_str(tree)} (one array per *); got {_cotangent_str(cotangent)}")
        roots, seeds, ps, shapes = [], [], set(), []
        for i, (out, ct) in enumerate(zip(outs, cts)):
            c = _cotangent(out, ct, "" if tree is None else f" {i}")
            shapes.append(c.shape)
            if c.shape == out.shape:
                ps.add(None)
                c = c[None]
            else:
                ps.add(c.shape[0])
            if type(out) is ComplexTensor:
                # the gradient of the real sum(Re(c) * Re(out) + Im(c) * Im(out))
                roots += [out.real, out.imag]
                seeds += [np.ascontiguousarray(c.real), np.ascontiguousarray(c.imag)]
            else:
                roots.append(out)
                seeds.append(c)
        if len(ps) > 1:
            raise ValueError(
                "vjp: either every cotangent has its output's shape, or every one has a "
                f"batch axis (p,) in front, with the same p; got shapes {shapes} for outputs "
                f"of shapes {[out.shape for out in outs]}")
        batch = ps.pop() is not None if ps else False
        p = seeds[0].shape[0] if seeds else 1
        if not any(t._requires_grad for t in roots):
            gs = [None] * len(leaves)
        else:
            gs = reverse(roots, seeds, leaves, retain_graph=True)
        res = []
        for g, x in zip(gs, leaves):
            like = x.numpy()
            g = np.zeros((p,) + like.shape) if g is None else g
            g = g.astype(like.dtype, copy=False)
            res.append(g if batch else g[0])
        return tuple(_pair_up(res, pairs))
    return (values[0] if tree is None else _tree_build(tree, values)), vjp_fn


def _cotangent(out, c, which):
    """The cotangent ``c`` of ``out`` (output ``which`` of several) as an array:
    complex128 for a complex output, float64 for a real one, of out's shape
    or with a batch axis in front."""
    if type(out) is ComplexTensor:
        c = c.detach().numpy() if type(c) is ComplexTensor else \
            c._data if isinstance(c, Tensor) else c
        c = np.asarray(c, dtype=np.complex128)
    else:
        if is_complex(c):
            raise TypeError(f"vjp: the function's output{which} is real, so the cotangent must "
                            "be real too; got a complex one")
        c = np.asarray(c._data if isinstance(c, Tensor) else c, dtype=np.float64)
    if c.shape != out.shape and not (c.ndim == out.ndim + 1 and c.shape[1:] == out.shape):
        raise ValueError(
            f"vjp: the cotangent{which} has shape {c.shape}; it must have the output{which}'s "
            f"shape {out.shape}, or (p,) + {out.shape} for a batch of p cotangents")
    return c


def _cotangent_str(c):
    """A cotangent's structure for an error message: as ``_tree_str``, with
    each array leaf shown as ``*``."""
    if isinstance(c, (tuple, list, dict)):
        return _tree_str(_tree_flatten(c, []))
    return f"one {type(c).__name__}"


def jacobian(f, argnums=0, *, mode="auto"):
    """The Jacobian of ``f``, shape ``out.shape + in.shape``, as a function.

    Computed by vector reverse mode: the output's m unit seeds go through one
    compiled sweep together (in chunks of rows when the adjoints of all m
    would take more than ``tapegrad.transforms.functional.JACOBIAN_BYTES``) -- or by
    forward mode (:func:`tapegrad.jacfwd`: the n unit tangents in one tangent
    sweep) when the inputs have at most half as many elements as the output
    (``2 n <= m``), where n directions cost less than m vectors.  A function
    that uses an op without a forward rule (a ``tg.Function``) always takes
    reverse mode.  ``mode='reverse'`` or ``'forward'`` forces one (forward
    raises NotImplementedError for such ops).

    Of a complex argument (and a real output) the Jacobian is complex128,
    each row the gradient ``d out_i/dRe + 1j d out_i/dIm`` as in ``grad``; a
    complex output raises TypeError (there is no single convention).

    A function that returns several outputs (a tuple, list or dict of them,
    nested) gets one Jacobian per output, in that structure (with a tuple
    ``argnums``, each of them a tuple with one Jacobian per argument), all
    from one sweep.

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

    def jacobian_f(*args, **kwargs):
        single, nums = _argnums(argnums, len(args), "jacobian")
        if kwargs:  # passed to f, not differentiated
            return jacobian(_bind_kwargs(f, kwargs), argnums, mode=mode)(*args)
        if mode != "forward" and hasattr(f, "_vector") and not _connected(args):
            inputs = _trace_inputs(args, nums)
            if inputs is not None:
                per_out, multi = f._one_jacobian(args)
                res = [tuple(js[inputs.index(n)] for n in nums) for js in per_out]
                res = [r[0] if single else r for r in res]
                return tuple(res) if multi else res[0]
        leaves, outs, tree, pairs = _call_tree(f, args, nums, "jacobian")
        if any(type(out) is ComplexTensor for out in outs):
            raise TypeError(
                "jacobian: the function returned a complex tensor, and the Jacobian of a "
                "complex output has no single convention (of a complex argument it is one "
                "complex number per pair of elements only where f is holomorphic). Take the "
                "Jacobians of its real and imaginary parts, tg.jacobian(lambda *a: "
                "np.real(f(*a))) and the same with np.imag, or use tg.vjp with complex "
                "cotangents")
        jacs = None  # per output, per leaf: (m,) + leaf.shape, or None for zeros
        if mode == "forward" and any(out._requires_grad for out in outs):
            from .forward import sweep as forward
            jacs = forward.forward_jacobians(leaves, outs)
        elif mode == "auto":
            jacs = _forward_jacobian(leaves, outs)
        if jacs is None:
            jacs = _reverse_jacobian(leaves, outs)
        per_out = []
        for out, gs in zip(outs, jacs):
            res = []
            for g, x in zip(gs, leaves):
                like = x.numpy()
                J = np.zeros(out.shape + like.shape) if g is None else g.reshape(
                    out.shape + like.shape)
                res.append(J.astype(like.dtype, copy=False))
            if pairs is not None:
                res = _pair_up(res, pairs)
            per_out.append(res[0] if single else tuple(res))
        # several outputs: their Jacobians in the output's structure, as jax.jacrev
        return per_out[0] if tree is None else _tree_build(tree, per_out)
    jacobian_f.__name__ = f"jacobian({getattr(f, '__name__', 'f')})"
    return jacobian_f


def _reverse_jacobian(leaves, outs):
    """Per output, per leaf, its ``(m,) + leaf.shape`` Jacobian (None: zero)
    by vector reverse mode: the unit seeds of all outputs' elements go
    through one sweep (in chunks of rows when large)."""
    live = [out for out in outs if out._requires_grad and out.size]
    m = sum(int(out.size) for out in live)
    if not m:
        return [[None] * len(leaves) for _ in outs]
    recorded = [out._rec + 1 for out in live if out._tok]
    per_vector = _vector_bytes(current(), max(recorded)) if recorded else 8
    chunk = int(max(1, min(m, JACOBIAN_BYTES // per_vector)))
    starts = np.cumsum([0] + [int(out.size) for out in live])
    parts = []
    for lo in range(0, m, chunk):
        hi = min(m, lo + chunk)
        seeds = []
        for out, a, b in zip(live, starts[:-1], starts[1:]):
            s = np.zeros((hi - lo, b - a))
            j = np.arange(max(lo, a), min(hi, b))
            s[j - lo, j - a] = 1.0
            seeds.append(s.reshape((hi - lo,) + out.shape))
        parts.append(reverse(live, seeds, leaves, retain_graph=hi < m))
    gs = []
    for i, x in enumerate(leaves):
        rows = [p[i] for p in parts]
        gs.append(None if all(g is None for g in rows) else np.concatenate(
            [np.zeros((len(r),) + x.shape) if g is None else g
             for g, r in zip(rows, _chunks(m, chunk))]))
    res, k = [], 0
    for out in outs:
        if any(out is o for o in live):
            a, b = starts[k], starts[k + 1]
            res.append([None if g is None else g[a:b] for g in gs])
            k += 1
        else:
            res.append([None] * len(leaves))
    return res


def _chunks(m, chunk):
    return [range(lo, min(m, lo + chunk)) for lo in range(0, m, chunk)]


def _forward_jacobian(leaves, outs):
    """The Jacobians by forward mode when ``2 n <= m`` (see ``jacobian``), else
    None; None as well when an op on the way has no forward rule."""
    if not any(out._requires_grad for out in outs) or \
            2 * sum(int(x.size) for x in leaves) > sum(int(out.size) for out in outs):
        return None
    from .forward import sweep as forward  # imports this module
    try:
        return forward.forward_jacobians(leaves, outs)
    except NotImplementedError:
        return None


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
