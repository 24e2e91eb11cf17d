"""More NumPy functions on complex tensors, written with the complex ops:
``float_power``, the splits (``split``, ``array_split``, ``hsplit``,
``vsplit``, ``dsplit``), ``diag``, ``diagflat``, ``fliplr``, ``flipud``,
``rot90``, ``sinc``, ``cross``, and ``numpy.linalg.tensorinv`` /
``tensorsolve``.

Each is either real-linear in its data (applied to the real and imaginary
parts: the splits, ``diag`` and the flips), bilinear (``cross``), a
reshape around the complex ``inv``/``solve`` of
:mod:`~tapegrad.ops.complex_linalg` (the tensor inverses), or a formula of
the elementwise complex ops (``sinc``, ``float_power``), so every transform
that works through those works through these.  Importing the module
registers them in :mod:`~tapegrad.ops.complex_tensor`'s tables.
"""
import numpy as np

from . import complex_linalg as ZL
from . import complex_tensor as Z
from . import elementwise as E
from .complex_core import _as_z, _split, _z
from .complex_linear import _bilinear, _linear_fn, _part
from .guarded import on_values


def _pieces(np_fn):
    """A real-linear function that returns a list of arrays (the splits):
    one call per part, the pieces paired up."""
    def run(*args, **kwargs):
        re = np_fn(*_part(args, 0), **{k: _part(v, 0) for k, v in kwargs.items()})
        im = np_fn(*_part(args, 1), **{k: _part(v, 1) for k, v in kwargs.items()})
        return [_z(r, i) for r, i in zip(re, im)]
    run.__name__ = np_fn.__name__
    return run


def float_power(a, b):
    """``numpy.float_power`` with a complex operand: ``a ** b`` in double
    precision (complex parts are float64 already)."""
    return Z.power(a, b)


def _where(mask, a, b):
    """``np.where(mask, a, b)`` of complex operands, part by part."""
    (ar, ai), (br, bi) = _split(a), _split(b)
    return _z(E.where(mask, ar, br), E.where(mask, 0.0 if ai is None else ai,
                                            0.0 if bi is None else bi))


#: Taylor coefficients of sin(t) / t in t^2, for |t| < 0.1 (error below 1e-21)
_SINC_SERIES = (1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800)


def sinc(z):
    """``numpy.sinc`` of a complex tensor: ``sin(pi z) / (pi z)``, 1 at 0.

    Where ``|pi z| < 0.1`` it is the Taylor series in ``(pi z)^2`` (a mask
    on the values, guarded in a trace), so the derivatives at and near 0 are
    exact; elsewhere the quotient."""
    z = _as_z(z)
    t = Z.multiply(z, np.pi)
    small = on_values(lambda a, b: np.hypot(a, b) < 0.1, t.real, t.imag)
    if not small.any():
        return Z.divide(Z.sin(t), t)
    ts = _where(small, t, 0.0)
    t2 = Z.multiply(ts, ts)
    series = _z(np.full(z.shape, _SINC_SERIES[-1]), None)
    for c in reversed(_SINC_SERIES[:-1]):
        series = Z.add(Z.multiply(series, t2), c)
    if small.all():
        return series
    tb = _where(small, 1.0, t)
    return _where(small, series, Z.divide(Z.sin(tb), tb))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """``numpy.cross`` with a complex operand: bilinear, so the real cross
    products of the parts."""
    return _bilinear(lambda x, y: np.cross(x, y, axisa=axisa, axisb=axisb, axisc=axisc,
                                           axis=axis), a, b)


def tensorinv(a, ind=2):
    """``numpy.linalg.tensorinv`` of a complex tensor: the complex ``inv`` of
    ``a`` as a square matrix of its first ``ind`` axes against the rest."""
    a = _as_z(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    old = tuple(a.shape)
    rows = int(np.prod(old[ind:]))
    if rows * rows != a.size:
        raise np.linalg.LinAlgError(
            f"tensorinv: the first {ind} axes of an array of shape {old} hold "
            f"{a.size // max(rows, 1)} elements and the rest {rows}; they must be equal")
    return ZL.inv(a.reshape(rows, -1)).reshape(old[ind:] + old[:ind])


def tensorsolve(a, b, axes=None):
    """``numpy.linalg.tensorsolve`` with a complex operand: solve
    ``tensordot(a, x, x.ndim) = b`` for x by the complex ``solve``."""
    a = _as_z(a) if Z.is_complex(a) else a
    b = _as_z(b) if Z.is_complex(b) else b
    if axes is not None:
        ndim = np.ndim(a)
        moved = [k % ndim for k in axes]
        a = np.transpose(a, [i for i in range(ndim) if i not in moved] + moved)
    shape = tuple(np.shape(a))
    old = shape[np.ndim(b):]
    n = int(np.prod(old))
    if int(np.prod(shape)) != n * n:
        raise np.linalg.LinAlgError(
            "Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == "
            "prod(a.shape[:b.ndim])")
    return np.reshape(ZL.solve(np.reshape(a, (n, n)), np.reshape(b, (n,))), old)


FUNCTIONS = {
    np.split: _pieces(np.split), np.array_split: _pieces(np.array_split),
    np.hsplit: _pieces(np.hsplit), np.vsplit: _pieces(np.vsplit),
    np.dsplit: _pieces(np.dsplit),
    np.diag: _linear_fn(np.diag), np.diagflat: _linear_fn(np.diagflat),
    np.fliplr: _linear_fn(np.fliplr), np.flipud: _linear_fn(np.flipud),
    np.rot90: _linear_fn(np.rot90),
    np.sinc: sinc, np.cross: cross,
    np.linalg.tensorinv: tensorinv, np.linalg.tensorsolve: tensorsolve,
}
Z.FUNCTIONS.update(FUNCTIONS)
Z.UFUNCS[np.float_power] = float_power
