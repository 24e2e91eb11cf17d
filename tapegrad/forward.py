"""Forward mode: ``jvp`` and ``jacfwd`` by a compiled tangent sweep over the tape.

The function is recorded on the tape as for reverse mode; then one compiled
sweep walks the records upwards from the inputs' leaves and applies each
op's tangent rule (``kernels/tangents.py``), carrying p tangent directions
per element at once.  Host records (matmul, LAPACK ops) stop the sweep and
their rules below run with NumPy on ``(p,) + shape`` tangent arrays, then the
sweep resumes.  Nothing extra is recorded: each tangent rule uses the same
local partial derivatives as the op's VJP, so it reads exactly the values
the tape already keeps for the VJP (``kernels/optable.py: READS_*``).  A
forward sweep frees nothing, so several sweeps (chunks of a Jacobian) may
run over one recording.
"""
import numpy as np

from .autograd import Adjoints
from .function import _FUNCTION, first_order_message
from .transform_base import _argnums, _call, _root_span, _scratch, _value
from .kernels import codes as C
from .kernels._views import SMALL
from .kernels.tangents import fwd_layout, sweep_fwd
from .kernels.sweep import layout
from .ops import matrix as L
from .ops import fft as FF
from .ops.registry import REGISTRY
from .second_decompositions import _pinv_tangent
from .tape import current
from .tensor import Tensor

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

    def __init__(self, tape, upto, seed_recs):
        self.size = tape.size
        self.voff = layout(tape.op, tape.size, upto, SMALL)[0]
        tape.arg0[tape.n] = tape.na  # closes the last record's parents
        self.reached = np.zeros(upto, np.bool_)
        self.reached[seed_recs] = True
        start = int(min(seed_recs))
        self.toff, self.total = fwd_layout(tape.op, tape.arg0, tape.args, tape.size,
                                           start, upto, self.reached)
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
        rule = HOST_JVP.get(code)
        if rule is None:
            name = REGISTRY[code].name if code in REGISTRY else f"with code {code}"
            raise NotImplementedError(
                f"jvp: the op {name} has no forward-mode rule; use "
                "reverse mode (tg.vjp, tg.jacobian) for functions that use it")
        rule(tape, tan, s)
        start = s + 1


def push(leaves, seeds, out, p):
    """The tangents of ``out`` for the leaves' tangent directions.

    ``leaves`` are the leaf tensors the function was called with, ``seeds``
    their tangents as ``(p, size)`` float64 arrays (or a callable ``(k, lo,
    hi)`` giving leaf k's directions ``lo .. hi-1``, for chunked Jacobians).
    Returns ``(p, out.size)`` float64.
    """
    m = int(out.size)
    res = np.zeros((p, m))
    if out._tok is None:  # the output is itself a leaf
        for k, x in enumerate(leaves):
            if x is out:
                res += _seed_rows(seeds, k, 0, p)
        return res
    tape = current()
    if not out._requires_grad or out._tok is not tape.tok:
        return res  # recorded before the inputs existed: independent of them
    upto = _root_span(tape, out._rec)
    recs = [x._lrec if x._ltok is tape.lkey and x._lrec < upto else None for x in leaves]
    live = [r for r in recs if r is not None]
    if not live:
        return res
    tan = _Tangents(tape, upto, np.array(live, np.int64))
    if not tan.reached[out._rec]:
        return res
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
        res[lo:hi] = tan.block(out._rec).T
    return res


def _seed_rows(seeds, k, lo, hi):
    return seeds(k, lo, hi) if callable(seeds) else seeds[k][lo:hi]


