"""``create_graph=True``: a backward whose every step is a recorded op.

``tg.autograd.grad(..., create_graph=True)`` and ``backward(create_graph=True)``
walk the graph's records from the outputs back, as the compiled sweep does,
but in Python and on tensors: each record's VJP is written here with
tapegrad's own differentiable ops (PyTorch's way: its backward formulas are
themselves graph ops when ``create_graph`` is set), so the gradients are
ordinary tensors of the graph.  Differentiating them again runs the usual
compiled sweep over those new records, and asking ``create_graph=True`` of
that walks them here in turn: any order, with respect to leaves and
non-leaves alike, and mixed derivatives with respect to any tensor of the
graph (a gradient penalty's parameters).

The walk (``Walk``), the check before it records anything (``check``) and
the engine ``autograd.walk`` drives it through (``Recorded``: hooks,
``retain_grad`` and the inputs' gradients are the walk's, as on every
other path) are here; the formulas by kind are in
``transforms/create_graph/kinds.py``, those of the host ops (matmul, einsum, the
decompositions, ``tg.Function``) are the ``graph_vjp=`` of their registry rows,
beside the ops in ``ops/``, and the index ops they record with (``take``,
``scatter``) and ``NoRule`` are in ``transforms/create_graph/index.py``.  Where eigen- or singular-vector gradients would
divide by a zero gap (or a zero singular value of a non-square matrix) the
walk raises instead of recording inf/NaN.

A record without a formula here (``RULES``: cumprod over zeros past
``_CUMPROD_ZERO_MAX`` elements of its n^2 formula; ``tg.Function``; a ``tg.elementwise`` op
whose derivative op cannot be built: ``ops/derivative_ops.py``) raises NoRule from
building :class:`Recorded`, before anything is recorded; the caller then falls back
to one second-order node (``tensor_grads._GraphGrad``) and names the op where
a further order or a non-leaf input needs more.
"""
import numpy as np

from .index import NoRule, _tg
from .kinds import (_CUMPROD_ZERO_MAX, _concat, _gather, _nary, _reduce,
                                 _scalar, _scan, _unary, _user)
from ...ops.function import _FUNCTION
from ...kernels import codes as C
from ...kernels._views import SMALL
from ...ops import matrix as L
from ...core.registry import REGISTRY, rules
from ...core.tensor import _result

#: op code -> create_graph rule ``(walk, r, adjoint)`` of the host ops: the
#: ``graph_vjp`` of their registry rows (a row may give instead why it has
#: none, which NoRule carries)
HOST = rules("graph_vjp")


# -- the walk --------------------------------------------------------------------------------
class Walk:
    """A recorded backward over records ``< upto`` of ``tape`` (the tape's
    token is held by the caller so that no compaction renumbers records
    while the walk records)."""

    def __init__(self, tape, upto, input_recs):
        self.tape, self.upto = tape, upto
        size = tape.size[:upto]
        mid = np.where((size > 1) & (size <= SMALL), size, 0)
        self.voff = np.cumsum(mid) - mid
        self.handles = {}
        self.adj = {}
        # records that depend on an input: the only ones an adjoint goes to
        lo = min(input_recs) if input_recs else upto
        dep = np.zeros(upto, np.bool_)
        dep[list(input_recs)] = True
        op, arg0, args = tape.op, tape.arg0, tape.args
        for r in range(lo, upto):
            if not dep[r]:
                a, b = int(arg0[r]), int(arg0[r + 1])
                if b > a and dep[args[a:b]].any():
                    dep[r] = True
        self.dep = dep

    # values
    def val(self, r):
        """Record r's recorded value, flat float64 (an internal error where it
        was not kept: the formulas read only what the compiled VJPs read)."""
        tape = self.tape
        n = int(tape.size[r])
        if n == 1:
            return tape.v1[r:r + 1].copy()
        if n <= SMALL:
            o = int(self.voff[r])
            return tape.vals[o:o + n].copy()
        if tape.rix[r] >= 0:
            return np.ravel(tape.refs[tape.rix[r]])
        if int(tape.op[r]) == C.code(C.K_NONE, C.LEAF):
            return np.ravel(np.asarray(tape.leaves[r]._data, np.float64))
        raise RuntimeError(f"create_graph: the value of record {r} "
                           f"({REGISTRY[int(tape.op[r])].name}) was not kept")

    def x(self, r):
        """Record r's value as a tensor of the graph (a constant as an array)."""
        if int(self.tape.op[r]) == C.code(C.K_NONE, C.CONST):
            return self.val(r)
        h = self.handles.get(r)
        if h is None:
            h = self.handles[r] = _result(self.tape, r, self.val(r))
        return h

    def parents(self, r):
        tape = self.tape
        return [int(q) for q in tape.args[tape.arg0[r]:tape.arg0[r + 1]]]

    def size(self, r):
        return int(self.tape.size[r])

    def add(self, q, t):
        if not self.dep[q] or t is None:
            return
        old = self.adj.get(q)
        self.adj[q] = t if old is None else old + t

    def run(self, seeds, stop):
        """Seed ``{record: flat tensor}``, then apply every rule down to
        record ``stop``."""
        for r, s in seeds.items():
            self.add(r, s)
        self.span(self.upto - 1, stop - 1)

    def span(self, start, stop):
        """Apply the rules of records ``start .. stop+1``, from the top."""
        tape = self.tape
        for r in range(start, stop, -1):
            code = int(tape.op[r])
            if code >> C.SHIFT == C.K_NONE:
                continue
            if self.size(r) == 0:  # a multi-output op: its outputs' adjoints, one span
                u = self._span(r)
                if u is None:
                    continue
            else:
                u = self.adj.get(r)
                if u is None:
                    continue
            if not self.dep[r]:
                continue
            RULES[code >> C.SHIFT](self, r, code & C.MASK, u)

    def _span(self, r):
        tape = self.tape
        outs = []
        v = r + 1
        while v < tape.n and int(tape.op[v]) == C.code(C.K_NONE, C.OUTPUT) \
                and int(tape.args[tape.arg0[v]]) == r:
            outs.append(v)
            v += 1
        if not any(v in self.adj for v in outs):
            return None
        tg = _tg()
        return tg.concatenate([self.adj[v] if v in self.adj else np.zeros(self.size(v))
                               for v in outs])


