"""tapegrad: reverse-mode automatic differentiation of NumPy code.

Operations on tensors append records to a flat tape; ``y.backward(gradient)``
runs one Numba-compiled reverse sweep over it and leaves the vector-Jacobian
product in the leaves' ``.grad``.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> c = tg.tensor([6.0, 7.0, 8.0], requires_grad=True)
>>> y = 3 * a + np.log(c)
>>> y.backward([0.1, 1.0, 0.0001])
>>> a.grad
tensor([0.3, 3.0, 0.0003])
"""
from . import ops as _ops  # noqa: F401  (registers ops, binds Tensor methods)
from .grad_mode import is_grad_enabled, no_grad
from .graph import AccumulateGrad, Node
from .ops.elementwise import (
    abs, absolute, add, arccos, arcsin, arctan, clip, cos, cosh, divide, equal, exp,
    expm1, greater, greater_equal, less, less_equal, log, log1p, maximum, minimum,
    multiply, negative, not_equal, positive, power, sign, sin, sinh, sqrt, square,
    subtract, tan, tanh, true_divide, where)
from .ops.linalg import dot, matmul
from .ops.reductions import amax, amin, logsumexp, max, mean, min, prod, sum
from .ops.shape import (
    astype, broadcast_to, concatenate, expand_dims, getitem, ravel, reshape, split,
    squeeze, stack, swapaxes, transpose, unbind)
from .tensor import Tensor, tensor

__version__ = "0.1.0"
__all__ = [n for n in dir() if not n.startswith("_")]
