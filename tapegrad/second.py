"""Second derivatives: ``hvp`` and ``hessian`` by forward-over-reverse on the tape.

The function is recorded once.  A forward tangent sweep (``forward.py``)
gives every record's tangents ``xdot`` for p directions.  Then one vector
reverse sweep (``kernels/vector.py``) carries p + 1 adjoints per record:
vector 0 is the ordinary adjoint ``ybar`` (seed 1), vectors 1..p its
tangents ``ybar_dot`` (seed 0).  The tangent-linear of an op's VJP
``xbar += phi'(x)^T ybar`` is

    xbar_dot += phi'(x)^T ybar_dot + (phi''(x)[xdot])^T ybar.

The first term is the op's own VJP applied to the vectors 1..p, which the
compiled vector sweep already does for all p + 1 vectors at once.  Only the
second term is new, and it vanishes for every op that is (piecewise) linear:
sums, views, gathers, concatenation, cumsum, max/min, abs, maximum, ...  The
sweep therefore runs compiled between the nonlinear records and stops just
before each of them; at that point the record's ``ybar`` is complete (all
its consumers come later on the tape), and the second-order term is added
to its parents' vectors 1..p here with NumPy, for all p directions at once.
Then the sweep resumes and applies the record's first-order VJP.  Cost: one
tangent sweep and one (p + 1)-vector reverse sweep, plus one vectorised
NumPy step per nonlinear record.

Ops without a second-order rule here (the LAPACK decompositions, ``tg.Function``,
``tg.elementwise`` user ops) raise ``NotImplementedError`` naming
the op, when the function's Hessian actually reaches them.
"""
import math

import numpy as np

from . import forward as FW
from .autograd import _freed_error
from .functional import _Slabs, _argnums, _call, _root_span, _run
from .kernels import codes as C
from .kernels._views import SMALL
from .ops import linalg as L
from .ops.registry import REGISTRY
from .tape import current

#: memory one batched pass may use for the tangents and adjoints of all its
#: directions; a larger Hessian is computed in chunks of directions
HESSIAN_BYTES = 256 * 2**20

_LN2, _LN10 = math.log(2.0), math.log(10.0)

#: from this many adjoint vectors on, the common ops' VJPs run as one NumPy
#: step over all of them instead of once per vector in the compiled sweep
FAST_VECTORS = 16


# -- second derivatives of the elementwise ops, per sub code -----------------------------
# Each reads only the values the tape keeps for the op's VJP (codes.READS_*),
# so a rule never needs a value that was not recorded.
def _d2_unary(sub, x, y):
    """d^2y/dx^2 of ``y = f(x)``, elementwise (x or y may be unused)."""
    U = C
    if sub == U.EXP:
        return y
    if sub == U.LOG:
        return -1.0 / (x * x)
    if sub == U.LOG1P:
        return -1.0 / ((1.0 + x) ** 2)
    if sub == U.EXPM1:
        return y + 1.0
    if sub == U.SQRT:
        return -0.25 / (y ** 3)
    if sub == U.SQUARE:
        return 2.0
    if sub == U.SIN:
        return -np.sin(x)
    if sub == U.COS:
        return -np.cos(x)
    if sub == U.TAN:
        return 2.0 * y * (1.0 + y * y)
    if sub == U.TANH:
        return -2.0 * y * (1.0 - y * y)
    if sub == U.SINH:
        return np.sinh(x)
    if sub == U.COSH:
        return np.cosh(x)
    if sub == U.ARCSIN:
        return x / (1.0 - x * x) ** 1.5
    if sub == U.ARCCOS:
        return -x / (1.0 - x * x) ** 1.5
    if sub == U.ARCTAN:
        return -2.0 * x / (1.0 + x * x) ** 2
    if sub == U.RECIPROCAL:
        return 2.0 * y ** 3
    if sub == U.EXP2:
        return y * _LN2 * _LN2
    if sub == U.LOG2:
        return -1.0 / (x * x * _LN2)
    if sub == U.LOG10:
        return -1.0 / (x * x * _LN10)
    if sub == U.CBRT:
        return -2.0 / (9.0 * y ** 5)
    if sub == U.ARCSINH:
        return -x / (x * x + 1.0) ** 1.5
    if sub == U.ARCCOSH:
        return -x / (x * x - 1.0) ** 1.5
    if sub == U.ARCTANH:
        return 2.0 * x / (1.0 - x * x) ** 2
    raise AssertionError(sub)  # the linear subs never get here (see _KIND)


def _d2_scalar(sub, x, y, c):
    if sub == C.RDIVC:  # c / x
        return 2.0 * y / (x * x)
    if sub == C.POWC:  # x ** c
        if c == 0.0 or c == 1.0:
            return np.zeros_like(x)
        return c * (c - 1.0) * x ** (c - 2.0)
    if sub == C.RPOWC:  # c ** x
        return y * math.log(c) ** 2 if c != 0.0 else np.zeros_like(y)
    raise AssertionError(sub)


