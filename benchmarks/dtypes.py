#!/usr/bin/env python
"""The elementwise and MLP workloads of compare.py in float64 and float32:
tapegrad, the hand-written NumPy forward + VJP (handwritten.py, which keeps
its inputs' dtype) and PyTorch CPU, one thread, medians in ms.

A float32 program's gradients are checked against the hand-written float32
ones (``rtol=1e-4``) before anything is timed.  Both workloads are float32
graphs end to end in float32 (docs/how_it_works.md: dtypes): float32 values kept, a
float32 sweep, float32 gradients.

Run: ``python benchmarks/dtypes.py [-n REPEAT]``.
"""
import os

# every kernel compiles on its first call, none runs interpreted while timed
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import argparse  # noqa: E402

import _timing  # noqa: F401,E402  (first: pins every library to one thread)
import numpy as np  # noqa: E402

import handwritten as hw  # noqa: E402
from _interleave import interleaved_ms  # noqa: E402
from benchmarks import workloads as wl  # noqa: E402


def _tapegrad(tg, dtype):
    a, b, c = (tg.tensor(v.astype(dtype), requires_grad=True) for v in wl.elementwise_inputs())
    X, W1, W2, labels = wl.mlp_inputs()
    X = X.astype(dtype)
    W1, W2 = (tg.tensor(w.astype(dtype), requires_grad=True) for w in (W1, W2))

    def elementwise():
        a.grad = b.grad = c.grad = None
        wl.tg_elementwise(tg, a, b, c).backward()
        return a.grad.numpy(), b.grad.numpy(), c.grad.numpy()

    def mlp():
        W1.grad = W2.grad = None
        wl.tg_mlp(tg, X, W1, W2, labels).backward()
        return W1.grad.numpy(), W2.grad.numpy()
    return {"elementwise": elementwise, "mlp": mlp}


def _numpy(dtype):
    a, b, c = (v.astype(dtype) for v in wl.elementwise_inputs())
    X, W1, W2, labels = wl.mlp_inputs()
    X, W1, W2 = (v.astype(dtype) for v in (X, W1, W2))
    return {"elementwise": lambda: hw.elementwise_value_and_grad(a, b, c)[1],
            "mlp": lambda: hw.mlp_value_and_grad(X, W1, W2, labels)[1]}


def _torch(torch, dtype):
    tdt = {np.float64: torch.float64, np.float32: torch.float32}[dtype]
    a, b, c = (torch.tensor(v, dtype=tdt, requires_grad=True) for v in wl.elementwise_inputs())
    X, W1, W2, labels = wl.mlp_inputs()
    X = torch.tensor(X, dtype=tdt)
    labels = torch.tensor(labels, dtype=torch.int64)
    W1, W2 = (torch.tensor(w, dtype=tdt, requires_grad=True) for w in (W1, W2))

    def elementwise():
        a.grad = b.grad = c.grad = None
        (3 * a + 2 * b * b + torch.log(c)).sum().backward()
        return a.grad.numpy(), b.grad.numpy(), c.grad.numpy()

    def mlp():
        W1.grad = W2.grad = None
        z = torch.tanh(X @ W1) @ W2
        rows = torch.arange(z.shape[0])
        (torch.logsumexp(z, dim=1) - z[rows, labels]).mean().backward()
        return W1.grad.numpy(), W2.grad.numpy()
    return {"elementwise": elementwise, "mlp": mlp}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--repeat", type=int, default=15)
    args = parser.parse_args()
    import tapegrad as tg
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    print(f"numpy {np.__version__}, one thread, median of {args.repeat}\n")
    heads = ["tapegrad", "numpy"] + (["torch"] if torch else []) + ["tapegrad/numpy"] + (
        ["torch/tapegrad"] if torch else [])
    print("| workload (fwd+bwd, ms) | dtype | " + " | ".join(heads) + " |")
    print("|---|---|" + "---:|" * len(heads))
    for work in ("elementwise", "mlp"):
        for dtype in (np.float64, np.float32):
            columns = {"tapegrad": _tapegrad(tg, dtype), "numpy": _numpy(dtype)}
            if torch:
                columns["torch"] = _torch(torch, dtype)
            want = columns["numpy"][work]()
            for name, fns in columns.items():
                for g, w in zip(fns[work](), want, strict=True):
                    g = np.asarray(g)
                    assert g.dtype == dtype, (name, work, g.dtype)
                    np.testing.assert_allclose(g, w, rtol=1e-4 if dtype == np.float32 else 1e-10,
                                               atol=1e-6, err_msg=f"{name} {work}")
            ms = interleaved_ms({name: (fns[work], None) for name, fns in columns.items()},
                                args.repeat, warmup=3)
            cells = [f"{ms[c]:.2f}" for c in columns] + [f"{ms['tapegrad'] / ms['numpy']:.2f}x"]
            if torch:
                cells.append(f"{ms['torch'] / ms['tapegrad']:.2f}x")
            print(f"| {work} | {np.dtype(dtype).name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
