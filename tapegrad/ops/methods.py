"""Binds the ops to ``Tensor``: operators, NumPy-named methods, in-place
updates, and the NumPy protocol (``__array_ufunc__``, ``__array_function__``)
that makes plain NumPy code (``np.sin(t)``, ``X @ t``) record unchanged.
"""
import numpy as np

from ..core.grad_mode import enable_grad
from ..kernels._views import SMALL
from ..core.tape import NO_TAPE, Tape as _Tape, _local, current
from ..core.tensor import Tensor, _owner, _plain, bound
from . import composite as K
from . import elementwise as E
from . import matrix as L
from . import reductions as Rd
from . import shape as S
from . import views as V
from . import exp_memo, view_writes
from . import ufunc_methods as UM
from . import ndarray_methods as NM
from . import complex_tensor as Z
from ..core.registry import BY_NAME
from .numpy_api import (HANDLED_FUNCTIONS, PLAIN_UFUNCS, REDUCE_UFUNCS, UFUNCS, special_ufunc,
                        ufunc_name, unsupported)


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


def _or_complex(name, fn):
    """Operator ``name``: a complex operand (a ComplexTensor, a complex number or
    array) makes it the complex op of ops/complex_tensor.py."""
    cfn = Z.tensor_operator(name)
    if cfn is None:
        return fn
    is_complex = Z.is_complex

    def op(self, other):
        if is_complex(other):
            return cfn(self, other)
        return fn(self, other)
    op.__name__ = op.__qualname__ = name
    return op


#: operator -> the binary op its fast path is (``c op self`` for the reflected ones)
_FAST = {"__add__": E.add, "__sub__": E.subtract, "__mul__": E.multiply,
         "__truediv__": E.divide, "__pow__": E.power, "__floordiv__": E.floor_divide,
         "__mod__": E.remainder}
_REFLECTED = {"__radd__": E.add, "__rsub__": E.subtract, "__rmul__": E.multiply,
              "__rtruediv__": E.divide, "__rpow__": E.power}


def _operator(name, fn):
    """Tensor operator ``name``: the elementwise op's fast paths first (their
    operands, tensors and Python floats and ints, are never complex), then
    the complex-aware operator ``_or_complex`` makes."""
    general = _or_complex(name, fn)
    if name in _FAST:
        code, forward, left, _, negate = E.BINARY_FAST[_FAST[name]]
        op = E._binary_op(code, forward, left, negate, general)
    elif name in _REFLECTED and E.BINARY_FAST[_REFLECTED[name]][3]:
        _, forward, _, right, _ = E.BINARY_FAST[_REFLECTED[name]]
        op = E._reflected_op(forward, right, general)
    else:
        return general
    op.__name__, op.__qualname__ = general.__name__, general.__qualname__
    return op


for _name, _fn in _OPERATORS.items():
    setattr(Tensor, _name, _operator(_name, _fn))
Tensor.__neg__ = E.negative
Tensor.__pos__ = E.positive
Tensor.__abs__ = E.absolute
Tensor.__hash__ = object.__hash__   # __eq__ is elementwise, identity hashes
Tensor.__getitem__ = S.getitem


def _inplace(fn):
    """``t op= other``: a functional update of a tensor in a graph, or an
    in-place update of a leaf's value when no graph records it.  A tensor
    that does not require grad updated with one that does joins the graph
    (as in PyTorch, and as ``t[k] = v`` does)."""
    def method(self, other):
        if (self._requires_grad or (isinstance(other, Tensor) and other._requires_grad)) \
                and current().enabled:
            if self._requires_grad and self._tok is None:
                raise RuntimeError(
                    "a leaf tensor that requires grad is being used in an in-place "
                    "operation; update it under `with tg.no_grad():` or write "
                    "x = x + ... to make a new tensor")
            _record_write(self, lambda: fn(self, other))
            return self
        new = fn(_plain(self._data), other._data if isinstance(other, Tensor) else other)
        _set_value(self, new._data)
        return self
    return method


_UNSET = object()


def _record_write(self, compute):
    """A recorded in-place write: self takes the value ``compute()`` makes;
    through a view, the write reaches its bases (tapegrad/ops/views.py)."""
    if getattr(self, "_vw", None) is None:
        _become(self, compute())
    else:
        V.check_writable(self)
        view_writes.write(self, compute(), _become)
    view_writes.retake(self, skip=None)   # the views taken of self see its new value