def _d2_binary(sub, a, b, y):
    """(d2/da2, d2/da db, d2/db2) of ``y = a op b``, elementwise."""
    if sub == C.MUL:
        return 0.0, 1.0, 0.0
    if sub == C.DIV:
        return 0.0, -1.0 / (b * b), 2.0 * y / (b * b)
    if sub == C.POW or sub == C.FLOAT_POWER:
        # at a == 0 the log terms take their limit 0, as the first derivative does
        nz = a != 0.0
        la = np.log(np.where(nz, np.abs(a), 1.0))
        aa = b * (b - 1.0) * a ** (b - 2.0)
        ab = np.where(nz, a ** (b - 1.0) * (1.0 + b * la), np.where(b == 1.0, 1.0, 0.0))
        bb = np.where(nz, y * la * la, 0.0)
        return aa, ab, bb
    if sub == C.ARCTAN2:
        r2 = a * a + b * b
        q = r2 * r2
        return -2.0 * a * b / q, (a * a - b * b) / q, 2.0 * a * b / q
    if sub == C.HYPOT:
        y3 = y ** 3
        return b * b / y3, -a * b / y3, a * a / y3
    if sub == C.LOGADDEXP or sub == C.LOGADDEXP2:
        s = (np.exp(a - y) * np.exp(b - y) if sub == C.LOGADDEXP
             else 2.0 ** (a - y) * 2.0 ** (b - y) * _LN2)
        return s, -s, s
    raise AssertionError(sub)


# -- which records need a second-order step ----------------------------------------------
_LINEAR, _RULE, _MISSING = 0, 1, 2

_UNARY_LINEAR = {C.IDENT, C.NEG, C.ZERO, C.ABS, C.FABS, C.DEG2RAD, C.RAD2DEG}
_NARY_LINEAR = {C.ADD, C.SUB, C.WHERE, C.MAXIMUM, C.MINIMUM, C.FMAX, C.FMIN, C.COPYSIGN,
                C.FMOD, C.REMAINDER}


def _classify(code):
    kind, sub = code >> C.SHIFT, code & C.MASK
    if kind in (C.K_NONE, C.K_GATHER, C.K_CONCAT):
        return _LINEAR
    if kind == C.K_UNARY:
        return _LINEAR if sub in _UNARY_LINEAR or sub >= C.ZERO_FIRST else _RULE
    if kind == C.K_SCALAR:
        return _RULE if sub in (C.RDIVC, C.POWC, C.RPOWC) else _LINEAR
    if kind == C.K_NARY:
        return _LINEAR if sub in _NARY_LINEAR or sub >= C.NARY_ZERO_FIRST else _RULE
    if kind == C.K_REDUCE:
        return _LINEAR if sub in (C.SUM, C.MEAN, C.MAX, C.MIN) else _RULE
    if kind == C.K_SCAN:
        return _LINEAR if sub == C.CUMSUM else _RULE
    if kind == C.K_HOST:
        return _RULE if code in HOST_RULES else _MISSING
    return _MISSING  # K_USER: a user derivative has no second derivative


# -- the pass ----------------------------------------------------------------------------
class _Pass:
    """One forward-over-reverse pass for p directions over a recorded graph."""

    def __init__(self, tape, upto, tan, adj):
        self.tape, self.tan, self.adj, self.p = tape, tan, adj, tan.p
        # the arenas' addresses, read once: ``ctypes.data`` costs microseconds
        self.bases = ((adj.A, adj.A.ctypes.data), (adj.L, adj.L.ctypes.data))

    def val(self, r):
        """Record r's recorded value, flat float64, or None if not kept."""
        tape = self.tape
        n = int(tape.size[r])
        if n > SMALL and tape.rix[r] < 0:
            # not kept (no VJP reads it); the rules read only what is kept
            return None
        return self.adj.value(tape, r, (n,))

    def dot(self, r):
        """Record r's tangents as (p, size), or None where r does not depend
        on the inputs (its tangents are zero)."""
        tan = self.tan
        if r >= tan.upto or not tan.reached[r]:
            return None
        return tan.block(r).T

    def block(self, r):
        """Record r's p + 1 adjoints as a (p + 1, size) view; a plain slice
        where they are contiguous (as_strided costs more than most steps)."""
        adj = self.adj
        n = int(adj.size[r])
        if int(adj.stride[r]) != 8 * n:  # an output of a multi-output op
            return adj.block(r)
        base, addr = self.bases[1 if adj.leaf[r] else 0]
        o = (int(adj.aptr[r]) - addr) >> 3
        return base[o:o + (self.p + 1) * n].reshape(self.p + 1, n)

    def ybar(self, r):
        return self.block(r)[0]

    def add(self, q, t):
        """Add ``t`` (p, size of q) to q's tangent adjoints (vectors 1..p)."""
        if q >= self.tan.upto or not self.tan.reached[q]:
            return  # q does not depend on the inputs: nobody reads its adjoint
        view = self.block(q)
        if self.adj.reached[q]:
            view[1:] += t.reshape(view[1:].shape)
        else:
            view[0] = 0.0
            view[1:] = t.reshape(view[1:].shape)
            self.adj.reached[q] = True

    def put(self, q, t):
        """Add ``t`` (p + 1, size of q) to all of q's adjoints; True."""
        view = self.block(q)
        if self.adj.reached[q]:
            view += t
        else:
            view[...] = t
            self.adj.reached[q] = True
        return True

    def parents(self, r):
        tape = self.tape
        return [int(q) for q in tape.args[tape.arg0[r]:tape.arg0[r + 1]]]


