"""Traced functions as plain NumPy arrays: ``ft.save(path)``, ``tg.load(path)``
and pickling.

A file is one ``.npz`` of numeric and fixed-width string arrays -- never an
object array, never pickled code -- read back with ``allow_pickle=False``.
Per trace ``k`` (keys ``t<k>.<name>``) it holds the records (``op``, ``arg0``,
``size``, ``ip0``, ``args``, ``ip``, ``fp``), the values of records a replay
does not recompute (constants), the input and output records with their
shapes and dtypes, the guards, and the host ops' shape information as JSON
text.  ``format`` is the version.

The compiled replay and sweep do no bounds checks, so :func:`validate`
checks every index they will follow before anything reaches them: op codes
known to the registry and replayable, parents earlier than their record,
CSR offsets monotone, every integer parameter block inside ``ip`` and every
index map, stride and shape in it consistent with the sizes of the records
it addresses.  A file that fails gives a ``ValueError`` naming the check.

Reading is bounded before it allocates: :func:`read` accepts regular files
only (a device, a FIFO or a directory would never end or never start), refuses
any member that is not one of the layout's arrays before decompressing it,
reads every member's ``.npy`` header first and checks that the declared
shapes agree with each other and with the zip directory, and estimates what
the loaded function will hold -- the arrays, the value and adjoint storage of
every record, the per-record tables -- against ``max_bytes``
(:data:`DEFAULT_MAX_BYTES` unless the caller passes more).  Each member is
then read into an array of exactly its declared size.

Writing is atomic: :func:`save` writes a temporary file next to the target,
flushes and fsyncs it and renames it over the target, so an interrupted save
leaves the previous file as it was.

Pickling a traced function stores the same ``.npz`` bytes, and unpickling
reads them through :func:`read` and :func:`parse` like a file.  Unpickling
itself can run any code the pickle names, as any pickle can: load traces
from untrusted sources with :func:`load` only, never with ``pickle``.
"""
import io
import json
import math
import os
import re
import secrets
import stat
import zipfile

import numpy as np

from .kernels import codes as C
from .kernels import replay as RK
from .ops.registry import REGISTRY
from .trace_replay import _HOST_EXTRA, _HOST_FORWARD, _NOT_REPLAYABLE, _Replay
from .traced_function import LoadedFunction, TracedFunction, files

#: version of the file layout; a loader refuses versions it does not know
FORMAT_VERSION = 1
#: dtypes inputs and outputs may have
FLOAT_DTYPES = ("float64", "float32", "float16")
#: a file may not ask for more value storage than this (elements, all records)
MAX_ELEMENTS = 1 << 31
#: what :func:`load` lets a file cost by default (bytes): its arrays once
#: read plus the value and adjoint storage and the tables its records need;
#: ``tg.load(path, max_bytes=...)`` raises or lowers it
DEFAULT_MAX_BYTES = 1 << 30
#: bytes of tables per record a loaded trace holds besides its values and
#: adjoints (offsets, pointers, the validator's screens), used in the estimate
_PER_RECORD = 256

_I8, _F8 = np.dtype(np.int64), np.dtype(np.float64)
#: per-trace arrays and the dtype each must have exactly
_FIELDS = {
    "op": _I8, "arg0": _I8, "size": _I8, "ip0": _I8, "args": _I8, "ip": _I8,
    "fp": _F8, "held": _I8, "held_vals": _F8, "leaf_rec": _I8, "in_ndim": _I8,
    "in_dims": _I8, "in_dtypes": "U", "out_shape": _I8, "out_dtype": "U", "root": _I8,
    "const_out": _F8, "guard": _I8, "goff": _I8, "gvals": _F8, "host": np.dtype(np.uint8),
    "sig": np.dtype(np.uint8), "user": np.dtype(np.uint8),
}
#: operands of each host op a file may hold (Einsum: as many as subscripts)
_HOST_ARITY = {"Mm": 2, "LinalgInv": 1, "LinalgSolve": 2, "LinalgDet": 1,
               "LinalgSlogdet": 1, "LinalgCholesky": 1, "LinalgPinv": 1, "Einsum": None}
_OUTPUT = C.code(C.K_NONE, C.OUTPUT)
_LEAF = C.code(C.K_NONE, C.LEAF)


class TapeFileError(ValueError):
    """A tape file (or pickled trace) that is not a valid tapegrad trace."""


# -- writing --------------------------------------------------------------------------
def _jsonable(h):
    if isinstance(h, (tuple, list)):
        return [_jsonable(x) for x in h]
    if isinstance(h, (bool, np.bool_)):
        return bool(h)
    if isinstance(h, (int, np.integer)):
        return int(h)
    if isinstance(h, str):
        return h
    raise TypeError(type(h).__name__)


def _text(obj):
    return np.frombuffer(json.dumps(obj).encode(), np.uint8).copy()


