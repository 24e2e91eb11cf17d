"""The interpreted tier's budget across processes (kernels/ledger.py).

A kernel that each run of a script interprets for a good part of a second
is compiled by the run in which what the runs would have saved with it
cached (their interpretation past the price of a load) passes its budget;
runs of small work add nothing.  The ledger file beside the compiled
kernels is read and merged, never trusted when it is damaged, and a folder
that cannot hold it leaves the budget per process, without a word.  Each
run is a fresh process with its own Numba cache, calling one small kernel
(``erf`` of n elements, about 0.8 us an element interpreted) once; most
runs take the price of a first load for the tier's LOAD_BUDGET (0.05 s)
rather than ledger.FIRST_LOAD (0.4 s), so that a fraction of a second of
interpretation stands for a run that a cached kernel would have made
faster.
"""
import glob
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tapegrad.kernels import interpret, ledger

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = "tapegrad.kernels.special_arrays._erf"
#: a run of erf over BIG elements interprets it for well over LOAD_BUDGET,
#: one over SMALL for much less
BIG, SMALL = 400_000, 500
#: the tier's estimate of a call over BIG elements (x and y) and a budget
#: just above it: one run alone interprets the call, the runs together pass it
ESTIMATE = 2 * BIG * interpret.PER_ELEMENT
BUDGET = ESTIMATE + 0.1

_RUN = """
    import math, sys
    import numpy as np
    from tapegrad.kernels import interpret, ledger, special_arrays as S
    if len(sys.argv) > 2:
        ledger.FIRST_LOAD = float(sys.argv[2])
    x = np.linspace(-2.0, 2.0, int(sys.argv[1]))
    y = np.empty_like(x)
    S._erf(x, y)
    i = np.arange(0, x.size, max(1, x.size // 500))
    assert np.allclose(y[i], [math.erf(v) for v in x[i]], rtol=1e-15, atol=0)
    k = S._erf   # the recorded kernel, or its dispatcher once Numba is loaded
    if "numba" not in sys.modules or not k.overloads:
        tier = "interpreted"
    else:
        tier = "loaded" if sum(k.stats.cache_hits.values()) else "compiled"
    st = interpret._states.get(k.py_func)
    print(tier, repr(st.spent if st is not None else 0.0))
"""


def _env(cache, **extra):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), TAPEGRAD_QUIET="1",
               TAPEGRAD_INTERPRET=repr(BUDGET))
    env.pop(ledger.ENV, None)
    env.update(extra)
    return env


def _start(cache, n, first_load="0", **extra):
    """A run over ``n`` elements; ``first_load``: ledger.FIRST_LOAD there
    (None: as it is; "0": the tier's LOAD_BUDGET)."""
    argv = [str(n)] + ([] if first_load is None else [first_load])
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(_RUN), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=_env(cache, **extra))


def _finish(p):
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and err == "", err
    tier, spent = out.split()
    return tier, float(spent)


def _run(cache, n=BIG, first_load="0", **extra):
    """One run of the script: ``(tier, seconds it interpreted the kernel)``."""
    return _finish(_start(cache, n, first_load, **extra))


def _stamp_folder(cache):
    found = glob.glob(os.path.join(str(cache), "tapegrad", "*", ""))
    assert len(found) == 1, found
    return found[0]


def _ledger_file(cache):
    found = glob.glob(os.path.join(str(cache), "tapegrad", "*", ledger.NAME))
    return found[0] if found else None


def _seconds(cache):
    """What the ledger in ``cache`` holds for the test's kernel (None: no file)."""
    path = _ledger_file(cache)
    if path is None:
        return None
    with open(path) as f:
        lines = f.read().split("\n")
    assert lines[0].startswith("tapegrad-interpreted 1 ") and lines[-1] == ""
    return {name: float(s) for s, _, name in (line.partition(" ") for line in lines[1:-1])
            }.get(KERNEL, 0.0)


