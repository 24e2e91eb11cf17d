"""Reductions over axes: sum, mean, prod, max, min, logsumexp.

Each output element is tied to the input elements it reduces by the same
broadcast-index rule the elementwise kernels use, so one kernel family
covers every axis combination and ``keepdims``.
"""
import builtins
import operator

import numpy as np

from ..kernels import codes as C
from ..core.tape import current, matrix_operand
from ..core.tensor import Tensor, _node, _plain, _result
from .elementwise import _bstrides
from .exp_memo import recall, remember
from ..core.registry import register


#: the reductions that are ufunc reduces in NumPy: of a 0-d array they take
#: an int axis of 0 or -1 (``np.sum(np.array(2.0), axis=0)`` is 2.0), where
#: ``np.mean`` and a tuple of axes raise
_ZERO_D_AXIS = frozenset({"sum", "prod", "max", "min"})


def normalize_axis(axis, ndim, fname):
    """A sorted tuple of non-negative axes, with NumPy's errors made clearer."""
    if axis is None:
        return tuple(range(ndim))
    if ndim == 0:
        return _zero_d_axis(axis, fname)
    axes = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in axes:
        try:
            a = operator.index(a)
        except TypeError:
            raise TypeError(f"{fname}: axis must be an int or a tuple of ints, "
                            f"got {axis!r}") from None
        if not -ndim <= a < builtins.max(ndim, 1):
            raise np.exceptions.AxisError(
                f"{fname}: axis {a} is out of bounds for a tensor of dimension {ndim}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{fname}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def _zero_d_axis(axis, fname):
    """``normalize_axis`` of a 0-d operand: NumPy's rules (see ``_ZERO_D_AXIS``)."""
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        try:
            operator.index(a)
        except TypeError:
            raise TypeError(f"{fname}: axis must be an int or a tuple of ints, "
                            f"got {axis!r}") from None
    if isinstance(axis, tuple):
        if not axis:
            return ()
        bad = axis[0]
    elif fname in _ZERO_D_AXIS and operator.index(axis) in (0, -1):
        return ()
    else:
        bad = axis
    hint = (" (as NumPy's, which takes axis=0 or -1 of a 0-d array only as an int)"
            if fname in _ZERO_D_AXIS else
            "; of a 0-d tensor pass axis=None or axis=()")
    raise np.exceptions.AxisError(
        f"{fname}: axis {bad} is out of bounds for a tensor of dimension 0{hint}")


def _reduce(code, fname, fn, x, axis, keepdims):
    if not isinstance(x, Tensor):
        if isinstance(x, np.matrix):  # its reductions take no keepdims=
            raise matrix_operand(x)
        return fn(x, axis=axis, keepdims=keepdims)
    xd = x._data
    shape = np.shape(xd)
    axes = normalize_axis(axis, len(shape), fname)
    data = fn(xd, axis=axes, keepdims=keepdims)
    if not x._requires_grad:
        return _plain(data)
    tape = current()
    if not tape.enabled:
        return _plain(data)
    if np.size(data) == 1:
        p = None  # the kernel's full-reduction path needs no parameters
    else:
        kshape = tuple(1 if d in axes else n for d, n in enumerate(shape))
        p = (len(shape), *shape, *_bstrides(kshape, shape))
    return _result(tape, tape.record(code, (_node(tape, x),), data, p, inputs=(xd,)), data)


def _with_initial(op, pyname, a, axis, keepdims, where, initial):
    """NumPy's ``initial=``: one more element in every reduction."""
    from . import elementwise as E
    out = op(a, axis=axis, keepdims=keepdims, where=where)
    combine = {"sum": E.add, "prod": E.multiply, "max": E.maximum, "min": E.minimum}
    if pyname not in combine:
        raise TypeError(f"{pyname}: initial= is not supported")
    return combine[pyname](out, initial)


def _masked(op, pyname, a, axis, keepdims, where):
    """A reduction over the elements where ``where`` holds."""
    from .elementwise import where as select_where
    mask = np.asarray(where._data if isinstance(where, Tensor) else where, dtype=bool)
    if pyname == "mean":
        from .guarded import on_values  # in a trace: guarded if the mask is traced
        count = on_values(lambda m: np.sum(np.broadcast_to(m, np.shape(a)), axis=axis,
                                           keepdims=keepdims), where)
        return sum(select_where(mask, a, 0.0), axis=axis, keepdims=keepdims) / count
    if pyname not in _NEUTRAL:
        raise TypeError(f"{pyname}: where= is not supported")
    return op(select_where(mask, a, _NEUTRAL[pyname]), axis=axis, keepdims=keepdims)


def _shifted_exp(a, axis):
    """``(exp(a - m), m)`` with m the finite part of the maxima over ``axis``:
    the stable core of logsumexp and softmax, in two passes over a and one
    array (exp runs in place)."""
    m = np.max(a, axis=axis, keepdims=True)
    if not np.isfinite(m).all():  # rows of -inf (or inf, nan) shift by 0
        m = np.where(np.isfinite(m), m, 0)
    e = np.asarray(np.subtract(a, m, dtype=np.result_type(a, np.float32)))
    return np.exp(e, out=e), m


def _logsumexp(a, axis=None, keepdims=False):
    e, m = _shifted_exp(a, axis)
    s = np.sum(e, axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        out = np.log(s) + m  # s is reduced: small
    return out if keepdims else np.squeeze(out, axis=axis)


#: what a masked-out element contributes (NumPy's ``where=`` of reductions)
_NEUTRAL = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}


def _def_reduce(name, sub, fn, pyname):
    code = register(name, C.K_REDUCE, sub, fn)

    def op(a, axis=None, keepdims=False, where=None, initial=None):
        if initial is not None:
            return _with_initial(op, pyname, a, axis, keepdims, where, initial)
        if where is not None:
            return _masked(op, pyname, a, axis, keepdims, where)
        return _reduce(code, pyname, fn, a, axis, keepdims)
    op.__name__ = op.__qualname__ = pyname
    return op


sum = _def_reduce("Sum", C.SUM, np.sum, "sum")  # noqa: A001
mean = _def_reduce("Mean", C.MEAN, np.mean, "mean")
prod = _def_reduce("Prod", C.PROD, np.prod, "prod")
max = _def_reduce("Max", C.MAX, np.max, "max")  # noqa: A001
min = _def_reduce("Min", C.MIN, np.min, "min")  # noqa: A001
_logsumexp_record = _def_reduce("Logsumexp", C.LOGSUMEXP, _logsumexp, "logsumexp")
amax, amin = max, min

#: from this many elements on, a differentiated logsumexp is recorded as its
#: parts: the one record's VJP computes ``exp`` again per element in compiled
#: code (libm's scalar exp, about five times NumPy's vectorised one here);
#: the parts' VJPs reuse the ``exp(a - m)`` the forward computed
COMPOSITE_LOGSUMEXP_MIN = 4096


def logsumexp(a, axis=None, keepdims=False, where=None, initial=None):
    if (isinstance(a, Tensor) and a._requires_grad and where is None and initial is None
            and np.size(a._data) >= COMPOSITE_LOGSUMEXP_MIN):
        tape = current()
        if tape.enabled:
            return _logsumexp_parts(a, axis, keepdims, in_place=not tape.tracing)
    return _logsumexp_record(a, axis=axis, keepdims=keepdims, where=where, initial=initial)


_EXP = C.code(C.K_UNARY, C.EXP)


def _exp_in_place(d):
    return np.exp(d, out=d)


def _logsumexp_parts(a, axis, keepdims, in_place):
    """``log(sum(exp(a - m))) + m`` with the maxima ``m`` a constant: the same
    operations, in the same order, as the one-record forward (equal values),
    recorded as an exp, a sum and a log."""
    from . import elementwise as E
    from .shape import reshape
    xd = a._data
    axes = normalize_axis(axis, np.ndim(xd), "logsumexp")
    m = np.max(xd, axis=axes, keepdims=True)
    if not np.isfinite(m).all():  # rows of -inf (or inf, nan) shift by 0
        m = np.where(np.isfinite(m), m, 0)
    d = E.subtract(a, m)
    if in_place:
        # exp into d's memory, as the one-record forward does (a fresh 8 MB
        # array costs its page faults): nothing reads d's value -- the
        # subtraction's VJP does not, and a tape keeps no value no VJP reads
        # unless it is tracing (a trace's tape keeps every value: d stays)
        e = E._unary(_EXP, _exp_in_place, d)
    else:
        e = E.exp(d)
    s = sum(e, axis=axes, keepdims=True)
    tape = current()
    remember(tape, a, _node(tape, a), axes, m, e._data, s._data)
    with np.errstate(divide="ignore"):
        out = E.add(E.log(s), m)
    if keepdims:
        return out
    return reshape(out, tuple(n for d, n in enumerate(np.shape(xd)) if d not in axes))

sum.__doc__ = """Sum over ``axis`` (int, tuple or None), as ``numpy.sum``.

Examples
--------
>>> import tapegrad as tg
>>> tg.sum(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), axis=0)
tensor([4.0, 6.0])
"""
mean.__doc__ = "Mean over ``axis``, as ``numpy.mean``."
prod.__doc__ = ("Product over ``axis``, as ``numpy.prod``; the gradient is the product "
                "of the other elements, exact when some are zero.")
max.__doc__ = ("Maximum over ``axis``, as ``numpy.max``; tied maxima share the "
               "gradient equally.")
min.__doc__ = ("Minimum over ``axis``, as ``numpy.min``; tied minima share the "
               "gradient equally.")
logsumexp.__doc__ = """``log(sum(exp(a)))`` over ``axis``, computed stably (as scipy.special.logsumexp).

Differentiated inputs of :data:`COMPOSITE_LOGSUMEXP_MIN` elements or more
record the exp, sum and log it is made of (``grad_fn`` is the last one's),
so that the backward reuses the forward's exponentials; smaller ones record
one ``Logsumexp`` record.  The values are the same either way.

Examples
--------
>>> import tapegrad as tg
>>> tg.logsumexp(tg.tensor([0.0, 0.0]))
tensor(0.69314718)
"""


_CUMSUM = register("Cumsum", C.K_SCAN, C.CUMSUM, np.cumsum)
_CUMPROD = register("Cumprod", C.K_SCAN, C.CUMPROD, np.cumprod)


def _scan(code, fn, a, axis):
    if not isinstance(a, Tensor):
        return fn(a, axis=axis)
    if isinstance(axis, tuple):
        raise TypeError(f"{fn.__name__}: axis must be an int or None, got {axis!r}")
    if axis is None or np.ndim(a._data) == 0:  # NumPy flattens first (a 0-d one too)
        from .shape import ravel
        a, axis = ravel(a), 0 if axis is None else axis
    xd = a._data
    shape = np.shape(xd)
    (axis,) = normalize_axis(axis, len(shape), fn.__name__)
    data = fn(xd, axis=axis)
    tape = current()
    if not (a._requires_grad and tape.enabled):
        return _plain(data)
    p = (int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:])))
    return _result(tape, tape.record(code, (_node(tape, a),), data, p, inputs=(xd,)), data)