def _unary2(P, r, sub):
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    x, y = P.val(q), P.val(r)
    P.add(q, (P.ybar(r) * _d2_unary(sub, x, y)) * xd)


def _scalar2(P, r, sub):
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    x, y = P.val(q), P.val(r)
    P.add(q, (P.ybar(r) * _d2_scalar(sub, x, y, float(P.tape.fp[r]))) * xd)


def _index_maps(tape, r, sizes, n):
    """Per operand, the operand index of each of the n output elements
    (``ip`` as in ``nary_vjp``: ``[nd, out_shape, strides...]`` or ``[0]``)."""
    b = int(tape.ip0[r])
    nd = int(tape.ip[b])
    if nd == 0:
        return [np.arange(n) if m == n else np.zeros(n, np.int64) for m in sizes]
    shape = tape.ip[b + 1:b + 1 + nd]
    grids = np.indices(tuple(int(s) for s in shape)).reshape(nd, -1)
    maps = []
    for j in range(len(sizes)):
        st = tape.ip[b + 1 + nd * (j + 1):b + 1 + nd * (j + 2)]
        maps.append((st[:, None] * grids).sum(axis=0))
    return maps


def _nary2(P, r, sub):
    qa, qb = P.parents(r)
    ad, bd = P.dot(qa), P.dot(qb)
    if ad is None and bd is None:
        return
    tape = P.tape
    n = int(tape.size[r])
    ia, ib = _index_maps(tape, r, (int(tape.size[qa]), int(tape.size[qb])), n)
    a, b = P.val(qa)[ia], P.val(qb)[ib]
    y = P.val(r) if sub not in (C.MUL, C.ARCTAN2) else None  # kept only where needed
    with np.errstate(divide="ignore", invalid="ignore"):
        aa, ab, bb = _d2_binary(sub, a, b, y)
    g = P.ybar(r)
    zero = np.zeros((P.p, n))
    ad = zero if ad is None else ad[:, ia]
    bd = zero if bd is None else bd[:, ib]
    for q, idx, t in ((qa, ia, g * (aa * ad + ab * bd)), (qb, ib, g * (ab * ad + bb * bd))):
        acc = np.zeros((P.p, int(tape.size[q])))
        np.add.at(acc.T, idx, t.T)
        P.add(q, acc)


def _reduce_map(tape, r, n):
    """The output element of each of the n input elements (``ip`` as for
    reductions: ``[nd, in_shape, out_strides]``, nothing for a full one)."""
    b = int(tape.ip0[r])
    nd = int(tape.ip[b]) if b else 0
    if nd == 0:
        return np.zeros(n, np.int64)
    shape = tuple(int(s) for s in tape.ip[b + 1:b + 1 + nd])
    st = tape.ip[b + 1 + nd:b + 1 + 2 * nd]
    return (st[:, None] * np.indices(shape).reshape(nd, -1)).sum(axis=0)


