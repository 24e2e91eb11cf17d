"""Traced functions as plain NumPy arrays: ``ft.save(path)``, ``tg.load(path)``
and pickling.

A file is one ``.npz`` of numeric and fixed-width string arrays -- never an
object array, never pickled code -- read back with ``allow_pickle=False``.
Per trace ``k`` (keys ``t<k>.<name>``) it holds the records (``op``, ``arg0``,
``size``, ``ip0``, ``args``, ``ip``, ``fp``), the values of records a replay
does not recompute (constants), the input and output records with their
shapes and dtypes, the guards, and the host ops' shape information as JSON
text.  ``format`` is the version.

The compiled replay and sweep do no bounds checks, so :func:`parse`
(:mod:`tapegrad.tracing.files.checks`) checks every index they will follow
before anything reaches them: op codes known to the registry and
replayable, parents earlier than their record, CSR offsets monotone, every
integer parameter block inside ``ip`` and every index map, stride and shape
in it consistent with the sizes of the records it addresses.  A file that
fails gives a ``ValueError`` (:class:`TapeFileError`) naming the check.

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
leaves the previous file as it was.  The target must be a regular file or a
new path: a FIFO, a device, a socket or a directory (or a symlink to one)
raises before anything is written, where a rename would replace it with a
plain file.  A save killed outright leaves its temporary file, named for
the target and the process (``.<name>.tapegrad-<pid>@<host>.<hex>.tmp``);
the next save to that path removes those whose process is gone
(:mod:`tapegrad.kernels._files`).

Pickling a traced function stores the same ``.npz`` bytes, and unpickling
reads them through :func:`read` and :func:`parse` like a file.  Unpickling
itself can run any code the pickle names, as any pickle can: load traces
from untrusted sources with :func:`load` only, never with ``pickle``.
"""
import io
import json
import os
import re
import stat
import zipfile

import numpy as np

from ...kernels import _files
from ...kernels import codes as C
from ...kernels import replay as RK
from ...core.registry import REGISTRY
from .checks import (  # noqa: F401  (FLOAT_DTYPES: part of this module's API)
    FLOAT_DTYPES, FORMAT_VERSION, MAX_ELEMENTS, TapeFileError, _FIELDS, _I8, _bad, parse)
from ..replay import _HOST_FORWARD, _NOT_REPLAYABLE, _Replay
from ..function import LoadedFunction, TracedFunction, files

#: what :func:`load` lets a file cost by default (bytes): its arrays once
#: read plus the value and adjoint storage and the tables its records need;
#: ``tg.load(path, max_bytes=...)`` raises or lowers it
DEFAULT_MAX_BYTES = 1 << 30
#: bytes of tables per record a loaded trace holds besides its values and
#: adjoints (offsets, pointers, the validator's screens), used in the estimate
_PER_RECORD = 256


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
    from ...ops.custom import USER_OPS
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
    from ...ops.custom import USER_OPS
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
    """Write ``ft``'s traces to ``path`` (an ``.npz``), atomically
    (:func:`tapegrad.kernels._files.write_atomic`): ``path`` is a regular
    file or a new path, else
    :class:`~tapegrad.kernels._files.NotARegularFileError` (a ``ValueError``)
    is raised before anything is written."""
    target = os.path.realpath(os.fspath(path))
    _files.check_target(path, target)     # before the arrays are built
    arrays = function_state(ft)
    if int(arrays["n_traces"][0]) == 0:
        raise ValueError(f"{ft.__name__} has not been traced yet: call it once first")
    _files.write_atomic(path, lambda fh: np.savez(fh, **arrays))


# -- reading --------------------------------------------------------------------------
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
            _bad(f"is {_files.describe_mode(st.st_mode)}; tape files are regular files")
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
    """A :class:`~tapegrad.tracing.function.LoadedFunction` (or a ``TracedFunction``
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
    tapegrad.tracing.files.io.TapeFileError: ...: its arrays and tables would take ... bytes, more than max_bytes=100; pass a larger max_bytes to tg.load if the file is trusted
    """
    if ops is not None and not isinstance(ops, dict):
        ops = {op.name: op for op in ops}
    return _build(read(path, max_bytes), where=str(path), ops=ops)


files.bind(save=save, function_state=function_state, npz_bytes=_npz_bytes,
           from_bytes=from_bytes)
