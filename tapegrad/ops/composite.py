"""Functions built from the primitive ops, in Python.

Each is differentiable because its pieces are: no registry entry, no kernel,
nothing to compile (a small core with composites on top, as tinygrad and JAX
keep it).  Their forwards match NumPy's results; the tests check both the
values and the gradients against finite differences.
"""
import numpy as np

from ..core.tensor import Tensor, _plain
from . import elementwise as E
from . import reductions as Rd
from . import shape as S
from .guarded import _tracing, on_values  # noqa: F401  (on_values: part of this module's API)
from .matrix import _data as _values
from .matrix import matmul


def _t(x):
    return x if isinstance(x, Tensor) else _plain(np.asarray(x))


def _count(a, axis):
    shape = np.shape(a._data if isinstance(a, Tensor) else a)
    axes = Rd.normalize_axis(axis, len(shape), "var")
    return int(np.prod([shape[i] for i in axes]))


def var(a, axis=None, ddof=0, keepdims=False):
    """``numpy.var`` with ``ddof``: mean squared deviation, over ``n - ddof``."""
    a = _t(a)
    d = a - Rd.mean(a, axis=axis, keepdims=True)
    # a Python float: an integer NumPy ddof would make a float32 result float64
    return Rd.sum(d * d, axis=axis, keepdims=keepdims) / float(_count(a, axis) - ddof)


def std(a, axis=None, ddof=0, keepdims=False):
    """``numpy.std``: the square root of :func:`var`.

    Over one element (and ``ddof=0``) the deviation is identically 0 and so
    is the derivative; it is computed as ``|a - mean(a)|``, whose derivative
    at 0 is 0, since the square root's would be ``inf * 0``.
    """
    a = _t(a)
    if ddof == 0 and _count(a, axis) == 1:
        d = a - Rd.mean(a, axis=axis, keepdims=True)
        return Rd.sum(E.absolute(d), axis=axis, keepdims=keepdims)
    return E.sqrt(var(a, axis=axis, ddof=ddof, keepdims=keepdims))


def ptp(a, axis=None, keepdims=False):
    """``numpy.ptp``: max minus min (ties share the gradient, as in max/min)."""
    return (Rd.max(a, axis=axis, keepdims=keepdims)
            - Rd.min(a, axis=axis, keepdims=keepdims))


def average(a, axis=None, weights=None, keepdims=False):
    """``numpy.average``, differentiable in ``a`` and in tensor ``weights``."""
    if weights is None:
        return Rd.mean(a, axis=axis, keepdims=keepdims)
    a = _t(a)
    if isinstance(weights, Tensor):
        w = weights
    else:  # NumPy's result dtype: float32 data and weights stay float32
        w = np.asarray(weights)
        w = w.astype(np.result_type(a.dtype, w.dtype, np.float16), copy=False)
    if np.ndim(w) == 1 and a.ndim > 1:
        if axis is None or isinstance(axis, tuple):
            raise TypeError("average: 1-D weights need an int axis")
        shape = [1] * a.ndim
        shape[axis] = -1
        w = S.reshape(w, shape) if isinstance(w, Tensor) else w.reshape(shape)
    total = Rd.sum(S.broadcast_to(w, a.shape) if isinstance(w, Tensor)
                   else np.broadcast_to(w, a.shape), axis=axis, keepdims=keepdims)
    return Rd.sum(a * w, axis=axis, keepdims=keepdims) / total


def _nan_to(a, value):
    # the mask is a comparison (a != a), not np.isnan of the value: a trace
    # records it and recomputes it at every replay
    a = _t(a)
    return E.where(E.not_equal(a, a), value, a)


def nansum(a, axis=None, keepdims=False):
    """``numpy.nansum``: NaNs count as zero and get no gradient."""
    return Rd.sum(_nan_to(a, 0.0), axis=axis, keepdims=keepdims)


