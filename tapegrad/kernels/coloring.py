"""Greedy distance-2 colouring of a sparse matrix's columns (``tapegrad.sparsity``).

Two columns conflict when some row has a nonzero in both; columns of one
colour can then share one Hessian-vector product and be told apart row by
row.  Visiting the columns in order and giving each the smallest colour no
conflicting column holds needs at most ``1 + max_i (nnz(row i) - 1) *
max_j nnz(col j)`` colours and one look at every (row, column) pair two steps
apart: a banded matrix of bandwidth b gets 2b + 1 colours, whatever its size.
"""
import numpy as np

from ._jit import kernel


@kernel
def color_columns(ptr, idx, n):
    """``(color, p)`` for the symmetric pattern whose row i holds the columns
    ``idx[ptr[i]:ptr[i + 1]]`` (by symmetry, also column i's rows)."""
    color = np.full(n, -1, np.int64)
    # taken[c] == j: colour c is held by a column conflicting with column j
    taken = np.full(n + 1, -1, np.int64)
    p = 0
    for j in range(n):
        for a in range(ptr[j], ptr[j + 1]):
            i = idx[a]  # row i has a nonzero in column j ...
            for b in range(ptr[i], ptr[i + 1]):
                c = color[idx[b]]  # ... and in column idx[b]
                if c >= 0:
                    taken[c] = j
        c = 0
        while taken[c] == j:
            c += 1
        color[j] = c
        if c == p:
            p += 1
    return color, p
