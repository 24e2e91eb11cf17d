"""asv benchmarks of the function transforms (``benchmarks/transform_workloads.py``):
the Jacobian of ``tanh(A @ x) * x`` for n = 200 by vector reverse mode, and
the gradient of the scalar chain and of the elementwise workload through
``tg.grad`` beside the same gradient through ``backward()`` (the transform
should add no real cost: the two timings of a workload should match); the
Rosenbrock Hessian (n = 100) eager, eager with ``sparse=False`` (n unit
directions instead of 3 coloured ones from 128 inputs on; at n = 100 the
same as the default) and traced once (coloured); and the same Hessian at
n = 10,000 as its nonzeros, ``tg.sparse_hessian`` and ``ft.sparse_hessian``
(3 directions; the dense one would take 800 MB)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import transform_workloads as tw  # noqa: E402

from .bench_core import _tapegrad  # noqa: E402

_DATA = {}


def _data():
    if not _DATA:
        _DATA.update(tw.inputs())
    return _DATA


class Transforms:
    params = ["jacobian", "grad_chain", "backward_chain", "grad_elementwise",
              "backward_elementwise", "hessian", "hessian_dense", "hessian_traced",
              "sparse_hessian", "sparse_hessian_traced"]
    param_names = ["workload"]

    def setup(self, workload):
        data = _data()
        self.args = data[workload if workload == "jacobian" else
                         "sparse_hessian" if workload.startswith("sparse_hessian") else
                         "hessian" if workload.startswith("hessian") else workload.split("_")[1]]
        self.fn = tw.tapegrad_fns(_tapegrad())[workload]
        self.fn(*self.args)  # compiles the kernels once

    def time_transform(self, workload):
        self.fn(*self.args)
