"""``python -m tapegrad warm``: compile tapegrad's kernels ahead, into the cache.

Never required -- every kernel compiles on its first use and is cached -- but
useful when building an image or before a cluster job, so that no program
pays the first compilation.  Prints one line per step on stderr.
"""
import sys
import time


def _steps():
    import numpy as np

    import tapegrad as tg
    from tapegrad.kernels import dispatch

    x = np.linspace(0.1, 0.9, 6)

    def backward():
        t = tg.tensor(x, requires_grad=True)
        (t * 2.0).backward(np.ones(6))

    yield "reverse sweep", backward

    def small_backward():
        # a small hook-free backward runs as one compiled call once the sweep
        # is compiled (kernels/sweep.py: quick_backward); the second step takes it
        for _ in range(2):
            t = tg.tensor(x, requires_grad=True)
            (t * t).sum().backward()

    yield "one-call backward of small graphs", small_backward

    def fused():
        from tapegrad.engine.fused import FUSE_MIN
        t = tg.tensor(np.linspace(0.1, 0.9, FUSE_MIN), requires_grad=True)
        (tg.sin(t) * t * 2.0).sum().backward()

    yield "fused reverse sweep of large elementwise runs", fused

    def long_tape():
        # past GRAPH_SEARCH_FROM records a backward searches its root's graph
        # (graph_of, graph_addresses) instead of laying out the whole tape
        from tapegrad.engine.backward import GRAPH_SEARCH_FROM
        t = tg.tensor(0.5, requires_grad=True)
        y = t
        for _ in range(GRAPH_SEARCH_FROM // 2 + 1):
            y = y * 0.5 + t
        y.backward()

    yield "graph search of a long tape", long_tape
    yield from dispatch.VJP.warm()

    def float32():
        # a float32 graph of large values sweeps in float32 (autograd.Adjoints):
        # the sweep and the fused kernel compile a second time for it
        from tapegrad.engine.fused import FUSE_MIN
        for n in (64, FUSE_MIN):
            t = tg.tensor(np.linspace(0.1, 0.9, n).astype(np.float32), requires_grad=True)
            (tg.sin(t) * t * 2.0).sum().backward()

    yield "float32 reverse sweep", float32
    yield from dispatch.VJP32.warm()
    yield "Jacobians (vector sweep)", lambda: tg.jacobian(lambda v: tg.sin(v) * v)(x)

    def jacobian_products():
        # a matrix product meets a block of mostly-zero adjoint vectors
        # (kernels/blocks.py); a traced call is a host op without a batched
        # VJP, swept one vector at a time (kernels/vector.py: touched)
        m = np.linspace(-1.0, 1.0, 36).reshape(6, 6)
        tg.jacobian(lambda v: tg.tanh(m @ v) * v)(x)
        tg.jacobian(tg.trace(lambda v: tg.sin(v) * v, x))(x)

    yield "Jacobians through matrix products and traced calls", jacobian_products
    yield "Hessians", lambda: tg.hessian(lambda v: (tg.exp(v) * v).sum())(x)
    yield "forward mode", lambda: tg.jvp(lambda v: tg.sin(v) * v, (x,), (x,))

    def replay():
        import tapegrad.transforms.functional as ft
        f = tg.trace(lambda v: (tg.sin(v) * v).sum(), x)
        ft.value_and_grad(f)(x)
        ft.value_and_grad(f)(x)

    yield "traced replay", replay

    def batch():
        f = tg.trace(lambda v: (tg.sin(v) * v).sum(), x)
        f.grad_batch(np.stack([x, x * 0.5]))

    yield "batched replay (grad_batch)", batch
    from tapegrad.kernels import replay as RK
    yield from RK.FWD.warm()
    from tapegrad.kernels import tangents as FK
    yield from FK.JVP.warm()
    from tapegrad.kernels import hvp as SK
    yield from SK.BLOCK.warm()


def warm():
    from tapegrad.kernels import interpret
    steps = list(_steps())
    t0 = time.perf_counter()
    for i, (what, fn) in enumerate(steps, 1):
        t = time.perf_counter()
        print(f"[{i:2}/{len(steps)}] {what} ...", end="", file=sys.stderr, flush=True)
        with interpret.mode(0):   # compile, however small the warm-up's work
            fn()
        print(f" {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    from tapegrad.kernels._jit import cache_dir
    print(f"done in {time.perf_counter() - t0:.1f} s; cached in {cache_dir()}", file=sys.stderr)


def main(argv):
    if argv[:1] != ["warm"]:
        print("usage: python -m tapegrad warm   (compile every kernel ahead, into the cache)",
              file=sys.stderr)
        return 2
    import os
    os.environ.setdefault("TAPEGRAD_QUIET", "1")
    warm()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
