"""tapegrad.integrations.dask on a real dask.distributed LocalCluster (two worker
processes, one thread each), against plain per-input gradients in this
process.

Dask is an optional extra (``pip install -e '.[dask]'``): without it the
cluster tests skip, and the two tests that need no Dask (``import tapegrad``
leaves it alone; the error that names the extra) still run.
"""
import faulthandler
import logging
import os
import pathlib
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

import dask_programs as P
import tapegrad as tg

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = pathlib.Path(__file__).resolve().parent
#: seconds any one computation on the cluster may take before the test fails
TIMEOUT = 120


def _python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_import_tapegrad_imports_no_dask():
    out = _python("import sys, tapegrad, tapegrad.integrations.dask\n"
                  "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                  "('dask', 'distributed')))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_missing_dask_names_the_extra():
    # sys.modules[name] = None makes `import name` raise ImportError
    out = _python("import sys\n"
                  "sys.modules['dask'] = sys.modules['distributed'] = None\n"
                  "import numpy as np, tapegrad as tg\n"
                  "from tapegrad.integrations import dask as tgd\n"
                  "ft = tg.trace(lambda x: (x * x).sum(), np.zeros(2))\n"
                  "for call in (lambda: tgd.grad_blocks(ft, np.zeros((3, 2))),\n"
                  "             lambda: tgd.map_bag(ft, []),\n"
                  "             lambda: tgd.map_inputs(None, ft, []),\n"
                  "             lambda: tgd.warm_workers(None),\n"
                  "             lambda: tgd.WarmKernels):\n"
                  "    try:\n"
                  "        call()\n"
                  "    except ImportError as e:\n"
                  "        print(e)\n")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 5, out.stdout
    assert all("pip install 'tapegrad[dask]'" in line for line in lines), lines


# -- the cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    import psutil
    from tapegrad.integrations import dask as tgd

    # a hung cluster must not hang the suite: dump the stacks and exit
    faulthandler.dump_traceback_later(600, exit=True)
    path = os.pathsep.join([str(TESTS)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        silence_logs=logging.CRITICAL, env={"PYTHONPATH": path})
    c = distributed.Client(cluster, timeout=60)
    pids = list(c.run(os.getpid).values())
    try:
        c.tapegrad_warm = tgd.warm_workers(c, (tg.trace(P.energy, np.zeros(6)), (np.ones(6),)))
        yield c
    finally:
        c.close(timeout=30)
        cluster.close(timeout=30)
        faulthandler.cancel_dump_traceback_later()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(psutil, p) for p in pids):
            time.sleep(0.1)
        left = [p for p in pids if _alive(psutil, p)]
        assert not left, f"worker processes {left} outlived the cluster"


def _alive(psutil, pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _compute(client, *collections):
    """Compute on the cluster, failing after TIMEOUT seconds instead of hanging."""
    out = [client.compute(c).result(timeout=TIMEOUT) for c in collections]
    return out[0] if len(out) == 1 else out


def _rows(*arrays):
    return [tuple(a[i] for a in arrays) for i in range(len(arrays[0]))]


def test_workers_are_warm_and_compile(client):
    reports = client.tapegrad_warm
    assert len(reports) == 2
    assert all(r["examples"] == 1 and not r["full"] for r in reports.values())
    from tapegrad.kernels._jit import cache_dir
    # this process and both workers share one cache directory
    assert {r["cache"] for r in reports.values()} == {cache_dir()}
    assert set(client.run(os.environ.get, "TAPEGRAD_INTERPRET").values()) == {"0"}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_grad_blocks_match_per_input_gradients(client, dtype):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    ft = tg.trace(P.energy, np.zeros(6, dtype))
    X = np.random.default_rng(0).normal(size=(50, 6)).astype(dtype)
    dX = da.from_array(X, chunks=(12, 6))
    G = tgd.grad_blocks(ft, dX)
    assert G.chunks == dX.chunks and G.dtype == dtype
    g = _compute(client, G)
    ref = np.stack([ft.grad(x) for x in X])
    assert g.dtype == dtype
    np.testing.assert_array_equal(g, ref)


def test_grad_blocks_two_inputs_with_other_chunks(client):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(30, 4)), rng.normal(size=(30, 4, 3))
    ft = tg.trace(P.layer, x[0], w[0])
    gx, gw = _compute(client, *tgd.grad_blocks(ft, da.from_array(x, chunks=(7, 4)),
                                               da.from_array(w, chunks=(10, 4, 3))))
    for i, (a, b) in enumerate(_rows(x, w)):
        ra, rb = ft.grad(a, b)
        np.testing.assert_array_equal(gx[i], ra)
        np.testing.assert_array_equal(gw[i], rb)


