"""Records' index maps in NumPy, for the passes that run in Python (the
second-order rules of ``transforms/second/rules.py``, the Hessian patterns of
``transforms/sparsity.py``, ``create_graph``): which element of an operand each output
element reads, from the integer parameters the compiled kernels walk with an
odometer (``kernels/_views.py``); and the Index records of the gathers held
in the strided form, for a trace's replay, whose loops read index maps.
"""
import numpy as np

from ..kernels import codes as C

_I64 = np.int64
_INDEX = C.code(C.K_GATHER, C.INDEX)
#: the op codes of gathers held in the strided form (kernels/codes.py)
STRIDED_CODES = np.array([C.code(C.K_GATHER, s) for s in C.STRIDED], _I64)
#: by op code, whether it is one of them (a lookup: numpy.isin costs tens of
#: microseconds)
_IS_STRIDED = np.zeros((C.K_GATHER + 1) << C.SHIFT, np.bool_)
_IS_STRIDED[STRIDED_CODES] = True


def strided_map(shape, strides, offset=0):
    """The flat position, under ``strides`` and from ``offset``, of each
    element of an array of ``shape`` in C order: sums of per-axis aranges,
    the leading axes' first (small), then one pass over the output."""
    shape = [int(n) for n in shape]
    if len(shape) == 1 and strides[0]:  # one arange (a transform's maps: per call)
        return np.arange(offset, offset + shape[0] * int(strides[0]), int(strides[0]), _I64)
    out = np.empty(int(np.prod(shape, dtype=_I64)), _I64)
    if not shape:
        out[...] = offset
        return out
    lead = np.array(offset, _I64)
    for n, s in zip(shape[:-1], strides[:-1]):
        lead = np.add.outer(lead, np.arange(n, dtype=_I64) * int(s))
    np.add(lead[..., None], np.arange(shape[-1], dtype=_I64) * int(strides[-1]),
           out=out.reshape(shape))
    return out


def slice_map(ip, b):
    """The index map of a strided gather record whose parameters ``[m,
    offset, nd, shape, strides]`` start at ``ip[b]``."""
    off, nd = int(ip[b + 1]), int(ip[b + 2])
    return strided_map(ip[b + 3:b + 3 + nd], ip[b + 3 + nd:b + 3 + 2 * nd], off)


def gather_map(tape, r):
    """The index map of gather record r (``kernels/codes.py: K_GATHER``): the
    element of its operand each output element reads, -1 for a filled-in
    zero."""
    b = int(tape.ip0[r])
    if _is_strided(tape.op[r]):
        return slice_map(tape.ip, b)
    return tape.ip[b + 1:b + 1 + int(tape.ip[b])]


def _is_strided(op):
    """Whether op code(s) ``op`` are of gathers in the strided form."""
    return _IS_STRIDED[np.minimum(op, _IS_STRIDED.size - 1)]


def as_index_records(op, ip0, ip, n, ni):
    """``(op, ip0, ip)`` of a tape's first n records with every strided
    gather record made the Index record of the same selection (its map
    appended after the ``ni`` integer parameters in use), for a trace's
    replay, whose loops read index maps; copies, the arrays given are left
    as they are."""
    rs = np.flatnonzero(_is_strided(op[:n])).tolist()
    if not rs:
        return op, ip0, ip
    maps = [slice_map(ip, int(ip0[r])) for r in rs]
    at, end = [], ni
    for m in maps:
        at.append(end)
        end += m.size + 1
    ip2 = np.empty(end, _I64)
    ip2[:ni] = ip[:ni]
    for a, m in zip(at, maps):
        ip2[a] = m.size
        ip2[a + 1:a + 1 + m.size] = m
    op2, ip02 = op.copy(), ip0.copy()
    op2[rs] = _INDEX
    ip02[rs] = at
    return op2, ip02, ip2


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