def nanmean(a, axis=None, keepdims=False):
    """``numpy.nanmean``: the mean of the non-NaN elements."""
    a = _t(a)
    nan = E.not_equal(a, a)
    if _tracing() is not None and a.requires_grad:
        # the count follows the NaN mask in a replay: ones built from records
        # (sign has derivative 0; ``clean`` has no NaN, so 0 * sign is 0)
        clean = E.where(nan, 0.0, a)
        ones = 1.0 + 0.0 * E.sign(clean)
        n = Rd.sum(E.where(nan, 0.0, ones), axis=axis, keepdims=keepdims)
        return Rd.sum(clean, axis=axis, keepdims=keepdims) / n
    n = np.sum(~np.asarray(nan._data), axis=axis, keepdims=keepdims)
    # the counts in a's dtype, as NumPy divides: float32 stays float32
    return nansum(a, axis=axis, keepdims=keepdims) / np.asarray(n, a.dtype)


def nanmax(a, axis=None, keepdims=False):
    """``numpy.nanmax``: the maximum ignoring NaNs."""
    return Rd.max(_nan_to(a, -np.inf), axis=axis, keepdims=keepdims)


def nanmin(a, axis=None, keepdims=False):
    """``numpy.nanmin``: the minimum ignoring NaNs."""
    return Rd.min(_nan_to(a, np.inf), axis=axis, keepdims=keepdims)


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """``numpy.sort``; the gradient flows back through the sorting permutation.

    While ``tg.trace`` records, the permutation is a guarded ``np.argsort``
    and the values a gather, so a replay sorts the new values (and traces
    again when their order changes).
    """
    if order is not None:
        raise TypeError("sort: order= (structured arrays) is not supported on tensors")
    if _tracing() is None or not isinstance(a, Tensor):
        return S.sort(a, axis)
    perm = on_values(np.argsort, a, axis=axis, kind="stable")
    if axis is None:
        return S.getitem(S.ravel(a), perm)
    return S.take_along_axis(a, perm, axis)


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None,
           *, equal_nan=True):
    """``numpy.unique``: the sorted unique values, differentiable (each is the
    first element with that value), and the integer index, inverse and count
    arrays NumPy gives, which carry no gradient.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([3.0, 1.0, 3.0], requires_grad=True)
    >>> u, counts = np.unique(x, return_counts=True)
    >>> u, counts
    (tensor([1.0, 3.0], grad_fn=<IndexBackward>), array([1, 2]))
    """
    a = _t(ar)
    res = on_values(np.unique, a, return_index=True, return_inverse=return_inverse,
                    return_counts=return_counts, axis=axis, equal_nan=equal_nan)
    first = res[1]
    vals = S.getitem(S.ravel(a), first) if axis is None else S.take(a, first, axis=axis)
    # res is (values, index, inverse if asked, counts if asked)
    out = [vals] + ([first] if return_index else []) + list(res[2:])
    return out[0] if len(out) == 1 else tuple(out)


def trace(a, offset=0, axis1=0, axis2=1):
    """``numpy.trace``: the sum along a diagonal."""
    return Rd.sum(S.diagonal(a, offset, axis1, axis2), axis=-1)


