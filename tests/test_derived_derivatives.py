"""``tg.elementwise(f)`` without ``derivative=``: first and second
derivatives derived from f's source (tapegrad/ops/derive.py).

The table of scalar functions is grouped into two ops (Numba compiles each
op, each case costs only its own small functions): ``UNARY_TABLE(x)`` takes
the case ``k = floor(x / 10)`` at ``u = x - 10 k - 5``, ``BINARY_TABLE(a,
b)`` the case ``k = floor(a)`` at ``u = a - k + 0.5``, so every element of
one array goes down its own branch.  Each case is checked against central
differences of its own Python code in float64 and, where there is one,
against its closed form, to first order (``tg.grad`` of the op's sum) and
second order (``tg.hvp``: the Hessian is diagonal, or block diagonal for the
binary op)."""
import cmath
import inspect
import math
import re

import numba
import numpy as np
import pytest
import scipy.special as sp

import tapegrad as tg
from tapegrad.ops.derive import DeriveError

ALPHA = 0.75     # a global constant: read as 0.75 when the op is defined
_SQPI = 2.0 / math.sqrt(math.pi)
njit = numba.njit


# -- unary cases (functions of u in (-5, 5)) -----------------------------------------

@njit
def c_poly(u):
    return u ** 3 - 2.0 * u + 1.0


@njit
def c_gauss_sin(u):
    return math.exp(-u * u) * math.sin(3.0 * u)


@njit
def c_softplus(u):
    return max(u, 0.0) + math.log1p(math.exp(-abs(u)))


@njit
def c_huber(u):
    d = ALPHA
    if abs(u) <= d:
        return 0.5 * u * u
    return d * (abs(u) - 0.5 * d)


@njit
def c_sinc(u):
    if abs(u) < 1e-3:        # the series near 0: right derivatives there too
        return 1.0 - u * u / 6.0 + u ** 4 / 120.0
    return math.sin(u) / u


@njit
def c_expm1_over(u):
    if u == 0.0:             # the limit's value: at 0 the derivative is the constant's
        return 1.0
    return math.expm1(u) / u


@njit
def c_lgamma(u):
    return math.lgamma(u + 5.5)


@njit
def c_lgamma_negative(u):
    return math.lgamma(u - 0.5)


@njit
def c_gamma(u):
    return math.gamma(0.5 * u + 2.6)


@njit
def c_erf(u):
    return math.erf(u) + 0.5 * math.erfc(2.0 * u)


@njit
def c_atan2(u):
    return math.atan2(u, 1.0 + u * u)


@njit
def c_newton_cbrt(u):        # a while loop run to convergence
    c = 1.0 + u * u
    r = 1.0 + c / 3.0
    k = 0
    while abs(r * r * r - c) > 1e-15 * c and k < 100:
        r = r - (r * r * r - c) / (3.0 * r * r)
        k += 1
    return r


@njit
def c_taylor_exp(u):         # a for loop with a running term
    s = 1.0
    term = 1.0
    for k in range(1, 40):
        term *= u / k
        s += term
    return s


@njit
def _horner(u, n):
    s = 0.0
    for i in range(n, 0, -1):
        s = s * u + 1.0 / i
    return s


@njit
def _square(v):
    return v * v


@njit
def c_nested(u):             # calls with an integer argument, and a call in a call
    return _horner(math.sin(u), 6) * _square(u + _horner(0.5, 3))


@njit
def c_pieces(u):
    if u < -1.0:
        return -u - 0.5
    elif u < 1.0:
        return 0.5 * u * u
    else:
        return u - 0.5


@njit
def c_ifexp(u):
    return u * u if u > 0.0 else -(u ** 3)


@njit
def c_abs_cube(u):
    return abs(u) ** 3


@njit
def c_clip(u):
    return min(max(u, -1.0), 1.0) * u


@njit
def c_varpow(u):
    return (1.0 + u * u) ** (0.5 + 0.1 * u)


@njit
def c_hyper_inverse(u):
    return math.asinh(u) + math.acosh(2.0 + u * u)


@njit
def c_trig(u):
    return math.tan(0.25 * u) * math.cos(u) + math.sin(u) ** 2


@njit
def c_logs(u):
    return (math.log(1.0 + u * u) - math.log10(6.0 + u) + math.log2(7.0 + u)
            + math.log(u + 6.0) / math.log(3.0))


@njit
def c_hyperbolic(u):
    return math.sinh(0.5 * u) * math.cosh(0.5 * u) - math.tanh(u)


@njit
def c_inverse_trig(u):
    return math.atanh(u / 6.0) + math.asin(u / 6.0) + math.acos(u / 7.0) + math.atan(u)


@njit
def c_recurrence(u):         # tuple assignment, augmented assignments
    a, b = 1.0, u
    for _ in range(6):
        a, b = b, a + b * u
    a *= 0.5
    a -= u
    a /= 2.0
    return a


@njit
def c_sawtooth(u):
    return (u % 1.5) ** 2 + u // 1.5


@njit
def c_floor_frac(u):         # smoothstep on each unit interval, plus a step
    f = u - math.floor(u)
    return f * f * (3.0 - 2.0 * f) + int(u) + round(u) * 0.0


@njit
def c_copysign(u):
    return math.copysign(u * u, u) + math.fabs(u) * u


@njit
def c_hypot(u):
    return math.hypot(u, 2.0) + math.sqrt(u * u + 1.0)


@njit
def c_xlogx(u):
    v = u + 5.5
    return v * math.log(v) - v