def _become(self, new):
    """Let ``self`` take ``new``'s place on the tape (and new take self's).

    ``self`` may have been a plain leaf (``out[i] = x`` with x requiring
    grad): it becomes the non-leaf result.  A 0-d array stays one (NumPy
    writes it in place; its views keep sharing it), where the op gave a
    NumPy scalar.
    """
    if type(getattr(self, "_data", None)) is np.ndarray and type(new._data) is not np.ndarray \
            and not getattr(self, "_scalar", False):
        new._data = np.array(new._data)
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


def _held(o):
    """Whether a graph on this thread that can still be differentiated
    recorded tensor o's value (its LEAF record, or its own record)."""
    tape = _local.__dict__.get("tape")
    if tape is None:
        return False
    if o._tok is not None:
        # (a record a backward spent saved nothing: no VJP reads its value)
        return tape.is_live(o._tok) and not (tape.all_freed or tape.freed[o._rec]
                                           or tape.spent[o._rec])
    return o._requires_grad and o._ltok is tape.lkey and not tape.all_freed


def _written(o, what):
    """Mark the records that saved o's value stale (see Tape.wrote), and let
    o's next use record its new value; the same for every live view taken of
    o, which is taken again from o's new value (a graph recorded before the
    write that saved a view's value raises at backward, as in PyTorch; one
    recorded after reads the new value)."""
    tape = _local.__dict__.get("tape")
    if tape is None:
        return
    if tape.is_live(o._tok):
        tape.stale[o._rec] = what
        if not tape.freed[o._rec]:
            # a tensor made by an op keeps its graph (as a leaf keeps being the
            # leaf): an identity record, recorded under no_grad too, holds the
            # new value for the ops that use it from now on
            with enable_grad():
                fresh = E.positive(o)
            o._tok, o._rec = fresh._tok, fresh._rec
    elif o._tok is None and o._ltok is tape.lkey:
        tape.stale[o._lrec] = what
    o._ltok = None
    view_writes.retake(o, None, (tape, what))


def exposed(t):
    """``t.numpy()``: t's own array, read-only while a graph holds the value.

    A 0-d value is kept as a NumPy scalar, which nothing can write into; the
    first ``numpy()`` gives the tensor a 0-d array instead, so writes into
    the result reach it as they do for every other shape.
    """
    o = _owner(t)
    d = o._data
    fresh = type(d) is not np.ndarray
    if fresh:  # memory to share with the result; still a scalar to view ops
        d = o._data = np.array(d)
        o._scalar = t._scalar = True
    t._data = d
    # a leaf's array is made read-only when a graph records it, and given
    # back when the last graph that reads it is freed (core/tape.py); a new 0-d
    # array or a non-leaf's value is protected here
    if d.flags.writeable and (fresh or o._tok is not None) and _held(o):
        d.flags.writeable = False
        (o._tok.tape if o._tok is not None and o._tok.tape is not None
         else current()).flipped.append(d)
    return d


def _set_value(self, value):
    """Write ``value`` into self's value in place (no graph records it).

    The write reaches the tensor that owns the value and every alias of it
    (``detach()``, ``.data``, ``numpy()``).  A value the tape holds read-only
    is written all the same, and the records that saved it are marked stale:
    a backward that needs them raises PyTorch's in-place error.
    """
    o = _owner(self)
    V.check_read_only(o)
    value = np.asarray(value)
    if value.shape != o.shape:
        raise ValueError(f"in-place update would change the shape from {o.shape} "
                         f"to {value.shape}")
    if not np.can_cast(value.dtype, o.dtype, "same_kind"):
        raise TypeError(f"in-place update cannot cast {value.dtype} to the tensor's "
                        f"{o.dtype} (same_kind casting, as NumPy); write x = x + ...")
    value = value.astype(o.dtype, copy=False)
    what = f"a tensor of shape {o.shape} and dtype {o.dtype}"
    old = o._data
    exp_memo.forget()  # its exponentials may be of this value
    tape = _local.__dict__.get("tape")
    noted = isinstance(old, np.ndarray) and tape is not None and tape.wrote(old, what)
    if isinstance(old, np.ndarray) and old.flags.writeable:
        old[...] = value
    elif noted:
        old.flags.writeable = True  # the tape's own flag: the write is noted
        old[...] = value
        old.flags.writeable = False
    elif getattr(o, "_vw", None) is not None:  # a view: write into its base
        base, key = o._vw
        whole = np.array(base._data, copy=True)
        V.array_of(whole, key)[...] = value
        _set_value(base, whole)   # takes o (a live view of base) again
        o._data = V.array_of(base._data, key)
    else:  # a scalar, or read-only for a reason of its own: copy on write
        o._data = value.copy() if value.ndim else value[()]
    _written(o, what)
    self._data = o._data


