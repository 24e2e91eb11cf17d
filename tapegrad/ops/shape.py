"""Ops that reshape, reorder or select elements, and their multi-input twins.

Views whose flat C-order layout equals the input's (reshape, squeeze,
expand_dims, astype) have an identity VJP.  Every op whose output is a
selection of its input (transpose, indexing, broadcast_to, split, unbind)
records an index map and shares one scatter-add VJP; concatenate and stack
record which input and position each output element comes from.
"""
import numpy as np

from ..views import is_basic, note_view

from ..kernels import codes as C
from ..tape import current
from ..tensor import Tensor, _node, _plain, _result
from .elementwise import _operand
from .registry import register


# -- identity-VJP views ----------------------------------------------------------
def _view(code, fn, x, *args, **kwargs):
    if not isinstance(x, Tensor):
        return fn(x, *args, **kwargs)
    data = fn(x._data, *args, **kwargs)
    if not x._requires_grad:
        return _plain(data)
    tape = current()
    if not tape.enabled:
        return _plain(data)
    return _result(tape, tape.record(code, (_node(tape, x),), data), data)


_RESHAPE = register("Reshape", C.K_UNARY, C.VIEW_FIRST, np.reshape)
_SQUEEZE = register("Squeeze", C.K_UNARY, C.VIEW_FIRST + 1, np.squeeze)
_EXPAND = register("Unsqueeze", C.K_UNARY, C.VIEW_FIRST + 2, np.expand_dims)
_ASTYPE = register("ToCopy", C.K_UNARY, C.VIEW_FIRST + 3, None)


def reshape(a, shape, *more, order="C"):
    """``numpy.reshape`` (C order).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.reshape(tg.tensor([1.0, 2.0, 3.0, 4.0]), (2, 2)).shape
    (2, 2)
    """
    if order != "C":
        raise NotImplementedError("tapegrad.reshape supports order='C' only")
    if more:
        shape = (shape, *more)
    return _view(_RESHAPE, np.reshape, a, shape)


def ravel(a):
    """``numpy.ravel``: a flat view (C order)."""
    return reshape(a, -1)


def squeeze(a, axis=None):
    """``numpy.squeeze``."""
    return _view(_SQUEEZE, np.squeeze, a, axis=axis)


def expand_dims(a, axis):
    """``numpy.expand_dims``."""
    return _view(_EXPAND, np.expand_dims, a, axis)


def astype(a, dtype):
    """Cast to another dtype; the gradient is cast back.

    A cast to a non-floating dtype gives a tensor that does not require grad
    (as PyTorch's ``x.long()``).
    """
    if np.dtype(dtype).kind != "f" and isinstance(a, Tensor):
        return _plain(np.asarray(a._data).astype(dtype))
    return _view(_ASTYPE, lambda d, t: np.asarray(d).astype(t), a, dtype)


# -- gathers: output = input elements picked by an index map ------------------------
def _gather(code, fn, x, index_fn=None):
    """Record ``fn(x)``, whose elements are elements of x or zeros.

    The index map is ``fn`` applied to a grid of 1-based element numbers,
    minus one: selected elements map to their source, and zeros that ``fn``
    fills in (triu, diag, constant padding) map to -1, which the VJP skips.
    ``index_fn`` replaces ``fn`` for the grid when the selection depends on
    the values (sort).
    """
    if not isinstance(x, Tensor):
        return fn(x)
    xd = x._data
    data = fn(xd)
    if not x._requires_grad:
        return _plain(data)
    tape = current()
    if not tape.enabled:
        return _plain(data)
    grid = np.arange(1, np.size(xd) + 1).reshape(np.shape(xd))
    idx = np.ravel((index_fn or fn)(grid)) - 1
    p = np.empty(idx.size + 1, np.int64)
    p[0] = idx.size
    p[1:] = idx
    return _result(tape, tape.record(code, (_node(tape, x),), data, p), data)


_TRANSPOSE = register("Transpose", C.K_GATHER, 0, np.transpose)
_INDEX = register("Index", C.K_GATHER, 1, None)
_BROADCAST = register("Expand", C.K_GATHER, 2, np.broadcast_to)
_SWAPAXES = register("Swapaxes", C.K_GATHER, 3, np.swapaxes)
_SPLIT = register("Split", C.K_GATHER, 4, np.split)
_UNBIND = register("Unbind", C.K_GATHER, 5, None)


_MOVEAXIS = register("Moveaxis", C.K_GATHER, 6, np.moveaxis)
_FLIP = register("Flip", C.K_GATHER, 7, np.flip)
_ROLL = register("Roll", C.K_GATHER, 8, np.roll)
_TILE = register("Tile", C.K_GATHER, 9, np.tile)
_REPEAT = register("Repeat", C.K_GATHER, 10, np.repeat)
_DIAGONAL = register("Diagonal", C.K_GATHER, 11, np.diagonal)
_TAKE = register("Take", C.K_GATHER, 12, np.take)
_TAKE_ALONG = register("TakeAlongAxis", C.K_GATHER, 13, np.take_along_axis)
_SORT = register("Sort", C.K_GATHER, 14, np.sort)
_TRIU = register("Triu", C.K_GATHER, 15, np.triu)
_TRIL = register("Tril", C.K_GATHER, 16, np.tril)
_DIAG = register("Diag", C.K_GATHER, 17, np.diag)
_PAD = register("Pad", C.K_GATHER, 18, np.pad)


