"""Forward mode: ``jvp`` and ``jacfwd`` by a compiled tangent sweep over the tape.

The function is recorded on the tape as for reverse mode; then one compiled
sweep walks the records upwards from the inputs' leaves and applies each
op's tangent rule (``kernels/tangents.py``), carrying p tangent directions
per element at once.  Host records (matmul, LAPACK ops) stop the sweep and
their rules (``jvp=`` of their registry rows, beside the ops in ``ops/``)
run with NumPy on ``(p,) + shape`` tangent arrays, then the sweep resumes.  Nothing extra is recorded: each tangent rule uses the same
local partial derivatives as the op's VJP, so it reads exactly the values
the tape already keeps for the VJP (``kernels/optable.py: READS_*``).  A
forward sweep frees nothing, so several sweeps (chunks of a Jacobian) may
run over one recording.
"""
import numpy as np

from ...engine.backward import Adjoints
from ...ops.complex_tensor import ComplexTensor
from ..base import (_argnums, _call_tree, _connected, _pair_up, _root_span, _scratch,
                             _trace_inputs, _tree_build, _value)
from ...kernels._views import SMALL
from ...kernels.tangents import fwd_layout, sweep_fwd
from ...kernels.sweep import layout
from ...core.registry import REGISTRY, rules
from ...core.tape import current
from ...core.tensor import Tensor

#: op code -> forward-mode rule ``(tape, tangents, r)`` of every host op: the
#: ``jvp`` of its registry row (a row may give instead why it has none, which
#: the sweep reports)
HOST_JVP = rules("jvp")

#: tangent memory one forward sweep may use (p directions of every reached
#: record); a forward Jacobian with more is computed in chunks of columns
JACFWD_BYTES = 256 * 2**20


class _Tangents:
    """The tangents of the records that depend on the seeded leaves.

    ``layout`` fixes which records are reached and their offsets once;
    ``alloc(p)`` gives memory for p directions (record r's tangents are a
    ``(size, p)`` block).  For host rules: ``value`` (the recorded value),
    ``lead(r, shape)`` (the tangents as a ``(p,) + shape`` view, None when r
    does not depend on the inputs) and ``put(r, t)``.
    """

    value = None  # set below: the same accessor host VJPs use

    def __init__(self, tape, upto, seed_recs, root):
        self.size = tape.size
        self.voff = layout(tape.op, tape.size, upto, SMALL)[0]
        tape.arg0[tape.n] = tape.na  # closes the last record's parents
        self.reached = np.zeros(upto, np.bool_)
        self.reached[seed_recs] = True
        start = int(min(seed_recs))
        self.toff, self.total = fwd_layout(tape.op, tape.arg0, tape.args, tape.size,
                                           start, upto, self.reached, root)
        self.start, self.upto = start, upto
        # value() of an unreached record whose large value was not kept falls
        # back to reading its tangent address: point those at zeros
        big = (~self.reached) & (tape.size[:upto] > SMALL) & (tape.rix[:upto] < 0)
        self.Z = np.zeros(max(int(tape.size[:upto][big].max()) if big.any() else 1, 1))

    @classmethod
    def laid_out(cls, tape, upto, voff, reached, toff, total, start, zsize):
        """The same from a layout computed elsewhere (``kernels/hvp.py:
        hvp_layout`` computes this one and the adjoints' in one call)."""
        self = cls.__new__(cls)
        self.size, self.voff, self.reached = tape.size, voff, reached
        self.toff, self.total, self.start, self.upto = toff, total, start, upto
        self.Z = np.zeros(zsize)
        return self

    def alloc(self, p, own=False):
        """Memory for p directions: this thread's reusable arena (callers
        copy results out: fresh memory costs a page fault per 4 KiB), or with
        ``own`` an arena of its own, for a pass that is kept and rerun."""
        self.p = p
        n = max(int(self.total) * p, 1)
        self.A = np.empty(n) if own else _scratch("tangents", n)
        self.aptr = np.where(self.toff >= 0, self.A.ctypes.data + self.toff * (8 * p),
                             self.Z.ctypes.data)

    def block(self, r):
        """Record r's tangents as a ``(size, p)`` view."""
        o, s = int(self.toff[r]) * self.p, int(self.size[r])
        return self.A[o:o + s * self.p].reshape(s, self.p)

    def trail(self, r, shape):
        """Record r's tangents as a ``shape + (p,)`` view, or None."""
        if r >= self.upto or not self.reached[r]:
            return None
        return self.block(r).reshape(tuple(shape) + (self.p,))

    def lead(self, r, shape):
        t = self.trail(r, shape)
        return None if t is None else np.moveaxis(t, -1, 0)

    def put(self, r, t):
        view = self.block(r)
        # the size spelled out: with no directions or no elements, -1 is ambiguous
        view[...] = np.reshape(t, (self.p, view.shape[0])).T


