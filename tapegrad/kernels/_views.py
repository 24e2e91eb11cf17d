"""Views of the tape that every kernel uses.

A kernel receives the tape as one tuple ``T`` of flat arrays (see
:func:`tapegrad.core.tape.Tape.arrays` and :class:`tapegrad.engine.backward.Adjoints`):

====  ======  ===========================================================
 idx  name    meaning (per record ``r`` unless noted)
====  ======  ===========================================================
  0   op      op code: ``kind << 6 | sub``
  1   arg0    start of r's parents in ``args``; ``arg0[n]`` ends the last
  2   size    element count of r's output value
  3   ip0     start of r's integer parameters in ``ip`` (0: none)
  4   args    parent record ids (CSR, in argument order)
  5   ip      integer parameters (shapes, strides, index maps)
  6   fp      r's float parameter (the 0.5 in ``x * 0.5``)
  7   v1      r's value when it has one element
  8   vals    arena of values of 2..SMALL elements (``v1``'s dtype)
  9   voff    offset of r's value in ``vals``
 10   rix     index of r's value in ``ptrs`` (larger values; -1: not kept)
 11   ptrs    data addresses of large values, held alive by the tape
 12   aptr    address of r's adjoint (leaves and the rest live in two arenas)
 13   reached whether r's adjoint has been written in this sweep
====  ======  ===========================================================

A float32 graph (engine/backward.py: ``Adjoints``) is swept with ``v1`` and
``vals`` as float32 arrays: its large values are kept as float32 and its
adjoints are float32, which halves the memory the sweep streams.  The same
kernel sources serve both: :func:`~tapegrad.kernels.dtypes.float_dtype` is a constant of the
tuple's type when compiled, so each kernel is compiled once per tuple
type, the float32 one only when a float32 graph is first swept.
"""
import numpy as np

from . import codes as C
from ._jit import deferred, inline
from .dtypes import V1 as _V1, float_dtype
from .interpret import array_form

#: Values with at most this many elements are copied into the value arena;
#: larger ones are referenced in place (no copy on the recording path).
SMALL = 16

#: the tape tuple's fields, by position (the table above); kernels index
#: ``T`` with these names, which Numba reads as constants
OP, ARG0, SIZE, IP0, ARGS, IP, FP, V1, VALS, VOFF, RIX, PTRS, APTR, REACHED = range(14)
assert V1 == _V1  # kernels/dtypes.py reads v1 without importing this module


#: an integer address as a ``void*``, and ``numba.carray``: an array over it
_voidptr = deferred("voidptr")
carray = deferred("carray")


@inline
def _at(base, offset, n):
    """``base[offset:offset+n]`` without touching the base's reference count.

    A slice in compiled code increments and decrements the parent array's
    reference count (atomically); at a few views per record that cost more
    than the whole VJP of a scalar op.  The tape keeps every base alive for
    the duration of the sweep, so borrowed views are safe.
    """
    return carray(_voidptr(base.ctypes.data + base.itemsize * offset), (n,), base.dtype)


@inline
def value(T, v):
    """Output value of record ``v`` as a flat view (float64, or float32 in a
    float32 sweep: :func:`float_dtype`).

    Large values that no VJP reads are not kept; for them this returns the
    record's adjoint memory instead, so that a loop shared by several ops may
    load (and ignore) elements without touching a dangling address.
    """
    n = T[SIZE][v]
    if n == 1:
        return _at(T[V1], v, 1)
    if n <= SMALL:
        return _at(T[VALS], T[VOFF][v], n)
    k = T[RIX][v]
    if k < 0:
        return carray(_voidptr(T[APTR][v]), (n,), float_dtype(T))
    return carray(_voidptr(T[PTRS][k]), (n,), float_dtype(T))


@inline
def adjoint(T, v):
    """Adjoint of record ``v``'s output as a flat view (float64, or float32
    in a float32 sweep: :func:`float_dtype`)."""
    return carray(_voidptr(T[APTR][v]), (T[SIZE][v],), float_dtype(T))


@inline
def adjoint_span(T, v, n):
    """``n`` adjoint elements from record ``v``'s on (the outputs of a
    multi-output record are consecutive in the arena)."""
    return carray(_voidptr(T[APTR][v]), (n,), float_dtype(T))


