#!/usr/bin/env python
"""Side-by-side table of the NumPy-coverage workloads (see ops_workloads.py):
tapegrad, hand-written NumPy VJPs and PyTorch CPU on one thread, medians in ms,
each row's samples taken in blocks with the columns taking turns
(``_interleave.interleaved_ms``): a ratio compares columns timed over the same
stretch of a shared machine's drift.

The last column is the project's goal for the workload's tapegrad/numpy
ratio (:data:`GOALS`) and whether this run met it.

Run: ``python benchmarks/compare_ops.py [-n REPEAT]``.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")
# fused runs sweep with their own compiled loops from their first sweep
# (tapegrad/engine/fused_codegen.py): the steady state of a long-running process
os.environ.setdefault("TAPEGRAD_FUSE_LOOPS", "now")

import argparse

import _timing  # noqa: F401  (first: pins every library to one thread)
import numpy as np  # noqa: E402

import ops_workloads as ow  # noqa: E402
from _interleave import interleaved_ms  # noqa: E402


#: tapegrad/numpy goals: at most this ratio
GOALS = {"softmax": 1.5, "solve": 1.2}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--repeat", type=int, default=15)
    args = parser.parse_args()
    import tapegrad as tg
    data = ow.inputs()
    columns = {"tapegrad": ow.tapegrad_fns(tg), "numpy": ow.NUMPY}
    try:
        import torch
        torch.set_num_threads(1)
        columns["torch"] = ow.torch_fns(torch)
    except ImportError:
        pass
    for name, fns in columns.items():
        if name != "numpy":
            ow.check(fns, data)
    print(f"numpy {np.__version__}, one thread, median of {args.repeat}\n")
    heads = list(columns) + ["tapegrad/numpy"] + (["torch/tapegrad"] if "torch" in columns
                                                    else []) + ["goal"]
    print("| workload (fwd+bwd, ms) | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * (len(heads) - 1) + "---|")
    for work in ow.WORKLOADS:
        ms = interleaved_ms({c: (lambda f=f: f[work](*data[work]), None)
                             for c, f in columns.items()}, args.repeat, warmup=3)
        cells = [f"{ms[c]:.2f}" for c in columns]
        cells.append(f"{ms['tapegrad'] / ms['numpy']:.2f}x")
        if "torch" in ms:
            cells.append(f"{ms['torch'] / ms['tapegrad']:.2f}x")
        ratio, bound = ms["tapegrad"] / ms["numpy"], GOALS.get(work)
        cells.append("" if bound is None else
                     f"<= {bound}x: {'met' if ratio <= bound else 'missed'}")
        print(f"| {work} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
