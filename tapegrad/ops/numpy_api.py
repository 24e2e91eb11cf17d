"""Which NumPy functions and ufuncs dispatch to which tapegrad op.

NumPy calls ``Tensor.__array_ufunc__``/``__array_function__`` for any
argument that is a Tensor; these tables route the call.  Functions whose
results carry no gradient (shapes, comparisons, argmax, ...) run on the plain
values.  Anything else raises a TypeError that names the function.
"""
import sys

import numpy as np

from ..core.tensor import SCIPY_COUNTERPARTS
from . import arrays as A
from . import complex_linalg as ZL
from . import complex_lstsq  # noqa: F401  (registers complex qr, pinv, lstsq)
from . import complex_functions  # noqa: F401  (registers complex split, sinc, cross, ...)
from . import complex_tensor as Z
from . import composite as K
from . import elementwise as E
from . import fft as F
from . import matrix as L
from . import numeric as N
from . import reductions as Rd
from . import shape as S
from . import special as Sp
from . import statistics as St

UFUNCS = {
    # the ops of one and of two tensors that are NumPy ufuncs (kernels/formulas.py's rows)
    **{getattr(np, name): fn for name, fn in (*E.UNARY.items(), *E.BINARY.items())
       if isinstance(getattr(np, name, None), np.ufunc)},
    np.radians: E.radians, np.degrees: E.degrees, np.matmul: L.matmul,
    np.less: E.less, np.less_equal: E.less_equal, np.greater: E.greater,
    np.greater_equal: E.greater_equal, np.equal: E.equal,
    np.not_equal: E.not_equal, np.conjugate: N.conjugate,
}
if isinstance(getattr(np, "vecdot", None), np.ufunc):  # a ufunc since NumPy 2.0
    UFUNCS[np.vecdot] = K.vecdot

#: ``scipy.special`` ufuncs, by ``ufunc.__name__`` (digamma's is ``psi``): a
#: ufunc is routed here only if it is the object of that name in an already
#: imported ``scipy.special`` (tapegrad never imports SciPy)
SPECIAL_UFUNCS = {
    "expit": Sp.expit, "logit": Sp.logit, "log_expit": Sp.log_expit, "erf": Sp.erf,
    "erfc": Sp.erfc, "erfinv": Sp.erfinv, "xlogy": Sp.xlogy, "xlog1py": Sp.xlog1py,
    "ndtr": Sp.ndtr, "log_ndtr": Sp.log_ndtr, "gammaln": Sp.gammaln, "psi": Sp.digamma,
    "i0e": Sp.i0e, "i1e": Sp.i1e,
}


def scipy_special_name(ufunc):
    """``"scipy.special.<name>"`` if ``ufunc`` is one of an imported
    ``scipy.special``'s, else None."""
    sp = sys.modules.get("scipy.special")
    name = getattr(ufunc, "__name__", None)
    if sp is None or name is None:
        return None
    if getattr(sp, name, None) is ufunc:
        return f"scipy.special.{name}"
    for alias in ("digamma",) if name == "psi" else ():
        if getattr(sp, alias, None) is ufunc:
            return f"scipy.special.{alias}"
    return None


def special_ufunc(ufunc):
    """The tapegrad function for a ``scipy.special`` ufunc, or None."""
    if scipy_special_name(ufunc) is None:
        return None
    return SPECIAL_UFUNCS.get(ufunc.__name__)


def ufunc_name(ufunc):
    """The qualified name of a ufunc for error messages: ``numpy.sin``,
    ``scipy.special.expit``, else ``the ufunc <name>``."""
    name = getattr(ufunc, "__name__", repr(ufunc))
    if getattr(np, name, None) is ufunc:
        return f"numpy.{name}"
    return scipy_special_name(ufunc) or f"the ufunc {name}"


REDUCE_UFUNCS = {
    np.add: Rd.sum, np.multiply: Rd.prod, np.maximum: Rd.max, np.minimum: Rd.min,
}