# recorded values are found the same way as for host VJPs (needs only voff)
_Tangents.value = Adjoints.value


def _sweep(tape, tan, T):
    start = tan.start
    while True:
        s = sweep_fwd(T, start, tan.upto, tan.p)
        if s == -1:
            return
        if s < -1:
            raise RuntimeError(
                "jvp: a value the tangent sweep needs was freed by a backward() that ran "
                "inside the function; call backward(retain_graph=True) there, or use "
                "tg.grad / tg.vjp, which free nothing of the caller's graph")
        code = int(tape.op[s])
        rule = getattr(REGISTRY.get(code), "jvp", None)
        if not callable(rule):
            name = REGISTRY[code].name if code in REGISTRY else f"with code {code}"
            why = f" ({rule})" if isinstance(rule, str) else ""
            raise NotImplementedError(
                f"jvp: the op {name} has no forward-mode rule{why}; use "
                "reverse mode (tg.vjp, tg.jacobian) for functions that use it")
        rule(tape, tan, s)
        start = s + 1


def push(leaves, seeds, out, p):
    """``push_all`` of one output: its ``(p, out.size)`` tangents."""
    return push_all(leaves, seeds, [out], p)[0]


def push_all(leaves, seeds, outs, p):
    """The tangents of the tensors ``outs`` for the leaves' tangent directions,
    by one tangent sweep over the records up to the last of them.

    ``leaves`` are the leaf tensors the function was called with, ``seeds``
    their tangents as ``(p, size)`` float64 arrays (or a callable ``(k, lo,
    hi)`` giving leaf k's directions ``lo .. hi-1``, for chunked Jacobians).
    Returns one ``(p, out.size)`` float64 array per output.
    """
    res = [np.zeros((p, int(o.size))) for o in outs]
    tape = current()
    swept = []
    for o, r in zip(outs, res):
        if o._tok is None:  # the output is itself a leaf
            for k, x in enumerate(leaves):
                if x is o:
                    r += _seed_rows(seeds, k, 0, p)
        elif o._requires_grad and tape.is_live(o._tok):
            swept.append((o, r))
        # else: recorded before the inputs existed, independent of them
    if not swept:
        return res
    upto = max(_root_span(tape, o._rec) for o, _ in swept)
    recs = [x._lrec if x._ltok is tape.lkey and x._lrec < upto else None for x in leaves]
    live = [r for r in recs if r is not None]
    if not live:
        return res
    # a tg.Function's jvp is user code that may record: no compaction may
    # renumber the records the walk reads
    with tape.walking():
        _push(tape, swept, recs, live, seeds, upto, p)
    return res


