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

__all__ = ["QRResult", "SVDResult", "cholesky", "cond", "det", "diagonal", "eig", "eigh",
           "eigvals", "eigvalsh", "inv", "lstsq", "matmul", "matrix_norm", "matrix_power",
           "matrix_rank", "matrix_transpose", "multi_dot", "norm", "outer", "pinv", "qr",
           "slogdet", "solve", "svd", "svdvals", "tensordot", "tensorinv", "tensorsolve", "trace",
           "vecdot", "vector_norm"]

# complex operands (``tg.ComplexTensor``, complex arrays) go to
# ops/complex_linalg.py; real ones to the real ops above
import functools  # noqa: E402

from .ops import complex_linalg as _CL  # noqa: E402
from .ops import complex_lstsq as _CQ  # noqa: E402
from .ops.complex_tensor import is_complex as _is_complex  # noqa: E402


def _complex_aware(real_fn, complex_fn):
    @functools.wraps(real_fn)
    def fn(*args, **kwargs):
        if any(map(_is_complex, args)) or any(map(_is_complex, kwargs.values())):
            return complex_fn(*args, **kwargs)
        return real_fn(*args, **kwargs)
    return fn


inv = _complex_aware(inv, _CL.inv)
solve = _complex_aware(solve, _CL.solve)
det = _complex_aware(det, _CL.det)
slogdet = _complex_aware(slogdet, _CL.slogdet)
cholesky = _complex_aware(cholesky, _CL.cholesky)
eigh = _complex_aware(eigh, _CL.eigh)
eigvalsh = _complex_aware(eigvalsh, _CL.eigvalsh)
svd = _complex_aware(svd, _CL.svd)
svdvals = _complex_aware(svdvals, _CL.svdvals)
norm = _complex_aware(norm, _CL.norm)
matrix_norm = _complex_aware(matrix_norm, _CL.matrix_norm)
vector_norm = _complex_aware(vector_norm, _CL.vector_norm)
qr = _complex_aware(qr, _CQ.qr)
pinv = _complex_aware(pinv, _CQ.pinv)
lstsq = _complex_aware(lstsq, _CQ.lstsq)
eig = _CL.eig
eigvals = _CL.eigvals
