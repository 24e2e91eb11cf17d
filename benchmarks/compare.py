#!/usr/bin/env python
"""Side-by-side timings of tapegrad, hand-written NumPy and other autodiff tools.

Prints a markdown table with one row per measurement and one column per
implementation, in milliseconds (medians), followed by ratio columns and,
for the rows the project has a goal for (:data:`GOALS`), that goal and
whether this run met it:

* ``tapegrad``  -- this project (skipped, with a note, when not importable);
* ``numpy``     -- the hand-written forward + VJP of ``handwritten.py``, the
  baseline a careful person would write without any autodiff tool;
* ``torch``     -- PyTorch CPU eager mode with ``torch.set_num_threads(1)``;
* ``jax``       -- ``jax.jit(jax.value_and_grad(f))`` in steady state, and
  ``jax 1st call``: the first call of a fresh jitted function (trace +
  compile + run), measured once;
* ``autograd``  -- HIPS autograd (``autograd.value_and_grad``).

torch, JAX and autograd are optional: their columns are left out when they
cannot be imported.  All computations are float64.

Rows:

* chain fwd+bwd -- 0-d ``x``, 2,000 steps of ``y = y*0.999 + sin(y)*0.001``;
* chain backward alone -- the graph (or hand-written tape, or autograd's
  ``make_vjp`` closure) is built untimed before every sample; only the reverse
  sweep is timed;
* chain backward per record -- the same time divided by the 8,000 records of
  the chain (4 per step), in nanoseconds, for every column;
* small step fwd+bwd -- ``(x * x).sum()`` of a 3-element ``x`` and its
  gradient, in microseconds: the fixed cost of recording and of one
  backward (20 times the samples of the other rows);
* elementwise fwd+bwd -- ``(3*a + 2*b*b + log(c)).sum()``, 1e6 elements;
* MLP fwd+bwd -- 256x784 batch, 784-256-10 tanh MLP, mean softmax
  cross-entropy through logsumexp;
* import + first gradient -- a fresh interpreter imports the library and
  computes a first gradient (a 10-step chain); the interpreter's own start-up
  is excluded, the library's dependencies (NumPy, Numba, ...) are included,
  Python's bytecode cache is used.  tapegrad runs with its default tiers
  (this small gradient runs interpreted: kernels/interpret.py) and, in a
  second row, with its kernels compiled and loaded from a warm Numba cache
  (a private ``NUMBA_CACHE_DIR`` filled by an untimed run): what a first
  gradient too large to interpret pays; with ``--cold`` a row with an empty
  cache is added;
* import alone -- ``import tapegrad`` / ``numpy`` / ``torch`` / ``jax`` /
  ``autograd`` in a fresh interpreter, for reference.

Method: every implementation's gradients are first checked against the
hand-written ones (``numpy.allclose``); each in-process measurement is the
median of ``--repeat`` samples of ``time.perf_counter`` after warm-up calls
(which also trigger any JIT compilation), taken in 5 blocks per row with
the implementations taking turns block by block (:func:`interleaved_ms`:
the machine's drift over the row's minute falls on every column alike);
the garbage collector runs once before each block and is off during it,
as ``timeit`` does.  Leaves are
created once; their ``.grad`` is reset inside the timed call.  By default the
BLAS, OpenMP, Numba, PyTorch and XLA thread pools are limited to one thread
(``--threads``), so that every column runs on one core.

Run from anywhere: ``python benchmarks/compare.py [--repeat N] [--cold]``.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")
# and every fused run sweeps with its own compiled loop from its first sweep
# (tapegrad/engine/fused_codegen.py), as a process does once the loop has paid its
# compilation: the steady state, as JAX's column is after its jit compiles
os.environ.setdefault("TAPEGRAD_FUSE_LOOPS", "now")


import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from _interleave import interleaved_ms  # noqa: E402

# Heavy libraries are imported only after the thread limits are in the
# environment (OpenBLAS, Numba and XLA read them when they load).
np = hw = wl = None

CHAIN_FIRST_STEPS = 10
RTOL, ATOL = 1e-7, 1e-10


# --------------------------------------------------------------------------
# Set-up
# --------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--repeat", type=int, default=15,
                   help="timed samples per in-process measurement (default 15)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls before each measurement (default 3)")
    p.add_argument("--subprocess-repeat", type=int, default=5,
                   help="fresh interpreters per start-up measurement "
                        "(default 5)")
    p.add_argument("--cold", action="store_true",
                   help="add tapegrad's import + first gradient with an empty "
                        "Numba cache (slow: everything is compiled)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for BLAS/OpenMP/Numba/torch/XLA (default 1; "
                        "0 leaves the libraries' defaults)")
    p.add_argument("--skip", action="append", default=[],
                   choices=["tapegrad", "torch", "jax", "autograd"],
                   help="leave an implementation out (repeatable)")
    return p.parse_args(argv)


def limit_threads(n):
    """Put thread limits in the environment (inherited by subprocesses)."""
    if n <= 0:
        return
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        os.environ[var] = str(n)
    if n == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()


def import_heavy():
    global np, hw, wl
    import numpy
    import handwritten
    from benchmarks import workloads
    np, hw, wl = numpy, handwritten, workloads


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------

def subprocess_ms(code, env, repeat, cwd, fresh_env=None):
    """Median time of ``code`` in fresh interpreters (start-up excluded).

    ``fresh_env``, when given, is called before every run and returns the
    environment for it (used for an empty Numba cache per run); otherwise one
    untimed run warms caches first.
    """
    wrapped = ("import time as _t\n_t0 = _t.perf_counter()\n" + code +
               "\nprint(repr(_t.perf_counter() - _t0))\n")

    def run(run_env):
        out = subprocess.run([sys.executable, "-c", wrapped], env=run_env,
                             cwd=cwd, capture_output=True, text=True,
                             timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"child failed:\n{code}\n{out.stderr}")
        return float(out.stdout.strip().splitlines()[-1])

    if fresh_env is None:
        run(env)
    times = [run(env if fresh_env is None else fresh_env())
             for _ in range(repeat)]
    return statistics.median(times) * 1e3


def check_close(label, got, want):
    got = [np.asarray(g, dtype=np.float64) for g in got]
    want = [np.asarray(w, dtype=np.float64) for w in want]
    for g, w in zip(got, want, strict=True):
        if g.shape != w.shape or not np.allclose(g, w, rtol=RTOL, atol=ATOL):
            err = np.max(np.abs(g - w)) if g.shape == w.shape else "shape"
            raise AssertionError(f"{label}: gradient disagrees with the "
                                 f"hand-written one (max abs err {err})")


# --------------------------------------------------------------------------
# Implementations.  Each one provides, per workload, a zero-argument callable
# that computes the gradient and returns it (as a tuple of array-likes), and
# optionally a (setup, backward) pair for "backward alone".
# --------------------------------------------------------------------------

class NumpyImpl:
    name = "numpy"
    import_code = "import numpy"
    first_gradient_code = ("import handwritten\n"
                           f"handwritten.chain_value_and_grad(0.5, "
                           f"{CHAIN_FIRST_STEPS})\n")

    def __init__(self):
        self.version = np.__version__

    def chain(self):
        return lambda: (hw.chain_value_and_grad(wl.CHAIN_X0, wl.CHAIN_STEPS)[1],)

    def chain_backward(self):
        def setup():
            return hw.chain_forward(wl.CHAIN_X0, wl.CHAIN_STEPS)[1]
        return setup, lambda saved: (hw.chain_vjp(saved),)

    def small(self):
        x = np.array(wl.SMALL_X)

        def run():
            (x * x).sum()
            return (2.0 * x,)
        return run

    def elementwise(self):
        a, b, c = wl.elementwise_inputs()
        return lambda: hw.elementwise_value_and_grad(a, b, c)[1]

    def mlp(self):
        X, W1, W2, labels = wl.mlp_inputs()
        return lambda: hw.mlp_value_and_grad(X, W1, W2, labels)[1]


class TapegradImpl:
    name = "tapegrad"
    import_code = "import tapegrad"

    def __init__(self):
        self.tg = wl.import_tapegrad()
        self.version = getattr(self.tg, "__version__", "?")
        self.first_gradient_code = wl.FIRST_GRADIENT_CODE

    def chain(self):
        tg = self.tg
        x = tg.tensor(wl.CHAIN_X0, requires_grad=True)

        def run():
            x.grad = None
            wl.tg_chain(tg, x).backward()
            return (x.grad.numpy(),)
        return run

    def chain_backward(self):
        tg = self.tg
        x = tg.tensor(wl.CHAIN_X0, requires_grad=True)

        def setup():
            x.grad = None
            return wl.tg_chain(tg, x)

        def backward(y):
            y.backward()
            return (x.grad.numpy(),)
        return setup, backward

    def small(self):
        tg = self.tg
        x = tg.tensor(wl.SMALL_X, requires_grad=True)

        def run():
            x.grad = None
            wl.tg_small(tg, x).backward()
            return (x.grad.numpy(),)
        return run

    def elementwise(self):
        tg = self.tg
        leaves = [tg.tensor(v, requires_grad=True)
                  for v in wl.elementwise_inputs()]

        def run():
            for leaf in leaves:
                leaf.grad = None
            wl.tg_elementwise(tg, *leaves).backward()
            return tuple(leaf.grad.numpy() for leaf in leaves)
        return run

    def mlp(self):
        tg = self.tg
        X, W1, W2, labels = wl.mlp_inputs()
        W1 = tg.tensor(W1, requires_grad=True)
        W2 = tg.tensor(W2, requires_grad=True)

        def run():
            W1.grad = W2.grad = None
            wl.tg_mlp(tg, X, W1, W2, labels).backward()
            return W1.grad.numpy(), W2.grad.numpy()
        return run


class TorchImpl:
    name = "torch"
    import_code = "import torch"
    first_gradient_code = textwrap.dedent(f"""\
        import torch
        x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        y = x
        for _ in range({CHAIN_FIRST_STEPS}):
            y = y * 0.999 + torch.sin(y) * 0.001
        y.backward()
        float(x.grad)
        """)

    def __init__(self, threads):
        import torch
        self.torch = torch
        self.version = torch.__version__
        if threads > 0:
            torch.set_num_threads(threads)

    def _leaf(self, value):
        # torch.tensor copies, so the read-only cached inputs stay untouched.
        return self.torch.tensor(value, dtype=self.torch.float64,
                                 requires_grad=True)

    @staticmethod
    def _chain(torch, x):
        y = x
        sin = torch.sin
        for _ in range(wl.CHAIN_STEPS):
            y = y * 0.999 + sin(y) * 0.001
        return y

    def chain(self):
        torch = self.torch
        x = self._leaf(wl.CHAIN_X0)

        def run():
            x.grad = None
            self._chain(torch, x).backward()
            return (x.grad.numpy(),)
        return run

    def chain_backward(self):
        torch = self.torch
        x = self._leaf(wl.CHAIN_X0)

        def setup():
            x.grad = None
            return self._chain(torch, x)

        def backward(y):
            y.backward()
            return (x.grad.numpy(),)
        return setup, backward

    def small(self):
        x = self._leaf(wl.SMALL_X)

        def run():
            x.grad = None
            (x * x).sum().backward()
            return (x.grad.numpy(),)
        return run

    def elementwise(self):
        torch = self.torch
        a, b, c = (self._leaf(v) for v in wl.elementwise_inputs())

        def run():
            a.grad = b.grad = c.grad = None
            (3 * a + 2 * b * b + torch.log(c)).sum().backward()
            return a.grad.numpy(), b.grad.numpy(), c.grad.numpy()
        return run

    def mlp(self):
        torch = self.torch
        X, W1, W2, labels = wl.mlp_inputs()
        X = torch.tensor(X)
        labels = torch.tensor(labels, dtype=torch.int64)
        W1, W2 = self._leaf(W1), self._leaf(W2)

        def run():
            W1.grad = W2.grad = None
            h = torch.tanh(X @ W1)
            z = h @ W2
            rows = torch.arange(z.shape[0])
            loss = (torch.logsumexp(z, dim=1) - z[rows, labels]).mean()
            loss.backward()
            return W1.grad.numpy(), W2.grad.numpy()
        return run


class JaxImpl:
    name = "jax"
    import_code = "import jax"
    first_gradient_code = textwrap.dedent(f"""\
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        def f(x):
            return jax.lax.fori_loop(
                0, {CHAIN_FIRST_STEPS},
                lambda i, y: y * 0.999 + jnp.sin(y) * 0.001, x)
        float(jax.jit(jax.value_and_grad(f))(0.5)[1])
        """)

    def __init__(self):
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp
        self.jax, self.jnp, self.logsumexp = jax, jnp, logsumexp
        self.version = jax.__version__
        self.first_call_ms = {}

    def _jitted(self, key, f, args, argnums):
        """Steady-state callable; records the first call's time under key."""
        jax = self.jax
        g = jax.jit(jax.value_and_grad(f, argnums=argnums))
        t0 = time.perf_counter()
        jax.block_until_ready(g(*args))
        self.first_call_ms[key] = (time.perf_counter() - t0) * 1e3

        def run():
            value, grads = jax.block_until_ready(g(*args))
            return grads if isinstance(grads, tuple) else (grads,)
        return run

    def chain(self):
        jax, jnp = self.jax, self.jnp

        def f(x):
            # A traced loop: unrolling 2,000 steps in Python would make the
            # compile time explode; fori_loop with static bounds is
            # reverse-differentiable (it lowers to a scan).
            return jax.lax.fori_loop(
                0, wl.CHAIN_STEPS, lambda i, y: y * 0.999 + jnp.sin(y) * 0.001,
                x)
        return self._jitted("chain", f, (jnp.float64(wl.CHAIN_X0),), 0)

    def small(self):
        jnp = self.jnp
        return self._jitted("small", lambda x: (x * x).sum(), (jnp.asarray(wl.SMALL_X),), 0)

    def elementwise(self):
        jnp = self.jnp

        def f(a, b, c):
            return (3 * a + 2 * b * b + jnp.log(c)).sum()
        args = tuple(jnp.asarray(v) for v in wl.elementwise_inputs())
        return self._jitted("elementwise", f, args, (0, 1, 2))

    def mlp(self):
        jnp, lse = self.jnp, self.logsumexp
        X, W1, W2, labels = (jnp.asarray(v) for v in wl.mlp_inputs())

        def f(W1, W2):
            h = jnp.tanh(X @ W1)
            z = h @ W2
            rows = jnp.arange(z.shape[0])
            return (lse(z, axis=1) - z[rows, labels]).mean()
        return self._jitted("mlp", f, (W1, W2), (0, 1))


