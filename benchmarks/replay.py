"""Trace once, replay compiled: medians of value-and-grad on two workloads.

Scalar chain (2,000 steps of ``y = y*0.999 + sin(y)*0.001``, 8,000 records)
and the 1e6 elementwise workload ``(3*a + 2*b*b + log(c)).sum()``: eager
tapegrad (record + backward), ``tg.trace`` replay (``ft.value_and_grad``),
and ``jax.jit(jax.value_and_grad(f))`` when JAX is importable (run with an
interpreter that has it), and PyTorch eager on the chain when torch is.
Also the one-off costs: trace + first call, and JAX's first (compiling)
call; and the ratios the issue sets goals for.  The steady-state rows are
medians; JAX and the replay use every core (XLA's CPU backend splits large
fused loops among threads, as the replay's fused segments do).

    python benchmarks/replay.py
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
from workloads import CHAIN_STEPS, CHAIN_X0, elementwise_inputs  # noqa: E402

try:
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
except ImportError:
    jax = None
try:
    import torch
    torch.set_default_dtype(torch.float64)
except ImportError:
    torch = None


def median_time(fn, repeat, number=1):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        ts.append((time.perf_counter() - t) / number)
    return float(np.median(ts))


def chain(y, sin):
    for _ in range(CHAIN_STEPS):
        y = y * 0.999 + sin(y) * 0.001
    return y


def elementwise(a, b, c, log):
    return (3 * a + 2 * b * b + log(c)).sum()


def fmt(s):
    return f"{s * 1e3:10.3f} ms"


def main():
    rows = []
    # -- scalar chain ------------------------------------------------------------------
    def eager_chain():
        x = tg.tensor(CHAIN_X0, requires_grad=True)
        chain(x, np.sin).backward()
        return x.grad

    eager_chain()
    rows.append(("chain: eager record + backward", median_time(eager_chain, 7)))
    t = time.perf_counter()
    ft = tg.trace(lambda x: chain(x, np.sin), CHAIN_X0)
    ft.value_and_grad(CHAIN_X0)
    rows.append(("chain: trace + first call", time.perf_counter() - t))
    rows.append(("chain: replay value_and_grad",
                 median_time(lambda: ft.value_and_grad(CHAIN_X0), 21, 10)))
    if torch is not None:
        def torch_chain():
            x = torch.tensor(CHAIN_X0, requires_grad=True)
            chain(x, torch.sin).backward()
            return x.grad
        torch_chain()
        rows.append(("chain: PyTorch eager forward + backward", median_time(torch_chain, 7)))
    if jax is not None:
        jf = jax.jit(jax.value_and_grad(lambda x: chain(x, jnp.sin)))
        t = time.perf_counter()
        jax.block_until_ready(jf(CHAIN_X0))
        rows.append(("chain: jax.jit first call (compile)", time.perf_counter() - t))
        rows.append(("chain: jax.jit(value_and_grad)",
                     median_time(lambda: jax.block_until_ready(jf(CHAIN_X0)), 21, 10)))
    # -- elementwise 1e6 ------------------------------------------------------------------
    a, b, c = elementwise_inputs()

    def eager_elem():
        ts = [tg.tensor(v, requires_grad=True) for v in (a, b, c)]
        elementwise(*ts, np.log).backward()
        return ts[0].grad

    eager_elem()
    rows.append(("elementwise 1e6: eager record + backward", median_time(eager_elem, 7)))
    t = time.perf_counter()
    fe = tg.trace(lambda a, b, c: elementwise(a, b, c, np.log), a, b, c)
    fe.value_and_grad(a, b, c)
    rows.append(("elementwise 1e6: trace + first call", time.perf_counter() - t))
    rows.append(("elementwise 1e6: replay value_and_grad",
                 median_time(lambda: fe.value_and_grad(a, b, c), 11)))
    if jax is not None:
        je = jax.jit(jax.value_and_grad(lambda a, b, c: elementwise(a, b, c, jnp.log),
                                        argnums=(0, 1, 2)))
        ja, jb, jc = (jnp.asarray(v) for v in (a, b, c))
        jax.block_until_ready(je(ja, jb, jc))
        rows.append(("elementwise 1e6: jax.jit(value_and_grad)",
                     median_time(lambda: jax.block_until_ready(je(ja, jb, jc)), 11)))
    for name, s in rows:
        print(f"{name:45s}{fmt(s)}")
    t = dict(rows)
    ratios = [("chain: replay / jax.jit", "chain: replay value_and_grad",
               "chain: jax.jit(value_and_grad)", "goal <= 2"),
              ("chain: PyTorch eager / replay", "chain: PyTorch eager forward + backward",
               "chain: replay value_and_grad", "goal >= 300"),
              ("chain: jax first call / (trace + first call)",
               "chain: jax.jit first call (compile)", "chain: trace + first call",
               "goal >= 50"),
              ("elementwise: replay / jax.jit", "elementwise 1e6: replay value_and_grad",
               "elementwise 1e6: jax.jit(value_and_grad)", "goal <= 2")]
    for name, a, b, goal in ratios:
        if a in t and b in t:
            print(f"{name:45s}{t[a] / t[b]:10.2f}x    ({goal})")


if __name__ == "__main__":
    main()
