"""Four small scientific scripts as a new user writes them in plain NumPy,
timed per gradient step: tapegrad against PyTorch eager.

* ``gp``: a Gaussian process's negative log marginal likelihood, RBF
  kernel, 80 one-dimensional points; the gradient in the log length
  scale, log signal variance and log noise variance (a Cholesky factor, a
  solve against it, the log of its diagonal).
* ``heat``: an explicit finite-difference heat-equation solver, 100 cells,
  200 time steps, fixed ends written in place on a copy
  (``un[1:-1] = ...``); the gradient of the final state's squared misfit in
  the initial condition.
* ``attention``: one attention head, sequence 32, width 16, a softmax
  written out (max, exp, sum); the sum of squares of its output and the
  gradient in the three projection matrices.
* ``mlp``: a two-layer tanh MLP (32-64-1), batch 64, mean squared error;
  the gradient in the four weight arrays.

Columns: plain NumPy (the loss alone, no gradient), tapegrad eager
(``tg.value_and_grad``), tapegrad traced (``tg.trace`` once, then
``ft.value_and_grad``), and PyTorch eager (the same computation in torch
ops, ``backward()``; skipped when PyTorch is absent).  Every library on one
thread; the garbage collector stays on; each cell's samples are taken in
``--rounds`` blocks, the columns taking turns block by block, and the
median reported.  Every gradient is checked against tapegrad eager's (the
largest ``|difference|`` over the largest ``|entry|``, per array).

Run: ``python benchmarks/newcomer_scripts.py [--repeat 30] [--rounds 5]
[--only gp,heat,attention,mlp]``.
"""
import argparse
import os
import statistics
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
else:
    torch.set_num_threads(1)


# --- the scripts, in NumPy (run by NumPy and by tapegrad) and in torch ---

def _gp_data(n=80):
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-3.0, 3.0, n))
    y = np.sin(2.0 * x) + 0.1 * rng.normal(size=n)
    return (x, y), np.array([np.log(0.8), np.log(1.2), np.log(0.05)])


def gp_nll(p, x, y):
    """Negative log marginal likelihood of ``y`` at ``x`` under a GP with an
    RBF kernel; ``p`` = (log length scale, log signal var, log noise var)."""
    ell, sf2, sn2 = np.exp(p[0]), np.exp(p[1]), np.exp(p[2])
    d2 = (x[:, None] - x[None, :]) ** 2
    K = sf2 * np.exp(-0.5 * d2 / ell ** 2) + sn2 * np.eye(len(x))
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L, y)
    return 0.5 * (a @ a) + np.log(np.diag(L)).sum() + 0.5 * len(x) * np.log(2 * np.pi)


def gp_nll_torch(p, x, y):
    ell, sf2, sn2 = torch.exp(p[0]), torch.exp(p[1]), torch.exp(p[2])
    d2 = (x[:, None] - x[None, :]) ** 2
    K = sf2 * torch.exp(-0.5 * d2 / ell ** 2) + sn2 * torch.eye(len(x), dtype=x.dtype)
    L = torch.linalg.cholesky(K)
    a = torch.linalg.solve(L, y)
    return 0.5 * (a @ a) + torch.log(torch.diag(L)).sum() + 0.5 * len(x) * np.log(2 * np.pi)


HEAT_R = 0.25      # alpha * dt / dx**2, inside the explicit scheme's limit 0.5
HEAT_STEPS = 200


def _heat_data(n=100):
    xs = np.linspace(0.0, 1.0, n)
    target = 0.3 * np.sin(np.pi * xs)
    return (target,), np.exp(-((xs - 0.4) / 0.1) ** 2)


def heat_misfit(u0, target):
    """Explicit Euler steps of u_t = u_xx, fixed ends, then the squared
    misfit of the final state."""
    u = u0
    for _ in range(HEAT_STEPS):
        un = u.copy()
        un[1:-1] = u[1:-1] + HEAT_R * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        u = un
    return ((u - target) ** 2).sum()


def heat_misfit_torch(u0, target):
    u = u0
    for _ in range(HEAT_STEPS):
        un = u.clone()
        un[1:-1] = u[1:-1] + HEAT_R * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        u = un
    return ((u - target) ** 2).sum()


def _attention_data(seq=32, width=16):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(seq, width))
    ws = [rng.normal(size=(width, width)) / np.sqrt(width) for _ in range(3)]
    return (x,), ws


def attention(wq, wk, wv, x):
    """One attention head's output, summed squares."""
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / np.sqrt(q.shape[1])
    e = np.exp(s - s.max(axis=1, keepdims=True))
    a = e / e.sum(axis=1, keepdims=True)
    return ((a @ v) ** 2).sum()


def attention_torch(wq, wk, wv, x):
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / np.sqrt(q.shape[1])
    e = torch.exp(s - s.max(dim=1, keepdim=True).values)
    a = e / e.sum(dim=1, keepdim=True)
    return ((a @ v) ** 2).sum()


def _mlp_data(batch=64, n_in=32, hidden=64):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(batch, n_in))
    y = np.sin(x[:, :1])
    ws = [rng.normal(size=(n_in, hidden)) / np.sqrt(n_in), np.zeros(hidden),
          rng.normal(size=(hidden, 1)) / np.sqrt(hidden), np.zeros(1)]
    return (x, y), ws


def mlp_mse(w1, b1, w2, b2, x, y):
    """Mean squared error of a tanh MLP."""
    h = np.tanh(x @ w1 + b1)
    return ((h @ w2 + b2 - y) ** 2).mean()


