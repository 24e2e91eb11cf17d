"""Elementwise ops: unary functions, arithmetic with broadcasting, where.

Each op is one ``register`` row; the VJP is the kernel family's branch for
its sub code (:mod:`tapegrad.kernels.elementwise_vjp`).
"""
import functools
import numbers
import operator

import numpy as np

from ..kernels import codes as C
from ..kernels import formulas
from ..kernels._views import SMALL as _SMALL
from ..kernels.special_arrays import values_into
from ..core.tape import (NO_TAPE, Tape as _Tape, _local as _tls, current, masked, masked_operand,
                    matrix_operand)
from ..core.tensor import Tensor, _node, _plain, _result
from ..core.registry import register

_SCALARS = (numbers.Real, np.floating, np.integer)
_SUB_CODE = C.code(C.K_NARY, C.SUB)
_F64 = np.float64  # 0-d results of float64 ops: NumPy scalars of this type
_ND = np.ndarray


# -- unary -------------------------------------------------------------------
def _unary(code, fn, x):
    if type(x) is not Tensor and not isinstance(x, Tensor):
        return fn(x)  # plain NumPy: nothing to record
    data = fn(x._data)
    if x._requires_grad:
        tape = current()
        if tape.enabled:
            r = tape.record1(code, _node(tape, x), data, inputs=(x._data,))
            return _result(tape, r, data)
    return _plain(data)


def _def_unary(name, sub, fn, doc_name=None, example=0.5, doc_module="numpy"):
    code = register(name, C.K_UNARY, sub, fn)

    def op(x):
        # fast path: a non-leaf of this thread's live epoch (see _binary_op)
        if type(x) is Tensor:
            try:
                tape = _tls.tape
            except AttributeError:
                tape = NO_TAPE
            tok = x._tok
            if tok is not None and tok.tape is tape:
                r = tape.n
                if r < tape.room and type(tape) is _Tape:  # room is -1 under no_grad
                    d = x._data
                    data = fn(d)
                    na = tape.na
                    try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
                        tape.w_op[r] = code
                        tape.w_arg0[r] = na
                        tape.w_args[na] = x._rec
                        tape.na = na + 1
                        if type(data) is _F64 or not data.ndim:
                            tape.w_v1[r] = data  # size is 1 by default
                        else:
                            tape.put(r, data, (d,))
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
        return _unary(code, fn, x)
    op.__name__ = op.__qualname__ = doc_name or fn.__name__
    op.__doc__ = (f"Elementwise ``{doc_module}.{fn.__name__}`` of a tensor, differentiable.\n\n"
                  f"Examples\n--------\n>>> import tapegrad as tg\n"
                  f">>> tg.{op.__name__}(tg.tensor([{example}])).shape\n(1,)\n")
    return op


# special functions: scipy.special's names, computed by tapegrad's own kernels
# (kernels/special.py)
def _special_forward(sub, name):
    """The eager forward of a special-function op: its scalar function over
    the array, in a kernel of its own (float32 stays float32, float16 computes in
    float32 and integers in float64, as SciPy's ufuncs do)."""
    def fn(x):
        a = np.asarray(x)
        dt = a.dtype if a.dtype in (np.float32, np.float64) else \
            np.dtype(np.float32 if a.dtype == np.float16 else np.float64)
        src = np.ascontiguousarray(a, dtype=dt).reshape(-1)
        out = np.empty(src.size, dt)
        with np.errstate(all="ignore"):
            values_into(sub, src, out)
        out = out.reshape(a.shape)
        return out if a.ndim else out[()]
    fn.__name__ = fn.__qualname__ = name
    return fn