# -- jvp, jacfwd -------------------------------------------------------------------------
def _as_tuple(x, what):
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"jvp: {what} must be a tuple (or list) with one entry per positional "
                        f"argument of the function, got {type(x).__name__}")
    return tuple(x)


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

    Tangents must be real numbers; they are taken in float64, and
    ``tangent_out`` has the output's dtype.  A ``tg.Function`` has no forward
    rule (it only defines ``backward``): a function that calls one raises
    ``NotImplementedError``.

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
    """
    primals = _as_tuple(primals, "primals")
    tangents = _as_tuple(tangents, "tangents")
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents; give "
                         "one tangent per primal")
    leaves, out = _call(f, primals, tuple(range(len(primals))), "jvp")
    ts, p, batch = _check_tangents(leaves, tangents, batched)
    value = _value(out)
    t = push(leaves, [t.reshape(p, -1) for t in ts], out, p).reshape((p,) + out.shape)
    dtype = out.dtype if out.dtype.kind == "f" else np.float64
    t = t.astype(dtype, copy=False)
    return value, (t if batch else t[0])


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


def forward_jacobian(leaves, out):
    """Per leaf, ``(m,) + leaf.shape`` float64: out's Jacobian by one batched
    tangent sweep with the n unit directions (in chunks when large)."""
    n, starts, unit = unit_directions(leaves)
    J = push(leaves, unit, out, n).T  # (m, n)
    return [J[:, starts[k]:starts[k + 1]].reshape((J.shape[0],) + x.shape)
            for k, x in enumerate(leaves)]


def jacfwd(f, argnums=0):
    """The Jacobian of ``f`` by forward mode, shape ``out.shape + in.shape``.

    All n unit tangents of the inputs at ``argnums`` go through one compiled
    tangent sweep (in chunks when their tangents would take more than
    ``tapegrad.forward.JACFWD_BYTES``): the cheap direction when f has far
    fewer inputs than outputs.  ``tg.jacobian`` picks this mode by itself
    then.  Results have the inputs' dtypes, as ``tg.jacobian``'s.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.jacfwd(lambda x: np.outer(x, [1.0, 2.0, 3.0]).ravel())(np.array([1.0, 2.0])).shape
    (6, 2)
    """
    def jacfwd_f(*args):
        single, nums = _argnums(argnums, len(args), "jacfwd")
        leaves, out = _call(f, args, nums, "jacfwd")
        gs = forward_jacobian(leaves, out)
        res = [g.reshape(out.shape + x.shape).astype(x.dtype, copy=False)
               for g, x in zip(gs, leaves)]
        return res[0] if single else tuple(res)
    jacfwd_f.__name__ = f"jacfwd({getattr(f, '__name__', 'f')})"
    return jacfwd_f


# -- host rules: the tangents of host records, with NumPy ------------------------------------
# Each rule reads its parents' tangents as (p,) + shape arrays (None: the
# parent does not depend on the inputs) and writes its output's.  Ops whose
# reverse rule is the "symmetric gradient" (cholesky, eigh, hermitian svd and
# pinv) take the symmetric part of the input tangent, so J t agrees with the
# reverse-mode Jacobian.
def _T(m):
    return np.swapaxes(m, -1, -2)


def _sym(m):
    return 0.5 * (m + _T(m))


def _parents(tape, r):
    a0 = tape.arg0[r]
    return [int(q) for q in tape.args[a0:tape.arg0[r + 1]]]


def _pad(t, nd):
    """``(p,) + shape`` tangents with unit axes after p up to ``nd`` axes of
    shape, so that batch axes line up when they broadcast."""
    return t.reshape(t.shape[:1] + (1,) * (nd + 1 - t.ndim) + t.shape[1:])


def _sum_terms(*terms):
    got = [t for t in terms if t is not None]
    return got[0] if len(got) == 1 else sum(got[1:], got[0])


def _matmul_jvp(tape, tan, r):
    ra, rb = _parents(tape, r)
    shape_a, shape_b = tape.host[r]
    a, b = tan.value(tape, ra, shape_a), tan.value(tape, rb, shape_b)
    da, db = tan.trail(ra, shape_a), tan.trail(rb, shape_b)  # shape + (p,)
    p = tan.p
    if a.ndim <= 2 and b.ndim <= 2:
        # the p directions trail: a @ db is one GEMM over all of them
        terms = []
        if db is not None:
            flat = db.reshape(b.shape[0], -1)
            # unit tangents (a Jacobian) stay sparse through elementwise ops:
            # then a @ db sums scaled columns of a instead of a dense GEMM
            sparse = (L._sparse_block_products(flat[None], a.T, None, False, True)
                      if a.ndim == 2 else None)
            t = sparse[1][0] if sparse is not None else a @ flat
            terms.append(t.reshape(a.shape[:-1] + b.shape[1:] + (p,)))
        if da is not None:
            t = np.tensordot(da, b, axes=([a.ndim - 1], [0]))  # a[:-1] + (p,) + b[1:]
            terms.append(np.moveaxis(t, a.ndim - 1, -1))
        blk = tan.block(r)
        blk[...] = _sum_terms(*terms).reshape(blk.shape)  # (-1, p) is ambiguous for p = 0
        return
    # batched operands: promote vectors, align batch axes, p leading
    nb = max(a.ndim, b.ndim, 2) - 2
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    a2 = a2.reshape((1,) * (nb + 2 - a2.ndim) + a2.shape)
    b2 = b2.reshape((1,) * (nb + 2 - b2.ndim) + b2.shape)
    terms = []
    if da is not None:
        terms.append(np.moveaxis(da, -1, 0).reshape((p,) + a2.shape) @ b2)
    if db is not None:
        terms.append(a2 @ np.moveaxis(db, -1, 0).reshape((p,) + b2.shape))
    t = _sum_terms(*terms)
    if a.ndim == 1:
        t = t[..., 0, :]
    if b.ndim == 1:
        t = t[..., 0]
    tan.put(r, t)


def _inv_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_y = tape.host[r]
    Y = tan.value(tape, r, shape_y)
    tan.put(r, -(Y @ tan.lead(ra, shape_a) @ Y))


def _solve_jvp(tape, tan, r):
    # A X = B:  A dX = dB - dA X
    ra, rb = _parents(tape, r)
    shape_a, shape_b, shape_x = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    X = tan.value(tape, r, shape_x)
    vector = len(shape_b) == 1
    Xm = X[..., None] if vector else X
    dA, dB = tan.lead(ra, shape_a), tan.lead(rb, shape_b)
    # batch axes broadcast against X's: align them behind the leading p
    rhs = _sum_terms(None if dB is None else _pad(dB[..., None] if vector else dB, Xm.ndim),
                     None if dA is None else -(_pad(dA, Xm.ndim) @ Xm))
    dX = np.linalg.solve(A, rhs)
    tan.put(r, dX[..., 0] if vector else dX)


def _trace_inv(A, dA):
    """tr(A^-1 dA) over the last two axes."""
    return np.einsum("...ij,...ji->...", np.linalg.inv(A), dA)


def _det_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_d = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    tan.put(r, tan.value(tape, r, shape_d) * _trace_inv(A, tan.lead(ra, shape_a)))


def _logabsdet_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    shape_a, shape_d = tape.host[r]
    tan.put(r, _trace_inv(tan.value(tape, ra, shape_a), tan.lead(ra, shape_a)))


def _cholesky_jvp(tape, tan, r):
    # A = L L^T:  L^-1 dA L^-T = X + X^T with X = L^-1 dL lower triangular, so
    # dL = L Phi(L^-1 dA L^-T), Phi: the lower triangle with half its diagonal
    (ra,) = _parents(tape, r)
    shape_a, shape_l = tape.host[r]
    L = tan.value(tape, r, shape_l)
    Linv = np.linalg.inv(L)
    S = Linv @ _sym(tan.lead(ra, shape_a)) @ _T(Linv)
    n = L.shape[-1]
    Phi = np.tril(S) - 0.5 * np.eye(n) * S
    tan.put(r, L @ Phi)


def _eigh_jvp(tape, tan, r):
    # A V = V W:  with P = V^T dA V, dw = diag(P), V^T dV = F o P,
    # F_ij = 1 / (w_j - w_i) off the diagonal (as in the reverse rule)
    (ra,) = _parents(tape, r)
    shape_a, (w, V) = tape.host[r]
    w, V = np.asarray(w, np.float64), np.asarray(V, np.float64)
    P = _T(V) @ _sym(tan.lead(ra, shape_a)) @ V
    n = w.shape[-1]
    off = ~np.eye(n, dtype=bool)
    diff = w[..., None, :] - w[..., :, None]
    F = np.where(off, 1.0 / np.where(off, diff, 1.0), 0.0)
    tan.put(r + 1, np.einsum("...ii->...i", P))
    tan.put(r + 2, V @ (F * P))


def _einsum_jvp(tape, tan, r):
    # linear in each operand: the sum over operands of the einsum with that
    # operand replaced by its tangents, which carry one more index for p
    ins, out, *shapes, out_shape = tape.host[r]
    parents = _parents(tape, r)
    values = [tan.value(tape, q, s) for q, s in zip(parents, shapes)]
    extra = next(c for c in L._LETTERS if c not in "".join(ins) + out)
    terms = []
    for k, (q, s) in enumerate(zip(parents, shapes)):
        t = tan.lead(q, s)
        if t is None:
            continue
        spec = ",".join(extra + ins[j] if j == k else ins[j] for j in range(len(ins)))
        ops = [t if j == k else values[j] for j in range(len(ins))]
        terms.append(np.einsum(spec + "->" + extra + out, *ops, optimize=True))
    tan.put(r, np.broadcast_to(_sum_terms(*terms), (tan.p,) + tuple(out_shape)))


def _qr_tall(Q, R, dA):
    """(dQ, dR) for A = QR, Q with orthonormal columns, R square invertible.

    With C = Q^T dA R^-1 = Q^T dQ + dR R^-1 (skew plus upper triangular), the
    skew part is fixed by C's strictly lower triangle."""
    dAR = _T(np.linalg.solve(_T(R), _T(dA)))  # dA R^-1
    Cm = _T(Q) @ dAR
    low = np.tril(Cm, -1)
    Om = low - _T(low)
    return dAR - Q @ (Cm - Om), (Cm - Om) @ R


