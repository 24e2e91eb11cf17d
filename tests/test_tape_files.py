"""ft.save / tg.load, pickling and grad_batch of traced functions.

Round trips must be bit-identical; hostile files must give a ValueError that
names the problem before anything reaches the compiled kernels (which do no
bounds checks).  The loader fuzz runs in a subprocess so that a crash there
would show as a failed test rather than a dead test run; set
``TAPEGRAD_FUZZ=long`` for a long run.
"""
import io
import json
import math
import multiprocessing
import os
import pickle
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.tracing.files import io as tapefile
from tapegrad.tracing.files.screen import _output_slots, _screen

W = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])


def _mixed(x):
    h = np.tanh(x @ W)                                    # host matmul, unary
    s = tg.softmax(h, axis=1)                             # softmax reduction
    z = np.concatenate([s.ravel(), x[1:, ::2].ravel()])   # gather, concat
    return ((np.cumsum(z) * (z > 0.1)).sum()              # scan, comparison
            + np.max(x, axis=0).sum() + tg.where(x > 0, x, x ** 2).mean())


def _branchy(x):
    if x.sum() > 0:                                       # a guard
        return (x ** 2).sum()
    return -np.exp(x).sum()


#: name -> (function, input shapes); together they cover the replayable families
FUNCS = {
    "elementwise": (lambda x: (np.sin(x) * 3.0 + np.log1p(x * x) - 1.0 / (2.0 + x)).sum(),
                    [(7,)]),
    "broadcast": (lambda a, b: (np.hypot(a, b) * np.maximum(a, b) + a / (1 + b * b)).sum(),
                  [(4, 1), (1, 5)]),
    "reductions": (lambda x: (np.prod(x[:2], axis=1).sum() + tg.logsumexp(x, axis=0).sum()
                              + x.mean(axis=(0, 2)).sum() + x.min()), [(3, 4, 2)]),
    "scans": (lambda x: (np.cumprod(x, axis=1) + np.cumsum(x, axis=0)).sum(), [(3, 4)]),
    "shapes": (lambda x: sum(p.sum() * (i + 1) for i, p in enumerate(np.split(x.T, 2)))
               + np.flip(x, 0)[::2].sum() + np.pad(x, 1).sum() + x[[0, 2, 2], 1].sum(),
               [(3, 4)]),
    "stack": (lambda a, b: (np.stack([a, b, a * b]) ** 2).sum(), [(5,), (5,)]),
    "linalg": (lambda a: (np.linalg.solve(SPD + a, np.ones(3)).sum()
                          + np.linalg.det(SPD + a) + np.linalg.inv(SPD + a).sum()
                          + np.einsum("ij,jk->ik", a, SPD).sum()
                          + np.linalg.cholesky(SPD + a @ a.T).sum()), [(3, 3)]),
    "mixed": (_mixed, [(5, 3)]),
    "branchy": (_branchy, [(4,)]),
    "constant": (lambda x: x.sum() * 0.0 + 2.0, [(3,)]),
    "vector_out": (lambda x: np.outer(x, x)[1:], [(3,)]),
}


def _inputs(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-0.4, 0.9, s) for s in shapes]


def _traced(name):
    f, shapes = FUNCS[name]
    ft = tg.trace(f, *_inputs(shapes, 0))
    return ft, shapes


def _results(ft, shapes, seeds=(1, 2, 3)):
    """Values and VJPs (a fixed cotangent) at a few fresh inputs, as flat arrays."""
    out = []
    for seed in seeds:
        xs = _inputs(shapes, seed)
        v = np.asarray(ft(*xs))
        ct = np.linspace(0.5, 1.5, v.size).reshape(v.shape)
        _, g = ft.vjp(*xs, ct)
        out.append(v.ravel())
        out.extend(np.ravel(a) for a in (g if isinstance(g, tuple) else (g,)))
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()   # bit-identical, NaN included


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_round_trip_bit_identical(name, tmp_path):
    ft, shapes = _traced(name)
    before = _results(ft, shapes)
    path = tmp_path / f"{name}.npz"
    ft.save(path)
    with np.load(path, allow_pickle=False) as z:    # plain arrays only
        assert all(z[k].dtype != object for k in z.files)
    g = tg.load(path)
    _same(_results(g, shapes), before)
    _same(_results(pickle.loads(pickle.dumps(ft)), shapes), before)


def test_round_trip_in_another_process(tmp_path):
    expected = {}
    for name in FUNCS:
        ft, shapes = _traced(name)
        expected[name] = _results(ft, shapes)      # first: may add a branch's trace
        ft.save(tmp_path / f"{name}.npz")
    code = (
        "import sys, json, numpy as np, tapegrad as tg\n"
        "sys.path.insert(0, %r)\n"
        "from test_tape_files import FUNCS, _results\n"
        "out = {}\n"
        "for name, (f, shapes) in FUNCS.items():\n"
        "    g = tg.load(%r + '/' + name + '.npz')\n"
        "    for i, a in enumerate(_results(g, shapes)):\n"
        "        out[f'{name}.{i}'] = a\n"
        "np.savez(%r, **out)\n"
    ) % (os.path.dirname(__file__), str(tmp_path), str(tmp_path / "out.npz"))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=900)
    with np.load(tmp_path / "out.npz") as z:
        for name, arrs in expected.items():
            _same([z[f"{name}.{i}"] for i in range(len(arrs))], arrs)