def moveaxis(a, source, destination):
    """``numpy.moveaxis``."""
    return _gather(_MOVEAXIS, lambda d: np.moveaxis(d, source, destination), a)


def flip(m, axis=None):
    """``numpy.flip``."""
    return _gather(_FLIP, lambda d: np.flip(d, axis), m)


def fliplr(m):
    """``numpy.fliplr``."""
    return flip(m, 1)


def flipud(m):
    """``numpy.flipud``."""
    return flip(m, 0)


def roll(a, shift, axis=None):
    """``numpy.roll``."""
    return _gather(_ROLL, lambda d: np.roll(d, shift, axis), a)


def tile(a, reps):
    """``numpy.tile``; repeated elements accumulate their gradients."""
    return _gather(_TILE, lambda d: np.tile(d, reps), a)


def repeat(a, repeats, axis=None):
    """``numpy.repeat``; repeated elements accumulate their gradients."""
    return _gather(_REPEAT, lambda d: np.repeat(d, repeats, axis), a)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """``numpy.diagonal``."""
    return _gather(_DIAGONAL, lambda d: np.diagonal(d, offset, axis1, axis2).copy(), a)


def take(a, indices, axis=None):
    """``numpy.take``; repeated indices accumulate."""
    indices = _index_key(indices)
    return _gather(_TAKE, lambda d: np.take(d, indices, axis), a)


def take_along_axis(arr, indices, axis):
    """``numpy.take_along_axis``."""
    indices = _index_key(indices)
    return _gather(_TAKE_ALONG, lambda d: np.take_along_axis(d, indices, axis), arr)


def sort(a, axis=-1):
    """``numpy.sort``; the gradient flows back through the sorting permutation."""
    if not isinstance(a, Tensor):
        return np.sort(a, axis)
    order = np.argsort(a._data, axis=axis, kind="stable")
    if axis is None:
        return _gather(_SORT, lambda d: np.ravel(d)[order], a)
    return _gather(_SORT, lambda d: np.take_along_axis(d, order, axis), a)


def triu(m, k=0):
    """``numpy.triu``: zeros below the k-th diagonal get no gradient."""
    return _gather(_TRIU, lambda d: np.triu(d, k), m)


def tril(m, k=0):
    """``numpy.tril``: zeros above the k-th diagonal get no gradient."""
    return _gather(_TRIL, lambda d: np.tril(d, k), m)


def diag(v, k=0):
    """``numpy.diag``: the k-th diagonal of a matrix, or a matrix with v on it."""
    return _gather(_DIAG, lambda d: np.diag(d, k).copy(), v)


def pad(array, pad_width, mode="constant", **kwargs):
    """``numpy.pad`` with modes constant, edge, reflect, symmetric and wrap.

    Padded constants get no gradient; edge/reflect/symmetric/wrap padding
    repeats elements, whose gradients accumulate.
    """
    if mode not in ("constant", "edge", "reflect", "symmetric", "wrap"):
        raise NotImplementedError(f"tapegrad.pad: mode {mode!r} is not supported; use "
                                  "constant, edge, reflect, symmetric or wrap")
    fn = lambda d: np.pad(d, pad_width, mode=mode, **kwargs)  # noqa: E731
    if mode != "constant":
        return _gather(_PAD, fn, array)
    # the grid is padded with 0 (-> index -1) whatever the constant is
    return _gather(_PAD, fn, array, index_fn=lambda g: np.pad(g, pad_width))


_SCATTER = register("IndexPut", C.K_GATHER, 19, None)


def index_put(a, key, value):
    """``a`` with ``a[key] = value``, as a new tensor (the functional form of
    item assignment).

    The gradient flows to ``a`` outside ``key`` and to ``value`` inside it
    (summed where ``value`` was broadcast); where an index repeats, the last
    assignment wins, as in NumPy, and only it receives gradient.
    """
    from .elementwise import where
    key = _index_key(key)
    a = a if isinstance(a, Tensor) else _plain(np.asarray(a))
    shape = a.shape
    mask = np.zeros(shape, bool)
    mask[key] = True
    v = value if isinstance(value, Tensor) else _plain(np.asarray(value, dtype=a.dtype))
    target_shape = np.zeros(shape, np.int8)[key].shape

    def place(d):  # d's elements at the assigned positions, zeros elsewhere
        out = np.zeros(shape, np.result_type(d, a.dtype))
        out[key] = d
        return out

    def index_grid(grid):  # grid: v's 1-based element numbers
        out = np.zeros(shape, np.int64)
        out[key] = np.broadcast_to(grid, target_shape)
        return out

    if not v._requires_grad:
        placed = _plain(place(v._data))
    else:
        placed = _gather(_SCATTER, place, v, index_fn=index_grid)
    return where(mask, placed, a)