@njit
def c_mathpow(u):
    return math.pow(u + 5.2, 3.5) + pow(2.0, u)


@njit
def c_numpy(u):
    return np.exp(-0.5 * u) * np.arctan(u) + np.sqrt(np.cosh(u))


@njit
def c_logistic(u):           # the branch a stable sigmoid takes
    if u >= 0.0:
        z = math.exp(-u)
        return 1.0 / (1.0 + z)
    z = math.exp(u)
    return z / (1.0 + z)


@njit
def c_break_loop(u):         # while True, continue and break
    s = 0.0
    k = 0
    while True:
        k += 1
        if k % 2 == 0:
            continue
        s += math.sin(k * u) / k
        if k > 8:
            break
    return s


@njit
def c_exp_family(u):
    return math.expm1(0.3 * u) + math.log1p(0.2 * u * u)


@njit
def c_degrees(u):
    return math.sin(math.radians(30.0 * u)) + math.degrees(u) * 0.01


def _scaled_tanh(c):
    @njit
    def scaled(u):           # c is a closure constant
        return c * math.tanh(u)
    return scaled


c_closure = _scaled_tanh(2.5)


@njit
def _level2(v, k):
    return math.exp(v) * k


@njit
def _level1(v):
    return _level2(v, 2.0) + _level2(0.5, v)   # v active in one place, then the other


@njit
def c_deep(u):
    return _level1(0.25 * u)


@njit
def c_powers(u):             # u ** i with an integer variable i: exact at u == 0 too
    s = 0.0
    for i in range(4):
        s += (i + 1.0) * u ** i
    return s


@njit
def _rebind(a, v):
    a = a * v                # a parameter passed a constant becomes a variable
    return a + v


@njit
def c_rebind(u):
    return _rebind(2.0, u) * u


@njit
def c_numpy_more(u):
    return (np.square(u) + np.maximum(u, 0.5) - np.minimum(0.25 * u, -0.5)
            + np.float64(u) * np.fmax(u, -1.0))


def _fd_only(u):
    return None


def _pg(n, x):
    return sp.polygamma(n, x)


def _sig(u):
    return 1.0 / (1.0 + np.exp(-u))


