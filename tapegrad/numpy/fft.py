"""``tapegrad.numpy.fft``: ``numpy.fft``'s names, differentiable on real and
complex tensors (NumPy's own functions, which reach tapegrad's FFTs through
the NumPy protocol; lists holding tensors are built into a tensor first)."""
import numpy.fft as _nf

from . import _wrap

__getattr__ = _wrap.namespace_getattr(__name__, _nf, globals(), {}, {})


def __dir__():
    return sorted(set(dir(_nf)) | {n for n in globals() if not n.startswith("_")})
