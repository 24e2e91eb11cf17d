#!/usr/bin/env python
"""Peak memory of one forward+backward: tapegrad, hand-written NumPy, PyTorch, JAX.

Workloads (those of ``compare.py``), each in float64 and float32:

* elementwise -- ``(3*a + 2*b*b + log(c)).sum()`` over 1e6 elements, the
  gradients of ``a``, ``b`` and ``c``;
* MLP step -- 256x784 batch, 784-256-10 tanh MLP, mean softmax cross-entropy
  (``logsumexp``), the gradients of ``W1`` and ``W2``.

Implementations: ``tapegrad``; ``numpy``, the hand-written forward + VJP of
``handwritten.py`` (the baseline of the ratio columns); ``torch``, PyTorch
eager; ``jax``, ``jax.jit(jax.value_and_grad(f))``.  torch and JAX are
optional: their rows are skipped, with a note, when they cannot be imported.

Method.  Every case runs in a fresh interpreter (``--repeat`` of them; the
table shows medians and, in ``spread``, the largest minus the smallest
peak).  The child creates the inputs in the case's dtype, runs one whole
warm-up step (JIT compilation, tapegrad's adjoint arena, PyTorch's and
XLA's caches), drops its results, runs ``gc.collect()`` and glibc's
``malloc_trim(0)``, and then measures one step with the garbage collector
off:

* ``rss`` method: the resident set's high-water mark is reset by writing
  ``5`` to ``/proc/self/clear_refs``; ``VmRSS`` is read from
  ``/proc/self/status`` before the step (``baseline``), after the forward
  pass (``after fwd``: what the forward keeps alive for the backward, the
  output included) and after the backward, with ``VmHWM`` (``peak``: the
  largest resident set during the step) and ``VmRSS`` (``after step``: the
  gradients, mostly).  All figures except ``baseline`` are above the
  baseline.  JAX's jitted call has no forward/backward boundary (``after
  fwd`` is ``-``).
* ``tracemalloc`` method, only where ``clear_refs`` cannot be written (or
  with ``--tracemalloc``) and only for the NumPy-only implementations
  (numpy, tapegrad): the same
  figures from ``tracemalloc``'s traced current and peak sizes.  It sees
  what NumPy allocates, not what compiled code allocates on its own; torch
  and JAX rows are skipped then.

The children run with ``MALLOC_MMAP_THRESHOLD_=131072``: glibc's mmap
threshold is otherwise dynamic -- once a large block is freed, blocks up to
that size come from the heap and stay resident after they are freed, so the
warm-up step would leave the measured step's buffers resident and its
increase would read close to nothing.  Pinned, every large array is its own
mapping, resident while it is alive.  ``--malloc-default`` leaves glibc
alone, for comparison.  Thread pools are limited to one thread (BLAS,
OpenMP, Numba, PyTorch, XLA) and ``TAPEGRAD_INTERPRET=0`` makes tapegrad
compile every kernel in the warm-up, so the measured step runs the compiled
sweep, as every later step would.

tapegrad holds memory from one step to the next, so its rows have two more
figures.  ``held between steps``: the adjoint scratch arena, which outlives
a backward to be reused by the next one (``tg.tape_stats()["bytes"]
["adjoints"]``), plus the large values the tape kept for the VJPs: after a
backward that freed the whole graph they stay referenced until the
thread's next recording op resets the tape (measured as the resident set
released when ``tg.tape_stats()``, which resets it, is called after the
measured step).  Both are resident in the baseline; the reset happens at
the first op of the measured forward, so that step's ``after fwd`` and
``peak`` are net of the release.  ``peak + held`` is the step's peak above
a process that holds nothing of tapegrad's, and the last ratio column
compares that with hand-written NumPy's peak.

A second table shows, for tapegrad, what the tape holds between the forward
and the backward, from one more step after the measured one:
``tg.tape_stats()["bytes"]`` -- ``values_refs`` (the large arrays the VJPs
read, counted whole even where they are the caller's own arrays and no copy
was made), the small-value slots and arena, the record metadata; ``fwd new
(tracemalloc)``: the bytes allocated during the forward and still alive
when it returns, i.e. what the tape costs on top of the caller's arrays;
and the two parts of ``held between steps``.  A float32 graph keeps its
float32 values and sweeps on float32 adjoints (docs/how_it_works.md: dtypes), so its
float32 rows need about half of its float64 ones.

Every implementation's gradients are checked against the hand-written ones
(``numpy.allclose``, loose for float32) after the measurement, and their
dtype against the input dtype.  MB are 10**6 bytes.

Run from anywhere (about 2 minutes on 2 cores with the default 3 repeats,
once the Numba cache is warm):

    NUMBA_CACHE_DIR=/tmp/nc_mem python benchmarks/memory.py [--repeat N]
        [--only elementwise,mlp] [--skip torch --skip jax] [--malloc-default]
        [--tracemalloc]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

IMPLS = ("tapegrad", "numpy", "torch", "jax")
WORKLOADS = ("elementwise", "mlp")
DTYPES = ("float64", "float32")
MB = 1e6
#: the pinned mmap threshold (glibc's initial default, made fixed)
MMAP_THRESHOLD = 131072


# --------------------------------------------------------------------------
# Child: one case
# --------------------------------------------------------------------------

def _status():
    """``VmRSS`` and ``VmHWM`` of this process in bytes (Linux)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value, unit = line.split()
                assert unit == "kB", line
                out[key[:-1]] = int(value) * 1024
    return out