def transpose(a, axes=None):
    """``numpy.transpose``."""
    return _gather(_TRANSPOSE, lambda d: np.transpose(d, axes), a)


def swapaxes(a, axis1, axis2):
    """``numpy.swapaxes``."""
    return _gather(_SWAPAXES, lambda d: np.swapaxes(d, axis1, axis2), a)


def broadcast_to(a, shape):
    """``numpy.broadcast_to``; the gradient sums over the broadcast axes."""
    return _gather(_BROADCAST, lambda d: np.broadcast_to(d, shape), a)


def _index_key(key):
    """Indices from tensors become arrays; boolean-mask tensors stay masks."""
    if isinstance(key, Tensor):
        tape = current()
        if tape.tracing:  # the indices leave the tape: a replay must see the same ones
            tape.leave(key)
        return np.asarray(key._data)
    if isinstance(key, tuple):
        return tuple(_index_key(k) for k in key)
    if isinstance(key, list):
        return np.asarray(key)
    return key


def getitem(a, key):
    """``a[key]`` with ints, slices, None, Ellipsis, masks and integer arrays.

    Repeated indices accumulate in the gradient (scatter-add).
    """
    key = _index_key(key)
    out = _gather(_INDEX, lambda d: d[key], a)
    if isinstance(a, Tensor) and isinstance(out, Tensor) and is_basic(key):
        note_view(a, out, key)
    return out


def _multi(code, x, pieces_of):
    """Record an op with several outputs: one record, then one per output."""
    xd = x._data
    pieces = pieces_of(xd)
    if not (x._requires_grad and current().enabled):
        return tuple(_plain(p) for p in pieces)
    tape = current()
    grid = np.arange(np.size(xd)).reshape(np.shape(xd))
    idx = np.concatenate([np.ravel(p) for p in pieces_of(grid)] or [np.zeros(0, np.int64)])
    p = np.empty(idx.size + 1, np.int64)
    p[0] = idx.size
    p[1:] = idx
    u = tape.record(code, (_node(tape, x),), np.zeros(0), p)
    outs = []
    for s, piece in enumerate(pieces):
        r = tape.record(_OUTPUT, (u,), piece, (s,))
        outs.append(_result(tape, r, piece))
    return tuple(outs)


_OUTPUT = C.code(C.K_NONE, C.OUTPUT)


def unbind(a, axis=0):
    """Split along ``axis`` into a tuple of tensors with that axis removed.

    One record with several outputs: ``grad_fn.next_functions`` of a tensor
    built from them shows the shared ``UnbindBackward`` node with each
    output's slot.

    Examples
    --------
    >>> import tapegrad as tg
    >>> a, b = tg.unbind(tg.tensor([1.0, 2.0], requires_grad=True))
    >>> (a + b).grad_fn.next_functions[1][1]
    1
    """
    a = a if isinstance(a, Tensor) else _plain(np.asarray(a))
    n = a.shape[axis]
    return _multi(_UNBIND, a, lambda d: [np.take(d, i, axis=axis) for i in range(n)])


def split(a, indices_or_sections, axis=0, _fn=np.split):
    """``numpy.split``: a list of tensors, one record with several outputs."""
    a = a if isinstance(a, Tensor) else _plain(np.asarray(a))
    return list(_multi(_SPLIT, a, lambda d: _fn(d, indices_or_sections, axis=axis)))


# -- concatenate / stack ----------------------------------------------------------------
_CONCAT = register("Cat", C.K_CONCAT, 0, np.concatenate)
_STACK = register("Stack", C.K_CONCAT, 1, np.stack)


def _join(code, fn, arrays, axis):
    arrays = list(arrays)
    if not arrays:
        raise ValueError(f"{fn.__name__} needs at least one array")
    datas = [x._data if isinstance(x, Tensor) else np.asarray(x) for x in arrays]
    data = fn(datas, axis=axis)
    need = any(isinstance(x, Tensor) and x._requires_grad for x in arrays)
    tape = current()
    if not need or not tape.enabled:
        return _plain(data)
    src = fn([np.full(np.shape(d), j, np.int64) for j, d in enumerate(datas)], axis=axis)
    pos = fn([np.arange(np.size(d)).reshape(np.shape(d)) for d in datas], axis=axis)
    m = src.size
    p = np.empty(2 * m + 1, np.int64)
    p[0] = m
    p[1:m + 1] = src.ravel()
    p[m + 1:] = pos.ravel()
    parents = [_operand(tape, x) for x in arrays]
    return _result(tape, tape.record(code, parents, data, p), data)


def concatenate(arrays, axis=0):
    """``numpy.concatenate`` of tensors and arrays."""
    return _join(_CONCAT, np.concatenate, arrays, axis)


def stack(arrays, axis=0):
    """``numpy.stack`` of tensors and arrays."""
    return _join(_STACK, np.stack, arrays, axis)