def replace_value(t, value):
    """``t.data = value``: t takes ``value`` as its value (any shape), sharing
    a tensor's memory as PyTorch does, copying anything else."""
    o = _owner(t)
    if isinstance(value, Tensor):
        if _owner(value) is o:  # ``p.data -= x`` assigns p's own value back
            t._data = o._data
            return
        v = value._data
    else:
        try:
            v = np.array(value)
        except ValueError as e:
            raise TypeError(f".data = ...: the value is not a rectangular array: {e}") from None
    if np.asarray(v).dtype.kind not in "biuf":
        raise TypeError(f".data = ...: the value must be real numbers, got dtype "
                        f"{np.asarray(v).dtype}")
    if o._requires_grad and np.asarray(v).dtype.kind != "f":
        raise TypeError(f".data = ...: a tensor that requires grad needs a floating value, "
                        f"got dtype {np.asarray(v).dtype}; convert it with .astype(float)")
    _written(o, f"a tensor of shape {o.shape} and dtype {o.dtype}")
    o._data = v if np.ndim(v) else np.asarray(v)[()]
    t._data = o._data


for _name, _fn in (("__iadd__", E.add), ("__isub__", E.subtract),
                   ("__imul__", E.multiply), ("__itruediv__", E.divide),
                   ("__ipow__", E.power)):
    setattr(Tensor, _name, _inplace(_fn))


# PyTorch's in-place methods: the same rules as ``t += v`` (recorded in a
# graph, refused on a leaf that requires grad, a value write elsewhere)
def _scaled(other, alpha):
    return other if alpha == 1 else E.multiply(other, alpha)


def _assigned(a, value):
    """``value`` broadcast to a's shape in a's dtype, as ``a.copy_(value)``
    writes it: where(True, value, a) gives a's old value no gradient and
    value its own."""
    keep = np.ones(a.shape, dtype=bool)
    if not isinstance(value, Tensor):
        value = np.asarray(value).astype(a.dtype)
    return E.where(keep, value, a)


_IADD, _ISUB, _IMUL, _IDIV, _IPOW = (Tensor.__iadd__, Tensor.__isub__, Tensor.__imul__,
                                     Tensor.__itruediv__, Tensor.__ipow__)
_ASSIGN = _inplace(_assigned)


def add_(self, other, *, alpha=1):
    """``self += alpha * other`` in place (PyTorch's ``add_``), recorded as ``+=`` is."""
    return _IADD(self, _scaled(other, alpha))


def sub_(self, other, *, alpha=1):
    """``self -= alpha * other`` in place."""
    return _ISUB(self, _scaled(other, alpha))


def mul_(self, other):
    """``self *= other`` in place."""
    return _IMUL(self, other)


def div_(self, other):
    """``self /= other`` in place."""
    return _IDIV(self, other)


def pow_(self, other):
    """``self **= other`` in place."""
    return _IPOW(self, other)


def copy_(self, src):
    """Write ``src`` (broadcast, cast to self's dtype) into self in place;
    in a graph the gradient reaches ``src``, not self's old value."""
    return _ASSIGN(self, src)


def fill_(self, value):
    """Fill self with ``value`` in place."""
    return _ASSIGN(self, value)


def zero_(self):
    """Fill self with zeros in place (``t.grad.zero_()``, resets under no_grad).

    Examples
    --------
    >>> import tapegrad as tg
    >>> t = tg.tensor([1.0, 2.0])
    >>> t.zero_()
    tensor([0.0, 0.0])
    """
    return _ASSIGN(self, 0)


def clone(self):
    """A copy of the value that keeps the graph (PyTorch's ``clone``): the
    gradient flows back to self.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0], requires_grad=True)
    >>> y = x.clone()
    >>> y.sum().backward()
    >>> x.grad
    tensor([1.0])
    """
    if self._requires_grad and current().enabled:
        return E.positive(self)
    return _plain(np.array(self._data, copy=True) if np.ndim(self._data) else self._data)


