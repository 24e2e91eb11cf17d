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

Every formula works on flat values, the tape's layout: a broadcast, a
reduction, an index or a concatenation is an index map (``index_maps``),
whose VJP is a gather (``take``) or its adjoint, a scatter-add
(:class:`_ScatterAdd`, whose own VJP is the gather).  Piecewise-constant
factors (masks of maximum, sign of abs) are constants of the new graph:
their derivative is zero wherever it exists.

The decompositions (cholesky, eigh, qr, svd, pinv, lstsq) are their
compiled VJPs (``ops/matrix.py``) written on tensors: the factors are the
op's own output records, so a further order differentiates through the same
formula again.  Their limits are the first order's: symmetric gradients for
cholesky, eigh and hermitian svd / pinv, constant rank for pinv and lstsq.
Where eigen- or singular-vector gradients would divide by a zero gap (or a
zero singular value of a non-square matrix) the walk raises instead of
recording inf/NaN.

prod and cumprod over inputs with zero entries use products of the other
elements (no division), polynomials in the input, exact at every order.

digamma's derivative is ``polygamma(1, x)`` (``ops/special.py``), whose own
derivative is the next polygamma.

A record without a formula here (``RULES``: cumprod over zeros past
``_CUMPROD_ZERO_MAX`` elements of its n^2 formula; ``tg.Function``; ``tg.elementwise`` ops) raises NoRule from
:func:`graph_grad` before anything is recorded; the caller then falls back
to one second-order node (``functional._GraphGrad``) and names the op where
a further order or a non-leaf input needs more.
"""
import math
import sys

import numpy as np

from .function import _FUNCTION, Function
from .index_maps import operand_maps, reduce_map
from .kernels import codes as C
from .kernels._views import SMALL
from .ops import matrix as L
from .ops.registry import REGISTRY
from .tensor import Tensor, _result


class NoRule(Exception):
    """A record on the way has no differentiable VJP here (``.name``: its op)."""

    def __init__(self, name, why="", through=None):
        super().__init__(name)
        #: ``through``: the op a create_graph gradient on the way went through
        #: (a second-order node, which cannot be differentiated further)
        self.name, self.why, self.through = name, why, through


def _tg():
    # the package's ops by name, looked up when a walk runs (``import tapegrad``
    # has completed by then), as tensor.bound does: no import of the layer above
    return sys.modules["tapegrad"]


# -- the two linear index ops --------------------------------------------------------------
def take(t, idx):
    """``t[idx]`` on flat ``t``; ``idx`` -1 gives 0."""
    tg = _tg()
    idx = np.asarray(idx, np.int64)
    if idx.size and idx.min() < 0:
        n = t.size
        t = tg.concatenate([t, np.zeros(1)])
        idx = np.where(idx < 0, n, idx)
    return tg.take(t, idx)


def scatter(t, idx, n):
    """The adjoint of ``take``: ``out[idx[k]] += t[k]`` into ``n`` elements
    (``idx`` -1: dropped).  An injective map scatters by a gather."""
    idx = np.asarray(idx, np.int64)
    if idx.size == n and np.array_equal(idx, np.arange(n)):
        return t
    ok = idx >= 0
    hit = np.bincount(idx[ok], minlength=n) if n else np.zeros(0, np.int64)
    if hit.size == 0 or hit.max() <= 1:
        inv = np.full(n, -1, np.int64)
        inv[idx[ok]] = np.flatnonzero(ok)
        return take(t, inv)
    return _ScatterAdd.apply(t, idx, n)


class _ScatterAdd(Function):
    """``out[idx[k]] += t[k]`` (flat); its VJP is the gather ``take``."""

    checks_own_reads = True  # reads no recorded value

    @staticmethod
    def forward(ctx, t, idx, n):
        ctx.idx = idx
        ok = idx >= 0
        return np.bincount(idx[ok], np.ravel(t)[ok], minlength=n)

    @staticmethod
    def backward(ctx, g):
        idx = ctx.idx
        return np.where(idx >= 0, g[np.maximum(idx, 0)], 0.0), None, None

    @staticmethod
    def vjp_ops(ctx, u, _inputs):
        return (take(u, ctx.idx),)


_ScatterAdd.__name__ = "ScatterAdd"


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
        tape = self.tape
        for r in range(self.upto - 1, stop - 1, -1):
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
            raise NoRule(name)
        elif code in (L._EIGH, L._SVD):
            _check_gaps(tape, r, reached, name)
        elif code == L._EINSUM:
            ins = tape.host[r][0]
            if any(len(set(s)) != len(s) for s in ins):
                raise NoRule(name, "it repeats an index within one operand")
    if kind == C.K_USER:
        from .ops.custom import USER_OPS
        op = USER_OPS[int(tape.ip[int(tape.ip0[r])])]
        raise NoRule(f"{op.name} (a tg.elementwise op)",
                     "a tg.elementwise op has no differentiable formula of its derivative")


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


# -- rules by kind ------------------------------------------------------------------------------
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _d_unary(W, r, sub):
    """dy/dx of record r as a tensor (or a number), from x and y."""
    tg = _tg()
    (q,) = W.parents(r)
    x = (lambda: W.x(q))
    y = (lambda: W.x(r))
    if sub == C.IDENT or sub >= C.VIEW_FIRST:
        return 1.0
    if sub == C.NEG:
        return -1.0
    D = {
        C.EXP: lambda: y(), C.LOG: lambda: 1.0 / x(), C.LOG1P: lambda: 1.0 / (1.0 + x()),
        C.EXPM1: lambda: y() + 1.0, C.SQRT: lambda: 0.5 / y(), C.SQUARE: lambda: 2.0 * x(),
        C.SIN: lambda: tg.cos(x()), C.COS: lambda: -tg.sin(x()),
        C.TAN: lambda: 1.0 + y() * y(), C.TANH: lambda: 1.0 - y() * y(),
        C.SINH: lambda: tg.cosh(x()), C.COSH: lambda: tg.sinh(x()),
        C.ARCSIN: lambda: 1.0 / tg.sqrt(1.0 - x() * x()),
        C.ARCCOS: lambda: -1.0 / tg.sqrt(1.0 - x() * x()),
        C.ARCTAN: lambda: 1.0 / (1.0 + x() * x()),
        C.ABS: lambda: np.sign(W.val(q)), C.FABS: lambda: np.sign(W.val(q)),
        C.RECIPROCAL: lambda: -y() * y(), C.EXP2: lambda: y() * _LN2,
        C.LOG2: lambda: 1.0 / (x() * _LN2), C.LOG10: lambda: 1.0 / (x() * _LN10),
        C.CBRT: lambda: 1.0 / (3.0 * y() * y()),
        C.ARCSINH: lambda: 1.0 / tg.sqrt(x() * x() + 1.0),
        C.ARCCOSH: lambda: 1.0 / tg.sqrt(x() * x() - 1.0),
        C.ARCTANH: lambda: 1.0 / (1.0 - x() * x()),
        C.DEG2RAD: lambda: math.pi / 180.0, C.RAD2DEG: lambda: 180.0 / math.pi,
        C.ERF: lambda: (2.0 / math.sqrt(math.pi)) * tg.exp(-x() * x()),
        C.ERFC: lambda: (-2.0 / math.sqrt(math.pi)) * tg.exp(-x() * x()),
        C.ERFINV: lambda: (math.sqrt(math.pi) / 2.0) * tg.exp(y() * y()),
        C.GAMMALN: lambda: tg.digamma(x()),
        C.DIGAMMA: lambda: _special().polygamma(1, x()),
        C.I0E: lambda: tg.i1e(x()) - np.sign(W.val(q)) * y(),
        C.I1E: lambda: _d_i1e(W, q, x, y),
        C.LOG_NDTR: lambda: tg.exp(-0.5 * x() * x() - tg.log_ndtr(x()))
        / math.sqrt(2.0 * math.pi),
    }
    if sub == C.ZERO or C.ZERO_FIRST <= sub < C.VIEW_FIRST:
        return None
    return D[sub]()  # a sub with no formula: KeyError, never a zero


def _special():
    from .ops import special
    return special


def _d_i1e(W, q, x, y):
    # i1e' = i0e - i1e (sign(x) + 1/x); 1/2 at 0
    tg = _tg()
    xv = W.val(q)
    if (xv == 0).any():
        raise NoRule("I1e", "its input has zero entries")
    return tg.i0e(x()) - y() * (np.sign(xv) + 1.0 / x())


def _unary(W, r, sub, u):
    (q,) = W.parents(r)
    d = _d_unary(W, r, sub)
    if d is None:
        return
    W.add(q, u if isinstance(d, float) and d == 1.0 else u * d)


def _scalar(W, r, sub, u):
    (q,) = W.parents(r)
    c = float(W.tape.fp[r])
    if sub == C.ADDC:
        d = u
    elif sub == C.MULC:
        d = u * c
    elif sub == C.DIVC:
        d = u / c
    elif sub == C.RSUBC:
        d = -u
    elif sub == C.RDIVC:  # c / x
        d = -u * W.x(r) / W.x(q)
    elif sub == C.POWC:  # x ** c
        d = u * (c * W.x(q) ** (c - 1.0)) if c != 0.0 else None
    elif sub == C.RPOWC:  # c ** x
        d = u * W.x(r) * math.log(c) if c != 1.0 else None
    else:
        raise KeyError(sub)
    W.add(q, d)


def _nary(W, r, sub, u):
    tg = _tg()
    ps = W.parents(r)
    m = W.size(r)
    if sub == C.WHERE:
        qc, qa, qb = ps
        cond = W.val(qc) != 0
        ic, ia, ib = _maps(W, r, m, ps)
        cond = cond[ic] if ic is not None else np.broadcast_to(cond, (m,))
        W.add(qa, _back(u * cond.astype(np.float64), ia, W.size(qa)))
        W.add(qb, _back(u * (~cond).astype(np.float64), ib, W.size(qb)))
        return
    if sub >= C.NARY_ZERO_FIRST:
        return
    qa, qb = ps
    ia, ib = _maps(W, r, m, ps)
    A = lambda: _at(W.x(qa), ia, m)  # noqa: E731
    B = lambda: _at(W.x(qb), ib, m)  # noqa: E731
    av = lambda: _atv(W.val(qa), ia, m)  # noqa: E731
    bv = lambda: _atv(W.val(qb), ib, m)  # noqa: E731
    Y = lambda: W.x(r)  # noqa: E731
    need_a, need_b = W.dep[qa], W.dep[qb]
    if sub == C.ADD:
        da, db = 1.0, 1.0
    elif sub == C.SUB:
        da, db = 1.0, -1.0
    elif sub == C.MUL:
        da = B() if need_a else None
        db = A() if need_b else None
    elif sub == C.DIV:
        da = 1.0 / B() if need_a else None
        db = -Y() / B() if need_b else None
    elif sub in (C.POW, C.FLOAT_POWER):
        a_, b_ = av(), bv()
        da = (B() * A() ** (B() - 1.0)) * (b_ != 0).astype(np.float64) if need_a else None
        if need_b:
            safe = np.where(a_ != 0, a_, 1.0)
            a_t = A()
            la = tg.log(tg.where(a_ != 0, a_t, safe)) if isinstance(a_t, Tensor) \
                else np.log(safe)
            db = Y() * la * (a_ != 0)
        else:
            db = None
    elif sub == C.ARCTAN2:
        r2 = A() * A() + B() * B()
        da, db = B() / r2, -A() / r2
    elif sub == C.HYPOT:
        da, db = A() / Y(), B() / Y()
    elif sub == C.LOGADDEXP:
        da, db = tg.exp(A() - Y()), tg.exp(B() - Y())
    elif sub == C.LOGADDEXP2:
        da, db = tg.exp2(A() - Y()), tg.exp2(B() - Y())
    elif sub == C.COPYSIGN:
        da, db = np.copysign(1.0, av()) * np.copysign(1.0, bv()), None
    elif sub == C.FMOD:
        da, db = 1.0, -np.trunc(av() / bv())
    elif sub == C.REMAINDER:
        da, db = 1.0, -np.floor(av() / bv())
    elif sub in (C.MAXIMUM, C.MINIMUM, C.FMAX, C.FMIN):
        a_, b_ = av(), bv()
        big = sub in (C.MAXIMUM, C.FMAX)
        wins = (a_ > b_) if big else (a_ < b_)
        tie = a_ == b_
        da = np.where(tie, 0.5, wins.astype(np.float64))
        nan_a, nan_b = a_ != a_, b_ != b_
        if sub in (C.MAXIMUM, C.MINIMUM):  # NaN wins
            da = np.where(nan_a, 1.0, np.where(nan_b, 0.0, da))
        else:  # NaN loses
            da = np.where(nan_a, 0.0, np.where(nan_b, 1.0, da))
        db = 1.0 - da
    else:
        raise KeyError(sub)
    if need_a and da is not None:
        W.add(qa, _back(u * da, ia, W.size(qa)))
    if need_b and db is not None:
        W.add(qb, _back(u * db, ib, W.size(qb)))


def _maps(W, r, m, ps):
    return operand_maps(W.tape, r, m, [W.size(q) for q in ps])


def _at(t, idx, m):
    """Operand value ``t`` at the m output elements (its map ``idx``)."""
    if idx is None:
        return t
    if isinstance(t, np.ndarray):
        return t[idx]
    return take(t, idx)


def _atv(v, idx, m):
    if idx is None:
        return v
    return v[idx]


def _back(t, idx, n):
    """The adjoint ``t`` of the m output elements, summed into the operand's n."""
    if idx is None:
        return t
    if isinstance(t, np.ndarray):
        return np.bincount(idx, t, minlength=n)
    return scatter(t, idx, n)