# (function, domain, d1, d2, kinks): the closed forms take a NumPy array
UNARY = [
    (c_poly, (-3, 3), lambda u: 3 * u * u - 2, lambda u: 6 * u, ()),
    (c_gauss_sin, (-3, 3),
     lambda u: np.exp(-u * u) * (-2 * u * np.sin(3 * u) + 3 * np.cos(3 * u)),
     lambda u: np.exp(-u * u) * ((4 * u * u - 2) * np.sin(3 * u) - 12 * u * np.cos(3 * u)
                                 - 9 * np.sin(3 * u)), ()),
    (c_softplus, (-4, 4), _sig, lambda u: _sig(u) * (1 - _sig(u)), (0.0,)),
    (c_huber, (-3, 3), lambda u: np.where(abs(u) <= ALPHA, u, ALPHA * np.sign(u)),
     lambda u: (abs(u) <= ALPHA) * 1.0, (-ALPHA, ALPHA)),
    (c_sinc, (-4, 4), lambda u: (u * np.cos(u) - np.sin(u)) / u ** 2,
     lambda u: -np.sin(u) / u - 2 * np.cos(u) / u ** 2 + 2 * np.sin(u) / u ** 3, (0.0,)),
    (c_expm1_over, (-3, 3), lambda u: (u * np.exp(u) - np.expm1(u)) / u ** 2,
     lambda u: (np.exp(u) * u * u - 2 * u * np.exp(u) + 2 * np.expm1(u)) / u ** 3, (0.0,)),
    (c_lgamma, (-4.5, 4.5), lambda u: sp.digamma(u + 5.5), lambda u: _pg(1, u + 5.5), ()),
    (c_lgamma_negative, (-1.9, -1.65), lambda u: sp.digamma(u - 0.5),
     lambda u: _pg(1, u - 0.5), ()),
    (c_gamma, (-4, 4), lambda u: 0.5 * sp.gamma(0.5 * u + 2.6) * sp.digamma(0.5 * u + 2.6),
     lambda u: 0.25 * sp.gamma(0.5 * u + 2.6) * (sp.digamma(0.5 * u + 2.6) ** 2
                                                  + _pg(1, 0.5 * u + 2.6)), ()),
    (c_erf, (-2, 2), lambda u: _SQPI * (np.exp(-u * u) - np.exp(-4 * u * u)),
     lambda u: _SQPI * (-2 * u * np.exp(-u * u) + 8 * u * np.exp(-4 * u * u)), ()),
    (c_atan2, (-3, 3), lambda u: (1 - u * u) / (u * u + (1 + u * u) ** 2), _fd_only, ()),
    (c_newton_cbrt, (-3, 3), lambda u: 2 * u / 3 * (1 + u * u) ** (-2 / 3),
     lambda u: -2 / 9 * (1 + u * u) ** (-5 / 3) * 4 * u * u + 2 / 3 * (1 + u * u) ** (-2 / 3),
     ()),
    (c_taylor_exp, (-2, 2), np.exp, np.exp, ()),
    (c_nested, (-2, 2), _fd_only, _fd_only, ()),
    (c_pieces, (-3, 3), lambda u: np.clip(u, -1, 1), lambda u: (abs(u) < 1) * 1.0, (-1, 1)),
    (c_ifexp, (-2, 2), lambda u: np.where(u > 0, 2 * u, -3 * u * u),
     lambda u: np.where(u > 0, 2.0, -6 * u), (0.0,)),
    (c_abs_cube, (-2, 2), lambda u: 3 * u * abs(u), lambda u: 6 * abs(u), ()),
    (c_clip, (-3, 3), lambda u: np.where(abs(u) < 1, 2 * u, np.sign(u)),
     lambda u: (abs(u) < 1) * 2.0, (-1, 1)),
    (c_varpow, (-3, 3),
     lambda u: (1 + u * u) ** (0.5 + 0.1 * u) * (0.1 * np.log1p(u * u)
                                                 + (0.5 + 0.1 * u) * 2 * u / (1 + u * u)),
     lambda u: (1 + u * u) ** (0.5 + 0.1 * u) * (
         (0.1 * np.log1p(u * u) + (0.5 + 0.1 * u) * 2 * u / (1 + u * u)) ** 2
         + 0.4 * u / (1 + u * u) + (0.5 + 0.1 * u) * 2 * (1 - u * u) / (1 + u * u) ** 2), ()),
    (c_hyper_inverse, (-3, 3),
     lambda u: 1 / np.sqrt(1 + u * u) + 2 * u / np.sqrt((2 + u * u) ** 2 - 1), _fd_only, ()),
    (c_trig, (-2, 2),
     lambda u: 0.25 / np.cos(0.25 * u) ** 2 * np.cos(u) - np.tan(0.25 * u) * np.sin(u)
     + np.sin(2 * u), _fd_only, ()),
    (c_logs, (-4, 4),
     lambda u: 2 * u / (1 + u * u) - 1 / ((6 + u) * np.log(10)) + 1 / ((7 + u) * np.log(2))
     + 1 / ((u + 6) * np.log(3)), _fd_only, ()),
    (c_hyperbolic, (-3, 3), lambda u: 0.5 * np.cosh(u) - 1 / np.cosh(u) ** 2,
     lambda u: 0.5 * np.sinh(u) + 2 * np.tanh(u) / np.cosh(u) ** 2, ()),
    (c_inverse_trig, (-4, 4),
     lambda u: (1 / 6) / (1 - u * u / 36) + (1 / 6) / np.sqrt(1 - u * u / 36)
     - (1 / 7) / np.sqrt(1 - u * u / 49) + 1 / (1 + u * u), _fd_only, ()),
    (c_recurrence, (-1.5, 1.5), _fd_only, _fd_only, ()),
    (c_sawtooth, (-4, 4), lambda u: 2 * np.mod(u, 1.5), lambda u: 2.0 + 0 * u,
     tuple(1.5 * k for k in range(-3, 4))),
    (c_floor_frac, (-3, 3), lambda u: 6 * (u - np.floor(u)) * (1 - (u - np.floor(u))),
     lambda u: 6 - 12 * (u - np.floor(u)), tuple(0.5 * k for k in range(-7, 8))),
    (c_copysign, (-2, 2), lambda u: 4 * abs(u), lambda u: 4 * np.sign(u), (0.0,)),
    (c_hypot, (-3, 3), lambda u: u / np.sqrt(u * u + 4) + u / np.sqrt(u * u + 1),
     lambda u: 4 / (u * u + 4) ** 1.5 + 1 / (u * u + 1) ** 1.5, ()),
    (c_xlogx, (-4.5, 4.5), lambda u: np.log(u + 5.5), lambda u: 1 / (u + 5.5), ()),
    (c_mathpow, (-4, 4), lambda u: 3.5 * (u + 5.2) ** 2.5 + 2.0 ** u * np.log(2),
     lambda u: 8.75 * (u + 5.2) ** 1.5 + 2.0 ** u * np.log(2) ** 2, ()),
    (c_numpy, (-3, 3), _fd_only, _fd_only, ()),
    (c_logistic, (-4, 4), lambda u: _sig(u) * (1 - _sig(u)),
     lambda u: _sig(u) * (1 - _sig(u)) * (1 - 2 * _sig(u)), ()),
    (c_break_loop, (-2, 2), lambda u: sum(np.cos(k * u) for k in (1, 3, 5, 7, 9)),
     lambda u: -sum(k * np.sin(k * u) for k in (1, 3, 5, 7, 9)), ()),
    (c_exp_family, (-3, 3), lambda u: 0.3 * np.exp(0.3 * u) + 0.4 * u / (1 + 0.2 * u * u),
     lambda u: 0.09 * np.exp(0.3 * u) + (0.4 - 0.08 * u * u) / (1 + 0.2 * u * u) ** 2, ()),
    (c_degrees, (-3, 3), lambda u: np.pi / 6 * np.cos(np.pi * u / 6) + 1.8 / np.pi,
     lambda u: -(np.pi / 6) ** 2 * np.sin(np.pi * u / 6), ()),
    (c_closure, (-3, 3), lambda u: 2.5 / np.cosh(u) ** 2,
     lambda u: -5 * np.tanh(u) / np.cosh(u) ** 2, ()),
    (c_deep, (-3, 3), lambda u: 0.5 * np.exp(0.25 * u) + 0.25 * np.exp(0.5),
     lambda u: 0.125 * np.exp(0.25 * u), ()),
    (c_powers, (-2, 2), lambda u: 2 + 6 * u + 12 * u * u, lambda u: 6 + 24 * u, ()),
    (c_rebind, (-3, 3), lambda u: 6 * u, lambda u: 6 + 0 * u, ()),
    (c_numpy_more, (-4, 4),
     lambda u: 2 * u + (u > 0.5) - 0.25 * (u < -2) + np.where(u > -1, 2 * u, -1.0),
     lambda u: 2 + np.where(u > -1, 2.0, 0.0), (-2.0, -1.0, 0.5)),
]