@inline
def claim(T, v):
    """Mark ``v``'s adjoint as written; True if this is the first write.

    Adjoint arenas are not zeroed: the first VJP to reach a record assigns
    its adjoint (or zero-fills it, if it only touches part of it) and later
    ones accumulate.  This saves a zeroing pass and a read per record.
    """
    reached = T[REACHED]
    first = not reached[v]
    reached[v] = True
    return first


@inline
def alias(T, v, r):
    """Let ``v`` (first reached now) take record r's adjoint as its own.

    For VJPs that pass the gradient through unchanged (add, reshape, ...):
    r's adjoint is complete when its VJP runs and nobody reads it afterwards,
    so v can own that memory instead of receiving a copy.  Leaves, constants
    and multi-output slots keep their own memory (leaves' adjoints are handed
    out as gradients; slots must stay consecutive).
    """
    reached = T[REACHED]
    if reached[v] or (T[OP][v] >> C.SHIFT) == C.K_NONE:
        return False
    T[APTR][v] = T[APTR][r]
    reached[v] = True
    return True


@inline
def claim_zeroed(T, v):
    """``claim`` for VJPs that accumulate into only part of ``v``'s adjoint."""
    if claim(T, v):
        adjoint(T, v)[:] = 0.0


@inline
def parent(T, r, i):
    """Record id of the ``i``-th parent of record ``r``."""
    return T[ARGS][T[ARG0][r] + i]


@inline
def fparam(T, r):
    return T[FP][r]


@inline
def copy_into(y, x):
    """``y[:] = x`` for two arrays of the same size, as a loop: an array
    slice assignment compiles its shape-mismatch message (seconds)."""
    for i in range(y.size):
        y[i] = x[i]


@inline
def rows_of(om):
    """``om.max() + 1`` (0 for an empty map), as a loop: ``ndarray.max()``
    compiles its empty-array error (seconds)."""
    rows = 0
    for i in range(om.size):
        rows = max(rows, om[i] + 1)
    return rows


@inline
def odometer(ip, b, nd, k):
    """Walk an ``nd``-d output in C order while tracking ``k`` operands' flat
    positions: the shape and strides from ``ip[b]`` (``[nd, shape, strides of
    each operand]``), the counters, and the positions.  ``advance`` steps it,
    with no division per axis per element."""
    shape = ip[b + 1:b + 1 + nd]
    strides = np.empty((k, nd), np.int64)
    for j in range(k):  # element by element: a slice assignment compiles its
        for d in range(nd):  # shape-mismatch message (seconds of compilation)
            strides[j, d] = ip[b + 1 + nd * (j + 1) + d]
    return shape, strides, np.zeros(nd, np.int64), np.zeros(k, np.int64)


@inline
def advance(shape, strides, cnt, pos):
    step_from(shape.size - 1, shape, strides, cnt, pos)


@inline
def advance_row(shape, strides, cnt, pos):
    """``advance`` by a whole row of the last axis, from a row's start (a
    loop that walks the last axis itself steps the rest with this)."""
    step_from(shape.size - 2, shape, strides, cnt, pos)


@inline
def step_from(d, shape, strides, cnt, pos):
    """The odometer's step at axis ``d``, carrying into the axes before it."""
    k = pos.size
    while d >= 0:
        cnt[d] += 1
        for j in range(k):
            pos[j] += strides[j, d]
        if cnt[d] < shape[d]:
            return
        for j in range(k):
            pos[j] -= strides[j, d] * shape[d]
        cnt[d] = 0
        d -= 1


@inline
def _borrow(a):
    return carray(_voidptr(a.ctypes.data), (a.size,), a.dtype)


@inline
def borrowed_tape(T):
    """``T`` with its arrays borrowed: views over the same memory that hold
    no reference (as the family entries receive it, kernels/_numba.py).

    A compiled loop's own ``T`` holds references, and every helper that
    takes it (or one of its arrays) as an argument counts them up and
    down, atomically, on entry and exit unless the compiler can drop the
    pair -- which it cannot once the helper has loops and branches: that was
    most of a tiny record's cost in the sweep.  The loop's ``T`` keeps the
    memory alive meanwhile."""
    return (_borrow(T[0]), _borrow(T[1]), _borrow(T[2]), _borrow(T[3]), _borrow(T[4]),
            _borrow(T[5]), _borrow(T[6]), _borrow(T[7]), _borrow(T[8]), _borrow(T[9]),
            _borrow(T[10]), _borrow(T[11]), _borrow(T[12]), _borrow(T[13]))


@array_form(borrowed_tape)
def _tape_as_is(T):
    # the interpreted tier counts no references: the tape itself will do
    return T
