"""Installs that compose: tapegrad never writes into its installed package.

Numba caches tapegrad's kernels in a per-user directory keyed on the kernel
sources (tapegrad/kernels/_jit.py), not in ``tapegrad/kernels/__pycache__``:
files there that pip does not know would survive an uninstall and shadow a
later editable install.  The quick tests check where the cache goes; set
``TAPEGRAD_INSTALL=1`` to run the README's two installs one after the other
in a throwaway virtual environment and import from another directory (it
needs the package index and a few minutes).  ``TAPEGRAD_STRESS=1`` runs the
cold-compile stress: fresh processes with empty caches, compiling the
forward-mode kernels on the main thread while a user op compiles on another.
"""
import os
import pathlib
import stat
import subprocess
import sys
import textwrap

import pytest

from tapegrad.kernels import _jit

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _cache_dir(env, cwd):
    code = "from tapegrad.kernels import _jit; print(_jit.cache_dir())"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-1]


def _env(**kw):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(kw)
    return env


def test_cache_is_outside_the_package(tmp_path):
    got = _cache_dir(_env(XDG_CACHE_HOME=str(tmp_path)), tmp_path)
    assert got.startswith(str(tmp_path / "tapegrad")) and not got.startswith(str(ROOT))
    got = _cache_dir(_env(NUMBA_CACHE_DIR=str(tmp_path / "nb")), tmp_path)
    assert got.startswith(str(tmp_path / "nb" / "tapegrad"))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs a user that a read-only directory stops")
def test_read_only_cache_home_falls_back(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    got = _cache_dir(_env(XDG_CACHE_HOME=str(ro)), tmp_path)
    assert not got.startswith(str(ro)) and not got.startswith(str(ROOT))


def test_no_usable_cache_dir_means_no_cache(tmp_path):
    # NUMBA_CACHE_DIR under a regular file: no directory can be made there,
    # even by root.  The kernels then compile uncached -- never into the
    # package's __pycache__ (Numba's in-tree fallback) and never a failed import.
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = textwrap.dedent("""
        from numba.core.caching import NullCache
        from tapegrad.kernels import _jit, sweep
        fns = [v for v in vars(sweep).values() if hasattr(v, "py_func")]
        print(_jit.cache_dir(), bool(fns) and all(isinstance(f._cache, NullCache) for f in fns))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=_env(NUMBA_CACHE_DIR=str(blocker)),
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["None", "True"], out.stdout


def test_kernels_are_located_in_the_cache_dir():
    from tapegrad.kernels import sweep
    fn = next(v for v in vars(sweep).values() if hasattr(v, "py_func"))
    _jit.materialize()   # installs the locator (with Numba)
    loc = _jit._LOCATOR[0].from_function(fn.py_func, fn.py_func.__code__.co_filename)
    assert loc is not None
    assert os.path.realpath(loc.get_cache_path()).startswith(os.path.realpath(_jit.cache_dir()))
    assert not os.path.realpath(loc.get_cache_path()).startswith(str(ROOT / "tapegrad"))


def test_stamp_follows_the_sources():
    assert _jit._stamp() == _jit._stamp() and len(_jit._stamp()) == 20


@pytest.mark.skipif(os.environ.get("TAPEGRAD_INSTALL") != "1",
                    reason="set TAPEGRAD_INSTALL=1 (needs the package index, minutes)")
def test_regular_then_editable_install_from_another_directory(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = str(venv / "bin" / "python")
    env = _env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("PYTHONPATH")
    away = tmp_path / "away"
    away.mkdir()

    def run(*args, cwd):
        out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=1800)
        assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
        return out.stdout

    check = textwrap.dedent("""
        import os, numpy as np, tapegrad as tg
        x = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
        (x * x).sum().backward()
        assert x.grad.numpy().tolist() == [2.0, 4.0]
        print(os.path.dirname(tg.__file__))
    """)
    run(py, "-m", "pip", "install", str(ROOT), cwd=away)
    site = run(py, "-c", check, cwd=away).split()[-1]
    assert "site-packages" in site
    assert not any(p.suffix in (".nbi", ".nbc") for p in pathlib.Path(site).rglob("*"))
    run(py, "-m", "pip", "install", "-e", f"{ROOT}[test]", cwd=ROOT)
    assert run(py, "-c", check, cwd=away).split()[-1] == str(ROOT / "tapegrad")
    assert not pathlib.Path(site).exists()      # the regular install left nothing
    run(py, "-m", "pip", "install", str(ROOT), cwd=away)   # and back again
    assert "site-packages" in run(py, "-c", check, cwd=away).split()[-1]
    run(py, "-m", "pip", "install", "--upgrade", "--force-reinstall", "--no-deps", str(ROOT),
        cwd=away)
    assert run(py, "-c", check, cwd=away).split()[-1] == site
    run(py, "-m", "pip", "uninstall", "-y", "tapegrad", cwd=away)
    assert not pathlib.Path(site).exists()      # an uninstall leaves nothing either
    run(py, "-m", "pip", "install", "--upgrade", "-e", str(ROOT), cwd=away)
    assert run(py, "-c", check, cwd=away).split()[-1] == str(ROOT / "tapegrad")


_COLD = textwrap.dedent("""
    import threading, numpy as np, tapegrad as tg
    def user_op():
        op = tg.elementwise(lambda x: x * x * x, lambda x, y: 3 * x * x, name="cube")
        t = tg.tensor(np.ones(3), requires_grad=True)
        op(t).sum().backward()
    th = threading.Thread(target=user_op)
    th.start()
    print(tg.jvp(lambda x: (np.sin(x) * x).sum(), (np.ones(3),), (np.ones(3),)))
    th.join()
""")


@pytest.mark.skipif(os.environ.get("TAPEGRAD_STRESS") != "1",
                    reason="set TAPEGRAD_STRESS=1 (cold compiles, minutes each)")
@pytest.mark.parametrize("run", range(int(os.environ.get("TAPEGRAD_STRESS_RUNS", "5"))))
def test_cold_compile_with_a_user_op_on_another_thread(run, tmp_path):
    """A crash here shows as a signal exit code (-11), not a Python error."""
    out = subprocess.run([sys.executable, "-c", _COLD],
                         env=_env(NUMBA_CACHE_DIR=str(tmp_path)), capture_output=True,
                         text=True, timeout=3600)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
