"""NumPy's aliasing model, with gradients: a write through a view reaches
its base and every other live view, in value and gradient.

An op returns a *view* exactly when NumPy's does: basic indexing (ints,
slices, ``None``, ``...``) except a full integer index (NumPy gives a scalar,
a copy), reshape/ravel when no copy is needed, transposes, squeeze,
expand_dims, flip, the pieces of split, and -- read-only, as in NumPy --
diagonal and broadcast_to.  A view tensor remembers its base and how it was
taken (``Tensor._vw = (base, key)``): ``key`` is a basic index, or a
:class:`ViewOf` for every other view op, so that one mechanism serves them
all.  Without a graph, a write into a view is a NumPy write into the shared
memory.  With one, the write is recorded: the view takes its new value (a
recorded op), each base up the chain becomes its old value with the view's
elements replaced (a recorded scatter for a basic index, the view undone for
every other view op), and the other live views of a changed base are taken
again from its new value -- what PyTorch does when
it rebases a base's history after an in-place write through a view.
Advanced indexing (integer arrays, masks) copies, in NumPy and here, so
writes into its result stay there.

This module keeps the bookkeeping (which tensor is a view of which, and
whether a write is allowed); ``ops/view_writes.py`` carries a write up the
chain with the recorded ops.
"""
import weakref

import numpy as np

from ..core.tape import current
from ..core.tensor import _plain


def _is_int(k):
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def is_basic(key):
    """Whether ``a[key]`` is a NumPy view (basic indexing)."""
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k) for k in keys)


class ViewOf:
    """How a view that no basic index describes is taken from its base:
    ``np_fn(d, *args)`` is NumPy's view of an array ``d`` of the base's shape;
    ``tg_fn(base, *args)`` takes the view tensor again, recorded, after the
    base changed.  Every writable one holds each element of its base once
    (reshape, transposes, flip, ...), so ``undo(value, shape)`` is the base
    of ``shape`` whose view is ``value``, recorded: a write through it needs
    no scatter.  ``writeable`` is False for NumPy's read-only views
    (diagonal, broadcast_to), which have no ``undo``."""
    __slots__ = ("name", "np_fn", "tg_fn", "args", "undo", "writeable")

    def __init__(self, name, np_fn, tg_fn, args, undo=None, writeable=True):
        self.name, self.np_fn, self.tg_fn = name, np_fn, tg_fn
        self.args, self.undo, self.writeable = args, undo, writeable

    def array(self, d):
        return self.np_fn(d, *self.args)

    def again(self, base):
        return self.tg_fn(base, *self.args)

    def __repr__(self):
        return f"ViewOf({self.name}{self.args})"


def array_of(d, key):
    """The NumPy view of array ``d`` that ``key`` (a basic index or a
    :class:`ViewOf`) takes."""
    return key.array(d) if type(key) is ViewOf else d[key]


def is_scalar(t):
    """Whether tensor t stands for a NumPy scalar (a ufunc's 0-d result, an
    item), whose views are new arrays, not views: its value is one, or a 0-d
    array ``numpy()`` gave it (``Tensor._scalar``)."""
    return type(t._data) is not np.ndarray or getattr(t, "_scalar", False)


def note_view(base, view, key):
    """Remember that ``view`` is a view of ``base`` taken by ``key`` (a basic
    index or a :class:`ViewOf`)."""
    view._vw = (base, key)
    tok = view._tok
    if tok is not None and tok.tape is not None:   # of its tape's live epoch
        # its record shares the base record's memory: a write the graph does not
        # see into the base reaches what the view's consumers saved (check_stale)
        tok.tape.aliases.add(view._rec)
    # a recorded write into the base, even one that gives a plain base a graph
    # (a[0] = x), gives the base a new value: its views are taken again
    track(base, view)


def is_full_index(key, ndim):
    """Whether ``key`` is one integer per axis (``a[1, 2]``): NumPy gives a
    scalar, a copy, not a view (so ``t = a[0]; a[0] = a[1]; a[1] = t`` swaps)."""
    if type(key) is not tuple:
        return ndim == 1 and _is_int(key)
    return len(key) == ndim and all(_is_int(k) for k in key)


def track(base, view):
    """Add ``view`` to the live views of ``base``."""
    views = getattr(base, "_views", None)  # unset on most tensors: cheaper than raising
    if views is None:
        views = base._views = []
    views.append(weakref.ref(view))
    if len(views) > 64 and len(views) & (len(views) - 1) == 0:  # prune now and then
        views[:] = [w for w in views if w() is not None]


def _chain(t):
    """(view, base, key) from t up to the tensor that is no view."""
    out = []
    v = t
    while True:
        vw = getattr(v, "_vw", None)
        if vw is None:
            return out, v
        out.append((v,) + vw)
        v = vw[0]


def note_read_only(view, how):
    """Make ``view`` read-only where NumPy's result is, though it is no view
    of a tensor (``broadcast_to`` of a scalar: a view of NumPy's temporary
    copy; ``imag`` of a real array): a view, by ``how``, of a base nothing
    else holds."""
    note_view(_plain(np.zeros(())), view, how)


def check_read_only(t, chain=None):
    """Refuse a write into a read-only view (diagonal, broadcast_to, and the
    views of those), as NumPy does, before anything changes; ``chain``:
    ``_chain(t)``'s, when the caller has it."""
    for _, _, key in (_chain(t)[0] if chain is None else chain):
        if type(key) is ViewOf and not key.writeable:
            raise ValueError(
                f"assignment destination is read-only: the tensor is a view made by "
                f"{key.name}, which NumPy makes read-only; write into a copy "
                f"(d = {key.name}(...).copy()) or into the array it was taken from")


def check_writable(t):
    """Refuse a recorded write into a read-only view, or into a view of a
    leaf that requires grad (PyTorch's rule), before anything changes."""
    chain, root = _chain(t)
    check_read_only(t, chain)
    if chain and root._requires_grad and root._tok is None and current().enabled:
        raise RuntimeError(
            "a view of a leaf tensor that requires grad is being used in an in-place "
            "operation (as in PyTorch, this is not allowed); write into a copy (y = x * 1.0; "
            "y[1:3] = v) or update the leaf under `with tg.no_grad():`")
