#!/usr/bin/env python
"""Side-by-side table of the function transforms (see transform_workloads.py):
tapegrad against PyTorch, JAX (jit, steady state) and HIPS autograd where they
are installed, one thread, medians in ms; plus tg.grad against backward(),
both from the same NumPy arrays (backward's leaves share them, as tg.grad's
do).  Each table's columns take turns block by block (``_interleave.py``).

Run: ``python benchmarks/compare_transforms.py [-n REPEAT]``.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import argparse

import _timing  # noqa: F401  (first: pins every library to one thread)

import transform_workloads as tw  # noqa: E402
from _interleave import interleaved_ms  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--repeat", type=int, default=21)
    args = parser.parse_args()
    import tapegrad as tg
    data = tw.inputs()
    columns = {"tapegrad": tw.tapegrad_fns(tg)}
    for name, loader in (("torch", "torch"), ("jax", "jax"), ("autograd", "autograd")):
        try:
            mod = __import__(loader)
        except ImportError:
            continue
        if name == "torch":
            mod.set_num_threads(1)
        columns[name] = getattr(tw, f"{name}_fns")(mod)
    for fns in columns.values():
        tw.check(fns, data)
    print(f"median of {args.repeat}, one thread; columns present: {', '.join(columns)}\n")
    print("| Jacobian of tanh(A @ x) * x, n = 200 | ms | x tapegrad |")
    print("|---|---:|---:|")
    # each table's cells take turns block by block (_interleave.py)
    jac = interleaved_ms({name: (lambda f=fns["jacobian"]: f(*data["jacobian"]), None)
                          for name, fns in columns.items()}, args.repeat, warmup=3)
    base = jac["tapegrad"]
    print(f"| tapegrad `tg.jacobian` (vector reverse mode) | {base:.2f} | 1.0 |")
    labels = {"torch": "PyTorch `jacobian(vectorize=True)`", "jax": "JAX `jit(jacrev)`",
              "autograd": "autograd `jacobian`"}
    for name, ms in jac.items():
        if name != "tapegrad":
            print(f"| {labels[name]} | {ms:.2f} | {ms / base:.2f} |")
    print("\n| gradient via | tg.grad (ms) | backward() (ms) | ratio |")
    print("|---|---:|---:|---:|")
    t = columns["tapegrad"]
    for name in ("chain", "elementwise"):
        ms = interleaved_ms({via: (lambda f=t[via + "_" + name]: f(*data[name]), None)
                             for via in ("grad", "backward")}, args.repeat, warmup=3)
        g, b = ms["grad"], ms["backward"]
        print(f"| {name} | {g:.2f} | {b:.2f} | {g / b:.2f} |")


if __name__ == "__main__":
    main()
