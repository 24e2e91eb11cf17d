"""How much two threads overlap in tapegrad's compiled reverse sweep.

Each thread records its own graph once and then runs ``backward(retain_graph=
True)`` on it repeatedly, so the timed work is the sweep (compiled with
``nogil=True``) plus the Python around each backward.  The speedup is
``2 * t(1 thread, n sweeps) / t(2 threads, n sweeps each)``: 2.0 would be
perfect overlap, 1.0 none (the GIL serialising everything).

Two workloads: an elementwise chain over 200,000-element arrays (few records,
long compiled loops: the sweep's nogil case) and a chain of 20,000 scalar
records (many records, one short compiled walk per backward).

    python benchmarks/threads.py            # medians of 5 repetitions

The machine this project runs on has 2 shared cores, so the numbers are noisy.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import statistics
import threading
import time

import numpy as np

import tapegrad as tg


def elementwise_graph():
    x = tg.tensor(np.linspace(0.1, 1.0, 200_000), requires_grad=True)
    h = x
    for _ in range(6):
        h = tg.sin(h) * 1.5 + tg.exp(h * 0.1)
    return x, (h * h).sum()


def scalar_chain_graph():
    x = tg.tensor(0.5, requires_grad=True)
    h = x
    for _ in range(10_000):
        h = tg.sin(h) * 0.9
    return x, h


def _sweeps(make, n, out, i, barrier):
    x, y = make()
    y.backward(retain_graph=True)          # warm: arenas allocated, kernels loaded
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(n):
        y.backward(retain_graph=True)
    out[i] = time.perf_counter() - t0


def timed(make, n, threads):
    """Wall time of ``threads`` threads each running n backward sweeps at once."""
    out = [0.0] * threads
    barrier = threading.Barrier(threads + 1)
    ts = [threading.Thread(target=_sweeps, args=(make, n, out, i, barrier))
          for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def main(reps=5):
    for name, make, n in [("elementwise 2e5 x 19 records", elementwise_graph, 40),
                          ("scalar chain, 20,000 records", scalar_chain_graph, 200)]:
        timed(make, 2, 1)
        one = statistics.median(timed(make, n, 1) for _ in range(reps))
        two = statistics.median(timed(make, n, 2) for _ in range(reps))
        print(f"{name}: 1 thread {one * 1e3:.0f} ms for {n} sweeps, 2 threads "
              f"{two * 1e3:.0f} ms for {n} each -> speedup {2 * one / two:.2f}x")


if __name__ == "__main__":
    main()