HANDLED_FUNCTIONS = {
    np.sum: Rd.sum, np.mean: Rd.mean, np.prod: Rd.prod, np.max: Rd.max,
    np.min: Rd.min, np.amax: Rd.max, np.amin: Rd.min,
    np.reshape: S.reshape, np.ravel: S.ravel, np.transpose: S.transpose,
    np.swapaxes: S.swapaxes, np.squeeze: S.squeeze,
    np.expand_dims: S.expand_dims, np.broadcast_to: S.broadcast_to,
    np.concatenate: S.concatenate, np.stack: S.stack, np.split: S.split,
    np.moveaxis: S.moveaxis, np.flip: S.flip, np.fliplr: S.fliplr, np.flipud: S.flipud,
    np.roll: S.roll, np.tile: S.tile, np.repeat: S.repeat, np.diagonal: S.diagonal,
    np.take: S.take, np.take_along_axis: S.take_along_axis, np.sort: S.sort,
    np.triu: S.triu, np.tril: S.tril, np.diag: S.diag, np.pad: S.pad,
    np.where: E.where, np.clip: K.clip, np.dot: K.dot, np.abs: E.absolute,
    np.round: E.round, np.around: E.round, np.cumsum: Rd.cumsum, np.cumprod: Rd.cumprod,
    np.var: K.var, np.std: K.std, np.ptp: K.ptp, np.average: K.average,
    np.nansum: K.nansum, np.nanmean: K.nanmean, np.nanmax: K.nanmax, np.nanmin: K.nanmin,
    np.trace: K.trace, np.atleast_1d: K.atleast_1d, np.atleast_2d: K.atleast_2d,
    np.atleast_3d: K.atleast_3d, np.hstack: K.hstack, np.vstack: K.vstack,
    np.dstack: K.dstack, np.column_stack: K.column_stack, np.array_split: K.array_split,
    np.hsplit: K.hsplit, np.vsplit: K.vsplit, np.linalg.norm: K.norm,
    np.linalg.inv: L.inv, np.linalg.solve: L.solve, np.linalg.det: L.det,
    np.linalg.slogdet: L.slogdet, np.linalg.cholesky: L.cholesky, np.linalg.eigh: L.eigh,
    np.einsum: L.einsum, np.outer: K.outer, np.vdot: K.vdot,
    np.tensordot: K.tensordot, np.inner: K.inner, np.kron: K.kron, np.select: K.select,
    np.linalg.qr: L.qr, np.linalg.svd: L.svd, np.linalg.svdvals: L.svdvals,
    np.linalg.pinv: L.pinv, np.linalg.lstsq: L.lstsq, np.linalg.eigvalsh: L.eigvalsh,
    np.linalg.matrix_power: K.matrix_power, np.linalg.multi_dot: K.multi_dot,
    np.linalg.tensorinv: K.tensorinv, np.linalg.tensorsolve: K.tensorsolve,
    np.linalg.matrix_norm: K.matrix_norm, np.linalg.vector_norm: K.vector_norm,
    np.linalg.matrix_transpose: K.matrix_transpose, np.linalg.cond: K.cond,
    np.linalg.matmul: L.matmul, np.linalg.diagonal: K.linalg_diagonal,
    np.linalg.trace: K.linalg_trace, np.linalg.vecdot: K.vecdot,
    np.linalg.tensordot: K.linalg_tensordot, np.linalg.outer: K.linalg_outer,
    # ops/numeric.py
    np.rot90: N.rot90, np.rollaxis: N.rollaxis, np.dsplit: N.dsplit, np.append: N.append,
    np.nan_to_num: N.nan_to_num, np.sinc: N.sinc, np.diff: N.diff, np.ediff1d: N.ediff1d,
    np.cross: N.cross, np.trapezoid: N.trapezoid, np.polyval: N.polyval,
    np.convolve: N.convolve, np.correlate: N.correlate, np.interp: N.interp,
    np.gradient: N.gradient, np.linspace: N.linspace, np.geomspace: N.geomspace,
    np.concatenate: N.concatenate, np.stack: N.stack, np.vstack: N.vstack_,
    np.hstack: N.hstack_, np.where: N.where, np.real: N.real, np.imag: N.imag,
    np.real_if_close: N.real_if_close,
    np.angle: N.angle, np.partition: N.partition,
}
if hasattr(np, "row_stack"):  # deprecated in NumPy 2.0
    HANDLED_FUNCTIONS[np.row_stack] = N.row_stack


def solve(a, b):
    """``numpy.linalg.solve``: a complex matrix or right-hand side (with a
    real matrix too) goes to the complex solve."""
    if Z.is_complex(a) or Z.is_complex(b):
        return ZL.solve(a, b)
    return L.solve(a, b)


