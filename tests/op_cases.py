"""The op-case table: one row per differentiable op in the registry,
name -> (hypothesis strategy, function of (tensors..., **params)).

Shapes, broadcasting, axes and values are drawn by hypothesis; values are
kept inside each op's smooth domain (away from kinks and ties), where a
finite difference is a valid oracle.
"""
import itertools
import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

# value domains: callables (rng, shape) -> array
ANY = lambda rng, s: rng.uniform(-2, 2, s)  # noqa: E731
POS = lambda rng, s: rng.uniform(0.5, 2.0, s)  # noqa: E731
UNIT = lambda rng, s: rng.uniform(-0.9, 0.9, s)  # noqa: E731
ABOVE1 = lambda rng, s: rng.uniform(1.2, 3.0, s)  # noqa: E731
FRACTION = lambda rng, s: rng.uniform(0.2, 0.8, s)  # noqa: E731  (a / b stays in (0, 1))
DIVISOR = lambda rng, s: rng.uniform(1.0, 2.0, s)  # noqa: E731


def _off_integers(rng, s):
    """Values at least 0.1 away from the jumps of floor/ceil/trunc/rint/round."""
    return rng.integers(-3, 3, s) + rng.uniform(0.1, 0.4, s) + rng.choice([0.0, 0.5], s)
OFF_POLES = lambda rng, s: rng.integers(-3, 3, s) + rng.uniform(0.2, 0.8, s)  # noqa: E731  (gamma's poles)
NONZERO = lambda rng, s: rng.uniform(0.3, 2.0, s) * rng.choice([-1.0, 1.0], s)  # noqa: E731


_PHASE = itertools.count()


def _distinct(rng, s):
    """Values with no ties and gaps far above the finite-difference step,
    within one array and between the arrays of one case: successive calls
    sit on grids shifted by different phases (two operands of maximum on one
    grid could meet within the step of a finite difference of the gradient,
    whose difference quotient would then span the kink)."""
    n = int(np.prod(s))
    phase = (next(_PHASE) % 8) * 0.045
    return (rng.permutation(n) * 0.37 - n * 0.15 + phase).reshape(s) + rng.uniform(0, 0.01, s)


shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
nonempty = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


@st.composite
def unary(draw, domain=ANY):
    return (draw(shapes),), (domain,), {}


@st.composite
def binary(draw, domains=(ANY, ANY)):
    bs = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                max_side=4))
    return bs.input_shapes, domains, {}


@st.composite
def reduction(draw, domain=ANY):
    shape = draw(shapes)
    axis = draw(st.one_of(st.none(), hnp.valid_tuple_axes(len(shape)),
                          *([st.integers(-len(shape), len(shape) - 1)] if shape else [])))
    return (shape,), (domain,), dict(axis=axis, keepdims=draw(st.booleans()))


@st.composite
def axis_of(draw, min_dims=1):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, max_side=4))
    return (shape,), (ANY,), dict(axis=draw(st.integers(-len(shape), len(shape) - 1)))


@st.composite
def perm(draw):
    shape = draw(shapes)
    return (shape,), (ANY,), dict(axes=tuple(draw(st.permutations(range(len(shape))))))


@st.composite
def index_case(draw, kinds=("int", "slice", "mask", "fancy", "repeat", "mixed")):
    """A shape and a key of one of ``kinds``: basic (int, slice, mixed: a
    Slice record) or advanced (mask, fancy, repeat: an Index record)."""
    shape = draw(nonempty)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        key = tuple(int(rng.integers(-n, n)) for n in shape[:draw(st.integers(1, len(shape)))])
        if all(n == 1 for n in shape[:len(key)]):  # a view (a reshape), not a gather:
            key = (slice(None, None, -1),) + key[1:]  # test_shape_indexing covers those
    elif kind == "slice":
        key = tuple(slice(int(rng.integers(0, n)), None, int(rng.choice([1, 2, -1])))
                    for n in shape)
        key = (Ellipsis,) + key[1:] if len(key) > 1 and draw(st.booleans()) else key
    elif kind == "mask":
        key = rng.random(shape) < 0.5
    elif kind == "fancy":
        key = (rng.integers(0, shape[0], 5),) + ((rng.integers(0, shape[1], 5),)
                                                  if len(shape) > 1 else ())
    elif kind == "repeat":  # repeated indices must accumulate
        key = np.array([0, 0, shape[0] - 1, 0])
    else:
        # new axes and ... beside a selection (a key of new axes and full slices
        # alone is a view with no index map: test_shape_indexing covers it)
        key = ((None, slice(None, None, -1), ...) if len(shape) < 3 else
               (slice(1 if shape[0] > 1 else 0, None), 0, None))  # never empty
    return (shape,), (ANY,), dict(key=key)