@njit
def unary_table(x):
    k = math.floor(x / 10.0)
    u = x - 10.0 * k - 5.0
    if k == 0:
        return c_poly(u)
    elif k == 1:
        return c_gauss_sin(u)
    elif k == 2:
        return c_softplus(u)
    elif k == 3:
        return c_huber(u)
    elif k == 4:
        return c_sinc(u)
    elif k == 5:
        return c_expm1_over(u)
    elif k == 6:
        return c_lgamma(u)
    elif k == 7:
        return c_lgamma_negative(u)
    elif k == 8:
        return c_gamma(u)
    elif k == 9:
        return c_erf(u)
    elif k == 10:
        return c_atan2(u)
    elif k == 11:
        return c_newton_cbrt(u)
    elif k == 12:
        return c_taylor_exp(u)
    elif k == 13:
        return c_nested(u)
    elif k == 14:
        return c_pieces(u)
    elif k == 15:
        return c_ifexp(u)
    elif k == 16:
        return c_abs_cube(u)
    elif k == 17:
        return c_clip(u)
    elif k == 18:
        return c_varpow(u)
    elif k == 19:
        return c_hyper_inverse(u)
    elif k == 20:
        return c_trig(u)
    elif k == 21:
        return c_logs(u)
    elif k == 22:
        return c_hyperbolic(u)
    elif k == 23:
        return c_inverse_trig(u)
    elif k == 24:
        return c_recurrence(u)
    elif k == 25:
        return c_sawtooth(u)
    elif k == 26:
        return c_floor_frac(u)
    elif k == 27:
        return c_copysign(u)
    elif k == 28:
        return c_hypot(u)
    elif k == 29:
        return c_xlogx(u)
    elif k == 30:
        return c_mathpow(u)
    elif k == 31:
        return c_numpy(u)
    elif k == 32:
        return c_logistic(u)
    elif k == 33:
        return c_break_loop(u)
    elif k == 34:
        return c_exp_family(u)
    elif k == 35:
        return c_degrees(u)
    elif k == 36:
        return c_closure(u)
    elif k == 37:
        return c_deep(u)
    elif k == 38:
        return c_powers(u)
    elif k == 39:
        return c_rebind(u)
    return c_numpy_more(u)


# -- binary cases (u in (0.65, 1.35), b in (0.5, 2)) ------------------------------------

@njit
def b_mul_div(u, b):
    return u * b + u / b - b


@njit
def b_atan2(u, b):
    return math.atan2(u, b)


@njit
def b_pow(u, b):
    return u ** b


@njit
def b_hypot(u, b):
    return math.hypot(u, b)


@njit
def b_logbeta(u, b):
    return math.lgamma(u) + math.lgamma(b) - math.lgamma(u + b)


@njit
def b_branch(u, b):
    if u > b:
        return (u - b) ** 2 * b
    return math.sin(u * b)


@njit
def b_logaddexp(u, b):
    return max(u, b) + math.log1p(math.exp(-abs(u - b)))


@njit
def b_horner(u, b):
    s = 0.0
    for i in range(4):
        s = s * u + b ** i
    return s


@njit
def b_logbase(u, b):
    return math.log(u + 2.0) / math.log(b + 1.0)


@njit
def b_erf(u, b):
    return math.erf(u - b) * math.exp(-b)


@njit
def b_calls(u, b):
    return _square(b) * math.cos(u) + _horner(u, 3) * _level2(b, u)


def _r2(u, b):
    return u * u + b * b


def _logaddexp_h(u, b):
    s = _sig(u - b) * (1 - _sig(u - b))
    return s, -s, s


# (function, d1 -> (du, db), d2 -> (duu, dub, dbb), kinks: u - b where a branch changes)
BINARY = [
    (b_mul_div, lambda u, b: (b + 1 / b, u - u / b ** 2 - 1),
     lambda u, b: (0 * u, 1 - 1 / b ** 2, 2 * u / b ** 3), ()),
    (b_atan2, lambda u, b: (b / _r2(u, b), -u / _r2(u, b)),
     lambda u, b: (-2 * u * b / _r2(u, b) ** 2, (u * u - b * b) / _r2(u, b) ** 2,
                   2 * u * b / _r2(u, b) ** 2), ()),
    (b_pow, lambda u, b: (b * u ** (b - 1), u ** b * np.log(u)),
     lambda u, b: (b * (b - 1) * u ** (b - 2), u ** (b - 1) * (1 + b * np.log(u)),
                   u ** b * np.log(u) ** 2), ()),
    (b_hypot, lambda u, b: (u / np.hypot(u, b), b / np.hypot(u, b)),
     lambda u, b: (b * b / np.hypot(u, b) ** 3, -u * b / np.hypot(u, b) ** 3,
                   u * u / np.hypot(u, b) ** 3), ()),
    (b_logbeta, lambda u, b: (sp.digamma(u) - sp.digamma(u + b), sp.digamma(b) - sp.digamma(u + b)),
     lambda u, b: (_pg(1, u) - _pg(1, u + b), -_pg(1, u + b), _pg(1, b) - _pg(1, u + b)), ()),
    (b_branch, None, None, (0.0,)),
    (b_logaddexp, lambda u, b: (_sig(u - b), _sig(b - u)), _logaddexp_h, (0.0,)),
    (b_horner, None, None, ()),
    (b_logbase, lambda u, b: (1 / ((u + 2) * np.log(b + 1)),
                              -np.log(u + 2) / ((b + 1) * np.log(b + 1) ** 2)), None, ()),
    (b_erf, None, None, ()),
    (b_calls, None, None, ()),
]


