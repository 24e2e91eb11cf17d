"""The second-order rules of ``hvp`` and ``hessian`` (:mod:`tapegrad.transforms.second.passes`).

The compiled block sweep (``kernels/hvp.py: sweep_block``) hands back the
records it has no second-order step for; ``_CLASS`` (from ``_classify``)
says per op code what Python adds there: nothing (``_LINEAR``: the
first-order VJP is the whole rule), a NumPy rule (``_RULE``), or an error
(``_MISSING``, :func:`_missing_error`).  ``_second_order(P, r)`` applies
the rule -- a host op's ``second=`` (its registry row's, beside the op in
``ops/``; ``HOST_RULES`` views them by op code), ``_FAMILY`` by kind for
reductions, scans and ``tg.elementwise`` ops -- adding the term
``(phi''(x)[xdot])^T ybar`` to the parents' tangent adjoints for all p
directions at once, through the pass state :class:`_Pass` (recorded
values, tangents, the p + 1 adjoint blocks).
"""
import numpy as np

from ...ops.function import _FUNCTION, first_order_message
from ...core.index_maps import operand_maps, reduce_map
from ...kernels import codes as C
from ...kernels._views import SMALL
# every host op is registered before ``_CLASS`` below classifies the codes
from ...ops import fft, matrix  # noqa: F401
from ...ops.custom import USER_OPS
from ...core.registry import REGISTRY, rules


# -- which records need a second-order step ----------------------------------------------
_LINEAR, _RULE, _MISSING = 0, 1, 2


def _classify(code):
    """What Python must add at a record ``sweep_block`` hands back: nothing
    (_LINEAR: the compiled first-order VJP is the whole rule; elementwise
    records get here only when empty), a NumPy rule, or an error."""
    kind, sub = code >> C.SHIFT, code & C.MASK
    if kind in (C.K_NONE, C.K_UNARY, C.K_SCALAR, C.K_NARY, C.K_GATHER, C.K_CONCAT):
        return _LINEAR
    if kind == C.K_REDUCE:
        if sub in (C.SUM, C.MEAN, C.MAX, C.MIN):
            return _LINEAR
        return _RULE if sub in (C.PROD, C.LOGSUMEXP, C.SOFTMAX, C.LOG_SOFTMAX) else _MISSING
    if kind == C.K_SCAN:
        if sub == C.CUMSUM:
            return _LINEAR
        return _RULE if sub == C.CUMPROD else _MISSING
    if kind == C.K_HOST:
        return _RULE if code in HOST_RULES else _MISSING
    if kind == C.K_USER:
        # its rule raises when the op was defined without second_derivative=
        return _RULE if sub in (C.USER_UNARY, C.USER_BINARY) else _MISSING
    return _MISSING


# -- the pass's state; reductions and scans ---------------------------------------------
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


def _reduce2(P, r, sub):
    (q,) = P.parents(r)
    xd = P.dot(q)
    if xd is None:
        return
    tape = P.tape
    n, m = int(tape.size[q]), int(tape.size[r])
    om = reduce_map(tape, r, n) if m > 1 or sub in (C.SOFTMAX, C.LOG_SOFTMAX) else \
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
            raise NoSecondOrder(
                "hessian: prod over an array with zero entries has no second-order rule "
                "yet (the first-order one handles zeros)")
        P.add(q, g[om] * (yd[:, om] / x - y[om] * xd / (x * x)))
        return
    raise _missing_error(int(tape.op[r]), tape, r)


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
        raise NoSecondOrder(
            "hessian: cumprod over an array with zero entries has no second-order rule "
            "yet (the first-order one handles zeros)")
    g, y, yd = P.ybar(r), P.val(r), P.dot(r)

    def rcumsum(t):  # sum over j >= k along the scanned axis, p leading
        t = t.reshape((-1,) + shape)
        return np.flip(np.cumsum(np.flip(t, 2), axis=2), 2).reshape(t.shape[0], -1)

    P.add(q, rcumsum(g * yd) / x - rcumsum(g * y) * xd / (x * x))


# -- user elementwise ops (tg.elementwise with second_derivative=) -------------------------
def _user_maps(tape, r, n, ma, mb):
    """The element of each operand that each of the n output elements reads
    (``ip`` as ``kernels/user.py`` documents: ``[id, d0, d1, nd, shape,
    strides of a, strides of b]``)."""
    maps = operand_maps(tape, r, n, (ma, mb), at=3)
    return [np.arange(n) if mp is None else mp for mp in maps]


