#!/usr/bin/env python
"""exp, log and tanh over 1e6 float64 elements in compiled loops: tapegrad's
vectorisable forms (``tapegrad/kernels/vecmath.py``) against a loop of
``np.exp``/``np.log``/``np.tanh`` compiled by Numba (a libm call per element) and
NumPy's own ufunc loops.  Median of ``--repeat`` samples, milliseconds.

Run from anywhere: ``python benchmarks/vecmath.py [--n 1000000] [--repeat 30]``.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _median_ms(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args(argv)

    import numba
    from tapegrad.kernels import _jit
    _jit.materialize()
    from tapegrad.kernels import vecmath

    exp_v, log_v, tanh_v = vecmath.exp_v, vecmath.log_v, vecmath.tanh_v

    @numba.njit(error_model="numpy")
    def loop_exp_v(x, y):
        for i in range(x.size):
            y[i] = exp_v(x[i])

    @numba.njit(error_model="numpy")
    def loop_log_v(x, y):
        for i in range(x.size):
            y[i] = log_v(x[i])

    @numba.njit(error_model="numpy")
    def loop_tanh_v(x, y):
        for i in range(x.size):
            y[i] = tanh_v(x[i])

    @numba.njit(error_model="numpy")
    def loop_tanh_libm(x, y):
        for i in range(x.size):
            y[i] = np.tanh(x[i])

    @numba.njit(error_model="numpy")
    def loop_exp_libm(x, y):
        for i in range(x.size):
            y[i] = np.exp(x[i])

    @numba.njit(error_model="numpy")
    def loop_log_libm(x, y):
        for i in range(x.size):
            y[i] = np.log(x[i])

    rng = np.random.default_rng(0)
    x = rng.uniform(-5.0, 5.0, a.n)
    xp = rng.uniform(0.01, 100.0, a.n)
    y = np.empty(a.n)
    rows = [("exp", lambda: loop_exp_v(x, y), lambda: loop_exp_libm(x, y),
             lambda: np.exp(x, out=y)),
            ("log", lambda: loop_log_v(xp, y), lambda: loop_log_libm(xp, y),
             lambda: np.log(xp, out=y)),
            ("tanh", lambda: loop_tanh_v(x, y), lambda: loop_tanh_libm(x, y),
             lambda: np.tanh(x, out=y))]
    print(f"{a.n:,} float64 elements, ms (median of {a.repeat})")
    print("| | tapegrad vecmath | Numba loop of the NumPy function (libm) | NumPy ufunc |")
    print("|---|---:|---:|---:|")
    for name, v, libm, npy in rows:
        print(f"| {name} | {_median_ms(v, a.repeat):.2f} | {_median_ms(libm, a.repeat):.2f} "
              f"| {_median_ms(npy, a.repeat):.2f} |")


if __name__ == "__main__":
    main()
