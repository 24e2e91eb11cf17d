"""``tapegrad.numpy.linalg``: ``numpy.linalg``'s names, differentiable.

Given tensors (or lists holding tensors), a function is tapegrad's
(``tapegrad.linalg``, which takes real and complex tensors); given plain
arrays, NumPy's own.  Names tapegrad has no function for are NumPy's, which
raise a TypeError naming them when given a tensor that carries a gradient.
"""
import numpy as _np
import numpy.linalg as _nl

from .. import linalg as _tl
from . import _wrap

LinAlgError = _nl.LinAlgError

_SEQ = {"multi_dot": (0, "arrays")}
_ON_TENSORS = {n: getattr(_tl, n) for n in _tl.__all__ if hasattr(_nl, n)}

__getattr__ = _wrap.namespace_getattr(__name__, _nl, globals(), _SEQ, _ON_TENSORS)


def __dir__():
    return sorted(set(dir(_nl)) | {n for n in globals() if not n.startswith("_")})