def _scatter(t, idx, m):
    """Sum the (p, n) ``t`` into (p, m) by the operand index map ``idx``."""
    if idx.size == m and m == t.shape[1]:
        return t
    out = np.zeros((t.shape[0], m))
    np.add.at(out.T, idx, t.T)
    return out


def _user2(P, r, sub):
    # xbar = g f'(x): its tangent with g fixed is g f''(x) xdot; for two
    # operands abar_dot = g (f_aa adot + f_ab bdot), bbar_dot = g (f_ab adot + f_bb bdot)
    tape = P.tape
    op = USER_OPS[int(tape.ip[int(tape.ip0[r])])]
    rules = op.second_rules()
    if rules is None:   # derivative= only: derived from its source where it can be
        from ...ops.derivative_ops import derived_second
        rules = derived_second(op)
    if rules is None:
        raise NotImplementedError(
            f"hessian/hvp: the tg.elementwise op {op.name} ({REGISTRY[int(tape.op[r])].name}) "
            "has no second derivative; define it with tg.elementwise(forward, derivative, "
            "second_derivative=d2) to use it in tg.hessian / tg.hvp")
    g, y = P.ybar(r), P.val(r)
    if sub == C.USER_UNARY:
        (q,) = P.parents(r)
        xd = P.dot(q)
        if xd is not None:
            P.add(q, (g * rules[0](P.val(q), y)) * xd)
        return
    qa, qb = P.parents(r)
    ad, bd = P.dot(qa), P.dot(qb)
    if ad is None and bd is None:
        return
    xa, xb = P.val(qa), P.val(qb)
    ia, ib = _user_maps(tape, r, y.size, xa.size, xb.size)
    a, b = xa[ia], xb[ib]
    haa, hab, hbb = (g * f(a, b, y) for f in rules)
    ta = 0.0 if ad is None else ad[:, ia]
    tb = 0.0 if bd is None else bd[:, ib]
    if ad is not None:
        P.add(qa, _scatter(haa * ta + hab * tb, ia, xa.size))
    if bd is not None:
        P.add(qb, _scatter(hab * ta + hbb * tb, ib, xb.size))


#: op code -> second-order rule(pass, r) for host ops: the ``second`` of their
#: registry rows (a row may give instead why it has none: ``_missing_error``)
HOST_RULES = rules("second")

_FAMILY = {C.K_REDUCE: _reduce2, C.K_SCAN: _scan2, C.K_USER: _user2}


def _second_order(P, r):
    code = int(P.tape.op[r])
    kind = code >> C.SHIFT
    if kind == C.K_HOST:
        REGISTRY[code].second(P, r)
    else:
        _FAMILY[kind](P, r, code & C.MASK)


_CLASS = np.array([_classify(c) for c in range(16 << C.SHIFT)], np.int8)


class NoSecondOrder(NotImplementedError):
    """A record the forward-over-reverse pass has no rule for; tg.hessian
    and tg.hvp then differentiate the gradient recorded with create_graph
    (``passes._drive``), and raise this only where that cannot be done
    either."""


def _missing_error(code, tape=None, r=None):
    """The error for record r (op ``code``) without a second-order rule; a
    tg.Function says why (its ``no_second_order``) or is named by its class."""
    name = REGISTRY[code].name if code in REGISTRY else str(code)
    why = HOST_RULES.missing(code)  # the reason its registry row gives
    if why:
        name = f"{name} ({why})"
    host = tape.host.get(r) if tape is not None else None
    if host is not None and isinstance(host[0], type) and code == _FUNCTION:
        cls = host[0]
        why = getattr(cls, "no_second_order", None)
        if why is not None:
            return NoSecondOrder(f"hessian/hvp: {why}")
        named = first_order_message(cls, "hessian/hvp")
        if named is not None:
            return NoSecondOrder(named)
        name = f"{cls.__name__} (a tg.Function, whose backward works on arrays)"
    # the host ops that have one, as their registry rows say
    hosts = ", ".join(sorted(REGISTRY[c].name for c in HOST_RULES))
    return NoSecondOrder(
        f"hessian/hvp: the op {name} has no second-order (forward-over-reverse) rule; "
        "second derivatives cover elementwise ops, reductions (sum, mean, max, min, prod, "
        "logsumexp, softmax, log_softmax), shape and indexing ops, cumsum, cumprod, the "
        f"host ops {hosts}, and tg.elementwise ops defined with second_derivative=")

