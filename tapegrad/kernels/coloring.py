"""Greedy distance-2 colouring of a sparse matrix's columns (``tapegrad.transforms.sparsity``).

Two columns conflict when some row has a nonzero in both; columns of one
colour can then share one Hessian-vector product and be told apart row by
row.  Visiting the columns in order and giving each the smallest colour no
conflicting column holds needs at most ``1 + max_i (nnz(row i) - 1) *
max_j nnz(col j)`` colours and one look at every (row, column) pair two steps
apart: a banded matrix of bandwidth b gets 2b + 1 colours, whatever its size.
"""
import numpy as np

from ._jit import inline, kernel


@inline
def _assign(color, taken, v, p):
    """Give column v the smallest colour not marked ``taken[c] == v``;
    returns the number of colours in use."""
    c = 0
    while taken[c] == v:
        c += 1
    color[v] = c
    return max(p, c + 1)


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
        p = _assign(color, taken, j, p)
    return color, p


@kernel
def star_color(ptr, idx, n):
    """``(color, p)``: a star colouring of the symmetric pattern's adjacency
    graph (columns are vertices, off-diagonal nonzeros edges): adjacent
    columns differ and no path on four vertices takes only two colours.
    Then each nonzero ``H[i, j]`` can be read from a product, at row i of
    colour j's or at row j of colour i's (symmetry), even where two columns
    of one colour share a row -- an arrowhead (one input coupled with all
    the others) takes 2 colours instead of n.

    Greedy in column order (Gebremedhin, Manne and Pothen, "What color is
    your Jacobian?", SIAM Review 2005): a column avoids its neighbours'
    colours; the colours two steps away through a neighbour not coloured yet
    (so that two neighbours of one column never share a colour); and the
    colour of x on a path ``v - w - x - y`` whose w and y already share one.
    """
    color = np.full(n, -1, np.int64)
    taken = np.full(n + 1, -1, np.int64)
    p = 0
    for v in range(n):
        for a in range(ptr[v], ptr[v + 1]):
            w = idx[a]
            if w == v:
                continue
            cw = color[w]
            if cw >= 0:
                taken[cw] = v
            for b in range(ptr[w], ptr[w + 1]):
                x = idx[b]
                if x == w or x == v or color[x] < 0:
                    continue
                if cw < 0:
                    taken[color[x]] = v
                    continue
                for c in range(ptr[x], ptr[x + 1]):
                    y = idx[c]
                    if y != x and y != w and color[y] == cw:
                        taken[color[x]] = v
                        break
        p = _assign(color, taken, v, p)
    return color, p