def test_loaded_function_api(tmp_path):
    ft, _ = _traced("branchy")
    ft.save(tmp_path / "b.npz")
    g = tg.load(tmp_path / "b.npz")
    x = -np.array([0.1, 0.2, 0.3, 0.4])      # the branch traced (negative sum)
    v, gr = g.value_and_grad(x)
    assert v == ft(x) and np.array_equal(gr, -np.exp(x))
    assert np.array_equal(g.jacobian(x), ft.jacobian(x))
    with pytest.raises(RuntimeError, match="guard failed"):
        g(-x)                      # the other branch was never traced
    with pytest.raises(RuntimeError, match="no trace for"):
        g(np.zeros(5))
    # a function saved after taking both branches replays both
    ft(-x)
    ft.save(tmp_path / "b2.npz")
    g2 = tg.load(tmp_path / "b2.npz")
    assert g2(-x) == ft(-x) and g2(x) == ft(x)


def test_float32_and_static_arguments(tmp_path):
    ft = tg.trace(lambda x, k: (x ** k).sum(), np.ones(3, np.float32), 3)
    ft.save(tmp_path / "f.npz")
    g = tg.load(tmp_path / "f.npz")
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert g.grad(x, 3).dtype == np.float32
    assert np.array_equal(g.grad(x, 3), ft.grad(x, 3))
    t = tg.trace(lambda x, s: x.sum() * len(s), np.ones(2), (1, 2))
    with pytest.raises(ValueError, match="static argument of type tuple"):
        t.save(tmp_path / "t.npz")


def test_user_ops_are_saved_by_name(tmp_path):
    sq = tg.elementwise(lambda x: x * x, lambda x, y: 2 * x, name="tf_square")
    hyp = tg.elementwise(lambda a, b: math.sqrt(a * a + b * b),
                         lambda a, b, y: (a / y, b / y), name="tf_hyp")
    ft = tg.trace(lambda x, z: (hyp(sq(x), z) + sq(z).sum()).sum(), np.ones((2, 3)),
                  np.ones(3))
    ft.save(tmp_path / "u.npz")
    with np.load(tmp_path / "u.npz") as z:     # no process-local addresses saved
        assert z["t0.ip"].max() < 2 ** 20
    shapes = [(2, 3), (3,)]
    with pytest.raises(ValueError, match="tf_hyp|tf_square"):
        tg.load(tmp_path / "u.npz")
    g = tg.load(tmp_path / "u.npz", ops=[sq, hyp])
    _same(_results(g, shapes), _results(ft, shapes))
    other = tg.elementwise(lambda x: x * x, lambda x, y: 2 * x, name="tf_hyp")
    with pytest.raises(ValueError, match="takes 1 argument"):
        tg.load(tmp_path / "u.npz", ops={"tf_square": sq, "tf_hyp": other})
    with pytest.raises(ValueError, match="cannot pickle"):
        pickle.dumps(ft)


# -- hostile files ------------------------------------------------------------------
def _arrays(name="mixed"):
    ft, _ = _traced(name)
    return tapefile.function_state(ft)


def _write(tmp_path, arrays, **kw):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays, **kw)
    return path


def _first(arrays, kind):
    op = arrays["t0.op"]
    return int(np.flatnonzero((op >> 6) == kind)[0])


def _edit(key, fn):
    def run(a):
        a[key] = a[key].copy()
        fn(a, a[key])
    return run


def _set_ip(kind, offset, value):
    def run(a):
        r = _first(a, kind)
        a["t0.ip"] = a["t0.ip"].copy()
        a["t0.ip"][a["t0.ip0"][r] + offset] = value(a, r)
    return run


def _parent_of(kind, value):
    def run(a):
        r = _first(a, kind)
        a["t0.args"] = a["t0.args"].copy()
        a["t0.args"][a["t0.arg0"][r]] = value(r)
    return run