def _reset_hwm():
    """Reset the resident high-water mark; False where that is refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim():
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _inputs(workload, dtype):
    """Fresh NumPy inputs of the workload in ``dtype`` (labels stay int64)."""
    import numpy as np
    from benchmarks import workloads as wl
    if workload == "elementwise":
        arrays = [np.array(v, dtype=dtype) for v in wl.elementwise_inputs()]
        wl._elementwise_inputs.cache_clear()  # drop the cached float64 copies
    else:
        X, W1, W2, labels = wl.mlp_inputs()
        arrays = [np.array(v, dtype=dtype) for v in (X, W1, W2)] + [np.array(labels)]
        wl._mlp_inputs.cache_clear()
    return arrays


class _Numpy:
    """Hand-written forward + VJP; the forward's state is its saved tuple."""

    def __init__(self, workload, inputs):
        import handwritten as hw
        self.inputs = inputs
        if workload == "elementwise":
            self.fwd, self.vjp = hw.elementwise_forward, hw.elementwise_vjp
        else:
            self.fwd, self.vjp = hw.mlp_forward, hw.mlp_vjp

    def prepare(self):
        pass

    def forward(self):
        return self.fwd(*self.inputs)[1]

    def backward(self, saved):
        return tuple(self.vjp(saved))


class _Tapegrad:
    """Leaves made once; their ``.grad`` is reset before each step."""

    def __init__(self, workload, inputs):
        from benchmarks import workloads as wl
        self.tg = tg = wl.import_tapegrad()
        if workload == "elementwise":
            self.leaves = [tg.tensor(v, requires_grad=True) for v in inputs]
            self.args = self.leaves
            self.f = wl.tg_elementwise
        else:
            X, W1, W2, labels = inputs
            self.leaves = [tg.tensor(W1, requires_grad=True),
                           tg.tensor(W2, requires_grad=True)]
            self.args = [X, *self.leaves, labels]
            self.f = wl.tg_mlp

    def prepare(self):
        for leaf in self.leaves:
            leaf.grad = None

    def forward(self):
        return self.f(self.tg, *self.args)

    def backward(self, y):
        y.backward()
        return tuple(leaf.grad.numpy() for leaf in self.leaves)


