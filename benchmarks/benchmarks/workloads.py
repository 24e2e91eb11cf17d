"""Workload definitions shared by the asv suite and ``compare.py``.

One place defines the sizes, the inputs (seeded, so every implementation and
every run sees the same numbers) and the tapegrad versions of the workloads:

* scalar chain: 0-d float64 ``x``, ``CHAIN_STEPS`` steps of
  ``y = y*0.999 + sin(y)*0.001``; each step records a multiply, a sine, a
  second multiply and an add, so the tape holds ``CHAIN_RECORDS`` records;
* elementwise: ``(3*a + 2*b*b + log(c)).sum()`` on float64 vectors of
  ``ELEMENTWISE_SIZE`` elements, ``c`` positive;
* MLP step: ``h = tanh(X @ W1); z = h @ W2`` with the mean softmax
  cross-entropy ``mean(logsumexp(z, axis=1) - z[arange(n), labels])``;
* cold start: ``import tapegrad`` and a first gradient in a fresh interpreter
  (:data:`FIRST_GRADIENT_CODE`).

This module has no benchmark-named attributes, so asv imports it without
collecting anything from it.
"""

import functools
import importlib
import importlib.util
import os
import sys

import numpy as np

CHAIN_X0 = 0.5
CHAIN_STEPS = 2000
#: Records per chain step: ``y*0.999``, ``sin(y)``, ``sin(y)*0.001`` and ``+``.
CHAIN_RECORDS_PER_STEP = 4
CHAIN_RECORDS = CHAIN_RECORDS_PER_STEP * CHAIN_STEPS

ELEMENTWISE_SIZE = 1_000_000

MLP_BATCH = 256
MLP_IN = 784
MLP_HIDDEN = 256
MLP_OUT = 10

SEED = 20240601

#: The directory holding this suite's ``benchmarks/`` folder (``compare.py``,
#: ``handwritten.py``), and the repository root above it.
BENCH_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(BENCH_ROOT)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _elementwise_inputs(size, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(size)
    b = rng.standard_normal(size)
    c = rng.uniform(0.1, 10.0, size)
    for arr in (a, b, c):
        arr.flags.writeable = False  # cached and shared: keep it pristine
    return a, b, c


def elementwise_inputs(size=ELEMENTWISE_SIZE, seed=SEED):
    """Read-only float64 vectors ``(a, b, c)`` with ``c > 0`` (cached)."""
    return _elementwise_inputs(size, seed)


@functools.lru_cache(maxsize=None)
def _mlp_inputs(batch, n_in, n_hidden, n_out, seed):
    rng = np.random.default_rng(seed + 1)
    X = rng.standard_normal((batch, n_in))
    W1 = rng.standard_normal((n_in, n_hidden)) / np.sqrt(n_in)
    W2 = rng.standard_normal((n_hidden, n_out)) / np.sqrt(n_hidden)
    labels = rng.integers(0, n_out, batch)
    for arr in (X, W1, W2, labels):
        arr.flags.writeable = False
    return X, W1, W2, labels


def mlp_inputs(batch=MLP_BATCH, n_in=MLP_IN, n_hidden=MLP_HIDDEN,
               n_out=MLP_OUT, seed=SEED):
    """Read-only ``(X, W1, W2, labels)`` for the MLP step (cached)."""
    return _mlp_inputs(batch, n_in, n_hidden, n_out, seed)


# --------------------------------------------------------------------------
# Finding tapegrad
# --------------------------------------------------------------------------

def tapegrad_search_path():
    """The directory that holds the ``tapegrad`` package to benchmark.

    That is where ``import tapegrad`` finds it in this process (installed, or
    put on ``sys.path`` some other way, e.g. by asv from ``ASV_PYTHONPATH``),
    or else, when the suite runs from a source checkout without an install
    (``asv run -E existing`` before ``pip install -e .``), the repository
    root if it holds the package.  Child interpreters put this directory first
    on their path so that they import the same tapegrad as the parent.
    Raises ``ImportError`` when tapegrad is found nowhere.
    """
    spec = importlib.util.find_spec("tapegrad")
    if spec is not None and spec.origin not in (None, "namespace"):
        return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))
    if os.path.isfile(os.path.join(REPO_ROOT, "tapegrad", "__init__.py")):
        return REPO_ROOT
    raise ImportError("tapegrad is neither importable nor found at "
                      f"{REPO_ROOT}")


def import_tapegrad():
    """Import tapegrad, falling back to the source checkout (see above)."""
    path = tapegrad_search_path()
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("tapegrad")


def subprocess_env(numba_cache_dir=None, base=None):
    """Environment for a child interpreter that must import tapegrad.

    Puts the directory from :func:`tapegrad_search_path` first on
    ``PYTHONPATH`` and sets ``NUMBA_CACHE_DIR`` when given.
    """
    env = dict(os.environ if base is None else base)
    path = tapegrad_search_path()
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = path if not old else path + os.pathsep + old
    if numba_cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache_dir)
    return env


# --------------------------------------------------------------------------
# tapegrad versions of the workloads
# --------------------------------------------------------------------------

def tg_chain(tg, x, steps=CHAIN_STEPS):
    """Record the scalar chain on ``x``; return the output tensor."""
    y = x
    sin = tg.sin
    for _ in range(steps):
        y = y * 0.999 + sin(y) * 0.001
    return y


#: the small step: ``(x * x).sum()`` of three elements, whose time is the
#: fixed cost of recording two ops and running a backward
SMALL_X = (1.0, 2.0, 3.0)


def tg_small(tg, x):
    """Record the small step's loss ``(x * x).sum()``."""
    return (x * x).sum()


def tg_elementwise(tg, a, b, c):
    """Record ``(3*a + 2*b*b + log(c)).sum()``; return the 0-d output."""
    return (3 * a + 2 * b * b + tg.log(c)).sum()


def tg_mlp(tg, X, W1, W2, labels):
    """Record the MLP loss; ``X`` and ``labels`` are plain arrays."""
    h = tg.tanh(X @ W1)
    z = h @ W2
    rows = np.arange(X.shape[0])
    return (tg.logsumexp(z, axis=1) - z[rows, labels]).mean()


#: Source run in a fresh interpreter for the cold-start benchmarks: the import
#: and a first gradient (a short chain touches the scalar kernels and the
#: backward sweep).  It is wrapped in a function by the callers as needed.
FIRST_GRADIENT_CODE = """\
import tapegrad as tg
x = tg.tensor(0.5, requires_grad=True)
y = x
for _ in range(10):
    y = y * 0.999 + tg.sin(y) * 0.001
y.backward()
float(x.grad.numpy())
"""