HOSTILE = {
    # name: (edit of the arrays, part of the message)
    "parent out of range": (_parent_of(1, lambda r: 10 ** 9), "not an earlier record"),
    "parent not earlier": (_parent_of(1, lambda r: r), "not an earlier record"),
    "negative parent": (_parent_of(1, lambda r: -3), "not an earlier record"),
    "gather index past its operand": (_set_ip(5, 1, lambda a, r: 10 ** 6), "index map"),
    "gather index negative": (_set_ip(5, 1, lambda a, r: -7), "index map"),
    "gather count wrong": (_set_ip(5, 0, lambda a, r: 10 ** 6), "index map"),
    "concat position past its operand": (
        _set_ip(6, 1 + 2 * 0 + 1, lambda a, r: 10 ** 6), "out of range"),
    "broadcast stride past the end": (
        lambda a: _bcast_stride_edit(a), "strides"),
    "reduction strides inconsistent": (lambda a: _reduce_stride(a), "strides"),
    "scan block wrong": (_set_ip(8, 1, lambda a, r: 10 ** 4), "scan block"),
    "negative size": (_edit("t0.size", lambda a, s: s.__setitem__(3, -1)), "negative size"),
    "size inconsistent": (_edit("t0.size", lambda a, s: s.__setitem__(
        _first(a, 1), s[_first(a, 1)] + 1)), "differs"),
    "huge sizes": (_edit("t0.size", lambda a, s: s.__setitem__(0, 1 << 40)), "max_bytes"),
    "unknown op code": (_edit("t0.op", lambda a, s: s.__setitem__(2, 63 << 6)),
                        "unknown op code"),
    "freed stub op": (_edit("t0.op", lambda a, s: s.__setitem__(2, 3)), "cannot be loaded"),
    "user op code": (_edit("t0.op", lambda a, s: s.__setitem__(2, 9 << 6)), "user"),
    "strided selection": (_edit("t0.op", lambda a, s: s.__setitem__(_first(a, 5), 5 << 6 | 20)),
                          "cannot be loaded"),
    "csr not monotone": (_edit("t0.arg0", lambda a, s: s.__setitem__(5, s[6] + 1)),
                         "arg0"),
    "csr past args": (_edit("t0.arg0", lambda a, s: s.__setitem__(-1, 10 ** 6)), "arg0"),
    "ip0 out of range": (_edit("t0.ip0", lambda a, s: s.__setitem__(4, 10 ** 7)), "ip0"),
    "guard offset out of range": (
        lambda a: (a.__setitem__("t0.guard", np.full_like(a["t0.guard"], 1)),
                   a.__setitem__("t0.goff", np.full_like(a["t0.goff"], 10 ** 6))),
        "goff"),
    "leaf record wrong": (_edit("t0.leaf_rec", lambda a, s: s.__setitem__(0, 5)), "input 0"),
    "root out of range": (_edit("t0.root", lambda a, s: s.__setitem__(0, 10 ** 6)), "root"),
    "held values short": (lambda a: a.__setitem__("t0.held_vals", a["t0.held_vals"][:-1]),
                          "held_vals"),
    "host shape wrong": (lambda a: a.__setitem__("t0.host", _host_edit(a)), "operand shape"),
    "host json garbage": (lambda a: a.__setitem__("t0.host", np.frombuffer(
        b"\xff{", np.uint8)), "JSON"),
    "op wrong dtype": (lambda a: a.__setitem__("t0.op", a["t0.op"].astype(np.int32)),
                       "dtype int32"),
    "fp wrong dtype": (lambda a: a.__setitem__("t0.fp", a["t0.fp"].astype(np.float32)),
                       "dtype float32"),
    "ip wrong shape": (lambda a: a.__setitem__("t0.ip", a["t0.ip"].reshape(1, -1)),
                       "dimensions"),
    "input dtype unknown": (lambda a: a.__setitem__("t0.in_dtypes", np.array(["int64"])),
                            "dtype 'int64'"),
    "missing key": (lambda a: a.pop("t0.args"), "missing array 't0.args'"),
    "missing format": (lambda a: a.pop("format"), "missing array 'format'"),
    "format version unknown": (lambda a: a.__setitem__("format", np.array([99])),
                               "format version"),
    "trace count too large": (lambda a: a.__setitem__("n_traces", np.array([2])),
                              "missing array 't1.op'"),
    "signature wrong": (lambda a: a.__setitem__("t0.sig", np.frombuffer(
        b'[["static", "list", []]]', np.uint8)), "sig"),
}


def _bcast_stride_edit(a):
    # a broadcasting binary record: give operand 0 a stride past its end
    op, ip, ip0 = a["t0.op"], a["t0.ip"].copy(), a["t0.ip0"]
    for r in np.flatnonzero((op >> 6) == 3):
        b = ip0[r]
        if ip[b] > 0:
            ip[b + 1 + ip[b]] = 10 ** 6
            a["t0.ip"] = ip
            return
    raise AssertionError("no broadcasting record")


def _reduce_stride(a):
    op, ip, ip0, size = a["t0.op"], a["t0.ip"].copy(), a["t0.ip0"], a["t0.size"]
    for r in np.flatnonzero((op >> 6) == 4):
        b = ip0[r]
        if size[r] > 1 and ip[b] > 0:
            nd = ip[b]
            ip[b + 1 + nd:b + 1 + 2 * nd] = [3] * nd
            a["t0.ip"] = ip
            return
    raise AssertionError("no reduction with parameters")


def _host_edit(a):
    h = json.loads(a["t0.host"].tobytes())
    r = next(iter(h))
    h[r][0] = [7, 7]
    return np.frombuffer(json.dumps(h).encode(), np.uint8)