class _Torch:
    def __init__(self, workload, inputs):
        import torch
        torch.set_num_threads(1)
        self.torch = torch
        self.workload = workload
        if workload == "elementwise":
            self.leaves = [torch.tensor(v, requires_grad=True) for v in inputs]
        else:
            X, W1, W2, labels = inputs
            self.X = torch.tensor(X)
            self.labels = torch.tensor(labels, dtype=torch.int64)
            self.rows = torch.arange(X.shape[0])
            self.leaves = [torch.tensor(W1, requires_grad=True),
                           torch.tensor(W2, requires_grad=True)]

    def prepare(self):
        for leaf in self.leaves:
            leaf.grad = None

    def forward(self):
        torch = self.torch
        if self.workload == "elementwise":
            a, b, c = self.leaves
            return (3 * a + 2 * b * b + torch.log(c)).sum()
        W1, W2 = self.leaves
        z = torch.tanh(self.X @ W1) @ W2
        return (torch.logsumexp(z, dim=1) - z[self.rows, self.labels]).mean()

    def backward(self, y):
        y.backward()
        return tuple(leaf.grad.numpy() for leaf in self.leaves)


class _Jax:
    """``jit(value_and_grad)``: one call is the whole step."""

    def __init__(self, workload, inputs):
        import jax
        jax.config.update("jax_enable_x64", True)  # float64 rows; float32 stays float32
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp
        self.jax = jax
        if workload == "elementwise":
            def f(a, b, c):
                return (3 * a + 2 * b * b + jnp.log(c)).sum()
            self.args = [jax.device_put(v) for v in inputs]
            argnums = (0, 1, 2)
        else:
            def f(X, W1, W2, labels):
                z = jnp.tanh(X @ W1) @ W2
                rows = jnp.arange(z.shape[0])
                return (logsumexp(z, axis=1) - z[rows, labels]).mean()
            self.args = [jax.device_put(v) for v in inputs]
            argnums = (1, 2)
        self.g = jax.jit(jax.value_and_grad(f, argnums=argnums))

    def prepare(self):
        pass

    def forward(self):
        return None

    def backward(self, _):
        _, grads = self.jax.block_until_ready(self.g(*self.args))
        return grads


_CLASSES = {"numpy": _Numpy, "tapegrad": _Tapegrad, "torch": _Torch, "jax": _Jax}


def _check(impl, workload, dtype, inputs, grads):
    """The gradients agree with the hand-written ones and have the input dtype."""
    import numpy as np
    import handwritten as hw
    if workload == "elementwise":
        want = hw.elementwise_value_and_grad(*inputs)[1]
    else:
        want = hw.mlp_value_and_grad(*inputs)[1]
    tol = dict(rtol=1e-7, atol=1e-10) if dtype == "float64" else dict(rtol=1e-3, atol=1e-5)
    for i, (g, w) in enumerate(zip(grads, want)):
        g = np.asarray(g)
        assert g.dtype == np.dtype(dtype), f"{impl}: gradient {i} is {g.dtype}, not {dtype}"
        assert np.allclose(g, w, **tol), f"{impl} {workload} {dtype}: gradient {i} disagrees"


