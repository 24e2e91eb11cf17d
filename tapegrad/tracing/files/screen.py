"""The vectorised screen of a tape file's records, for ``tapefile_checks``.

``_screen`` reads, with NumPy over all records at once, what each record's
kind and sub code make the kernels follow -- its parents' count and sizes,
its integer parameter blocks, the odometer walks and index maps in them --
and flags every record that ``_validate_trace``'s per-record ``check``
would reject; ``_output_slots`` walks the output slots of every
multi-output record at once.  ``_validate_trace`` runs ``check`` only on
the flagged records and on host and user records, so a valid file of a
million records needs little Python per record.  Products and sums
saturate at ``_LIM``.
"""
import numpy as np

from ...kernels import codes as C
from ...kernels import replay as RK
from ...core.registry import REGISTRY
from ..replay import _HOST_FORWARD, _NOT_REPLAYABLE

_OUTPUT = C.code(C.K_NONE, C.OUTPUT)


# -- the vectorised screen -------------------------------------------------------------
#: saturation bound of the screen's products and sums: above every size a
#: record can have (MAX_ELEMENTS), far below int64 overflow
_LIM = 1 << 40


def _op_status():
    """Per op code: 0 loadable, 1 unknown, 2 known but not loadable."""
    status = np.ones(max(REGISTRY) + 1, np.int8)
    for c, spec in REGISTRY.items():
        status[c] = 2 if (spec.name in _NOT_REPLAYABLE
                          or (c >> C.SHIFT == C.K_HOST and spec.name not in _HOST_FORWARD)
                          or c == C.code(C.K_NONE, C.FREED)) else 0
    return status


def _at(a, pos):
    """``a[pos]`` where ``pos`` may be out of range (those read ``a[0]``; the
    caller has flagged them)."""
    ok = (pos >= 0) & (pos < a.size)
    return a[np.where(ok, pos, 0)]


def _mul(acc, d):
    """``acc * d`` for ``0 <= acc <= _LIM`` saturated at ``_LIM`` (exact below it;
    0 stays 0 and a 0 factor gives 0, as in Python)."""
    big = d > _LIM // np.maximum(acc, 1)
    return np.where((d == 0) | (acc == 0), 0, np.where(big, _LIM, acc * np.where(big, 0, d)))


def _walk_bad(ip, blk, nd, sizes, m):
    """The screen of :func:`_check_walk` for many records: blocks at ``blk``
    with ``nd`` dimensions and ``len(sizes)`` operands of sizes ``sizes[j]``;
    ``m`` elements each.  Returns the records that fail."""
    k = len(sizes)
    bad = (nd < 0) | (nd > 64)
    bad |= ~bad & (nd * (k + 1) > ip.size - 1 - blk)
    ok = np.flatnonzero(~bad)
    blk, nd, m = blk[ok], nd[ok], m[ok]
    sizes = [s[ok] for s in sizes]
    prod = np.ones(ok.size, np.int64)
    neg = np.zeros(ok.size, bool)
    reach = [np.zeros(ok.size, np.int64) for _ in range(k)]
    for t in range(int(nd.max()) if nd.size else 0):
        on = nd > t
        d = np.where(on, ip[np.where(on, blk + 1 + t, 0)], 1)
        neg |= d < 0
        prod = _mul(prod, np.maximum(d, 0))
        for j in range(k):
            s = np.where(on, ip[np.where(on, blk + 1 + nd * (j + 1) + t, 0)], 0)
            neg |= s < 0
            # (d - 1) * s, saturated: a saturated term already reaches past
            # any operand
            reach[j] = reach[j] + _mul(np.maximum(d - 1, 0), np.maximum(s, 0))
    fail = neg | (prod != m)
    for j in range(k):
        fail |= (m > 0) & (reach[j] >= sizes[j])
    bad[ok[fail]] = True
    return bad


def _same_or_one_bad(m, sizes):
    bad = np.zeros(m.size, bool)
    for s in sizes:
        bad |= (m > 0) & (s != 1) & (s != m)
    return bad


def _entries(cnt, start):
    """Owner (index into ``cnt``) and position of every entry of the blocks
    ``ip[start[i]:start[i] + cnt[i]]``."""
    owner = np.repeat(np.arange(cnt.size), cnt)
    first = np.cumsum(cnt) - cnt
    return owner, np.arange(owner.size) - first[owner] + start[owner]


