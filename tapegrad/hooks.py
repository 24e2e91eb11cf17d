"""Tensor hooks and ``retain_grad``: host actions between compiled sweeps.

A non-leaf tensor's hooks are kept on the tape, keyed by its record, so
they outlive the tensor as PyTorch's do (they belong to the graph).  The
backward sweep is compiled and never calls Python per record; instead
``backward`` runs the sweep down to each hooked record, whose adjoint is then
complete (every consumer has a higher record id), applies the hooks to it
in Python, and resumes.  A backward with no hooks never looks at them.

Leaves get their record lazily, once per tape epoch, so their hooks are kept
by tensor here and run on the leaf's gradient before it is accumulated.
"""
import itertools
import weakref

import numpy as np

from .tensor import Tensor, _plain, bound

_ids = itertools.count()

#: id(leaf) -> Hooks of leaves that have hooks; empty in a program that uses
#: none, which is all a backward checks
LEAF_HOOKS = {}


class Hooks:
    """The hooks of one tensor, in registration order, and its retain flag."""

    __slots__ = ("fns", "retain", "shape", "dtype", "leaf_key", "__weakref__")

    def __init__(self, shape, dtype, leaf_key=None):
        self.fns = {}          # handle id -> fn (dicts keep insertion order)
        self.retain = None     # weakref to a non-leaf whose .grad is kept
        self.shape = shape
        self.dtype = dtype
        self.leaf_key = leaf_key  # a leaf's key in LEAF_HOOKS

    def __bool__(self):
        return bool(self.fns) or self.retain is not None

    def apply(self, g, name):
        """Run the hooks on gradient ``g`` (float64, any layout of the
        tensor's size); return the gradient that continues, or None if no
        hook replaced it.  ``name()`` names the tensor in errors."""
        from .grad_mode import no_grad
        out = None
        for fn in list(self.fns.values()):
            cur = g if out is None else out
            grad = _grad_tensor(cur.reshape(self.shape).astype(self.dtype, copy=True))
            with no_grad():  # as in PyTorch: a backward does not record
                new = fn(grad)
            if new is None:
                continue
            data = np.asarray(new._data if isinstance(new, Tensor) else new)
            if data.shape != tuple(self.shape):
                raise RuntimeError(
                    f"hook {getattr(fn, '__name__', fn)!r} on {name()} returned a gradient "
                    f"of shape {data.shape}, but the tensor has shape {tuple(self.shape)}")
            out = np.asarray(data, dtype=np.float64).reshape(-1)
        return out


class RemovableHandle:
    """What ``register_hook`` returns: ``handle.remove()`` takes the hook off."""

    __slots__ = ("_hooks", "_id")

    def __init__(self, hooks, hid):
        self._hooks = weakref.ref(hooks)
        self._id = hid

    def remove(self):
        hooks = self._hooks()
        if hooks is not None:
            hooks.fns.pop(self._id, None)
            if not hooks.fns and hooks.leaf_key is not None:
                # the last hook of a leaf: backwards stop looking for leaf hooks
                entry = LEAF_HOOKS.get(hooks.leaf_key)
                if entry is not None and entry[1] is hooks:
                    del LEAF_HOOKS[hooks.leaf_key]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def _grad_tensor(a):
    return _plain(a if a.ndim else a[()])


def _hooks_of(t, create):
    """The Hooks of tensor t (None if it has none and ``create`` is false)."""
    if t._tok is None:
        entry = LEAF_HOOKS.get(id(t))
        if entry is not None:
            return entry[1]
        if not create:
            return None
        key = id(t)
        h = Hooks(t.shape, t.dtype, key)
        # drop the entry with the leaf (ids are reused after that)
        LEAF_HOOKS[key] = (weakref.ref(t, lambda _: LEAF_HOOKS.pop(key, None)), h)
        return h
    tape = t._tok.tape
    if t._tok is not tape.tok:
        raise RuntimeError(
            "the graph of this tensor was freed by backward() and its tape reused; "
            "register hooks before calling backward (or use retain_graph=True)")
    # a write no graph records leaves the tensor's history as it was (PyTorch):
    # its hooks belong to the record it had before the write, whose adjoint
    # holds every use of the tensor, before the write and after
    from .graph import origin
    r = origin(tape, t._rec)
    h = tape.hooks.get(r)
    if h is None and create:
        h = tape.hooks[r] = Hooks(t.shape, t.dtype)
    return h