def _qr_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    mode, Q, R, Y = tape.host[r]
    Q, R = np.asarray(Q, np.float64), np.asarray(R, np.float64)
    m, n = Q.shape[-2], R.shape[-1]
    dA = tan.lead(ra, Q.shape[:-2] + (m, n))
    if mode == "complete" and m > n:
        raise NotImplementedError(
            "jvp: linalg.qr with mode='complete' and more rows than columns has no forward "
            "rule (the last columns of Q are any basis of the complement); use "
            "mode='reduced', or reverse mode")
    if m >= n:
        dQ, dR = _qr_tall(Q, R, dA)
    else:  # wide: A = [X | Y], X = Q U square, Y = Q V
        dQ, dU = _qr_tall(Q, R[..., :m], dA[..., :m])
        Yv = np.asarray(Y, np.float64)
        dV = _T(dQ) @ Yv + _T(Q) @ dA[..., m:]
        dR = np.concatenate([dU, dV], axis=-1)
    tan.put(r + 1, dQ)
    tan.put(r + 2, dR)


def _svd_jvp(tape, tan, r):
    # dP = U^T dA V: dS = diag(dP); U^T dU = F o (dP S + S dP^T) and
    # V^T dV = F o (S dP + dP^T S), F_ij = 1 / (s_j^2 - s_i^2); plus the parts
    # outside the spans of U and V for non-square A
    (ra,) = _parents(tape, r)
    hermitian, shapes, U, s, Vh = tape.host[r]
    U, s, Vh = (np.asarray(v, np.float64) for v in (U, s, Vh))
    V = _T(Vh)
    m, k, n = U.shape[-2], s.shape[-1], V.shape[-2]
    dA = tan.lead(ra, U.shape[:-2] + (m, n))
    if hermitian:
        dA = _sym(dA)
    dP = _T(U) @ dA @ V
    off = ~np.eye(k, dtype=bool)
    s2 = s * s
    with np.errstate(divide="ignore"):
        F = np.where(off, 1.0 / np.where(off, s2[..., None, :] - s2[..., :, None], 1.0), 0.0)
    dU = U @ (F * (dP * s[..., None, :] + s[..., :, None] * _T(dP)))
    dV = V @ (F * (s[..., :, None] * dP + _T(dP) * s[..., None, :]))
    if m > k:
        dAV = dA @ V
        dU = dU + (dAV - U @ (_T(U) @ dAV)) / s[..., None, :]
    if n > k:
        dAU = _T(dA) @ U
        dV = dV + (dAU - V @ (Vh @ dAU)) / s[..., None, :]
    p = tan.p
    # full_matrices: the extra columns of U / rows of Vh are any basis of the
    # complement; as in the reverse rule they are held fixed (tangent zero)
    sU, sS, sVh = shapes
    full_U = np.zeros((p,) + tuple(sU))
    full_U[..., :k] = dU
    full_Vh = np.zeros((p,) + tuple(sVh))
    full_Vh[..., :k, :] = _T(dV)
    tan.put(r + 1, full_U)
    tan.put(r + 2, np.einsum("...ii->...i", dP))
    tan.put(r + 3, full_Vh)


