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
from .ops.composite import (
    cond, matrix_norm, matrix_power, matrix_rank, matrix_transpose, multi_dot, norm,
    tensorinv, tensorsolve, vecdot, vector_norm)
from .ops.composite import linalg_diagonal as diagonal
from .ops.composite import linalg_outer as outer
from .ops.composite import linalg_tensordot as tensordot
from .ops.composite import linalg_trace as trace
from .ops.matrix import (
    QRResult, SVDResult, cholesky, det, eigh, eigvalsh, inv, lstsq, matmul, pinv, qr, slogdet,
    solve, svd, svdvals)

__all__ = ["QRResult", "SVDResult", "cholesky", "cond", "det", "diagonal", "eigh", "eigvalsh",
           "inv", "lstsq", "matmul", "matrix_norm", "matrix_power", "matrix_rank",
           "matrix_transpose", "multi_dot", "norm", "outer", "pinv", "qr", "slogdet", "solve",
           "svd", "svdvals", "tensordot", "tensorinv", "tensorsolve", "trace", "vecdot",
           "vector_norm"]