def test_grad_blocks_batch_axis_last_and_scalar_inputs(client):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    rng = np.random.default_rng(2)
    A = rng.normal(size=(3, 5, 40))           # inputs of shape (3, 5), batch axis last
    ft = tg.trace(P.matrix_loss, A[..., 0])
    G = tgd.grad_blocks(ft, da.from_array(A, chunks=(3, 5, 9)), axis=-1)
    assert G.shape == A.shape
    g = _compute(client, G)
    for i in range(A.shape[-1]):
        np.testing.assert_array_equal(g[..., i], ft.grad(A[..., i]))
    t = np.linspace(-2, 2, 25)                # one float per input
    fs = tg.trace(P.scalar_input, 0.5)
    np.testing.assert_array_equal(
        _compute(client, tgd.grad_blocks(fs, da.from_array(t, chunks=6))),
        [fs.grad(v) for v in t])


def test_value_and_grad_blocks(client):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(17, 2)), rng.normal(size=(17, 2, 2))
    ft = tg.trace(P.layer, x[0], w[0])
    V, (GX, GW) = tgd.value_and_grad_blocks(ft, da.from_array(x, chunks=5),
                                            da.from_array(w, chunks=5))
    assert V.shape == (17,)
    v, gx, gw = _compute(client, V, GX, GW)
    for i, (a, b) in enumerate(_rows(x, w)):
        rv, (ra, rb) = ft.value_and_grad(a, b)
        assert v[i] == rv
        np.testing.assert_array_equal(gx[i], ra)
        np.testing.assert_array_equal(gw[i], rb)


def test_guards_retrace_on_the_workers(client):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    X = np.random.default_rng(4).normal(size=(24, 3)) + 0.3
    ft = tg.trace(P.branchy, np.ones(3))       # traced on the positive branch only
    assert any(x.sum() < 0 for x in X) and any(x.sum() > 0 for x in X)
    g = _compute(client, tgd.grad_blocks(ft, da.from_array(X, chunks=6)))
    np.testing.assert_allclose(g, [tg.grad(P.branchy)(x) for x in X], rtol=0, atol=1e-12)


def test_map_inputs_and_map_bag(client):
    import dask.bag as db
    from tapegrad.integrations import dask as tgd
    rng = np.random.default_rng(5)
    X = list(rng.normal(size=(23, 6)))
    ft = tg.trace(P.energy, X[0])
    ref = [ft.grad(x) for x in X]
    for batch_size in (None, 1, 5, 100):
        got = tgd.map_inputs(client, ft, X, batch_size=batch_size)
        assert len(got) == len(X)
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a, b)
    vg = tgd.map_inputs(client, ft, X, method="value_and_grad")
    for (v, g), x in zip(vg, X):
        rv, rg = ft.value_and_grad(x)
        assert v == rv
        np.testing.assert_array_equal(g, rg)
    H = tgd.map_inputs(client, ft, X[:4], method="hessian")
    for h, x in zip(H, X[:4]):
        np.testing.assert_array_equal(h, ft.hessian(x))
    got = _compute(client, tgd.map_bag(ft, db.from_sequence(X, npartitions=4)))
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a, b)
    # several arguments per input: tuples; inputs of other shapes retrace
    w = [rng.normal(size=(6, 2)) for _ in X]
    fl = tg.trace(P.layer, X[0], w[0])
    mixed = list(zip(X, w)) + [(np.ones(3), np.ones((3, 2)))]
    got = tgd.map_inputs(client, fl, mixed, batch_size=8)
    for (ga, gb), (a, b) in zip(got, mixed):
        ra, rb = fl.grad(a, b)
        np.testing.assert_array_equal(ga, ra)
        np.testing.assert_array_equal(gb, rb)
    assert tgd.map_inputs(client, ft, []) == []


