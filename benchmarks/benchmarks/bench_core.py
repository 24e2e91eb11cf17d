"""asv benchmarks for tapegrad's core: recording, the backward sweep, start-up.

What is timed, and why:

* ``*.time_forward_backward`` -- recording the graph and the backward pass
  together, which is what a user pays per gradient.  The leaves are made in
  ``setup``; the timed call resets their ``.grad`` (so that gradients do not
  accumulate from call to call) and then runs forward and backward.
* ``*.time_backward`` -- the backward pass alone.  ``setup`` records a fresh
  graph and the timed call runs ``y.backward()`` on it once; ``number = 1``
  makes asv re-run ``setup`` before every timed call, so each sample sweeps a
  graph that has never been swept (no ``retain_graph``, which would keep
  buffers alive that a normal backward frees).  ``warmup_time = 0`` because
  some asv_runner versions skip ``setup`` between warm-up calls, which would
  sweep a freed graph (tapegrad raises then); kernels are already compiled
  by ``setup``.
* ``ChainSweep.track_backward_ns_per_record`` -- the chain's backward time
  divided by its record count (median of several timed sweeps), i.e. the
  per-record cost of the sweep, which should not depend on the chain length.
* ``ColdStart*.timeraw_*`` -- ``import tapegrad`` plus a first gradient in a
  fresh interpreter, once with an empty Numba cache (``NUMBA_CACHE_DIR`` set to
  a new, empty directory for every sample: everything is compiled) and once
  with a warm one (a directory filled by an untimed run in ``setup``).  Numpy's
  and Numba's own import times are included, as a user would see them;
  ``timeraw_import_numpy_numba`` times those alone for reference.

JIT warm-up (the first gradient of each workload, which may compile kernels)
happens in ``setup`` and is never timed in the in-process benchmarks.  It runs
once per process, and the inputs are cached, because recent asv_runner
versions re-run ``setup`` before every timed call of a class that has one.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from . import workloads as wl

_WARMED = set()


def _tapegrad():
    """Import tapegrad (source checkout as a fallback); asv skips if absent."""
    try:
        return wl.import_tapegrad()
    except ImportError as exc:
        raise NotImplementedError(f"tapegrad is not importable: {exc}")


def _warm_up(key, fn):
    """Run ``fn`` once per process (JIT compilation, caches), untimed."""
    if key not in _WARMED:
        fn()
        _WARMED.add(key)


# --------------------------------------------------------------------------
# Scalar chain
# --------------------------------------------------------------------------

def _chain_gradient(tg, x):
    x.grad = None
    wl.tg_chain(tg, x).backward()


class Chain:
    """Scalar chain, 2,000 steps (8,000 records), forward and backward."""

    def setup(self):
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(wl.CHAIN_X0, requires_grad=True)
        _warm_up("chain", lambda: _chain_gradient(tg, self.x))

    def time_forward_backward(self):
        _chain_gradient(self.tg, self.x)


class ChainBackward:
    """Scalar chain: the backward sweep alone, on a freshly recorded graph."""

    number = 1
    warmup_time = 0

    def setup(self):
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(wl.CHAIN_X0, requires_grad=True)
        _warm_up("chain", lambda: _chain_gradient(tg, self.x))
        self.x.grad = None
        self.y = wl.tg_chain(tg, self.x)

    def time_backward(self):
        self.y.backward()


class ChainSweep:
    """Per-record cost of the chain's backward sweep, in nanoseconds."""

    unit = "ns/record"
    n_sweeps = 9

    def setup(self):
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(wl.CHAIN_X0, requires_grad=True)
        _warm_up("chain", lambda: _chain_gradient(tg, self.x))

    def track_backward_ns_per_record(self):
        times = []
        for _ in range(self.n_sweeps):
            self.x.grad = None
            y = wl.tg_chain(self.tg, self.x)
            t0 = time.perf_counter()
            y.backward()
            times.append(time.perf_counter() - t0)
            del y
        return round(statistics.median(times) / wl.CHAIN_RECORDS * 1e9, 1)


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------

def _elementwise_leaves(tg):
    return tuple(tg.tensor(v, requires_grad=True)
                 for v in wl.elementwise_inputs())


def _elementwise_gradient(tg, a, b, c):
    a.grad = b.grad = c.grad = None
    wl.tg_elementwise(tg, a, b, c).backward()


class Elementwise:
    """``(3*a + 2*b*b + log(c)).sum()`` on 1e6 float64, forward and backward."""

    def setup(self):
        self.tg = tg = _tapegrad()
        self.leaves = _elementwise_leaves(tg)
        _warm_up("elementwise", lambda: _elementwise_gradient(tg, *self.leaves))

    def time_forward_backward(self):
        _elementwise_gradient(self.tg, *self.leaves)


class ElementwiseBackward:
    """Elementwise workload: the backward pass alone, on a fresh graph."""

    number = 1
    warmup_time = 0

    def setup(self):
        self.tg = tg = _tapegrad()
        self.leaves = _elementwise_leaves(tg)
        _warm_up("elementwise", lambda: _elementwise_gradient(tg, *self.leaves))
        for leaf in self.leaves:
            leaf.grad = None
        self.y = wl.tg_elementwise(tg, *self.leaves)

    def time_backward(self):
        self.y.backward()


class OneRecordLossBackward:
    """The backward of a loss of one elementwise record, ``(W * x).sum()``
    over 1e6 float64 (a constant ``W``), against NumPy writing its gradient
    (``W.copy()``): the fused sweep starts that record from the sum's
    constant, one pass over memory where broadcasting the seed took three."""

    params = ["tapegrad", "numpy"]
    param_names = ["impl"]

    def setup(self, impl):
        import numpy as np
        self.W = np.linspace(0.5, 1.5, 10**6)
        if impl == "numpy":
            return
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(np.ones(10**6), requires_grad=True)
        self.y = (self.W * self.x).sum()
        _warm_up("one-record loss", self._backward)

    def _backward(self):
        self.x.grad = None
        self.y.backward(retain_graph=True)

    def time_backward(self, impl):
        if impl == "numpy":
            self.W.copy()
        else:
            self._backward()