def _reduce(W, r, sub, u):
    (q,) = W.parents(r)
    n, m = W.size(q), W.size(r)
    om = reduce_map(W.tape, r, n) if m > 1 or sub in (C.SOFTMAX, C.LOG_SOFTMAX) else \
        np.zeros(n, np.int64)
    tg = _tg()
    if sub == C.SUM:
        W.add(q, take(u, om))
    elif sub == C.MEAN:
        W.add(q, take(u, om) * (m / n if n else 0.0))
    elif sub in (C.MAX, C.MIN):
        x, y = W.val(q), W.val(r)
        hit = (x == y[om]) | ((x != x) & (y[om] != y[om]))
        ties = np.bincount(om, hit.astype(np.float64), m)
        W.add(q, take(u, om) * np.where(hit, 1.0 / np.maximum(ties, 1.0)[om], 0.0))
    elif sub == C.PROD:
        if (W.val(q) != 0).all():  # y / x
            W.add(q, take(u * W.x(r), om) / W.x(q))
        elif n:
            W.add(q, _prod_others(W.x(q), om, m, n) * take(u, om))
    elif sub == C.LOGSUMEXP:
        W.add(q, take(u, om) * tg.exp(W.x(q) - take(W.x(r), om)))
    elif sub == C.SOFTMAX:
        y = W.x(r)
        rows = int(om.max()) + 1 if n else 0
        W.add(q, y * (u - take(scatter(u * y, om, rows), om)))
    elif sub == C.LOG_SOFTMAX:
        y = W.x(r)
        rows = int(om.max()) + 1 if n else 0
        W.add(q, u - tg.exp(y) * take(scatter(u, om, rows), om))
    else:
        raise KeyError(sub)