def _formula_forward(row, operands):
    """The eager forward of a row (of one operand, ``"x"``, or two, ``"ab"``)
    that names no NumPy function: its formula ``f`` evaluated on the whole
    arrays (conditional expressions as ``np.where``: kernels/formulas.py's
    array_form)."""
    code = compile(formulas.array_form(row.f), f"<forward of {row.name}>", "eval")
    env = {"np": np, "math": np, "__builtins__": {"abs": abs}, **formulas.CONSTANTS}

    def fn(*values):
        with np.errstate(all="ignore"):
            return eval(code, dict(env, **{  # noqa: S307
                k: np.asarray(v, dtype=np.result_type(v, 1.0)) for k, v in zip(operands, values)}))
    fn.__name__ = fn.__qualname__ = row.name
    return fn


def _define(row):
    """The eager function of a formula row (kernels/formulas.py)."""
    if row.scipy:
        return _def_unary(row.grad, row.sub, _special_forward(row.sub, row.name),
                          example=row.example, doc_module="scipy.special")
    fn = getattr(np, row.name, None)
    if fn is None:
        return _def_unary(row.grad, row.sub, _formula_forward(row, "x"), example=row.example,
                          doc_module="tapegrad")
    return _def_unary(row.grad, row.sub, fn, example=row.example)


# every op of one tensor: a row of kernels/formulas.py (round takes decimals: below)
UNARY = {r.name: _define(r) for r in formulas.ROWS if r.name != "round"}
globals().update(UNARY)
abs = UNARY["absolute"]  # noqa: A001  (NumPy's alias)
radians, degrees, psi = UNARY["deg2rad"], UNARY["rad2deg"], UNARY["digamma"]
_ROUND = register(formulas.ROWS_BY_NAME["round"].grad, C.K_UNARY, C.ROUND, np.round)


def round(a, decimals=0):  # noqa: A001  (NumPy's name)
    """``numpy.round``; piecewise constant, so its gradient is zero."""
    return _unary(_ROUND, lambda d: np.round(d, decimals), a)


# -- binary --------------------------------------------------------------------
# (tensor op c) and (c op tensor) with a Python/NumPy number c: the K_SCALAR
# family stores c as a float parameter instead of recording a constant.
_LEFT = {}   # nary code -> scalar code for (tensor op c)
_RIGHT = {}  # nary code -> scalar code for (c op tensor)


def _bstrides(shape, out_shape):
    """C-order element strides of ``shape`` broadcast to ``out_shape``."""
    nd = len(out_shape)
    s = (1,) * (nd - len(shape)) + tuple(shape)
    st = [0] * nd
    acc = 1
    for d in range(nd - 1, -1, -1):
        st[d] = acc if s[d] != 1 else 0
        acc *= s[d]
    return st


def broadcast_params(out_shape, operand_shapes, out_size):
    """``ip`` of a broadcasting record: ``[nd, out_shape, strides...]``.

    None (no parameters) when every operand is full-size or a single
    element: the kernel then never needs strides.
    """
    sizes = [int(np.prod(s)) for s in operand_shapes]
    if all(m == out_size or m == 1 for m in sizes):
        return None
    p = [len(out_shape), *out_shape]
    for s in operand_shapes:
        p.extend(_bstrides(s, out_shape))
    return p


def _operand(tape, x):
    """Record id of an operand: tensors that require grad, else a constant."""
    if isinstance(x, Tensor):
        if x._requires_grad:
            return _node(tape, x)
        return tape.constant(x._data)
    return tape.constant(x)


def _refuse_object(data, fn, t, other):
    """A tensor combined with a Python object NumPy keeps as an object
    (``Fraction``, ``Decimal``, an object array) would give an object-dtype
    tensor that no kernel can hold: refuse it here, naming the dtypes.  Only
    the slow paths call this (a float, an int or a tensor never give one)."""
    if getattr(data, "dtype", None) is not None and data.dtype.kind == "O":
        what = (f"an array of dtype {other.dtype}" if isinstance(other, np.ndarray)
                else f"a {type(other).__name__}")
        raise TypeError(
            f"tapegrad: {getattr(fn, '__name__', 'the op')} of a {t.dtype} tensor and {what} "
            "gives dtype object, which tapegrad does not support; convert the operand "
            "with float() or np.asarray(..., dtype=float)")


