"""Many gradients of one traced function on a Dask cluster, against one process.

An ensemble of logistic-regression parameter vectors (one row of ``W`` per
model) is scored on one fixed data set, which the traced function closes
over (a constant of the trace).  Every row's gradient is computed

* in this process: a Python loop of ``ft.grad``, ``ft.grad_batch`` on one
  thread and on every core;
* on a ``dask.distributed.LocalCluster`` of worker processes (one thread
  each): ``grad_blocks`` over a dask array of the rows, ``map_inputs`` over
  a list, ``map_bag`` over a bag;

and every result is compared with the loop's.  The cluster's start and the
kernels' warm-up on its workers are timed apart from the gradients.

Needs the dask extra: pip install 'tapegrad[dask]'.
Run: python examples/dask_gradients.py [--n 20000] [--workers 2]
"""
import argparse
import os
import statistics
import time

import numpy as np

import tapegrad as tg
from tapegrad.integrations import dask as tgd


def make_loss(samples, features, seed=0):
    """The mean logistic loss of a weight vector on a fixed random data set,
    with an L2 penalty."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(samples, features))
    y = np.sign(A @ rng.normal(size=features) + 0.3 * rng.normal(size=samples))

    def loss(w):
        margins = y * (A @ w)
        return np.logaddexp(0.0, -margins).mean() + 1e-3 * (w * w).sum()

    return loss


def timed(fn, repeat):
    """(median seconds over ``repeat`` calls, the last result)."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000, help="models (gradients per run)")
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--samples", type=int, default=256, help="rows of the data set")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--chunks", type=int, default=0,
                   help="rows per block / batch (default: 4 per worker)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per row (median)")
    args = p.parse_args(argv)

    import dask.array as da
    import dask.bag as db
    from distributed import Client, LocalCluster

    W = np.random.default_rng(1).normal(size=(args.n, args.features))
    ft = tg.trace(make_loss(args.samples, args.features), W[0])
    chunk = args.chunks or max(1, -(-args.n // (4 * args.workers)))

    rows = []
    ref = None

    def row(name, fn, check):
        nonlocal ref
        seconds, out = timed(fn, args.repeat)
        got = check(out)
        diff = 0.0 if ref is None else float(np.max(np.abs(got - ref)))
        if ref is None:
            ref = got
        rows.append((name, seconds, diff))

    # compile (or load) the kernels here first, as warm_workers does on the workers
    tgd.warm_here([(ft, (W[0],)), (ft, (W[:4],), "grad_batch")])
    row("loop of ft.grad (1 process)", lambda: [ft.grad(w) for w in W], np.stack)
    row("ft.grad_batch, 1 thread", lambda: ft.grad_batch(W, workers=1), np.asarray)
    row(f"ft.grad_batch, {os.cpu_count()} threads", lambda: ft.grad_batch(W), np.asarray)

    t = time.perf_counter()
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    started = time.perf_counter() - t
    try:
        t = time.perf_counter()
        tgd.warm_workers(client, (ft, (W[0],)))
        warmed = time.perf_counter() - t
        dW = da.from_array(W, chunks=(chunk, args.features))
        row(f"grad_blocks, {args.workers} workers, blocks of {chunk}",
            lambda: tgd.grad_blocks(ft, dW).compute(), np.asarray)
        row(f"map_inputs, {args.workers} workers",
            lambda: tgd.map_inputs(client, ft, list(W)), np.stack)
        bag = db.from_sequence(list(W), npartitions=4 * args.workers)
        row(f"map_bag, {args.workers} workers, {4 * args.workers} partitions",
            lambda: tgd.map_bag(ft, bag).compute(), np.stack)
    finally:
        client.close()
        cluster.close()

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.n} gradients of a logistic loss ({args.samples} x {args.features} data), "
          f"{os.cpu_count()} cores, load average {load:.2f}, median of {args.repeat}")
    print(f"cluster start {started:.2f} s, kernels warm on the workers {warmed:.2f} s "
          "(not in the rows below)")
    base = rows[0][1]
    print(f"| {'how':<44} | {'s':>7} | {'us/gradient':>11} | {'x loop':>6} |")
    print(f"|{'-' * 46}|{'-' * 9}:|{'-' * 13}:|{'-' * 8}:|")
    for name, seconds, _ in rows:
        print(f"| {name:<44} | {seconds:7.3f} | {1e6 * seconds / args.n:11.1f} | "
              f"{base / seconds:6.2f} |")
    print(f"max |difference| from per-input ft.grad: {max(d for *_, d in rows):g}")


if __name__ == "__main__":
    main()