def test_tape_files_and_lambdas_travel(client, tmp_path):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    X = np.random.default_rng(6).normal(size=(20, 4))
    lam = tg.trace(lambda x: (np.exp(x) * x).sum(), X[0])   # no picklable Python code
    path = tmp_path / "f.npz"
    lam.save(path)
    loaded = tg.load(path)
    ref = [lam.grad(x) for x in X]
    for ft in (lam, loaded):
        g = _compute(client, tgd.grad_blocks(ft, da.from_array(X, chunks=8)))
        np.testing.assert_array_equal(g, ref)
        for a, b in zip(tgd.map_inputs(client, ft, list(X)), ref):
            np.testing.assert_array_equal(a, b)
    # the workers read the tape file themselves
    on_workers = client.run(lambda p: tg.load(p).grad(np.ones(4)), str(path))
    for g in on_workers.values():
        np.testing.assert_array_equal(g, lam.grad(np.ones(4)))


# -- errors ----------------------------------------------------------------------------------


def test_errors_before_anything_runs():
    da = pytest.importorskip("dask.array")
    db = pytest.importorskip("dask.bag")
    from tapegrad.integrations import dask as tgd
    ft = tg.trace(P.energy, np.zeros(6))
    X = da.zeros((10, 6), chunks=(5, 6))
    with pytest.raises(TypeError, match=r"energy is not a traced function; trace it first "
                                        r"\(ft = tg.trace\(f, \*example_args\)"):
        tgd.grad_blocks(P.energy, X)
    with pytest.raises(TypeError, match="takes a traced function .* not ndarray"):
        tgd.map_bag(np.zeros(3), db.from_sequence([1.0]))
    with pytest.raises(TypeError, match=r"not a dask array; wrap it \(dask.array.from_array"):
        tgd.grad_blocks(ft, np.zeros((10, 6)))
    with pytest.raises(ValueError, match=r"is split along axis 1; a block must hold whole "
                                         r"inputs.*x.rechunk\(\{1: -1\}\)"):
        tgd.grad_blocks(ft, da.zeros((10, 6), chunks=(5, 3)))
    with pytest.raises(ValueError, match=r"split along axis 0, 2;.*batch axis 1 only.*"
                                         r"x.rechunk\(\{0: -1, 2: -1\}\)"):
        tgd.value_and_grad_blocks(ft, da.zeros((4, 10, 6), chunks=(2, 5, 3)), axis=1)
    with pytest.raises(ValueError, match="different lengths along the batch axis"):
        tgd.grad_blocks(tg.trace(P.layer, np.zeros(2), np.zeros((2, 2))),
                        da.zeros((4, 2)), da.zeros((5, 2, 2)))
    with pytest.raises(TypeError, match="has dtype int64; the inputs must be floating-point"):
        tgd.grad_blocks(ft, da.zeros((10, 6), dtype=np.int64))
    with pytest.raises(ValueError, match="is 0-d; it needs a batch axis"):
        tgd.grad_blocks(ft, da.zeros(()))
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        tgd.grad_blocks(ft, X, axis=2)
    with pytest.raises(ValueError, match="method='gradient' is not a traced function's "
                                         "method; choose one of grad, value_and_grad"):
        tgd.map_bag(ft, db.from_sequence([1.0]), method="gradient")
    with pytest.raises(TypeError, match=r"takes a dask.bag.Bag, not list \(dask.bag."
                                        r"from_sequence"):
        tgd.map_bag(ft, [np.zeros(6)])
    with pytest.raises(TypeError, match="takes a distributed.Client as its first argument, "
                                        "not str"):
        tgd.map_inputs("tcp://127.0.0.1:8786", ft, [np.zeros(6)])
    with pytest.raises(TypeError, match="an example is \\(ft, args\\) or \\(ft, args, method\\)"):
        tgd.warm_here([ft])
    # a loaded function cannot trace again: a signature it lacks is refused at once
    loaded = pickle.loads(pickle.dumps(tg.trace(lambda x: (x * x).sum(), np.zeros(6))))
    from tapegrad.tracing.function import LoadedFunction
    assert isinstance(loaded, LoadedFunction)
    with pytest.raises(ValueError, match=r"has no trace for inputs of shape and dtype "
                                         r"\[\(\(5,\), 'float64'\)\]"):
        tgd.grad_blocks(loaded, da.zeros((10, 5), chunks=5))
    # nor can a lambda's trace on the workers: map_inputs names the input before sending
    lam = tg.trace(lambda x: (x * x).sum(), np.zeros(6))
    distributed = pytest.importorskip("distributed")
    fake = object.__new__(distributed.Client)     # never reached: refused before sending
    for f in (loaded, lam):
        with pytest.raises(ValueError, match=r"input 2 has arguments \(shape \(5,\) float64\), "
                                             r"but .* holds traces for \(shape \(6,\) float64\) "
                                             r"only and cannot trace again on the workers"):
            tgd.map_inputs(fake, f, [np.ones(6), np.ones(6), np.ones(5)], batch_size=2)