def cumsum(a, axis=None):
    """``numpy.cumsum`` (flattened when ``axis`` is None).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.cumsum(tg.tensor([1.0, 2.0, 3.0]))
    tensor([1.0, 3.0, 6.0])
    """
    return _scan(_CUMSUM, np.cumsum, a, axis)


def cumprod(a, axis=None):
    """``numpy.cumprod``; its gradient is exact when elements are zero."""
    return _scan(_CUMPROD, np.cumprod, a, axis)


_SOFTMAX = register("Softmax", C.K_REDUCE, C.SOFTMAX, None)
_LOG_SOFTMAX = register("LogSoftmax", C.K_REDUCE, C.LOG_SOFTMAX, None)


def _softmax_like(code, x, axis, log):
    xd = x._data if isinstance(x, Tensor) else np.asarray(x)
    shape = np.shape(xd)
    axes = normalize_axis(axis, len(shape), "softmax")
    tape = current()
    memo = (recall(tape, x, axes) if isinstance(x, Tensor) and x._requires_grad
            and tape.enabled else None)
    if memo is not None and memo[1].dtype == np.result_type(xd, np.float32):
        # the logsumexp of x along these axes computed exp(x - m): the same
        # arrays this function's own passes would make
        m, e, s = memo
        with np.errstate(invalid="ignore", divide="ignore"):
            data = xd - (np.log(s) + m) if log else e / s
    elif log:
        data = xd - _logsumexp(xd, axis=axes, keepdims=True)
    else:  # exp(x - m) / sum(exp(x - m)): one exp pass, in place
        data, _ = _shifted_exp(xd, axes)
        with np.errstate(invalid="ignore", divide="ignore"):
            data /= np.sum(data, axis=axes, keepdims=True)
        if np.ndim(xd) == 0:
            data = data[()]
    if not (isinstance(x, Tensor) and x._requires_grad and tape.enabled):
        return _plain(data)
    kshape = tuple(1 if d in axes else n for d, n in enumerate(shape))
    p = (len(shape), *shape, *_bstrides(kshape, shape))
    return _result(tape, tape.record(code, (_node(tape, x),), data, p), data)


def softmax(x, axis=None):
    """``exp(x) / sum(exp(x))`` along ``axis``, stably (as scipy.special.softmax).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.softmax(tg.tensor([1.0, 1.0]))
    tensor([0.5, 0.5])
    """
    return _softmax_like(_SOFTMAX, x, axis, log=False)


def log_softmax(x, axis=None):
    """``x - logsumexp(x)`` along ``axis`` (as scipy.special.log_softmax).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.log_softmax(tg.tensor([0.0, 0.0]))
    tensor([-0.69314718, -0.69314718])
    """
    return _softmax_like(_LOG_SOFTMAX, x, axis, log=True)