def test_a_kernel_interpreted_run_after_run_is_compiled_once_the_runs_have_paid(tmp_path):
    # without the ledger, every run interprets: none alone reaches the budget
    for _ in range(2):
        assert _run(tmp_path / "off", **{ledger.ENV: "0"})[0] == "interpreted"
    assert _ledger_file(tmp_path / "off") is None
    # with it, each run adds what it interpreted past the price of a first
    # load, and the run that would pass the budget compiles the kernel at
    # its first call
    cache, paid, last, tiers = tmp_path / "on", 0.0, 0.0, []
    while len(tiers) < 12:
        tier, spent = _run(cache)
        tiers.append(tier)
        if tier != "interpreted":
            break
        assert spent > interpret.LOAD_BUDGET
        paid, last = paid + spent - interpret.LOAD_BUDGET, spent - interpret.LOAD_BUDGET
        assert _seconds(cache) == pytest.approx(paid, rel=1e-12)
    assert tiers[0] == "interpreted" and tiers[-1] == "compiled", tiers
    assert paid + ESTIMATE > BUDGET
    assert paid - last + ESTIMATE <= BUDGET   # the run before still interpreted
    # compiled, it is cached and off the ledger
    assert _seconds(cache) == 0.0
    index = glob.glob(os.path.join(str(cache), "**", "special_arrays._erf-*.nbi"), recursive=True)
    assert index
    # and the next run loads it (its work is past a load's price)
    assert _run(cache) == ("loaded", 0.0)
    assert _seconds(cache) == 0.0


def test_runs_of_small_work_add_nothing(tmp_path):
    # interpreting erf of 500 elements costs less than loading the kernel
    # would: however often it runs, it stays interpreted, and nothing is kept
    for _ in range(3):
        tier, spent = _run(tmp_path, SMALL, first_load=None)
        assert tier == "interpreted" and 0 < spent < interpret.LOAD_BUDGET
    assert _ledger_file(tmp_path) is None


def test_processes_that_exit_together_add_up(tmp_path):
    procs = [_start(tmp_path, BIG, TAPEGRAD_INTERPRET="10") for _ in range(4)]
    total = 0.0
    for p in procs:
        tier, spent = _finish(p)
        assert tier == "interpreted"
        total += spent - interpret.LOAD_BUDGET
    assert _seconds(tmp_path) == pytest.approx(total, rel=1e-12)


def test_a_damaged_ledger_is_ignored_and_replaced(tmp_path):
    assert _run(tmp_path, TAPEGRAD_INTERPRET="10")[0] == "interpreted"
    path = _ledger_file(tmp_path)
    with open(path) as f:
        header = f.readline().rstrip("\n")
    # what would compile the kernel at once, were it believed, behind a line
    # that is not the ledger's: the file counts as empty
    with open(path, "wb") as f:
        f.write(f"{header}\n1e9 {KERNEL}\nnot a line of the ledger\n".encode())
    tier, spent = _run(tmp_path, TAPEGRAD_INTERPRET="10")
    assert tier == "interpreted"
    assert _seconds(tmp_path) == pytest.approx(spent - interpret.LOAD_BUDGET, rel=1e-12)


