#!/usr/bin/env python
"""Per-op recording cost of eager scalar code, in nanoseconds per record.

Each sample records 8,000 records on a 0-d float64 tensor and divides the
time by 8,000; the figure is the median of ``--repeat`` samples (garbage
collector run before and disabled during each sample).  Rows:

* ``chain`` -- 2,000 steps of ``y = y*0.999 + sin(y)*0.001``, forward only
  (4 records a step: the recording half of compare.py's scalar chain);
* ``chain fwd+bwd`` -- the same plus ``backward()``, per record;
* ``t * c`` / ``t + t`` / ``sin(t)`` -- 8,000 times the one op, each on the
  previous result (a Python float constant for ``t * c``, a fixed non-leaf
  second operand for ``t + t``).

With ``--torch`` the same rows are measured for PyTorch eager (one thread)
and the ratio torch/tapegrad is printed.

Run: ``python benchmarks/per_op.py [--repeat N] [--torch]``.
"""
import argparse
import gc
import os
import statistics
import time

os.environ.setdefault("TAPEGRAD_INTERPRET", "0")  # compiled sweeps only

N = 8000


def _sample(fn):
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def median_ns(fn, repeat, per=N):
    for _ in range(3):
        fn()
    return statistics.median(_sample(fn) for _ in range(repeat)) / per * 1e9


def workloads(lib, x):
    """name -> zero-argument callable recording 8,000 records on leaf x."""
    sin = lib.sin

    def chain():
        y = x
        for _ in range(N // 4):
            y = y * 0.999 + sin(y) * 0.001
        return y

    def chain_bwd():
        x.grad = None
        chain().backward()

    def mul_c():
        y = x
        for _ in range(N):
            y = y * 0.999
        return y

    def add_t():
        z = y = x * 1e-3  # a non-leaf, so every add takes the recording hot path
        for _ in range(N - 1):
            y = y + z
        return y

    def sin_t():
        y = x
        for _ in range(N):
            y = sin(y)
        return y

    return {"chain": chain, "chain fwd+bwd": chain_bwd, "t * c": mul_c,
            "t + t": add_t, "sin(t)": sin_t}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--repeat", type=int, default=41)
    p.add_argument("--torch", action="store_true", help="add PyTorch eager rows")
    args = p.parse_args(argv)

    import tapegrad as tg
    rows = {k: median_ns(f, args.repeat)
            for k, f in workloads(tg, tg.tensor(0.5, requires_grad=True)).items()}
    trows = {}
    if args.torch:
        import torch
        torch.set_num_threads(1)
        x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        trows = {k: median_ns(f, args.repeat) for k, f in workloads(torch, x).items()}
    print(f"{'row':<16}{'tapegrad ns':>13}" + (f"{'torch ns':>11}{'ratio':>8}" if trows else ""))
    for k, v in rows.items():
        line = f"{k:<16}{v:>13.0f}"
        if trows:
            line += f"{trows[k]:>11.0f}{trows[k] / v:>8.2f}"
        print(line)


if __name__ == "__main__":
    main()