class AutogradImpl:
    name = "autograd"
    import_code = "import autograd"
    first_gradient_code = textwrap.dedent(f"""\
        import autograd
        import autograd.numpy as anp
        def f(x):
            y = x
            for _ in range({CHAIN_FIRST_STEPS}):
                y = y * 0.999 + anp.sin(y) * 0.001
            return y
        float(autograd.grad(f)(0.5))
        """)

    def __init__(self):
        import autograd
        import autograd.numpy as anp
        from autograd.scipy.special import logsumexp
        from importlib.metadata import version
        self.autograd, self.anp, self.logsumexp = autograd, anp, logsumexp
        self.version = version("autograd")

    def _chain_f(self):
        sin = self.anp.sin

        def f(x):
            y = x
            for _ in range(wl.CHAIN_STEPS):
                y = y * 0.999 + sin(y) * 0.001
            return y
        return f

    def chain(self):
        g = self.autograd.value_and_grad(self._chain_f())
        return lambda: (g(wl.CHAIN_X0)[1],)

    def chain_backward(self):
        make_vjp = self.autograd.make_vjp(self._chain_f())

        def setup():
            return make_vjp(wl.CHAIN_X0)[0]
        return setup, lambda vjp: (vjp(1.0),)

    def small(self):
        g = self.autograd.value_and_grad(lambda x: (x * x).sum())
        x = np.array(wl.SMALL_X)
        return lambda: (g(x)[1],)

    def elementwise(self):
        anp = self.anp

        def f(a, b, c):
            return (3 * a + 2 * b * b + anp.log(c)).sum()
        g = self.autograd.value_and_grad(f, argnum=[0, 1, 2])
        args = wl.elementwise_inputs()
        return lambda: tuple(g(*args)[1])

    def mlp(self):
        anp, lse = self.anp, self.logsumexp
        X, W1, W2, labels = wl.mlp_inputs()

        def f(W1, W2):
            h = anp.tanh(anp.dot(X, W1))
            z = anp.dot(h, W2)
            rows = np.arange(z.shape[0])
            return anp.mean(lse(z, axis=1) - z[rows, labels])
        g = self.autograd.value_and_grad(f, argnum=[0, 1])
        return lambda: tuple(g(W1, W2)[1])


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

