"""Matrix products with a block of vectors that is mostly zeros.

Vector modes push p unit seeds at once (a Jacobian's rows or columns), and
elementwise ops keep each vector's one nonzero: the block reaching a matmul
in ``tanh(A @ x) * x`` is (200, 200) with 200 nonzeros.  A GEMM over it
would cost p full products; summing one scaled row of the other operand
per nonzero costs one row each.  Finding the nonzeros in compiled code
(rather than ``np.flatnonzero`` and fancy indexing) keeps that cheaper than
the GEMM even for small blocks.
"""
import numpy as np

from ._jit import kernel


@kernel
def sparse_products(g, a, bt, need_a, need_b, share):
    """For g (p, m, k), a (m, n) and bt = b.T (k, n): ``(True, g @ b.T,
    (a.T @ g) with its last two axes swapped)`` -- shapes (p, m, n) and
    (p, k, n) -- when at most ``share`` of g's entries are nonzero, else
    ``(False, ...)``.  g must be C-contiguous."""
    p, m, k = g.shape
    n = a.shape[1]
    flat = g.ravel()  # C-contiguous: one long loop, not p * m short ones
    limit = share * flat.size
    nnz = 0
    for f in range(flat.size):
        nnz += flat[f] != 0.0
    if nnz > limit:
        return False, np.zeros((0, 0, 0)), np.zeros((0, 0, 0))
    ga = np.zeros((p, m, n) if need_a else (0, 0, 0))
    gbt = np.zeros((p, k, n) if need_b else (0, 0, 0))
    for f in range(flat.size):
        x = flat[f]
        if x != 0.0:
            v, rest = divmod(f, m * k)
            i, j = divmod(rest, k)
            if need_a:  # ga[v, i, :] += x * b[:, j]
                for c in range(n):
                    ga[v, i, c] += x * bt[j, c]
            if need_b:  # gb[v, :, j] += x * a[i, :]
                for c in range(n):
                    gbt[v, j, c] += x * a[i, c]
    return True, ga, gbt
