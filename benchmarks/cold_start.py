"""Cold start: seconds from a fresh process to a first result, empty Numba cache.

Every case runs in a fresh interpreter with ``NUMBA_CACHE_DIR`` set to a new
temporary directory (so nothing compiled earlier is found), except the
``warm`` rows, which run a second time in the directory their cold run filled.

* ``import``: ``import tapegrad``;
* ``seeds``: ``python examples/seeds.py`` (the README's first command), whole
  process wall time;
* ``first gradient``: import + ``tg.grad`` of a small scalar function;
* one row per op family: the first backward through that family, after a
  first gradient of ``x * 2.0`` has compiled the sweep (so the row is what
  the family adds);
* ``tg.jacobian``, ``tg.hessian``, ``tg.trace`` replay: their first call;
* ``first gradient, 1e6 elements``: elementwise ops and a sum, whose VJPs
  run as whole-array NumPy in the interpreted tier (kernels/interpret.py:
  ``array_form``), so nothing compiles;
* ``first gradient, 1e6-element cumsum``, ``... max, softmax, concat,
  maximum``: the reductions, cumulative sums, concatenations and the binary
  ops whose derivative branches on the values have whole-array forms too;
* ``first gradient, 1e6-element cumprod``: cumprod's VJP is a recurrence,
  run in the loop's order (one lane: a Python loop over floats);
* ``first gradient, 1e6-element gammaln``: the special functions'
  derivatives are scalar loops with no whole-array form, so work this large
  compiles at once;
* ``300 small gradients``: a loop that starts interpreted and compiles its
  kernels once interpreting them has cost their budget (kernels/interpret.py).

Run: ``python benchmarks/cold_start.py [--repeat N] [--only NAME,...]``; prints
a table of medians (seconds).  ``--pythonpath DIR`` times another checkout;
``--compiled`` sets ``TAPEGRAD_INTERPRET=0`` (every kernel compiles on its
first call, as without the interpreted tier).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_PRE = "import time; _t0 = time.perf_counter()\nimport numpy as np\nimport tapegrad as tg\n"
_BASE = "x = tg.tensor(np.linspace(0.1, 0.9, 5), requires_grad=True)\n"
_WARMUP = "(x * 2.0).backward(np.ones(5))\n_t1 = time.perf_counter()\n"
_POST = "print('T', time.perf_counter() - _t1)\n"

#: name -> (program, what it times): 'process' = whole process wall time,
#: 'total' = from before the import to the end, 'family' = after the warm-up
CASES = {
    "import": (_PRE + "print('T', time.perf_counter() - _t0)\n", "program"),
    "seeds example": (None, "process"),
    "first gradient": (_PRE + "g = tg.grad(lambda x: (x * x + tg.sin(x)).sum())"
                       "(np.linspace(0.1, 0.9, 5))\nprint('T', time.perf_counter() - _t0)\n",
                       "program"),
    "import + (x * 2.0).sum() backward": (_PRE + _BASE + "(x * 2.0).sum().backward()\n"
                                          "print('T', time.perf_counter() - _t0)\n",
                                          "program"),
    "unary (exp, log, tanh)": (_PRE + _BASE + _WARMUP
                               + "(tg.exp(x) + 0.0).backward(np.ones(5))\n" + _POST, "program"),
    "binary (x * y, broadcast)": (_PRE + _BASE + _WARMUP
                                  + "y = tg.tensor(np.ones((3, 5)), requires_grad=True)\n"
                                    "(x * y).backward(np.ones((3, 5)))\n" + _POST, "program"),
    "sum, mean": (_PRE + _BASE + _WARMUP + "(tg.mean(x) * 1.0).backward()\n" + _POST,
                  "program"),
    "other reductions (max)": (_PRE + _BASE + _WARMUP
                               + "(tg.max(x) * 1.0).backward()\n" + _POST, "program"),
    "indexing/shape (x[1:3])": (_PRE + _BASE + _WARMUP
                                + "(x[1:3] * 1.0).backward(np.ones(2))\n" + _POST, "program"),
    "matmul (A @ x)": (_PRE + _BASE + _WARMUP
                       + "A = np.ones((3, 5))\n(tg.matmul(A, x) * 1.0).backward(np.ones(3))\n"
                       + _POST, "program"),
    "tg.jacobian": (_PRE + _BASE + _WARMUP
                    + "tg.jacobian(lambda x: x * 3.0)(np.ones(4))\n" + _POST, "program"),
    "tg.hessian": (_PRE + _BASE + _WARMUP
                   + "tg.hessian(lambda x: (x * x * 3.0).sum())(np.ones(4))\n" + _POST,
                   "program"),
    "tg.trace replay": (_PRE + _BASE + _WARMUP
                        + "f = tg.trace(lambda x: (x * 2.0).sum(), np.ones(4))\n"
                          "import tapegrad.transforms.functional as ft\n"
                          "ft.value_and_grad(f)(np.ones(4)); ft.value_and_grad(f)(np.ones(4))\n"
                        + _POST, "program"),
    "first gradient, 1e6 elements": (_PRE + "g = tg.grad(lambda x: (x * x + tg.sin(x)).sum())"
                                     "(np.linspace(0.1, 0.9, 10**6))\n"
                                     "print('T', time.perf_counter() - _t0)\n", "program"),
    "first gradient, 1e6-element cumsum": (_PRE + "g = tg.grad(lambda x: (tg.cumsum(x) * x)"
                                           ".sum())"
                                           "(np.linspace(0.1, 0.9, 10**6))\n"
                                           "print('T', time.perf_counter() - _t0)\n", "program"),
    "first gradient, 1e6-element max, softmax, concat, maximum": (
        _PRE + "g = tg.grad(lambda x: (x.reshape(1000, 1000).max(axis=1).sum()"
        " + tg.softmax(x.reshape(1000, 1000), axis=0)[0].sum()"
        " + tg.concatenate([x, x]).sum() + np.maximum(x, 0.5).sum()))"
        "(np.linspace(0.1, 0.9, 10**6))\n"
        "print('T', time.perf_counter() - _t0)\n", "program"),
    "first gradient, 1e6-element cumprod": (_PRE + "g = tg.grad(lambda x: tg.cumprod(x).sum())"
                                            "(np.ones(10**6))\n"
                                            "print('T', time.perf_counter() - _t0)\n", "program"),
    "first gradient, 1e6-element gammaln": (_PRE + "g = tg.grad(lambda x: tg.gammaln(x).sum())"
                                            "(np.linspace(0.5, 5.0, 10**6))\n"
                                            "print('T', time.perf_counter() - _t0)\n", "program"),
    "300 small gradients": (_PRE + "f = tg.grad(lambda x: (x * x + tg.sin(x)).sum())\n"
                            "for i in range(300):\n    f(np.linspace(0.1, 0.9, 50) + i)\n"
                            "print('T', time.perf_counter() - _t0)\n", "program"),
}


def run_case(name, cache, pythonpath, compiled=False):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, TAPEGRAD_QUIET="1")
    env.pop("TAPEGRAD_INTERPRET", None)
    # Python's bytecode as an installed package has it (pip compiles it at
    # install): an environment that forbids writing it would time the
    # compilation of every module's source instead (main() compiles it once)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if compiled:
        env["TAPEGRAD_INTERPRET"] = "0"
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    prog, how = CASES[name]
    root = pythonpath or ROOT
    cmd = [sys.executable, os.path.join(root, "examples", "seeds.py")] if prog is None \
        else [sys.executable, "-c", prog]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"{name}: exit {out.returncode}\n{out.stderr[-2000:]}")
    if how == "process":
        return wall
    return float([ln for ln in out.stdout.splitlines() if ln.startswith("T ")][-1][2:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--pythonpath", default="")
    ap.add_argument("--compiled", action="store_true",
                    help="TAPEGRAD_INTERPRET=0: compile every kernel on its first call")
    a = ap.parse_args(argv)
    package = os.path.join(a.pythonpath or ROOT, "tapegrad")
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True)
    names = [n for n in CASES if not a.only or any(o.strip() in n for o in a.only.split(","))]
    print(f"{'case':32} {'cold s':>8} {'warm s':>8}   (median of {a.repeat}; "
          f"{os.cpu_count()} cores)")
    for name in names:
        cold, warm = [], []
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as cache:
                cold.append(run_case(name, cache, a.pythonpath, a.compiled))
                warm.append(run_case(name, cache, a.pythonpath, a.compiled))
        print(f"{name:32} {statistics.median(cold):8.2f} {statistics.median(warm):8.2f}",
              flush=True)


if __name__ == "__main__":
    main()