def test_views_named_in_a_file_hold_index_maps(tmp_path):
    """A file holds every gather as an index map (the replay's Index
    records): an Index record named as a transpose or a broadcast -- the
    views eager code records in the strided form -- loads as the Index
    record it is, and replays the same numbers."""
    a = _arrays()
    shapes = FUNCS["mixed"][1]
    want = _results(tg.load(_write(tmp_path, a)), shapes)
    op = a["t0.op"] = a["t0.op"].copy()
    r = int(np.flatnonzero(op == (5 << 6 | 1))[0])
    for sub in (0, 2):  # Transpose, Expand
        op[r] = 5 << 6 | sub
        _same(_results(tg.load(_write(tmp_path, a)), shapes), want)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file(case, tmp_path):
    edit, msg = HOSTILE[case]
    a = _arrays("broadcast" if case == "broadcast stride past the end" else
                "reductions" if case in ("reduction strides inconsistent",) else
                "scans" if case == "scan block wrong" else "mixed")
    edit(a)
    with pytest.raises(ValueError, match="bad.npz") as e:
        tg.load(_write(tmp_path, a))
    assert msg in str(e.value)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_valid_files_need_no_per_record_checks(name):
    """The vectorised screen flags no record of a valid file, so the Python
    per-record checks run only on host records (a million-record file loads
    in about a second: benchmarks/tapefile_load.py)."""
    a = {k[3:]: v for k, v in _arrays(name).items() if k.startswith("t0.")}
    op, arg0, args = a["op"], a["arg0"], a["args"]
    nparents, kinds = np.diff(arg0), op >> 6
    is_output, _, slots_bad = _output_slots(op, arg0, a["size"], a["ip0"], args,
                                            a["ip"], nparents, kinds)
    flagged = _screen(op, arg0, a["size"], a["ip0"], args, a["ip"], nparents,
                      kinds, is_output) | slots_bad
    assert not flagged.any(), np.flatnonzero(flagged)


def test_object_array_is_refused(tmp_path):
    a = _arrays()
    a["t0.host"] = np.array([{"x": 1}], dtype=object)
    path = tmp_path / "bad.npz"
    np.savez(path, **a)     # allowed to write with pickle; never read with it
    with pytest.raises(ValueError, match="object array"):
        tg.load(path)


def test_truncated_and_garbage_files(tmp_path):
    ft, _ = _traced("mixed")
    ft.save(tmp_path / "ok.npz")
    data = (tmp_path / "ok.npz").read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 30):
        (tmp_path / "t.npz").write_bytes(data[:cut])
        with pytest.raises(ValueError, match="not a readable tape file"):
            tg.load(tmp_path / "t.npz")
    (tmp_path / "g.npz").write_bytes(b"PK\x03\x04" + os.urandom(200))
    with pytest.raises(ValueError):
        tg.load(tmp_path / "g.npz")
    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(ValueError, match="not a"):
        tg.load(tmp_path / "plain.npy")
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "missing.npz")


# -- loader fuzz ----------------------------------------------------------------------
FUZZ_FUNCS = ("mixed", "broadcast", "reductions", "shapes", "linalg", "branchy", "scans",
              "user")
_CUBE = tg.elementwise(lambda x: x * x * x, lambda x, y: 3 * x * x, name="tf_cube")
_ATAN2 = tg.elementwise(lambda a, b: math.atan2(a, b),
                        lambda a, b, y: (b / (a * a + b * b), -a / (a * a + b * b)),
                        name="tf_atan2")
FUNCS_USER = (lambda x, z: (_ATAN2(_CUBE(x), z) * 2.0).sum(), [(2, 3), (1, 3)])


def _mutate(arrays, data, st):
    """One hostile edit drawn by hypothesis: an element of an array set to an
    interesting value, an array resized, retyped or dropped."""
    key = data.draw(st.sampled_from(sorted(arrays)))
    a = arrays[key]
    how = data.draw(st.sampled_from(["element", "element", "element", "resize", "dtype",
                                     "drop"]))
    if how == "drop":
        del arrays[key]
    elif how == "dtype" and a.dtype.kind != "U":
        arrays[key] = a.astype(data.draw(st.sampled_from(
            [np.int32, np.int64, np.float64, np.float32, np.uint8, np.bool_])))
    elif how == "resize":
        k = data.draw(st.integers(0, a.size + 3))
        arrays[key] = np.resize(a, k)
    elif how == "dtype":
        arrays[key] = np.array([data.draw(st.sampled_from(["int64", "object", "", "f8"]))])
    elif a.size and a.dtype.kind in "iuf":
        a = a.copy()
        i = data.draw(st.integers(0, a.size - 1))
        n = len(arrays.get("t0.op", ()))
        v = data.draw(st.sampled_from(
            [-1, 0, 1, 2, n - 1, n, n + 1, 7, 16, 17, -(2 ** 62), 2 ** 62, 2 ** 31]
            + [int(x) for x in a.ravel()[:64]]))
        if a.dtype.kind == "u":
            v %= 256
        elif a.dtype.kind == "i":
            v = int(np.clip(v, np.iinfo(a.dtype).min, np.iinfo(a.dtype).max))
        a.ravel()[i] = v
        arrays[key] = a
    return key, how