def _reduce2(P, r, sub):
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    tape = P.tape
    n, m = int(tape.size[q]), int(tape.size[r])
    om = _reduce_map(tape, r, n) if m > 1 or sub in (C.SOFTMAX, C.LOG_SOFTMAX) else \
        np.zeros(n, np.int64)
    g, y, yd = P.ybar(r), P.val(r), P.dot(r)  # yd: the output's tangents
    if sub == C.SOFTMAX:
        # xbar = y (g - sum(g y)); its tangent with g fixed
        rows = int(om.max()) + 1 if n else 0
        gy = np.bincount(om, g * y, rows)
        gyd = np.zeros((P.p, rows))
        np.add.at(gyd.T, om, (g * yd).T)
        P.add(q, yd * (g - gy[om]) - y * gyd[:, om])
        return
    if sub == C.LOG_SOFTMAX:
        # xbar = g - exp(y) sum(g)
        rows = int(om.max()) + 1 if n else 0
        gs = np.bincount(om, g, rows)
        P.add(q, -(np.exp(y) * gs[om]) * yd)
        return
    x = P.val(q)
    if sub == C.LOGSUMEXP:
        # xbar_i = g_j exp(x_i - y_j)
        s = np.exp(x - y[om])
        P.add(q, (g[om] * s) * (xd - yd[:, om]))
        return
    if sub == C.PROD:
        # xbar_i = g_j y_j / x_i; with no zeros its tangent is
        # g_j (ydot_j / x_i - y_j xdot_i / x_i^2)
        if np.any(x == 0.0):
            raise NotImplementedError(
                "hessian: prod over an array with zero entries has no second-order rule "
                "yet (the first-order one handles zeros)")
        P.add(q, g[om] * (yd[:, om] / x - y[om] * xd / (x * x)))
        return
    raise AssertionError(sub)


def _scan2(P, r, sub):
    # cumprod (no zeros): xbar_k = sum_{j>=k} g_j y_j / x_k; its tangent is
    # sum_{j>=k} g_j (ydot_j / x_k - y_j xdot_k / x_k^2)
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    tape = P.tape
    b = int(tape.ip0[r])
    shape = (int(tape.ip[b]), int(tape.ip[b + 1]), int(tape.ip[b + 2]))
    x = P.val(q)
    if np.any(x == 0.0):
        raise NotImplementedError(
            "hessian: cumprod over an array with zero entries has no second-order rule "
            "yet (the first-order one handles zeros)")
    g, y, yd = P.ybar(r), P.val(r), P.dot(r)

    def rcumsum(t):  # sum over j >= k along the scanned axis, p leading
        t = t.reshape((-1,) + shape)
        return np.flip(np.cumsum(np.flip(t, 2), axis=2), 2).reshape(t.shape[0], -1)

    P.add(q, rcumsum(g * yd) / x - rcumsum(g * y) * xd / (x * x))


# -- host rules ----------------------------------------------------------------------------
def _sum_rows(t, shape):
    """Sum (p,) + broadcast shape ``t`` back to (p,) + shape."""
    extra = t.ndim - 1 - len(shape)
    if extra:
        t = t.sum(axis=tuple(range(1, 1 + extra)))
    axes = tuple(i + 1 for i, s in enumerate(shape) if s == 1 and t.shape[i + 1] != 1)
    return t.sum(axis=axes, keepdims=True) if axes else t


def _matmul2(P, r):
    # y = A B: Abar_dot += ybar Bdot^T, Bbar_dot += Adot^T ybar
    qa, qb = P.parents(r)
    shape_a, shape_b = P.tape.host[r]
    ad, bd = P.dot(qa), P.dot(qb)
    p = P.p
    g = P.ybar(r)
    a1, b1 = len(shape_a) == 1, len(shape_b) == 1
    sa = (1,) + tuple(shape_a) if a1 else tuple(shape_a)
    sb = tuple(shape_b) + (1,) if b1 else tuple(shape_b)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    nb = len(batch)
    # the p directions lead; every operand's batch axes are padded to nb so
    # that they line up behind p when they broadcast
    g2 = g.reshape((1,) + batch + (sa[-2], sb[-1]))
    # with A = B the two terms land on one record and together are right
    if bd is not None:
        B2 = bd.reshape((p,) + (1,) * (nb + 2 - len(sb)) + sb)
        P.add(qa, _sum_rows(g2 @ np.swapaxes(B2, -1, -2), sa))
    if ad is not None:
        A2 = ad.reshape((p,) + (1,) * (nb + 2 - len(sa)) + sa)
        P.add(qb, _sum_rows(np.swapaxes(A2, -1, -2) @ g2, sb))


def _T(m):
    return np.swapaxes(m, -1, -2)


def _inv2(P, r):
    # Abar = -Y^T G Y^T, Y = A^-1: its tangent with G fixed
    (qa,) = P.parents(r)
    shape_a, shape_y = P.tape.host[r]
    Yd = P.dot(r)
    if Yd is None:
        return
    Y = P.val(r).reshape(shape_y)
    G = P.ybar(r).reshape(shape_y)
    Yd = Yd.reshape((P.p,) + tuple(shape_y))
    P.add(qa, -(_T(Yd) @ G @ _T(Y) + _T(Y) @ G @ _T(Yd)))


