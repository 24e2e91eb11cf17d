"""Binds the ops to ``Tensor``: operators, NumPy-named methods, in-place
updates, and the NumPy protocol (``__array_ufunc__``, ``__array_function__``)
that makes plain NumPy code (``np.sin(t)``, ``X @ t``) record unchanged.
"""
import numpy as np

from ..tape import current
from ..tensor import Tensor, _plain
from . import composite as K
from . import elementwise as E
from . import linalg as L
from . import reductions as Rd
from . import shape as S
from .numpy_api import HANDLED_FUNCTIONS, PLAIN_UFUNCS, REDUCE_UFUNCS, UFUNCS, unsupported


def _swap(fn):
    return lambda self, other: fn(other, self)


_OPERATORS = {
    "__add__": E.add, "__radd__": _swap(E.add),
    "__sub__": E.subtract, "__rsub__": _swap(E.subtract),
    "__mul__": E.multiply, "__rmul__": _swap(E.multiply),
    "__truediv__": E.divide, "__rtruediv__": _swap(E.divide),
    "__pow__": E.power, "__rpow__": _swap(E.power),
    "__floordiv__": E.floor_divide, "__rfloordiv__": _swap(E.floor_divide),
    "__mod__": E.remainder, "__rmod__": _swap(E.remainder),
    "__matmul__": L.matmul, "__rmatmul__": _swap(L.matmul),
    "__lt__": E.less, "__le__": E.less_equal, "__gt__": E.greater,
    "__ge__": E.greater_equal, "__eq__": E.equal, "__ne__": E.not_equal,
}
for _name, _fn in _OPERATORS.items():
    setattr(Tensor, _name, _fn)
Tensor.__neg__ = E.negative
Tensor.__pos__ = E.positive
Tensor.__abs__ = E.absolute
Tensor.__hash__ = object.__hash__   # __eq__ is elementwise, identity hashes
Tensor.__getitem__ = S.getitem


def _inplace(fn):
    """``t op= other``: a functional update of a tensor in a graph, or an
    in-place update of a leaf's value when no graph records it."""
    def method(self, other):
        if self._requires_grad and current().enabled:
            if self._tok is None:
                raise RuntimeError(
                    "a leaf tensor that requires grad is being used in an in-place "
                    "operation; update it under `with tg.no_grad():` or write "
                    "x = x + ... to make a new tensor")
            _become(self, fn(self, other))
            return self
        new = fn(_plain(self._data), other._data if isinstance(other, Tensor) else other)
        _set_value(self, new._data)
        return self
    return method


_UNSET = object()


def _become(self, new):
    """Let ``self`` take ``new``'s place on the tape (and new take self's).

    ``self`` may have been a plain leaf (``out[i] = x`` with x requiring
    grad): it becomes the non-leaf result.
    """
    for slot in ("_data", "_requires_grad", "_tok", "_rec"):
        a, b = getattr(self, slot, _UNSET), getattr(new, slot, _UNSET)
        for obj, val in ((self, b), (new, a)):
            if val is _UNSET:
                try:
                    delattr(obj, slot)
                except AttributeError:
                    pass
            else:
                setattr(obj, slot, val)


def _set_value(self, value):
    value = np.asarray(value)
    if value.shape != self.shape:
        raise ValueError(f"in-place update would change the shape from {self.shape} "
                         f"to {value.shape}")
    if not np.can_cast(value.dtype, self.dtype, "same_kind"):
        raise TypeError(f"in-place update cannot cast {value.dtype} to the tensor's "
                        f"{self.dtype} (same_kind casting, as NumPy); write x = x + ...")
    value = value.astype(self.dtype, copy=False)
    self._ltok = None  # a leaf's LEAF record holds the old value: make a new one
    old = self._data
    if isinstance(old, np.ndarray) and old.flags.writeable:
        old[...] = value
    else:  # a graph holds the old value read-only: copy on write
        self._data = value.copy() if value.ndim else value[()]


for _name, _fn in (("__iadd__", E.add), ("__isub__", E.subtract),
                   ("__imul__", E.multiply), ("__itruediv__", E.divide),
                   ("__ipow__", E.power)):
    setattr(Tensor, _name, _inplace(_fn))