def _binary(code, fn, a, b):
    ta, tb = type(a) is Tensor, type(b) is Tensor
    if ta and tb:
        ad, bd = a._data, b._data
        data = fn(ad, bd)
        if not (a._requires_grad or b._requires_grad):
            return _plain(data)
        tape = current()
        if not tape.enabled:
            return _plain(data)
        ra = _node(tape, a) if a._requires_grad else tape.constant(ad)
        rb = _node(tape, b) if b._requires_grad else tape.constant(bd)
        sa, sb = ad.shape, bd.shape
        p = None if sa == sb else broadcast_params(data.shape, (sa, sb), data.size)
        return _result(tape, tape.record(code, (ra, rb), data, p, inputs=(ad, bd)), data)
    if ta or tb:
        t, other = (a, b) if ta else (b, a)
        if not isinstance(other, Tensor):
            tc = type(other)
            if tc is float or tc is int or isinstance(other, _SCALARS):
                data = fn(a._data, b) if ta else fn(a, b._data)
                if tc is not float and tc is not int:
                    _refuse_object(data, fn, t, other)
                if not t._requires_grad:
                    return _plain(data)
                tape = current()
                if not tape.enabled:
                    return _plain(data)
                sc = (_LEFT if ta else _RIGHT).get(code)
                if sc is not None:
                    c = float(other)
                    if ta and code == _SUB_CODE:  # x - c records x + (-c) (see op)
                        c = -c
                    r = tape.record1(sc, _node(tape, t), data, c, (t._data,))
                    return _result(tape, r, data)
    elif not (isinstance(a, Tensor) or isinstance(b, Tensor)):
        return fn(a, b)
    # tensor subclasses, ndarrays and scalars without a K_SCALAR form
    ad = a._data if isinstance(a, Tensor) else a
    bd = b._data if isinstance(b, Tensor) else b
    for x in (ad, bd):
        if isinstance(x, np.matrix):  # its * would be a matrix product, recorded as *
            raise matrix_operand(x)
    data = fn(ad, bd)
    _refuse_object(data, fn, a if isinstance(a, Tensor) else b, b if isinstance(a, Tensor) else a)
    if not any(isinstance(x, Tensor) and x._requires_grad for x in (a, b)):
        return _plain(data)
    tape = current()
    if not tape.enabled:
        return _plain(data)
    ra, rb = _operand(tape, a), _operand(tape, b)
    sa, sb = np.shape(ad), np.shape(bd)
    p = None if sa == sb else broadcast_params(np.shape(data), (sa, sb), np.size(data))
    return _result(tape, tape.record(code, (ra, rb), data, p, inputs=(ad, bd)), data)


