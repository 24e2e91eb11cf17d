"""``numpy.fft`` on tensors: one host record per transform.

Every transform NumPy offers here is linear over the reals, so one record
type serves them all.  A record carries a *plan*: the sequence of 1-D steps
NumPy itself runs (crop or zero-pad an axis, ``fft``, ``ifft``, ``rfft``,
``irfft``), and its VJP runs the *adjoint plan* -- the adjoint steps in
reverse order -- with ``np.fft``, at NumPy's speed.  The adjoint of a plan is
a plan (``fft`` with norm ``"backward"`` has the adjoint ``ifft`` with norm
``"forward"``, and so on; ``rfft`` and ``irfft`` are each other's adjoints up
to a weight of 2 on the bins that stand for two conjugate ones), so the
tangent rule (forward mode, second order) is the plan again and a
``create_graph`` gradient is a record of the adjoint plan.

Complex values travel packed: a record's complex input or output is one real
array ``(2, *shape)`` -- real part, imaginary part -- so the compiled sweep
and its float64 kernels see only real arrays.  The record's parents are the
real and imaginary part tensors of the input (the real part alone for a real
input); its output is split into the two part tensors of a
:class:`~tapegrad.ops.complex_tensor.ComplexTensor` by two basic indexes.
"""
import operator

import numpy as np

from ..kernels import codes as C
from ..core.tape import current
from ..core.tensor import Tensor, _plain, _result
from . import complex_tensor as Z
from .elementwise import _operand
from ..core.registry import CONST, register

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


# -- plans ------------------------------------------------------------------------------
# A step is a tuple; axes are negative, so that a plan also runs on arrays with
# leading axes (packed parts, p tangent or adjoint vectors).
#   ("resize", axis, n_from, n_to)  crop or zero-pad the axis
#   ("fft" | "ifft", axis, norm)    complex transform
#   ("rfft", axis, n, norm)         real length n -> complex n // 2 + 1
#   ("irfft", axis, n, norm)        complex n // 2 + 1 -> real n (reads real parts
#                                   of the bins 0 and n / 2)
#   ("half", axis, n, f)            scale the bins of a length-n rfft that stand
#                                   for two conjugate bins by f
def _step_adjoint(step):
    kind, ax = step[0], step[1]
    if kind == "resize":
        return [("resize", ax, step[3], step[2])]
    if kind in ("fft", "ifft"):
        return [("ifft" if kind == "fft" else "fft", ax, _DUAL[step[2]])]
    if kind == "rfft":
        return [("half", ax, step[2], 0.5), ("irfft", ax, step[2], _DUAL[step[3]])]
    if kind == "irfft":
        return [("rfft", ax, step[2], _DUAL[step[3]]), ("half", ax, step[2], 2.0)]
    if kind == "half":
        return [step]
    raise ValueError(f"unknown FFT plan step {step!r}")


def adjoint(plan):
    """The plan of the adjoint (transpose over the reals) of ``plan``."""
    return tuple(s for step in reversed(plan) for s in _step_adjoint(step))


def _resize(a, ax, n):
    m = a.shape[ax]
    if n < m:
        idx = [slice(None)] * a.ndim
        idx[ax] = slice(0, n)
        return a[tuple(idx)]
    pad = [(0, 0)] * a.ndim
    pad[ax] = (0, n - m)
    return np.pad(a, pad)