@njit
def binary_table(a, b):
    k = math.floor(a)
    u = a - k + 0.5
    if k == 0:
        return b_mul_div(u, b)
    elif k == 1:
        return b_atan2(u, b)
    elif k == 2:
        return b_pow(u, b)
    elif k == 3:
        return b_hypot(u, b)
    elif k == 4:
        return b_logbeta(u, b)
    elif k == 5:
        return b_branch(u, b)
    elif k == 6:
        return b_logaddexp(u, b)
    elif k == 7:
        return b_horner(u, b)
    elif k == 8:
        return b_logbase(u, b)
    elif k == 9:
        return b_erf(u, b)
    return b_calls(u, b)


UNARY_OP = tg.elementwise(unary_table)
BINARY_OP = tg.elementwise(binary_table)


# -- the oracle: central differences of each case's own Python code ----------------------

def _stencil(f, u, h):
    """First and second derivatives of scalar f at u, 5-point central differences."""
    fm2, fm1, f0, fp1, fp2 = (f(u + k * h) for k in (-2, -1, 0, 1, 2))
    d1 = (fm2 - 8 * fm1 + 8 * fp1 - fp2) / (12 * h)
    d2 = (-fm2 + 16 * fm1 - 30 * f0 + 16 * fp1 - fp2) / (12 * h * h)
    return d1, d2


def _samples(lo, hi, kinks, n=9, away=0.05):
    u = np.linspace(lo, hi, n + 2)[1:-1] + 0.0123
    keep = [v for v in u if all(abs(v - k) > away for k in kinks)]
    return np.array(keep)


def _unary_points():
    xs, us, case = [], [], []
    for k, (fn, (lo, hi), _, _, kinks) in enumerate(UNARY):
        u = _samples(lo, hi, kinks)
        xs.append(u + 10.0 * k + 5.0)
        case += [k] * len(u)
    x = np.concatenate(xs)
    k = np.floor(x / 10.0)
    return x, x - 10.0 * k - 5.0, np.array(case)


def test_the_table_is_large_and_every_case_is_reached():
    assert len(UNARY) + len(BINARY) >= 30
    x, u, case = _unary_points()
    assert np.array_equal(np.floor(x / 10.0), case)
    assert set(case) == set(range(len(UNARY)))


