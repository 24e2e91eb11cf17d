"""Complex elementwise ops and FFTs, forward + backward: tapegrad, PyTorch, JAX.

The workload is a spectral filter fit: a real signal batch ``x`` (B, N) goes
through ``rfft``, is multiplied by a complex transfer function ``exp(a + ib)``
of per-bin parameters, comes back through ``irfft`` and through a 2-D
``fft2`` of the stacked batch, and the loss is the squared error of the
filtered signal plus the spectral energy.  Gradients of the loss with
respect to ``x``, ``a`` and ``b``.  Median of repeats, after a warm-up call.

Run: ``python benchmarks/complex_fft.py [--batch 64] [--n 4096] [--repeat 20]``.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402


def loss_np(xp, x, a, b, target):
    s = xp.fft.rfft(x)
    h = xp.exp(a + 1j * b)
    y = xp.fft.irfft(s * h, x.shape[-1])
    e = y - target
    spec = xp.fft.fft2(s * h, norm="ortho")
    return (e * e).sum() + 1e-3 * (xp.abs(spec) ** 2).sum()


def _median(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    B, N = args.batch, args.n
    x0 = rng.normal(size=(B, N))
    a0 = rng.normal(size=N // 2 + 1) * 0.1
    b0 = rng.normal(size=N // 2 + 1)
    target = rng.normal(size=(B, N))
    rows = []

    def numpy_only():
        loss_np(np, x0, a0, b0, target)
    rows.append(("NumPy (forward only)", _median(numpy_only, args.repeat)))

    def tapegrad_run():
        x, a, b = (tg.tensor(v, requires_grad=True) for v in (x0, a0, b0))
        loss_np(np, x, a, b, target).backward()
        return x.grad, a.grad, b.grad
    rows.append(("tapegrad", _median(tapegrad_run, args.repeat)))
    ref = [g.numpy() for g in tapegrad_run()]

    try:
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
        xt, at, bt, tt = (torch.tensor(v) for v in (x0, a0, b0, target))

        def torch_run():
            x, a, b = (v.clone().requires_grad_(True) for v in (xt, at, bt))
            loss_np(torch, x, a, b, tt).backward()
            return x.grad, a.grad, b.grad
        rows.append(("PyTorch eager", _median(torch_run, args.repeat)))
        for g, r in zip(torch_run(), ref):
            np.testing.assert_allclose(g.numpy(), r, rtol=1e-8, atol=1e-8)
    except ImportError:
        pass
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        g = jax.jit(jax.grad(lambda x, a, b: loss_np(jnp, x, a, b, target), argnums=(0, 1, 2)))

        def jax_run():
            return [v.block_until_ready() for v in g(x0, a0, b0)]
        rows.append(("JAX jit", _median(jax_run, args.repeat)))
        for gv, r in zip(jax_run(), ref):
            np.testing.assert_allclose(np.asarray(gv), r, rtol=1e-8, atol=1e-8)
    except ImportError:
        pass

    print(f"batch {B} x {N} samples, forward + backward, median of {args.repeat}")
    print(f"| {'what':<22} | {'ms':>8} |")
    print(f"|{'-' * 24}|{'-' * 10}|")
    for name, t in rows:
        print(f"| {name:<22} | {t * 1e3:8.2f} |")


if __name__ == "__main__":
    main()