def run(plan, a):
    """Apply ``plan`` to the real or complex ndarray ``a``."""
    for step in plan:
        kind, ax = step[0], step[1]
        if kind == "resize":
            if step[2] != step[3]:
                a = _resize(a, ax, step[3])
        elif kind == "fft":
            a = np.fft.fft(a, axis=ax, norm=step[2])
        elif kind == "ifft":
            a = np.fft.ifft(a, axis=ax, norm=step[2])
        elif kind == "rfft":
            a = np.fft.rfft(np.real(a), axis=ax, norm=step[3])
        elif kind == "irfft":
            a = np.fft.irfft(a, n=step[2], axis=ax, norm=step[3])
        elif kind == "half":
            n, f = step[2], step[3]
            idx = [slice(None)] * a.ndim
            idx[ax] = slice(1, (n + 1) // 2)
            a = a.copy()
            a[tuple(idx)] *= f
        else:
            raise ValueError(f"unknown FFT plan step {step!r}")
    return a


def complex_out(plan, complex_in):
    """Whether ``plan`` gives a complex array for a complex (or real) input."""
    c = complex_in
    for step in plan:
        if step[0] in ("fft", "ifft", "rfft"):
            c = True
        elif step[0] == "irfft":
            c = False
    return c


def _pack(a, is_complex, dtype=np.float64):
    """A complex array as real ``(2, *shape)``; a real one as itself (of
    ``dtype``)."""
    if is_complex:
        return np.stack([a.real, a.imag]).astype(dtype, copy=False)
    return np.ascontiguousarray(np.real(a), dtype=dtype)


def _result_dtype(parts):
    """NumPy's precision for an FFT of these parts: single (float32 parts,
    complex64 results) when every part is float16 or float32, else double.
    tapegrad computes in double either way and rounds single results."""
    dts = [np.asarray(t._data if isinstance(t, Tensor) else t).dtype for t in parts]
    single = all(d.kind == "f" and d.itemsize <= 4 for d in dts)
    return np.dtype(np.float32 if single else np.float64)


def _unpack(a, is_complex, lead=0):
    """The inverse of ``_pack``; ``lead`` axes (p vectors) come before the 2."""
    if is_complex:
        idx = (slice(None),) * lead
        return a[idx + (0,)] + 1j * a[idx + (1,)]
    return a


# -- the host record ------------------------------------------------------------------
def _info(h):
    """``(plan, in_complex, out_complex, in_shape, out_shape)`` of a record's host entry."""
    return h[0], h[1], h[2], h[3], h[-1]


def _fft_vjp(tape, adj, r, lead=0):
    plan, in_complex, out_complex, in_shape, out_shape = _info(tape.host[r])
    a0 = tape.arg0[r]
    parents = [int(q) for q in tape.args[a0:tape.arg0[r + 1]]]
    if all(tape.op[q] == CONST for q in parents):
        return
    p_shape = (adj[r].shape[0],) if lead else ()
    g = adj[r].reshape(p_shape + ((2,) if out_complex else ()) + tuple(out_shape))
    x = run(adjoint(plan), _unpack(g, out_complex, lead))
    parts = (np.real(x), np.imag(x)) if in_complex else (np.real(x),)
    for q, part in zip(parents, parts):
        if tape.op[q] != CONST:
            adj.add(q, np.ascontiguousarray(part))


def _fft_vjp_batched(tape, adj, r):
    _fft_vjp(tape, adj, r, lead=1)


def _fft_forward(xs, h):
    """The record's value from its parents' values ``xs`` (the replay's forward)."""
    plan, in_complex, out_complex = h[:3]
    a = xs[0] + 1j * xs[1] if in_complex else xs[0]
    return _pack(run(plan, a), out_complex)


def _fft_jvp(tape, tan, r):
    """Forward mode: the tangent of a linear map is the map of the tangent."""
    plan, in_complex, out_complex, in_shape, out_shape = _info(tape.host[r])
    parents = [int(q) for q in tape.args[tape.arg0[r]:tape.arg0[r + 1]]]
    dots = [tan.lead(q, in_shape) for q in parents]
    if all(d is None for d in dots):
        return
    p = tan.p
    dots = [np.zeros((p,) + tuple(in_shape)) if d is None else d for d in dots]
    a = dots[0] + 1j * dots[1] if in_complex else dots[0]
    y = run(plan, a)
    y = np.stack([y.real, y.imag], axis=1) if out_complex else np.real(y)
    tan.put(r, np.ascontiguousarray(y).reshape(p, -1))


def _fft_second(P, r):
    """Second order: a linear map has no curvature term."""


_FFT = register("FFT", C.K_HOST, C.FFT, None, host_vjp=_fft_vjp, batched_vjp=_fft_vjp_batched,
                reads="", replay=lambda xs, h: _fft_forward(xs, h), host_extra=3,
                jvp=_fft_jvp, second=_fft_second,
                graph_vjp="its backward runs the FFT on arrays, not as recorded ops")


def apply(plan, x, in_complex):
    """Record ``plan`` applied to ``x``: a ComplexTensor (``in_complex``) or a
    real Tensor / ndarray.  Returns a ComplexTensor or a real Tensor."""
    if in_complex:
        parts = (x.real, x.imag)
    else:
        parts = (x,)
    datas = [np.asarray(t._data if isinstance(t, Tensor) else t, dtype=np.float64)
             for t in parts]
    a = datas[0] + 1j * datas[1] if in_complex else datas[0]
    y = run(plan, a)
    out_complex = complex_out(plan, in_complex)
    dtype = _result_dtype(parts)
    need = any(isinstance(t, Tensor) and t._requires_grad for t in parts)
    tape = current()
    if not need or not tape.enabled:
        if out_complex:
            return Z.ComplexTensor(_plain(np.ascontiguousarray(y.real, dtype)),
                                   _plain(np.ascontiguousarray(y.imag, dtype)))
        return _plain(np.ascontiguousarray(np.real(y), dtype))
    packed = _pack(y, out_complex, dtype)
    r = tape.record(_FFT, tuple(_operand(tape, t) for t in parts), packed)
    # the replay reads one shape per parent after the first three entries
    tape.host[r] = (tuple(plan), bool(in_complex), bool(out_complex)) + \
        (datas[0].shape,) * len(parts) + (np.shape(y),)
    out = _result(tape, r, packed)
    if out_complex:
        return Z.ComplexTensor(out[0], out[1])
    return out


# -- NumPy's signatures -> plans ----------------------------------------------------------------
def _operand_of(a, name):
    """``(value, is_complex)`` for an FFT's input; refuses what is not an array."""
    if isinstance(a, Z.ComplexTensor):
        return a, True
    if isinstance(a, Tensor):
        if a.dtype.kind not in "biuf":
            raise TypeError(f"numpy.fft.{name}: tensors of dtype {a.dtype} are not supported")
        return a, False
    arr = np.asarray(a)
    if arr.dtype.kind == "c":
        return Z.ComplexTensor.constant(arr), True
    return arr, False


def _shape(x):
    return tuple(x.shape) if not isinstance(x, np.ndarray) else x.shape


def _norm(norm, name):
    if norm is None:
        return "backward"
    if norm not in _DUAL:
        raise ValueError(f'numpy.fft.{name}: invalid norm {norm!r}; use None, "backward", '
                         '"ortho" or "forward"')
    return norm


def _axis(ax, ndim, name):
    try:
        ax = operator.index(ax)
    except TypeError:
        raise TypeError(f"numpy.fft.{name}: axis must be an integer, got {ax!r}") from None
    if not -ndim <= ax < ndim:
        raise np.exceptions.AxisError(ax, ndim)
    return ax - ndim if ax >= 0 else ax


def _length(n, name):
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"numpy.fft.{name}: invalid number of data points ({n}) specified")
    return n


