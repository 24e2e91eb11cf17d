"""tapegrad: reverse-mode automatic differentiation of NumPy code.

Operations on tensors append records to a flat tape; ``y.backward(gradient)``
runs one Numba-compiled reverse sweep over it and leaves the vector-Jacobian
product in the leaves' ``.grad``.

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> c = tg.tensor([6.0, 7.0, 8.0], requires_grad=True)
>>> y = 3 * a + np.log(c)
>>> y.backward([0.1, 1.0, 0.0001])
>>> a.grad
tensor([0.3, 3.0, 0.0003])
"""
from . import ops as _ops  # noqa: F401  (registers ops, binds Tensor methods)
from .ops.function import Function, FunctionCtx
from .transforms.checkpointing import checkpoint, checkpoint_loop
from .engine.anomaly import detect_anomaly, is_anomaly_enabled
from .core.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .engine.graph import AccumulateGrad, Node
from .ops.elementwise import (
    abs, absolute, add, arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh, cbrt,
    ceil, copysign, cos, cosh, deg2rad, degrees, divide, equal, exp, exp2, expm1,
    fabs, float_power, floor, floor_divide, fmax, fmin, fmod, greater, greater_equal,
    heaviside, hypot, less, less_equal, log, log1p, log2, log10, logaddexp, logaddexp2,
    maximum, minimum, mod, multiply, negative, not_equal, positive, power, rad2deg,
    radians, reciprocal, remainder, rint, round, sign, sin, sinh, sqrt, square, subtract,
    tan, tanh, true_divide, trunc, where)
from .ops.composite import (
    array_split, atleast_1d, atleast_2d, atleast_3d, average, column_stack, dstack, hsplit,
    clip, dot, hstack, inner, kron, nanmax, nanmean, nanmin, nansum, norm, outer, ptp,
    select, std, tensordot, var, vdot, vsplit, vstack)
from .ops.complex_tensor import ComplexTensor, complex
from .ops.custom import ElementwiseOp, elementwise
from .ops.derive import DeriveError
from .ops.numeric import (
    append, convolve, correlate, cross, diff, dsplit, ediff1d, geomspace, gradient, interp,
    nan_to_num, polyval, rollaxis, rot90, row_stack, sinc, trapezoid)
from .ops.creation import (
    arange, from_numpy, full, full_like, linspace, ones, ones_like, rand, randn, zeros,
    zeros_like)
from .ops.special import (
    digamma, erf, erfc, erfinv, expit, gammaln, i0e, i1e, log_expit, log_ndtr, logit, ndtr,
    psi, sigmoid, xlog1py, xlogy)
from .transforms.functional import (
    GradcheckError, grad, gradcheck, jacobian, value_and_grad, vjp)
from . import autograd
from .ops.matrix import einsum, matmul
from . import linalg
from .ops.reductions import (
    amax, amin, cumprod, cumsum, log_softmax, logsumexp, max, mean, min, prod, softmax, sum)
from .ops.shape import (
    astype, broadcast_to, concatenate, diag, diagonal, expand_dims, flip, fliplr, flipud,
    getitem, index_put, moveaxis, pad, ravel, repeat, reshape, roll, sort, split, squeeze, stack,
    swapaxes, take, take_along_axis, tile, transpose, tril, triu, unbind)
from .debug.stats import tape_stats
from .core.tensor import ConcretizationError, Tensor, tensor
from .debug import viz

__version__ = "0.1.0"

# Tracing, tape files, forward mode and second order are imported on first
# use: a program that only takes gradients does not pay for their modules
# (and their kernels' modules) at import.
_LAZY = {
    "TracedFunction": "tracing.api", "compile": "tracing.api", "trace": "tracing.api",  # trace(array)
    "load": "tracing.files.io",                                                    # is numpy.trace
    "jacfwd": "transforms.forward.sweep", "jvp": "transforms.forward.sweep",
    "SparseHessian": "transforms.second.passes", "hessian": "transforms.second.passes",
    "hessian_sparsity": "transforms.second.passes", "hvp": "transforms.second.passes",
    "sparse_hessian": "transforms.second.passes",
}
__all__ = sorted([n for n in dir() if not n.startswith("_")] + list(_LAZY))


#: subpackages imported on first use: ``tg.scipy.stats.norm.logpdf(...)``, ``tg.numpy``
_LAZY_PACKAGES = ("scipy", "numpy")


def __getattr__(name):
    if name in _LAZY_PACKAGES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tapegrad' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
