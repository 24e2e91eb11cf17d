"""Per-record cost of the compiled reverse sweep alone, and of backward().

Records the 8,000-record scalar chain once, then times (a) the compiled sweep
kernel on the prepared tape arrays and (b) whole ``backward(retain_graph=True)``
calls, in a warm loop; prints medians in ns per record.

Run: ``python benchmarks/sweep_only.py``.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import statistics
import time

import tapegrad as tg
from tapegrad.engine.backward import Adjoints
from tapegrad.kernels.sweep import sweep
from tapegrad.core.tape import current

STEPS = 2000


def main(repeat=51):
    x = tg.tensor(0.5, requires_grad=True)
    y = x
    for _ in range(STEPS):
        y = y * 0.999 + tg.sin(y) * 0.001
    y.backward(retain_graph=True)  # compiles or loads the kernels
    tape = current()
    records = y._rec + 1
    kernel, whole = [], []
    for _ in range(repeat):
        adj = Adjoints(tape, records)
        T = tape.arrays(adj) + (adj.reached,)
        adj.add(y._rec, adj[y._rec] * 0 + 1.0)
        t0 = time.perf_counter()
        sweep(T, tape.freed, y._rec, -1)
        kernel.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        y.backward(retain_graph=True)
        whole.append(time.perf_counter() - t0)
    n = 4 * STEPS
    print(f"records: {n}")
    print(f"compiled sweep:               {statistics.median(kernel) / n * 1e9:6.1f} ns/record")
    print(f"backward(retain_graph=True):  {statistics.median(whole) / n * 1e9:6.1f} ns/record")


if __name__ == "__main__":
    main()