def atleast_1d(*arys):
    """``numpy.atleast_1d``."""
    out = [S.reshape(a, (1,)) if np.ndim(a) == 0 else a for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    """``numpy.atleast_2d``."""
    out = [S.reshape(a, (1,) * (2 - np.ndim(a)) + np.shape(a)) if np.ndim(a) < 2 else a
           for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """``numpy.atleast_3d`` (1-D ``(n,)`` becomes ``(1, n, 1)``, 2-D gets a last axis)."""
    def one(a):
        nd = np.ndim(a)
        if nd == 0:
            return S.reshape(a, (1, 1, 1))
        if nd == 1:
            return S.reshape(a, (1, np.shape(a)[0], 1))
        if nd == 2:
            return S.reshape(a, np.shape(a) + (1,))
        return a
    out = [one(a) for a in arys]
    return out[0] if len(out) == 1 else out


def hstack(tup):
    """``numpy.hstack``."""
    arrs = [atleast_1d(a) for a in tup]
    return S.concatenate(arrs, axis=0 if np.ndim(arrs[0]) == 1 else 1)


def vstack(tup):
    """``numpy.vstack``."""
    return S.concatenate([atleast_2d(a) for a in tup], axis=0)


def dstack(tup):
    """``numpy.dstack``."""
    return S.concatenate([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup):
    """``numpy.column_stack``."""
    cols = [S.reshape(a, (-1, 1)) if np.ndim(a) < 2 else a for a in tup]
    return S.concatenate(cols, axis=1)


def array_split(a, indices_or_sections, axis=0):
    """``numpy.array_split``: sections may differ in size."""
    return S.split(a, indices_or_sections, axis=axis, _fn=np.array_split)


def hsplit(a, indices_or_sections):
    """``numpy.hsplit``."""
    return S.split(a, indices_or_sections, axis=1 if np.ndim(a) > 1 else 0)


def vsplit(a, indices_or_sections):
    """``numpy.vsplit``."""
    return S.split(a, indices_or_sections, axis=0)


def _root(s, q=0.5):
    """``s ** q`` for sums ``s >= 0`` of powers of ``|x|``, with derivative 0
    where ``s`` is 0 (PyTorch's choice for the norm at 0; the true derivative
    of the root there is ``inf`` and times the zero derivative of ``s``
    would give NaN)."""
    zero = E.equal(s, 0.0)
    safe = E.where(zero, 1.0, s)
    return E.where(zero, 0.0, E.sqrt(safe) if q == 0.5 else safe ** q)


def norm(x, ord=None, axis=None, keepdims=False):
    """``numpy.linalg.norm`` for vectors (any ``ord``; ``ord=0`` counts and
    carries no gradient) and matrices (``None``/``'fro'``, 1, -1, inf, -inf,
    and through the singular values 2, -2, ``'nuc'``), over the last axes or
    ``axis``, batched.

    At ``x = 0`` the gradient of the 2-norm, of the Frobenius norm and of
    the p-norms with ``p > 1`` is 0, as in PyTorch (the function has no
    derivative there); ties (of the largest singular values, of the column
    sums) share the gradient as ``max`` does.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> A = tg.tensor([[3.0, 0.0], [0.0, -2.0]], requires_grad=True)
    >>> n = tg.linalg.norm(A, 'nuc')
    >>> n
    tensor(5.0, grad_fn=<SumBackward>)
    >>> n.backward()
    >>> A.grad
    tensor([[1.0, 0.0],
            [0.0, -1.0]])
    """
    x = _t(x)
    nd = x.ndim
    if isinstance(axis, int):
        axis = (axis,)
    if axis is None and ord is not None and nd not in (1, 2):
        raise ValueError("Improper number of dimensions to norm.")
    vector = (axis is None and (ord is None or nd == 1)) or (axis is not None and len(axis) == 1)
    if axis is None and ord is None:
        return _root(Rd.sum(x * x, keepdims=keepdims))
    if vector:
        ax = None if axis is None else axis[0]
        if ord is None or ord == 2:
            return _root(Rd.sum(x * x, axis=ax, keepdims=keepdims))
        if ord == np.inf:
            return Rd.max(E.absolute(x), axis=ax, keepdims=keepdims)
        if ord == -np.inf:
            return Rd.min(E.absolute(x), axis=ax, keepdims=keepdims)
        if ord == 0:  # a count: no gradient (guarded in a trace)
            return _plain(on_values(np.linalg.norm, x, 0, ax, keepdims))
        if ord == 1:
            return Rd.sum(E.absolute(x), axis=ax, keepdims=keepdims)
        s = Rd.sum(E.absolute(x) ** ord, axis=ax, keepdims=keepdims)
        return _root(s, 1.0 / ord) if ord > 1 else s ** (1.0 / ord)
    r, c = (0, 1) if axis is None else axis
    if ord in (None, "fro"):
        return _root(Rd.sum(x * x, axis=(r, c), keepdims=keepdims))
    if ord in (1, -1, np.inf, -np.inf):
        summed, other = (r, c) if ord in (1, -1) else (c, r)
        s = Rd.sum(E.absolute(x), axis=summed, keepdims=True)
        pick = Rd.max if ord in (1, np.inf) else Rd.min
        out = pick(s, axis=other, keepdims=True)
        return out if keepdims else S.squeeze(out, axis=(r, c))
    if ord in (2, -2, "nuc"):
        from .matrix import svd
        sv = svd(S.moveaxis(x, (r, c), (-2, -1)), compute_uv=False)
        out = (Rd.max if ord == 2 else Rd.min if ord == -2 else Rd.sum)(sv, axis=-1)
        return S.expand_dims(out, tuple(sorted((r % nd, c % nd)))) if keepdims else out
    raise ValueError(f"Invalid norm order {ord!r} for matrices.")


def outer(a, b):
    """``numpy.outer`` of the flattened operands."""
    return S.reshape(a, (-1, 1)) * S.reshape(b, (1, -1))


def vdot(a, b):
    """``numpy.vdot`` for real operands: the sum of the elementwise product."""
    return Rd.sum(S.ravel(a) * S.ravel(b))


def clip(a, a_min=None, a_max=None):
    """``numpy.clip``; the gradient passes where ``a_min <= a <= a_max``.

    Tensor bounds receive the gradient where they clip.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.clip(tg.tensor([-2.0, 0.5, 3.0]), -1.0, 1.0)
    tensor([-1.0, 0.5, 1.0])
    """
    if a_min is None and a_max is None:
        raise ValueError("clip needs at least one of a_min and a_max")
    out = a
    if a_min is not None:
        out = E.where(E.less(out, a_min), a_min, out)
    if a_max is not None:
        out = E.where(E.greater(out, a_max), a_max, out)
    if not isinstance(out, Tensor):
        return out
    # the forward must equal NumPy's exactly (dtype included)
    ref = np.clip(a._data if isinstance(a, Tensor) else a,
                  a_min._data if isinstance(a_min, Tensor) else a_min,
                  a_max._data if isinstance(a_max, Tensor) else a_max)
    if out._data.dtype != ref.dtype:
        out = S.astype(out, ref.dtype)
    return out


def dot(a, b):
    """``numpy.dot``: products of scalars, vectors and matrices, and for N-d
    operands the sum over the last axis of a and the second-to-last of b
    (the last of b if it is 1-D).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor(np.ones((2, 3, 4)), requires_grad=True)
    >>> tg.dot(a, np.ones((5, 4, 6))).shape
    (2, 3, 5, 6)
    """
    nda, ndb = np.ndim(a), np.ndim(b)
    if nda == 0 or ndb == 0:
        return E.multiply(a, b)
    if nda > 2 or ndb > 2:
        sa, sb = np.shape(_values(a)), np.shape(_values(b))
        if sa[-1] != sb[-1 if ndb == 1 else -2]:
            raise ValueError(f"shapes {sa} and {sb} not aligned: {sa[-1]} (dim {nda - 1}) "
                             f"!= {sb[-1 if ndb == 1 else -2]} (dim {max(ndb - 2, 0)})")
        # the free axes of a, then b's without its second-to-last: tensordot's order
        return tensordot(a, b, axes=([-1], [-1 if ndb == 1 else -2]))
    return matmul(a, b)


def tensordot(a, b, axes=2):
    """``numpy.tensordot``: transposes and reshapes around one matmul."""
    a, b = _t(a), _t(b)
    if isinstance(axes, int):
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        ax_a, ax_b = ([x] if isinstance(x, int) else list(x) for x in axes)
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    if len(ax_a) != len(ax_b) or any(a.shape[i] != b.shape[j] for i, j in zip(ax_a, ax_b)):
        raise ValueError("shape-mismatch for sum")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = int(np.prod([a.shape[i] for i in ax_a]))
    a2 = S.reshape(S.transpose(a, free_a + ax_a), (-1, k))
    b2 = S.reshape(S.transpose(b, ax_b + free_b), (k, -1))
    out_shape = tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b)
    return S.reshape(matmul(a2, b2), out_shape)


def inner(a, b):
    """``numpy.inner``: sums over the last axes."""
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return E.multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def kron(a, b):
    """``numpy.kron``: every product of an element of a with one of b."""
    a, b = _t(a), _t(b)
    nd = max(a.ndim, b.ndim)
    sa = (1,) * (nd - a.ndim) + a.shape
    sb = (1,) * (nd - b.ndim) + b.shape
    ea = S.reshape(a, tuple(v for n in sa for v in (n, 1)))
    eb = S.reshape(b, tuple(v for n in sb for v in (1, n)))
    return S.reshape(ea * eb, tuple(x * y for x, y in zip(sa, sb)))


def select(condlist, choicelist, default=0):
    """``numpy.select``: the first choice whose condition holds, else default."""
    out = default
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        out = E.where(cond, choice, out)
    return out if isinstance(out, Tensor) else _plain(np.asarray(out))


# -- more of numpy.linalg, from the ops above -----------------------------------
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """``numpy.linalg.matrix_norm``: :func:`norm` over the last two axes."""
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    """``numpy.linalg.vector_norm``: :func:`norm` of the elements over ``axis``
    (all of them by default, whatever the shape).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.linalg.vector_norm(tg.tensor([[3.0], [4.0]]))
    tensor(5.0)
    """
    x = _t(x)
    nd = x.ndim
    axes = tuple(range(nd)) if axis is None else (axis,) if isinstance(axis, int) else axis
    axes = tuple(sorted(a % nd for a in axes))
    rest = [i for i in range(nd) if i not in axes]
    flat = S.reshape(S.transpose(x, rest + list(axes)), tuple(x.shape[i] for i in rest) + (-1,))
    out = norm(flat, ord=ord, axis=-1)
    return S.expand_dims(out, axes) if keepdims else out


def matrix_transpose(x, /):
    """``numpy.linalg.matrix_transpose``: swaps the last two axes."""
    return S.swapaxes(x, -1, -2)


def matrix_rank(A, tol=None, hermitian=False, **kwargs):
    """``numpy.linalg.matrix_rank``, on the values (an integer: no gradient)."""
    return on_values(np.linalg.matrix_rank, _t(A), tol, hermitian, **kwargs)


def cond(x, p=None):
    """``numpy.linalg.cond``: for ``p`` None, 2 or -2 the ratio of extreme
    singular values, else ``norm(x, p) * norm(inv(x), p)``; differentiable.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.linalg.cond(tg.tensor([[2.0, 0.0], [0.0, 0.5]]))
    tensor(4.0)
    """
    from .matrix import inv, svd
    x = _t(x)
    if p in (None, 2, -2):
        sv = svd(x, compute_uv=False)
        big, small = sv[..., 0], sv[..., -1]
        return big / small if p != -2 else small / big
    return (norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1)))


