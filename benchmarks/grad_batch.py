"""``ft.grad_batch`` against a loop of ``ft.grad``, in microseconds per
gradient (median of ``--repeat`` runs, after warm-up), on three workloads:

* ``chain``: the 8,000-record scalar chain (benchmarks/workloads.py) over
  1,000 inputs;
* ``logistic``: the mean logistic loss of examples/dask_gradients.py (256 x
  16 data, 16 weights) over 20,000 weight vectors: its ``A @ w`` (4,096
  multiply-adds) is a small matmul, which every replay computes in the
  compiled loops (kernels/small_matmul.py), so the batched kernel runs it
  and agrees with the loop bit for bit;
* ``rk4``: benchmarks/small_loops.py's RK4 Lotka-Volterra loss (``--steps``
  steps) over ``--rk4-rows`` parameter vectors.

Rows: the loop; the threaded path (Python threads over copies of the trace)
with 1 and 2 workers; for traces whose records all run compiled, the
batched kernel (kernels/batch.py) with 1 and 2 Numba threads; and for the
logistic loss, when JAX is installed, ``jax.jit(jax.vmap(jax.grad(loss)))``
in float64 on all cores (its compile time printed in the row's name).  Every result
is checked against the loop (bit for bit; 1e-12 relative for a matmul that
only kernels/batch.py's ``MATMUL`` brings into the kernel).

    python benchmarks/grad_batch.py [--repeat 5] [--only chain,rk4]
"""
import argparse
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "benchmarks"))
sys.path.insert(0, HERE)
import tapegrad as tg  # noqa: E402
from tapegrad.kernels import batch as BK  # noqa: E402
from tapegrad.tracing.replay import _Replay  # noqa: E402
from workloads import CHAIN_STEPS  # noqa: E402


def chain(y):
    for _ in range(CHAIN_STEPS):
        y = y * 0.999 + np.sin(y) * 0.001
    return y


def logistic(xp=np, samples=256, features=16, seed=0):
    """examples/dask_gradients.py's loss (its ``make_loss``: the same data and
    formula; docs/reference.md's "Gradients on Dask" table), written with ``xp``."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(samples, features))
    y = np.sign(A @ rng.normal(size=features) + 0.3 * rng.normal(size=samples))

    def loss(w):
        margins = y * (A @ w)
        return xp.logaddexp(0.0, -margins).mean() + 1e-3 * (w * w).sum()

    return loss


def logistic_jax():
    """``jax.jit(jax.vmap(jax.grad(loss)))`` of the same loss, or None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    return jax.jit(jax.vmap(jax.grad(logistic(jnp))))


def median(fn, repeat):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


class threaded_path:
    """Within the block grad_batch takes its threaded path for every trace."""

    def __enter__(self):
        self.saved = _Replay.batch_compiled
        _Replay.batch_compiled = lambda rep: False

    def __exit__(self, *exc):
        _Replay.batch_compiled = self.saved


def workload(name, ft, X, repeat, matmul=False, jax_batched=None):
    nb = len(X)
    rep = next(iter(ft.cache.values()))[0]
    BK.MATMUL = matmul
    compiled = rep.batch_compiled()
    ref = np.array([ft.grad(x) for x in X])
    rows = [("loop of ft.grad", median(lambda: [ft.grad(x) for x in X], repeat), ref)]
    with threaded_path():
        for w in (1, 2):
            ft.grad_batch(X[:4], workers=w)
            rows.append((f"grad_batch threaded, {w} worker(s)",
                         median(lambda: ft.grad_batch(X, workers=w), repeat),
                         ft.grad_batch(X, workers=w)))
    if compiled:
        for w in (1, 2):
            ft.grad_batch(X[:4], workers=w)
            rows.append((f"grad_batch compiled{' (MATMUL)' if matmul else ''}, {w} thread(s)",
                         median(lambda: ft.grad_batch(X, workers=w), repeat),
                         ft.grad_batch(X, workers=w)))
    BK.MATMUL = False
    if jax_batched is not None:   # jit(vmap(grad)): compiled once, outside the timing
        t = time.perf_counter()
        np.asarray(jax_batched(X))
        compile_s = time.perf_counter() - t
        rows.append((f"JAX jit(vmap(grad)) (compile {compile_s:.2f} s)",
                     median(lambda: np.asarray(jax_batched(X)), repeat),
                     np.asarray(jax_batched(X))))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{name}: {rep.n} records, {nb} inputs, {os.cpu_count()} cores (load average "
          f"{load:.2f}), median of {repeat}"
          + ("" if compiled else " (no compiled batch path for this trace)"))
    print(f"| {'how':<45} | {'us/gradient':>11} | {'x loop':>6} | vs loop |")
    print(f"|{'-' * 47}|{'-' * 12}:|{'-' * 7}:|:-------:|")
    base = rows[0][1]
    for how, t, got in rows:
        diff = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        same = "exact" if np.array_equal(got, ref) else f"{diff:.0e}"
        print(f"| {how:<45} | {t / nb * 1e6:11.1f} | {base / t:6.2f} | {same:>7} |")
        assert diff <= 1e-12, how


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--only", default="chain,logistic,rk4")
    p.add_argument("--steps", type=int, default=500, help="RK4 steps")
    p.add_argument("--rk4-rows", type=int, default=200)
    p.add_argument("--logistic-rows", type=int, default=20000)
    a = p.parse_args(argv)
    only = a.only.split(",")
    if "chain" in only:
        workload("chain", tg.trace(chain, np.float64(0.5)), np.linspace(-2.0, 2.0, 1000),
                 a.repeat)
    if "logistic" in only:
        W = np.random.default_rng(1).normal(size=(a.logistic_rows, 16))
        workload("logistic", tg.trace(logistic(), W[0]), W, a.repeat, matmul=True,
                 jax_batched=logistic_jax())
    if "rk4" in only:
        from small_loops import loss
        obs = np.random.default_rng(0).uniform(0.5, 1.5, (a.steps, 2))
        th0 = np.array([1.1, 0.4, 0.1, 0.4])
        ft = tg.trace(lambda th: loss(th, a.steps, obs), th0)
        TH = th0 * np.random.default_rng(2).uniform(0.9, 1.1, (a.rk4_rows, 4))
        workload(f"rk4 ({a.steps} steps)", ft, TH, a.repeat)


if __name__ == "__main__":
    main()