def check(tape, upto, dep, roots=()):
    """Raise NoRule for a record a walk would reach that has no formula
    (before anything is recorded): a second-order node first, which no
    order beyond can differentiate, else the first such record."""
    first = None
    vals = _Vals(tape, upto)
    # the records an adjoint can reach: roots and parents of reached records
    # (an unused output of a multi-output op is live but gets none)
    owner = np.repeat(np.arange(upto), np.diff(tape.arg0[:upto + 1]))
    used = np.zeros(upto, np.bool_)
    used[tape.args[:int(tape.arg0[upto])][dep[owner]]] = True
    used[np.asarray(roots, np.int64)] = True
    for r in np.flatnonzero(dep[:upto]):
        try:
            _check(tape, vals, r, used & dep[:upto])
        except NoRule as e:
            if e.through is not None:
                raise
            first = first or e
    if first is not None:
        raise first


def _check(tape, _vals, r, reached):
    """Raise NoRule if record r has no formula here (``reached``: the
    records the walk may give an adjoint)."""
    code = int(tape.op[r])
    kind, sub = code >> C.SHIFT, code & C.MASK
    if kind == C.K_NONE:
        return
    name = REGISTRY[code].name if code in REGISTRY else str(code)
    if kind == C.K_SCAN and sub == C.CUMPROD:
        b = int(tape.ip0[r])
        a, n, c = (int(tape.ip[b + i]) for i in range(3))
        if a * n * n * c > _CUMPROD_ZERO_MAX and \
                not (Walk.val(_vals, int(tape.args[tape.arg0[r]])) != 0).all():
            raise NoRule(name, f"its input has zero entries, where the formula takes "
                               f"{a * n * n * c} elements (n^2 along the scanned axis)")
    if kind == C.K_HOST:
        if code == _FUNCTION:
            cls, ctx = tape.host[r][:2]
            if hasattr(cls, "no_jvp"):
                raise NoRule(f"{cls.__name__} (a tg.Function)", through=ctx.spec.missing)
            if not hasattr(cls, "vjp_ops"):
                raise NoRule(f"{cls.__name__} (a tg.Function)",
                             "a tg.Function's backward works on arrays")
        elif code not in HOST:
            raise NoRule(name, HOST.missing(code))
        elif code in (L._EIGH, L._SVD):
            _check_gaps(tape, r, reached, name)
    if kind == C.K_USER:
        # its derivative ops (ops/derivative_ops.py), built and compiled now:
        # one whose derivative cannot be derived leaves the second-order node
        from ...ops.custom import USER_OPS
        from ...ops.derivative_ops import DerivativeError, derivative_op
        op = USER_OPS[int(tape.ip[int(tape.ip0[r])])]
        for j, q in enumerate(tape.args[tape.arg0[r]:tape.arg0[r + 1]]):
            if reached[int(q)] or op.nin == 1:
                try:
                    derivative_op(op, j)._compile()
                except DerivativeError as e:
                    raise NoRule(f"{op.name} (a tg.elementwise op: {e})", str(e)) from None


