"""asv benchmarks: a step's cost beside graphs kept alive for a whole loop.

A least-squares training loop (50 parameters, 64 rows) that writes its
parameters in place each step and keeps a metric computed from them without
``.detach()`` (for a plot): every step leaves one more live graph on the
thread's tape, each of which saved a value of the parameters the next write
changes.  A step should cost what its own graph costs:

* ``KeptGraphs.track_step_ratio_late`` -- median ms per step over steps
  1,900-2,000 with the metrics kept, divided by the same loop's median that
  drops them (1.0: kept graphs cost nothing).
* ``KeptGraphs.time_step_with_kept_metrics`` -- one step after 2,000 kept
  metrics.
* ``DroppedLargeGraphs.track_kept_mb`` -- the most bytes the tape keeps by
  reference while a loop computes ``exp(X * 2).sum()`` of 10^6 elements and
  drops it, 60 steps, beside one kept graph: bounded by the kept-bytes
  compaction (64 MB), not growing by 8 MB a step.
"""
import statistics
import time

import numpy as np

from .bench_core import _tapegrad


def _loop(tg, steps, keep):
    rng = np.random.default_rng(0)
    A, b = rng.normal(size=(64, 50)), rng.normal(size=64)
    w = tg.tensor(np.zeros(50), requires_grad=True)
    kept, times = [], []

    def step():
        t = time.perf_counter()
        loss = ((A @ w - b) ** 2).mean()
        loss.backward()
        with tg.no_grad():
            w.sub_(0.01 * w.grad)
        w.grad = None
        m = (A @ w - b).sum()
        if keep:
            kept.append(m)
        times.append(time.perf_counter() - t)

    for _ in range(steps):
        step()
    return step, kept, times


class KeptGraphs:
    timeout = 120

    def setup(self):
        self.tg = _tapegrad()
        self.step, self.kept, _ = _loop(self.tg, 2000, True)

    def time_step_with_kept_metrics(self):
        self.step()

    def track_step_ratio_late(self):
        _, _, kept = _loop(self.tg, 2000, True)
        _, _, dropped = _loop(self.tg, 2000, False)
        return statistics.median(kept[1900:]) / statistics.median(dropped[1900:])

    track_step_ratio_late.unit = "kept / dropped"


class DroppedLargeGraphs:
    timeout = 120

    def setup(self):
        self.tg = _tapegrad()

    def track_kept_mb(self):
        tg = self.tg
        from tapegrad.core.tape import current
        z = tg.tensor(np.ones(3), requires_grad=True)
        kept = (z * 2.0).sum()  # keeps the tape alive: no reset between steps
        X = tg.tensor(np.linspace(0.0, 1.0, 10**6), requires_grad=True)
        most = 0
        for _ in range(60):
            tg.exp(X * 2.0).sum()
            most = max(most, current().kept_bytes)
        assert kept.grad_fn is not None
        return most / 1e6

    track_kept_mb.unit = "MB"
