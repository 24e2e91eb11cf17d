#!/usr/bin/env python
"""The small eager step against PyTorch, and checkouts against each other.

The step is ``compare.py``'s small row as a training loop writes it::

    x.grad = None
    loss = (x * x).sum()          # x: 3 float64 elements, a leaf
    loss.backward()

-- the fixed costs of recording two ops and of one backward.  Besides it,
``chain`` (2,000 scalar steps forward and backward, ``compare.py``'s chain)
and ``mlp`` (its 256x784 tanh MLP step) show that a change to those fixed
costs leaves the larger programs alone.

Each measurement is the median of 25 samples of ``time.perf_counter`` over
1,000 steps (chain and MLP: 25 samples of one step), with the garbage
collector on, as a program runs; PyTorch CPU (one thread) is measured in the
same process, its samples alternating with tapegrad's in blocks of five.

With ``--tree DIR`` (repeatable) each round runs one fresh interpreter per
tree, in turn, with that tree's ``tapegrad`` first on ``sys.path`` (a
checkout, or an export of another commit: ``git archive HEAD | tar -x -C
DIR``); the table gives, per tree, the median over the rounds of each
process's medians.  Without it, the ``tapegrad`` this script imports.

Run: ``python benchmarks/small_step.py [--tree DIR ...] [--rounds N]
[--workloads small,chain,mlp]``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES, STEPS = 25, 1000


def _measure(workloads, torch_too):
    """One process's medians, in microseconds: ``{row: {impl: us}}``."""
    import gc

    sys.path.insert(0, HERE)
    from benchmarks import workloads as W
    import tapegrad as tg

    torch = None
    if torch_too:
        try:
            import torch
            torch.set_num_threads(1)
        except ImportError:
            torch = None

    def small_tg():
        x = tg.tensor(W.SMALL_X, requires_grad=True)

        def run(n):
            for _ in range(n):
                x.grad = None
                loss = (x * x).sum()
                loss.backward()
        return run, STEPS

    def small_torch():
        x = torch.tensor(W.SMALL_X, dtype=torch.float64, requires_grad=True)

        def run(n):
            for _ in range(n):
                x.grad = None
                loss = (x * x).sum()
                loss.backward()
        return run, STEPS

    def chain_tg():
        x = tg.tensor(W.CHAIN_X0, requires_grad=True)

        def run(n):
            for _ in range(n):
                x.grad = None
                W.tg_chain(tg, x).backward()
        return run, 1

    def mlp_tg():
        X, W1, W2, labels = W.mlp_inputs()
        W1 = tg.tensor(W1, requires_grad=True)
        W2 = tg.tensor(W2, requires_grad=True)

        def run(n):
            for _ in range(n):
                W1.grad = W2.grad = None
                W.tg_mlp(tg, X, W1, W2, labels).backward()
        return run, 1

    makers = {"small": {"tapegrad": small_tg, "torch": small_torch},
              "chain": {"tapegrad": chain_tg}, "mlp": {"tapegrad": mlp_tg}}
    out = {}
    gc.enable()
    for row in workloads:
        impls = {k: f() for k, f in makers[row].items() if k == "tapegrad" or torch is not None}
        for run, n in impls.values():   # warm up: compile, fill the caches
            run(max(n, 50) if n > 1 else 5)
        samples = {k: [] for k in impls}
        for _block in range(5):
            for k, (run, n) in impls.items():
                for _ in range(SAMPLES // 5):
                    t0 = time.perf_counter()
                    run(n)
                    samples[k].append((time.perf_counter() - t0) / n * 1e6)
        out[row] = {k: statistics.median(v) for k, v in samples.items()}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", default=[],
                   help="a source tree whose tapegrad to measure (repeatable)")
    p.add_argument("--rounds", type=int, default=5,
                   help="fresh processes per tree (default 5)")
    p.add_argument("--workloads", default="small",
                   help="comma-separated: small, chain, mlp (default small)")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[v] = "1"
    # every kernel compiled from its first call, as compare.py times them
    os.environ.setdefault("TAPEGRAD_INTERPRET", "0")
    if args.child:
        print(json.dumps(_measure(workloads, not args.no_torch)))
        return
    trees = args.tree or [None]
    results = {t: [] for t in trees}
    for _round in range(args.rounds if args.tree else 1):
        for t in trees:
            env = dict(os.environ)
            if t is not None:
                env["PYTHONPATH"] = os.pathsep.join(
                    x for x in (os.path.abspath(t), env.get("PYTHONPATH")) if x)
            cmd = [sys.executable, os.path.abspath(__file__), "--child",
                   "--workloads", ",".join(workloads)] + (["--no-torch"] if args.no_torch else [])
            got = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            results[t].append(json.loads(got.stdout.strip().splitlines()[-1]))
    units = {"small": "us per step", "chain": "ms per step", "mlp": "ms per step"}
    scale = {"small": 1.0, "chain": 1e-3, "mlp": 1e-3}
    print("| tree | workload | tapegrad | torch | tapegrad/torch |")
    print("|---|---|---:|---:|---:|")
    for t in trees:
        for row in workloads:
            tg_us = statistics.median(r[row]["tapegrad"] for r in results[t])
            th = [r[row]["torch"] for r in results[t] if "torch" in r[row]]
            th_us = statistics.median(th) if th else None
            ratio = f"{tg_us / th_us:.2f}x" if th_us else ""
            th_txt = f"{th_us * scale[row]:.3g}" if th_us else ""
            print(f"| {t or 'this checkout'} | {row} ({units[row]}) | "
                  f"{tg_us * scale[row]:.3g} | {th_txt} | {ratio} |")


if __name__ == "__main__":
    main()