def _prod_others(x, om, m, n):
    """The product of the other elements of each element's group (``om``: its
    output), exact with zeros: the exclusive cumulative products from both
    sides, a polynomial in x, so every further order is exact too."""
    tg = _tg()
    perm = np.argsort(om, kind="stable")  # each output's elements, in a row
    k = n // m
    X = tg.reshape(take(x, perm), (m, k))
    one = np.ones((m, 1))
    left = tg.cumprod(tg.concatenate([one, X[:, :k - 1]], axis=1), axis=1)
    right = tg.flip(tg.cumprod(tg.concatenate([one, tg.flip(X[:, 1:], 1)], axis=1),
                               axis=1), 1)
    return scatter(tg.reshape(left * right, (-1,)), perm, n)


#: the most elements of the zero-safe cumprod formula (n^2 along the scan)
_CUMPROD_ZERO_MAX = 1 << 22


def _gather(W, r, sub, u):
    tape = W.tape
    (q,) = W.parents(r)
    b = int(tape.ip0[r])
    m = int(tape.ip[b])
    idx = tape.ip[b + 1:b + 1 + m]
    W.add(q, scatter(u, idx, W.size(q)))


def _concat(W, r, sub, u):
    tape = W.tape
    b = int(tape.ip0[r])
    m = int(tape.ip[b])
    src = tape.ip[b + 1:b + 1 + m]
    pos = tape.ip[b + 1 + m:b + 1 + 2 * m]
    for j, q in enumerate(W.parents(r)):
        if not W.dep[q]:
            continue
        ks = np.flatnonzero(src == j)
        W.add(q, scatter(take(u, ks), pos[ks], W.size(q)))


