"""How ``tapegrad.numpy`` turns NumPy's functions into ones that accept
lists of tensors.

NumPy's own functions already reach tapegrad through the NumPy protocol
whenever a tensor is one of their array arguments.  What they cannot do is
see a tensor inside a list (``np.mean([t1, t2])``): NumPy converts the list
with ``np.asarray``, which would drop the gradient.  The wrappers here build a
tensor from such a list first (:func:`build`), then call NumPy's function.
"""
import functools
import types

import numpy as np

from ..core.tensor import Tensor
from ..ops.complex_tensor import ComplexTensor

_TENSORS = (Tensor, ComplexTensor)
_SEQ = (list, tuple)


def is_tensor(x):
    return isinstance(x, _TENSORS)


def holds_tensor(x):
    """Whether ``x`` is a tensor or a (nested) list/tuple holding one."""
    if isinstance(x, _TENSORS):
        return True
    if type(x) in _SEQ or isinstance(x, _SEQ):
        return any(holds_tensor(e) for e in x)
    return False


def build(x):
    """A tensor from nested lists/tuples of tensors, arrays and numbers
    (NumPy's ``np.array`` of the same nesting, differentiable in the tensors);
    ``x`` itself when it holds no tensor."""
    if isinstance(x, _TENSORS) or not isinstance(x, _SEQ):
        return x
    parts = [build(e) for e in x]
    if not any(isinstance(p, _TENSORS) for p in parts):
        return x
    parts = [p if isinstance(p, _TENSORS) else np.asarray(p) for p in parts]
    shapes = {tuple(np.shape(p)) for p in parts}
    if len(shapes) > 1:
        raise ValueError(
            f"tapegrad.numpy: cannot build an array from a list of tensors and arrays of "
            f"different shapes {sorted(shapes)}: every element of a level of nesting must "
            f"have the same shape (as NumPy requires for a numeric array)")
    return np.stack(parts)


def lift(x):
    """``build(x)`` if ``x`` is a list/tuple holding a tensor, else ``x``."""
    if isinstance(x, _SEQ) and holds_tensor(x):
        return build(x)
    return x


def lift_each(x):
    """For a parameter that is a sequence of arrays (``np.concatenate``'s
    ``arrays``): each element lifted on its own."""
    if isinstance(x, _SEQ) and holds_tensor(x):
        return type(x)(lift(e) for e in x) if type(x) in _SEQ else [lift(e) for e in x]
    return x


def lifting(fn, seq=(), on_tensors=None):
    """``fn`` taking lists of tensors: positional arguments at the indices in
    ``seq`` (and keywords named there) are sequences of arrays, each lifted;
    every other list/tuple argument holding a tensor becomes one tensor.
    ``on_tensors``, if given, is called instead of ``fn`` when a tensor is
    among the arguments."""
    seq_pos = {s for s in seq if isinstance(s, int)}
    seq_kw = {s for s in seq if isinstance(s, str)}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tensors = False
        if any(isinstance(a, (_SEQ + _TENSORS)) for a in args) or any(
                isinstance(v, (_SEQ + _TENSORS)) for v in kwargs.values()):
            args = tuple((lift_each if i in seq_pos else lift)(a) for i, a in enumerate(args))
            kwargs = {k: (lift_each if k in seq_kw else lift)(v) for k, v in kwargs.items()}
            tensors = on_tensors is not None and (
                any(map(holds_tensor, args)) or any(map(holds_tensor, kwargs.values())))
        if tensors:
            return on_tensors(*args, **kwargs)
        return fn(*args, **kwargs)
    return wrapper


def passes_through(obj):
    """NumPy objects used as they are: ufuncs (they reach tapegrad through
    ``__array_ufunc__``), classes, modules and constants."""
    return (isinstance(obj, (np.ufunc, type, types.ModuleType)) or not callable(obj))


def namespace_getattr(module_name, source, table, seq, on_tensors):
    """A module ``__getattr__``: NumPy's attribute ``name`` of ``source``,
    wrapped by :func:`lifting` if it is a function, cached in ``table``."""
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        try:
            obj = getattr(source, name)
        except AttributeError:
            raise AttributeError(
                f"module {module_name!r} has no attribute {name!r} "
                f"(nor has {source.__name__!r})") from None
        if not passes_through(obj):
            obj = lifting(obj, seq.get(name, ()), on_tensors.get(name))
        table[name] = obj
        return obj
    return __getattr__