def load_implementations(args):
    """The reference (numpy) first, then whatever else can be imported."""
    impls, notes = [NumpyImpl()], []
    makers = [("tapegrad", TapegradImpl), ("torch", lambda: TorchImpl(args.threads)),
              ("jax", JaxImpl), ("autograd", AutogradImpl)]
    for name, make in makers:
        if name in args.skip:
            notes.append(f"{name}: skipped (--skip)")
            continue
        try:
            impls.append(make())
        except Exception as exc:  # not installed, or (tapegrad) mid-rewrite
            notes.append(f"{name}: not available "
                         f"({type(exc).__name__}: {exc})")
    order = ["tapegrad", "numpy", "torch", "jax", "autograd"]
    impls.sort(key=lambda i: order.index(i.name))
    return impls, notes


WORKLOADS = ("chain", "small", "elementwise", "mlp")


def check_agreement(impls):
    """Assert every implementation's gradients match the hand-written ones."""
    fns = {}
    for impl in impls:
        for w in WORKLOADS:
            fns[impl.name, w] = getattr(impl, w)()
    for w in WORKLOADS:
        want = fns["numpy", w]()
        for impl in impls:
            check_close(f"{impl.name} {w}", fns[impl.name, w](), want)
        for impl in impls:
            if w == "chain" and hasattr(impl, "chain_backward"):
                setup, backward = impl.chain_backward()
                check_close(f"{impl.name} chain backward", backward(setup()),
                            want)
    return fns


