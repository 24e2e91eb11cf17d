"""Hessian sparsity: which second derivatives can be nonzero, and the Hessian
from a few coloured directions.

**The pattern.**  One pass over the recorded graph carries, for every element
of every record, the set of input elements it depends on (the sparsity of its
Jacobian row), as the rows of a boolean CSR matrix.  An op that is nonlinear
in what it reads adds, for each output element, the pairs of input elements
its second derivative couples -- the nonlinear interaction domains of
Walther's Hessian-pattern algorithm (ADOL-C's ``hess_pat``):

* ``y = f(u)`` couples ``S(u) x S(u)``;
* ``y = a * b`` couples ``S(a) x S(b)`` only (it is linear in each operand);
* ``y = a / b`` couples ``S(a) x S(b)`` and ``S(b) x S(b)``;
* other nonlinear ops of several operands (``power``, ``hypot``, ...), the
  nonlinear reductions (``prod``, ``logsumexp``, ``softmax``) and everything
  without a rule here (host and user ops) couple every input element they
  read with every other -- coarse, but never wrong;
* matmul couples the elements of its two operands when both depend on the
  inputs, and nothing when one is constant;
* linear and piecewise-linear ops (sums, views, indexing, concatenation,
  ``where``, ``maximum``, ``abs``) couple nothing.

The pattern is *structural*: a superset of the Hessian's nonzeros at every
point, not only at the recorded one (a branch of ``where`` or ``maximum`` not
taken here still counts), so it can be reused wherever the function records
the same graph.

**The colouring.**  Columns j and k of H may share a direction when no row has
a nonzero in both (a distance-2 colouring of the column intersection graph,
greedy in column order -- ``kernels/coloring.py``).  With ``s_c`` the sum of
the unit vectors of colour c, row i of ``H s_c`` is ``H[i, j]`` for the one
column j of colour c that row i can have, so the whole Hessian comes from as
many Hessian-vector products as there are colours -- 3 for a tridiagonal
Hessian of any size, instead of n (the "direct" recovery of Curtis, Powell
and Reid).  Symmetry allows fewer: a star colouring (no path on four
columns in two colours) lets every entry be read either at row i of column
j's colour or at row j of column i's, so an arrowhead -- one input, a
shared parameter, coupled with all the others -- takes 2 colours where a
distance-2 colouring needs n (Gebremedhin, Manne and Pothen; ADOL-C's
``sparse_hess`` with ColPack recovers the same way).  ``colors`` takes the
fewer of the two.
"""
import numpy as np

from .base import _root_span
from ..core.index_maps import gather_map, operand_maps, reduce_map
from ..kernels import codes as C
from ..kernels import optable
from ..kernels.coloring import color_columns, star_color
from ..core.registry import OUTPUT

_I64 = np.int64

#: what the elementwise ops' second derivatives couple: kernels/optable.py's
#: curves (CROSS: S(a) x S(b); QUOTIENT: that and S(b) x S(b); ALL: every pair)
_LINEAR_REDUCE = {C.SUM, C.MEAN, C.MAX, C.MIN}
_ROWWISE = {C.SOFTMAX, C.LOG_SOFTMAX}         # output shaped as the input


class TooDense(Exception):
    """The pattern would hold more pairs than the caller allows."""


# -- boolean CSR rows ---------------------------------------------------------------------
# A record's rows are ``(ptr, idx, w)``: row e's columns are
# ``idx[ptr[e]:ptr[e + 1]]``, sorted and unique; ``w >= 0`` says every row
# holds exactly w of them (then ``idx.reshape(-1, w)`` is the rows), the
# common case -- elementwise chains, slices and their sums -- which takes no
# index arithmetic per entry; -1 otherwise.
def _identity(start, m):
    return np.arange(m + 1, dtype=_I64), np.arange(start, start + m, dtype=_I64), 1


def _csr(cnt, cols):
    ptr = np.zeros(cnt.size + 1, _I64)
    np.cumsum(cnt, out=ptr[1:])
    w = int(cnt[0]) if cnt.size else 0
    return ptr, cols, w if (cnt == w).all() else -1


def _uniform(w, rows):
    """(ptr, idx, w) of an (m, w) array of sorted rows."""
    m = rows.shape[0]
    return np.arange(m + 1, dtype=_I64) * w, rows.reshape(-1), w


def _unique(a):
    """Sorted distinct values of an int array (a sort and a mask: NumPy's
    ``unique`` hashes first and took 20 times as long here)."""
    a = np.sort(a)
    if a.size > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a