def child(impl_name, workload, dtype, method="auto"):
    import gc
    import tracemalloc
    inputs = _inputs(workload, dtype)
    impl = _CLASSES[impl_name](workload, inputs)
    out = {"inputs": sum(a.nbytes for a in inputs)}

    use_rss = method != "tracemalloc" and _reset_hwm()
    if not use_rss and impl_name not in ("numpy", "tapegrad"):
        print(json.dumps({"skip": "no RSS method (clear_refs not writable, or "
                                  "--tracemalloc) and tracemalloc cannot see this "
                                  "library's memory"}))
        return
    if not use_rss:
        # traced from the warm-up on, so that what the measured step frees of
        # the warm-up's allocations counts, as it does in the resident set
        tracemalloc.start()

    # warm-up: compilation, caches, arenas
    impl.prepare()
    grads = impl.backward(impl.forward())
    del grads

    out["method"] = "rss" if use_rss else "tracemalloc"
    if use_rss:
        def now():
            return _status()["VmRSS"]
    else:
        def now():
            return tracemalloc.get_traced_memory()[0]
    impl.prepare()
    gc.collect()
    _malloc_trim()
    gc.disable()
    try:
        base = now()
        if use_rss:
            _reset_hwm()
        else:
            tracemalloc.reset_peak()
        state = impl.forward()
        mid = now()
        grads = impl.backward(state)
        del state
        if use_rss:
            end = _status()
            peak, after = end["VmHWM"], end["VmRSS"]
        else:
            after, peak = tracemalloc.get_traced_memory()
    finally:
        gc.enable()
    out.update(baseline=base if use_rss else None,
               after_fwd=None if impl_name == "jax" else mid - base,
               peak=peak - base, after=after - base)
    _check(impl_name, workload, dtype, inputs, grads)
    del grads

    if impl_name == "tapegrad":
        tg = impl.tg
        # What the tape still holds after a backward that freed its graph:
        # the large values it kept stay referenced until the thread's next
        # recording op resets the tape (tg.tape_stats() is one), and the
        # adjoint scratch arena stays for the next backward.
        gc.collect()
        r0 = now()
        stats = tg.tape_stats()
        gc.collect()
        out["stale"] = r0 - now()
        out["scratch"] = stats["bytes"]["adjoints"]
        if not use_rss:
            tracemalloc.stop()
        # what the tape holds between forward and backward (one more step)
        impl.prepare()
        gc.collect()
        tracemalloc.start()
        t0 = tracemalloc.get_traced_memory()[0]
        y = impl.forward()
        out["fwd_new_traced"] = tracemalloc.get_traced_memory()[0] - t0
        tracemalloc.stop()
        out["tape_bytes"] = dict(tg.tape_stats()["bytes"])
        y.backward()
        del y
    elif not use_rss:
        tracemalloc.stop()
    print(json.dumps(out))


# --------------------------------------------------------------------------
# Parent: every case in a fresh interpreter, then the tables
# --------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--repeat", type=int, default=3,
                   help="fresh interpreters per case (default 3; medians shown)")
    p.add_argument("--only", default=",".join(WORKLOADS),
                   help="comma-separated workloads (default: elementwise,mlp)")
    p.add_argument("--skip", action="append", default=[], choices=list(IMPLS),
                   help="leave an implementation out (repeatable)")
    p.add_argument("--malloc-default", action="store_true",
                   help="leave glibc's dynamic mmap threshold alone (see the docstring)")
    p.add_argument("--tracemalloc", action="store_true",
                   help="use the tracemalloc method even where clear_refs works "
                        "(numpy and tapegrad rows only)")
    p.add_argument("--child", nargs=4, metavar=("IMPL", "WORKLOAD", "DTYPE", "METHOD"),
                   help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child_env(malloc_default):
    from benchmarks import workloads as wl
    try:
        env = wl.subprocess_env()
    except ImportError:  # no tapegrad: its rows are skipped, the others run
        env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        env[var] = "1"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                        " intra_op_parallelism_threads=1").strip()
    env["TAPEGRAD_INTERPRET"] = "0"
    if malloc_default:
        env.pop("MALLOC_MMAP_THRESHOLD_", None)
    else:
        env["MALLOC_MMAP_THRESHOLD_"] = str(MMAP_THRESHOLD)
    return env


def available(impl):
    if impl in ("numpy", "tapegrad"):
        try:
            from benchmarks import workloads as wl
            wl.tapegrad_search_path()
            return None
        except ImportError as exc:
            return None if impl == "numpy" else str(exc)
    import importlib.util
    if importlib.util.find_spec(impl) is None:
        return f"{impl} is not importable"
    return None