def machine_info(impls, args):
    lines = [f"- python {platform.python_version()} on {platform.platform()}"]
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else os.cpu_count())
    lines.append(f"- CPU: {cpu}; {os.cpu_count()} logical cores, "
                 f"{usable} usable")
    versions = [f"{i.name} {i.version}" for i in impls]
    try:
        import numba
        versions.insert(2, f"numba {numba.__version__}")
    except ImportError:
        pass
    lines.append("- versions: " + ", ".join(versions))
    lines.append(f"- threads: {args.threads or 'library defaults'}; "
                 f"{args.repeat} samples per in-process cell (median, after "
                 f"{args.warmup} warm-up calls), {args.subprocess_repeat} "
                 "fresh interpreters per start-up cell")
    return lines


def fmt_ms(v):
    if v is None:
        return "n/a"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_ratio(num, den):
    if num is None or den is None or den == 0:
        return "n/a"
    r = num / den
    if r >= 10:
        return f"{r:.1f}x"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x"


def measure(impls, fns, args, log):
    names = [i.name for i in impls]
    rows = {}  # label -> {impl name: value}
    rep, warm = args.repeat, args.warmup

    def cell(label, name, value):
        rows.setdefault(label, {n: None for n in names})[name] = value

    def row(label, cells, repeat=rep, scale=1.0):
        log(f"timing {label} ...")
        for name, ms in interleaved_ms(cells, repeat, warm).items():
            cell(label, name, scale * ms)

    row("chain fwd+bwd (ms)", {n: (fns[n, "chain"], None) for n in names})
    backs = {i.name: i.chain_backward() for i in impls if hasattr(i, "chain_backward")}
    row("chain backward alone (ms)", {n: (b, s) for n, (s, b) in backs.items()})
    per_record = f"chain backward per record (ns, /{wl.CHAIN_RECORDS})"
    for n in names:
        ms = rows["chain backward alone (ms)"][n]
        cell(per_record, n, None if ms is None else ms * 1e6 / wl.CHAIN_RECORDS)
    row("small step fwd+bwd, 3 elements (us)", {n: (fns[n, "small"], None) for n in names},
        rep * 20, 1e3)
    row("elementwise fwd+bwd, 1e6 (ms)", {n: (fns[n, "elementwise"], None) for n in names})
    row("MLP fwd+bwd (ms)", {n: (fns[n, "mlp"], None) for n in names})

    # Start-up, in fresh interpreters.
    tmp = tempfile.mkdtemp(prefix="tapegrad-compare-")
    try:
        warm_cache = os.path.join(tmp, "numba-warm")
        os.mkdir(warm_cache)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (HERE, env.get("PYTHONPATH")) if p)
        env["NUMBA_CACHE_DIR"] = warm_cache
        # Python's bytecode as an installed package has it (pip compiles it
        # at install; an editable install writes it on the first import,
        # here the untimed run): an environment that forbids writing it
        # would time the compilation of every module's source (130 of
        # tapegrad's 150 ms of import here) instead
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        # and with the library's default tiers, as a user's script starts
        # (this script compiles every kernel for the in-process timings)
        env.pop("TAPEGRAD_INTERPRET", None)
        env.pop("TAPEGRAD_FUSE_LOOPS", None)
        if "tapegrad" in names:
            env = wl.subprocess_env(warm_cache, base=env)
        srep = args.subprocess_repeat
        for impl in impls:
            log(f"start-up of {impl.name} ...")
            cell("import + first gradient (ms)", impl.name,
                 subprocess_ms(impl.first_gradient_code, env, srep, tmp))
            if impl.name == "tapegrad":
                # the kernels compiled, loaded from the warm cache: what a
                # first gradient too large to interpret pays to start
                cell("import + first gradient, compiled from a warm cache (ms)", impl.name,
                     subprocess_ms(impl.first_gradient_code,
                                   dict(env, TAPEGRAD_INTERPRET="0"), srep, tmp))
            cell("import alone (ms)", impl.name,
                 subprocess_ms(impl.import_code, env, srep, tmp))
        if args.cold and "tapegrad" in names:
            log("start-up of tapegrad with an empty Numba cache ...")
            counter = iter(range(10**6))

            def fresh_env():
                d = os.path.join(tmp, f"numba-cold-{next(counter)}")
                os.mkdir(d)
                return dict(env, NUMBA_CACHE_DIR=d)
            cell("import + first gradient, empty cache (ms)", "tapegrad",
                 subprocess_ms(wl.FIRST_GRADIENT_CODE, env, srep, tmp,
                               fresh_env=fresh_env))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    jax_impl = next((i for i in impls if i.name == "jax"), None)
    return rows, jax_impl