def _from_pairs(rows, cols, m, n):
    """m rows from (row, column) pairs, duplicates dropped."""
    key = _unique(rows * n + cols)
    r = key // n
    return _csr(np.bincount(r, minlength=m), key - r * n)


def _spread(S, pick):
    """Rows ``pick`` of S as (row of each entry, column, count per row), -1
    picking an empty row."""
    ptr, idx, _ = S
    ok = pick >= 0
    safe = np.where(ok, pick, 0)
    lo = ptr[safe]
    cnt = np.where(ok, ptr[safe + 1] - lo, 0)
    total = int(cnt.sum())
    rows = np.repeat(np.arange(pick.size, dtype=_I64), cnt)
    first = np.cumsum(cnt) - cnt
    pos = np.arange(total, dtype=_I64) + np.repeat(lo - first, cnt)
    return rows, idx[pos], cnt


def _matrix(S, pick):
    """S's rows ``pick`` (None: all) as an (m, w) array when S's rows are
    uniform and ``pick`` has no -1, else None."""
    w = S[2]
    if w < 0 or (pick is not None and pick.size and pick.min() < 0):
        return None
    M = S[1].reshape(-1, w) if w else np.zeros((S[0].size - 1, 0), _I64)
    return M if pick is None else M[pick]


def _pick(S, pick):
    """The rows ``pick`` of S."""
    M = _matrix(S, pick)
    if M is not None:
        return _uniform(S[2], M)
    _, cols, cnt = _spread(S, pick)
    return _csr(cnt, cols)


def _union(parts, m, n):
    """Per output element e, the union over parts ``(S, pick)`` of row
    ``pick[e]`` of S (``pick`` None: row e)."""
    live = [(S, pick) for S, pick in parts if S is not None]
    if not live:
        return None
    if len(live) == 1:
        S, pick = live[0]
        return S if pick is None else _pick(S, pick)
    mats = [_matrix(S, pick) for S, pick in live]
    if all(M is not None for M in mats):
        # a few columns per row: sort each row's, drop repeats
        s = np.sort(np.concatenate(mats, axis=1), axis=1)
        keep = np.ones(s.shape, np.bool_)
        keep[:, 1:] = s[:, 1:] != s[:, :-1]
        if keep.all():
            return _uniform(s.shape[1], s)
        return _csr(keep.sum(axis=1), s[keep])
    rows, cols = [], []
    for S, pick in live:
        r, c, _ = _spread(S, np.arange(m, dtype=_I64) if pick is None else pick)
        rows.append(r)
        cols.append(c)
    return _from_pairs(np.concatenate(rows), np.concatenate(cols), m, n)


def _group(S, owner, m, n):
    """Row j: the union of the rows i of S with ``owner[i] == j``."""
    if m == 1:
        u = _unique(S[1])
        return np.array([0, u.size], _I64), u, u.size
    rows, cols, _ = _spread(S, np.arange(owner.size, dtype=_I64))
    return _from_pairs(owner[rows], cols, m, n)


def _broadcast(S, m):
    """Every one of m rows equal to S's single row."""
    k = S[1].size
    return np.arange(m + 1, dtype=_I64) * k, np.tile(S[1], m), k


_TRIU = {}


def _triu(w):
    if w not in _TRIU:
        _TRIU[w] = np.triu_indices(w)
    return _TRIU[w]