def _scan(W, r, sub, u):
    tape = W.tape
    tg = _tg()
    (q,) = W.parents(r)
    b = int(tape.ip0[r])
    shape = (int(tape.ip[b]), int(tape.ip[b + 1]), int(tape.ip[b + 2]))

    def rcumsum(t):  # sum over j >= k along the scanned axis
        t = tg.reshape(t, shape)
        return tg.reshape(tg.flip(tg.cumsum(tg.flip(t, 1), axis=1), 1), (-1,))
    if sub == C.CUMSUM:
        W.add(q, rcumsum(u))
    elif sub == C.CUMPROD:
        if (W.val(q) != 0).all():
            W.add(q, rcumsum(u * W.x(r)) / W.x(q))
            return
        # with zeros: dy_j/dx_k = prod_{i <= j, i != k} x_i (k <= j), each row k
        # a cumprod of x with x_k replaced by 1: polynomial, exact to any order
        a, n, c = shape
        X = tg.expand_dims(tg.reshape(W.x(q), shape), 1)            # (a, 1, n, c)
        eye = np.eye(n)[None, :, :, None]
        Cp = tg.cumprod(X * (1.0 - eye) + eye, axis=2)               # (a, k, j, c)
        U = tg.expand_dims(tg.reshape(u, shape), 1)
        upper = np.triu(np.ones((n, n)))[None, :, :, None]           # j >= k
        W.add(q, tg.reshape(tg.sum(U * Cp * upper, axis=2), (-1,)))
    else:
        raise KeyError(sub)