def _det_like2(P, r, det):
    # det: Abar = g d A^-T; log|det|: Abar = g A^-T; d(A^-1) = -A^-1 Adot A^-1
    (qa,) = P.parents(r)
    shape_a, shape_d = P.tape.host[r]
    Ad = P.dot(qa)
    if Ad is None:
        return
    A = P.val(qa).reshape(shape_a)
    Ai = np.linalg.inv(A)
    g = P.ybar(r).reshape(shape_d)[..., None, None]
    dAiT = -_T(Ai @ Ad.reshape((P.p,) + tuple(shape_a)) @ Ai)
    if det:
        d = P.val(r).reshape(shape_d)[..., None, None]
        dd = P.dot(r).reshape((P.p,) + tuple(shape_d))[..., None, None]
        P.add(qa, g * (dd * _T(Ai) + d * dAiT))
    else:
        P.add(qa, g * dAiT)


def _solve2(P, r):
    # X = A^-1 B: Bbar = A^-T G, Abar = -Bbar X^T; their tangents with G
    # fixed: dBbar = -A^-T Adot^T Bbar, dAbar = -dBbar X^T - Bbar Xdot^T
    qa, qb = P.parents(r)
    shape_a, shape_b, shape_x = P.tape.host[r]
    Ad, Xd = P.dot(qa), P.dot(r)
    if Xd is None:
        return
    p = P.p
    vector = len(shape_b) == 1
    A = P.val(qa).reshape(shape_a)
    X = P.val(r).reshape(shape_x)
    G = P.ybar(r).reshape(shape_x)
    Xm, Gm = (X[..., None], G[..., None]) if vector else (X, G)
    Xdm = Xd.reshape((p,) + tuple(shape_x))
    Xdm = Xdm[..., None] if vector else Xdm
    GB = np.linalg.solve(_T(A), Gm)  # Bbar
    dA = -(GB[None] @ _T(Xdm))
    if Ad is not None:
        dGB = -np.linalg.solve(_T(A)[None], _T(Ad.reshape((p,) + tuple(shape_a))) @ GB[None])
        dA = dA - dGB @ _T(Xm)[None]
        P.add(qb, _sum_rows(dGB[..., 0] if vector else dGB, tuple(shape_b)))
    P.add(qa, _sum_rows(dA, tuple(shape_a)))


class _Probe:
    """A stand-in for the adjoints a host VJP writes: it reads one record's
    value as a given array, the output's adjoint as ``ybar``, and collects
    what the VJP adds to each record."""

    def __init__(self, P, r, swap, with_value):
        self.P, self.r, self.swap, self.with_value = P, r, swap, with_value
        self.got = {}

    def value(self, tape, q, shape):
        if q == self.swap:
            return self.with_value.reshape(shape)
        return self.P.adj.value(tape, q, shape)

    def __getitem__(self, q):
        assert q == self.r
        return self.P.ybar(q)

    def add(self, q, g):
        g = np.asarray(g, np.float64).reshape(-1)
        self.got[q] = self.got.get(q, 0.0) + g


def _einsum2(P, r):
    # multilinear: the term for operand i is its VJP with operand j's value
    # replaced by j's tangent, for every j != i, one direction at a time
    parents = P.parents(r)
    if len(set(parents)) != len(parents):
        raise NotImplementedError(
            "hessian: einsum with one tensor as several operands has no second-order "
            "rule yet")
    vjp = REGISTRY[int(P.tape.op[r])].host_vjp
    for j in parents:
        dj = P.dot(j)
        if dj is None:
            continue
        acc = {}
        for k in range(P.p):
            probe = _Probe(P, r, j, dj[k])
            vjp(P.tape, probe, r)
            for q, t in probe.got.items():
                if q != j:
                    acc.setdefault(q, np.zeros((P.p, t.size)))[k] += t
        for q, t in acc.items():
            P.add(q, t)


#: op code -> second-order rule(pass, r) for host ops
HOST_RULES = {L._MATMUL: _matmul2, L._EINSUM: _einsum2, L._INV: _inv2, L._SOLVE: _solve2,
              L._DET: lambda P, r: _det_like2(P, r, True),
              L._LOGABSDET: lambda P, r: _det_like2(P, r, False)}

_FAMILY = {C.K_UNARY: _unary2, C.K_SCALAR: _scalar2, C.K_NARY: _nary2, C.K_REDUCE: _reduce2,
           C.K_SCAN: _scan2}


def _second_order(P, r):
    code = int(P.tape.op[r])
    kind = code >> C.SHIFT
    if kind == C.K_HOST:
        HOST_RULES[code](P, r)
    else:
        _FAMILY[kind](P, r, code & C.MASK)


_CLASS = np.array([_classify(c) for c in range(16 << C.SHIFT)], np.int8)