def _output_slots(op, arg0, size, ip0, args, ip, nparents, kinds):
    """The output slots of the multi-output records (``check``'s walk, for all
    of them at once): returns which records are consumed slots, which are
    multi-output records and which multi-output records' walks fail."""
    n = op.size
    multi = (kinds == C.K_GATHER) & (size == 0)
    is_output = np.zeros(n, bool)
    slots_bad = np.zeros(n, bool)
    rs = np.flatnonzero(multi)
    if not rs.size:
        return is_output, multi, slots_bad
    # own[v]: the record an output slot v follows (-1: v is no slot)
    slot = (op == _OUTPUT) & (nparents == 1)
    own = np.where(slot, _at(args, arg0[:-1]), -1)
    # runs of equal own: record r's slots are the run starting at r + 1
    change = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
    run_end = np.r_[change[1:], n]                    # one past each run's end
    run_of = np.cumsum(np.r_[True, own[1:] != own[:-1]]) - 1
    nxt = np.minimum(rs + 1, n - 1)
    length = np.where((rs + 1 < n) & (own[nxt] == rs), run_end[run_of[nxt]] - (rs + 1), 0)
    # the fewest slots whose sizes reach the index map's count
    cnt = _at(ip, ip0[rs])
    pre = np.r_[0, np.cumsum(size)]                   # sizes >= 0, sum < 2**31
    target = pre[rs + 1] + np.clip(cnt, 0, _LIM)
    j = np.searchsorted(pre, target, side="left")
    used = np.maximum(j - (rs + 1), 0)
    ok = (j <= n) & (used <= length)
    seen = pre[np.minimum(rs + 1 + used, n)] - pre[rs + 1]
    ok &= seen == cnt
    slots_bad[rs[~ok]] = True
    diff = np.zeros(n + 1, np.int64)
    np.add.at(diff, rs[ok] + 1, 1)
    np.add.at(diff, rs[ok] + 1 + used[ok], -1)
    is_output = np.cumsum(diff[:n]) > 0
    return is_output, multi, slots_bad


