"""Records' index maps in NumPy, for the passes that run in Python (the
second-order rules of ``second_rules.py``, the Hessian patterns of
``sparsity.py``): which element of an operand each output element reads,
from the integer parameters the compiled kernels walk with an odometer
(``kernels/_views.py``).
"""
import numpy as np

_I64 = np.int64


def strided_map(shape, strides):
    """The flat position, under ``strides``, of each element of an array of
    ``shape`` in C order."""
    pos = np.indices(tuple(int(s) for s in shape)).reshape(len(shape), -1)
    return (np.asarray(strides, _I64)[:, None] * pos).sum(axis=0)


def reduce_map(tape, r, n):
    """The output element of each of the n input elements of reduction r
    (``ip``: ``[nd, in_shape, out_strides]``, nothing for a full one)."""
    b = int(tape.ip0[r])
    nd = int(tape.ip[b]) if b else 0
    if nd == 0:
        return np.zeros(n, _I64)
    return strided_map(tape.ip[b + 1:b + 1 + nd], tape.ip[b + 1 + nd:b + 1 + 2 * nd])


def operand_maps(tape, r, m, sizes, at=0):
    """Per operand (of ``sizes`` elements), the element each of the m output
    elements reads, or None where that is the identity; the broadcast layout
    ``[nd, shape, strides of each operand]`` starts at ``ip[ip0[r] + at]``
    (``nd`` 0: each operand full-size or one element; a record with no
    parameters at all has ``ip0`` 0)."""
    b = int(tape.ip0[r]) + at
    nd = int(tape.ip[b]) if b or at else 0
    maps = []
    for j, s in enumerate(sizes):
        if nd == 0:
            maps.append(None if s == m else np.zeros(m, _I64))
            continue
        mp = strided_map(tape.ip[b + 1:b + 1 + nd],
                         tape.ip[b + 1 + nd * (j + 1):b + 1 + nd * (j + 2)])
        maps.append(None if s == m and np.array_equal(mp, np.arange(m)) else mp)
    return maps
