"""A write into a view tensor carried up to its bases, recorded
(``tapegrad/ops/views.py`` has the bookkeeping and the rules): the view takes its
new value, each base up the chain becomes its old value with the view's
elements replaced (:func:`put`), and the other live views of a changed base
are taken again from its new value (:func:`take`).
"""
import numpy as np

from ..core.grad_mode import enable_grad
from .views import ViewOf, _chain, array_of, check_writable
from .shape import getitem, index_put


def take(base, key):
    """The view of tensor ``base`` that ``key`` takes, recorded."""
    return key.again(base) if type(key) is ViewOf else getitem(base, key)


def put(base, key, value):
    """``base`` with the elements of its view ``key`` replaced by tensor
    ``value`` (of the view's shape), recorded: a basic index is a scatter
    (``index_put``); every other writable view holds each element of the
    base once and undoes itself (``ViewOf.undo``), the new base a view of
    ``value``, no copy."""
    if type(key) is not ViewOf:
        return index_put(base, key, value)
    return key.undo(value, base.shape)


def write(t, new, become):
    """Give tensor ``t`` the recorded new value ``new`` and pass it up to t's
    bases (see the module docstring); ``become(a, b)`` lets a take b's place."""
    check_writable(t)
    chain, _ = _chain(t)
    # compute every new value first: a failure leaves every tensor as it was
    values = [new]
    for _, base, key in chain:
        values.append(put(base, key, values[-1]))
    become(t, new)
    for (_, base, key), value in zip(chain, values[1:]):
        old, got = base._data, value._data
        if type(old) is np.ndarray and type(got) is np.ndarray and got.strides != old.strides:
            # NumPy writes in place, so the base keeps its memory layout, on
            # which later views depend (ravel copies a transposed layout);
            # an undone view gives the value in the view's layout
            kept = np.empty_like(old)
            kept[...] = got
            value._data = kept
        if not base._requires_grad and isinstance(base._data, np.ndarray) \
                and base._data.flags.writeable:
            # a plain base: NumPy views of its memory see the numbers too
            array_of(base._data, key)[...] = array_of(value._data, key)
        become(base, value)
    # every view down from the outermost base, t among them, is taken again
    # from its base's new value: they share its memory, as NumPy views do
    retake(chain[-1][1], skip=None)


def retake(base, skip, stale=None):
    """Take the live views of ``base`` (other than ``skip``) again from its
    new value, and theirs from theirs.  ``stale=(tape, what)`` (a write no
    graph records) also marks their old records stale on that tape: a graph
    that saved a view's old value raises at backward, as in PyTorch.  A
    view without a graph of a base without one shares its memory: it sees
    the write as it is."""
    views = getattr(base, "_views", None)
    if not views:
        return
    live = [w() for w in views]
    for w in live:
        if w is None or w is skip or getattr(w, "_vw", (None,))[0] is not base:
            continue
        if not base._requires_grad and not w._requires_grad:
            continue
        if stale is not None and stale[0].is_live(w._tok):
            stale[0].stale[w._rec] = stale[1]
        with enable_grad():   # under no_grad too: the view stays in the graph
            fresh = take(base, w._vw[1])
        for slot in ("_data", "_requires_grad", "_tok", "_rec"):
            if hasattr(fresh, slot):
                setattr(w, slot, getattr(fresh, slot))
        retake(w, None, stale)
