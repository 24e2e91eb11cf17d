"""Memory and time of a long time-stepping loop: the plain tape against
``tg.checkpoint_loop`` (about sqrt(steps) checkpointed segments).

A damped oscillator of ``N`` independent states, explicit Euler, ``STEPS``
steps; the gradient of the final energy with respect to the stiffness, the
damping and the initial state.  Each variant runs in a fresh process, so
that its peak (``tracemalloc``: the tape's NumPy arrays included) is its
own; prints peak MB, seconds for forward + backward (median of 3, timed
without tracemalloc), and the ratios.

Run: ``python benchmarks/checkpoint.py [--steps 100000] [--n 10]``.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

_CHILD = r'''
import json, sys, time, tracemalloc
import numpy as np
import tapegrad as tg

steps, n, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def step(state, k, c):
    u, v = state
    return u + 0.01 * v, v - 0.01 * (k * u + c * v)

def run():
    k = tg.tensor(4.0, requires_grad=True)
    c = tg.tensor(0.3, requires_grad=True)
    u0 = tg.tensor(np.linspace(0.5, 1.5, n), requires_grad=True)
    v0 = tg.tensor(np.zeros(n), requires_grad=True)
    if how == "plain":
        s = (u0, v0)
        for _ in range(steps):
            s = step(s, k, c)
    else:
        s = tg.checkpoint_loop(step, (u0, v0), steps, k, c)
    u, v = s
    ((u * u).sum() + (v * v).sum()).backward()
    return k.grad.item(), c.grad.item()

run()                      # compile / load the kernels outside the measurement
times = []
for _ in range(3):         # timed without tracemalloc, which slows every allocation
    t0 = time.perf_counter()
    g = run()
    times.append(time.perf_counter() - t0)
tracemalloc.start()
run()
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"peak": peak, "seconds": sorted(times)[1], "grad": g}))
'''


def measure(steps, n, how):
    out = subprocess.run([sys.executable, "-c", _CHILD, str(steps), str(n), how],
                         capture_output=True, text=True, env=dict(os.environ), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--n", type=int, default=10)
    a = ap.parse_args(argv)
    plain = measure(a.steps, a.n, "plain")
    ck = measure(a.steps, a.n, "checkpoint")
    assert abs(plain["grad"][0] - ck["grad"][0]) <= 1e-9 * max(1.0, abs(plain["grad"][0]))
    print(f"{a.steps} steps, {a.n} states; tracemalloc peak and forward + backward seconds")
    print(f"{'':24} {'peak MB':>10} {'seconds':>10}")
    for name, r in (("plain tape", plain), ("tg.checkpoint_loop", ck)):
        print(f"{name:24} {r['peak'] / 1e6:10.1f} {r['seconds']:10.2f}")
    print(f"{'checkpoint / plain':24} {ck['peak'] / plain['peak']:10.3f} "
          f"{ck['seconds'] / plain['seconds']:10.2f}")


if __name__ == "__main__":
    main()
