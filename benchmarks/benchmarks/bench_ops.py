"""asv benchmarks of the NumPy-coverage workloads (``benchmarks/ops_workloads.py``):
softmax/logsumexp of a 1000x1000 array, a batched 64x(32x32) ``linalg.solve``,
an ``einsum`` contraction, a finite-difference stencil and a transpose, each
forward+backward, with the hand-written NumPy VJP timed beside it as the
baseline."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import ops_workloads as ow  # noqa: E402

from .bench_core import _tapegrad  # noqa: E402

_DATA = {}


def _data():
    if not _DATA:
        _DATA.update(ow.inputs())
    return _DATA


class Ops:
    params = list(ow.WORKLOADS)
    param_names = ["workload"]

    def setup(self, workload):
        self.args = _data()[workload]
        self.tapegrad = ow.tapegrad_fns(_tapegrad())[workload]
        self.numpy = ow.NUMPY[workload]
        self.tapegrad(*self.args)  # compiles the kernels once

    def time_tapegrad_forward_backward(self, workload):
        self.tapegrad(*self.args)

    def time_numpy_forward_backward(self, workload):
        self.numpy(*self.args)