def register_hook(t, fn):
    if not t._requires_grad:
        raise RuntimeError(
            "cannot register a hook on a tensor that does not require gradient")
    if not callable(fn):
        raise TypeError(f"register_hook needs a callable, got {type(fn).__name__}")
    h = _hooks_of(t, True)
    hid = next(_ids)
    h.fns[hid] = fn
    return RemovableHandle(h, hid)


def retain_grad(t):
    if not t._requires_grad:
        raise RuntimeError("can't retain_grad on a tensor that has requires_grad=False")
    if t._tok is None:
        return  # a leaf keeps its gradient anyway
    h = _hooks_of(t, True)
    if h.retain is None:
        h.retain = weakref.ref(t)
        t._grad = None
    _RETAINING[id(t)] = weakref.ref(t, lambda _, key=id(t): _RETAINING.pop(key, None))


def follow_retained(tape):
    """Before a backward: move each ``retain_grad`` to its tensor's record now.

    An in-place op recorded on a tensor (``h *= 3``, ``h[0] = v``, a write
    through a view of it) gives the tensor a new record; its retained
    gradient is that of the value it holds now, as in PyTorch, so the retain
    follows the tensor there.  Its hooks stay on the record they were
    registered on (PyTorch's hooks stay with the old version).  A write no
    graph records keeps the tensor's record (``origin``), and its retain.
    """
    for h in list(tape.hooks.values()):
        owner = h.retain() if h.retain is not None else None
        if owner is None or owner._tok is not tape.tok:
            continue
        now = _hooks_of(owner, True)
        if now is not h:
            now.retain, h.retain = h.retain, None


#: id(t) -> weakref of the non-leaf tensors that called retain_grad(): the flag
#: belongs to the tensor, and stays when a backward frees the graph (and with it
#: the record's Hooks), as in PyTorch
_RETAINING = {}


def retains_grad(t):
    if t._tok is None:
        return False
    ref = _RETAINING.get(id(t))
    return ref is not None and ref() is t


def run_record_hooks(tape, adj, r, retained):
    """Apply record r's hooks to its (complete) adjoint, in place; note its
    retained gradient in ``retained`` to be stored if the backward succeeds."""
    h = tape.hooks.get(r)
    if not h:
        return
    g = adj[r]
    if h.fns:
        from .graph import Node
        new = h.apply(g, lambda: f"the output of {Node(tape.tok, r).name()}")
        if new is not None:
            g[:] = new  # the memory is r's: its consumers have all run
    if h.retain is not None:
        owner = h.retain()
        if owner is not None:
            retained.append((owner, g.reshape(h.shape).copy()))


def run_leaf_hooks(leaf, g):
    """The gradient of ``leaf`` after its hooks (``g`` itself if none)."""
    entry = LEAF_HOOKS.get(id(leaf))
    if entry is None or not entry[1].fns:
        return g
    new = entry[1].apply(np.asarray(g, dtype=np.float64).reshape(-1), lambda: "a leaf tensor")
    return g if new is None else new.reshape(np.shape(g))


def hooked_records(tape, start):
    """Records ``<= start`` that have hooks or retain their gradient, from
    the highest down."""
    return sorted((r for r, h in tape.hooks.items() if r <= start and h), reverse=True)


# Tensor.register_hook, retain_grad and retains_grad are these
bound.bind(register_hook=register_hook, retain_grad=retain_grad, retains_grad=retains_grad)