# host ops: matmul, einsum, inv, solve, det, slogdet
def _T(m):
    return _tg().swapaxes(m, -1, -2)


def _sum_to(t, shape):
    """Sum a broadcast ``t`` back to ``shape``."""
    tg = _tg()
    extra = t.ndim - len(shape)
    if extra:
        t = tg.sum(t, axis=tuple(range(extra)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and t.shape[i] != 1)
    if axes:
        t = tg.sum(t, axis=axes, keepdims=True)
    return t


def _flat(t):
    return _tg().reshape(t, (-1,))


def _matmul(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    shape_a, shape_b = W.tape.host[r]
    a1, b1 = len(shape_a) == 1, len(shape_b) == 1
    sa = (1,) + tuple(shape_a) if a1 else tuple(shape_a)
    sb = tuple(shape_b) + (1,) if b1 else tuple(shape_b)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    G = tg.reshape(u, batch + (sa[-2], sb[-1]))
    if W.dep[qa]:
        B = tg.reshape(W.x(qb), sb)
        W.add(qa, _flat(_sum_to(tg.matmul(G, _T(B)), sa)))
    if W.dep[qb]:
        A = tg.reshape(W.x(qa), sa)
        W.add(qb, _flat(_sum_to(tg.matmul(_T(A), G), sb)))


def _inv(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_y = W.tape.host[r]
    Y = tg.reshape(W.x(r), shape_y)
    G = tg.reshape(u, shape_y)
    W.add(qa, _flat(-tg.matmul(tg.matmul(_T(Y), G), _T(Y))))


def _solve(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    shape_a, shape_b, shape_x = W.tape.host[r]
    vector = len(shape_b) == 1
    A = tg.reshape(W.x(qa), shape_a)
    X = tg.reshape(W.x(r), shape_x)
    G = tg.reshape(u, shape_x)
    Gm = tg.expand_dims(G, -1) if vector else G
    GB = tg.linalg.solve(_T(A), Gm)
    if W.dep[qb]:
        W.add(qb, _flat(_sum_to(GB[..., 0] if vector else GB, tuple(shape_b))))
    if W.dep[qa]:
        Xm = tg.expand_dims(X, -1) if vector else X
        W.add(qa, _flat(_sum_to(-tg.matmul(GB, _T(Xm)), tuple(shape_a))))


def _det_like(W, r, u, det):
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_d = W.tape.host[r]
    A = tg.reshape(W.x(qa), shape_a)
    g = tg.reshape(u, tuple(shape_d) + (1, 1))
    AiT = _T(tg.linalg.inv(A))
    if det:
        d = tg.reshape(W.x(r), tuple(shape_d) + (1, 1))
        W.add(qa, _flat(g * d * AiT))
    else:
        W.add(qa, _flat(g * AiT))


def _einsum(W, r, u):
    tg = _tg()
    tape = W.tape
    ins, out, *shapes, out_shape = tape.host[r]
    parents = W.parents(r)
    values = [tg.reshape(W.x(p), s) for p, s in zip(parents, shapes)]
    g = tg.reshape(u, out_shape)
    size = {}
    for s, shp in zip(ins, shapes):
        for c, n in zip(s, shp):
            if size.get(c, 1) == 1:
                size[c] = n
    for k, p in enumerate(parents):
        if not W.dep[p]:
            continue
        others = [ins[j] for j in range(len(ins)) if j != k]
        present = set(out).union(*others)
        uniq = ins[k]
        kept = "".join(c for c in uniq if c in present)
        spec = ",".join([out] + others) + "->" + kept
        gk = tg.einsum(spec, g, *[values[j] for j in range(len(ins)) if j != k])
        own = dict(zip(ins[k], shapes[k]))
        for axis, c in enumerate(uniq):
            if c not in present:
                gk = tg.expand_dims(gk, axis)
        gk = tg.broadcast_to(gk, tuple(own[c] if c not in present else size[c]
                                       for c in uniq))
        stretched = tuple(i for i, c in enumerate(uniq) if own[c] == 1 and gk.shape[i] != 1)
        if stretched:
            gk = tg.sum(gk, axis=stretched, keepdims=True)
        W.add(p, _flat(tg.broadcast_to(gk, shapes[k])))


# the decompositions: each VJP of ops/matrix.py, on tensors of the graph.  The
# factors are the op's output records (their values kept with the host
# record), so differentiating a formula again runs through the same VJP.
def _slot(W, r, s, shape):
    """The adjoint of output slot s of multi-output record r, shaped, or None."""
    a = W.adj.get(r + 1 + s)
    return None if a is None else _tg().reshape(a, shape)


def _known(W, q, value):
    """Record q as a tensor of the graph whose value (not necessarily kept on
    the tape: the host record holds it) is ``value``."""
    value = np.asarray(value, np.float64)
    if int(W.tape.op[q]) == C.code(C.K_NONE, C.CONST):
        return value
    h = W.handles.get(q)
    if h is None:  # flat, as every handle (the rules of other records read it)
        h = W.handles[q] = _result(W.tape, q, value.reshape(-1))
    return _tg().reshape(h, value.shape)


def _leading(W, q, shape, part, index):
    """``x[index]`` of record q (of ``shape``) as a tensor of the graph, where
    only that part's value, ``part``, may be known: the rest is filled with
    zeros in a tensor of its own, never cached as the record's handle, so no
    other formula reads the filler."""
    tape = W.tape
    n = int(np.prod(shape))
    if n <= SMALL or tape.rix[q] >= 0 or q in W.handles \
            or int(tape.op[q]) == C.code(C.K_NONE, C.CONST):
        t = W.x(q)
    else:
        full = np.zeros(shape)
        full[index] = part
        t = _result(tape, q, full)
    tg = _tg()
    return tg.reshape(t, shape)[index]


def _eye(n):
    return np.eye(n)


def _off(n):
    return 1.0 - np.eye(n)


def _gaps(w):
    """F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it (distinct w: check)."""
    tg = _tg()
    n = w.shape[-1]
    diff = tg.expand_dims(w, -2) - tg.expand_dims(w, -1)
    return _off(n) / (diff + _eye(n))


def _sym_t(m):
    return 0.5 * (m + _T(m))


def _cholesky(W, r, u):
    # gA = sym(L^-T Phi(L^T gL) L^-1), Phi: the lower triangle, half diagonal
    tg = _tg()
    (qa,) = W.parents(r)
    shape_a, shape_l = W.tape.host[r]
    n = shape_l[-1]
    Lm = tg.reshape(W.x(r), shape_l)
    G = tg.reshape(u, shape_l)
    P = tg.matmul(_T(Lm), G) * (np.tril(np.ones((n, n))) - 0.5 * _eye(n))
    Li = tg.linalg.inv(Lm)
    W.add(qa, _flat(_sym_t(tg.matmul(tg.matmul(_T(Li), P), Li))))


def _eigh(W, r, u):
    # gA = sym(V (diag(gw) + F o (V^T gV)) V^T)
    tg = _tg()
    (qa,) = W.parents(r)
    _shape_a, (w, V) = W.tape.host[r]
    n = w.shape[-1]
    gw, gV = _slot(W, r, 0, w.shape), _slot(W, r, 1, V.shape)
    Vt = _known(W, r + 2, V)
    inner = None
    if gw is not None:
        inner = tg.expand_dims(gw, -1) * _eye(n)
    if gV is not None:
        K = _gaps(_known(W, r + 1, w)) * tg.matmul(_T(Vt), gV)
        inner = K if inner is None else inner + K
    W.add(qa, _flat(_sym_t(tg.matmul(tg.matmul(Vt, inner), _T(Vt)))))


def _copyltu_t(m):
    n = m.shape[-1]
    low = m * np.tril(np.ones((n, n)), -1)
    return low + _T(low) + m * _eye(n)


def _qr_tall(Q, R, gQ, gR):
    """gA for A = QR, Q (m, n) orthonormal columns, R (n, n) invertible."""
    tg = _tg()
    M = None
    if gR is not None:
        M = tg.matmul(R, _T(gR))
    if gQ is not None:
        t = tg.matmul(_T(gQ), Q)
        M = -t if M is None else M - t
    b = tg.matmul(Q, _copyltu_t(M))
    if gQ is not None:
        b = b + gQ
    return _T(tg.linalg.solve(R, _T(b)))  # b R^-T


def _qr(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    mode, Qv, Rv, Y = W.tape.host[r]
    gQ, gR = _slot(W, r, 0, Qv.shape), _slot(W, r, 1, Rv.shape)
    Q, R = _known(W, r + 1, Qv), _known(W, r + 2, Rv)
    m, n = Qv.shape[-2], Rv.shape[-1]
    if mode == "complete" and m > n:
        if gQ is not None:  # the compiled backward, run first, raised already
            raise RuntimeError("linalg.qr: not differentiable in Q for mode='complete' "
                               f"with more rows than columns ({m} > {n})")
        W.add(qa, _flat(_qr_tall(Q[..., :n], R[..., :n, :], None, gR[..., :n, :])))
        return
    if m >= n:
        W.add(qa, _flat(_qr_tall(Q, R, gQ, gR)))
        return
    # wide: A = [X | Y] with X = Q U square and Y = Q V, so V = Q^T Y
    k = m
    shape_a = Qv.shape[:-2] + (m, n)
    U = R[..., :k]
    gU = None if gR is None else gR[..., :k]
    gV = None if gR is None else gR[..., k:]
    if gV is not None:
        Yt = _leading(W, qa, shape_a, Y, (Ellipsis, slice(m, None)))
        t = tg.matmul(Yt, _T(gV))
        gQ = t if gQ is None else gQ + t
    gX = _qr_tall(Q, U, gQ, gU)
    gY = tg.matmul(Q, gV) if gV is not None else np.zeros(Y.shape)
    W.add(qa, _flat(tg.concatenate([gX, gY], axis=-1)))


def _svd(W, r, u):
    # gA for A = U diag(s) Vh, reduced to k = min(m, n) (ops/matrix._svd_backward)
    tg = _tg()
    (qa,) = W.parents(r)
    hermitian, (sU, sS, sVh), Uk, s, Vhk = W.tape.host[r]
    k = s.shape[-1]
    m, n = sU[-2], sVh[-1]
    gU, gS, gVh = (_slot(W, r, j, sh) for j, sh in enumerate((sU, sS, sVh)))
    # full_matrices: only the first k columns of U / rows of Vh carry gradient
    gU = None if gU is None else gU[..., :k]
    gVh = None if gVh is None else gVh[..., :k, :]
    U = _leading(W, r + 1, sU, Uk, (Ellipsis, slice(0, k)))
    Vh = _leading(W, r + 3, sVh, Vhk, (Ellipsis, slice(0, k), slice(None)))
    st = _known(W, r + 2, s)
    sj, si = tg.expand_dims(st, -2), tg.expand_dims(st, -1)
    inner = None
    terms = []
    if gS is not None:
        inner = tg.expand_dims(gS, -1) * _eye(k)
    if gU is not None or gVh is not None:
        F = _gaps(st * st)
    if gU is not None:
        UtgU = tg.matmul(_T(U), gU)
        t = F * (UtgU - _T(UtgU)) * sj
        inner = t if inner is None else inner + t
        if m > k:  # (I - U U^T) gU S^-1 V^T: the part of gU outside U's span
            terms.append(tg.matmul((gU - tg.matmul(U, UtgU)) / sj, Vh))
    if gVh is not None:
        VtgV = tg.matmul(Vh, _T(gVh))
        t = si * (F * (VtgV - _T(VtgV)))
        inner = t if inner is None else inner + t
        if n > k:  # U S^-1 gV^T (I - V V^T)
            terms.append(tg.matmul(U, (gVh - tg.matmul(tg.matmul(gVh, _T(Vh)), Vh)) / si))
    g = tg.matmul(tg.matmul(U, inner), Vh) if inner is not None else None
    for t in terms:
        g = t if g is None else g + t
    if g is None:
        return
    W.add(qa, _flat(_sym_t(g) if hermitian else g))


def _pinv_core(A, X, G):
    """gA for X = pinv(A) where the rank is constant, G the gradient of X."""
    tg = _tg()
    m, n = A.shape[-2], A.shape[-1]
    mm = tg.matmul
    XT = _T(X)
    g = -mm(mm(XT, G), XT)
    g = g + mm(mm(mm(np.eye(m) - mm(A, X), _T(G)), X), XT)
    g = g + mm(mm(mm(XT, X), _T(G)), np.eye(n) - mm(X, A))
    return g


def _pinv(W, r, u):
    tg = _tg()
    (qa,) = W.parents(r)
    hermitian, shape_a, shape_x = W.tape.host[r]
    A = tg.reshape(W.x(qa), shape_a)
    X = tg.reshape(W.x(r), shape_x)
    g = _pinv_core(A, X, tg.reshape(u, shape_x))
    W.add(qa, _flat(_sym_t(g) if hermitian else g))


def _lstsq(W, r, u):
    tg = _tg()
    qa, qb = W.parents(r)
    cutoff, shapes, Av, bv, xv = W.tape.host[r]
    gx = _slot(W, r, 0, shapes[0])
    gres = _slot(W, r, 1, shapes[1]) if len(shapes) > 1 else None
    A, b, x = _known(W, qa, Av), _known(W, qb, bv), _known(W, r + 1, xv)
    vector = bv.ndim == 1
    if vector:
        b, x = tg.reshape(b, (-1, 1)), tg.reshape(x, (-1, 1))
        gx = None if gx is None else tg.reshape(gx, (-1, 1))
    gA = gb = None
    if gx is not None:
        # x = pinv(A) b: through pinv's derivative (constant rank)
        X = tg.linalg.pinv(A, rcond=cutoff)
        if W.dep[qa]:
            gA = _pinv_core(A, X, tg.matmul(gx, _T(b)))
        gb = tg.matmul(_T(X), gx)
    if gres is not None:
        # |b - A x|^2 at the minimiser: A^T (b - A x) = 0, so x's own change
        # does not contribute
        wr = 2.0 * (b - tg.matmul(A, x)) * gres
        gb = wr if gb is None else gb + wr
        t = tg.matmul(wr, _T(x))
        gA = -t if gA is None else gA - t
    if gA is not None and W.dep[qa]:
        W.add(qa, _flat(gA))
    if gb is not None and W.dep[qb]:
        W.add(qb, _flat(gb))


def _function(W, r, u):
    tape = W.tape
    cls, ctx, tensor_args, out_shapes, nargs = tape.host[r]
    parents = W.parents(r)
    where = {position: q for (position, _shape), q in zip(tensor_args, parents)}
    # argument ``position`` as a tensor of the graph, of the given value
    # (the Function keeps its inputs; the tape need not)
    grads = cls.vjp_ops(ctx, u, lambda position, value: _known(W, where[position], value))
    for (position, _shape), q in zip(tensor_args, parents):
        g = grads[position]
        if g is not None:
            W.add(q, _flat(g))


HOST = {L._MATMUL: _matmul, L._INV: _inv, L._SOLVE: _solve,
        L._DET: lambda W, r, u: _det_like(W, r, u, True),
        L._LOGABSDET: lambda W, r, u: _det_like(W, r, u, False),
        L._EINSUM: _einsum, _FUNCTION: _function,
        L._CHOLESKY: _cholesky, L._EIGH: _eigh, L._QR: _qr,
        L._SVD: _svd, L._PINV: _pinv, L._LSTSQ: _lstsq}


def _host(W, r, sub, u):
    HOST[C.code(C.K_HOST, sub)](W, r, u)


def _missing(W, r, sub, u):
    raise NoRule(REGISTRY[int(W.tape.op[r])].name)


RULES = {C.K_UNARY: _unary, C.K_SCALAR: _scalar, C.K_NARY: _nary, C.K_REDUCE: _reduce,
         C.K_GATHER: _gather, C.K_CONCAT: _concat, C.K_HOST: _host, C.K_SCAN: _scan,
         C.K_USER: _missing}


# -- the driver ---------------------------------------------------------------------------------
def input_records(tape, x, upto):
    """The records of input tensor ``x`` below ``upto``: a non-leaf's own, or
    every LEAF record of a leaf (one written in place since records anew)."""
    if x._tok is not None:
        return [int(x._rec)] if x._tok is tape.tok and x._rec < upto else []
    return [q for q, z in tape.leaves.items() if z is x and q < upto]


def graph_grad(tape, outputs, seeds, inputs, upto):
    """The gradients of ``outputs`` (seeded) with respect to ``inputs``, as
    tensors of the graph (None where none reaches an input): one recorded
    walk.  Raises NoRule, having recorded nothing, where a record on the way
    has no formula."""
    from .grad_mode import enable_grad
    from .kernels.sweep import live_records
    from .tensor import tensor
    recs = [input_records(tape, x, upto) for x in inputs]
    flat = sorted({q for rs in recs for q in rs})
    tok = tape.tok  # held: no compaction renumbers records while the walk records
    W = Walk(tape, upto, flat)
    roots = np.array([t._rec for t in outputs if t._tok is tape.tok], np.int64)
    tape.arg0[tape.n] = tape.na
    live = live_records((tape.op, tape.arg0, tape.size, None, tape.args), upto, roots)
    check(tape, upto, W.dep & live[:upto], roots[roots < upto])
    seeded = []
    for t, v in zip(outputs, seeds):
        if t._tok is tape.tok:
            seeded.append((int(t._rec), tensor(np.asarray(v, np.float64).reshape(-1))))
    with enable_grad():
        for r, s in seeded:
            W.add(r, s)
        W.run({}, flat[0] if flat else upto)
    del tok
    res = []
    for x, rs, in zip(inputs, recs):
        g = None
        for q in rs:
            a = W.adj.get(q)
            if a is not None:
                g = a if g is None else g + a
        for t, v in zip(outputs, seeds):  # an output that is the input itself
            if t is x and t._tok is None:
                s = tensor(np.asarray(v, np.float64).reshape(-1))
                g = s if g is None else g + s
        res.append(g)
    return res