# -- first-order VJPs with NumPy over all p + 1 vectors at once ---------------------------
# The vector sweep applies a compiled VJP once per vector; with many
# directions (a Hessian) one NumPy step over the (p + 1, size) block of a
# record is much cheaper for the common ops, so those records run here and
# the rest (and runs of them) in the compiled sweep.  Same numbers: these are
# the kernels' partials (elementwise.py) written over arrays.
_D1_UNARY = {
    C.EXP: lambda x, y: y, C.LOG: lambda x, y: 1.0 / x,
    C.LOG1P: lambda x, y: 1.0 / (1.0 + x), C.EXPM1: lambda x, y: y + 1.0,
    C.SQRT: lambda x, y: 0.5 / y, C.SQUARE: lambda x, y: 2.0 * x,
    C.SIN: lambda x, y: np.cos(x), C.COS: lambda x, y: -np.sin(x),
    C.TAN: lambda x, y: 1.0 + y * y, C.TANH: lambda x, y: 1.0 - y * y,
    C.SINH: lambda x, y: np.cosh(x), C.COSH: lambda x, y: np.sinh(x),
    C.ARCTAN: lambda x, y: 1.0 / (1.0 + x * x), C.RECIPROCAL: lambda x, y: -y * y,
}
_D1_SCALAR = {
    C.RDIVC: lambda x, y, c: -y / x,
    C.POWC: lambda x, y, c: c * x ** (c - 1.0) if c != 0.0 else np.zeros_like(x),
}
_GATHER_BASE = C.code(C.K_GATHER, 0)
_CONST_CODE = C.code(C.K_NONE, C.CONST)


def _fast_kind(code):
    """Whether ``_numpy_vjp`` handles records with this op code (it may still
    decline a record, e.g. a broadcasting one)."""
    kind, sub = code >> C.SHIFT, code & C.MASK
    if kind == C.K_UNARY:
        return sub in (C.IDENT, C.NEG) or sub >= C.VIEW_FIRST or sub in _D1_UNARY
    if kind == C.K_SCALAR:
        return sub in (C.ADDC, C.MULC, C.DIVC, C.RSUBC) or sub in _D1_SCALAR
    if kind == C.K_NARY:
        return sub in (C.ADD, C.SUB, C.MUL, C.DIV)
    if kind == C.K_REDUCE:
        return sub in (C.SUM, C.MEAN)
    return kind == C.K_GATHER


_FAST = np.array([_fast_kind(c) for c in range(16 << C.SHIFT)], np.bool_)


def _numpy_vjp(P, r):
    """Record r's VJP for all p + 1 vectors with NumPy; False to leave it to
    the compiled sweep."""
    tape, adj = P.tape, P.adj
    code = int(tape.op[r])
    kind, sub = code >> C.SHIFT, code & C.MASK
    n = int(tape.size[r])
    if n == 0:
        return False  # a multi-output op: its outputs' adjoints form one span
    G = P.block(r)
    ps = P.parents(r)
    if kind == C.K_UNARY:
        (q,) = ps
        if sub == C.IDENT or sub >= C.VIEW_FIRST:
            return P.put(q, G)
        if sub == C.NEG:
            return P.put(q, -G)
        x, y = P.val(q), P.val(r)
        return P.put(q, G * _D1_UNARY[sub](x, y))
    if kind == C.K_SCALAR:
        (q,) = ps
        c = float(tape.fp[r])
        if sub == C.ADDC:
            return P.put(q, G)
        if sub == C.MULC:
            return P.put(q, G * c)
        if sub == C.DIVC:
            return P.put(q, G / c)
        if sub == C.RSUBC:
            return P.put(q, -G)
        return P.put(q, G * _D1_SCALAR[sub](P.val(q), P.val(r), c))
    if kind == C.K_NARY:
        qa, qb = ps
        ma, mb = int(tape.size[qa]), int(tape.size[qb])
        if ma not in (n, 1) or mb not in (n, 1) or qa == qb:
            return False  # general broadcasting, x op x: the kernel
        if sub == C.ADD:
            da, db = G, G
        elif sub == C.SUB:
            da, db = G, -G
        else:
            a, b = P.val(qa), P.val(qb)
            if sub == C.MUL:
                da, db = G * b, G * a
            else:
                y = P.val(r)
                da, db = G / b, -G * (y / b)
        for q, m, d in ((qa, ma, da), (qb, mb, db)):
            if tape.op[q] != _CONST_CODE:
                P.put(q, d if m == n else d.sum(axis=1, keepdims=True))
        return True
    if kind == C.K_REDUCE:
        (q,) = ps
        m = int(tape.size[q])
        scale = 1.0 if sub == C.SUM else (n / m if m else 0.0)
        if n == 1:
            g = np.broadcast_to(G, (G.shape[0], m))
        else:
            g = G[:, _reduce_map(tape, r, m)]
        return P.put(q, g * scale if scale != 1.0 else g)
    # K_GATHER: output k is input idx_k (-1: a filled-in zero)
    (q,) = ps
    b = int(tape.ip0[r])
    idx = tape.ip[b + 1:b + 1 + int(tape.ip[b])]
    acc = np.zeros((G.shape[0], int(tape.size[q])))
    if idx.size and idx[0] >= 0 and idx[-1] - idx[0] == idx.size - 1 and (
            idx.size == 1 or (np.diff(idx) == 1).all()):  # a slice: x[1:], x[:-1]
        acc[:, idx[0]:idx[-1] + 1] = G
        return P.put(q, acc)
    keep = idx >= 0
    if keep.all() and np.unique(idx).size == idx.size:
        acc[:, idx] = G
    else:
        np.add.at(acc.T, idx[keep], G[:, keep].T)
    return P.put(q, acc)