def _binary_op(code, fn, left, negate, slow):
    """``op(a, b)``: the fast paths of binary op ``code`` (forward ``fn``,
    K_SCALAR code ``left`` for ``tensor op c``, ``negate`` for subtraction),
    and ``slow(a, b)`` for every other case.

    The fast paths serve eager code's hot path: two non-leaves of this
    thread's live epoch of one shape (or one of them a float64 scalar, which
    broadcasts without parameters), or one with a Python float or int.  They write
    the record inline (what Tape.record/record1 do, minus the capacity checks
    that ``room`` settles in advance): a method call and the attribute
    look-ups it repeats cost as much as the write itself.  They write on a
    plain Tape only: its subclasses override the record writers
    (TraceTape.record1 notes every value, which a guard on a detached value
    needs; anomaly mode's tapes note each record's source line), so they get
    the general path.  The Tensor operators are made here too
    (tapegrad/ops/methods.py), with the complex-aware operator as ``slow``,
    so ``y * 0.5`` is one Python call.
    """
    def op(a, b):
        if type(a) is Tensor:
            tb = type(b)
            if tb is Tensor:
                ad, bd = a._data, b._data
                try:
                    tape = _tls.tape
                except AttributeError:
                    tape = NO_TAPE
                tok = a._tok
                r = tape.n
                if (tok is not None and tok.tape is tape and tok is b._tok and r < tape.room and type(tape) is _Tape
                        and (type(ad) is _F64 or type(bd) is _F64 or ad.shape == bd.shape)):
                    data = fn(ad, bd)
                    na = tape.na
                    try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
                        tape.w_op[r] = code
                        tape.w_arg0[r] = na
                        args = tape.w_args
                        args[na] = a._rec
                        args[na + 1] = b._rec
                        tape.na = na + 2
                        if type(data) is _F64 or not data.ndim:
                            tape.w_v1[r] = data  # size is 1 by default
                        else:
                            tape.put(r, data, (ad, bd))
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
                if tok is None or b._tok is None:
                    out = _with_leaves(code, fn, a, b)
                    if out is not None:
                        return out
            elif (tb is float or tb is int) and left:
                try:
                    tape = _tls.tape
                except AttributeError:
                    tape = NO_TAPE
                tok = a._tok
                r = tape.n
                if tok is not None and tok.tape is tape and r < tape.room and type(tape) is _Tape:
                    ad = a._data
                    data = fn(ad, b)
                    na = tape.na
                    try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
                        tape.w_op[r] = left
                        tape.w_arg0[r] = na
                        tape.w_args[na] = a._rec
                        tape.na = na + 1
                        if b:
                            tape.w_fp[r] = -b if negate else b  # x - c records x + (-c)
                        if type(data) is _F64 or not data.ndim:
                            tape.w_v1[r] = data  # size is 1 by default
                        else:
                            tape.put(r, data, (ad,))
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
            elif tb is _ND:
                out = _with_array(code, fn, a, b, False)
                if out is not None:
                    return out
        elif type(a) is _ND and type(b) is Tensor:
            out = _with_array(code, fn, b, a, True)
            if out is not None:
                return out
        return slow(a, b)
    return op


_CONST = C.code(C.K_NONE, C.CONST)


def _with_leaves(code, fn, a, b):
    """``a op b`` for two tensors of one shape that require grad, one or both
    of them leaves (``w * x`` of parameters, ``x * x``): their LEAF records
    as ``_node`` writes them, then the op's record as the fast path writes
    it -- what ``_binary`` records, without its general case's steps -- or
    None where ``_binary`` must run (grad mode off, a tape of another class,
    operands that broadcast or are not plain ndarrays)."""
    ad, bd = a._data, b._data
    if (not (a._requires_grad and b._requires_grad) or type(ad) is not _ND
            or type(bd) is not _ND or ad.shape != bd.shape):
        return None
    tape = current()
    if type(tape) is not _Tape or tape.n + 3 > tape.room:  # room is -1 under no_grad
        return None
    data = fn(ad, bd)
    ra = _node(tape, a)
    rb = _node(tape, b)
    r = tape.n
    na = tape.na
    try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
        tape.w_op[r] = code
        tape.w_arg0[r] = na
        args = tape.w_args
        args[na] = ra
        args[na + 1] = rb
        tape.na = na + 2
        if type(data) is _F64 or not data.ndim:
            tape.w_v1[r] = data  # size is 1 by default
        else:
            tape.put(r, data, (ad, bd))
        tape.n = r + 1
    except BaseException:
        tape.abandon(r, na)
        raise
    return _result(tape, r, data)


