"""Backward beside unrelated live graphs: its cost should be the cost of the
graph it differentiates, whatever else lives on the thread's tape.

Rows: three ops on a 10-element tensor and on 10^6 elements, forward and
backward, alone and beside a kept graph of 8,000 / 80,000 / 800,000 records
(medians, ms); and a least-squares training loop (50 parameters, 64 rows)
that keeps a metric computed from the parameters without ``.detach()``, at
steps 0-100, 1,000 and 3,000 (ms per step), beside the same loop that drops
the metric.

Run: ``python benchmarks/unrelated_graphs.py``; ``PYTHONPATH=<other
checkout>`` times another tree in the same way.
"""
import os
import statistics
import time

os.environ.setdefault("TAPEGRAD_INTERPRET", "0")  # warm hot paths, compiled

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402


def _kept_graph(records):
    z = tg.tensor(np.ones(3), requires_grad=True)
    for _ in range(records // 2):
        z = z * 1.0001 + 0.0
    return z


def three_ops(records, size, reps):
    kept = _kept_graph(records) if records else None
    x = tg.tensor(np.linspace(0.0, 1.0, size), requires_grad=True)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        (tg.sin(x) * x + 1.0).sum().backward()
        ts.append(time.perf_counter() - t)
    del kept
    return statistics.median(ts) * 1e3


def training_loop(steps=3001, keep=True):
    rng = np.random.default_rng(0)
    A, b = rng.normal(size=(64, 50)), rng.normal(size=64)
    w = tg.tensor(np.zeros(50), requires_grad=True)
    metrics, at = [], {}
    for k in range(steps):
        t = time.perf_counter()
        loss = ((A @ w - b) ** 2).mean()
        loss.backward()
        with tg.no_grad():
            w -= 0.01 * w.grad
        w.grad = None
        m = (A @ w - b).sum()
        if keep:
            metrics.append(m)   # kept for a plot, never backwarded
        at[k] = time.perf_counter() - t
    return {s: statistics.median(at[i] for i in range(max(0, s - 50), s + 51) if i in at) * 1e3
            for s in (50, 1000, 2950)}


def main():
    print(f"tapegrad from {os.path.dirname(tg.__file__)}")
    three_ops(0, 10, 300)            # warm-up: the first row is timed like the others
    three_ops(0, 10**6, 3)
    print("| kept unrelated records | 10 elements (ms) | 1e6 elements (ms) |")
    print("|---:|---:|---:|")
    for n in (0, 8_000, 80_000, 800_000):
        print(f"| {n:,} | {three_ops(n, 10, 300):.3f} | {three_ops(n, 10**6, 15):.1f} |",
              flush=True)
    for keep in (False, True):
        loop = training_loop(keep=keep)
        print(f"\ntraining loop {'with a kept' if keep else 'without a kept'} metric, "
              "ms per step: " + ", ".join(f"step {s}: {v:.3f}" for s, v in loop.items()),
              flush=True)


if __name__ == "__main__":
    main()