def replay_state(rep, key, user_ops=True):
    """The arrays that describe one trace (a ``_Replay``) at signature ``key``;
    ``user_ops``: whether user elementwise ops may be saved (by name)."""
    from .ops.custom import USER_OPS
    n = rep.n
    kinds = rep.op >> C.SHIFT
    ip = rep.ip.copy()
    user = {}
    for r in np.flatnonzero(kinds == C.K_USER):
        op = USER_OPS[int(ip[rep.ip0[r]])]
        if not user_ops:
            raise ValueError(
                f"cannot pickle a trace of the user elementwise op {op.name} (record "
                f"{int(r)}): its machine code belongs to this process; use ft.save and "
                "tg.load(path, ops=[...])")
        user[str(r)] = op.name
        # ids and code addresses are this process's: the loader fills them in
        ip[rep.ip0[r]:rep.ip0[r] + 1 + op.nin] = 0
    for r in range(n):
        name = REGISTRY[int(rep.op[r])].name
        if name in _NOT_REPLAYABLE or (kinds[r] == C.K_HOST and name not in _HOST_FORWARD):
            raise ValueError(f"cannot save {name} (record {r}): it runs Python code")
    sig = []
    for i, k in enumerate(key):
        if k[0] == "static":
            v = k[2]
            if not (v is None or type(v) in (int, bool, str)):
                raise ValueError(
                    f"cannot save a trace with a static argument of type {type(v).__name__} "
                    f"(argument {i}); only int, bool, str and None are saved")
            sig.append(["static", type(v).__name__, v])
        else:
            sig.append(["input"])
    # records a replay does not recompute: leaves that are not inputs, constants
    held = np.flatnonzero((kinds == C.K_NONE) & ((rep.op & C.MASK) < RK.CMP_FIRST))
    inputs = set(rep.leaf_rec)
    held = np.array([r for r in held if r not in inputs], np.int64)
    hv = [rep.view(r) for r in held]
    host = {}
    for r, h in rep.host.items():
        if r < n and kinds[r] == C.K_HOST:
            try:
                host[str(r)] = _jsonable(h)
            except TypeError as e:
                raise ValueError(f"cannot save host record {r}: its parameters hold "
                                 f"a {e}") from None
    return {
        "op": rep.op, "arg0": rep.arg0[:n + 1], "size": rep.size, "ip0": rep.ip0,
        "args": rep.args, "ip": ip, "fp": rep.fp, "held": held,
        "held_vals": np.concatenate(hv) if hv else np.zeros(0),
        "leaf_rec": np.asarray(rep.leaf_rec, np.int64),
        "in_ndim": np.array([len(s) for s in rep.in_shapes], np.int64),
        "in_dims": np.array([d for s in rep.in_shapes for d in s], np.int64),
        "in_dtypes": np.array([np.dtype(d).name for d in rep.in_dtypes], dtype="U16"),
        "out_shape": np.array(rep.out_shape, np.int64),
        "out_dtype": np.array([np.dtype(rep.out_dtype).name], dtype="U16"),
        "root": np.array([-1 if rep.root is None else rep.root], np.int64),
        "const_out": (np.zeros(0) if rep.const_out is None
                      else np.asarray(rep.const_out, np.float64).reshape(-1)),
        "guard": rep.guard, "goff": rep.goff, "gvals": rep.gvals,
        "host": _text(host), "sig": _text(sig), "user": _text(user),
    }


def _used_ops(ft):
    from .ops.custom import USER_OPS
    ops = {}
    for reps in ft.cache.values():
        for rep in reps:
            for r in np.flatnonzero((rep.op >> C.SHIFT) == C.K_USER):
                op = USER_OPS[int(rep.ip[rep.ip0[r]])]
                if ops.setdefault(op.name, op) is not op:
                    raise ValueError(f"cannot save two different user ops named {op.name}")
    return ops


def function_state(ft, user_ops=True):
    """All arrays of a traced function (every cached trace), validated."""
    arrays = {"format": np.array([FORMAT_VERSION], np.int64)}
    k = 0
    ops = _used_ops(ft)
    for key, reps in ft.cache.items():
        for rep in reps:
            for name, a in replay_state(rep, key, user_ops).items():
                arrays[f"t{k}.{name}"] = np.ascontiguousarray(a)
            k += 1
    arrays["n_traces"] = np.array([k], np.int64)
    arrays["name"] = np.array([ft.__name__[:200]], dtype="U200")
    parse(arrays, allow_empty=True, ops=ops)  # what we write, we can read back
    return arrays


def save(ft, path):
    """Write ``ft``'s traces to ``path`` (an ``.npz``), atomically."""
    arrays = function_state(ft)
    if int(arrays["n_traces"][0]) == 0:
        raise ValueError(f"{ft.__name__} has not been traced yet: call it once first")
    _write_atomic(path, lambda fh: np.savez(fh, **arrays))