def copy(self, order="C"):
    """``ndarray.copy`` / ``numpy.copy``: a C-ordered copy of the value, never
    a view, through which the gradient flows back to self (as ``clone``).

    Examples
    --------
    >>> import tapegrad as tg
    >>> a = tg.tensor([1.0, 2.0])
    >>> b = a.copy()
    >>> b[0] = 5.0
    >>> a
    tensor([1.0, 2.0])
    """
    if order not in ("C", "K", "A"):
        raise NotImplementedError(f"Tensor.copy supports order='C' only, got {order!r}")
    out = clone(self)
    if type(out._data) is np.ndarray and not out._data.flags.c_contiguous:
        out._data = np.ascontiguousarray(out._data)
    return out


for _fn in (add_, sub_, mul_, div_, pow_, copy_, fill_, zero_, clone, copy):
    setattr(Tensor, _fn.__name__, _fn)


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
        _record_write(self, lambda: S.index_put(self, key, value))
        return
    new = np.array(self._data, copy=True)
    new[S._index_key(key)] = value._data if isinstance(value, Tensor) else value
    _set_value(self, new)


Tensor.__setitem__ = _setitem


def _iter(self):
    """``for row in t``: NumPy's ``t[i]`` one after the other (views of t,
    scalars of a 1-d tensor)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(S.unbind(self, 0))


Tensor.__iter__ = _iter

_SUM = BY_NAME["Sum"].code
_AXES = tuple(tuple(range(n)) for n in range(8))


def _sum(self, axis=None, keepdims=False, where=None, initial=None):
    """``t.sum(...)``: :func:`tapegrad.sum` of the tensor.

    Fast path: the full sum of a non-leaf of the live epoch with 2 to SMALL
    elements (``(e * e).sum()`` in a loop), written inline as reductions'
    ``_reduce`` writes it: one Sum record without parameters, its value
    ``np.add.reduce`` over every axis (which ``np.sum`` calls for an
    ndarray).  A plain Tape only, as for every fast path.
    """
    if axis is None and keepdims is False and where is None and initial is None \
            and type(self) is Tensor:
        d = self._data
        try:
            tape = _local.tape
        except AttributeError:
            tape = NO_TAPE
        tok = self._tok
        r = tape.n
        if (tok is not None and tok.tape is tape and r < tape.room and type(tape) is _Tape and type(d) is np.ndarray
                and 1 < d.size <= SMALL and d.ndim < 8):
            data = np.add.reduce(d, _AXES[d.ndim], None, None, keepdims=False)
            na = tape.na
            try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
                tape.w_op[r] = _SUM
                tape.w_arg0[r] = na
                tape.w_args[na] = self._rec
                tape.na = na + 1
                tape.w_v1[r] = data  # size is 1 by default
                tape.n = r + 1
            except BaseException:
                tape.abandon(r, na)
                raise
            t = Tensor()
            t._data = data
            t._requires_grad = True
            t._tok = tok
            t._rec = r
            return t
    return Rd.sum(self, axis, keepdims, where, initial)


# NumPy-named methods
_METHODS = {
    "sum": _sum, "mean": Rd.mean, "prod": Rd.prod, "max": Rd.max, "min": Rd.min,
    "reshape": S.reshape, "ravel": S.ravel, "flatten": S.flatten,
    "transpose": lambda self, *axes: S.transpose(
        self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else (axes or None)),
    "swapaxes": S.swapaxes, "squeeze": S.squeeze, "clip": K.clip, "dot": K.dot,
    "astype": S.astype,
    "exp": E.exp, "log": E.log, "sqrt": E.sqrt, "sin": E.sin, "cos": E.cos,
    "tanh": E.tanh, "abs": E.absolute, "unbind": S.unbind, "split": S.split,
    "var": K.var, "std": K.std, "ptp": K.ptp, "trace": K.trace, "repeat": S.repeat,
    "take": S.take, "diagonal": S.diagonal, "cumsum": Rd.cumsum, "cumprod": Rd.cumprod,
}
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(lambda self: S.transpose(self))
# argmax, argsort, all, nonzero, round, the in-place sort and fill, flat,
# real, imag, conj: ops/ndarray_methods.py
for _name, _fn in {**NM.METHODS, **NM.PROPERTIES}.items():
    setattr(Tensor, _name, _fn)
NM._assign[0] = _ASSIGN


# -- NumPy protocol ---------------------------------------------------------------
def _real(x):
    """Whether x is an operand no complex op claims (a Tensor, a Python float or
    int, a real ndarray): the cheap half of ``not Z.is_complex(x)``."""
    t = type(x)
    return t is Tensor or t is float or t is int or (t is np.ndarray and x.dtype.kind in "fiub")


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    # np.sin(t), np.add(a, t), array - t: a plain call of a differentiable ufunc
    # on real operands is the op itself (what the checks below come to)
    if not kwargs and method == "__call__":
        fn = UFUNCS.get(ufunc)
        if fn is not None and (_real(inputs[0]) if len(inputs) == 1 else
                               len(inputs) == 2 and _real(inputs[0]) and _real(inputs[1])):
            return fn(*inputs)
    if method != "__call__":
        # reduce, accumulate, outer, at: ops/ufunc_methods.py
        got = UM.method(ufunc, ufunc_name(ufunc), UFUNCS.get(ufunc) or special_ufunc(ufunc),
                        REDUCE_UFUNCS.get(ufunc), method, inputs, kwargs)
        if got is not NotImplemented:
            return got
        return unsupported(f"{ufunc_name(ufunc)}.{method}", inputs)
    out = kwargs.pop("out", None)
    if out is not None:
        raise TypeError(
            f"{ufunc_name(ufunc)}(..., out=...) cannot write into arrays when "
            "tensors are involved (a recorded value must not change); drop out= "
            "and use the returned tensor")
    if kwargs.get("where", True) is not True:
        raise TypeError(
            f"{ufunc_name(ufunc)}(..., where=...) is not supported on tensors; "
            f"use tg.where(mask, {ufunc_name(ufunc)}(x), fallback)")
    kwargs.pop("where", None)
    dtype = kwargs.pop("dtype", None)
    if method == "__call__" and ufunc in PLAIN_UFUNCS:
        return PLAIN_UFUNCS[ufunc](*inputs, dtype=dtype, **kwargs)
    if kwargs:
        raise TypeError(f"{ufunc_name(ufunc)}: keyword(s) {sorted(kwargs)} are not "
                        "supported on tensors")
    if dtype is not None:
        inputs = tuple(S.astype(x, dtype) if isinstance(x, Tensor) else x for x in inputs)
    if method == "__call__" and any(map(Z.is_complex, inputs)):
        return Z.ComplexTensor.__array_ufunc__(None, ufunc, method, *inputs)
    fn = UFUNCS.get(ufunc) or special_ufunc(ufunc)
    if fn is not None:
        return fn(*inputs)
    return unsupported(ufunc_name(ufunc), inputs)


def _has_complex(args, kwargs):
    """Whether a (top-level or listed) argument is a complex array or number."""
    is_complex = Z.is_complex
    for a in args:
        if isinstance(a, (list, tuple)):
            if any(map(is_complex, a)):
                return True
        elif is_complex(a):
            return True
    return bool(kwargs) and any(map(is_complex, kwargs.values()))


_NP_STACK = np.stack


def _array_function(self, func, types, args, kwargs):
    if func is _NP_STACK and len(args) == 1 and not kwargs:
        # np.stack of tensors alone (never complex ones): its fast path first
        out = S.stack_fast(args[0])
        if out is not None:
            return out
    if Z.ComplexTensor in types:
        return NotImplemented  # NumPy asks ComplexTensor's handler next
    # a real tensor with a complex array or number (np.dot(t, c), np.einsum(...,
    # t, c), np.concatenate([t, c])): the complex op of the parts
    zfn = Z.FUNCTIONS.get(func)
    if zfn is not None and _has_complex(args, kwargs):
        return zfn(*args, **kwargs)
    fn = HANDLED_FUNCTIONS.get(func)
    if fn is None:
        module = getattr(func, "__module__", None) or "numpy"
        return unsupported(f"{module}.{func.__name__}", args)
    return fn(*args, **kwargs)


Tensor.__array_ufunc__ = _array_ufunc
Tensor.__array_function__ = _array_function


# Tensor.data = v and Tensor.numpy() write and expose values through these
bound.bind(replace_value=replace_value, exposed=exposed)