def matrix_power(a, n):
    """``numpy.linalg.matrix_power``: repeated squaring with matmul (through
    the inverse for ``n < 0``); ``n = 0`` gives the identity, with no gradient.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor([[1.0, 1.0], [0.0, 1.0]], requires_grad=True)
    >>> tg.linalg.matrix_power(a, 3)
    tensor([[1.0, 3.0],
            [0.0, 1.0]], grad_fn=<MmBackward>)
    """
    import operator
    from .matrix import inv, matmul
    a = _t(a)
    n = operator.index(n)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        np.linalg.matrix_power(a._data, n)  # NumPy's error
    if n == 0:
        return _plain(np.linalg.matrix_power(a._data, 0))
    z = inv(a) if n < 0 else a
    n = abs(n)
    result = None
    while n:
        if n & 1:
            result = z if result is None else matmul(result, z)
        n >>= 1
        if n:
            z = matmul(z, z)
    return E.positive(result) if result is a else result


def _chain_order(dims):
    """Cheapest parenthesisation of a matrix chain: split[i][j] for A_i..A_j."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def multi_dot(arrays, *, out=None):
    """``numpy.linalg.multi_dot``: a chain of matmuls in the cheapest order
    (a 1-D first or last operand is a row or column vector).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor(np.ones((2, 3)), requires_grad=True)
    >>> tg.linalg.multi_dot([a, np.ones((3, 4)), np.ones(4)])
    tensor([12.0, 12.0], grad_fn=<ReshapeBackward>)
    """
    if out is not None:
        raise TypeError("tapegrad.linalg.multi_dot: out= is not supported")
    arrs = [_t(a) for a in arrays]
    if len(arrs) < 2:
        raise ValueError("Expecting at least two arrays.")
    first, last = arrs[0].ndim == 1, arrs[-1].ndim == 1
    if first:
        arrs[0] = S.reshape(arrs[0], (1, -1))
    if last:
        arrs[-1] = S.reshape(arrs[-1], (-1, 1))
    if any(a.ndim != 2 for a in arrs):
        raise ValueError("multi_dot: the inner arrays must be 2-dimensional")
    split = _chain_order([arrs[0].shape[0]] + [a.shape[1] for a in arrs])

    def chain(i, j):
        if i == j:
            return arrs[i]
        k = split[i][j]
        return matmul(chain(i, k), chain(k + 1, j))

    result = chain(0, len(arrs) - 1)
    if first or last:
        shape = result.shape[1:] if first and not last else \
            result.shape[:1] if last and not first else ()
        result = S.reshape(result, shape)
    return result


def tensorinv(a, ind=2):
    """``numpy.linalg.tensorinv``: the inverse of ``a`` as a square matrix of
    its first ``ind`` axes against the rest, differentiable through inv."""
    from .matrix import inv
    a = _t(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    old = a.shape
    rows = int(np.prod(old[ind:]))
    return S.reshape(inv(S.reshape(a, (rows, -1))), old[ind:] + old[:ind])


def tensorsolve(a, b, axes=None):
    """``numpy.linalg.tensorsolve``: solve ``tensordot(a, x, x.ndim) = b`` for
    x, differentiable in ``a`` and ``b`` through solve."""
    from .matrix import solve
    a, b = _t(a), _t(b)
    if axes is not None:
        order = [i for i in range(a.ndim) if i not in [k % a.ndim for k in axes]]
        a = S.transpose(a, order + [k % a.ndim for k in axes])
    old = a.shape[-(a.ndim - b.ndim):]
    n = int(np.prod(old))
    if a.size != n * n:
        raise np.linalg.LinAlgError(
            "Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == "
            "prod(a.shape[:b.ndim])")
    return S.reshape(solve(S.reshape(a, (n, n)), S.ravel(b)), old)


def linalg_diagonal(x, /, *, offset=0):
    """``numpy.linalg.diagonal``: the diagonal of the last two axes."""
    return S.diagonal(x, offset, -2, -1)


def linalg_trace(x, /, *, offset=0, dtype=None):
    """``numpy.linalg.trace``: the trace of the last two axes."""
    out = Rd.sum(S.diagonal(x, offset, -2, -1), axis=-1)
    return out if dtype is None else S.astype(out, dtype)


def vecdot(x1, x2, /, *, axis=-1):
    """``numpy.linalg.vecdot`` for real operands: the dot product along ``axis``."""
    return Rd.sum(E.multiply(x1, x2), axis=axis)


def linalg_tensordot(x1, x2, /, *, axes=2):
    """``numpy.linalg.tensordot``: :func:`tensordot`."""
    return tensordot(x1, x2, axes=axes)


def linalg_outer(x1, x2, /):
    """``numpy.linalg.outer`` of two vectors."""
    if np.ndim(x1) != 1 or np.ndim(x2) != 1:
        raise ValueError("Input arrays must be one-dimensional")
    return outer(x1, x2)
