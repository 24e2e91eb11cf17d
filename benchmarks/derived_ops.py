#!/usr/bin/env python
"""User elementwise ops whose derivative tapegrad derives from the source
(``tg.elementwise(f)``), on 1e6 float64 elements: the gradient of
``sum(f(x))`` (forward + backward) against

* the same op with a hand-written ``derivative=``,
* the same formula written as tapegrad array ops (``np.where`` on tensors),
* the formula as PyTorch CPU array ops and as JAX array ops under
  ``jax.jit(jax.grad(...))``, when they are installed (columns left out
  otherwise),

and ``tg.hvp`` (gradient and Hessian-vector product) of the derived op
against the array-op formula.  One thread everywhere; medians in ms of
``--repeat`` calls after warm-up, all in one run; every column is checked
against the derived op's gradient first.

Run: ``python benchmarks/derived_ops.py [-n REPEAT] [--size N]``.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import argparse  # noqa: E402
import math  # noqa: E402

import _timing  # noqa: F401  (first: pins every library to one thread)
import numpy as np  # noqa: E402

from _interleave import interleaved_ms  # noqa: E402

DELTA = 1.0
NU = 4.0
_T_CONST = (math.lgamma(0.5 * (NU + 1.0)) - math.lgamma(0.5 * NU)
            - 0.5 * math.log(NU * math.pi))


# -- the scalar functions, with their hand-written derivatives --------------------------

def huber(x):
    """Huber loss: quadratic within DELTA, linear outside (a branch)."""
    a = abs(x)
    if a <= DELTA:
        return 0.5 * x * x
    return DELTA * (a - 0.5 * DELTA)


def huber_derivative(x, y):
    if abs(x) <= DELTA:
        return x
    return DELTA if x > 0.0 else -DELTA


def student_t(x):
    """Log-density of Student's t with NU degrees of freedom."""
    return _T_CONST - 0.5 * (NU + 1.0) * math.log1p(x * x / NU)


def student_t_derivative(x, y):
    return -(NU + 1.0) * x / (NU + x * x)


# -- the same formulas as array ops, one module each ------------------------------------

def huber_array(xp, x):
    a = abs(x)
    return xp.where(a <= DELTA, 0.5 * x * x, DELTA * (a - 0.5 * DELTA))


def student_t_array(xp, x):
    return _T_CONST - 0.5 * (NU + 1.0) * xp.log1p(x * x / NU)


WORKLOADS = {"huber (branch)": (huber, huber_derivative, huber_array),
             "student-t log-density": (student_t, student_t_derivative, student_t_array)}


def columns(tg, size):
    """name -> {workload -> zero-argument function returning the gradient}."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(size) * 2.0
    out = {}
    derived = {w: tg.elementwise(f) for w, (f, _, _) in WORKLOADS.items()}
    by_hand = {w: tg.elementwise(f, derivative=d) for w, (f, d, _) in WORKLOADS.items()}

    def tg_grad(op):
        def run():
            t = tg.tensor(x, requires_grad=True)
            op(t).sum().backward()
            return t.grad.numpy()
        return run

    out["derived"] = {w: tg_grad(op) for w, op in derived.items()}
    out["derivative="] = {w: tg_grad(op) for w, op in by_hand.items()}
    out["tapegrad array ops"] = {w: tg_grad(lambda t, arr=arr: arr(np, t))
                                 for w, (_, _, arr) in WORKLOADS.items()}
    try:
        import torch
        torch.set_num_threads(1)
        xt = torch.from_numpy(x)

        def torch_grad(arr):
            def run():
                t = xt.clone().requires_grad_(True)
                arr(torch, t).sum().backward()
                return t.grad.numpy()
            return run

        out["torch"] = {w: torch_grad(arr) for w, (_, _, arr) in WORKLOADS.items()}
    except ImportError:
        pass
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        xj = jnp.asarray(x)

        def jax_grad(arr):
            g = jax.jit(jax.grad(lambda t: arr(jnp, t).sum()))
            return lambda: np.asarray(g(xj).block_until_ready())

        out["jax jit"] = {w: jax_grad(arr) for w, (_, _, arr) in WORKLOADS.items()}
    except ImportError:
        pass

    ones = np.ones_like(x)

    def tg_hvp(fn):
        return lambda: tg.hvp(lambda t: fn(t).sum(), (x,), (ones,))[1][0]

    hvps = {"derived": {w: tg_hvp(op) for w, op in derived.items()},
            "tapegrad array ops": {w: tg_hvp(lambda t, arr=arr: arr(np, t))
                                   for w, (_, _, arr) in WORKLOADS.items()}}
    return out, hvps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--repeat", type=int, default=15)
    parser.add_argument("--size", type=int, default=1_000_000)
    args = parser.parse_args()
    import tapegrad as tg
    grads, hvps = columns(tg, args.size)
    for table in (grads, hvps):
        ref = {w: f() for w, f in table["derived"].items()}
        for name, fns in table.items():
            for w, f in fns.items():
                np.testing.assert_allclose(f(), ref[w], rtol=1e-12, atol=1e-12,
                                           err_msg=f"{name}, {w}")
    print(f"{args.size:.0e} float64 elements, one thread, median of {args.repeat} (ms)\n")
    heads = list(grads) + ["array ops / derived"]
    print("| gradient of sum(f(x)), fwd+bwd | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    for w in WORKLOADS:
        ms = interleaved_ms({c: (f[w], None) for c, f in grads.items()}, args.repeat, warmup=3)
        cells = [f"{ms[c]:.1f}" for c in grads]
        cells.append(f"{ms['tapegrad array ops'] / ms['derived']:.2f}x")
        print(f"| {w} | " + " | ".join(cells) + " |")
    print()
    heads = list(hvps) + ["array ops / derived"]
    print("| tg.hvp (gradient and H v) | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(heads))
    for w in WORKLOADS:
        ms = interleaved_ms({c: (f[w], None) for c, f in hvps.items()}, args.repeat, warmup=3)
        cells = [f"{ms[c]:.1f}" for c in hvps]
        cells.append(f"{ms['tapegrad array ops'] / ms['derived']:.2f}x")
        print(f"| {w} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