def _pinv_jvp(tape, tan, r):
    (ra,) = _parents(tape, r)
    hermitian, shape_a, shape_x = tape.host[r]
    A = tan.value(tape, ra, shape_a)
    X = tan.value(tape, r, shape_x)
    dA = tan.lead(ra, shape_a)
    tan.put(r, _pinv_tangent(A, X, _sym(dA) if hermitian else dA))


def _lstsq_jvp(tape, tan, r):
    # x = pinv(A) b; residuals |b - A x|^2, whose derivative through x
    # vanishes at the minimiser (A^T (b - A x) = 0)
    ra, rb = _parents(tape, r)
    cutoff, shapes, A, b, x = tape.host[r]
    A, b, x = (np.asarray(v, np.float64) for v in (A, b, x))
    vector = b.ndim == 1
    b2, x2 = (b[:, None], x[:, None]) if vector else (b, x)
    dA, db = tan.lead(ra, A.shape), tan.lead(rb, b.shape)
    if db is not None and vector:
        db = db[..., None]
    X = np.linalg.pinv(A, rcond=cutoff)
    dx = _sum_terms(None if dA is None else _pinv_tangent(A, X, dA) @ b2,
                    None if db is None else X @ db)
    tan.put(r + 1, dx[..., 0] if vector else dx)
    if len(shapes) > 1:
        res = b2 - A @ x2
        dres = _sum_terms(None if db is None else db, None if dA is None else -(dA @ x2))
        tan.put(r + 2, 2.0 * (res * dres).sum(axis=-2))