def _fuzz(examples, seed):
    """Run the loader fuzz here (meant for a subprocess); prints the counts."""
    import tempfile

    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    base = {}
    for name in FUZZ_FUNCS:
        if name == "user":
            f, shapes = FUNCS_USER
            ft = tg.trace(f, *_inputs(shapes, 0))
        else:
            ft, shapes = _traced(name)
        base[name] = (tapefile.function_state(ft), shapes)
    counts = {"rejected at load": 0, "loaded and ran": 0, "ran into a clear error": 0,
              "byte flips": 0}
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "fuzz.npz")

    def run_loaded(g, shapes, rng_seed):
        xs = _inputs(shapes, rng_seed)
        try:
            v = np.asarray(g(*xs))
            g.vjp(*xs, np.ones(v.shape))
            counts["loaded and ran"] += 1
        except (RuntimeError, ValueError, np.linalg.LinAlgError):
            counts["ran into a clear error"] += 1

    # a fixed seed draws the same files on every run; None (the long run) explores
    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data(), name=st.sampled_from(FUZZ_FUNCS), edits=st.integers(1, 3),
           flip=st.booleans())
    def one(data, name, edits, flip):
        arrays, shapes = base[name]
        arrays = dict(arrays)
        if flip and data.draw(st.integers(0, 3)) == 0:
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            raw = bytearray(buf.getvalue())
            for _ in range(edits):
                i = data.draw(st.integers(0, len(raw) - 1))
                raw[i] ^= data.draw(st.integers(1, 255))
            with open(path, "wb") as fh:
                fh.write(raw)
            counts["byte flips"] += 1
        else:
            for _ in range(edits):
                _mutate(arrays, data, st)
            np.savez(path, **arrays)
        try:
            g = tg.load(path, ops=[_CUBE, _ATAN2])
        except (ValueError, OSError, zipfile.BadZipFile) as e:
            assert isinstance(e, (ValueError, OSError)), repr(e)
            counts["rejected at load"] += 1
            return
        run_loaded(g, shapes, 5)

    one()
    print("FUZZ " + json.dumps(counts))
    return counts


def test_loader_fuzz_in_subprocess():
    long = os.environ.get("TAPEGRAD_FUZZ") == "long"
    examples = 5000 if long else 200
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from test_tape_files import _fuzz\n_fuzz(%d, %s)\n") % (
        os.path.dirname(__file__), examples, None if long else 0)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=3600 if long else 900)
    assert p.returncode == 0, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    line = [s for s in p.stdout.splitlines() if s.startswith("FUZZ ")][-1]
    counts = json.loads(line[5:])
    assert counts["rejected at load"] > 0 and counts["loaded and ran"] > 0
    print(counts)


# -- atomic saves -----------------------------------------------------------------------
def _listing(folder):
    return sorted(os.listdir(folder))


