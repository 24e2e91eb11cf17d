"""``tapegrad.linalg``: NumPy's ``numpy.linalg`` names, differentiable.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> A = tg.tensor(np.eye(2) * 2.0, requires_grad=True)
>>> tg.linalg.det(A).backward()
>>> A.grad
tensor([[2.0, 0.0],
        [0.0, 2.0]])
"""
from .ops.composite import norm
from .ops.linalg import det, inv, slogdet, solve

__all__ = ["det", "inv", "norm", "slogdet", "solve"]
