"""The compiled-kernel cache: a second process reuses it, an edited kernel
source gets a new one, families compile on first use.

The fully cold case (an empty cache directory, then a second process) costs
one compilation of the sweep and two families; it runs with
``TAPEGRAD_COLD_TESTS=1``.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.kernels import _jit
from tapegrad.kernels import dispatch as D

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = textwrap.dedent("""
    import numpy as np, tapegrad as tg
    from tapegrad.kernels import dispatch as D
    from tapegrad.kernels.sweep import _sweep
    x = tg.tensor(np.linspace(0.1, 0.9, 12), requires_grad=True)  # past the inline bound
    (x * x + 2.0).backward(np.ones(12))
    assert np.allclose(x.grad.numpy(), 2 * np.linspace(0.1, 0.9, 12))
    s = _sweep.stats
    print("SWEEP", sum(s.cache_hits.values()), sum(s.cache_misses.values()))
    print("ENTRIES", sum(e._cache_hits for e in D._ENTRIES.values()), len(D._ENTRIES))
    print("BROADCAST", int(D.TABLE[D.BROADCAST_SLOT] != 0))
    y = tg.tensor(np.ones((2, 12)), requires_grad=True)
    (y * x).backward(np.ones((2, 12)))          # broadcasts: its family now
    assert np.allclose(y.grad.numpy(), np.linspace(0.1, 0.9, 12))
    print("BROADCAST_AFTER", int(D.TABLE[D.BROADCAST_SLOT] != 0))
""")


def _child(env=None):
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=900)
    assert out.returncode == 0, out.stderr
    got = {ln.split()[0]: tuple(int(v) for v in ln.split()[1:]) for ln in out.stdout.splitlines()}
    return got, out.stderr


def test_second_process_loads_the_cache():
    # this process has compiled (or loaded) the sweep and these families
    x = tg.tensor(np.linspace(0.1, 0.9, 12), requires_grad=True)
    (x * x + 2.0).backward(np.ones(12))
    env = dict(os.environ, TAPEGRAD_QUIET="1")
    got, _ = _child(env)
    assert got["SWEEP"][1] == 0 and got["SWEEP"][0] >= 1   # loaded, not compiled
    assert got["ENTRIES"][0] == got["ENTRIES"][1] >= 2     # every family entry loaded
    assert got["BROADCAST"] == (0,) and got["BROADCAST_AFTER"] == (1,)  # only when used


@pytest.mark.skipif(not os.environ.get("TAPEGRAD_COLD_TESTS"),
                    reason="compiles from an empty cache; set TAPEGRAD_COLD_TESTS=1")
def test_empty_cache_then_reuse(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("TAPEGRAD_QUIET", None)
    got, err = _child(env)
    assert got["SWEEP"] == (0, 1) and got["ENTRIES"][0] == 0
    assert "tapegrad: compiling" in err                      # the user was told, once
    assert err.count("tapegrad: compiling") == 1
    index = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".nbi")]
    assert any(f.startswith("sweep._sweep-") for f in index)
    assert any(f.startswith("dispatch._nary-") for f in index)
    got, err = _child(env)
    assert got["SWEEP"] == (1, 0) and got["ENTRIES"][0] == got["ENTRIES"][1]
    assert "tapegrad: compiling" not in err                  # warm: silent


def test_edited_kernel_source_changes_the_stamp(tmp_path, monkeypatch):
    pkg = tmp_path / "tapegrad"
    shutil.copytree(os.path.join(ROOT, "tapegrad", "kernels"), pkg / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(_jit, "_PACKAGE", pkg)
    before = _jit._stamp()
    assert _jit._stamp() == before
    src = pkg / "kernels" / "structural.py"
    src.write_text(src.read_text() + "\n# edited\n")
    assert _jit._stamp() != before      # a new, empty cache directory: nothing stale loads


def test_stamp_covers_numba_and_python(monkeypatch):
    before = _jit._stamp()
    monkeypatch.setattr(_jit, "numba_version", lambda: "0.0.0-other")
    assert _jit._stamp() != before


def test_families_compile_on_first_use_only():
    # every slot the sweeps index holds a family, and only used ones are filled
    for kind in D.FAMILIES:
        assert D.TABLE[kind] == 0 or kind in D._ENTRIES
    # the slot a record runs in: sum/mean and broadcasting binary ops apart
    from tapegrad.kernels import codes as C
    size = np.array([6, 6, 1, 6, 6, 6])      # records 0..2 leaves, 3..5 binary ops
    arg0 = np.array([0, 0, 0, 0, 2, 4, 7])
    args = np.array([0, 1, 0, 2, 0, 1, 2])  # 3 = 0 op 1, 4 = 0 op 2, 5 = where(0, 1, 2)
    T = (None, arg0, size, None, args)
    slot = D.slot.py_func
    assert slot(T, 3, C.K_NARY, C.MUL) == C.K_NARY
    assert slot(T, 4, C.K_NARY, C.MUL) == D.BROADCAST_SLOT
    assert slot(T, 5, C.K_NARY, C.WHERE) == D.BROADCAST_SLOT
    assert slot(T, 3, C.K_REDUCE, C.SUM) == D.SUM_SLOT
    assert slot(T, 2, C.K_REDUCE, C.MEAN) == D.FULL_SUM_SLOT   # one output element
    assert slot(T, 3, C.K_REDUCE, C.MAX) == C.K_REDUCE
    assert slot(T, 3, C.K_UNARY, C.EXP) == C.K_UNARY