@st.composite
def index_put_case(draw):
    (shape,), _, params = draw(index_case())
    target = np.zeros(shape)[params["key"]].shape
    vshape = draw(st.sampled_from([(), target]))
    return (shape, vshape), (ANY, ANY), params


EINSUM_SPECS = [("ij,jk->ik", (2, 3), (3, 4)), ("ij,ij->", (2, 3), (2, 3)),
                ("ijk,kj->i", (2, 3, 4), (4, 3)), ("i,j", (3,), (2,)),
                ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)), ("ij->j", (3, 4), None),
                ("ijk,i->k", (2, 3, 2), (2,)),
                # ellipsis broadcasting, size-1 axes stretched, diagonals
                ("...ij,...jk->...ik", (2, 2, 3), (3, 2)), ("...ij,...jk", (2, 1, 2, 3), (3, 3, 2)),
                ("i...,i...->...", (3, 2), (3, 1)), ("bij,bjk->bik", (1, 2, 3), (2, 3, 2)),
                ("ii->i", (3, 3), None), ("ii", (3, 3), None), ("iij->j", (2, 2, 3), None),
                ("...ii->...i", (2, 3, 3), None), ("ii,i->i", (3, 3), (3,)),
                ("iji,j", (2, 3, 2), (3,)), ("ij,...jj->...i", (2, 3), (2, 3, 3))]


@st.composite
def einsum_case(draw):
    spec, sa, sb = draw(st.sampled_from(EINSUM_SPECS))
    shapes_ = (sa,) if sb is None else (sa, sb)
    return shapes_, (ANY,) * len(shapes_), dict(spec=spec)


@st.composite
def joined(draw, stack=False):
    base = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    axis = draw(st.integers(0, len(base) - (0 if stack else 1)))
    k = draw(st.integers(1, 3))
    shapes_ = []
    for _ in range(k):
        s = list(base)
        if not stack:
            s[axis] = draw(st.integers(1, 3))
        shapes_.append(tuple(s))
    return tuple(shapes_), (ANY,) * k, dict(axis=axis)


@st.composite
def matmul_case(draw):
    n, k, m = (draw(st.integers(1, 4)) for _ in range(3))
    batch = draw(st.sampled_from([(), (2,), (3, 1)]))
    form = draw(st.sampled_from(["mm", "vm", "mv", "vv", "batched", "bcast"]))
    a, b = {"mm": ((n, k), (k, m)), "vm": ((k,), (k, m)), "mv": ((n, k), (k,)),
            "vv": ((k,), (k,)), "batched": (batch + (n, k), batch + (k, m)),
            "bcast": (batch + (n, k), (k, m))}[form]
    return (a, b), (ANY, ANY), {}


@st.composite
def matrix_case(draw, min_dims=2):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=1, max_side=4))
    return (shape,), (ANY,), dict(k=draw(st.integers(-2, 2)))


@st.composite
def pad_case(draw):
    shape = draw(nonempty)
    mode = draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    if mode == "reflect":  # reflect needs at least 2 elements per padded axis
        widths = tuple(w if n > 1 else (0, 0) for w, n in zip(widths, shape))
    return (shape,), (ANY,), dict(pad_width=widths, mode=mode)