def _check_gaps(tape, r, reached, name):
    """eigh's eigenvector and svd's singular-vector gradients divide by the
    gaps between eigenvalues (squared singular values) and svd's non-square
    terms by the singular values: where one is exactly zero the formula has
    no finite value (the compiled backward's is inf or NaN there too), so the
    walk raises rather than record inf/NaN gradients."""
    def used(s):
        q = r + 1 + s
        return q < reached.size and reached[q]
    code_eigh = int(tape.op[r]) == L._EIGH
    if code_eigh:
        w = np.asarray(tape.host[r][1][0], np.float64)
        vectors = used(1)
    else:
        _herm, shapes, U, w, Vh = tape.host[r]
        w = np.asarray(w, np.float64)
        vectors = used(0) or used(2)
    if not vectors or w.shape[-1] == 0:
        return
    v = w if code_eigh else w * w
    srt = np.sort(v, axis=-1)
    what = "eigenvectors" if code_eigh else "singular vectors"
    if (np.diff(srt, axis=-1) == 0).any():
        raise RuntimeError(
            f"create_graph=True through {name}: the gradient through its {what} is "
            f"undefined where {'eigenvalues' if code_eigh else 'singular values'} are "
            "repeated (it divides by their differences)")
    if not code_eigh and U.shape[-2] != Vh.shape[-1] and (w == 0).any():
        raise RuntimeError(
            f"create_graph=True through {name}: the gradient through the singular "
            "vectors of a non-square matrix is undefined where a singular value is zero "
            "(it divides by them)")


class _Vals:
    """What ``Walk.val`` reads, for ``check`` before a walk exists."""

    def __init__(self, tape, upto):
        self.tape = tape
        size = tape.size[:upto]
        mid = np.where((size > 1) & (size <= SMALL), size, 0)
        self.voff = np.cumsum(mid) - mid


def _host(W, r, sub, u):
    REGISTRY[C.code(C.K_HOST, sub)].graph_vjp(W, r, u)


def _missing(W, r, sub, u):
    raise NoRule(REGISTRY[int(W.tape.op[r])].name)


RULES = {C.K_UNARY: _unary, C.K_SCALAR: _scalar, C.K_NARY: _nary, C.K_REDUCE: _reduce,
         C.K_GATHER: _gather, C.K_CONCAT: _concat, C.K_HOST: _host, C.K_SCAN: _scan,
         C.K_USER: _user}


# -- the driver ---------------------------------------------------------------------------------
def input_records(tape, x, upto):
    """The records of input tensor ``x`` below ``upto``: a non-leaf's own, or
    every LEAF record of a leaf (one written in place since records anew)."""
    if x._tok is not None:
        return [int(x._rec)] if tape.is_live(x._tok) and x._rec < upto else []
    return [q for q, z in tape.leaves.items() if z is x and q < upto]


class Recorded:
    """The engine of a ``create_graph`` walk (``autograd.walk``): the
    records' VJPs as recorded ops (:class:`Walk`), adjoints flat tensors of
    the graph.  Built, it has checked that every record the walk reaches
    has a formula (else NoRule, before anything is recorded); the caller
    holds ``tape.walking()`` while it records."""

    record = True
    p = 1

    def __init__(self, tape, outputs, seeds, inputs, upto, recs, graph_seeds=None):
        """``recs``: the inputs' records (``autograd._target_records``);
        ``graph_seeds``: per output, its seed as a tensor of the graph (a
        ``grad_outputs`` entry that requires grad), or None."""
        from ...core.grad_mode import enable_grad
        from ...kernels.sweep import live_records
        from ...core.tensor import tensor
        flat = sorted({q for rs in recs if rs for q in rs})
        self.W = W = Walk(tape, upto, flat)
        roots = np.array([t._rec for t in outputs if tape.is_live(t._tok)], np.int64)
        tape.arg0[tape.n] = tape.na
        live = live_records((tape.op, tape.arg0, tape.size, None, tape.args), upto, roots)
        check(tape, upto, W.dep & live[:upto], roots[roots < upto])
        with enable_grad():
            for t, v, g in zip(outputs, seeds, graph_seeds or [None] * len(outputs)):
                if tape.is_live(t._tok):
                    W.add(int(t._rec),
                          tensor(np.asarray(v, np.float64).reshape(-1)) if g is None else g)

    def run(self, start, stop):
        from ...core.grad_mode import enable_grad
        with enable_grad():
            self.W.span(start, stop)

    def reached_at(self, r):
        return r in self.W.adj

    def grad(self, r):
        return self.W.adj[r]

    def set(self, r, g):
        self.W.adj[r] = g

    def capture(self, r):
        return self.W.adj[r]

    def leaf(self, q):
        return self.W.adj[q]

    @staticmethod
    def add(a, b):
        from ...core.grad_mode import enable_grad
        with enable_grad():
            return a + b

    @staticmethod
    def zeros(x):
        from ...core.tensor import tensor
        return tensor(np.zeros(x.size))

    def checks(self, upto, recs, inputs, own):
        pass  # the walk's numeric pass has checked (tensor_grads._graph_grad)

    def finish(self, ran):
        pass  # a create_graph walk keeps the graph

    @staticmethod
    def store(x, g):
        """Accumulate ``g`` (a tensor of the graph) into ``x.grad``."""
        from ...core.grad_mode import enable_grad
        with enable_grad():
            g = g.reshape(x.shape)
            if g.dtype != x.dtype:
                g = g.astype(x.dtype)
            old = getattr(x, "_grad", None)
            x._grad = g if old is None else old + g
