"""Shape and axis arguments of the NumPy composites (``ops/numeric.py``,
``ops/sampled.py``): an operand's shape, one axis checked against NumPy's
bounds, and a slice along one axis.
"""
import operator

import numpy as np

from ..core.tensor import Tensor
from . import shape as S


def _shape(a):
    return np.shape(a._data if isinstance(a, Tensor) else a)


def _ndim(a):
    return len(_shape(a))


def _take(a, axis, start=None, stop=None, step=None):
    """``a[..., start:stop:step, ...]`` on ``axis``."""
    key = [slice(None)] * _ndim(a)
    key[axis] = slice(start, stop, step)
    return S.getitem(a, tuple(key))


def _axis(axis, ndim, who):
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(f"{who}: axis {axis} is out of bounds for array of "
                                      f"dimension {ndim}")
    return axis % ndim