def _well_conditioned(rng, s):
    """Random matrices plus a multiple of the identity: far from singular."""
    n = s[-1]
    return rng.uniform(-1, 1, s) + 2.0 * n * np.eye(n) * rng.choice([-1.0, 1.0])


def _spd(rng, s):
    """Symmetric positive definite matrices."""
    b = rng.uniform(-1, 1, s)
    return b @ np.swapaxes(b, -1, -2) + s[-1] * np.eye(s[-1])


def _sym(a):
    return (a + np.swapaxes(a, -1, -2)) * 0.5


def _distinct_sv(rng, s):
    """Matrices with well-separated singular values in [1, 3.5] (random
    singular vectors): full rank, and SVD / QR gradients well defined."""
    m, n = s[-2], s[-1]
    k = min(m, n)
    U = np.linalg.qr(rng.standard_normal(s[:-2] + (m, k)))[0]
    V = np.linalg.qr(rng.standard_normal(s[:-2] + (n, k)))[0]
    sv = 1.0 + 0.6 * rng.permutation(k) + rng.uniform(0, 0.1, s[:-2] + (k,))
    return (U * sv[..., None, :]) @ np.swapaxes(V, -1, -2)


@st.composite
def rect_case(draw, **choices):
    m, n = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = draw(st.sampled_from([(), (2,), (2, 1)]))
    params = {k: draw(st.sampled_from(v(m, n) if callable(v) else v)) for k, v in choices.items()}
    return (batch + (m, n),), (_distinct_sv,), params


@st.composite
def lstsq_case(draw):
    m, n = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    b = draw(st.sampled_from([(m,), (m, 2)]))
    return ((m, n), b), (_distinct_sv, ANY), {}


def _svd_fn(a, full_matrices, hermitian):
    """Invariant to the signs of singular-vector pairs; only the first
    min(m, n) columns of U (rows of Vh) are determined."""
    hermitian = hermitian and a.shape[-1] == a.shape[-2]
    if hermitian:  # symmetric positive definite, singular values s**2 well apart
        a = _sym(a @ np.swapaxes(a, -1, -2))
    U, S, Vh = np.linalg.svd(a, full_matrices=full_matrices, hermitian=hermitian)
    k = S.shape[-1]
    U, Vh = U[..., :k], Vh[..., :k, :]
    return (_weighted(S).sum() + _weighted(U ** 2).sum() + _weighted(Vh ** 2).sum()
            + _weighted((U * S[..., None, :]) @ Vh).sum() + _weighted(U @ Vh).sum())


def _qr_fn(a, mode):
    if mode == "r":
        return _weighted(np.linalg.qr(a, mode))
    Q, R = np.linalg.qr(a, mode)
    return _weighted(Q).sum() + _weighted(R).sum()


def _lstsq_fn(a, b):
    x, res, rank, s = np.linalg.lstsq(a, b)
    return _weighted(x).sum() + (_weighted(res) if res.size else res).sum() * 3.0


@st.composite
def square_case(draw, rhs=False, values=None):
    n = draw(st.integers(1, 4))
    batch = draw(st.sampled_from([(), (2,), (2, 1)]))
    a = batch + (n, n)
    if not rhs:
        return (a,), (values or _well_conditioned,), {}
    b = draw(st.sampled_from([(n,), batch + (n, 2)])) if batch else draw(
        st.sampled_from([(n,), (n, 3)]))
    return (a, b), (_well_conditioned, ANY), {}


class _SinCos(tg.Function):
    """A user-defined op with two outputs, for the gradient table."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return np.sin(x) * scale, np.cos(x)

    @staticmethod
    def backward(ctx, gs, gc):
        (x,) = ctx.saved_tensors
        return gs * np.cos(x) * ctx.scale - gc * np.sin(x), None


def _softplus_derivative(x, y):
    return 1.0 / (1.0 + math.exp(-x))


@tg.elementwise(derivative=_softplus_derivative)
def _softplus(x):
    """A user-registered unary op (VJP via its compiled derivative)."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@tg.elementwise(derivative=lambda a, b, y: (math.sin(b), a * math.cos(b) + 2.0 * b))
