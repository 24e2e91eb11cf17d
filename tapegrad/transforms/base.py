"""The machinery the function transforms share (reverse, forward, second
order, sparsity): argument handling, per-thread arenas, adjoints with p
vectors per record, and the multi-vector reverse sweep.  The transforms
import it from here, each from below, so none of them needs another's
module for its plumbing."""
import threading

import numpy as np

from ..engine.backward import Adjoints, _freed_error, differentiating
from ..engine.fused import run as fused_run
from ..core.grad_mode import enable_grad
from ..kernels import codes as C
from ..kernels._views import SMALL
from ..kernels.sweep import layout, sweep
from ..kernels.vector import sweep_vec, touched, vec_layout
from ..ops.complex_tensor import ComplexTensor, is_complex
from ..core.registry import CONST, OUTPUT, REGISTRY
from ..core.tape import current
from ..core.tensor import Tensor, _plain, tensor

_arenas = threading.local()


#: arenas up to this many float64s (32 MiB) stay with the thread for reuse;
#: larger ones are allocated per call, so a big Jacobian holds no memory after
_KEEP = 4 * 2**20
#: the block sweep in first-order mode reads no tangents
_NO_TANGENTS = np.zeros(1, np.int64)


def _vector_bytes(tape, upto):
    """Bytes one more adjoint vector takes over records ``0 .. upto-1``:
    constants keep one row for all vectors (``kernels/vector.py``), so they
    do not count."""
    sizes = tape.size[:upto]
    return max(int(sizes[tape.op[:upto] != CONST].sum()), 1) * 8


def _scratch(name, n):
    """This thread's reusable arena ``name`` with room for n float64s."""
    if n > _KEEP:
        return np.empty(n)
    a = getattr(_arenas, name, None)
    if a is None or a.size < n:
        a = np.empty(max(n, 1024))
        setattr(_arenas, name, a)
    return a


class fresh_arenas:
    """Runs a derivative computation inside a sweep (a host VJP that calls
    tg.hvp) on arenas of its own: the reused per-thread arenas, and the
    tape's scratch adjoints, still hold the enclosing sweep's adjoints."""

    def __enter__(self):
        self.saved = dict(_arenas.__dict__)
        _arenas.__dict__.clear()
        self.tape = current()
        self.scratch, self.tape.scratch = self.tape.scratch, None
        self.scratch32, self.tape.scratch32 = self.tape.scratch32, None
        return self

    def __exit__(self, *exc):
        _arenas.__dict__.clear()
        _arenas.__dict__.update(self.saved)
        self.tape.scratch = self.scratch
        self.tape.scratch32 = self.scratch32