def _refuse_out(out, name):
    if out is not None:
        raise TypeError(f"numpy.fft.{name}(..., out=...) cannot write into an array when "
                        "tensors are involved; drop out= and use the returned tensor")


def _plan_1d(kind, shape, n, axis, norm, name):
    ax = _axis(axis, len(shape), name)
    m = shape[ax]
    norm = _norm(norm, name)
    if kind in ("fft", "ifft", "rfft"):
        n = m if n is None else _length(n, name)
        plan = [("resize", ax, m, n)] if n != m else []
        if kind == "rfft":
            return plan + [("rfft", ax, n, norm)]
        return plan + [(kind, ax, norm)]
    n = 2 * (m - 1) if n is None else _length(n, name)   # irfft
    plan = [("resize", ax, m, n // 2 + 1)] if n // 2 + 1 != m else []
    return plan + [("irfft", ax, n, norm)]


def _cook(shape, s, axes, invreal, name):
    """``(s, axes)`` as ``numpy.fft``'s n-dimensional transforms read them."""
    ndim = len(shape)
    shapeless = s is None
    if axes is None:
        if s is None:
            axes = list(range(-ndim, 0))
        else:
            axes = list(range(-len(s), 0))
    axes = [_axis(a, ndim, name) for a in axes]
    if s is None:
        s = [shape[a] for a in axes]
    s = list(s)
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    if invreal and shapeless:
        s[-1] = (shape[axes[-1]] - 1) * 2
    s = [shape[a] if v == -1 or v is None else _length(v, name) for v, a in zip(s, axes)]
    return s, axes


def _plan_nd(kind, shape, s, axes, norm, name):
    s, axes = _cook(shape, s, axes, kind == "irfft", name)
    if not axes:
        return []
    shape = list(shape)
    plan = []

    def one(k, n, ax, norm_):
        nonlocal plan
        sub = _plan_1d(k, tuple(shape), n, ax, norm_, name)
        plan += sub
        shape[ax] = n // 2 + 1 if k == "rfft" else n

    if kind in ("fft", "ifft"):
        for ii in reversed(range(len(axes))):   # NumPy's order
            one(kind, s[ii], axes[ii], norm)
    elif kind == "rfft":
        one("rfft", s[-1], axes[-1], norm)
        for ii in range(len(axes) - 2, -1, -1):
            one("fft", s[ii], axes[ii], norm)
    else:
        for ii in range(len(axes) - 1):
            one("ifft", s[ii], axes[ii], norm)
        one("irfft", s[-1], axes[-1], norm)
    return plan


def _transform_1d(kind, name):
    def fn(a, n=None, axis=-1, norm=None, out=None):
        _refuse_out(out, name)
        x, c = _operand_of(a, name)
        if kind == "rfft" and c:
            raise TypeError(f"numpy.fft.{name} needs a real input; use numpy.fft.fft for "
                            "complex tensors")
        return apply(_plan_1d(kind, _shape(x), n, axis, norm, name), x, c)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``numpy.fft.{name}`` of a tensor (real or complex), differentiable; "
                  "``n``, ``axis`` and ``norm`` as NumPy's.")
    return fn


def _transform_nd(kind, name, default_axes=None):
    def fn(a, s=None, axes=default_axes, norm=None, out=None):
        _refuse_out(out, name)
        x, c = _operand_of(a, name)
        if kind == "rfft" and c:
            raise TypeError(f"numpy.fft.{name} needs a real input; use numpy.fft.fftn for "
                            "complex tensors")
        return apply(_plan_nd(kind, _shape(x), s, axes, norm, name), x, c)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``numpy.fft.{name}`` of a tensor (real or complex), differentiable; "
                  "``s``, ``axes`` and ``norm`` as NumPy's.")
    return fn