def run_case(impl, workload, dtype, env, method):
    proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                           "--child", impl, workload, dtype, method],
                          env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"{impl} {workload} {dtype} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _mb(x, digits=1):
    return "-" if x is None else f"{x / MB:.{digits}f}"


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        child(*args.child)
        return
    workloads = [w for w in args.only.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    impls, notes = [], []
    for impl in IMPLS:
        if impl in args.skip:
            continue
        why = available(impl)
        if why:
            notes.append(f"{impl} skipped: {why}")
        else:
            impls.append(impl)
    env = child_env(args.malloc_default)
    method = "tracemalloc" if args.tracemalloc else "auto"
    results, skipped = {}, {}
    for w in workloads:
        for dtype in DTYPES:
            for impl in impls:
                try:
                    runs = [run_case(impl, w, dtype, env, method)
                            for _ in range(args.repeat)]
                except RuntimeError as exc:
                    if impl not in ("torch", "jax"):
                        raise
                    last = str(exc).strip().splitlines()[-1]
                    skipped.setdefault((impl, f"failed: {last}"), []).append(f"{w} {dtype}")
                    continue
                if "skip" in runs[0]:
                    skipped.setdefault((impl, runs[0]["skip"]), []).append(f"{w} {dtype}")
                    continue
                results[w, dtype, impl] = runs
                print(f"  {w} {dtype} {impl}: peak "
                      f"{statistics.median(r['peak'] for r in runs) / MB:.1f} MB",
                      file=sys.stderr, flush=True)

    def med(runs, key):
        vals = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    print(f"{args.repeat} fresh interpreter(s) per case, medians; MB = 10**6 bytes; "
          "after fwd, peak, after step are above the baseline (RSS; traced memory "
          "in tracemalloc rows); malloc: "
          + ("glibc default" if args.malloc_default
             else f"MALLOC_MMAP_THRESHOLD_={MMAP_THRESHOLD}") + "\n")
    print("| workload | dtype | impl | inputs MB | baseline RSS MB | after fwd MB "
          "| peak MB | spread MB | after step MB | held between steps MB "
          "| peak + held MB | peak x hand | peak + held x hand | method |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for (w, dtype, impl), runs in results.items():
        peak = med(runs, "peak")
        held = None
        if impl == "tapegrad":
            held = med(runs, "stale") + med(runs, "scratch")
        total = peak + (held or 0)
        ref = results.get((w, dtype, "numpy"))
        ratios = ["-", "-"]
        if ref is not None and med(ref, "peak"):
            hand = med(ref, "peak")
            ratios = [f"{peak / hand:.2f}", f"{total / hand:.2f}"]
        peaks = [r["peak"] for r in runs]
        print(f"| {w} | {dtype} | {impl} | {_mb(runs[0]['inputs'])} "
              f"| {_mb(med(runs, 'baseline'), 0)} | {_mb(med(runs, 'after_fwd'))} "
              f"| {_mb(peak)} | {_mb(max(peaks) - min(peaks))} | {_mb(med(runs, 'after'))} "
              f"| {_mb(held)} | {_mb(total)} | {ratios[0]} | {ratios[1]} "
              f"| {runs[0]['method']} |")

    tape_rows = [(k, runs) for k, runs in results.items() if k[2] == "tapegrad"]
    if tape_rows:
        print("\ntapegrad's tape, MB: between forward and backward "
              "(tg.tape_stats()['bytes'] and tracemalloc) and after the backward:\n")
        print("| workload | dtype | values_refs | v1 + arena | metadata "
              "| fwd new (tracemalloc) | kept after bwd until next op "
              "| adjoint scratch (kept) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for (w, dtype, _), runs in tape_rows:
            b = runs[0]["tape_bytes"]
            print(f"| {w} | {dtype} | {_mb(b['values_refs'])} "
                  f"| {_mb(b['values_v1'] + b['values_arena'], 3)} | {_mb(b['metadata'], 3)} "
                  f"| {_mb(med(runs, 'fwd_new_traced'))} | {_mb(med(runs, 'stale'))} "
                  f"| {_mb(med(runs, 'scratch'))} |")
    for (impl, why), cases in skipped.items():
        notes.append(f"{impl} skipped ({', '.join(cases)}): {why}")
    if tape_rows:
        notes.append(
            "tapegrad: 'held between steps' is the adjoint scratch arena plus the "
            "large values the freed tape still references until the next recording "
            "op resets it; both are resident in the baseline.  That reset happens "
            "at the first op of the measured forward, so 'after fwd' and 'peak' are "
            "net of it; 'peak + held' is the step's peak above a process holding "
            "nothing of tapegrad's.")
    for note in notes:
        print(f"\nNote: {note}")


if __name__ == "__main__":
    main()