def test_unary_cases_first_and_second_order():
    x, u, case = _unary_points()
    f = lambda t: UNARY_OP(t).sum()
    g = tg.grad(f)(x)
    g2, hv = tg.hvp(f, (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(g2[0], g)
    hv = hv[0]
    values = UNARY_OP(x)
    bad = []
    for k, (fn, _, d1, d2, _) in enumerate(UNARY):
        m = case == k
        uk = u[m]
        py = fn.py_func
        np.testing.assert_allclose(values[m], [py(v) for v in uk], rtol=1e-14, atol=1e-14)
        fd = np.array([_stencil(py, v, 1e-3 * max(1.0, abs(v))) for v in uk])
        for order, got, want_fd, closed in ((1, g[m], fd[:, 0], d1), (2, hv[m], fd[:, 1], d2)):
            if not np.allclose(got, want_fd, rtol=1e-6, atol=1e-6):
                bad.append(f"{fn.__name__} order {order}: {got} vs differences {want_fd}")
            want = closed(uk)
            if want is not None and not np.allclose(got, want, rtol=1e-9, atol=1e-11):
                bad.append(f"{fn.__name__} order {order}: {got} vs closed form {want}")
    assert not bad, "\n".join(bad)


def _one(x, order=1):
    x = np.array([x], dtype=np.float64)
    if order == 1:
        return tg.grad(lambda t: UNARY_OP(t).sum())(x)[0]
    return tg.hvp(lambda t: UNARY_OP(t).sum(), (x,), (np.ones(1),))[1][0][0]


def _at(case, u):
    return 10.0 * case + 5.0 + u


def test_special_points_take_their_branch():
    k = [fn for fn, *_ in UNARY].index
    # the series branch of sinc: right to second order at 0
    assert _one(_at(k(c_sinc), 0.0)) == 0.0
    assert _one(_at(k(c_sinc), 0.0), 2) == pytest.approx(-1.0 / 3.0, rel=1e-15)
    assert _one(_at(k(c_sinc), 5e-4)) == pytest.approx(-5e-4 / 3 + 5e-4 ** 3 / 30, rel=1e-14)
    # an x == 0 branch returning the limit: the constant's derivative at 0 exactly
    assert _one(_at(k(c_expm1_over), 0.0)) == 0.0
    assert _one(_at(k(c_expm1_over), 0.0), 2) == 0.0
    # max ties split evenly and abs has derivative 0 at 0: softplus'(0) = 1/2 exactly
    assert _one(_at(k(c_softplus), 0.0)) == 0.5
    assert _one(_at(k(c_copysign), 0.0)) == 0.0
    # the branch boundary itself belongs to the branch its test takes
    assert _one(_at(k(c_huber), ALPHA)) == ALPHA
    assert _one(_at(k(c_huber), ALPHA), 2) == 1.0
    assert _one(_at(k(c_huber), -1.0)) == -ALPHA
    assert _one(_at(k(c_pieces), 1.0)) == 1.0
    assert _one(_at(k(c_pieces), 1.0), 2) == 0.0
    # u ** i at u == 0 for i = 0, 1, 2, 3: exact, no 0 * inf
    assert _one(_at(k(c_powers), 0.0)) == 2.0
    assert _one(_at(k(c_powers), 0.0), 2) == 6.0


def _binary_points():
    rng = np.random.default_rng(3)
    As, Bs, case = [], [], []
    for k, (fn, d1, d2, kinks) in enumerate(BINARY):
        frac = np.linspace(0.15, 0.85, 7)
        b = rng.uniform(0.5, 2.0, frac.size)
        keep = [all(abs(f + 0.5 - bb - kk) > 0.05 for kk in kinks) for f, bb in zip(frac, b)]
        As.append(k + frac[keep])
        Bs.append(b[keep])
        case += [k] * int(np.sum(keep))
    a = np.concatenate(As)
    return a, np.concatenate(Bs), a - np.floor(a) + 0.5, np.array(case)


def test_binary_cases_first_and_second_order():
    a, b, u, case = _binary_points()
    assert set(case) == set(range(len(BINARY)))
    f = lambda s, t: BINARY_OP(s, t).sum()
    ga, gb = tg.grad(f, argnums=(0, 1))(a, b)
    ones, zeros = np.ones_like(a), np.zeros_like(a)
    # two directions in one pass: (1, 0) gives (d_uu, d_ub), (0, 1) gives (d_ub, d_bb)
    _, (ha, hb) = tg.hvp(f, (a, b), (np.stack([ones, zeros]), np.stack([zeros, ones])))
    bad = []
    h = 1e-3
    for k, (fn, d1, d2, _) in enumerate(BINARY):
        m = case == k
        uk, bk = u[m], b[m]
        py = fn.py_func
        for i, (uu, bb) in enumerate(zip(uk, bk)):
            du, duu = _stencil(lambda v: py(v, bb), uu, h)
            db, dbb = _stencil(lambda v: py(uu, v), bb, h)
            dub = _stencil(lambda v: _stencil(lambda w: py(w, v), uu, h)[0], bb, h)[0]
            got = (ga[m][i], gb[m][i], ha[0][m][i], ha[1][m][i], hb[0][m][i], hb[1][m][i])
            want = (du, db, duu, dub, dub, dbb)
            if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
                bad.append(f"{fn.__name__} at ({uu}, {bb}): {got} vs differences {want}")
        if d1 is not None:
            wu, wb = d1(uk, bk)
            if not (np.allclose(ga[m], wu, rtol=1e-10) and np.allclose(gb[m], wb, rtol=1e-10)):
                bad.append(f"{fn.__name__}: gradient vs closed form")
        if d2 is not None:
            wuu, wub, wbb = d2(uk, bk)
            if not (np.allclose(ha[0][m], wuu, rtol=1e-9, atol=1e-12)
                    and np.allclose(ha[1][m], wub, rtol=1e-9, atol=1e-12)
                    and np.allclose(hb[0][m], wub, rtol=1e-9, atol=1e-12)
                    and np.allclose(hb[1][m], wbb, rtol=1e-9, atol=1e-12)):
                bad.append(f"{fn.__name__}: Hessian vs closed form")
    assert not bad, "\n".join(bad)


def test_binary_op_broadcasts_and_takes_the_full_hessian():
    a = np.array([0.3, 1.4, 2.6])          # mul_div, atan2, pow
    b = np.array(1.3)
    H = tg.hessian(lambda v: BINARY_OP(v[:3], v[3]).sum())(np.append(a, b))
    u = a - np.floor(a) + 0.5
    _, dub, dbb = zip(*(BINARY[k][2](u[i], 1.3) for i, k in enumerate((0, 1, 2))))
    duu = [BINARY[k][2](u[i], 1.3)[0] for i, k in enumerate((0, 1, 2))]
    want = np.zeros((4, 4))
    want[np.arange(3), np.arange(3)] = duu
    want[3, :3] = want[:3, 3] = dub
    want[3, 3] = sum(dbb)
    np.testing.assert_allclose(H, want, rtol=1e-10, atol=1e-13)


def _pow_direct(a, b):
    return a ** b


@njit
def _pow_inner(u, w):
    return u ** w


def _pow_called(a, b):           # the step inside a called function
    return _pow_inner(a, b) + 0.0 * a


def _pow_reassigned(a, b):       # a parameter assigned in the body
    a = a * 1.0
    return a ** b


POW_OPS = {f.__name__: tg.elementwise(f) for f in (_pow_direct, _pow_called, _pow_reassigned)}


@pytest.mark.parametrize("name", sorted(POW_OPS))
def test_derived_power_at_a_negative_base_follows_the_built_in(name):
    """``a ** b`` derived from source at a < 0: the partial in b (z log a) is
    NaN, and it reaches b's gradient only -- a's is b a ** (b - 1), as the
    built-in ``**`` and PyTorch give (not NaN * 0 from b's zero tangent);
    second order too, and at a == 0 with b == 1 both give 0 for d2/da2."""
    op = POW_OPS[name]
    A, B = np.array([-2.0, -2.0, -0.5, 0.0, 0.0, 1.5]), np.array([3.0, 2.0, 2.0, 1.0, 2.0, 0.5])

    def grads(f, b_is_tensor=True):
        a = tg.tensor(A, requires_grad=True)
        b = tg.tensor(B, requires_grad=True) if b_is_tensor else B
        with np.errstate(invalid="ignore"):
            f(a, b).sum().backward()
        return a.grad.numpy(), (b.grad.numpy() if b_is_tensor else None)

    ga, gb = grads(op)
    ra, rb = grads(lambda a, b: a ** b)
    np.testing.assert_array_equal(ga[:2], [12.0, -4.0])
    np.testing.assert_allclose(ga, ra, rtol=1e-14)
    np.testing.assert_allclose(gb, rb, rtol=1e-14)           # NaN where a < 0
    assert np.isnan(gb[:3]).all() and not np.isnan(gb[3:]).any()
    np.testing.assert_allclose(grads(op, False)[0], ra, rtol=1e-14)   # b a constant
    for a, b in [(-2.0, 3.0), (-0.5, 2.0), (0.0, 1.0), (0.0, 2.0), (1.5, 0.5)]:
        with np.errstate(invalid="ignore", divide="ignore"):
            H = tg.hessian(lambda v: op(v[0], v[1]))(np.array([a, b]))
            R = tg.hessian(lambda v: v[0] ** v[1])(np.array([a, b]))
        np.testing.assert_allclose(H, R, rtol=1e-12, err_msg=f"a = {a}, b = {b}")
        assert np.isfinite(H[0, 0]) and H[0, 0] == R[0, 0]


def test_forward_mode_and_the_sweep_use_the_same_compiled_derivative():
    x, u, case = _unary_points()
    g = tg.grad(lambda t: UNARY_OP(t).sum())(x)
    _, jv = tg.jvp(UNARY_OP, (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(jv, g)
    # the derived derivative is a cfunc the sweep calls, as a hand-written one is
    _, cfuncs, addrs = UNARY_OP._compiled
    assert len(cfuncs) == 1 and addrs[1] == cfuncs[0].address != 0
    assert UNARY_OP(tg.tensor(x, requires_grad=True)).grad_fn.name() == "unary_tableBackward"


def test_generated_source_is_readable():
    src = inspect.getsource(UNARY_OP.derivative)
    assert src.startswith("def _tg_derivative(x, _tg_y):")
    assert UNARY_OP.derivative.__name__ == "unary_table_derivative"
    assert "_tg_d0_x = 1.0" in src and "if k == 0:" in src
    src2 = inspect.getsource(BINARY_OP.second_derivative)
    assert "return (" in src2


# -- single ops: the docs' example, overriding, plain Python callees --------------------

def squareplus_derivative(x, y):
    return 0.5 + 0.5 * x / math.sqrt(x * x + 4.0)


def huber_smooth(x):
    """docs/reference.md's example: a Huber loss whose quadratic part is cut at delta."""
    delta = 1.0
    if abs(x) <= delta:
        return 0.5 * x * x
    return delta * (abs(x) - 0.5 * delta)


def test_readme_example_and_hand_written_derivative_agree():
    derived = tg.elementwise(lambda x: 0.5 * (x + math.sqrt(x * x + 4.0)), name="sqp")
    by_hand = tg.elementwise(lambda x: 0.5 * (x + math.sqrt(x * x + 4.0)),
                             derivative=squareplus_derivative)
    x = np.linspace(-4, 4, 17)
    g1 = tg.grad(lambda t: derived(t).sum())(x)
    g2 = tg.grad(lambda t: by_hand(t).sum())(x)
    np.testing.assert_allclose(g1, g2, rtol=1e-15, atol=1e-16)
    H = tg.hessian(lambda t: derived(t).sum())(x[:4])
    np.testing.assert_allclose(H, np.diag(2.0 / (x[:4] ** 2 + 4.0) ** 1.5), rtol=1e-13)
    # the hand-written derivative's own derivative, derived from its source
    H2 = tg.hessian(lambda t: by_hand(t).sum())(x[:4])
    np.testing.assert_allclose(H2, np.diag(2.0 / (x[:4] ** 2 + 4.0) ** 1.5), rtol=1e-13)


def test_derivative_overrides_and_a_given_second_derivative_is_kept():
    huber = tg.elementwise(huber_smooth)
    x = np.array([-2.0, -0.5, 0.25, 3.0])
    np.testing.assert_array_equal(tg.grad(lambda t: huber(t).sum())(x), np.clip(x, -1, 1))
    np.testing.assert_array_equal(np.diag(tg.hessian(lambda t: huber(t).sum())(x)),
                                  [0, 1, 1, 0])
    # derivative= wins over derivation (here deliberately not the true derivative)
    fake = tg.elementwise(huber_smooth, derivative=lambda x, y: 7.0)
    np.testing.assert_array_equal(tg.grad(lambda t: fake(t).sum())(x), 7.0)
    # second_derivative= alone: the first is derived, the given second kept
    second = tg.elementwise(huber_smooth, second_derivative=lambda x, y: 3.0)
    np.testing.assert_array_equal(tg.grad(lambda t: second(t).sum())(x), np.clip(x, -1, 1))
    np.testing.assert_array_equal(np.diag(tg.hessian(lambda t: second(t).sum())(x)), 3.0)


# -- what cannot be differentiated raises when the op is defined -------------------------

W = [1.0, 2.0]


def _e_call(x):
    return cmath.exp(x)


def _e_attribute(x):
    return x.real * 2.0


def _e_try(x):
    try:
        return math.log(x)
    except ValueError:
        return 0.0


def _e_global(x):
    global W
    W = x
    return x


def _e_index(x):
    return W[0] * x


def _e_for(x):
    s = 0.0
    for w in (1.0, 2.0):
        s += w * x
    return s


def _e_list_global(x):
    return W * x


def _e_recursive(x):
    return _e_recursive(x - 1.0) if x > 0.0 else x


def _e_no_rule(x):
    return math.frexp(x)


def _e_or(x):
    return x or 1.0


def _e_keywords(x):
    return round(x, ndigits=2) + x


def _e_unknown_function(x):
    return np.linalg.norm(x)


def _e_reserved(x):
    np = 2.0
    return np * x


def _e_tuple(a, b):
    return a, b


def _inner_bad(v):
    s = 0.0
    with open("f") as fh:  # noqa: F841
        s = v
    return s


def _e_in_callee(x):
    return 2.0 * _inner_bad(x)


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize("fn, text, what", [
    (_e_attribute, "x.real", "attribute access x.real"),
    (_e_try, "try:", "try/except is not supported"),
    (_e_global, "global W", "a global statement"),
    (_e_index, "W[0]", "indexing is not supported"),
    (_e_for, "for w in", r"only `for name in range\(...\)` loops"),
    (_e_list_global, "W * x", "the global W is a list used as a value"),
    (_e_recursive, "_e_recursive(x - 1.0)", "a recursive call of _e_recursive"),
    (_e_no_rule, "frexp", "math.frexp has no derivative rule"),
    (_e_call, "cmath.exp", "a call of cmath.exp, which is not a math or numpy function"),
    (_e_or, "x or 1.0", "`and`/`or` on differentiated values"),
    (_e_keywords, "ndigits", "keyword and starred arguments"),
    (_e_unknown_function, "norm", r"a call of np.linalg.norm"),
    (_e_tuple, "return a, b", "returns a tuple"),
    (_e_reserved, "def _e_reserved", "a local variable named np"),
    (_e_in_callee, "with open", "a with statement"),
])
def test_what_cannot_be_derived_raises_at_definition(fn, text, what):
    src_fn = _inner_bad if fn is _e_in_callee else fn
    line = _line_of(src_fn, text)
    with pytest.raises(DeriveError) as e:
        tg.elementwise(fn)
    msg = str(e.value)
    assert f"derivative of {fn.__name__}:" in msg
    assert f"test_derived_derivatives.py:{line}:" in msg
    assert re.search(what, msg), msg
    assert "pass it as derivative=" in msg
    assert isinstance(e.value, TypeError) and isinstance(e.value, tg.DeriveError)


def test_unreadable_and_unsupported_functions_raise_at_definition():
    with pytest.raises(DeriveError, match="source cannot be read.*pass derivative="):
        tg.elementwise(eval("lambda x: x * x"))
    with pytest.raises(DeriveError, match="only Python functions"):
        tg.elementwise(math.sin)
    two = [lambda x: x * 2.0, lambda x: x * 3.0]   # two lambdas on one line: told apart
    ops = [tg.elementwise(f) for f in two]
    assert [inspect.getsource(o.derivative).count("2.0") for o in ops][0] >= 1
    with pytest.raises(TypeError, match="unary and binary"):
        tg.elementwise(lambda a, b, c: a)


def test_plain_python_callee_and_lambda():
    def helper(v):                # not @njit: the derivative compiles it itself
        return v * v

    # the derivative is derived (and compiled) even though Numba's forward
    # could not call a plain Python function: call the derivative directly
    op = tg.elementwise(lambda x: helper(x) + ALPHA * x)
    assert op.derivative(3.0, 0.0) == 6.75
    assert op.second_derivative(3.0, 0.0) == 2.0


# -- globals read when the op is defined and when it compiles ---------------------------

SCALE = 2.0


def _scaled(x):
    return SCALE * x * _helper(x)


@njit
def _helper(v):
    return v


@njit
def _cube(v):
    return v * v * v


def test_a_global_changed_before_the_first_call_is_read_again():
    global SCALE, _helper
    op = tg.elementwise(_scaled)
    old_helper = _helper
    SCALE = 3.0                  # before the first call: Numba's forward reads 3.0
    try:
        x = np.array([1.0, 2.0])
        np.testing.assert_array_equal(op(x), 3.0 * x * x)
        np.testing.assert_array_equal(tg.grad(lambda t: op(t).sum())(x), 6.0 * x)
        SCALE = 5.0              # after it: the compiled forward keeps 3.0, and so do
        _helper = _cube          # the derivatives, the second compiled only now
        np.testing.assert_array_equal(op(x), 3.0 * x * x)
        np.testing.assert_array_equal(np.diag(tg.hessian(lambda t: op(t).sum())(x)), 6.0)
    finally:
        SCALE, _helper = 2.0, old_helper


def test_a_closure_variable_or_callee_changed_before_the_first_call():
    c = 2.0

    def inner(v):
        return v * v

    def f(x):
        return c * inner(x)

    op = tg.elementwise(f)
    c = 4.0                      # noqa: F841  (read through the closure)

    def inner(v):                # noqa: F811  rebinds the closure's callee
        return v * v * v

    x = np.array([1.0, 2.0])
    # a plain Python callee cannot run in the Numba forward; the derivatives see both
    np.testing.assert_array_equal(op.derivative(2.0, 0.0), 8.0)   # before compiling: as read
    d = tg.ops.derive.ready(op.derivative)
    assert d(2.0, 0.0) == 48.0 and d is not op.derivative          # c = 4, inner = v ** 3
    assert tg.ops.derive.ready(op.second_derivative)(2.0, 0.0) == 48.0
    assert tg.ops.derive.ready(op.derivative) is d
    del x