def _with_array(code, fn, t, c, swapped):
    """``t op c`` (``c op t`` if ``swapped``) for a non-leaf ``t`` of the live
    epoch and a float ndarray ``c`` of its shape and of 2 to SMALL elements:
    the CONST record of c (Tape.constant's) and the op's record, written as
    ``_binary`` writes them, or None where the general path must run."""
    td = t._data
    try:
        tape = _tls.tape
    except AttributeError:
        return None
    tok = t._tok
    if (tok is None or tok.tape is not tape or type(tape) is not _Tape or type(td) is not _ND
            or c.dtype.kind != "f" or td.shape != c.shape):
        return None
    m = td.size
    nv = tape.nv
    if not 1 < m <= _SMALL or tape.n + 2 > tape.room or nv + 2 * m > len(tape.vals):
        return None
    data = fn(c, td) if swapped else fn(td, c)
    r = tape.n
    na = tape.na
    try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
        tape.w_op[r] = _CONST
        tape.w_arg0[r] = na
        tape.w_size[r] = m
        tape.vals[nv:nv + m] = c.ravel()
        tape.w_voff[r] = nv
        tape.nv = nv + m
        tape.n = r + 1
    except BaseException:
        tape.abandon(r, na)
        raise
    tape.n_none += 1
    tape.consts.append((c, r))  # copied: a tapegrad write into c later is noted
    rc = r
    r += 1
    nv += m
    try:
        tape.w_op[r] = code
        tape.w_arg0[r] = na
        args = tape.w_args
        args[na] = rc if swapped else t._rec
        args[na + 1] = t._rec if swapped else rc
        tape.na = na + 2
        tape.w_size[r] = m
        tape.vals[nv:nv + m] = data if data.ndim == 1 else data.ravel()
        tape.w_voff[r] = nv
        tape.nv = nv + m
        tape.n = r + 1
    except BaseException:
        tape.abandon(r, na)
        raise
    out = Tensor()
    out._data = data
    out._requires_grad = True
    out._tok = tok
    out._rec = r
    return out


def _reflected_op(fn, right, slow):
    """``__rmul__``-style operator ``op(self, c)`` computing ``c op self``: the
    fast path for a Python float or int ``c`` (K_SCALAR code ``right``, what
    _binary records for it), and ``slow(self, c)`` otherwise."""
    def op(self, c):
        tc = type(c)
        if (tc is float or tc is int) and type(self) is Tensor:
            try:
                tape = _tls.tape
            except AttributeError:
                tape = NO_TAPE
            tok = self._tok
            r = tape.n
            if tok is not None and tok.tape is tape and r < tape.room and type(tape) is _Tape:
                d = self._data
                data = fn(c, d)
                na = tape.na
                try:  # free of cost unless raised (Ctrl-C): see Tape.abandon
                    tape.w_op[r] = right
                    tape.w_arg0[r] = na
                    tape.w_args[na] = self._rec
                    tape.na = na + 1
                    if c:
                        tape.w_fp[r] = c
                    if type(data) is _F64 or not data.ndim:
                        tape.w_v1[r] = data  # size is 1 by default
                    else:
                        tape.put(r, data, (d,))
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
        return slow(self, c)
    return op


#: binary op function -> (code, forward, left code, right code, negate): what
#: tapegrad/ops/methods.py builds the Tensor operators' fast paths from
BINARY_FAST = {}


def _def_binary(name, sub, fn, left=None, right=None, ufunc=None):
    ufunc = ufunc or fn
    negate = sub == C.SUB
    code = register(name, C.K_NARY, sub, ufunc)
    if left:
        _LEFT[code] = left
    if right:
        _RIGHT[code] = right
    op = _binary_op(code, fn, left, negate, functools.partial(_binary, code, fn))
    BINARY_FAST[op] = (code, fn, left, right, negate)
    op.__name__ = op.__qualname__ = ufunc.__name__
    op.__doc__ = (f"``numpy.{ufunc.__name__}`` with broadcasting, differentiable in both "
                  f"operands.\n\nExamples\n--------\n>>> import tapegrad as tg\n"
                  f">>> tg.{ufunc.__name__}(tg.tensor([1.0, 2.0]), 2.0).shape\n(2,)\n")
    return op, code


def _scalar_code(name, sub):
    return register(name, C.K_SCALAR, sub)