def _missing_error(code):
    name = REGISTRY[code].name if code in REGISTRY else str(code)
    return NotImplementedError(
        f"hessian/hvp: the op {name} has no second-order (forward-over-reverse) rule; "
        "second derivatives cover elementwise ops, reductions (sum, mean, max, min, prod, "
        "logsumexp, softmax, log_softmax), shape and indexing ops, cumsum, cumprod, matmul, "
        "einsum, linalg.inv, solve, det and slogdet")


def _hvp_pass(tape, out, leaves, recs, seeds, p):
    """Gradient and p Hessian-vector products of scalar ``out``.

    ``seeds(k)``: leaf k's p directions as (p, size).  Returns per leaf
    ``(grad (size,), hv (p, size))`` float64 (zeros where out does not depend
    on the leaf), and what ``tape.after_backward`` needs to free the graph
    (None when the sweep did not run)."""
    upto = _root_span(tape, out._rec)
    live = [r for r in recs if r is not None]
    res = [(np.zeros(x.size), np.zeros((p, x.size))) for x in leaves]
    if not live:
        return res, None
    tan = FW._Tangents(tape, upto, np.array(live, np.int64))
    tan.alloc(p)
    for k, r in enumerate(recs):
        if r is not None:
            tan.block(r)[...] = seeds(k).T
    Tf = tape.arrays(tan) + (tan.reached,)
    FW._sweep(tape, tan, Tf)

    adj = _Slabs(tape, upto, p + 1)
    T = tape.arrays(adj) + (adj.reached,)
    root = out._rec
    blk = adj.block(root)
    blk[...] = 0.0
    blk[0] = 1.0
    adj.reached[root] = True
    P = _Pass(tape, upto, tan, adj)
    # stops: nonlinear records that depend on the inputs (a second-order
    # step), and, with many directions, records whose VJP NumPy applies to
    # all vectors at once; the compiled sweep runs everything in between
    ops = tape.op[:upto]
    cls = _CLASS[ops]
    second = (cls != _LINEAR) & tan.reached[:upto]
    fast = _FAST[ops] if p + 1 >= FAST_VECTORS else np.zeros(upto, np.bool_)
    stops = np.flatnonzero(second | fast)[::-1]
    start = upto - 1
    for s in stops:
        s = int(s)
        _run(tape, adj, T, start, s, p + 1)
        start = s
        if not adj.reached[s]:
            continue
        if tape.freed[s]:
            raise _freed_error()
        if second[s]:
            if cls[s] == _MISSING:
                raise _missing_error(int(tape.op[s]))
            _second_order(P, s)
        if fast[s] and _numpy_vjp(P, s):
            start = s - 1
    _run(tape, adj, T, start, -1, p + 1)
    for k, r in enumerate(recs):
        if r is not None and adj.reached[r]:
            b = adj.block(r)
            res[k] = (b[0].copy(), b[1:].copy())
    return res, (adj.reached, T)


def _scalar_out(f, args, nums, who):
    leaves, out = _call(f, args, nums, who)
    if out.size != 1:
        raise TypeError(f"{who}: the function must return one number (a scalar); this one "
                        f"returned shape {out.shape}. For vector functions take the "
                        "Jacobian (tg.jacobian) of the gradient by hand, or sum first")
    return leaves, out