#: the project's performance goals for these rows: (numerator, denominator,
#: the bound and whether the ratio must stay below it); an absolute goal in
#: ms has no denominator
GOALS = {
    "chain fwd+bwd (ms)": ("torch", "tapegrad", 10.0, False),
    "elementwise fwd+bwd, 1e6 (ms)": ("tapegrad", "numpy", 1.3, True),
    "MLP fwd+bwd (ms)": ("tapegrad", "numpy", 1.1, True),
    "import + first gradient, compiled from a warm cache (ms)": ("tapegrad", None, 500.0, True),
}


def goal_cell(label, vals):
    """``<ratio> <= / >= <bound>: met|missed`` for a row with a goal."""
    goal = GOALS.get(label)
    if goal is None:
        return ""
    num, den, bound, below = goal
    a = vals.get(num)
    b = 1.0 if den is None else vals.get(den)
    if a is None or b is None or b == 0:
        return ""
    value = a / b
    met = value <= bound if below else value >= bound
    what = f"{num} ms" if den is None else f"{num}/{den}"
    unit = "" if den is None else "x"
    return (f"{what} {'<=' if below else '>='} {bound:g}{unit}: "
            f"{'met' if met else 'missed'} ({value:.3g}{unit})")


def render(rows, impls, jax_impl):
    names = [i.name for i in impls]
    header = list(names)
    if jax_impl is not None:
        header.insert(header.index("jax") + 1, "jax 1st call")
    ratios = []
    if "tapegrad" in names:
        ratios.append(("tapegrad/numpy", "tapegrad", "numpy"))
        for other in ("torch", "jax", "autograd"):
            if other in names:
                ratios.append((f"{other}/tapegrad", other, "tapegrad"))
    else:
        for other in ("torch", "jax", "autograd"):
            if other in names:
                ratios.append((f"{other}/numpy", other, "numpy"))
    first_call_rows = {"chain fwd+bwd (ms)": "chain",
                       "elementwise fwd+bwd, 1e6 (ms)": "elementwise",
                       "MLP fwd+bwd (ms)": "mlp"}

    out = ["| measurement | " + " | ".join(header + [r[0] for r in ratios])
           + " | goal |",
           "|---|" + "---:|" * (len(header) + len(ratios)) + "---|"]
    for label, vals in rows.items():
        cells = []
        for col in header:
            if col == "jax 1st call":
                key = first_call_rows.get(label)
                cells.append(fmt_ms(jax_impl.first_call_ms.get(key))
                             if key else "")
            else:
                cells.append(fmt_ms(vals[col]))
        cells += [fmt_ratio(vals[a], vals[b]) for _, a, b in ratios]
        cells.append(goal_cell(label, vals))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def main(argv=None):
    args = parse_args(argv)
    limit_threads(args.threads)
    import_heavy()
    hw.self_check()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    impls, notes = load_implementations(args)
    log("checking that every implementation computes the same gradients ...")
    fns = check_agreement(impls)
    rows, jax_impl = measure(impls, fns, args, log)

    print("## tapegrad benchmark comparison\n")
    print("\n".join(machine_info(impls, args)))
    for note in notes:
        print(f"- {note}")
    print()
    print("\n".join(render(rows, impls, jax_impl)))
    print()
    print("numpy = hand-written forward + VJP (handwritten.py; the chain "
          "uses Python floats and math). Ratios above 1 mean the numerator "
          f"is slower. Chain: {wl.CHAIN_STEPS} steps, {wl.CHAIN_RECORDS} "
          "records. Start-up rows exclude the interpreter's own start-up. "
          "All gradients agree (allclose) with the hand-written ones.")
    log(f"done in {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