def test_interrupted_save_keeps_the_old_file(tmp_path, monkeypatch):
    """Ctrl-C half-way through a save: the previous file is intact and no
    partial file is left next to it."""
    ft, shapes = _traced("mixed")
    path = tmp_path / "f.npz"
    ft.save(path)
    before = path.read_bytes()
    real = np.savez

    def interrupted(fh, **arrays):
        real(fh, **arrays)
        fh.truncate(fh.tell() // 2)      # half of it written, then the signal
        raise KeyboardInterrupt
    monkeypatch.setattr(np, "savez", interrupted)
    g, _ = _traced("elementwise")
    with pytest.raises(KeyboardInterrupt):
        g.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _listing(tmp_path) == ["f.npz"]
    _same(_results(tg.load(path), shapes), _results(ft, shapes))


def test_a_signal_as_the_temporary_file_is_opened_leaves_none(tmp_path, monkeypatch):
    """Ctrl-C handled the moment the open of the temporary file returns (the
    file made, its descriptor not yet kept): the file is removed."""
    from tapegrad.tracing.files import io as tapefile
    ft, _ = _traced("mixed")
    path = tmp_path / "f.npz"
    ft.save(path)
    before = path.read_bytes()
    real = os.open

    def opened_then_interrupted(name, *args):
        fd = real(name, *args)
        os.close(fd)
        raise KeyboardInterrupt
    monkeypatch.setattr(tapefile.os, "open", opened_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        ft.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _listing(tmp_path) == ["f.npz"]


def test_save_replaces_atomically_and_keeps_the_mode(tmp_path):
    ft, shapes = _traced("broadcast")
    path = tmp_path / "f.npz"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    ft.save(path)
    assert _listing(tmp_path) == ["f.npz"]
    assert (os.stat(path).st_mode & 0o777) == 0o640
    link = tmp_path / "link.npz"
    os.symlink(path, link)
    ft.save(link)                        # follows the link, as open() would
    assert os.path.islink(link) and _listing(tmp_path) == ["f.npz", "link.npz"]
    _same(_results(tg.load(link), shapes), _results(ft, shapes))
    with pytest.raises(OSError):
        ft.save(tmp_path / "missing" / "f.npz")
    assert _listing(tmp_path) == ["f.npz", "link.npz"]


_SAVE_LOOP = r"""
import sys, numpy as np, tapegrad as tg
C = np.linspace(0.0, 1.0, 3_000_000)
ft = tg.trace(lambda x: (x * C).sum() + (x * x).sum(), np.ones(3_000_000))
ft.save(sys.argv[1])
print("saved", flush=True)
while True:
    ft.save(sys.argv[1])
"""


def test_sigint_during_saves_in_another_process(tmp_path):
    """A process saving a 48 MB trace over and over, interrupted at random
    moments: every time, the file on disk is a complete tape file and no
    temporary file is left."""
    path = tmp_path / "big.npz"
    rng = np.random.default_rng(0)
    for delay in rng.uniform(0.05, 0.4, 3):
        p = subprocess.Popen([sys.executable, "-c", _SAVE_LOOP, str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "saved", p.stderr.read()[-2000:]
            import time
            time.sleep(delay)
            p.send_signal(2)             # SIGINT: KeyboardInterrupt in the save
            p.wait(timeout=300)
        finally:
            p.kill()
            p.wait()
        assert _listing(tmp_path) == ["big.npz"]
        g = tg.load(path)
        assert float(g(np.ones(3_000_000))) == pytest.approx(1.5e6 + 3e6)


def test_save_refuses_what_is_not_a_regular_file(tmp_path):
    """A rename over a FIFO (or a device: as root, /dev/null) would replace it
    with a plain file: a save there raises, naming the path and what it is,
    before anything is written, through a symlink too."""
    ft, _ = _traced("elementwise")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link.npz"
    os.symlink(fifo, link)
    folder = tmp_path / "folder"
    folder.mkdir()
    before = _listing(tmp_path)
    for path, what in [(fifo, "a FIFO"), (link, "a FIFO"), (folder, "a directory")]:
        with pytest.raises(ValueError) as info:
            ft.save(path)
        msg = str(info.value)
        assert str(path) in msg and what in msg and "regular file" in msg, msg
        assert _listing(tmp_path) == before        # no temporary file either
    assert "symlink to" in _message_of(ft, link) and str(fifo) in _message_of(ft, link)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.path.islink(link)
    assert _listing(folder) == []


def _message_of(ft, path):
    with pytest.raises(tapefile._files.NotARegularFileError) as info:
        ft.save(path)
    return str(info.value)


# the save of a trace of 400,000 constants, stopped half-way through writing:
# killed (SIGKILL) or paused until killed from outside
_KILLED_SAVE = r"""
import os, signal, sys, time, numpy as np, tapegrad as tg
C = np.linspace(0.0, 1.0, 400_000)
ft = tg.trace(lambda x: (x * C).sum(), np.ones(400_000))
real = np.savez
def stopped(fh, **arrays):
    real(fh, **arrays)
    fh.flush()
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    print("writing", flush=True)
    time.sleep(600)
np.savez = stopped
ft.save(sys.argv[1])
"""


def _stopped_save(path, how):
    return subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(path), how],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_killed_save_leaves_a_temporary_file_the_next_save_removes(tmp_path):
    """SIGKILL in the middle of a save leaves its temporary file (nothing can
    remove it then); the next save to that path removes the temporary files
    whose writer is gone, and keeps a live writer's and other paths'."""
    ft, shapes = _traced("elementwise")
    path, other = tmp_path / "f.npz", tmp_path / "g.npz"
    firsts = []
    for target in (path, other, path):          # killed saves of f, g, and f again
        p = _stopped_save(target, "kill")
        assert p.wait(timeout=300) == -9, p.stderr.read()[-2000:]
        firsts.append(_listing(tmp_path))
    # the second killed save of f removed the first one's file as it started
    assert len(firsts[0]) == 1 and len(firsts[1]) == 2 and firsts[0][0] not in firsts[2]
    left = _listing(tmp_path)
    assert len(left) == 2 and all(n.endswith(".tmp") and "tapegrad-" in n for n in left)
    assert all(os.path.getsize(tmp_path / n) > 1_000_000 for n in left)
    live = _stopped_save(path, "pause")         # a save of f still writing
    try:
        assert live.stdout.readline().strip() == "writing", live.stderr.read()[-2000:]
        (mine,) = [n for n in _listing(tmp_path) if n not in left]
        assert f"tapegrad-{live.pid}@" in mine
        ft.save(path)
        assert _listing(tmp_path) == sorted(
            ["f.npz", mine] + [n for n in left if n.startswith(".g.npz.")])
        _same(_results(tg.load(path), shapes), _results(ft, shapes))
    finally:
        live.kill()
        live.wait()
    ft.save(path)                               # its writer is gone now
    ft.save(other)
    assert _listing(tmp_path) == ["f.npz", "g.npz"]


# -- non-files, bombs, crafted pickles ---------------------------------------------------
def test_non_regular_files_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cases = [("/dev/zero", "character device"), (fifo, "FIFO"), (tmp_path, "directory")]
    # in a subprocess with a time limit: a reader that reads /dev/zero until
    # memory runs out, or blocks on the FIFO, shows as a failure, not a hang
    code = ("import sys, tapegrad as tg\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        tg.load(p)\n"
            "    except ValueError as e:\n"
            "        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, *[str(c) for c, _ in cases]],
                         capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == len(cases), (out.stdout, out.stderr[-2000:])
    for line, (p, what) in zip(lines, cases):
        assert line.startswith(str(p)) and what in line and "regular file" in line


def _zip_with(tmp_path, arrays, extra=(), compress=zipfile.ZIP_STORED, name="bomb.npz"):
    """A tape file of ``arrays`` written member by member (``extra``: further
    ``(member name, bytes)``), optionally deflated."""
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", compression=compress) as zf:
        for k, v in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(v), allow_pickle=False)
            zf.writestr(k + ".npy", buf.getvalue())
        for k, data in extra:
            zf.writestr(k, data)
    return path


def _declared_size_bomb():
    """The arrays of a trace with one scalar input whose product record claims
    2**31 - 4 elements; every index check passes (one-element operands
    broadcast without a block, a full sum needs none)."""
    ft = tg.trace(lambda x: (x * np.ones(7)).sum(), np.float64(1.0))
    a = dict(tapefile.function_state(ft))
    size = a["t0.size"].copy()
    size[1], size[2] = 1, (1 << 31) - 4
    a["t0.size"], a["t0.held_vals"] = size, np.ones(1)
    return a


def test_declared_size_bomb_is_refused_before_allocating(tmp_path):
    a = _declared_size_bomb()
    path = _zip_with(tmp_path, a)
    assert os.path.getsize(path) < 8000
    with pytest.raises(ValueError, match="values and adjoints would take 3435974[0-9]{4} bytes"):
        tg.load(path)
    # the same records at a sensible size load and run
    a["t0.size"][2] = 7
    g = tg.load(_zip_with(tmp_path, a, name="ok.npz"))
    assert float(g(np.float64(2.0))) == 14.0
    # max_bytes is the knob, both ways
    with pytest.raises(ValueError, match="max_bytes=1000"):
        tg.load(tmp_path / "ok.npz", max_bytes=1000)
    with pytest.raises(TypeError, match="max_bytes"):
        tg.load(tmp_path / "ok.npz", max_bytes=-1)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_unknown_members_are_refused_before_reading(tmp_path):
    a = _arrays("broadcast")
    junk = b"\0" * (64 << 20)          # 64 MiB of zeros, deflated to ~64 KiB
    path = _zip_with(tmp_path, a, [("junk.npy", junk)], zipfile.ZIP_DEFLATED)
    with pytest.raises(ValueError, match="unknown member 'junk.npy'"):
        tg.load(path)
    for extra in (["t0.op.npy"], ["t1.op.npy"], ["t0.unknown.npy"], ["__MACOSX/x"]):
        with pytest.raises(ValueError, match="unknown member|appears twice"):
            tg.load(_zip_with(tmp_path, a, [(extra[0], b"x")], name="x.npz"))


def test_member_bombs_are_refused_before_decompressing(tmp_path):
    a = _arrays("broadcast")
    # a known member deflated 1000 to 1: its header says 1 GiB
    big = dict(a, **{"t0.ip": np.zeros(1 << 27, np.int64)})
    path = _zip_with(tmp_path, big, compress=zipfile.ZIP_DEFLATED)
    assert os.path.getsize(path) < 2 << 20
    with pytest.raises(ValueError, match="members would unpack to"):
        tg.load(path)
    # a header that claims more than the zip directory says the member holds
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<i8", "fortran_order": False, "shape": (9999999999,)})
    raw = buf.getvalue() + bytes(24)
    hacked = {k: v for k, v in a.items() if k != "t0.gvals"}
    path = _zip_with(tmp_path, hacked, [("t0.gvals.npy", raw)], name="h.npz")
    with pytest.raises(ValueError, match="declares 9999999999 elements"):
        tg.load(path)


def test_peak_memory_of_the_worst_small_files(tmp_path):
    """Loading each hostile small file in a fresh process allocates a few MiB
    at most, whatever the file claims."""
    files = {
        "declared-size bomb": _zip_with(tmp_path, _declared_size_bomb(), name="d.npz"),
        "member bomb (1 GiB deflated)": _zip_with(
            tmp_path, dict(_arrays("broadcast"), **{"t0.ip": np.zeros(1 << 27, np.int64)}),
            compress=zipfile.ZIP_DEFLATED, name="m.npz"),
        "unknown member (1 GiB deflated)": _zip_with(
            tmp_path, _arrays("broadcast"), [("x.npy", b"\0" * (1 << 30))],
            zipfile.ZIP_DEFLATED, name="u.npz"),
    }
    # tracemalloc sees NumPy's allocations too; ru_maxrss as a second opinion
    code = ("import resource, sys, tracemalloc, tapegrad as tg\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "tracemalloc.start()\n"
            "try:\n    tg.load(sys.argv[1])\nexcept ValueError:\n    pass\n"
            "peak = tracemalloc.get_traced_memory()[1] // 1024\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base, peak)\n")
    for what, path in files.items():
        assert os.path.getsize(path) < 2 << 20
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        rss_kib, peak_kib = map(int, out.stdout.split()[-2:])
        print(f"{what}: {os.path.getsize(path)} bytes, traced peak {peak_kib} KiB, "
              f"max RSS +{rss_kib} KiB")
        assert peak_kib < 16 << 10 and rss_kib < 64 << 10, (what, peak_kib, rss_kib)


def test_crafted_pickles_meet_the_file_checks():
    """A pickle of a traced function holds tape-file bytes that unpickling
    reads like a file: a hostile one gives the same error as tg.load."""
    ft, shapes = _traced("mixed")
    assert b"from_bytes" in pickle.dumps(ft)
    for case in ("parent out of range", "huge sizes", "gather index past its operand"):
        a = _arrays()
        HOSTILE[case][0](a)
        crafted = pickle.dumps(_Call(tapefile.from_bytes, (tapefile._npz_bytes(a), None)))
        with pytest.raises(ValueError, match="pickled traced function") as e:
            pickle.loads(crafted)
        assert HOSTILE[case][1] in str(e.value)
    # the older form (a dict of arrays) goes through the same reader
    a = _arrays()
    a["t0.host"] = np.array([{"x": 1}], dtype=object)
    with pytest.raises(ValueError, match="object array"):
        pickle.loads(pickle.dumps(_Call(tapefile.from_arrays, (a, None, "pickled"))))
    with pytest.raises(ValueError, match="not a dict of plain arrays"):
        tapefile.from_arrays({"format": np.ma.masked_array([1])})
    with pytest.raises(ValueError, match="not bytes"):
        tapefile.from_bytes("PK")


class _Call:
    """Pickles as a call of ``fn(*args)``: what a crafted pickle can ask for."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


# -- pickling, multiprocessing, grad_batch -------------------------------------------
def test_pickle_keeps_python_function_when_it_can():
    ft, _ = _traced("branchy")         # a module-level function: it pickles
    g = pickle.loads(pickle.dumps(ft))
    assert type(g) is tg.TracedFunction
    x = np.array([-0.5, -0.1, 0.2, 0.1])
    assert np.array_equal(g.grad(x), ft.grad(x))   # retraces: g kept the function
    h = pickle.loads(pickle.dumps(tg.trace(lambda x: (x * x).sum(), np.ones(2))))
    assert type(h).__name__ == "LoadedFunction"


def test_untraced_compiled_function(tmp_path):
    cf = tg.compile(_branchy)
    with pytest.raises(ValueError, match="not been traced"):
        cf.save(tmp_path / "c.npz")
    again = pickle.loads(pickle.dumps(cf))       # keeps its Python function
    assert again(np.ones(4)) == 4.0


def test_multiprocessing_spawn_pool():
    ft, shapes = _traced("mixed")
    xs = [_inputs(shapes, s)[0] for s in range(6)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        got = pool.map(ft.grad, xs)
    for x, g in zip(xs, got):
        assert g.tobytes() == ft.grad(x).tobytes()


@pytest.mark.parametrize("name", ["mixed", "branchy", "broadcast", "linalg"])
def test_grad_batch_equals_one_by_one(name):
    ft, shapes = _traced(name)
    rng = np.random.default_rng(4)
    X = [rng.uniform(-0.9, 0.9, (9,) + s) for s in shapes]
    got = ft.grad_batch(*X)
    got = got if isinstance(got, tuple) else (got,)
    for i in range(9):
        one = ft.grad(*[x[i] for x in X])
        one = one if isinstance(one, tuple) else (one,)
        for a, b in zip(got, one):
            assert a[i].tobytes() == b.tobytes()
    for w in (1, 3):
        again = ft.grad_batch(*X, workers=w)
        again = again if isinstance(again, tuple) else (again,)
        for a, b in zip(got, again):
            assert a.tobytes() == b.tobytes()


def test_grad_batch_errors():
    ft = tg.trace(lambda x: x * 2.0, np.ones(2))
    with pytest.raises(RuntimeError, match="one output element"):
        ft.grad_batch(np.ones((3, 2)))
    with pytest.raises(ValueError, match="leading"):
        tg.trace(lambda a, b: (a * b).sum(), 1.0, 1.0).grad_batch(np.ones(3), np.ones(4))


if __name__ == "__main__":
    _fuzz(int(sys.argv[1]) if len(sys.argv) > 1 else 200, 0)