def _push(tape, swept, recs, live, seeds, upto, p):
    """Fills each ``(out, res)`` of ``swept`` with out's tangents."""
    # every record from the first output on counts as a root: it covers the others
    tan = _Tangents(tape, upto, np.array(live, np.int64), min(o._rec for o, _ in swept))
    swept = [(o, res) for o, res in swept if tan.reached[o._rec]]
    if not swept:
        return
    per_dir = max(int(tan.total), 1) * 8
    chunk = int(max(1, min(p, JACFWD_BYTES // per_dir)))
    for lo in range(0, p, chunk):
        hi = min(p, lo + chunk)
        tan.alloc(hi - lo)
        for k, r in enumerate(recs):
            if r is not None:
                tan.block(r)[...] = _seed_rows(seeds, k, lo, hi).T
        T = tape.arrays(tan) + (tan.reached,)
        _sweep(tape, tan, T)
        for o, res in swept:
            res[lo:hi] = tan.block(o._rec).T


def _seed_rows(seeds, k, lo, hi):
    return seeds(k, lo, hi) if callable(seeds) else seeds[k][lo:hi]


# -- jvp, jacfwd -------------------------------------------------------------------------
def _as_tuple(x, what, who="jvp"):
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"{who}: {what} must be a tuple (or list) with one entry per "
                        f"positional argument of the function, got {type(x).__name__}")
    return tuple(x)


def primals_and_tangents(f, primals, tangents, who, traced_method):
    """``(primals, tangents)`` as tuples of one entry per argument, and
    whether ``f`` is a traced function (one with ``traced_method``) called
    at plain arrays, which answers with its own pass over the replay (the
    call recorded as an op has no forward rule)."""
    primals = _as_tuple(primals, "primals", who)
    tangents = _as_tuple(tangents, "tangents", who)
    if len(primals) != len(tangents):
        raise ValueError(f"{who}: {len(primals)} primals but {len(tangents)} tangents; give "
                         "one tangent per primal")
    traced = False
    if hasattr(f, traced_method) and not _connected(primals):
        inputs = _trace_inputs(primals, range(len(primals)))
        traced = inputs is not None and len(inputs) == len(primals)
    return primals, tangents, traced


def jvp(f, primals, tangents, batched=None):
    """``(f(*primals), J t)``: the Jacobian-vector product by forward mode.

    JAX's signature: ``primals`` and ``tangents`` are tuples with one entry per
    positional argument of ``f``, each tangent of its primal's shape.  The
    function is recorded once and one compiled tangent sweep pushes the
    tangents from the inputs to the output.

    A *batch* of p tangent directions goes through that one sweep together:
    give every tangent the shape ``(p,) + primal.shape``, and ``tangent_out``
    has shape ``(p,) + out.shape``.  ``batched=None`` tells the two forms apart
    by the number of axes (which is never ambiguous); ``True`` or ``False``
    insists on one of them.

    Tangents are taken in float64, and ``tangent_out`` has the output's
    dtype.  A complex primal (array, number or ComplexTensor) takes a complex
    tangent (a real one is a tangent along the real axis); a function with
    a complex output gives a complex ``tangent_out``, the derivative of its
    real and imaginary parts: for a holomorphic ``f``, ``f'(z) * dz``.  A
    ``tg.Function`` has no forward rule (it only defines ``backward``): a
    function that calls one raises ``NotImplementedError``.

    A function may return several outputs: a tuple, list or dict of them,
    nested as deep as it likes (JAX's pytrees).  Then ``primal_out`` and
    ``tangent_out`` have that structure, one array per output, all from
    one tangent sweep.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x, y: np.sin(x) * y
    >>> out, t = tg.jvp(f, (np.array([0.0, 1.0]), np.array([2.0, 3.0])),
    ...                 (np.array([1.0, 0.0]), np.array([0.0, 0.0])))
    >>> t                                   # d/dx sin(x) * y along e_0
    array([2., 0.])
    >>> out, T = tg.jvp(lambda x: x ** 2, (np.array([1.0, 2.0]),), (np.eye(2),))
    >>> T                                   # two directions at once: the Jacobian
    array([[2., 0.],
           [0., 4.]])
    >>> tg.jvp(lambda z: z ** 2, (np.array([1.0 + 1.0j]),), (np.array([1.0j]),))[1]
    array([-2.+2.j])
    >>> (s, c), (ds, dc) = tg.jvp(lambda x: (np.sin(x), np.cos(x)), (np.zeros(2),),
    ...                           (np.ones(2),))
    >>> ds, dc
    (array([1., 1.]), array([-0., -0.]))
    """
    primals, tangents, traced = primals_and_tangents(f, primals, tangents, "jvp", "_tangents")
    if traced:
        return f.jvp(primals, tangents, batched=batched)
    leaves, outs, tree, pairs = _call_tree(f, primals, tuple(range(len(primals))), "jvp")
    ts, p, batch = _check_tangents(leaves, _leaf_tangents(tangents, pairs), batched)
    seeds = [t.reshape(p, -1) for t in ts]
    # one tangent sweep for every output (a complex one: its two parts)
    roots = [part for out in outs
             for part in ((out.real, out.imag) if type(out) is ComplexTensor else (out,))]
    pushed = iter(push_all(leaves, seeds, roots, p))
    values, tans = [], []
    for out in outs:
        shape = (p,) + tuple(out.shape)
        if type(out) is ComplexTensor:
            t = next(pushed).reshape(shape) + 1j * next(pushed).reshape(shape)
            value = out.detach().numpy()
            value = value[()] if value.ndim == 0 else value
        else:
            value = _value(out)
            dtype = out.dtype if out.dtype.kind == "f" else np.float64
            t = next(pushed).reshape(shape).astype(dtype, copy=False)
        values.append(value)
        tans.append(t if batch else t[0])
    if tree is None:  # one output
        return values[0], tans[0]
    return _tree_build(tree, values), _tree_build(tree, tans)


def _leaf_tangents(tangents, pairs):
    """Per leaf from per primal (``_call_complex``'s ``pairs``): a complex
    primal's tangent gives its two leaves the real and imaginary parts; a
    real primal's tangent must be real."""
    if pairs is None:
        pairs = list(range(len(tangents)))
    res = []
    for i, (t, pr) in enumerate(zip(tangents, pairs)):
        t = t.detach().numpy() if type(t) is ComplexTensor else \
            t._data if isinstance(t, Tensor) else t
        if type(pr) is tuple:
            try:
                t = np.asarray(t)
            except ValueError as e:
                raise TypeError(f"jvp: tangent {i} is not a rectangular array: {e}") from None
            if t.dtype.kind not in "fiuc":
                raise TypeError(f"jvp: tangent {i} has dtype {t.dtype}; a complex primal "
                                "takes a complex (or real) tangent")
            res += [t.real, t.imag if t.dtype.kind == "c" else np.zeros(t.shape)]
        else:
            if np.iscomplexobj(t):
                raise TypeError(f"jvp: tangent {i} is complex but its primal is real; give a "
                                "real tangent, or a complex primal for a complex direction")
            res.append(t)
    return res


def _check_tangents(leaves, tangents, batched):
    ts = []
    for i, (x, t) in enumerate(zip(leaves, tangents)):
        t = t._data if isinstance(t, Tensor) else t
        try:
            t = np.asarray(t)
        except ValueError as e:
            raise TypeError(f"jvp: tangent {i} is not a rectangular array: {e}") from None
        if t.dtype.kind not in "fiu":
            raise TypeError(f"jvp: tangent {i} has dtype {t.dtype}; tangents must be real "
                            f"numbers (the primal's dtype is {x.dtype})")
        ts.append(t)
    shapes = [x.shape for x in leaves]
    single = all(t.shape == s for t, s in zip(ts, shapes))
    batch = bool(ts) and all(t.ndim == len(s) + 1 and t.shape[1:] == s
                             for t, s in zip(ts, shapes))
    if batched is None:
        batched = batch and not single
    if batched:
        if not batch:
            bad = next(i for i, (t, s) in enumerate(zip(ts, shapes))
                       if not (t.ndim == len(s) + 1 and t.shape[1:] == s))
            raise ValueError(f"jvp: with batched=True, tangent {bad} must have shape (p,) + "
                             f"{shapes[bad]}, got {ts[bad].shape}")
        ps = {t.shape[0] for t in ts}
        if len(ps) > 1:
            raise ValueError(f"jvp: a batch of tangents needs the same number p of directions "
                             f"for every primal; got p = {sorted(ps)}")
        p = ps.pop()
    else:
        for i, (t, s) in enumerate(zip(ts, shapes)):
            if t.shape != s:
                raise ValueError(
                    f"jvp: tangent {i} has shape {t.shape} but its primal has shape {s}; "
                    f"give a tangent of the primal's shape, or shape (p,) + {s} for a batch "
                    "of p directions")
        p = 1
        ts = [t[None] for t in ts]
    return [np.asarray(t, dtype=np.float64) for t in ts], p, batched


def unit_directions(leaves):
    """``(n, starts, unit)`` for the n unit directions over all leaves' elements:
    ``unit(k, lo, hi)`` is leaf k's part of directions ``lo .. hi-1``, as rows
    (the seeds of a chunk of a Jacobian or Hessian)."""
    sizes = [int(x.size) for x in leaves]
    starts = np.cumsum([0] + sizes)

    def unit(k, lo, hi):
        rows = np.zeros((hi - lo, sizes[k]))
        j = np.arange(max(lo, starts[k]), min(hi, starts[k + 1]))
        rows[j - lo, j - starts[k]] = 1.0
        return rows
    return int(starts[-1]), starts, unit


def forward_jacobians(leaves, outs):
    """Per output, per leaf, ``(m,) + leaf.shape`` float64: the outputs'
    Jacobians by one batched tangent sweep with the n unit directions (in
    chunks when large)."""
    n, starts, unit = unit_directions(leaves)
    res = []
    for J in push_all(leaves, unit, outs, n):
        J = J.T  # (m, n)
        res.append([J[:, starts[k]:starts[k + 1]].reshape((J.shape[0],) + x.shape)
                    for k, x in enumerate(leaves)])
    return res


def jacfwd(f, argnums=0):
    """The Jacobian of ``f`` by forward mode, shape ``out.shape + in.shape``.

    All n unit tangents of the inputs at ``argnums`` go through one compiled
    tangent sweep (in chunks when their tangents would take more than
    ``tapegrad.transforms.forward.sweep.JACFWD_BYTES``): the cheap direction when f has far
    fewer inputs than outputs.  ``tg.jacobian`` picks this mode by itself
    then.  Results have the inputs' dtypes, as ``tg.jacobian``'s.  A
    function that returns several outputs (a tuple, list or dict of them,
    nested) gets one Jacobian per output, in that structure (with a tuple
    ``argnums``, each of them a tuple with one Jacobian per argument).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.jacfwd(lambda x: np.outer(x, [1.0, 2.0, 3.0]).ravel())(np.array([1.0, 2.0])).shape
    (6, 2)
    """
    def jacfwd_f(*args):
        single, nums = _argnums(argnums, len(args), "jacfwd")
        leaves, outs, tree, pairs = _call_tree(f, args, nums, "jacfwd")
        if any(type(out) is ComplexTensor for out in outs):
            raise TypeError(
                "jacfwd: the function returned a complex tensor, and the Jacobian of a "
                "complex output has no single convention. Take the Jacobians of its real "
                "and imaginary parts, tg.jacfwd(lambda *a: np.real(f(*a))) and the same "
                "with np.imag, or use tg.jvp with complex tangents")
        jacs = []
        for out, gs in zip(outs, forward_jacobians(leaves, outs)):
            res = [g.reshape(out.shape + x.shape).astype(x.dtype, copy=False)
                   for g, x in zip(gs, leaves)]
            if pairs is not None:  # a complex argument: d out/dRe + 1j d out/dIm, as tg.jacobian
                res = _pair_up(res, pairs)
            jacs.append(res[0] if single else tuple(res))
        # several outputs: their Jacobians in the output's structure, as jax.jacfwd
        return jacs[0] if tree is None else _tree_build(tree, jacs)
    jacfwd_f.__name__ = f"jacfwd({getattr(f, '__name__', 'f')})"
    return jacfwd_f