class _Slabs(Adjoints):
    """p adjoints per record (see kernels/vector.py for the layout).

    ``self`` (vector 0) and ``slab(k)`` offer the ``Adjoints`` interface that
    host VJPs use, so those run unchanged, once per vector; ``block(r)`` is
    record r's p adjoints as a (p, size) view.
    """

    def __init__(self, tape, upto, p):
        tape.arg0[tape.n] = tape.na
        self._place(tape, upto, p, layout(tape.op, tape.size, upto, SMALL)[0],
                    *vec_layout(tape.op, tape.size, tape.arg0, tape.args, upto, p))

    @classmethod
    def laid_out(cls, tape, upto, p, voff, aoff, stride, leaf, inner, outer, own=False):
        """The same from a layout computed elsewhere (``kernels/hvp.py:
        hvp_layout``); ``own``: arenas of its own, for a pass that is kept."""
        self = cls.__new__(cls)
        self._place(tape, upto, p, voff, aoff, stride, leaf, inner, outer, own)
        return self

    def _place(self, tape, upto, p, voff, aoff, stride, leaf, inner, outer, own=False):
        self.voff, self.stride, self.leaf = voff, stride, leaf
        self.p, self.k = p, 0
        # both arenas are reused from one vector sweep to the next on this
        # thread (results are copied out): fresh ones would cost a page fault
        # per 4 KiB touched, a third of a 200x200 Jacobian's time
        self.A = np.empty(max(inner, 1)) if own else _scratch("A", inner)
        self.L = np.empty(max(outer, 1)) if own else _scratch("L", outer)
        self.size = tape.size
        self.aptr = aoff * 8 + np.where(self.leaf, self.L.ctypes.data, self.A.ctypes.data)
        self.reached = np.zeros(upto, np.bool_)

    def slab(self, k):
        s = object.__new__(_Slabs)
        s.__dict__.update(self.__dict__)
        s.k = k
        return s

    def _offset(self, r):
        base = self.L if self.leaf[r] else self.A
        return base, (int(self.aptr[r]) - base.ctypes.data) // 8

    def __getitem__(self, r):
        base, o = self._offset(r)
        o += self.k * (int(self.stride[r]) // 8)
        return base[o:o + self.size[r]]

    def block(self, r):
        """Record r's p adjoints as a (p, size) view."""
        base, o = self._offset(r)
        return np.lib.stride_tricks.as_strided(
            base[o:], (self.p, int(self.size[r])), (int(self.stride[r]), 8), writeable=True)

    def rows(self, r):
        """Record r's p adjoints as a (p, size) array (a copy)."""
        return self.block(r).copy()


class _Block(Adjoints):
    """The ``Adjoints`` interface over all p vectors at once, for host VJPs
    that handle a leading axis of p vectors (``OpDef.batched_vjp``)."""

    def __init__(self, slabs):
        self.s = slabs
        self.voff, self.reached = slabs.voff, slabs.reached

    def __getitem__(self, r):
        return self.s.block(r)

    def fresh(self, r, shape):
        if self.reached[r]:
            return None
        self.reached[r] = True
        return self[r].reshape((self.s.p,) + tuple(shape))

    def add(self, r, g):
        view = self[r]
        g = g.reshape(view.shape)
        if self.reached[r]:
            view += g
        else:
            view[...] = g
            self.reached[r] = True


def _root_span(tape, root):
    """Records a backward from ``root`` covers: up to root, plus the later
    outputs of root's multi-output op (its VJP reads them as one span)."""
    upto = root + 1
    if tape.op[root] == OUTPUT:
        u = root - 1 - int(tape.ip[tape.ip0[root]])
        while upto < tape.n and tape.op[upto] == OUTPUT and tape.args[tape.arg0[upto]] == u:
            upto += 1
    return upto


def _run(tape, adj, T, start, stop, p):
    """Sweep ``start .. stop+1`` for p vectors; for one, with the runs of large
    elementwise records fused (engine/fused.py)."""
    if p == 1:
        fused_run(tape, T, start, stop, None,
                  lambda start, stop: _sweep_vectors(tape, adj, T, start, stop, 1))
    else:
        _sweep_vectors(tape, adj, T, start, stop, p)


def _sweep_vectors(tape, adj, T, start, stop, p):
    """Sweep ``start .. stop+1`` for p vectors, applying host VJPs slab by slab.

    With several vectors the common records go through the block sweep (all
    p vectors of a record in one loop nest); it hands each other record to
    the per-vector sweep, which applies that record's VJP once per vector.
    """
    freed = tape.freed
    if p > 1:
        from ..kernels.hvp import sweep_block  # block sweeps: compiled code loaded on use
        vs = np.empty(tape.n + 2, np.int64)
        every = np.ones(tape.n, np.bool_)
    while True:
        if p == 1:
            s = sweep(T, freed, start, stop)
        else:
            s = sweep_block(T, freed, start, stop, p, adj.stride, _NO_TANGENTS, every, False)
            if s >= 0 and tape.op[s] >> C.SHIFT != C.K_HOST:
                r = s
                s = sweep_vec(T, freed, r, r - 1, p, adj.stride)
                if s == -1:
                    start = r - 1
                    continue
        if s == -1:
            return
        if s < -1:
            raise _freed_error()
        d = REGISTRY[int(tape.op[s])]
        vjp = d.host_vjp
        if p == 1:
            vjp(tape, adj, s)
        elif d.batched_vjp is not None and \
                d.batched_vjp(tape, _Block(adj), s) is not NotImplemented:
            pass  # all p vectors at once (NotImplemented: this record has no such rule)
        else:
            # the same first-write decisions in every slab (see kernels/vector.py)
            nv = touched(T, s, vs)
            saved = adj.reached[vs[:nv]].copy()
            for k in range(p):
                adj.reached[vs[:nv]] = saved
                vjp(tape, adj.slab(k), s)
        start = s - 1


def _argnums(argnums, n, who):
    single = isinstance(argnums, (int, np.integer))
    nums = (argnums,) if single else tuple(argnums)
    for a in nums:
        if not isinstance(a, (int, np.integer)) or not -n <= a < n:
            raise ValueError(f"{who}: argnums {argnums!r} does not name one of the "
                             f"function's {n} positional arguments")
    return single, tuple(int(a) % n for a in nums)


def _leaf_of(x, who):
    """A fresh float leaf holding x's value; for a complex x (ndarray,
    number or ComplexTensor), a ComplexTensor of two fresh float64 leaves,
    its real and imaginary parts.

    A float ndarray is wrapped without a copy: the tape makes it read-only
    while the recorded graph holds it and gives the write flag back when the
    transform has freed that graph.
    """
    if isinstance(x, Tensor):
        data = x.detach().numpy()
    elif type(x) is ComplexTensor:
        return _complex_leaf(x)
    else:
        data = x
    try:
        a = np.asarray(data)
    except ValueError as e:
        raise TypeError(f"{who}: an argument is not a rectangular array: {e}") from None
    if a.dtype.kind in "biu":
        a = a.astype(np.float64)
    if a.dtype.kind != "f":
        if a.dtype.kind == "c":
            return _complex_leaf(a)
        raise TypeError(f"{who}: arguments to differentiate must be real or complex numbers, "
                        f"got dtype {a.dtype}; pass a float or complex array")
    t = _plain(a if a.ndim else a[()])
    t._requires_grad = True
    return t


def _complex_leaf(x):
    """``_leaf_of`` for a complex argument: a ComplexTensor of two fresh leaves."""
    if type(x) is ComplexTensor:
        # one that requires grad (grad mode on) never comes here: tg.grad and
        # tg.value_and_grad nest through it, the other transforms raise (_call_complex)
        re, im = x.real._data, x.imag._data
    else:
        re, im = x.real, x.imag
    parts = []
    for v in (re, im):
        v = np.array(v, dtype=np.float64)
        t = _plain(v if v.ndim else v[()])
        t._requires_grad = True
        parts.append(t)
    return ComplexTensor(*parts)


def _connected(args):
    """The positions of arguments that carry a derivative of an enclosing
    computation: tensors that require grad while grad mode is on, and
    ComplexTensors one of whose parts does."""
    if not current().enabled:
        return ()
    return tuple(i for i, a in enumerate(args) if (isinstance(a, Tensor) and a._requires_grad) or (
        type(a) is ComplexTensor and (a.real._requires_grad or a.imag._requires_grad)))


def _call_leaves(f, args, nums, who):
    """Call f with fresh leaves at positions ``nums``; returns (leaves,
    what f returned, pairs).

    Each complex argument gets two real leaves (its real and imaginary
    parts) and f receives their ComplexTensor; ``pairs`` is None when every
    argument is real, else per argument its leaf's index, or the indices
    ``(re, im)`` of its two (see ``_pair_up``).  While f runs, its leaves
    are on this thread's stack of differentiated inputs: a backward inside
    f that reaches them cannot carry a derivative out (tapegrad does not
    record backward passes), so it raises instead of letting the enclosing
    transform return zeros (``autograd.check_nested``).
    """
    args = list(args)
    connected = _connected(args)
    if connected:
        raise NotImplementedError(
            f"{who}: argument {connected[0]} is a tensor that requires grad (it is being "
            f"differentiated by an enclosing tg.grad, backward or transform), and tg.{who} "
            "cannot pass a derivative of its result on. Only tg.grad and "
            "tg.value_and_grad nest (tg.grad(tg.grad(f)) and tg.jacobian(tg.grad(f)) work); "
            "use tg.hessian or tg.hvp for second derivatives, or pass x.detach() to treat "
            "the argument as a constant")
    leaves = []
    pairs = None
    for k, a in enumerate(nums):
        leaf = _leaf_of(args[a], who)
        args[a] = leaf
        if type(leaf) is ComplexTensor:
            if pairs is None:
                pairs = list(range(k))
            pairs.append((len(leaves), len(leaves) + 1))
            leaves += (leaf.real, leaf.imag)
        else:
            if pairs is not None:
                pairs.append(len(leaves))
            leaves.append(leaf)
    # a transform records f whatever the caller's grad mode: under an outer
    # no_grad the tape would record nothing and every derivative would come
    # out as zeros (a no_grad inside f still holds, as in torch.func)
    with differentiating(leaves), enable_grad():
        out = f(*args)
    return leaves, out, pairs


def _call_complex(f, args, nums, who):
    """Call f with fresh leaves at positions ``nums`` (see ``_call_leaves``);
    returns (leaves, output, pairs), the output a Tensor or ComplexTensor.
    A function that returns a tuple, list or dict raises TypeError: the
    transforms that take several outputs call ``_call_tree``."""
    leaves, out, pairs = _call_leaves(f, args, nums, who)
    if isinstance(out, (tuple, list, dict)) and _tree_has_tensor(out):
        raise TypeError(
            f"{who}: the function returned a {type(out).__name__} of outputs, and {who} "
            "takes a function with one output. tg.jvp, tg.vjp, tg.jacobian and tg.jacfwd "
            "take tuples (lists, dicts) of outputs; for a gradient, return one number "
            "(with has_aux=True the function may return a pair (value, aux))")
    return leaves, _output(out, leaves, who), pairs


def _call_tree(f, args, nums, who):
    """``_call_complex`` for the transforms that take several outputs (jvp,
    vjp, jacobian, jacfwd): f may return a tree of tuples, lists and dicts
    (as JAX's pytrees) whose leaves are outputs.  Returns (leaves, outputs,
    tree, pairs): the outputs in order, each a Tensor or ComplexTensor, and
    the tree's structure (None when f returned one output), from which
    ``_tree_build(tree, results)`` builds per output results in f's form."""
    leaves, out, pairs = _call_leaves(f, args, nums, who)
    outs = []
    tree = _tree_flatten(out, outs)
    if tree is None:
        return leaves, [_output(out, leaves, who)], None, pairs
    # arrays beside tensors are constants (outputs of arguments that are not
    # differentiated); only a function none of whose outputs is a tensor
    # must have cut its result off the graph
    cut = leaves if not _tree_has_tensor(out) else ()
    return leaves, [_output(o, cut, who, i) for i, o in enumerate(outs)], tree, pairs


def _tree_has_tensor(x):
    if isinstance(x, (tuple, list)):
        return any(_tree_has_tensor(v) for v in x)
    if isinstance(x, dict):
        return any(_tree_has_tensor(v) for v in x.values())
    return isinstance(x, (Tensor, ComplexTensor))


def _dict_keys(d):
    """A dict's keys in the order its tree lists them: sorted where they
    sort, so two dicts with the same keys have the same structure."""
    try:
        return sorted(d)
    except TypeError:
        return list(d)


def _tree_flatten(x, leaves):
    """Appends the leaves of the tree x (tuples, lists, namedtuples and
    dicts, nested; anything else is a leaf) to ``leaves`` and returns its
    structure: None for a leaf, else ``(type, keys, children)`` with keys
    None for a sequence."""
    if isinstance(x, (tuple, list)):
        return type(x), None, [_tree_flatten(v, leaves) for v in x]
    if isinstance(x, dict):
        keys = _dict_keys(x)
        return type(x), keys, [_tree_flatten(x[k], leaves) for k in keys]
    leaves.append(x)
    return None


def _tree_build(tree, values):
    """The tree of structure ``tree`` (``_tree_flatten``'s) with the leaves
    ``values``, in order."""
    it = iter(values)

    def build(t):
        if t is None:
            return next(it)
        kind, keys, children = t
        vals = [build(c) for c in children]
        if keys is not None:
            try:
                return kind(zip(keys, vals))
            except TypeError:  # a dict subclass built otherwise (defaultdict)
                return dict(zip(keys, vals))
        if issubclass(kind, tuple) and hasattr(kind, "_fields"):  # a namedtuple
            return kind(*vals)
        return kind(vals)
    return build(tree)


def _tree_str(tree):
    """A tree's structure as text, each leaf shown as ``*``: ``(*, [*, *])``."""
    if tree is None:
        return "*"
    kind, keys, children = tree
    if keys is not None:
        return "{" + ", ".join(f"{k!r}: {_tree_str(c)}" for k, c in zip(keys, children)) + "}"
    inner = ", ".join(_tree_str(c) for c in children)
    if issubclass(kind, list):
        return f"[{inner}]"
    return f"({inner},)" if len(children) == 1 else f"({inner})"


def _tree_match(tree, x, leaves):
    """Appends x's leaves to ``leaves`` where x has the structure ``tree``
    (tuples and lists stand for each other; a leaf of the tree takes any
    value, as an array); returns False where the structures differ."""
    if tree is None:
        leaves.append(x)
        return True
    kind, keys, children = tree
    if keys is None:
        if not isinstance(x, (tuple, list)) or len(x) != len(children):
            return False
        return all(_tree_match(c, v, leaves) for c, v in zip(children, x))
    if not isinstance(x, dict) or set(x) != set(keys):
        return False
    return all(_tree_match(c, x[k], leaves) for c, k in zip(children, keys))


def _output(out, leaves, who, which=None):
    """One output of f (output ``which`` of several) as a Tensor or
    ComplexTensor (an array or number becomes a constant)."""
    if not isinstance(out, Tensor):
        if is_complex(out):
            if type(out) is not ComplexTensor:
                out = ComplexTensor.constant(out)
            return out
        if any(leaf._ltok is not None for leaf in leaves):
            # f computed with its inputs, but its result left the graph
            # (t.numpy(), t.detach(); float(t) and t.item() raise before): the
            # derivative is not 0, and there is no way to compute it
            where = "" if which is None else f" as output {which}"
            raise TypeError(
                f"{who}: the function returned a {type(out).__name__}{where} computed from "
                "its inputs outside the graph (.numpy() or .detach() of a tensor cut it off), "
                "so its derivative cannot be computed; return the tensor itself")
        try:
            out = tensor(np.asarray(out, dtype=np.float64))
        except (TypeError, ValueError):
            raise TypeError(f"{who}: the function must return a tensor or array of real "
                            f"numbers, got {type(out).__name__}") from None
    return out


def _pair_up(arrays, pairs):
    """Per argument from per leaf (see ``_call_complex``): a complex argument's
    two real arrays ``d/dRe``, ``d/dIm`` become ``d/dRe + 1j d/dIm`` (complex128):
    PyTorch's convention, so ``z - lr * g`` descends a real loss."""
    if pairs is None:
        return arrays
    res = []
    for p in pairs:
        if type(p) is tuple:
            re, im = arrays[p[0]], arrays[p[1]]
            z = np.empty(np.shape(re), np.complex128)
            z.real, z.imag = re, im
            res.append(z)
        else:
            res.append(arrays[p])
    return res


def _cast(g, like):
    """A gradient as an array with the input's shape and dtype."""
    if g is None:
        return np.zeros(like.shape, like.dtype)
    return g.astype(like.dtype, copy=False)


def _value(out):
    v = out.detach().numpy()
    return v[()] if v.ndim == 0 else v.copy()


def _trace_inputs(args, nums):
    """The positions of a traced function's inputs among plain real
    arguments (float arrays and numbers; the rest is static), or None when a
    transform must take its general path: a tensor or a complex number among
    the arguments, or an argument to differentiate that is not an input."""
    inputs = []
    for i, a in enumerate(args):
        if isinstance(a, (Tensor, ComplexTensor)) or is_complex(a):
            return None
        if isinstance(a, (float, np.floating)) or (
                isinstance(a, np.ndarray) and a.dtype.kind == "f"):
            inputs.append(i)
    if any(n not in inputs for n in nums):
        return None
    return inputs