def _screen(op, arg0, size, ip0, args, ip, nparents, kinds, is_output):
    """Every record :func:`_validate_trace`'s ``check`` would reject (and
    possibly a few more, which ``check`` then passes), with NumPy instead of a
    Python loop over the records.  Host and user records are left to
    ``check``; ``arg0``/``args`` are known consistent and ``ip0`` in range."""
    sub = op & C.MASK
    m = size
    b = ip0
    room = ip.size - b                  # int parameters from b on, >= 1
    a0 = arg0[:-1]
    par = [np.where(nparents > j, _at(args, a0 + j), 0) for j in range(3)]
    ps = [size[p] for p in par]
    bad = np.zeros(op.size, bool)

    def sel(mask):
        return np.flatnonzero(mask)

    # K_NONE: leaves, constants, comparisons have no parents; output slots
    # one, and follow a multi-output record
    none = kinds == C.K_NONE
    out = none & (sub == C.OUTPUT)
    bad |= none & ~out & (nparents != 0)
    bad |= out & ((nparents != 1) | ~is_output)
    cmp_ = none & (sub >= RK.CMP_FIRST)
    bad |= cmp_ & (room < 3)
    r = sel(cmp_ & (room >= 3))
    if r.size:
        xa, xb, nd = ip[b[r]], ip[b[r] + 1], ip[b[r] + 2]
        inr = (xa >= 0) & (xa < r) & (xb >= 0) & (xb < r)
        sz = [size[np.where(inr, xa, 0)], size[np.where(inr, xb, 0)]]
        fail = ~inr
        z = nd == 0
        fail |= z & _same_or_one_bad(m[r], sz)
        w = ~z
        fail[w] |= _walk_bad(ip, b[r][w] + 2, nd[w], [s[w] for s in sz], m[r][w])
        bad[r] |= fail
    # elementwise: one operand of the same size
    ew = (kinds == C.K_UNARY) | (kinds == C.K_SCALAR)
    bad |= ew & ((nparents != 1) | (ps[0] != m))
    # broadcasting n-ary ops
    nary = kinds == C.K_NARY
    where = sub == C.WHERE
    bad |= nary & (nparents != np.where(where, 3, 2))
    bad |= nary & ~where & (m == 1) & ((ps[0] != 1) | (ps[1] != 1))
    for k in (2, 3):
        r = sel(nary & (nparents == k) & (where == (k == 3)))
        if r.size:
            nd = ip[b[r]]
            sz = [p[r] for p in ps[:k]]
            z = nd == 0
            fail = z & _same_or_one_bad(m[r], sz)
            w = ~z
            fail[w] |= _walk_bad(ip, b[r][w], nd[w], [s[w] for s in sz], m[r][w])
            bad[r] |= fail
    # reductions: the input shape and the output strides of a reduction
    red = kinds == C.K_REDUCE
    soft = (sub == C.SOFTMAX) | (sub == C.LOG_SOFTMAX)
    bad |= red & ((nparents != 1) | (sub > C.LOG_SOFTMAX) | (soft & (m != ps[0])))
    r = sel(red & (soft | (m != 1)))
    if r.size:
        nd = ip[b[r]]
        fail = (nd < 0) | (nd > 64)
        fail |= ~fail & (2 * nd > room[r] - 1)
        ok = ~fail
        nd = np.where(ok, nd, 0)
        blk = b[r] + 1
        prod = np.ones(r.size, np.int64)
        acc = np.ones(r.size, np.int64)
        for t in range(int(nd.max())):
            on = nd > t
            d_at = nd - 1 - t                  # from the last axis to the first
            d = np.where(on, ip[np.where(on, blk + d_at, 0)], 1)
            st = np.where(on, ip[np.where(on, blk + nd + d_at, 0)], 0)
            fail |= d < 0
            prod = _mul(prod, np.maximum(d, 0))
            fail |= (st != 0) & (st != acc)
            acc = _mul(acc, np.where(st != 0, np.maximum(d, 0), 1))
            fail |= acc >= _LIM                # saturated: let check decide
        fail |= ok & (prod != ps[0][r])
        fail |= ok & ~soft[r] & (acc != m[r])
        bad[r] |= fail
    # gathers: the index map inside the int parameters and the operand
    gat = kinds == C.K_GATHER
    bad |= gat & (nparents != 1)
    cnt = ip[b]
    gfit = gat & (cnt >= 0) & (cnt <= room - 1)
    bad |= gat & ~gfit
    bad |= gat & (m != 0) & (cnt != m)
    cat = kinds == C.K_CONCAT
    cfit = cat & (cnt == m) & (2 * cnt <= room - 1)
    bad |= cat & ~cfit
    # the entries of the index maps, and of the concatenation maps (source
    # operand, then position); overlapping blocks (a hostile file) could make
    # these far longer than ip: then check looks at each record instead
    r, cr = sel(gfit), sel(cfit)
    if int(cnt[r].sum()) + 2 * int(cnt[cr].sum()) > 2 * ip.size + 1024:
        bad |= gfit | cfit
    else:
        if r.size:
            own, pos = _entries(cnt[r], b[r] + 1)
            idx = ip[pos]
            hit = (idx < -1) | (idx >= ps[0][r][own])
            bad[r[np.unique(own[hit])]] = True
        if cr.size:
            own, pos = _entries(cnt[cr], b[cr] + 1)
            src = ip[pos]
            where_ = ip[pos + cnt[cr][own]]
            rr = cr[own]
            oks = (src >= 0) & (src < nparents[rr])
            opnd = _at(args, a0[rr] + np.where(oks, src, 0))
            hit = ~oks | (where_ < 0) | (where_ >= size[opnd])
            bad[cr[np.unique(own[hit])]] = True
    # scans: a block of three non-negative extents whose product is the size
    scan = kinds == C.K_SCAN
    bad |= scan & ((nparents != 1) | (room < 3) | (ps[0] != m))
    r = sel(scan & (room >= 3))
    if r.size:
        prod = np.ones(r.size, np.int64)
        fail = np.zeros(r.size, bool)
        for t in range(3):
            d = ip[b[r] + t]
            fail |= d < 0
            prod = _mul(prod, np.maximum(d, 0))
        bad[r] |= fail | (prod != m[r])
    # kinds the screen does not know: check names them
    bad |= kinds > C.K_USER
    bad |= kinds < 0
    return bad