def mlp_mse_torch(w1, b1, w2, b2, x, y):
    h = torch.tanh(x @ w1 + b1)
    return ((h @ w2 + b2 - y) ** 2).mean()


#: name -> (title, NumPy loss, torch loss, data maker); a data maker returns
#: (the constant data, the parameters: one array or a list of them)
SCRIPTS = {
    "gp": ("GP negative log marginal likelihood, RBF, n = 80, 3 hyperparameters",
           gp_nll, gp_nll_torch, _gp_data),
    "heat": ("explicit heat equation, 100 cells, 200 steps, gradient in the initial state",
             heat_misfit, heat_misfit_torch, _heat_data),
    "attention": ("single-head attention, sequence 32, width 16, gradient in Wq, Wk, Wv",
                  attention, attention_torch, _attention_data),
    "mlp": ("2-layer MLP 32-64-1, tanh, batch 64, MSE, gradient in W1, b1, W2, b2",
            mlp_mse, mlp_mse_torch, _mlp_data),
}


# --- timing and checking ---

def _interleaved_ms(cells, repeat, rounds, warm_s=0.5):
    """Median ms of each cell's ``fn()``, ``repeat`` samples taken in
    ``rounds`` blocks, the cells' blocks taking turns (one untimed call
    before each block); the garbage collector stays on.  Each cell is first
    called for ``warm_s`` seconds and at least 10 times: a traced function
    loads its compiled loops on its first calls."""
    for fn in cells.values():
        t0, n = time.perf_counter(), 0
        while n < 10 or (n < 2000 and time.perf_counter() - t0 < warm_s):
            fn()
            n += 1
    per = -(-repeat // rounds)
    times = {name: [] for name in cells}
    for _ in range(rounds):
        for name, fn in cells.items():
            fn()
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _check(grads, ref, what, rtol=1e-9):
    """The largest ``max|g - r| / max|r|`` over the arrays; an error past
    ``rtol``."""
    worst = 0.0
    for g, r in zip(grads, ref):
        g, r = np.asarray(g, dtype=float), np.asarray(r, dtype=float)
        worst = max(worst, float(np.max(np.abs(g - r)) / np.max(np.abs(r))))
    if not worst <= rtol:
        raise AssertionError(f"{what}: gradient differs from tapegrad eager's by {worst:.2e}")
    return worst


def run(name, repeat, rounds):
    """One script's row: ms per gradient step of each column and the
    gradient differences."""
    title, f, f_torch, make = SCRIPTS[name]
    data, params = make()
    params = list(params) if isinstance(params, list) else [params]
    k = len(params)

    def loss(*ps):
        return f(*ps, *data)
    vg = tg.value_and_grad(loss, argnums=tuple(range(k)))
    _, g_ref = vg(*params)
    cells = {"numpy": lambda: loss(*params), "tapegrad eager": lambda: vg(*params)}
    diffs = {}
    t0 = time.perf_counter()
    try:
        ft = tg.trace(loss, *params)
        ft.value_and_grad(*params)
    except Exception as e:  # a script the tracer does not take: say why
        traced_note = f"does not trace: {type(e).__name__}: {e}"
        ft = None
    trace_ms = (time.perf_counter() - t0) * 1e3
    if ft is not None:
        g_t = ft.value_and_grad(*params)[1]
        diffs["tapegrad traced"] = _check(g_t if k > 1 else (g_t,), g_ref, "tapegrad traced")
        cells["tapegrad traced"] = lambda: ft.value_and_grad(*params)
        traced_note = f"trace + first call {trace_ms:.0f} ms"
    if torch is not None:
        data_t = [torch.tensor(d) for d in data]

        def torch_step():
            ps = [torch.tensor(p, requires_grad=True) for p in params]
            f_torch(*ps, *data_t).backward()
            return [p.grad for p in ps]
        diffs["torch"] = _check([g.numpy() for g in torch_step()], g_ref, "PyTorch")
        cells["torch"] = torch_step
    ms = _interleaved_ms(cells, repeat, rounds)
    return title, ms, diffs, traced_note


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=30, help="samples per cell")
    ap.add_argument("--rounds", type=int, default=5, help="blocks the samples are taken in")
    ap.add_argument("--only", default=",".join(SCRIPTS), help="scripts: " + ", ".join(SCRIPTS))
    a = ap.parse_args(argv)
    print(f"ms per gradient step, median of {a.repeat} (in {a.rounds} interleaved blocks), "
          f"one thread, garbage collection on; numpy {np.__version__}"
          + (f", torch {torch.__version__}" if torch is not None else ", torch absent"))
    cols = ["numpy", "tapegrad eager", "tapegrad traced", "torch"]
    print(f"| script | {' | '.join(cols)} | torch/eager | torch/traced | grad diff traced, torch |")
    print("|---|" + "---:|" * (len(cols) + 3))
    notes = []
    for name in a.only.split(","):
        title, ms, diffs, traced_note = run(name, a.repeat, a.rounds)
        cell = [f"{ms[c]:.3f}" if c in ms else "n/a" for c in cols]
        r_e = f"{ms['torch'] / ms['tapegrad eager']:.2f}x" if "torch" in ms else ""
        r_t = (f"{ms['torch'] / ms['tapegrad traced']:.2f}x"
               if "torch" in ms and "tapegrad traced" in ms else "")
        dd = ", ".join(f"{diffs[c]:.1e}" if c in diffs else "n/a"
                       for c in ("tapegrad traced", "torch"))
        print(f"| {name} | {' | '.join(cell)} | {r_e} | {r_t} | {dd} |", flush=True)
        notes.append(f"{name}: {title}; {traced_note}")
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
