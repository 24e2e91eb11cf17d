"""Writes through views: ``v[1:-1][:] = x`` reaches ``v``, value and gradient.

A basic index (ints, slices, ``None``, ``...``) of a tensor gives a *view*
tensor that remembers its base and key (``Tensor._vw``), as NumPy's basic
indexing returns a view.  Without a graph, a write into a view is a NumPy
write into the shared memory.  With one, the write is recorded: the view
takes its new value (a recorded op), each base up the chain becomes
``index_put(base, key, view)``, and the other live views of a changed base
are taken again from its new value -- what PyTorch does when it rebases a
base's history after an in-place write through a view.  Advanced indexing
(integer arrays, masks) copies, in NumPy and here, so writes into its result
stay there.

This module keeps the bookkeeping (which tensor is a view of which, and
whether a write is allowed); ``ops/view_writes.py`` carries a write up the
chain with the recorded ops.
"""
import weakref

import numpy as np

from .tape import current


def is_basic(key):
    """Whether ``a[key]`` is a NumPy view (basic indexing)."""
    keys = key if isinstance(key, tuple) else (key,)
    for k in keys:
        if k is None or k is Ellipsis or isinstance(k, slice):
            continue
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            continue
        return False
    return True


def note_view(base, view, key):
    """Remember that ``view`` is ``base[key]`` (a basic index)."""
    view._vw = (base, key)
    tok = view._tok
    if tok is not None and tok is tok.tape.tok:
        # its record shares the base record's memory: a write the graph does not
        # see into the base reaches what the view's consumers saved (check_stale)
        tok.tape.aliases.add(view._rec)
    if base._requires_grad:  # recorded writes re-derive the base's other views
        track(base, view)


def track(base, view):
    """Add ``view`` to the live views of ``base`` (which requires grad)."""
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


def check_writable(t):
    """Refuse a recorded write into a view of a leaf that requires grad
    (PyTorch's rule), before anything changes."""
    chain, root = _chain(t)
    if chain and root._requires_grad and root._tok is None and current().enabled:
        raise RuntimeError(
            "a view of a leaf tensor that requires grad is being used in an in-place "
            "operation (as in PyTorch, this is not allowed); write into a copy (y = x * 1.0; "
            "y[1:3] = v) or update the leaf under `with tg.no_grad():`")