def _setitem(self, key, value):
    """``t[key] = value``: in a graph, a functional update that takes t's place
    (gradients reach t's old contents outside key and value inside it)."""
    recording = current().enabled
    if recording and self._requires_grad and self._tok is None:
        raise RuntimeError(
            "item assignment into a leaf tensor that requires grad is not allowed "
            "(as in PyTorch); assign into a copy (y = x * 1.0; y[i] = v) or under "
            "`with tg.no_grad():`")
    if recording and (self._requires_grad
                      or (isinstance(value, Tensor) and value._requires_grad)):
        _become(self, S.index_put(self, key, value))
        return
    new = np.array(self._data, copy=True)
    new[S._index_key(key)] = value._data if isinstance(value, Tensor) else value
    _set_value(self, new)


Tensor.__setitem__ = _setitem


def _iter(self):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    if self._requires_grad:
        return iter(S.unbind(self, 0))
    return iter([_plain(d) for d in self._data])


Tensor.__iter__ = _iter

# NumPy-named methods
_METHODS = {
    "sum": Rd.sum, "mean": Rd.mean, "prod": Rd.prod, "max": Rd.max, "min": Rd.min,
    "reshape": S.reshape, "ravel": S.ravel, "flatten": S.ravel,
    "transpose": lambda self, *axes: S.transpose(
        self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None)),
    "swapaxes": S.swapaxes, "squeeze": S.squeeze, "clip": E.clip, "dot": L.dot,
    "astype": S.astype,
    "exp": E.exp, "log": E.log, "sqrt": E.sqrt, "sin": E.sin, "cos": E.cos,
    "tanh": E.tanh, "abs": E.absolute, "unbind": S.unbind, "split": S.split,
    "var": K.var, "std": K.std, "ptp": K.ptp, "trace": K.trace, "repeat": S.repeat,
    "take": S.take, "diagonal": S.diagonal, "cumsum": Rd.cumsum, "cumprod": Rd.cumprod,
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(lambda self: S.transpose(self))


# -- NumPy protocol ---------------------------------------------------------------
def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    out = kwargs.pop("out", None)
    if out is not None:
        raise TypeError(
            f"numpy.{ufunc.__name__}(..., out=...) cannot write into arrays when "
            "tensors are involved (a recorded value must not change); drop out= "
            "and use the returned tensor")
    if kwargs.get("where", True) is not True:
        raise TypeError(
            f"numpy.{ufunc.__name__}(..., where=...) is not supported on tensors; "
            "use tg.where(mask, numpy.{0}(x), fallback)".format(ufunc.__name__))
    kwargs.pop("where", None)
    dtype = kwargs.pop("dtype", None)
    if method == "__call__" and ufunc in PLAIN_UFUNCS:
        return PLAIN_UFUNCS[ufunc](*inputs, dtype=dtype, **kwargs)
    if method == "reduce" and ufunc in REDUCE_UFUNCS:
        axis = kwargs.pop("axis", 0)  # ufunc.reduce's default, unlike np.sum's
        keepdims = kwargs.pop("keepdims", False)
    if kwargs:
        raise TypeError(f"numpy.{ufunc.__name__}: keyword(s) {sorted(kwargs)} are not "
                        "supported on tensors")
    if dtype is not None:
        inputs = tuple(S.astype(x, dtype) if isinstance(x, Tensor) else x for x in inputs)
    if method == "__call__":
        fn = UFUNCS.get(ufunc)
        if fn is not None:
            return fn(*inputs)
    elif method == "reduce":
        fn = REDUCE_UFUNCS.get(ufunc)
        if fn is not None:
            return fn(*inputs, axis=axis, keepdims=keepdims)
    return unsupported(f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"),
                       inputs)


def _array_function(self, func, types, args, kwargs):
    fn = HANDLED_FUNCTIONS.get(func)
    if fn is None:
        module = getattr(func, "__module__", None) or "numpy"
        return unsupported(f"{module}.{func.__name__}", args)
    return fn(*args, **kwargs)


Tensor.__array_ufunc__ = _array_ufunc
Tensor.__array_function__ = _array_function