def _write_atomic(path, write):
    """Call ``write(fh)`` on a new file in ``path``'s directory and rename it
    over ``path`` once it is complete and on disk.

    An exception or a signal at any point (Ctrl-C half-way through a large
    save) leaves ``path`` as it was and removes the partial file; only a
    killed process can leave one behind, under a name starting with a dot.
    A symlink is followed, as ``open(path, "wb")`` would, so the file it
    points at is the one replaced."""
    target = os.path.realpath(os.fspath(path))
    folder, base = os.path.split(target)
    mode = None
    try:
        st = os.stat(target)
        if stat.S_ISREG(st.st_mode):
            mode = stat.S_IMODE(st.st_mode)   # the replacement keeps it
    except FileNotFoundError:
        pass
    while True:
        tmp = os.path.join(folder, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            # 0o666 minus the umask, as a plain open() would give
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:   # the rename itself on disk too (POSIX; not possible on Windows)
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# -- reading --------------------------------------------------------------------------
def _bad(msg):
    raise TapeFileError(msg)


def _arr(arrays, key, want, ndim=1):
    if key not in arrays:
        _bad(f"missing array {key!r}")
    a = arrays[key]
    if not isinstance(a, np.ndarray):
        _bad(f"{key!r} is not an array")
    if want == "U":
        if a.dtype.kind != "U":
            _bad(f"{key!r} has dtype {a.dtype}, expected a unicode string array")
    elif a.dtype != want:
        _bad(f"{key!r} has dtype {a.dtype}, expected {np.dtype(want)}")
    if a.ndim != ndim:
        _bad(f"{key!r} has {a.ndim} dimensions, expected {ndim}")
    return a


def _json(a, key):
    try:
        return json.loads(a.tobytes().decode())
    except (UnicodeDecodeError, ValueError):
        _bad(f"{key!r} is not valid JSON text")


def _shape(obj, what):
    if not isinstance(obj, list) or not all(type(d) is int and d >= 0 for d in obj):
        _bad(f"{what} is not a shape (a list of non-negative ints)")
    return tuple(obj)


def _prod(shape):
    return math.prod(int(d) for d in shape)


def _check_walk(ip, b, nd, k, n, sizes, r, what):
    """An odometer block ``[nd, shape(nd), strides(nd) x k]`` at ``ip[b]`` (the
    ``nd`` already read) must describe ``n`` elements and stay inside each of
    the ``k`` operands, whose sizes are ``sizes``."""
    if nd < 0 or nd > 64 or b + 1 + nd * (k + 1) > ip.size:
        _bad(f"record {r} ({what}): broadcast block of {nd} dimensions does not fit "
             "in the int parameters")
    shape = [int(d) for d in ip[b + 1:b + 1 + nd]]
    if any(d < 0 for d in shape) or _prod(shape) != n:
        _bad(f"record {r} ({what}): broadcast shape {shape} does not have its "
             f"{n} elements")
    for j in range(k):
        st = [int(s) for s in ip[b + 1 + nd * (j + 1):b + 1 + nd * (j + 2)]]
        if any(s < 0 for s in st):
            _bad(f"record {r} ({what}): negative stride")
        if n and sum((d - 1) * s for d, s in zip(shape, st)) >= sizes[j]:
            _bad(f"record {r} ({what}): strides {st} reach past operand {j} "
                 f"of {sizes[j]} elements")
    return shape


def _check_same_or_one(r, n, sizes, what):
    if n and any(m not in (1, n) for m in sizes):
        _bad(f"record {r} ({what}): operand sizes {list(sizes)} neither 1 nor {n} "
             "without a broadcast block")


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


def _validate_trace(a, k, ops):
    """Check one trace's arrays (dict of name -> array); returns the parsed
    signature, host dict, shapes and dtypes."""
    p = f"t{k}."
    g = {name: _arr(a, p + name, dt) for name, dt in _FIELDS.items()}
    op, arg0, size, ip0, args = g["op"], g["arg0"], g["size"], g["ip0"], g["args"]
    ip = g["ip"] = g["ip"].copy()   # user op records get this process's ids here
    n = op.size
    for name in ("size", "ip0", "fp", "guard", "goff"):
        if g[name].size != n:
            _bad(f"{p}{name} has {g[name].size} entries for {n} records")
    if arg0.size != n + 1:
        _bad(f"{p}arg0 has {arg0.size} entries, expected {n + 1}")
    if args.size < 1 or ip.size < 1:
        _bad(f"{p}args and {p}ip need at least one entry")
    # op codes: known, replayable, not a user op (the smallest bad code is
    # named, as a walk over the sorted distinct codes would)
    status = _op_status()
    st = np.where((op >= 0) & (op < status.size), status[np.clip(op, 0, status.size - 1)], 1)
    if st.any():
        c = int(op[st != 0].min())
        if c not in REGISTRY:
            _bad(f"unknown op code {c}")
        _bad(f"op code {c} ({REGISTRY[c].name}) cannot be loaded")
    if (size < 0).any():
        _bad(f"negative size at record {int(np.flatnonzero(size < 0)[0])}")
    # no record above the limit and fewer than 2**32 records: the int64 sum
    # cannot overflow
    if n and (size.max() > MAX_ELEMENTS or n >= 1 << 32 or size.sum() > MAX_ELEMENTS):
        _bad(f"the records' sizes add up to more than {MAX_ELEMENTS} elements")
    # CSR parents: monotone, within args, each parent earlier than its record
    if arg0[0] != 0 or (np.diff(arg0) < 0).any() or arg0[-1] > args.size:
        _bad(f"{p}arg0 is not a monotone offset table inside args")
    nparents = np.diff(arg0)
    owner = np.repeat(np.arange(n), nparents)
    used = args[:arg0[-1]]
    if ((used < 0) | (used >= owner)).any():
        bad = int(np.flatnonzero((used < 0) | (used >= owner))[0])
        _bad(f"record {int(owner[bad])}: parent {int(used[bad])} is not an earlier record")
    if ((ip0 < 0) | (ip0 >= ip.size)).any():
        _bad(f"{p}ip0 points outside the int parameters")
    gvals = g["gvals"]
    guard, goff = g["guard"], g["goff"]
    if not np.isin(guard, (0, RK.G_TRUTH, RK.G_VALUE)).all():
        _bad(f"{p}guard holds an unknown guard kind")
    gr = np.flatnonzero(guard)
    if ((goff[gr] < 0) | (goff[gr] + size[gr] > gvals.size)).any():
        _bad(f"{p}goff points outside the guard values")
    host = _json(g["host"], p + "host")
    if not isinstance(host, dict):
        _bad(f"{p}host is not a JSON object")
    user = _json(g["user"], p + "user")
    if not isinstance(user, dict):
        _bad(f"{p}user is not a JSON object")
    hosts = {}
    kinds = op >> C.SHIFT
    is_output, multi, slots_bad = _output_slots(op, arg0, size, ip0, args, ip, nparents,
                                                kinds)

    def check(r):
        """Record r's checks in order (the first that fails raises); fills in
        ``hosts`` and a user op's ids in ``ip``."""
        c = int(op[r])
        kind, sub = c >> C.SHIFT, c & C.MASK
        pa = args[arg0[r]:arg0[r + 1]]
        ps = [int(size[q]) for q in pa]
        m = int(size[r])
        b = int(ip0[r])
        what = REGISTRY[c].name

        def need_parents(count):
            if len(pa) != count:
                _bad(f"record {r} ({what}): {len(pa)} parents, expected {count}")

        if kind == C.K_NONE:
            if sub != C.OUTPUT:
                # the sweep passes reach through a K_NONE record's parents
                # without writing their adjoints: only output slots have one
                need_parents(0)
            if sub == C.OUTPUT:
                need_parents(1)
                if not is_output[r]:
                    _bad(f"record {r}: an output slot that follows no multi-output record")
            elif sub >= RK.CMP_FIRST:
                if b + 3 > ip.size:
                    _bad(f"record {r} ({what}): int parameters out of range")
                xa, xb, nd = int(ip[b]), int(ip[b + 1]), int(ip[b + 2])
                if not (0 <= xa < r and 0 <= xb < r):
                    _bad(f"record {r} ({what}): operand records {xa}, {xb} out of range")
                sz = [int(size[xa]), int(size[xb])]
                if nd == 0:
                    _check_same_or_one(r, m, sz, what)
                else:
                    _check_walk(ip, b + 2, nd, 2, m, sz, r, what)
        elif kind in (C.K_UNARY, C.K_SCALAR):
            need_parents(1)
            if ps[0] != m:
                _bad(f"record {r} ({what}): size {m} differs from its operand's {ps[0]}")
        elif kind == C.K_NARY:
            need_parents(3 if sub == C.WHERE else 2)
            if m == 1 and sub != C.WHERE and ps != [1, 1]:
                _bad(f"record {r} ({what}): one-element record with operands of sizes {ps}")
            nd = int(ip[b])
            if nd == 0:
                _check_same_or_one(r, m, ps, what)
            else:
                _check_walk(ip, b, nd, len(ps), m, ps, r, what)
        elif kind == C.K_REDUCE:
            need_parents(1)
            if sub > C.LOG_SOFTMAX:
                _bad(f"record {r}: unknown reduction {sub}")
            soft = sub in (C.SOFTMAX, C.LOG_SOFTMAX)
            if soft and m != ps[0]:
                _bad(f"record {r} ({what}): size {m} differs from its operand's {ps[0]}")
            if soft or m != 1:
                nd = int(ip[b])
                if nd < 0 or nd > 64 or b + 1 + 2 * nd > ip.size:
                    _bad(f"record {r} ({what}): reduction block does not fit in the "
                         "int parameters")
                shape = [int(d) for d in ip[b + 1:b + 1 + nd]]
                st = [int(s) for s in ip[b + 1 + nd:b + 1 + 2 * nd]]
                if any(d < 0 for d in shape) or _prod(shape) != ps[0]:
                    _bad(f"record {r} ({what}): input shape {shape} does not have its "
                         f"operand's {ps[0]} elements")
                # the output strides must be the C-order strides of the kept axes
                # (0 on reduced ones): the kernels compute output positions
                # both from them and from the shape alone
                kept = [d if s != 0 else 1 for d, s in zip(shape, st)]
                acc = 1
                for d in range(nd - 1, -1, -1):
                    if st[d] != 0 and st[d] != acc:
                        _bad(f"record {r} ({what}): output strides {st} are not those "
                             f"of a reduction of shape {shape}")
                    acc *= kept[d]
                if not soft and acc != m:
                    _bad(f"record {r} ({what}): the reduction of shape {shape} has "
                         f"{acc} outputs, not {m}")
        elif kind == C.K_GATHER:
            need_parents(1)
            cnt = int(ip[b])
            if cnt < 0 or b + 1 + cnt > ip.size:
                _bad(f"record {r} ({what}): index map does not fit in the int parameters")
            idx = ip[b + 1:b + 1 + cnt]
            if idx.size and (idx.min() < -1 or idx.max() >= ps[0]):
                _bad(f"record {r} ({what}): index map reaches outside its operand "
                     f"of {ps[0]} elements")
            if m == 0:  # a multi-output record: its slots are the next records
                v, seen = r + 1, 0
                while seen < cnt:
                    if v >= n or int(op[v]) != _OUTPUT or arg0[v + 1] - arg0[v] != 1 \
                            or args[arg0[v]] != r:
                        _bad(f"record {r} ({what}): its {cnt} outputs are not the "
                             "output slots after it")
                    seen += int(size[v])
                    v += 1
                if seen != cnt:
                    _bad(f"record {r} ({what}): output slots of {seen} elements for an "
                         f"index map of {cnt}")
            elif cnt != m:
                _bad(f"record {r} ({what}): index map of {cnt} entries for {m} elements")
        elif kind == C.K_CONCAT:
            cnt = int(ip[b])
            if cnt != m or b + 1 + 2 * cnt > ip.size:
                _bad(f"record {r} ({what}): concatenation map does not fit")
            src = ip[b + 1:b + 1 + cnt]
            pos = ip[b + 1 + cnt:b + 1 + 2 * cnt]
            if cnt and (src.min() < 0 or src.max() >= len(pa)):
                _bad(f"record {r} ({what}): source operand out of range")
            if cnt and ((pos < 0) | (pos >= np.asarray(ps, np.int64)[src])).any():
                _bad(f"record {r} ({what}): source position out of range")
        elif kind == C.K_SCAN:
            need_parents(1)
            if b + 3 > ip.size:
                _bad(f"record {r} ({what}): int parameters out of range")
            dims = [int(x) for x in ip[b:b + 3]]
            if any(x < 0 for x in dims) or _prod(dims) != m or ps[0] != m:
                _bad(f"record {r} ({what}): scan block {dims} does not match size {m}")
        elif kind == C.K_USER:
            uname = user.get(str(r))
            if not isinstance(uname, str):
                _bad(f"record {r}: a user elementwise op without a name")
            uop = (ops or {}).get(uname)
            if uop is None:
                _bad(f"the tape uses the user elementwise op {uname!r}: pass it as "
                     f"tg.load(path, ops=[{uname}, ...])")
            if sub not in (C.USER_UNARY, C.USER_BINARY) or uop.nin != sub + 1:
                _bad(f"record {r}: {uname} takes {uop.nin} argument(s), the record "
                     f"has op code {c}")
            need_parents(uop.nin)
            if b + (2 if uop.nin == 1 else 4) > ip.size:
                _bad(f"record {r} ({uname}): int parameters out of range")
            if uop.nin == 1:
                if ps[0] != m:
                    _bad(f"record {r} ({uname}): size {m} differs from its operand's {ps[0]}")
            else:
                nd = int(ip[b + 3])
                if nd == 0:
                    _check_same_or_one(r, m, ps, uname)
                else:
                    _check_walk(ip, b + 3, nd, 2, m, ps, r, uname)
            ids = uop._compile()[2]   # [id in USER_OPS, derivative addresses]
            ip[b:b + 1 + uop.nin] = ids[:1 + uop.nin]
        elif kind == C.K_HOST:
            h = host.get(str(r))
            if not isinstance(h, list):
                _bad(f"record {r} ({what}): no host parameters")
            extra = _HOST_EXTRA.get(what, 0)
            arity = _HOST_ARITY[what] if what != "Einsum" else (
                len(h[0]) if len(h) > 2 and isinstance(h[0], list) else -1)
            if len(pa) != arity:
                _bad(f"record {r} ({what}): {len(pa)} operands, expected {arity}")
            has_out = what != "Mm"   # the others' VJPs read their output's shape
            if len(h) != extra + arity + has_out:
                _bad(f"record {r} ({what}): host parameters of the wrong length")
            if what == "Einsum":
                if not (isinstance(h[0], list) and all(isinstance(s, str) for s in h[0])
                        and isinstance(h[1], str) and len(h[0]) == len(pa)):
                    _bad(f"record {r} ({what}): bad subscripts")
            if what == "LinalgPinv" and not isinstance(h[0], bool):
                _bad(f"record {r} ({what}): bad hermitian flag")
            shapes = [_shape(s, f"record {r} host shape") for s in h[extra:]]
            if has_out and _prod(shapes[-1]) != m:
                _bad(f"record {r} ({what}): output shape {shapes[-1]} does not have its "
                     f"{m} elements")
            for s, q in zip(shapes, ps):
                if _prod(s) != q:
                    _bad(f"record {r} ({what}): operand shape {s} does not have its "
                         f"{q} elements")
            hosts[r] = tuple(h[:extra]) if what != "Einsum" else (tuple(h[0]), h[1])
            hosts[r] = hosts[r] + tuple(shapes)
        else:
            _bad(f"record {r}: op kind {kind} cannot be loaded")

    # Python runs ``check`` only on the records the vectorised screen flags
    # (it flags every record ``check`` would reject) and on host and user
    # records, in record order, so the first failing record gives the same
    # message a walk over every record would.  User records write their ids
    # into ip first, so the screen sees the int parameters the kernels read.
    for r in np.flatnonzero(kinds == C.K_USER):
        try:
            check(int(r))
        except TapeFileError:
            pass                  # raised again below, in its turn
    flagged = (_screen(op, arg0, size, ip0, args, ip, nparents, kinds, is_output) | slots_bad
               | (kinds == C.K_USER) | (kinds == C.K_HOST))
    for r in np.flatnonzero(flagged):
        check(int(r))
    # a multi-output record's adjoint is the span of its slots: nothing else
    # may consume it (a consumer could lend it memory of another size)
    direct = multi[used] & ~is_output[owner]
    if direct.any():
        q = int(used[direct].min())
        r = int(owner[direct & (used == q)][0])
        _bad(f"record {r} consumes multi-output record {q} directly")
    # inputs, output, held values
    leaf_rec = g["leaf_rec"]
    in_ndim, in_dims = g["in_ndim"], g["in_dims"]
    if in_ndim.size != leaf_rec.size or (in_ndim < 0).any() or in_ndim.sum() != in_dims.size \
            or (in_dims < 0).any():
        _bad(f"{p}in_ndim / in_dims do not describe the inputs' shapes")
    if g["in_dtypes"].size != leaf_rec.size:
        _bad(f"{p}in_dtypes has {g['in_dtypes'].size} entries for {leaf_rec.size} inputs")
    shapes, at = [], 0
    for i, r in enumerate(leaf_rec):
        r = int(r)
        s = tuple(int(d) for d in in_dims[at:at + in_ndim[i]])
        at += int(in_ndim[i])
        if not (0 <= r < n) or int(op[r]) != _LEAF or _prod(s) != size[r]:
            _bad(f"input {i}: record {r} is not a leaf of shape {s}")
        shapes.append(s)
    if np.unique(leaf_rec).size != leaf_rec.size:
        _bad("two inputs share a record")
    dts = []
    for d in list(g["in_dtypes"]) + list(g["out_dtype"]):
        if str(d) not in FLOAT_DTYPES:
            _bad(f"dtype {str(d)!r} is not one of {FLOAT_DTYPES}")
        dts.append(np.dtype(str(d)))
    if g["out_dtype"].size != 1 or g["root"].size != 1:
        _bad(f"{p}out_dtype and {p}root need one entry")
    out_shape = g["out_shape"]
    if (out_shape < 0).any():
        _bad(f"{p}out_shape has a negative dimension")
    out_shape = tuple(int(d) for d in out_shape)
    root = int(g["root"][0])
    if root == -1:
        if g["const_out"].size != _prod(out_shape):
            _bad(f"{p}const_out does not have the output's shape")
    elif not (0 <= root < n) or size[root] != _prod(out_shape):
        _bad(f"{p}root {root} is not a record of the output's shape {out_shape}")
    held = g["held"]
    if held.size and (held.min() < 0 or held.max() >= n):
        _bad(f"{p}held names records out of range")
    if int(size[held].sum()) != g["held_vals"].size:
        _bad(f"{p}held_vals has {g['held_vals'].size} values for "
             f"{int(size[held].sum())} held elements")
    sig = _json(g["sig"], p + "sig")
    if not isinstance(sig, list):
        _bad(f"{p}sig is not a list")
    key, pos = [], []
    types = {"int": int, "bool": bool, "str": str, "NoneType": type(None)}
    for i, e in enumerate(sig):
        if e == ["input"]:
            pos.append(i)
            key.append(None)
        elif (isinstance(e, list) and len(e) == 3 and e[0] == "static" and e[1] in types
              and type(e[2]) is types[e[1]]):
            key.append(("static", types[e[1]], e[2]))
        else:
            _bad(f"{p}sig entry {i} is not an input or a static int/bool/str/None")
    if len(pos) != leaf_rec.size:
        _bad(f"{p}sig names {len(pos)} inputs, the trace has {leaf_rec.size}")
    for j, i in enumerate(pos):
        key[i] = (shapes[j], dts[j].str)
    return dict(g, key=tuple(key), pos=pos, hosts=hosts, in_shapes=shapes,
                in_dtypes=dts[:-1], out_dtype=dts[-1], out_shape=out_shape,
                root=None if root == -1 else root)


def parse(arrays, allow_empty=False, ops=None):
    """Validate a dict of arrays; returns ``(name, [trace description, ...])``.
    ``allow_empty``: no traces is fine (a pickled function that still has its
    Python code and was never called)."""
    fmt = _arr(arrays, "format", _I8)
    if fmt.size != 1 or int(fmt[0]) != FORMAT_VERSION:
        _bad(f"unknown format version {fmt.tolist()} (this tapegrad reads "
             f"{FORMAT_VERSION})")
    nt = _arr(arrays, "n_traces", _I8)
    if nt.size != 1 or not (int(not allow_empty) <= int(nt[0]) <= 4096):
        _bad("n_traces is not a trace count")
    name = _arr(arrays, "name", "U")
    name = str(name[0]) if name.size == 1 else "loaded"
    return name, [_validate_trace(arrays, k, ops) for k in range(int(nt[0]))]


#: the members a file may hold: the header arrays and per-trace arrays
_MEMBER = re.compile(r"(format|n_traces|name|t(0|[1-9][0-9]{0,3})\.([a-z_0-9]+))\.npy\Z")
#: member header arrays: a handful of elements each
_HEADER_KEYS = ("format", "n_traces", "name")
#: by default members may unpack to this many times the file's size
_MEMBER_RATIO = 16
#: the .npy header of a member is at most this long (NumPy's own limit)
_MAX_HEADER = 10000
#: member dtypes a file may use (object and structured dtypes never)
_KINDS = "biufU"


def _open_regular(path):
    """A binary file object for ``path`` after checking, on the open file,
    that it is a regular file: a device (``/dev/zero``) would be read
    forever, a FIFO would block the open or the read, a directory is no
    file.  The open does not block on a FIFO (``O_NONBLOCK``)."""
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(os.fspath(path), flags)
    except IsADirectoryError:
        _bad("is a directory, not a tape file")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = ("a directory" if stat.S_ISDIR(st.st_mode)
                    else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                    else "a character device" if stat.S_ISCHR(st.st_mode)
                    else "a block device" if stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            _bad(f"is {what}; tape files are regular files")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def _member_header(zf, info):
    """The dtype and length a member's ``.npy`` header declares, read without
    decompressing the data; checks that it is a 1-d array of a plain dtype
    whose size is what the zip directory says."""
    key = info.filename[:-4]
    with zf.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                    fh, max_header_size=_MAX_HEADER)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                    fh, max_header_size=_MAX_HEADER)
            else:
                _bad(f"member {key!r} has .npy format version {version}")
        except TapeFileError:
            raise
        except ValueError as e:
            _bad(f"member {key!r} has no readable .npy header ({e})")
        offset = fh.tell()
    if dtype.hasobject:
        _bad(f"{key!r} holds an object array (pickled data), which tapegrad never loads")
    if dtype.kind not in _KINDS or dtype.fields is not None or dtype.subdtype is not None:
        _bad(f"{key!r} has dtype {dtype}, which no tape file array has")
    if len(shape) != 1:
        _bad(f"{key!r} has {len(shape)} dimensions, expected 1")
    count = int(shape[0])
    if offset + count * dtype.itemsize != info.file_size:
        _bad(f"member {key!r} declares {count} elements of {dtype} but unpacks to "
             f"{info.file_size - offset} bytes")
    return dtype, count, offset


