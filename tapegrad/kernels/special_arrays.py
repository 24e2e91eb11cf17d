"""The special functions' values and first derivatives over whole arrays:
one small kernel per function.

The eager forward of ``tg.gammaln`` and the others (:func:`values_into`)
compiles only the function it computes, so the first use of one special
function costs its own compilation, not all nine.  The derivatives' rules (``rules.d_unary``: digamma, trigamma, the Bessel ratios,
log_ndtr's Mills ratio) are scalar loops with branches and series, so they
have no NumPy whole-array form.  Here each has one small kernel of its own
that applies the scalar rule element by element: an interpreted sweep over
a large gammaln record calls it, and the kernel follows the tier's own rule
(kernels/interpret.py) -- interpreted while that is cheap, else compiled on
its own, which costs a fraction of a second instead of compiling the whole
sweep with every family.
"""
import math

import numpy as np

from . import codes as C
from ._jit import kernel
from .special import d_i0e, d_i1e, d_log_ndtr, digamma, erfinv, gammaln, ive, log_ndtr, trigamma


# -- values: f_special's branches, one kernel each --------------------------------------
@kernel
def _erf(x, y):
    for i in range(x.size):
        y[i] = math.erf(np.float64(x[i]))


@kernel
def _erfc(x, y):
    for i in range(x.size):
        y[i] = math.erfc(np.float64(x[i]))


@kernel
def _erfinv(x, y):
    for i in range(x.size):
        y[i] = erfinv(np.float64(x[i]))


@kernel
def _gammaln(x, y):
    for i in range(x.size):
        y[i] = gammaln(np.float64(x[i]))


@kernel
def _digamma(x, y):
    for i in range(x.size):
        y[i] = digamma(np.float64(x[i]))


@kernel
def _i0e(x, y):
    for i in range(x.size):
        y[i] = ive(0, np.float64(x[i]))


@kernel
def _i1e(x, y):
    for i in range(x.size):
        y[i] = ive(1, np.float64(x[i]))


@kernel
def _log_ndtr(x, y):
    for i in range(x.size):
        y[i] = log_ndtr(np.float64(x[i]))


#: unary sub code -> the kernel computing its values (special.f_special's
#: branch for that sub)
VALUES = {C.ERF: _erf, C.ERFC: _erfc, C.ERFINV: _erfinv, C.GAMMALN: _gammaln,
          C.DIGAMMA: _digamma, C.I0E: _i0e, C.I1E: _i1e, C.LOG_NDTR: _log_ndtr}


def values_into(sub, x, y):
    """``y[i] = f_special(sub, x[i])`` over flat arrays (the eager forward)."""
    VALUES[sub](x, y)


# -- first derivatives --------------------------------------------------------------------


@kernel
def _d_gammaln(x, y, out):
    for i in range(x.size):
        out[i] = digamma(x[i])


@kernel
def _d_digamma(x, y, out):
    for i in range(x.size):
        out[i] = trigamma(x[i])


@kernel
def _d_i0e(x, y, out):
    for i in range(x.size):
        out[i] = d_i0e(x[i], y[i])


@kernel
def _d_i1e(x, y, out):
    for i in range(x.size):
        out[i] = d_i1e(x[i], y[i])


@kernel
def _d_log_ndtr(x, y, out):
    for i in range(x.size):
        out[i] = d_log_ndtr(x[i])


#: unary sub code -> its derivative's array kernel (the element rules of
#: ``rules.d_unary`` for these subs call exactly these functions)
LOOPS = {C.GAMMALN: _d_gammaln, C.DIGAMMA: _d_digamma, C.I0E: _d_i0e, C.I1E: _d_i1e,
         C.LOG_NDTR: _d_log_ndtr}


def derivative(sub, x, y):
    """``d_unary(sub, x, y)`` on 1-d float64 arrays for the subs of
    :data:`LOOPS`; None for any other sub (its rule takes arrays itself)."""
    loop = LOOPS.get(sub)
    if loop is None:
        return None
    out = np.empty(x.shape)
    # float64, as the element rule converts each element (np.float64(x))
    loop(np.asarray(x, np.float64), np.asarray(y, np.float64), out)
    return out