def test_errors_from_the_workers(client):
    import dask.array as da
    from tapegrad.integrations import dask as tgd
    fv = tg.trace(P.vector_out, np.zeros(3))
    with pytest.raises(RuntimeError, match="grad_batch needs a function with one output "
                                           "element"):
        _compute(client, tgd.grad_blocks(fv, da.zeros((4, 3), chunks=(2, 3))))
    with pytest.raises(RuntimeError, match="needs a function with one output element"):
        tgd.map_inputs(client, fv, [np.zeros(3)])
    with pytest.raises(RuntimeError, match="grad needs a function with one output element"):
        tgd.map_inputs(client, fv, [np.zeros(3)], method="value_and_grad")
    # a wrong-shaped input: the error names the input, its shapes and the traced
    # ones, not just the worker's matmul error; alone in a batch, or a stacked batch
    fl = tg.trace(P.layer, np.zeros(6), np.zeros((6, 2)))
    inputs = [(np.ones(6), np.ones((6, 2)))] * 3 + [(np.ones(5), np.ones((6, 2)))]
    with pytest.raises(ValueError, match="matmul") as info:
        tgd.map_inputs(client, fl, inputs, batch_size=4)
    msg = str(info.value)
    assert ("input 3, with arguments (shape (5,) float64, shape (6, 2) float64), failed on a "
            "worker" in msg and "traced for (shape (6,) float64, shape (6, 2) float64)" in msg)
    fm = tg.trace(P.matrix_loss, np.zeros((2, 6)))
    with pytest.raises(ValueError) as info:     # 1-d inputs: no axis 1 to sum over
        tgd.map_inputs(client, fm, [np.ones(5)] * 4, batch_size=4)
    msg = str(info.value)
    assert ("inputs 0 to 3, each with arguments (shape (5,) float64), failed on a worker" in msg
            and "traced for (shape (2, 6) float64)" in msg), msg
    # the cluster is still usable afterwards
    ft = tg.trace(P.energy, np.zeros(6))
    np.testing.assert_array_equal(tgd.map_inputs(client, ft, [np.ones(6)])[0],
                                  ft.grad(np.ones(6)))


def test_example_script_runs_on_a_small_cluster():
    pytest.importorskip("dask.array")
    pytest.importorskip("distributed")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "dask_gradients.py"),
                          "--n", "400", "--features", "8", "--repeat", "1"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "max |difference| from per-input ft.grad: 0" in out.stdout, out.stdout