def _member_data(zf, info, dtype, count, offset):
    """The member's array, read into storage of exactly its declared size
    (the zip stream cannot hand back more; a shorter one is an error)."""
    out = np.empty(count, dtype)
    buf = memoryview(out).cast("B") if out.nbytes else memoryview(bytearray(0))
    with zf.open(info) as fh:
        fh.read(offset)
        got = 0
        while got < len(buf):
            k = fh.readinto(buf[got:])
            if not k:
                _bad(f"member {info.filename[:-4]!r} is truncated")
            got += k
        if fh.read(1):   # also makes zipfile check the CRC at the end
            _bad(f"member {info.filename[:-4]!r} is longer than its header says")
    return out


def _read_zip(fh, max_bytes, member_cap):
    """The arrays of a tape file's zip archive (see :func:`read`);
    ``member_cap``: at most this many bytes of members (None: only
    ``max_bytes`` bounds them)."""
    zf = zipfile.ZipFile(fh)
    with zf:
        infos = zf.infolist()
        if len(infos) > 3 + len(_FIELDS) * 4096:
            _bad(f"{len(infos)} members; a tape file has at most {3 + len(_FIELDS) * 4096}")
        members = {}
        for info in infos:
            m = _MEMBER.match(info.filename)
            if m is None or (m.group(3) is not None and m.group(3) not in _FIELDS):
                _bad(f"unknown member {info.filename[:80]!r}")
            if info.flag_bits & 0x1:
                _bad(f"member {info.filename!r} is encrypted")
            if m.group(1) in members:
                _bad(f"member {info.filename!r} appears twice")
            members[m.group(1)] = info
        # the three header arrays first (a few elements each), then every
        # member's .npy header: nothing is decompressed past a header before
        # the declared sizes have been checked against each other and the budget
        heads = {k: _member_header(zf, members[k]) for k in _HEADER_KEYS if k in members}
        for k, (_, count, _) in heads.items():
            if count > 16:
                _bad(f"{k!r} has {count} entries")
        arrays = {k: _member_data(zf, members[k], *heads[k]) for k in heads}
        nt = arrays.get("n_traces")
        n_traces = (int(nt[0]) if nt is not None and nt.dtype == _I8 and nt.size == 1
                    and 0 <= nt[0] <= 4096 else None)
        for k in members:
            if n_traces is not None and k[0] == "t" and int(k[1:k.index(".")]) >= n_traces:
                _bad(f"unknown member {k + '.npy'!r} (the file has {n_traces} traces)")
        heads.update((k, _member_header(zf, members[k])) for k in members if k not in heads)
        total = sum(d.itemsize * c for d, c, _ in heads.values())
        if member_cap is not None and total > member_cap:
            _bad(f"its members would unpack to {total} bytes, more than the {member_cap} "
                 "a file of its size may by default (tapegrad writes members "
                 "uncompressed); pass max_bytes to tg.load if the file is trusted")
        for t in range(n_traces or 0):
            p = f"t{t}."
            if p + "op" not in heads:
                continue   # parse names the missing array
            n = heads[p + "op"][1]
            for name, want in (("size", n), ("ip0", n), ("fp", n), ("guard", n),
                               ("goff", n), ("arg0", n + 1)):
                if p + name in heads and heads[p + name][1] != want:
                    _bad(f"{p}{name} has {heads[p + name][1]} entries for {n} records")
            total += _PER_RECORD * n
        if total > max_bytes:
            _bad(f"its arrays and tables would take {total} bytes, more than max_bytes="
                 f"{max_bytes}; pass a larger max_bytes to tg.load if the file is trusted")
        # the sizes next: the value and adjoint storage they ask for must fit
        # too, before the rest is read and before anything is allocated for it
        for t in range(n_traces or 0):
            k = f"t{t}.size"
            if k in heads and heads[k][0] == _I8:
                arrays[k] = size = _member_data(zf, members[k], *heads[k])
                total += 16 * int(np.clip(size, 0, MAX_ELEMENTS).sum())
                if total > max_bytes:
                    _bad(f"its records' values and adjoints would take {total} bytes, "
                         f"more than max_bytes={max_bytes}; pass a larger max_bytes "
                         "to tg.load if the file is trusted")
        for k in heads:
            if k not in arrays:
                arrays[k] = _member_data(zf, members[k], *heads[k])
        return arrays