_ADDC = _scalar_code("AddScalar", C.ADDC)
_MULC = _scalar_code("MulScalar", C.MULC)
_DIVC = _scalar_code("DivScalar", C.DIVC)
_RSUBC = _scalar_code("RsubScalar", C.RSUBC)
_RDIVC = _scalar_code("RdivScalar", C.RDIVC)
_POWC = _scalar_code("PowScalar", C.POWC)
_RPOWC = _scalar_code("RpowScalar", C.RPOWC)
# The ops with a K_SCALAR form: Python's operator as the eager forward (on
# arrays it is NumPy's ufunc, and on NumPy scalars (0-d values) it takes
# NumPy's scalar fast path, several times quicker than calling the ufunc), the
# scalar codes of (tensor op c) and (c op tensor).
_SCALAR_FORMS = {
    "add": (operator.add, _ADDC, _ADDC), "subtract": (operator.sub, _ADDC, _RSUBC),
    "multiply": (operator.mul, _MULC, _MULC), "divide": (operator.truediv, _DIVC, _RDIVC),
    "power": (operator.pow, _POWC, _RPOWC),
}


def _define_binary(row):
    """The eager function of a binary row (kernels/formulas.py)."""
    ufunc = getattr(np, row.name, None) or _formula_forward(row, "ab")
    fn, left, right = _SCALAR_FORMS.get(row.name, (ufunc, None, None))
    return _def_binary(row.grad, row.sub, fn, left, right, ufunc)[0]


# every op of two tensors: a row of kernels/formulas.py
BINARY = {r.name: _define_binary(r) for r in formulas.BINARY}
globals().update(BINARY)
mod, true_divide = BINARY["remainder"], BINARY["divide"]

_WHERE = register("Where", C.K_NARY, C.WHERE, np.where)


def where(condition, x, y):
    """``numpy.where(condition, x, y)``, differentiable in ``x`` and ``y``.

    The gradient flows to ``x`` where the condition holds and to ``y``
    elsewhere.  ``condition`` is never differentiated (a boolean tensor from a
    comparison, or an array).

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([-1.0, 2.0], requires_grad=True)
    >>> tg.where(x > 0, x, 0.0)
    tensor([0.0, 2.0], grad_fn=<WhereBackward>)
    """
    cond = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    cond = np.asarray(cond, dtype=bool)
    xd = x._data if isinstance(x, Tensor) else x
    yd = y._data if isinstance(y, Tensor) else y
    data = np.where(cond, xd, yd)
    need = any(isinstance(v, Tensor) and v._requires_grad for v in (x, y))
    tape = current()
    if not need or not tape.enabled:
        return _plain(data)
    if masked(condition):  # the one operand np.asarray above converted, mask dropped
        raise masked_operand(condition)
    rc = tape.constant(cond)
    rx, ry = _operand(tape, x), _operand(tape, y)
    p = broadcast_params(data.shape, (cond.shape, np.shape(xd), np.shape(yd)), data.size)
    r = tape.record(_WHERE, (rc, rx, ry), data, p, inputs=(cond, xd, yd))
    return _result(tape, r, data)


# -- comparisons: boolean tensors that carry no gradient -------------------------
def _def_compare(fn):
    def op(a, b):
        ad = a._data if isinstance(a, Tensor) else a
        bd = b._data if isinstance(b, Tensor) else b
        data = fn(ad, bd)
        tape = _tls.__dict__.get("tape")
        if tape is not None and tape.tracing:  # tg.trace replays comparisons
            return tape.compare(fn, a, b, data)
        return _plain(data)
    op.__name__ = op.__qualname__ = fn.__name__
    op.__doc__ = f"``numpy.{fn.__name__}``: a boolean tensor that carries no gradient."
    return op


less = _def_compare(np.less)
less_equal = _def_compare(np.less_equal)
greater = _def_compare(np.greater)
greater_equal = _def_compare(np.greater_equal)
equal = _def_compare(np.equal)
not_equal = _def_compare(np.not_equal)
