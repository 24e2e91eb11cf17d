#!/usr/bin/env python
"""Hessian of the Rosenbrock function, n = 100: ``tg.hessian`` (forward-over-
reverse, all n directions in one batched pass; eager, and on a traced
function, the counterpart of JAX's ``jit``) against PyTorch's
``torch.autograd.functional.hessian(vectorize=True)`` and
``jax.jit(jax.hessian(f))`` (steady state), where installed; one thread,
medians in ms.  Each result is checked against the closed form first.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/hessian.py [-n REPEAT] [--size N]``.
"""
import argparse

import _timing  # noqa: F401  (first: pins every library to one thread)

import numpy as np  # noqa: E402
from _timing import median_ms  # noqa: E402
from transform_workloads import rosen, rosen_hessian  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--repeat", type=int, default=51)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    x = np.random.default_rng(0).uniform(-1.5, 1.5, args.size)
    expect = rosen_hessian(x)
    rows = []

    import tapegrad as tg
    h = tg.hessian(rosen)
    rows.append(("tapegrad `tg.hessian` (eager: records f each call)", h, (x,)))
    ft = tg.trace(rosen, x)
    rows.append(("tapegrad `tg.trace(f).hessian` (traced once)", ft.hessian, (x,)))
    try:
        import torch
        torch.set_num_threads(1)
        tx = torch.tensor(x)

        def torch_h(t):
            return torch.autograd.functional.hessian(rosen, t, vectorize=True)
        rows.append(("PyTorch `hessian(vectorize=True)`", torch_h, (tx,)))
    except ImportError:
        pass
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jh = jax.jit(jax.hessian(rosen))
        jx = jax.numpy.asarray(x)
        rows.append(("JAX `jit(hessian)`", lambda a: jh(a).block_until_ready(), (jx,)))
    except ImportError:
        pass
    for label, fn, a in rows:
        np.testing.assert_allclose(np.asarray(fn(*a)), expect, rtol=1e-10, atol=1e-8,
                                   err_msg=label)
    print(f"Hessian of Rosenbrock, n = {args.size}; median of {args.repeat}, one thread\n")
    print("| | ms | x tapegrad |")
    print("|---|---:|---:|")
    base = None
    for label, fn, a in rows:
        ms = median_ms(fn, a, args.repeat)
        base = base or ms
        print(f"| {label} | {ms:.3f} | {ms / base:.2f} |")


if __name__ == "__main__":
    main()