def _limit(max_bytes, file_bytes):
    """``(budget, member cap)``: ``max_bytes`` and no separate cap on the
    members when the caller gave it; by default :data:`DEFAULT_MAX_BYTES` or
    four times the file's own size, whichever is more (a file's arrays, its
    held values copied into the value storage and their adjoints), and
    members that unpack to at most :data:`_MEMBER_RATIO` times the file's
    size (plus 1 MiB): tapegrad stores them uncompressed, so only a crafted
    file packs more into fewer bytes."""
    if max_bytes is None:
        return (max(DEFAULT_MAX_BYTES, 4 * file_bytes),
                _MEMBER_RATIO * file_bytes + (1 << 20))
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) \
            or max_bytes < 0:
        raise TypeError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
    return int(max_bytes), None


def read(path, max_bytes=None, where=None):
    """The arrays of a tape file as a dict, read with no pickle and in bounded
    memory (see the module docstring); a file that is not a readable tape
    file, or would cost more than the budget (:func:`_limit`), gives a
    :class:`TapeFileError` (a ``ValueError``); a missing file an ``OSError``.
    ``path`` may also be a seekable binary file object (``io.BytesIO``);
    ``where`` names it in messages."""
    if where is None:
        where = "<file object>" if hasattr(path, "read") else str(path)
    try:
        if hasattr(path, "read"):
            here = path.tell()
            size = path.seek(0, os.SEEK_END) - here
            path.seek(here)
            return _read_zip(path, *_limit(max_bytes, size))
        fh, size = _open_regular(path)
        with fh:
            return _read_zip(fh, *_limit(max_bytes, size))
    except TapeFileError as e:
        raise TapeFileError(f"{where}: {e}") from None
    except (FileNotFoundError, PermissionError):
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, KeyError,
            ValueError, NotImplementedError, RuntimeError, MemoryError) as e:
        raise TapeFileError(f"{where}: not a readable tape file "
                            f"({type(e).__name__}: {e})") from None


