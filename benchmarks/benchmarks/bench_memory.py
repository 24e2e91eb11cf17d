"""asv memory benchmarks: one tapegrad forward+backward, float64 and float32.

The workloads of ``bench_core.py``: the 1e6-element elementwise sum and the
784-256-10 tanh MLP step on a batch of 256, each parametrized by dtype.  The
leaves are made from the seeded inputs of ``workloads.py`` in the dtype of
the case (``tg.tensor`` copies; the cached float64 inputs are dropped
afterwards, so a float32 case does not also hold them).  ``setup`` runs one
untimed step first (JIT compilation or loading from the Numba cache).

* ``peakmem_forward_backward`` -- asv's peak resident set of the whole
  benchmark process (``ru_maxrss``) after one step: it includes the
  interpreter, NumPy, Numba and tapegrad, the compilation or cache loading
  of ``setup`` and its warm-up step, so it moves with the step's memory only
  where that is the largest part of the process's peak.
* ``track_step_peak_bytes`` -- what ``benchmarks/memory.py`` measures: the
  resident set's high-water mark is reset (``/proc/self/clear_refs``) after
  the warm-up and the step's peak is read from ``VmHWM`` minus ``VmRSS``
  before it.  ``setup`` pins glibc's mmap threshold (``mallopt``), so that
  freed large arrays leave the resident set instead of staying in the heap.
  Linux only (skipped elsewhere).
* ``track_held_between_steps_bytes`` -- what tapegrad holds after the step
  on top of the leaves and their gradients: the adjoint scratch arena kept
  for the next backward (``tg.tape_stats()["bytes"]["adjoints"]``) plus the
  large values the tape still references until the next recording op resets
  it (measured as the resident set released by that reset).

Run from ``benchmarks/``: ``asv run -E existing --quick --bench bench_memory``.
"""

import ctypes
import gc

import numpy as np

from . import workloads as wl

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
_MMAP_THRESHOLD = 131072


def _tapegrad():
    try:
        return wl.import_tapegrad()
    except ImportError as exc:
        raise NotImplementedError(f"tapegrad is not importable: {exc}")


def _pin_mmap_threshold():
    """Fix glibc's mmap threshold (it is otherwise raised by every free of a
    large block); False where that is not possible."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


def _vm(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _trim():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _MemoryBase:
    params = ["float64", "float32"]
    param_names = ["dtype"]
    unit = "bytes"
    timeout = 300

    def setup(self, dtype):
        self.pinned = _pin_mmap_threshold()
        self.tg = _tapegrad()
        self.make(np.dtype(dtype))
        self.step()  # warm-up: compilation or cache loading, arenas

    def step(self):
        for leaf in self.leaves:
            leaf.grad = None
        self.f(self.tg, *self.args).backward()

    def peakmem_forward_backward(self, dtype):
        self.step()

    def track_step_peak_bytes(self, dtype):
        if not self.pinned:
            raise NotImplementedError("glibc's mmap threshold cannot be pinned here")
        try:
            _reset_hwm()
        except OSError:
            raise NotImplementedError("/proc/self/clear_refs is not writable")
        for leaf in self.leaves:
            leaf.grad = None
        _trim()
        base = _vm("VmRSS")
        _reset_hwm()
        self.f(self.tg, *self.args).backward()
        return _vm("VmHWM") - base

    def track_held_between_steps_bytes(self, dtype):
        if not self.pinned:
            raise NotImplementedError("glibc's mmap threshold cannot be pinned here")
        self.step()
        _trim()
        before = _vm("VmRSS")
        stats = self.tg.tape_stats()  # a recording-side call: resets the freed tape
        _trim()
        return (before - _vm("VmRSS")) + stats["bytes"]["adjoints"]


class MemoryElementwise(_MemoryBase):
    """``(3*a + 2*b*b + log(c)).sum()`` on 1e6 elements."""

    def make(self, dtype):
        tg = self.tg
        self.leaves = [tg.tensor(v, requires_grad=True, dtype=dtype)
                       for v in wl.elementwise_inputs()]
        wl._elementwise_inputs.cache_clear()
        self.args = self.leaves
        self.f = wl.tg_elementwise


class MemoryMLP(_MemoryBase):
    """784-256-10 tanh MLP step, batch 256, mean softmax cross-entropy."""

    def make(self, dtype):
        tg = self.tg
        X, W1, W2, labels = wl.mlp_inputs()
        X = np.array(X, dtype=dtype)
        labels = np.array(labels)
        self.leaves = [tg.tensor(W1, requires_grad=True, dtype=dtype),
                       tg.tensor(W2, requires_grad=True, dtype=dtype)]
        wl._mlp_inputs.cache_clear()
        self.args = [X, *self.leaves, labels]
        self.f = wl.tg_mlp
