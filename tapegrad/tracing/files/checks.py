"""The checks a tape file's arrays pass before any kernel sees them:
:func:`parse`.

The compiled replay and sweep do no bounds checks, so every index they will
follow is checked here: op codes known to the registry and replayable,
parents earlier than their record, CSR offsets monotone, every integer
parameter block inside ``ip`` and every index map, stride and shape in it
consistent with the sizes of the records it addresses, guards, host ops'
shape information, user ops matched by name.  A vectorised screen
(:mod:`tapegrad.tracing.files.screen`) flags the records whose parameters need
a closer look and ``_validate_trace`` walks those one by one; a trace that fails gives a
:class:`TapeFileError` naming the check.  Reading and writing the files is
:mod:`tapegrad.tracing.files.io`.
"""
import json
import math

import numpy as np

from ...kernels import codes as C
from ...kernels import replay as RK
from ...core.registry import BY_NAME, REGISTRY
from .screen import _OUTPUT, _op_status, _output_slots, _screen
from ..replay import _HOST_EXTRA

#: version of the file layout; a loader refuses versions it does not know
FORMAT_VERSION = 1
#: dtypes inputs and outputs may have
FLOAT_DTYPES = ("float64", "float32", "float16")
#: a file may not ask for more value storage than this (elements, all records)
MAX_ELEMENTS = 1 << 31

_I8, _F8 = np.dtype(np.int64), np.dtype(np.float64)
#: per-trace arrays and the dtype each must have exactly
_FIELDS = {
    "op": _I8, "arg0": _I8, "size": _I8, "ip0": _I8, "args": _I8, "ip": _I8,
    "fp": _F8, "held": _I8, "held_vals": _F8, "leaf_rec": _I8, "in_ndim": _I8,
    "in_dims": _I8, "in_dtypes": "U", "out_shape": _I8, "out_dtype": "U", "root": _I8,
    "const_out": _F8, "guard": _I8, "goff": _I8, "gvals": _F8, "host": np.dtype(np.uint8),
    "sig": np.dtype(np.uint8), "user": np.dtype(np.uint8),
}
_LEAF = C.code(C.K_NONE, C.LEAF)
_INDEX = C.code(C.K_GATHER, C.INDEX)
#: the strided gathers a file may name, each holding an index map
_MAPPED_VIEWS = np.array([C.code(C.K_GATHER, s) for s in C.STRIDED if s != C.SLICE], np.int64)


class TapeFileError(ValueError):
    """A tape file (or pickled trace) that is not a valid tapegrad trace."""


# public as tapegrad.tracing.files.io.TapeFileError, where tracebacks and pickles name it
TapeFileError.__module__ = "tapegrad.tracing.files.io"


# -- array checks ---------------------------------------------------------------------
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


def _validate_trace(a, k, ops):
    """Check one trace's arrays (dict of name -> array); returns the parsed
    signature, host dict, shapes and dtypes."""
    p = f"t{k}."
    g = {name: _arr(a, p + name, dt) for name, dt in _FIELDS.items()}
    # a file holds every gather as an index map, as a replay does: the codes
    # of views that eager code records in the strided form (transpose, ...)
    # are read as the Index records they are (no file holds a Slice: refused
    # below with the codes that cannot be loaded)
    g["op"] = np.where(np.isin(g["op"], _MAPPED_VIEWS), _INDEX, g["op"])
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
            arity = BY_NAME[what].file_arity   # operands a file may give it (its row)
            if arity is None:
                _bad(f"record {r} ({what}): a tape file cannot hold this op")
            if arity == "subscripts":
                arity = len(h[0]) if len(h) > 2 and isinstance(h[0], list) else -1
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
