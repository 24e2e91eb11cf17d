"""``ft.grad_batch`` against a loop of ``ft.grad``: the 8,000-record scalar
chain over 1,000 inputs (median of several runs, after warm-up).

    python benchmarks/grad_batch.py
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks"))
import tapegrad as tg  # noqa: E402
from workloads import CHAIN_STEPS  # noqa: E402


def chain(y):
    for _ in range(CHAIN_STEPS):
        y = y * 0.999 + np.sin(y) * 0.001
    return y


def median(fn, repeat=5):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


if __name__ == "__main__":
    ft = tg.trace(chain, np.float64(0.5))
    X = np.linspace(-2.0, 2.0, 1000)
    ft.grad_batch(X[:4])
    loop = median(lambda: [ft.grad(x) for x in X])
    batch = median(lambda: ft.grad_batch(X))
    assert np.array_equal(ft.grad_batch(X), np.array([ft.grad(x) for x in X]))
    print(f"{os.cpu_count()} cores: loop of ft.grad {loop * 1e3:.1f} ms, grad_batch "
          f"{batch * 1e3:.1f} ms, speedup {loop / batch:.2f}x")
    for w in (1, 2):
        t = median(lambda: ft.grad_batch(X, workers=w))
        print(f"  workers={w}: {t * 1e3:.1f} ms")