fft = _transform_1d("fft", "fft")
ifft = _transform_1d("ifft", "ifft")
rfft = _transform_1d("rfft", "rfft")
irfft = _transform_1d("irfft", "irfft")
fftn = _transform_nd("fft", "fftn")
ifftn = _transform_nd("ifft", "ifftn")
rfftn = _transform_nd("rfft", "rfftn")
irfftn = _transform_nd("irfft", "irfftn")
fft2 = _transform_nd("fft", "fft2", (-2, -1))
ifft2 = _transform_nd("ifft", "ifft2", (-2, -1))
rfft2 = _transform_nd("rfft", "rfft2", (-2, -1))
irfft2 = _transform_nd("irfft", "irfft2", (-2, -1))


def _shift(sign, name):
    def fn(x, axes=None):
        from . import shape as S
        if isinstance(x, Z.ComplexTensor):
            return Z.ComplexTensor(fn(x.real, axes), fn(x.imag, axes))
        nd = np.ndim(x._data if isinstance(x, Tensor) else x)
        ax = tuple(range(nd)) if axes is None else (
            (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes))
        shp = np.shape(x._data if isinstance(x, Tensor) else x)
        shift = tuple(sign * (shp[a] // 2) for a in ax)
        return S.roll(x, shift, ax)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``numpy.fft.{name}`` of a tensor (real or complex): a roll."
    return fn


fftshift = _shift(1, "fftshift")
ifftshift = _shift(-1, "ifftshift")

#: numpy.fft function -> tapegrad function (real and complex tensors alike)
FUNCTIONS = {
    np.fft.fft: fft, np.fft.ifft: ifft, np.fft.rfft: rfft, np.fft.irfft: irfft,
    np.fft.fftn: fftn, np.fft.ifftn: ifftn, np.fft.rfftn: rfftn, np.fft.irfftn: irfftn,
    np.fft.fft2: fft2, np.fft.ifft2: ifft2, np.fft.rfft2: rfft2, np.fft.irfft2: irfft2,
    np.fft.fftshift: fftshift, np.fft.ifftshift: ifftshift,
}
Z.FUNCTIONS.update(FUNCTIONS)