class _Pattern:
    """The pairs found so far, as keys ``i * n + j``, deduplicated in batches."""

    def __init__(self, n, limit):
        self.n, self.limit = n, limit
        self.keys, self.count = [], 0

    def couple(self, A, B):
        """Per row e, every pair of ``A[e] x B[e]`` (A, B: rows alike)."""
        if A is None or B is None:
            return
        wa, wb = A[2], B[2]
        if wa == 0 or wb == 0:
            return
        if wa > 0 and wb > 0:  # rows of equal lengths: one outer product per row
            a = A[1].reshape(-1, wa, 1)
            b = B[1].reshape(-1, 1, wb)
            if A is B and wa > 1:  # each unordered pair once
                iu = _triu(wa)
                keys = (a[:, iu[0], 0] * self.n + b[:, 0, iu[1]]).ravel()
            else:
                keys = (np.minimum(a, b) * self.n + np.maximum(a, b)).ravel()
            return self._add(keys)
        ca, cb = np.diff(A[0]), np.diff(B[0])
        per = ca * cb
        total = int(per.sum())
        if total == 0:
            return
        row = np.repeat(np.arange(per.size, dtype=_I64), per)
        k = np.arange(total, dtype=_I64) - np.repeat(np.cumsum(per) - per, per)
        cbr = cb[row]
        i = A[1][A[0][row] + k // cbr]
        j = B[1][B[0][row] + k % cbr]
        self._add(np.minimum(i, j) * self.n + np.maximum(i, j))

    def _add(self, keys):
        if self.count + keys.size > 4 * self.limit + 2**22:
            self._squash()
            if self.count + keys.size > 4 * self.limit + 2**22:
                raise TooDense
        if keys.size:
            self.keys.append(keys)
            self.count += keys.size

    def _squash(self):
        if len(self.keys) > 1 or self.count:
            u = _unique(np.concatenate(self.keys)) if self.keys else np.zeros(0, _I64)
            if u.size > self.limit:
                raise TooDense
            self.keys, self.count = [u], u.size

    def pairs(self):
        """The symmetric pattern: (rows, cols) in row-major order, both triangles."""
        self._squash()
        u = self.keys[0] if self.keys else np.zeros(0, _I64)
        i, j = u // self.n, u % self.n
        off = i != j
        key = np.sort(np.concatenate([u, j[off] * self.n + i[off]]))
        return key // self.n, key % self.n


# -- which records matter ---------------------------------------------------------------
def _needed(tape, root, upto, first):
    """The records from ``first`` on that ``root`` depends on."""
    need = np.zeros(upto, np.bool_)
    need[root] = True
    if tape.op[root] == OUTPUT:  # the op's other outputs are read by its VJP
        need[root:upto] = True
    arg0, args = tape.arg0, tape.args
    for r in range(upto - 1, first - 1, -1):
        if need[r]:
            need[args[arg0[r]:arg0[r + 1]]] = True
    return need


# -- the graph's structure ---------------------------------------------------------------
_MATMUL_CODE = C.code(C.K_HOST, C.MATMUL)


def signature(tape, root, recs, starts):
    """What the pattern of ``pattern(tape, root, recs, starts)`` depends on,
    as a hashable value: the records' op codes, sizes, parents, float and
    integer parameters and matmul shapes, relative to the first leaf.  Two
    recordings with equal signatures have the same pattern, so an eager
    ``tg.hessian`` can keep its colouring from one call to the next; None
    when no leaf is reached."""
    live = [r for r in recs if r is not None]
    if not live:
        return None
    first, upto = min(live), _root_span(tape, root)
    tape.arg0[tape.n] = tape.na
    a0 = int(tape.arg0[first])
    ip0 = tape.ip0[first:upto]
    used = ip0[ip0 > 0]
    lo = int(used.min()) if used.size else 0
    mm = np.flatnonzero(tape.op[first:upto] == _MATMUL_CODE) + first
    return (upto - first, root - first, tuple(-1 if r is None else r - first for r in recs),
            tuple(int(v) for v in starts),
            tape.op[first:upto].tobytes(), tape.size[first:upto].tobytes(),
            (tape.arg0[first:upto + 1] - a0).tobytes(),
            (tape.args[a0:int(tape.arg0[upto])] - first).tobytes(),
            tape.fp[first:upto].tobytes(), np.where(ip0 > 0, ip0 - lo, -1).tobytes(),
            tape.ip[lo:tape.ni].tobytes() if used.size else b"",
            tuple(tuple(tuple(int(d) for d in sh) for sh in tape.host[int(r)]) for r in mm))


# -- the pass -----------------------------------------------------------------------------
def pattern(tape, root, recs, starts, limit=None):
    """The structural Hessian pattern of record ``root`` (one element) with
    respect to the leaf records ``recs`` (None: a leaf root does not depend
    on), whose elements are numbered from ``starts[k]`` on.

    Returns sorted ``(rows, cols)`` of both triangles.  Raises ``TooDense``
    when more than ``limit`` pairs (i <= j) can be nonzero.
    """
    n = int(starts[-1])
    limit = n * (n + 1) // 2 if limit is None else limit
    P = _Pattern(n, limit)
    upto = _root_span(tape, root)
    tape.arg0[tape.n] = tape.na  # closes the last record's parents
    S = {}
    for k, r in enumerate(recs):
        if r is not None and r < upto:
            S[r] = _identity(int(starts[k]), int(starts[k + 1] - starts[k]))
    first = min(S) if S else upto
    need = _needed(tape, root, upto, first)
    # multi-output op -> (its outputs' rows, where the next output starts, or
    # -1 when every output element reads all of one row)
    multi = {}
    arg0, args = tape.arg0, tape.args
    for r in range(first, upto):
        if not need[r] or r in S:
            continue
        ps = [int(q) for q in args[arg0[r]:arg0[r + 1]]]
        ins = [S.get(q) for q in ps]
        code = int(tape.op[r])
        m = int(tape.size[r])
        if code == OUTPUT:
            u = ps[0]
            if u in multi:
                rows, at = multi[u]
                if at < 0:
                    S[r] = _broadcast(rows, m)
                else:
                    multi[u] = (rows, at + m)
                    S[r] = _pick(rows, np.arange(at, at + m, dtype=_I64))
            continue
        if all(s is None for s in ins):
            continue
        kind, sub = code >> C.SHIFT, code & C.MASK
        out = _record(tape, r, kind, sub, m, ps, ins, n, P)
        if m == 0 and out is not None:  # a multi-output op: its outputs follow
            multi[r] = (out, 0 if kind == C.K_GATHER else -1)
        elif out is not None:
            S[r] = out
    return P.pairs()


def _record(tape, r, kind, sub, m, ps, ins, n, P):
    """Record r's rows, coupling what its second derivative couples."""
    sizes = [int(tape.size[q]) for q in ps]
    if kind in optable.TABLE:
        curve = optable.row(kind, sub)[1]
        if curve == optable.CONSTANT:
            return None  # piecewise constant: no derivatives at all
    if kind == C.K_UNARY:
        if curve == optable.SELF:
            P.couple(ins[0], ins[0])
        return ins[0]
    if kind == C.K_SCALAR:
        if curve == optable.SELF and not (sub == C.POWC and float(tape.fp[r]) in (0.0, 1.0)):
            P.couple(ins[0], ins[0])
        return ins[0]
    if kind == C.K_NARY:
        picks = operand_maps(tape, r, m, sizes)
        rows = [None if s is None else (s if k is None else _pick(s, k))
                for s, k in zip(ins, picks)]
        if curve == optable.CROSS or curve == optable.QUOTIENT:
            P.couple(rows[0], rows[1])
            if curve == optable.QUOTIENT:
                P.couple(rows[1], rows[1])
        out = _union([(s, None) for s in rows], m, n)
        if curve == optable.ALL:
            P.couple(out, out)
        return out
    if kind == C.K_GATHER:
        return _pick(ins[0], np.asarray(gather_map(tape, r), _I64))
    if kind == C.K_CONCAT:
        b = int(tape.ip0[r])
        src = np.asarray(tape.ip[b + 1:b + 1 + m], _I64)
        pos = np.asarray(tape.ip[b + 1 + m:b + 1 + 2 * m], _I64)
        return _union([(s, np.where(src == j, pos, -1)) for j, s in enumerate(ins)], m, n)
    if kind == C.K_REDUCE:
        x, size = ins[0], sizes[0]
        owner = reduce_map(tape, r, size) if m > 1 else np.zeros(size, _I64)
        if sub in _ROWWISE:
            groups = int(owner.max()) + 1 if size else 0
            G = _group(x, owner, groups, n)
            P.couple(G, G)
            return _pick(G, owner)
        G = _group(x, owner, m, n)
        if sub not in _LINEAR_REDUCE:
            P.couple(G, G)
        return G
    if kind == C.K_SCAN:
        # every element of a scanned line depends on (at most) the whole line
        b = int(tape.ip0[r])
        outer, length, inner = (int(v) for v in tape.ip[b:b + 3])
        line = (np.arange(m) // (length * inner)) * inner + np.arange(m) % inner
        G = _group(ins[0], line, outer * inner, n)
        if sub != C.CUMSUM:
            P.couple(G, G)
        return _pick(G, line)
    if kind == C.K_HOST and sub == 0:  # matmul
        return _matmul(tape, r, m, ins, n, P)
    if kind == C.K_USER and sub == C.USER_UNARY:
        P.couple(ins[0], ins[0])
        return ins[0]
    if kind == C.K_USER and sub == C.USER_BINARY:
        picks = operand_maps(tape, r, m, sizes, at=3)
        out = _union(list(zip(ins, picks)), m, n)
        P.couple(out, out)
        return out
    # no rule: every output element may depend on, and couple, everything read
    u = _unique(np.concatenate([s[1] for s in ins if s is not None]))
    U = np.array([0, u.size], _I64), u, u.size
    P.couple(U, U)
    return _broadcast(U, m) if m else U  # a multi-output op: its outputs broadcast U


def _matmul(tape, r, m, ins, n, P):
    """``A @ B``: output (i, k) reads row i of A and column k of B; both rows
    and columns couple only when both operands depend on the inputs."""
    shape_a, shape_b = (tuple(int(d) for d in s) for s in tape.host[r])
    sa = (1,) + shape_a if len(shape_a) == 1 else shape_a
    sb = shape_b + (1,) if len(shape_b) == 1 else shape_b
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    M, N = sa[-2], sb[-1]
    # per operand: the rows of A's (batch, i) or B's (batch, k) lines, broadcast
    out_batch = int(np.prod(batch, dtype=_I64))
    parts = []
    for S, s, is_a in ((ins[0], sa, True), (ins[1], sb, False)):
        if S is None:
            parts.append(None)
            continue
        idx = np.arange(int(np.prod(s, dtype=_I64)), dtype=_I64).reshape(s)
        idx = np.broadcast_to(idx, batch + s[-2:])
        # the elements each output line reads: A's row i, B's column k
        lines = idx if is_a else np.swapaxes(idx, -1, -2)
        nl = lines.shape[-2]
        owner = np.repeat(np.arange(out_batch * nl, dtype=_I64), lines.shape[-1])
        parts.append(_group(_pick(S, lines.reshape(-1)), owner, out_batch * nl, n))
    # output (b, i, k) reads A's line (b, i) and B's line (b, k)
    bi = np.arange(out_batch, dtype=_I64)[:, None, None]
    picks = [np.broadcast_to(bi * M + np.arange(M)[:, None], (out_batch, M, N)),
             np.broadcast_to(bi * N + np.arange(N), (out_batch, M, N))]
    rows = [None if L is None else _pick(L, k.reshape(-1)) for L, k in zip(parts, picks)]
    if rows[0] is not None and rows[1] is not None:
        P.couple(rows[0], rows[1])
    return _union([(s, None) for s in rows], m, n)


# -- colouring and recovery ---------------------------------------------------------------
#: the star colouring looks three steps around each column: it runs only when
#: that walk (estimated from the degrees) stays below this many steps
STAR_STEPS = 2 * 10**7


def colors(rows, cols, n):
    """``(color, p)``: a colour per column such that every nonzero ``H[i, j]``
    can be recovered from the products ``H s_c`` (``recover``), and the
    number of colours -- the fewer of a distance-2 colouring (no row has two
    columns of one colour) and, when affordable, a star colouring (which
    also reads entries across the diagonal; ``kernels/coloring.py``)."""
    if rows.size == 0:  # H is zero: no direction needed
        return np.zeros(n, _I64), 0
    ptr = np.zeros(n + 1, _I64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    cols = cols.astype(_I64)
    best = color_columns(ptr, cols, n)
    deg = np.diff(ptr)
    # steps of the star colouring's walk: sum over w of deg(w) * sum of its
    # neighbours' degrees
    if best[1] > 2 and float(deg @ np.bincount(rows, weights=deg[cols], minlength=n)) \
            <= STAR_STEPS:
        star = star_color(ptr, cols, n)
        if star[1] < best[1]:
            best = star
    return best


def seeds(color, p):
    """The p directions: row c is the sum of the unit vectors of colour c."""
    S = np.zeros((p, color.size))
    if p:
        S[color, np.arange(color.size)] = 1.0
    return S


def recovery(rows, cols, color, p, n):
    """Where each nonzero of the pattern sits in the flattened products
    ``hv[c] = H s_c`` (p, n): ``H[i, j] = hv[color[j], i]`` when column j is
    the only one of its colour in row i (always so for a distance-2
    colouring); else, by symmetry, ``hv[color[i], j]`` (a star colouring
    guarantees that i is then the only one of its colour in row j).  It
    depends on the pattern and colours alone, so it is found once with them.
    """
    if p == 0 or rows.size == 0:
        return np.zeros(rows.size, _I64)
    # how many columns of row i have column j's colour
    key = rows * p + color[cols]
    order = np.argsort(key, kind="stable")
    sk = key[order]
    start = np.concatenate(([True], sk[1:] != sk[:-1]))
    runs = np.diff(np.concatenate((np.flatnonzero(start), [sk.size])))
    count = np.empty(rows.size, _I64)
    count[order] = np.repeat(runs, runs)
    return np.where(count == 1, color[cols] * n + rows, color[rows] * n + cols)


def recover(hv, rows, cols, color):
    """The pattern's values from the products ``hv[c] = H s_c`` (p, n)."""
    p, n = hv.shape
    return hv.reshape(-1)[recovery(rows, cols, color, p, n)]