def _npz_bytes(arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def from_bytes(data, f=None):
    """A traced function from the bytes of a tape file: what a pickled traced
    function holds, read by :func:`read` and checked by :func:`parse` as a
    file on disk is (unpickling calls this)."""
    if not isinstance(data, bytes):
        raise TapeFileError("pickled traced function: its traces are not bytes")
    where = "pickled traced function"
    return _build(read(io.BytesIO(data), where=where), f, where)


def from_arrays(arrays, f=None, where="tape", ops=None):
    """A :class:`~tapegrad.traced_function.LoadedFunction` (or a ``TracedFunction``
    of ``f``) from a dict of arrays, which go through the same reader and
    checks as a file's (they are written to ``.npz`` bytes and read back:
    an object array, a subclass or an oversized array is refused as in a
    file)."""
    if not isinstance(arrays, dict) or not all(
            isinstance(k, str) and type(v) is np.ndarray for k, v in arrays.items()):
        raise TapeFileError(f"{where}: not a dict of plain arrays")
    return _build(read(io.BytesIO(_npz_bytes(arrays)), where=where), f, where, ops)


def _build(arrays, f=None, where="tape", ops=None):
    """The function of arrays as :func:`read` returns them."""
    try:
        name, traces = parse(arrays, allow_empty=f is not None, ops=ops)
    except TapeFileError as e:
        raise TapeFileError(f"{where}: {e}") from None
    ft = LoadedFunction(name) if f is None else TracedFunction(f)
    for t in traces:
        ft.cache.setdefault(t["key"], []).append(_Replay.from_state(t))
    return ft


def load(path, ops=None, max_bytes=None):
    """Load a function saved with :meth:`TracedFunction.save`.

    The file is read with no pickle, in memory bounded by ``max_bytes``, and
    every index in it is checked before the compiled kernels see it.  The
    result replays like the traced function (call, ``grad``,
    ``value_and_grad``, ``vjp``, ``jacobian``, ``grad_batch``) but holds no
    Python code: a call whose guard fails, or with shapes no saved trace
    has, raises ``RuntimeError`` instead of tracing again.

    Parameters
    ----------
    path : str or path-like
        The ``.npz`` file; it must be a regular file (a device, FIFO or
        directory is refused before anything is read).
    ops : list or dict of elementwise ops, optional
        The ``tg.elementwise`` ops the function used (their compiled code is
        not in the file: the file names them, and they are matched by name).
    max_bytes : int, optional
        The most memory the loaded function may need: its arrays once
        unpacked plus the value and adjoint storage of every record (16 bytes
        an element) and a few hundred bytes of tables per record, estimated
        from the file's headers and record sizes before any of it is
        allocated.  Default: 1 GiB (``tapefile.DEFAULT_MAX_BYTES``) or four
        times the file's size, whichever is more.  Raise it for trusted
        files of traces with large intermediates; a ``grad_batch`` with
        ``w`` workers holds ``w`` copies of the storage on top.

    Raises
    ------
    ValueError
        The file is truncated, corrupted, not a tape file, of an unknown
        format version, holds members no tape file has, would need more than
        ``max_bytes``, or describes records whose indices, sizes or dtypes
        are inconsistent; the message names the check.  (A
        ``tapefile.TapeFileError``, a subclass of ``ValueError``.)

    Examples
    --------
    >>> import os, tempfile, numpy as np, tapegrad as tg
    >>> ft = tg.trace(lambda x: (x * x).sum(), np.zeros(3))
    >>> path = os.path.join(tempfile.mkdtemp(), "f.npz")
    >>> ft.save(path)
    >>> g = tg.load(path)
    >>> g.grad(np.array([1.0, 2.0, 3.0]))
    array([2., 4., 6.])
    >>> tg.load(path, max_bytes=100)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tapegrad.tapefile.TapeFileError: ...: its arrays and tables would take ... bytes, more than max_bytes=100; pass a larger max_bytes to tg.load if the file is trusted
    """
    if ops is not None and not isinstance(ops, dict):
        ops = {op.name: op for op in ops}
    return _build(read(path, max_bytes), where=str(path), ops=ops)


files.bind(save=save, function_state=function_state, npz_bytes=_npz_bytes,
           from_bytes=from_bytes)