def _function_jvp(tape, tan, r):
    cls, ctx = tape.host[r][:2]
    why = getattr(cls, "no_jvp", None)
    if why is not None:
        raise NotImplementedError(why(ctx))
    named = first_order_message(cls, "jvp")
    if named is not None:
        raise NotImplementedError(named)
    raise NotImplementedError(
        f"jvp: {cls.__name__} is a tg.Function, which defines backward() but no forward-mode "
        "(jvp) rule; use reverse mode (tg.vjp, tg.jacobian, tg.grad) for functions that "
        "call it")


#: op code -> rule(tape, tangents, r) for every host op; a host op registered
#: without an entry here makes forward mode raise NotImplementedError
HOST_JVP = {
    L._MATMUL: _matmul_jvp,
    L._INV: _inv_jvp,
    L._SOLVE: _solve_jvp,
    L._DET: _det_jvp,
    L._LOGABSDET: _logabsdet_jvp,
    L._CHOLESKY: _cholesky_jvp,
    L._EIGH: _eigh_jvp,
    L._EINSUM: _einsum_jvp,
    L._QR: _qr_jvp,
    L._SVD: _svd_jvp,
    L._PINV: _pinv_jvp,
    L._LSTSQ: _lstsq_jvp,
    FF._FFT: FF._fft_jvp,
    _FUNCTION: _function_jvp,
}
assert all(c >> C.SHIFT == C.K_HOST for c in HOST_JVP)