# --------------------------------------------------------------------------
# MLP step
# --------------------------------------------------------------------------

def _mlp_setup(tg):
    X, W1, W2, labels = wl.mlp_inputs()
    W1 = tg.tensor(W1, requires_grad=True)
    W2 = tg.tensor(W2, requires_grad=True)
    return X, W1, W2, labels


def _mlp_gradient(tg, X, W1, W2, labels):
    W1.grad = W2.grad = None
    wl.tg_mlp(tg, X, W1, W2, labels).backward()


class MLP:
    """One 784-256-10 tanh MLP step on a batch of 256, forward and backward."""

    def setup(self):
        self.tg = tg = _tapegrad()
        self.args = _mlp_setup(tg)
        _warm_up("mlp", lambda: _mlp_gradient(tg, *self.args))

    def time_forward_backward(self):
        _mlp_gradient(self.tg, *self.args)


class MLPBackward:
    """MLP step: the backward pass alone, on a fresh graph."""

    number = 1
    warmup_time = 0

    def setup(self):
        self.tg = tg = _tapegrad()
        self.args = _mlp_setup(tg)
        _warm_up("mlp", lambda: _mlp_gradient(tg, *self.args))
        X, W1, W2, labels = self.args
        W1.grad = W2.grad = None
        self.y = wl.tg_mlp(tg, X, W1, W2, labels)

    def time_backward(self):
        self.y.backward()


class SmallStep:
    """``(x * x).sum()`` of three elements, forward and backward: the fixed
    cost of recording and of one backward (compare.py's small step)."""

    def setup(self):
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(wl.SMALL_X, requires_grad=True)
        _warm_up("small", self.time_forward_backward)

    def time_forward_backward(self):
        self.x.grad = None
        wl.tg_small(self.tg, self.x).backward()


class Dtypes:
    """The elementwise and MLP steps, forward and backward, with float64 and
    with float32 inputs and weights: a float32 graph keeps float32 values
    and sweeps on float32 adjoints, so its step should take about half of
    the float64 one, as NumPy's and PyTorch's do (``benchmarks/dtypes.py``
    prints them next to those)."""

    params = (["elementwise", "mlp"], ["float64", "float32"])
    param_names = ["workload", "dtype"]

    def setup(self, workload, dtype):
        import numpy as np
        self.tg = tg = _tapegrad()
        dt = np.dtype(dtype)
        if workload == "elementwise":
            leaves = tuple(tg.tensor(v.astype(dt), requires_grad=True)
                           for v in wl.elementwise_inputs())
            self.step = lambda: _elementwise_gradient(tg, *leaves)
        else:
            X, W1, W2, labels = wl.mlp_inputs()
            args = (X.astype(dt), tg.tensor(W1.astype(dt), requires_grad=True),
                    tg.tensor(W2.astype(dt), requires_grad=True), labels)
            self.step = lambda: _mlp_gradient(tg, *args)
        _warm_up(f"{workload} {dtype}", self.step)

    def time_forward_backward(self, workload, dtype):
        self.step()


# --------------------------------------------------------------------------
# Cold start (each sample is a fresh interpreter)
# --------------------------------------------------------------------------

def _child_setup(numba_cache_dir):
    """Untimed source run in the child before the timed statement."""
    lines = ["import os, sys",
             f"os.environ['NUMBA_CACHE_DIR'] = {str(numba_cache_dir)!r}"]
    lines.append(f"sys.path.insert(0, {wl.tapegrad_search_path()!r})")
    return "\n".join(lines) + "\n"


class _ColdStartBase:
    timeout = 600
    repeat = (3, 10, 60.0)
    rounds = 1

    def setup(self):
        _tapegrad()  # skip cleanly when tapegrad cannot be imported
        self.root = tempfile.mkdtemp(prefix="tapegrad-asv-numba-")

    def teardown(self):
        shutil.rmtree(self.root, ignore_errors=True)


class ColdStartEmptyCache(_ColdStartBase):
    """``import tapegrad`` + first gradient, compiling everything afresh."""

    warmup_time = 0  # every sample compiles; a warm-up run would be wasted
    repeat = (3, 5, 60.0)

    def timeraw_import_first_gradient(self):
        # Called once per sample, so every sample gets a new, empty cache.
        cache = tempfile.mkdtemp(dir=self.root)
        return wl.FIRST_GRADIENT_CODE, _child_setup(cache)


class ColdStartWarmCache(_ColdStartBase):
    """``import tapegrad`` (+ first gradient) with a populated Numba cache."""

    def setup(self):
        super().setup()
        self.cache = os.path.join(self.root, "warm")
        os.mkdir(self.cache)
        # Fill the cache: one untimed run of the same code.  asv does not
        # call teardown when setup fails, so clean up here in that case.
        try:
            subprocess.run([sys.executable, "-c",
                            _child_setup(self.cache) + wl.FIRST_GRADIENT_CODE],
                           check=True, timeout=self.timeout,
                           env=wl.subprocess_env(self.cache))
        except BaseException:
            self.teardown()
            raise

    def timeraw_import_first_gradient(self):
        return wl.FIRST_GRADIENT_CODE, _child_setup(self.cache)

    def timeraw_import_tapegrad(self):
        return "import tapegrad", _child_setup(self.cache)

    def timeraw_import_numpy_numba(self):
        return "import numpy, numba", _child_setup(self.cache)