@pytest.mark.parametrize("content", [
    b"\xff\xfe\x00 not text",
    b"",
    b"HEADER\n1e9 K\n\xff\n",
    b"HEADER\n1e9 K",                            # cut short: no final newline
    b"HEADER\nnan K\n",
    b"HEADER\ninf K\n",
    b"HEADER\n-1 K\n",
    b"HEADER\n1e9 K with spaces\n",
    b"HEADER\n1e9\n",
    b"tapegrad-interpreted 1 0.0.0 otherstamp\n1e9 K\n",   # another version's
    b"HEADER\n" + b"1 x\n" * (ledger.MAX_BYTES // 4),      # not one ledger.py wrote
], ids=["not-text", "empty", "bad-utf8", "cut-short", "nan", "inf", "negative", "spaces",
        "no-name", "other-version", "too-large"])
def test_read_refuses_what_is_not_a_whole_ledger(tmp_path, content):
    header = "tapegrad-interpreted 1 1.0 abc"
    path = tmp_path / ledger.NAME
    content = content.replace(b"HEADER", header.encode())
    path.write_bytes(content.replace(b" K", b" " + KERNEL.encode()))
    assert ledger.read(str(path), header) == {}


def test_read_takes_a_whole_ledger(tmp_path):
    header = "tapegrad-interpreted 1 1.0 abc"
    path = tmp_path / ledger.NAME
    other = "tapegrad.kernels.hvp._sweep_block"
    path.write_text(f"{header}\n0.25 {KERNEL}\n1.5 {other}\n")
    assert ledger.read(str(path), header) == {KERNEL: 0.25, other: 1.5}
    os.mkfifo(tmp_path / "fifo")   # never opened (it would block)
    assert ledger.read(str(tmp_path / "fifo"), header) == {}
    assert ledger.read(str(tmp_path / "absent"), header) == {}


def test_a_cache_folder_that_cannot_hold_the_ledger_changes_nothing(tmp_path):
    # NUMBA_CACHE_DIR under a regular file: no cache folder at all
    (tmp_path / "file").write_text("")
    assert _run(tmp_path / "file" / "cache", TAPEGRAD_INTERPRET="10")[0] == "interpreted"
    # the ledger's name taken by a folder: neither read nor written
    assert _run(tmp_path / "c", SMALL)[0] == "interpreted"
    path = os.path.join(_stamp_folder(tmp_path / "c"), ledger.NAME)
    os.mkdir(path)
    assert _run(tmp_path / "c", TAPEGRAD_INTERPRET="10")[0] == "interpreted"
    assert os.path.isdir(path) and os.listdir(path) == []


def test_the_tier_s_own_settings_leave_the_ledger_alone(tmp_path):
    # forced interpretation keeps no seconds
    assert _run(tmp_path / "force", TAPEGRAD_INTERPRET="force")[0] == "interpreted"
    assert _ledger_file(tmp_path / "force") is None
    # a ledger that says the kernel has paid is not read with the variable at
    # 0 (and is, without it)
    assert _run(tmp_path / "c", SMALL)[0] == "interpreted"
    import tapegrad
    folder = _stamp_folder(tmp_path / "c")
    with open(os.path.join(folder, ledger.NAME), "w") as f:
        f.write(f"tapegrad-interpreted 1 {tapegrad.__version__} {os.path.basename(folder[:-1])}\n"
                f"1e9 {KERNEL}\n")
    assert _run(tmp_path / "c", SMALL, **{ledger.ENV: "0"})[0] == "interpreted"
    assert _seconds(tmp_path / "c") == 1e9
    assert _run(tmp_path / "c", SMALL)[0] == "compiled"
    assert _seconds(tmp_path / "c") == 0.0


@pytest.fixture
def fresh_ledger(monkeypatch, tmp_path):
    """This process's ledger state, empty, writing to ``tmp_path``."""
    monkeypatch.setattr(ledger, "_prior", [])
    monkeypatch.setattr(ledger, "_added", {})
    monkeypatch.setattr(ledger, "_dropped", set())
    monkeypatch.setattr(ledger, "_hooked", [os.getpid()])   # no atexit hook from a test
    monkeypatch.delenv(ledger.ENV, raising=False)
    header = "tapegrad-interpreted 1 1.0 abc"
    where = (str(tmp_path / ledger.NAME), str(tmp_path / ledger.LOCK), header)
    monkeypatch.setattr(ledger, "_where", lambda: where)
    return where


def test_the_price_of_a_load_that_a_run_would_have_paid(monkeypatch):
    monkeypatch.setattr(interpret, "_warm", [])   # nothing loaded yet: Numba's start too
    assert ledger._load_price() == ledger.FIRST_LOAD
    monkeypatch.setattr(ledger, "FIRST_LOAD", 0.0)
    assert ledger._load_price() == interpret.LOAD_BUDGET
    monkeypatch.setattr(interpret, "_warm", [True])
    assert ledger._load_price() == interpret.LOAD_FLOOR


def test_save_merges_adds_and_drops(fresh_ledger, monkeypatch):
    path, _lock, header = fresh_ledger
    monkeypatch.setattr(interpret, "_warm", [])   # nothing loaded:
    monkeypatch.setattr(ledger, "FIRST_LOAD", 0.05)   # a first load's price
    with open(path, "w") as f:
        f.write(f"{header}\n0.5 a.b\n2.0 c.d\n")
    assert ledger.before("a.b") == 0.5 and ledger.before("x.y") == 0.0
    ledger.add("a.b", 0.125)
    ledger.add("a.b", 0.125)
    ledger.add("e.f", 0.125)
    ledger.add("s.t", 0.03)   # less than a load: it would have saved nothing
    ledger.compiled("c.d")
    with open(path, "a") as f:   # another process wrote meanwhile
        f.write("1.0 g.h\n")
    ledger.save()
    want = {"a.b": 0.7, "e.f": 0.075, "g.h": 1.0}
    assert ledger.read(path, header) == pytest.approx(want, rel=1e-12)
    ledger.save()   # nothing new: nothing written
    assert ledger.read(path, header) == pytest.approx(want, rel=1e-12)
    # once a kernel is loaded in the process, a load costs its least
    monkeypatch.setattr(interpret, "_warm", [True])
    ledger.add("s.t", 0.03)
    ledger.save()
    assert ledger.read(path, header)["s.t"] == pytest.approx(0.03 - interpret.LOAD_FLOOR)


def test_save_never_raises(fresh_ledger, monkeypatch, tmp_path):
    ledger.add("a.b", 0.25)
    # a folder gone (or read-only): the lock file cannot be made
    monkeypatch.setattr(ledger, "_where", lambda: (str(tmp_path / "gone" / ledger.NAME),
                                                   str(tmp_path / "gone" / ledger.LOCK), "h"))
    ledger.save()
    # a write that fails at the rename, as in a read-only folder
    ledger.add("a.b", 0.25)
    monkeypatch.setattr(ledger, "_where", lambda: fresh_ledger)
    from tapegrad.kernels import _files

    def refuse(*_a, **_k):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(_files, "write_atomic", refuse)
    ledger.save()
    assert not os.path.exists(fresh_ledger[0])


def test_a_forked_child_writes_nothing(fresh_ledger, monkeypatch):
    path = fresh_ledger[0]
    ledger.add("a.b", 0.25)
    monkeypatch.setattr(ledger, "_hooked", [os.getpid() + 1])   # registered by another process
    ledger.save()
    assert not os.path.exists(path)


def test_the_budget_counts_earlier_processes_only_for_an_uncached_kernel(fresh_ledger,
                                                                          monkeypatch):
    path, _lock, header = fresh_ledger
    with open(path, "w") as f:
        f.write(f"{header}\n0.9 tests.kernel_a\n0.9 tests.kernel_b\n")
    monkeypatch.setattr(interpret, "_states", {})
    monkeypatch.setenv(interpret.BUDGET_ENV, "1.0")
    x = np.ones(30_000)   # 0.06 s of estimated work (2 us an element)

    def kernel_a(x):
        return x.sum()

    def kernel_b(x):
        return x.sum()

    for k in (kernel_a, kernel_b):
        k.__module__, k.__qualname__ = "tests", k.__name__
    done, got = interpret.run_as_python(kernel_a, lambda: 0, kernel_a, (x,))
    assert done and got == 30_000   # 0.9 + 0.06 of 1.0
    x = np.ones(60_000)   # 0.12 s: past the budget with what earlier runs paid
    done, _ = interpret.run_as_python(kernel_b, lambda: 0, kernel_b, (x,))
    assert not done and ledger._dropped == {"tests.kernel_b"}
    # cached: the price of a load, this process's seconds only
    monkeypatch.setattr(interpret, "_states", {})
    done, _ = interpret.run_as_python(kernel_b, lambda: 10**9, kernel_b, (np.ones(10),))
    assert done
    # under interpret.mode the budget is the block's, the ledger not read
    monkeypatch.setattr(interpret, "_states", {})
    with interpret.mode(1.0):
        done, _ = interpret.run_as_python(kernel_b, lambda: 0, kernel_b, (x,))
    assert done
    assert set(ledger._added) == {"tests.kernel_a"}
    assert math.isfinite(ledger._added["tests.kernel_a"])