def _a_sin_b(a, b):
    """A user-registered binary op with both partials non-trivial."""
    return a * math.sin(b) + b * b


#: ops whose nodes are named by the user, not by the registry
_NODE_NAMES = {"Function": "_SinCos", "UserElementwise": "_softplus",
               "UserElementwiseBinary": "_a_sin_b"}


def _weights(x):
    return np.arange(1, x.size + 1, dtype=float).reshape(x.shape)


def _weighted(t):
    """t times distinct weights, so a wrong permutation changes the gradient."""
    return t * _weights(t.numpy())


# name -> (strategy, function of (tensors..., **params))
CASES = {
    "Neg": (unary(), lambda x: -x),
    "UserElementwise": (unary(), lambda x: _weighted(_softplus(x))),
    "UserElementwiseBinary": (binary(), lambda a, b: _weighted(_a_sin_b(a, b))),
    "Positive": (unary(), lambda x: +x),
    "Exp": (unary(), tg.exp),
    "Log": (unary(POS), np.log),
    "Log1p": (unary(POS), tg.log1p),
    "Expm1": (unary(), tg.expm1),
    "Sqrt": (unary(POS), np.sqrt),
    "Square": (unary(), tg.square),
    "Sin": (unary(), np.sin),
    "Cos": (unary(), tg.cos),
    "Tan": (unary(UNIT), tg.tan),
    "Tanh": (unary(), np.tanh),
    "Sinh": (unary(), tg.sinh),
    "Cosh": (unary(), tg.cosh),
    "Asin": (unary(UNIT), tg.arcsin),
    "Acos": (unary(UNIT), np.arccos),
    "Atan": (unary(), tg.arctan),
    "Abs": (unary(NONZERO), abs),
    "Sign": (unary(NONZERO), lambda x: tg.sign(x) * x),
    "AddScalar": (unary(), lambda x: (x + 1.5) - 0.25),
    "MulScalar": (unary(), lambda x: 2.5 * x * -3),
    "DivScalar": (unary(), lambda x: x / 3.0),
    "RsubScalar": (unary(), lambda x: 2.0 - x),
    "RdivScalar": (unary(NONZERO), lambda x: 2.0 / x),
    "PowScalar": (unary(POS), lambda x: x ** 2.5 + x ** 3 + x ** 0),
    "RpowScalar": (unary(), lambda x: 2.0 ** x),
    "Add": (binary(), lambda a, b: a + b),
    "Sub": (binary(), lambda a, b: a - b),
    "Mul": (binary(), lambda a, b: a * b),
    "Div": (binary((ANY, NONZERO)), lambda a, b: a / b),
    "Pow": (binary((POS, ANY)), lambda a, b: a ** b),
    "Maximum": (binary((_distinct, _distinct)), np.maximum),
    "Minimum": (binary((_distinct, _distinct)), tg.minimum),
    "Where": (binary(), lambda a, b: tg.where(a.numpy() > 0, a * b, b)),
    "Sum": (reduction(), lambda x, axis, keepdims: x.sum(axis=axis, keepdims=keepdims)),
    "Mean": (reduction(), lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims)),
    "Prod": (reduction(), lambda x, axis, keepdims: tg.prod(x, axis=axis, keepdims=keepdims)),
    "Max": (reduction(_distinct), lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims)),
    "Min": (reduction(_distinct), lambda x, axis, keepdims: x.min(axis=axis, keepdims=keepdims)),
    "Logsumexp": (reduction(), lambda x, axis, keepdims: tg.logsumexp(x, axis=axis, keepdims=keepdims)),
    "Reshape": (unary(), lambda x: x.reshape(-1) * _weights(x.reshape(-1))),
    "Squeeze": (unary(), lambda x: tg.squeeze(tg.expand_dims(x, 0) * 2.0)),
    "Unsqueeze": (unary(), lambda x: tg.expand_dims(x, 0) * 2.0),
    "ToCopy": (unary(), lambda x: tg.astype(x * 2.0, np.float64) * 3.0),  # float32: test_dtypes
    "Transpose": (perm(), lambda x, axes: np.transpose(x, axes) * _weights(np.transpose(x.numpy(), axes))),
    "Index": (index_case(kinds=("mask", "fancy", "repeat")),
              lambda x, key: x[key] * _weights(x.numpy()[key])),
    "Slice": (index_case(kinds=("int", "slice", "mixed")),
              lambda x, key: x[key] * _weights(x.numpy()[key])),
    "Expand": (unary(), lambda x: tg.broadcast_to(x, (2,) + x.shape) * _weights(np.zeros((2,) + x.shape))),
    "Swapaxes": (axis_of(2), lambda x, axis: tg.swapaxes(x, 0, axis) * _weights(np.swapaxes(x.numpy(), 0, axis))),
    "Split": (axis_of(), lambda x, axis: tg.concatenate(
        [p.ravel() * (i + 1) for i, p in enumerate(np.split(x, [1], axis=axis))])),
    "Unbind": (axis_of(), lambda x, axis: tg.concatenate(
        [p.reshape(-1) * (i + 1) for i, p in enumerate(tg.unbind(x, axis))])),
    "Cat": (joined(), lambda *xs, axis: tg.concatenate(xs, axis=axis) * 1.0),
    "Stack": (joined(stack=True), lambda *xs, axis: np.stack(xs, axis=axis) * 1.0),
    "Mm": (matmul_case(), lambda a, b: a @ b),
    # further ufuncs
    "Fabs": (unary(NONZERO), np.fabs),
    "Reciprocal": (unary(NONZERO), np.reciprocal),
    "Exp2": (unary(), tg.exp2),
    "Log2": (unary(POS), np.log2),
    "Log10": (unary(POS), tg.log10),
    "Cbrt": (unary(NONZERO), np.cbrt),
    "Asinh": (unary(), np.arcsinh),
    "Acosh": (unary(ABOVE1), tg.arccosh),
    "Atanh": (unary(UNIT), np.arctanh),
    "Deg2rad": (unary(), np.radians),
    "Rad2deg": (unary(), tg.rad2deg),
    "Floor": (unary(_off_integers), lambda x: np.floor(x) * x),
    "Ceil": (unary(_off_integers), lambda x: tg.ceil(x) * x),
    "Trunc": (unary(_off_integers), lambda x: np.trunc(x) * x),
    "Rint": (unary(_off_integers), lambda x: np.rint(x) * x),
    "Round": (unary(_off_integers), lambda x: np.round(x) * x),
    "Fmax": (binary((_distinct, _distinct)), np.fmax),
    "Fmin": (binary((_distinct, _distinct)), tg.fmin),
    "Atan2": (binary((ANY, NONZERO)), np.arctan2),
    "Hypot": (binary((NONZERO, NONZERO)), np.hypot),
    "Logaddexp": (binary(), np.logaddexp),
    "Logaddexp2": (binary(), tg.logaddexp2),
    "Copysign": (binary((NONZERO, NONZERO)), np.copysign),
    "Fmod": (binary((FRACTION, DIVISOR)), np.fmod),
    "Remainder": (binary((FRACTION, DIVISOR)), np.mod),
    "FloatPower": (binary((POS, ANY)), np.float_power),
    "FloorDivide": (binary((FRACTION, DIVISOR)), lambda a, b: (a // b) * a + b),
    "Heaviside": (binary((NONZERO, ANY)), lambda a, b: np.heaviside(a, b) * a + b),
    "LinalgInv": (square_case(), lambda a: _weighted(np.linalg.inv(a))),
    "LinalgSolve": (square_case(rhs=True), lambda a, b: _weighted(np.linalg.solve(a, b))),
    "LinalgDet": (square_case(), lambda a: _weighted(np.linalg.det(a))),
    "LinalgSlogdet": (square_case(), lambda a: _weighted(np.linalg.slogdet(a)[1])),
    "Function": (unary(), lambda x: _weighted(_SinCos.apply(x, 2.0)[0])
                 + _weighted(_SinCos.apply(x * 3.0, 1.0)[1])),
    "IndexPut": (index_put_case(), lambda x, v, key: _weighted(tg.index_put(x, key, v * 2.0))),
    "LinalgCholesky": (square_case(values=_spd), lambda a: _weighted(np.linalg.cholesky(_sym(a)))),
    "LinalgEigh": (square_case(values=_spd), lambda a: _weighted(np.linalg.eigh(_sym(a))[0]).sum()
                   + _weighted(np.linalg.eigh(_sym(a))[1] ** 2).sum()),  # sign-free
    "Einsum": (einsum_case(), lambda *xs, spec: _weighted(np.einsum(spec, *xs) * 1.0)),
    # numpy.fft (ops/fft.py): one host record type for every transform; a complex
    # intermediate in between (tests/test_complex.py covers each transform)
    "FFT": (axis_of(), lambda x, axis: _weighted(np.fft.irfft(
        np.fft.fft(x, axis=axis, norm="ortho") * (1 + 0.5j), n=x.shape[axis] + 1, axis=axis))),
    "LinalgQr": (rect_case(mode=lambda m, n: ["reduced", "r"] + (["complete"] if m <= n else [])),
                 _qr_fn),
    "LinalgSvd": (rect_case(full_matrices=[False, True], hermitian=[False, True]), _svd_fn),
    "LinalgPinv": (rect_case(), lambda a: _weighted(np.linalg.pinv(a))),
    "LinalgLstsq": (lstsq_case(), _lstsq_fn),
    "Softmax": (reduction(), lambda x, axis, keepdims: _weighted(tg.softmax(x, axis=axis))),
    "LogSoftmax": (reduction(), lambda x, axis, keepdims: _weighted(tg.log_softmax(x, axis=axis))),
    "Cumsum": (axis_of(), lambda x, axis: _weighted(np.cumsum(x, axis=axis))),
    "Cumprod": (axis_of(), lambda x, axis: _weighted(tg.cumprod(x, axis=axis))),
    # selections (gathers)
    "Moveaxis": (axis_of(), lambda x, axis: _weighted(np.moveaxis(x, axis, 0))),
    "Flip": (axis_of(), lambda x, axis: _weighted(np.flip(x, axis))),
    "Roll": (axis_of(), lambda x, axis: _weighted(tg.roll(x, 2, axis))),
    "Tile": (unary(), lambda x: _weighted(np.tile(x, (2, 1)))),
    "Repeat": (axis_of(), lambda x, axis: _weighted(np.repeat(x, 2, axis))),
    "Diagonal": (matrix_case(), lambda x, k: _weighted(np.diagonal(x, k))),
    "Take": (axis_of(), lambda x, axis: _weighted(np.take(x, [0, -1, 0], axis))),
    "TakeAlongAxis": (axis_of(), lambda x, axis: _weighted(np.take_along_axis(
        x, np.argsort(x.numpy(), axis=axis), axis))),
    "Sort": (axis_of(), lambda x, axis: _weighted(np.sort(x * 1.0, axis=axis))),
    "Triu": (matrix_case(), lambda x, k: _weighted(np.triu(x, k))),
    "Tril": (matrix_case(), lambda x, k: _weighted(tg.tril(x, k))),
    "Diag": (matrix_case(min_dims=1), lambda x, k: _weighted(
        tg.diag(x if x.ndim < 3 else x[0, :, :], k))),
    "Pad": (pad_case(), lambda x, pad_width, mode: _weighted(np.pad(x, pad_width, mode=mode))),
    # special functions (scipy.special's names)
    "Erf": (unary(), tg.erf),
    "Erfc": (unary(), tg.erfc),
    "Erfinv": (unary(UNIT), tg.erfinv),
    "Gammaln": (unary(OFF_POLES), tg.gammaln),
    "Digamma": (unary(OFF_POLES), tg.digamma),
    "I0e": (unary(NONZERO), tg.i0e),
    "I1e": (unary(NONZERO), tg.i1e),
    "LogNdtr": (unary(lambda rng, s: rng.uniform(-14.0, 6.0, s)), tg.log_ndtr),
}
