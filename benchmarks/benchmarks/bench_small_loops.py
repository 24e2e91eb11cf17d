"""asv benchmarks of a loop over tiny arrays (``benchmarks/small_loops.py``):
the gradient of an RK4-integrated Lotka-Volterra least-squares loss, 500
steps of two states and four parameters written in plain NumPy style (about
39,000 tape records of one-element indexing, elementwise ops on 2-element
arrays and stacks of scalars), eager (``tg.value_and_grad``) and traced once
(``ft.value_and_grad``: the replay and reverse sweep over those records)."""
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import small_loops as sl  # noqa: E402

from .bench_core import _tapegrad  # noqa: E402

STEPS = 500
_FNS = {}


def _fns():
    if not _FNS:
        tg = _tapegrad()
        obs = np.random.default_rng(0).uniform(0.5, 1.5, (STEPS, 2))
        th0 = np.array([1.1, 0.4, 0.1, 0.4])
        ft = tg.trace(lambda th: sl.loss(th, STEPS, obs), th0)
        _FNS.update(th0=th0, eager=tg.value_and_grad(lambda th: sl.loss(th, STEPS, obs)),
                    traced=ft.value_and_grad)
        _FNS["eager"](th0)      # compiles the kernels once, untimed
        _FNS["traced"](th0)
    return _FNS


class SmallLoops:
    params = ["eager", "traced"]
    param_names = ["how"]

    def setup(self, how):
        self.fn, self.th0 = _fns()[how], _fns()["th0"]

    def time_rk4_value_and_grad(self, how):
        self.fn(self.th0)
