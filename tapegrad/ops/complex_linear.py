"""Real-linear and bilinear functions of complex tensors: a function linear in
its data arguments applied to the real and imaginary parts (``_linear``:
sum, mean, the shape functions, ...), one bilinear in two (``_bilinear``:
matmul, dot, outer, tensordot, ...), ``einsum`` of any number of operands,
and ``numpy.linalg.multi_dot``.

Kept apart from the elementwise ops (:mod:`~tapegrad.ops.complex_math`):
these lift NumPy's own real functions to complex operands by splitting
them into parts, rather than writing a formula per function;
:mod:`~tapegrad.ops.complex_tensor` registers them for the NumPy functions
and includes this module's namespace.
"""
import numpy as np

from ..core.tensor import Tensor
from . import elementwise as E
from .complex_core import _split, _z, is_complex
from .matrix import _einsum_sublists


def _part(x, k):
    """Part k (0 real, 1 imag) of an argument of a real-linear function: complex
    operands split, real data (floats) gives zeros as imag, anything else
    (axes, int indices, bool masks) passes unchanged."""
    if isinstance(x, (list, tuple)):
        return type(x)(_part(v, k) for v in x)
    if is_complex(x):
        p = _split(x)[k]
        return p
    if k == 1:
        if isinstance(x, Tensor) and x.dtype.kind == "f":
            return np.zeros(x.shape)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            return np.zeros(x.shape)
        if isinstance(x, float):
            return 0.0
    return x


def _linear(fn, *args, **kwargs):
    """``fn(re) + i fn(im)`` for a function real-linear in its data arguments."""
    re = fn(*_part(args, 0), **{k: _part(v, 0) for k, v in kwargs.items()})
    im = fn(*_part(args, 1), **{k: _part(v, 1) for k, v in kwargs.items()})
    return _z(re, im)


def _linear_fn(np_fn):
    def run(*args, **kwargs):
        return _linear(np_fn, *args, **kwargs)
    return run


def _bilinear(fn, a, b, **kwargs):
    (ar, ai), (br, bi) = _split(a), _split(b)
    rr = fn(ar, br, **kwargs)
    if ai is None and bi is None:
        return rr
    if ai is None:
        return _z(rr, fn(ar, bi, **kwargs))
    if bi is None:
        return _z(rr, fn(ai, br, **kwargs))
    re = E.subtract(rr, fn(ai, bi, **kwargs))
    im = E.add(fn(ar, bi, **kwargs), fn(ai, br, **kwargs))
    return _z(re, im)


def matmul(a, b):
    return _bilinear(np.matmul, a, b)


def _einsum(subscripts, *operands, **kwargs):
    if not isinstance(subscripts, str):  # the interleaved form
        subscripts, operands = _einsum_sublists((subscripts,) + operands)
    if len(operands) == 1:
        return _linear(np.einsum, subscripts, operands[0], **kwargs)
    if len(operands) == 2:
        return _bilinear(lambda x, y: np.einsum(subscripts, x, y, **kwargs), *operands)
    # multilinear: one real einsum per choice of part of each complex operand
    # (2^k for k complex operands), i^m for m imaginary parts chosen
    split = [_split(x) for x in operands]
    cplx = [k for k, (_, im) in enumerate(split) if im is not None]
    terms = ([], [])  # (sign, value) of the real and the imaginary part
    for mask in range(2 ** len(cplx)):
        picks = [p[0] for p in split]
        m = 0
        for j, k in enumerate(cplx):
            if mask >> j & 1:
                picks[k] = split[k][1]
                m += 1
        terms[m % 2].append((-1.0 if m % 4 >= 2 else 1.0,
                             np.einsum(subscripts, *picks, **kwargs)))

    def total(ts):
        out = None
        for sign, v in ts:
            out = (v if sign > 0 else E.negative(v)) if out is None else (
                E.add(out, v) if sign > 0 else E.subtract(out, v))
        return out
    re = total(terms[0])
    return re if not terms[1] else _z(re, total(terms[1]))


def _multi_dot(arrays, *, out=None):
    if out is not None:
        raise TypeError("numpy.linalg.multi_dot(..., out=...) cannot write into an array "
                        "when tensors are involved; drop out=")
    result = arrays[0]
    for a in arrays[1:]:
        result = matmul(result, a)
    return result
