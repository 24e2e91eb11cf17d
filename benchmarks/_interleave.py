"""Interleaved timing: several implementations' samples taken in blocks that
take turns, so that a shared machine's drift falls on every column alike.
No side effects at import (the thread limits are the caller's: see
_timing.py and compare.py's ``--threads``)."""
import gc
import statistics
import time


#: blocks each cell's samples are taken in (see interleaved_ms)
ROUNDS = 5


def _samples(fn, n, setup=None):
    """``n`` wall times of ``fn()`` in seconds (of ``fn(setup())``, timing
    ``fn`` only, when ``setup`` is given), one after another."""
    times = []
    for _ in range(n):
        state = None if setup is None else setup()
        t0 = time.perf_counter()
        fn() if setup is None else fn(state)
        times.append(time.perf_counter() - t0)
        del state
    return times


def interleaved_ms(cells, repeat, warmup, rounds=ROUNDS):
    """Median wall time in ms of each cell's ``fn`` (``cells``: name ->
    ``(fn, setup)``), its ``repeat`` samples taken in ``rounds`` blocks, the
    cells' blocks taking turns: A's block, B's block, ..., then A's again.

    A shared machine's speed drifts by tens of percent over a minute; with
    every implementation's samples spread over the same stretch of time, a
    ratio of two medians compares them under the same conditions.  Within a
    block the samples run one after another (after one untimed call), in
    the steady state a loop of the implementation's own reaches.  As
    ``timeit`` does, the garbage collector runs once before each block and
    is off during it: a collection before every sample walks every object
    of the loaded libraries and times each call with cold caches.
    """
    for fn, setup in cells.values():
        _samples(fn, warmup, setup)
    per = -(-repeat // rounds)
    times = {name: [] for name in cells}
    for _ in range(rounds):
        for name, (fn, setup) in cells.items():
            _samples(fn, 1, setup)
            gc.collect()
            gc.disable()
            try:
                times[name] += _samples(fn, per, setup)
            finally:
                gc.enable()
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}
