"""How long ``tg.load`` takes on tape files of 10k, 100k and 1M records.

The files are traces of a loop that mixes the record kinds the validator
checks differently: unary and scalar records, broadcasting binary records,
reductions with a parameter block, gathers (indexing), a multi-output split
and its output slots, concatenation, scans and comparisons.  Each file is
written once into a temporary folder (``ft.save``; tracing a million
records takes a while) and then loaded ``repeat`` times; the median load
time is split into reading the ``.npz`` (``tapefile.read``) and validating
it (``tapefile.parse``).

    python benchmarks/tapefile_load.py            # 10k, 100k, 1M records
    python benchmarks/tapefile_load.py 10000      # just one size
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import statistics
import sys
import tempfile
import time

import numpy as np

import tapegrad as tg
from tapegrad.tracing.files import io as tapefile

W = np.linspace(-1.0, 1.0, 6).reshape(2, 3)


def body(x, steps):
    h = x
    for _ in range(steps):
        a = np.sin(h) * 0.5 + W[0]                 # unary, scalar, broadcast binary
        s = a.sum(axis=0)                          # reduction with a block
        p, q = np.split(a, 2)                      # multi-output gather + slots
        c = np.concatenate([p[0], q[0, ::2]])      # gathers, concatenation
        z = np.cumsum(c) * (c > 0.1)               # scan, comparison
        h = h * 0.9 + z[:3] * 0.01 + s * 0.001
    return h.sum()


def records_per_step():
    x = np.linspace(0.1, 0.6, 6).reshape(2, 3)
    one, two = tg.trace(lambda v: body(v, 1), x), tg.trace(lambda v: body(v, 2), x)
    one(x), two(x)
    n1 = next(iter(one.cache.values()))[0].n
    n2 = next(iter(two.cache.values()))[0].n
    return n2 - n1, n1 - (n2 - n1)


def make_file(records, folder):
    path = os.path.join(folder, f"tape_{records}.npz")
    if not os.path.exists(path):
        per, base = records_per_step()
        steps = max(1, (records - base) // per)
        x = np.linspace(0.1, 0.6, 6).reshape(2, 3)
        ft = tg.trace(lambda v: body(v, steps), x)
        ft(x)
        ft.save(path)
    return path


def median_s(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(sizes=(10_000, 100_000, 1_000_000), repeat=5):
    folder = os.path.join(tempfile.gettempdir(), "tapegrad_load_bench")
    os.makedirs(folder, exist_ok=True)
    print("| records | file MB | load s | read s | validate s |")
    print("|---:|---:|---:|---:|---:|")
    for records in sizes:
        path = make_file(records, folder)
        arrays = tapefile.read(path)
        n = int(arrays["t0.op"].size)
        load = median_s(lambda: tg.load(path), repeat)
        read = median_s(lambda: tapefile.read(path), repeat)
        validate = median_s(lambda: tapefile.parse(arrays), repeat)
        print(f"| {n:,} | {os.path.getsize(path) / 1e6:.1f} | {load:.3f} | {read:.3f} "
              f"| {validate:.3f} |", flush=True)


if __name__ == "__main__":
    main(tuple(int(a) for a in sys.argv[1:]) or (10_000, 100_000, 1_000_000))