def _drive(leaves, out, p, seeds):
    """Run the pass (in chunks of directions when large) and free the graph.

    ``seeds(k, lo, hi)``: leaf k's directions lo .. hi-1 as (hi - lo, size)."""
    if not out._requires_grad or out._tok is None:
        # independent of the inputs, or the output is an input itself: f is
        # constant or linear, and its Hessian is zero
        grads = [np.zeros(x.size) for x in leaves]
        if out._tok is None:
            for k, x in enumerate(leaves):
                if x is out:
                    grads[k][:] = 1.0
        return grads, [np.zeros((p, x.size)) for x in leaves]
    tape = current()
    if out._tok is not tape.tok or tape.freed[out._rec]:
        raise _freed_error()
    upto = _root_span(tape, out._rec)
    recs = [x._lrec if x._ltok is tape.lkey and x._lrec < upto else None for x in leaves]
    per_dir = max(int(tape.size[:upto].sum()), 1) * 8 * 2
    chunk = int(max(1, min(p, HESSIAN_BYTES // per_dir))) if p else 1
    grads = [np.zeros(x.size) for x in leaves]
    hvs = [np.zeros((p, x.size)) for x in leaves]
    freeing = None
    for lo in range(0, max(p, 1), chunk):
        hi = min(p, lo + chunk)
        res, used = _hvp_pass(tape, out, leaves, recs, lambda k: seeds(k, lo, hi), hi - lo)
        freeing = used or freeing
        for k, (g, hv) in enumerate(res):
            grads[k] = g
            hvs[k][lo:hi] = hv
    if freeing is not None:
        tape.after_backward(*freeing)
    return grads, hvs


def hvp(f, primals, tangents, batched=None):
    """``(grad, hvp)``: the gradient of scalar ``f`` and its Hessian times
    ``tangents``, exactly, by forward-over-reverse.

    JAX's signature, as ``tg.jvp``: ``primals`` and ``tangents`` are tuples
    with one entry per positional argument of ``f``, each tangent of its
    primal's shape.  ``f`` is differentiated with respect to every primal
    and must return one number.  Both results are tuples with one array per
    primal (the input's shape and dtype): ``grad[i] = df/dx_i`` and
    ``hvp[i] = sum_j d2f/(dx_i dx_j) tangents[j]`` -- what
    ``jax.jvp(jax.grad(f, argnums=all), primals, tangents)`` returns.

    A batch of p directions goes through one pass together: give every
    tangent the shape ``(p,) + primal.shape`` and each ``hvp[i]`` has shape
    ``(p,) + primal.shape`` (``batched`` as in ``tg.jvp``).

    Ops with no second-order rule raise ``NotImplementedError`` naming the
    op (see ``tapegrad.second``).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> f = lambda x: (x ** 3).sum()
    >>> g, hv = tg.hvp(f, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    >>> g[0], hv[0]                          # 3 x^2, and 6 x * v
    (array([ 3., 12.]), array([6., 0.]))
    """
    primals = FW._as_tuple(primals, "primals")
    tangents = FW._as_tuple(tangents, "tangents")
    if len(primals) != len(tangents):
        raise ValueError(f"hvp: {len(primals)} primals but {len(tangents)} tangents; give "
                         "one tangent per primal")
    leaves, out = _scalar_out(f, primals, tuple(range(len(primals))), "hvp")
    ts, p, batch = FW._check_tangents(leaves, tangents, batched)
    flat = [t.reshape(p, -1) for t in ts]
    grads, hvs = _drive(leaves, out, p, lambda k, lo, hi: flat[k][lo:hi])
    gs, hs = [], []
    for x, g, hv in zip(leaves, grads, hvs):
        dt = x.dtype if x.dtype.kind == "f" else np.float64
        gs.append(g.reshape(x.shape).astype(dt, copy=False))
        hv = hv.reshape((p,) + x.shape).astype(dt, copy=False)
        hs.append(hv if batch else hv[0])
    return tuple(gs), tuple(hs)


def hessian(f, argnums=0):
    """The Hessian of scalar ``f``, shape ``in.shape + in.shape``, as a function.

    Exact, by forward-over-reverse on the tape: all n unit directions of the
    inputs at ``argnums`` go through one forward tangent sweep and one
    reverse sweep with n + 1 adjoints per record (in chunks of directions
    when they would take more than ``tapegrad.second.HESSIAN_BYTES``).  With
    a tuple ``argnums`` the result is a tuple of tuples, ``H[i][j]`` of shape
    ``in_i.shape + in_j.shape`` (as ``jax.hessian``).  Results have the
    inputs' dtypes.  ``f`` must return one number.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.hessian(lambda x: (x[0] ** 2) * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    """
    def hessian_f(*args):
        single, nums = _argnums(argnums, len(args), "hessian")
        leaves, out = _scalar_out(f, args, nums, "hessian")
        n, starts, unit = FW.unit_directions(leaves)
        _, hvs = _drive(leaves, out, n, unit)
        # hvs[i][k] = H e_k restricted to input i: column k of H's rows for i
        H = np.concatenate(hvs, axis=1).T if n else np.zeros((0, 0))  # (n, n)
        res = []
        for i, xi in enumerate(leaves):
            row = []
            for j, xj in enumerate(leaves):
                blk = H[starts[i]:starts[i + 1], starts[j]:starts[j + 1]]
                dt = np.result_type(xi.dtype, xj.dtype)
                row.append(blk.reshape(xi.shape + xj.shape).astype(dt, copy=False))
            res.append(tuple(row))
        return res[0][0] if single else tuple(res)
    hessian_f.__name__ = f"hessian({getattr(f, '__name__', 'f')})"
    return hessian_f
