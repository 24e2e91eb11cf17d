"""Tensor hooks and ``retain_grad``: host actions between compiled sweeps.

A non-leaf tensor's hooks are kept on the tape, keyed by its record, so
they outlive the tensor as PyTorch's do (they belong to the graph, and stay
while its record is not freed: a record that saved nothing runs again).
The backward sweep is compiled and never calls Python per record; instead
the walk (``autograd.walk``: backward, ``backward(inputs=)``,
``autograd.grad``, ``create_graph``) runs the sweep down to each hooked
record on its way, whose adjoint is then complete (every consumer has a
higher record id), applies the hooks to it in Python
(:func:`run_record_hooks`), and resumes.  A backward with no hooks never
looks at them.

Leaves get their record lazily, once per tape epoch, so their hooks are kept
by tensor here and run on the leaf's whole gradient before it is stored or
returned (:func:`leaf_hooked`).
"""
import itertools
import weakref

import numpy as np

from ..core.tensor import Tensor, _plain, bound

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
        from ..core.grad_mode import no_grad
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

    def apply_graph(self, g, name):
        """``apply`` for a ``create_graph`` walk: ``g`` is the gradient as a
        flat tensor of the graph, and so is the result (None if no hook
        replaced it); the hooks run with grad mode on, so what they compute
        is differentiable again, as in PyTorch."""
        from ..core.grad_mode import enable_grad
        out = None
        with enable_grad():
            for fn in list(self.fns.values()):
                cur = g if out is None else out
                grad = cur.reshape(self.shape)
                if grad.dtype != self.dtype:
                    grad = grad.astype(self.dtype)
                new = fn(grad)
                if new is None:
                    continue
                if not isinstance(new, Tensor):
                    new = _plain(np.asarray(new, dtype=np.float64))
                if new.shape != tuple(self.shape):
                    raise RuntimeError(
                        f"hook {getattr(fn, '__name__', fn)!r} on {name()} returned a "
                        f"gradient of shape {new.shape}, but the tensor has shape "
                        f"{tuple(self.shape)}")
                out = new.reshape(-1)
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
        LEAF_HOOKS[key] = (weakref.ref(t, lambda _, hooks=LEAF_HOOKS: hooks.pop(key, None)), h)
        return h
    tape = t._tok.tape
    if tape is None or not tape.is_live(t._tok):
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
        if owner is None or not tape.is_live(owner._tok):
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


def run_record_hooks(tape, eng, r, retained, refuse=None):
    """Apply record r's hooks to its complete adjoint in walk engine ``eng``
    (autograd.walk), replacing it; note its retained gradient, after the
    hooks, in ``retained`` to be stored if the walk succeeds.  ``refuse``:
    raise it (a callable giving the exception) if a hook replaces the
    gradient."""
    h = tape.hooks.get(r)
    if not h:
        return
    from .graph import Node
    owner = h.retain() if h.retain is not None else None

    def name():
        return f"the output of {Node(tape.tok, r).name()}"
    if eng.record:  # create_graph: the adjoint is a flat tensor of the graph
        g = eng.grad(r)
        if h.fns:
            new = h.apply_graph(g, name)
            if new is not None:
                eng.set(r, new)
                g = new
        if owner is not None:
            retained.append((owner, g))  # (stored in its shape: Recorded.store)
        return
    # the memory is r's, its consumers have all run: flat for one vector,
    # (p, size) for p of them, each hooked alone
    g = eng.grad(r)
    if h.fns:
        for row in ((g,) if g.ndim == 1 else g):
            new = h.apply(row, name)
            if new is not None:
                if refuse is not None:
                    raise refuse()
                row[:] = new
    if owner is not None and g.ndim == 1:
        retained.append((owner, g.reshape(h.shape).copy()))


def leaf_hooked(leaf, g, record=False, refuse=None):
    """``leaf``'s gradient ``g`` after its hooks: an array (p vectors as
    rows of a 2-d one, each hooked alone), or for a ``create_graph`` walk
    (``record``) a flat tensor of the graph."""
    entry = LEAF_HOOKS.get(id(leaf))
    if entry is None or not entry[1].fns:
        return g
    if record:
        new = entry[1].apply_graph(g, lambda: "a leaf tensor")
        return g if new is None else new
    g = np.asarray(g)
    rows = g if g.ndim == 2 else g.reshape(1, -1)
    out = None
    for k in range(rows.shape[0]):
        new = entry[1].apply(np.asarray(rows[k], dtype=np.float64), lambda: "a leaf tensor")
        if new is not None:
            if refuse is not None:
                raise refuse()
            if out is None:
                out = np.array(rows, dtype=np.result_type(rows.dtype, np.float64))
            out[k] = new
    return g if out is None else out.reshape(g.shape)


# Tensor.register_hook, retain_grad and retains_grad are these
bound.bind(register_hook=register_hook, retain_grad=retain_grad, retains_grad=retains_grad)
