"""What every part of the ``create_graph=True`` walk shares: ``NoRule``, the
package lookup, and the two linear index ops the formulas record with.

Every formula works on flat values, the tape's layout: a broadcast, a
reduction, an index or a concatenation is an index map (``index_maps``),
whose VJP is a gather (``take``) or its adjoint, a scatter-add
(:class:`_ScatterAdd`, whose own VJP is the gather).
"""
import sys

import numpy as np

from ...ops.function import Function


class NoRule(Exception):
    """A record on the way has no differentiable VJP here (``.name``: its op)."""

    def __init__(self, name, why="", through=None):
        super().__init__(name)
        #: ``through``: the op a create_graph gradient on the way went through
        #: (a second-order node, which cannot be differentiated further)
        self.name, self.why, self.through = name, why, through


def _tg():
    # the package's ops by name, looked up when a walk runs (``import tapegrad``
    # has completed by then), as tensor.bound does: no import of the layer above
    return sys.modules["tapegrad"]


# -- the two linear index ops --------------------------------------------------------------
def take(t, idx):
    """``t[idx]`` on flat ``t``; ``idx`` -1 gives 0."""
    tg = _tg()
    idx = np.asarray(idx, np.int64)
    if idx.size and idx.min() < 0:
        n = t.size
        t = tg.concatenate([t, np.zeros(1)])
        idx = np.where(idx < 0, n, idx)
    return tg.take(t, idx)


def scatter(t, idx, n):
    """The adjoint of ``take``: ``out[idx[k]] += t[k]`` into ``n`` elements
    (``idx`` -1: dropped).  An injective map scatters by a gather."""
    idx = np.asarray(idx, np.int64)
    if idx.size == n and np.array_equal(idx, np.arange(n)):
        return t
    ok = idx >= 0
    hit = np.bincount(idx[ok], minlength=n) if n else np.zeros(0, np.int64)
    if hit.size == 0 or hit.max() <= 1:
        inv = np.full(n, -1, np.int64)
        inv[idx[ok]] = np.flatnonzero(ok)
        return take(t, inv)
    return _ScatterAdd.apply(t, idx, n)


class _ScatterAdd(Function):
    """``out[idx[k]] += t[k]`` (flat); its VJP is the gather ``take``."""

    checks_own_reads = True  # reads no recorded value

    @staticmethod
    def forward(ctx, t, idx, n):
        ctx.idx = idx
        ok = idx >= 0
        return np.bincount(idx[ok], np.ravel(t)[ok], minlength=n)

    @staticmethod
    def backward(ctx, g):
        idx = ctx.idx
        return np.where(idx >= 0, g[np.maximum(idx, 0)], 0.0), None, None

    @staticmethod
    def vjp_ops(ctx, u, _inputs):
        return (take(u, ctx.idx),)


_ScatterAdd.__name__ = "ScatterAdd"