HANDLED_FUNCTIONS[np.linalg.solve] = solve
# a real tensor's eigenvalues may be complex: the complex module's eig gives
# NumPy's real or complex results
HANDLED_FUNCTIONS[np.linalg.eig] = ZL.eig
HANDLED_FUNCTIONS[np.linalg.eigvals] = ZL.eigvals


#: functions of shapes, dtypes and identity only: nothing a replay can change
_STATIC = {np.shape, np.ndim, np.size, np.result_type, np.iscomplexobj, np.isrealobj,
           np.may_share_memory, np.shares_memory}


def _plain_values(fn):
    """Run ``fn`` on the tensors' values: its result carries no gradient.

    In a trace the result depends on the traced values, so it is guarded
    (:func:`composite.on_values`).
    """
    if fn in _STATIC:
        def run(*args, **kwargs):
            from ..core.tensor import Tensor
            conv = lambda x: np.asarray(x._data) if isinstance(x, Tensor) else x  # noqa: E731
            args = [conv(a) if not isinstance(a, (list, tuple)) else type(a)(conv(x) for x in a)
                    for a in args]
            return fn(*args, **{k: conv(v) for k, v in kwargs.items()})
    else:
        def run(*args, **kwargs):
            return K.on_values(fn, *args, **kwargs)
    run.__name__ = run.__qualname__ = getattr(fn, "__name__", "run")
    run.plain_values = True  # docs/make_function_table.py lists these as plain values
    return run


for _f in (np.shape, np.ndim, np.size, np.argmax, np.argmin, np.argsort,
           np.nonzero, np.isnan, np.isfinite, np.isinf, np.allclose, np.isclose,
           np.array_equal, np.result_type, np.count_nonzero, np.any, np.all,
           np.searchsorted, np.iscomplexobj, np.isrealobj, np.may_share_memory,
           np.shares_memory, np.array_repr, np.array_str, np.linalg.matrix_rank,
           np.flatnonzero, np.argwhere, np.digitize, np.argpartition, np.lexsort,
           np.array_equiv, np.nanargmax, np.nanargmin, np.isposinf, np.isneginf):
    HANDLED_FUNCTIONS[_f] = _plain_values(_f)
HANDLED_FUNCTIONS.update(F.FUNCTIONS)  # numpy.fft: ops/fft.py
HANDLED_FUNCTIONS[np.sort] = K.sort
HANDLED_FUNCTIONS[np.copyto] = S.copyto
HANDLED_FUNCTIONS[np.copy] = lambda a, order="K", subok=False: a.copy()  # Tensor.copy
HANDLED_FUNCTIONS[np.unique] = K.unique
# statistics (ops/statistics.py) and array builders (ops/arrays.py)
HANDLED_FUNCTIONS.update({
    np.median: St.median, np.quantile: St.quantile, np.percentile: St.percentile,
    np.cov: St.cov, np.corrcoef: St.corrcoef, np.polyfit: St.polyfit, np.vander: St.vander,
    np.histogram: St.histogram, np.meshgrid: A.meshgrid,
    np.broadcast_arrays: A.broadcast_arrays, np.insert: A.insert, np.delete: A.delete,
    np.diagflat: A.diagflat, np.fill_diagonal: A.fill_diagonal, np.piecewise: A.piecewise,
    np.apply_along_axis: A.apply_along_axis, np.fft.hfft: A.hfft, np.fft.ihfft: A.ihfft,
})
Z.FUNCTIONS[np.fft.hfft] = A.hfft
Z.FUNCTIONS[np.fft.ihfft] = A.ihfft


# ufuncs whose results carry no gradient (predicates, bit and logic ops);
# guarded in a trace like the functions above
PLAIN_UFUNCS = {
    f: _plain_values(f) for f in (
        np.isnan, np.isfinite, np.isinf, np.signbit, np.logical_and, np.logical_or,
        np.logical_not, np.logical_xor)
}


def unsupported(name, args):
    ours = ""
    if name.startswith("scipy.") and name.removeprefix("scipy.") in SCIPY_COUNTERPARTS:
        ours = f" Write tapegrad.{name} (same arguments), which is differentiable."
    raise TypeError(
        f"tapegrad cannot differentiate {name} yet.{ours} To compute it on plain "
        f"values, pass t.numpy() (or np.asarray(t.detach())) instead of the tensor; "
        f"the result will not be differentiable.")
