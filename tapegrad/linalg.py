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
from .ops.linalg import cholesky, det, eigh, inv, slogdet, solve

__all__ = ["cholesky", "det", "eigh", "inv", "norm", "slogdet", "solve"]
