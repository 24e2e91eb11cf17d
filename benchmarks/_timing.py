"""What the side-by-side scripts share: one thread everywhere, medians.

Import this module before NumPy, PyTorch or JAX: the thread counts are read
when those libraries load.
"""
import gc
import os
import pathlib
import statistics
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS",
                      "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

# this folder (the workload modules) and the repository root (tapegrad)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parents[1]))


def median_ms(fn, args, repeat, warmup=3):
    """Median wall time of ``fn(*args)`` in ms, after ``warmup`` calls.

    As ``timeit`` does, the garbage collector runs once before and is off
    during the timed calls: a collection before every call would walk every
    object of the loaded libraries and time calls with cold caches.
    """
    for _ in range(warmup):
        fn(*args)
    times = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return statistics.median(times) * 1e3
