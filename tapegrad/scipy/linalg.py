"""``tapegrad.scipy.linalg``: ``scipy.linalg``'s names and signatures,
differentiable.

SciPy converts its inputs with ``np.asarray``, which no protocol can
intercept, so ``scipy.linalg.solve(tensor, ...)`` cannot record a gradient.
These functions take the same arguments and return the same values (as
tensors), built from tapegrad's differentiable ops: ``tg.linalg.solve``,
``cholesky``, ``eigh``, ``inv``, ``det``, matrix products, masks and
slices.  So every derivative tapegrad has reaches through them: backward,
``tg.grad``, ``tg.jacobian``, ``tg.jvp``, ``tg.hessian``, ``tg.hvp``,
``create_graph=True`` to any order, and traced replay.

What each function reads is what SciPy's reads: ``solve_triangular`` and
``cho_solve`` one triangle, ``cholesky``, ``eigh`` and ``solve(...,
assume_a='sym')`` the symmetric matrix of one triangle.  The gradient is
that function's gradient, so it lies on the entries read (an off-diagonal
entry of a symmetric read carries both halves); finite differences of the
SciPy function agree with it at any input, symmetric or not.

Matrices are real (float64 or float32; integers become float64) and may be
stacked: ``(..., M, M)``, as SciPy (1.15 and later) broadcasts them.  A
right-hand side ``b`` of one dimension is one vector; otherwise it is
``(..., N, K)``.  ``overwrite_a``/``overwrite_b`` are accepted and ignored
(nothing is overwritten).  SciPy itself is imported on first use, only by
:func:`lu_factor` and :func:`lu` (for the pivots).

Examples
--------
>>> import numpy as np, tapegrad as tg
>>> from tapegrad.scipy import linalg
>>> A = tg.tensor([[4.0, 1.0], [1.0, 3.0]], requires_grad=True)
>>> x = linalg.cho_solve(linalg.cho_factor(A), np.array([1.0, 2.0]))
>>> np.round(x.numpy(), 6)
array([0.090909, 0.636364])
>>> x.sum().backward()
>>> np.round(A.grad.numpy(), 6)        # the upper triangle, which cho_factor reads
array([[-0.016529, -0.140496],
       [ 0.      , -0.173554]])
"""
import math

import numpy as np

import tapegrad as tg
from tapegrad.ops.guarded import on_values

__all__ = ["cho_factor", "cho_solve", "cholesky", "det", "eigh", "eigvalsh", "expm", "inv",
           "lu", "lu_factor", "lu_solve", "solve", "solve_triangular"]

LinAlgError = np.linalg.LinAlgError


# -- operands and checks -------------------------------------------------------------------
def _operand(x, fn, what):
    """A real tensor stays; anything else becomes a float tensor."""
    if isinstance(x, tg.ComplexTensor) or np.iscomplexobj(x._data if isinstance(x, tg.Tensor)
                                                           else x):
        raise NotImplementedError(
            f"tapegrad.scipy.linalg.{fn}: {what} is complex; only real matrices are supported "
            "(tg.linalg has complex inv, solve, det, cholesky and eigh)")
    if isinstance(x, tg.Tensor):
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "f":
        if arr.dtype.kind not in "biu":
            raise TypeError(f"tapegrad.scipy.linalg.{fn}: {what} must be a real array, "
                            f"got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
    return tg.tensor(arr)  # every result a tensor, as with tensor operands


def _all_finite(*values):
    return all(bool(np.isfinite(v).all()) for v in values)


def _check_finite(fn, check, *xs):
    if check and not on_values(_all_finite, *xs):
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: array must not contain infs or NaNs "
                         "(check_finite=False skips this check)")


def _square(a, fn, what="a"):
    shape = tuple(np.shape(a))
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: expected a square matrix (or a stack "
                         f"of them, shape (..., M, M)) for {what}, got shape {shape}")
    return shape[-1]


def _rhs(b, n, fn, a_shape):
    """``b`` as a stack of matrices (..., N, K), and whether it was one vector."""
    shape = tuple(np.shape(b))
    vector = len(shape) == 1
    if len(shape) == 0 or (vector and shape[0] != n) or (not vector and shape[-2] != n):
        raise ValueError(
            f"tapegrad.scipy.linalg.{fn}: shapes of a {tuple(a_shape)} and b {shape} are "
            f"incompatible: b must be one vector of length {n} or a stack of matrices "
            f"(..., {n}, K)")
    if not vector:
        try:
            np.broadcast_shapes(tuple(a_shape[:-2]), shape[:-2])
        except ValueError:
            raise ValueError(
                f"tapegrad.scipy.linalg.{fn}: the stacking (batch) axes of a "
                f"{tuple(a_shape)} and b {shape} do not broadcast") from None
    return (tg.expand_dims(b, -1) if vector else b), vector


def _vector_out(x, vector):
    return x[..., 0] if vector else x


def _T(m):
    return tg.swapaxes(m, -1, -2)


_TRANS = {0: 0, 1: 1, 2: 1, "N": 0, "T": 1, "C": 1, "n": 0, "t": 1, "c": 1}


def _trans(trans, fn):
    try:
        return _TRANS[trans]
    except (KeyError, TypeError):
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: trans must be 0, 1, 2, 'N', 'T' or "
                         f"'C', got {trans!r}") from None


def _zero_diagonal(a):
    """The first (batch index, k) where a's diagonal is exactly zero, or None."""
    d = np.diagonal(np.asarray(a), axis1=-2, axis2=-1)
    hits = np.argwhere(d == 0)
    return None if hits.size == 0 else tuple(int(i) for i in hits[0])


def _singular_error(fn, where, what="diagonal entry"):
    *batch, k = where
    at = f" of matrix {tuple(batch)} of the stack" if batch else ""
    return LinAlgError(f"tapegrad.scipy.linalg.{fn}: singular matrix: {what} {k}{at} is "
                       "exactly zero")


# -- triangular solves ---------------------------------------------------------------------
def _triangle(a, lower, unit_diagonal):
    """The triangle of ``a`` that a triangular solve reads, as a matrix."""
    if unit_diagonal:
        t = tg.tril(a, -1) if lower else tg.triu(a, 1)
        return t + np.eye(np.shape(a)[-1], dtype=a.dtype)
    return tg.tril(a) if lower else tg.triu(a)


def _tri_solve(a, B, lower, unit_diagonal=False, trans=0):
    """op(T) X = B for T the triangle of ``a``, B a stack of matrices.

    Through ``tg.linalg.solve`` on the masked triangle (an LU solve, O(n^3)
    rather than substitution's O(n^2)): its rules give every derivative, of
    every order and transform, with no op of its own."""
    T = _triangle(a, lower, unit_diagonal)
    return tg.linalg.solve(_T(T) if trans else T, B)


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """Solve ``a x = b`` for a triangular ``a``: ``scipy.linalg.solve_triangular``.

    Only the triangle named by ``lower`` is read (without its diagonal when
    ``unit_diagonal``, which takes ones there), and the gradient with
    respect to ``a`` lies on it.  Differentiable in ``a`` and ``b`` to any
    order.  The solve is an LU solve of the triangle (``O(n^3)``, where
    substitution takes ``O(n^2 k)``), so that every transform reaches it.

    Parameters
    ----------
    a : (..., N, N) array_like or Tensor
    b : (N,) or (..., N, K) array_like or Tensor
    trans : {0, 1, 2, 'N', 'T', 'C'}
        Solve ``a x = b`` (0, 'N') or ``a.T x = b`` (1, 'T'; 2, 'C' for
        real ``a``).
    lower : bool
        Read the lower triangle (True) or the upper one (False, the default).
    unit_diagonal : bool
        Take the diagonal of ``a`` to be ones (it is not read).
    overwrite_b : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs in the inputs.

    Returns
    -------
    x : Tensor of the broadcast shape of ``b``

    Raises
    ------
    numpy.linalg.LinAlgError
        When a diagonal entry of the triangle is exactly zero.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import solve_triangular
    >>> L = tg.tensor([[2.0, 9.0], [1.0, 4.0]], requires_grad=True)  # 9.0 is not read
    >>> x = solve_triangular(L, np.array([2.0, 5.0]), lower=True)
    >>> x
    tensor([1.0, 1.0], grad_fn=<SqueezeBackward>)
    >>> x[1].backward()
    >>> L.grad
    tensor([[0.125, 0.0],
            [-0.25, -0.25]])
    """
    fn = "solve_triangular"
    a, b = _operand(a, fn, "a"), _operand(b, fn, "b")
    n = _square(a, fn)
    B, vector = _rhs(b, n, fn, np.shape(a))
    t = _trans(trans, fn)
    _check_finite(fn, check_finite, a, b)
    if not unit_diagonal:
        _nonzero_diagonal(a, fn)
    return _vector_out(_tri_solve(a, B, lower, unit_diagonal, t), vector)


# -- Cholesky ------------------------------------------------------------------------------
def _cholesky(a, lower, fn, what="a"):
    """The factor of the symmetric matrix of a's ``lower``/upper triangle."""
    try:
        L = tg.linalg.cholesky(a if lower else _T(a))  # cholesky reads the lower triangle
    except LinAlgError:
        side = "lower" if lower else "upper"
        raise LinAlgError(f"tapegrad.scipy.linalg.{fn}: {what} is not positive definite "
                          f"(the symmetric matrix of its {side} triangle, which is what is "
                          "read)") from None
    return L if lower else _T(L)


def _chol_solve(c, lower, B):
    """a X = B for a = L L^T (``lower``: L is c's lower triangle) or
    a = U^T U (U: c's upper triangle), B a stack of matrices."""
    if lower:
        return _tri_solve(c, _tri_solve(c, B, True), True, trans=1)
    return _tri_solve(c, _tri_solve(c, B, False, trans=1), False)


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factor of a symmetric positive definite matrix:
    ``scipy.linalg.cholesky``.

    Returns ``U`` with ``a = U.T @ U`` (``lower=False``, the default) or
    ``L`` with ``a = L @ L.T``; the other triangle is zero.  Only the
    triangle named by ``lower`` is read, and the gradient lies on it.

    Parameters
    ----------
    a : (..., M, M) array_like or Tensor
    lower : bool
        Return the lower factor and read the lower triangle.
    overwrite_a : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.

    Returns
    -------
    c : Tensor of a's shape

    Raises
    ------
    numpy.linalg.LinAlgError
        When the matrix is not positive definite.

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.scipy.linalg import cholesky
    >>> A = tg.tensor([[4.0, 2.0], [2.0, 5.0]], requires_grad=True)
    >>> cholesky(A)
    tensor([[2.0, 1.0],
            [0.0, 2.0]], grad_fn=<SwapaxesBackward>)
    >>> cholesky(A)[1, 1].backward()     # sqrt(A11 - A01**2 / A00)
    >>> A.grad
    tensor([[0.0625, -0.25],
            [0.0, 0.25]])
    """
    return _factor_cholesky(a, lower, check_finite, "cholesky")


def _factor_cholesky(a, lower, check_finite, fn):
    a = _operand(a, fn, "a")
    _square(a, fn)
    _check_finite(fn, check_finite, a)
    return _cholesky(a, lower, fn)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """The Cholesky factorisation for :func:`cho_solve`: ``scipy.linalg.cho_factor``.

    Returns ``(c, lower)``.  ``c`` holds the factor in the triangle named by
    ``lower`` (as :func:`cholesky`); unlike SciPy's, whose other triangle
    holds arbitrary entries, it is zero there.  :func:`cho_solve` reads the
    factor's triangle only, so a SciPy ``c`` works as well.

    Parameters
    ----------
    a : (..., M, M) array_like or Tensor
    lower : bool
        Lower factor, reading a's lower triangle (True), or upper (False).
    overwrite_a : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.

    Returns
    -------
    c : Tensor of a's shape
    lower : bool

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.scipy.linalg import cho_factor
    >>> c, low = cho_factor(tg.tensor([[4.0, 2.0], [2.0, 5.0]]), lower=True)
    >>> c, low
    (tensor([[2.0, 0.0],
            [1.0, 2.0]]), True)
    """
    return _factor_cholesky(a, lower, check_finite, "cho_factor"), bool(lower)


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` given :func:`cho_factor`'s ``(c, lower)``:
    ``scipy.linalg.cho_solve``.

    Only the factor's triangle of ``c`` is read (the gradient lies on it).
    Differentiable in ``c`` and ``b`` to any order; through
    :func:`cho_factor`, in ``a``.

    Parameters
    ----------
    c_and_lower : tuple (c, lower)
        The factor (..., M, M) and which triangle holds it.
    b : (M,) or (..., M, K) array_like or Tensor
    overwrite_b : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.

    Returns
    -------
    x : Tensor of the broadcast shape of ``b``

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import cho_factor, cho_solve
    >>> a = tg.tensor([[4.0, 2.0], [2.0, 5.0]], requires_grad=True)
    >>> x = cho_solve(cho_factor(a), np.array([6.0, 7.0]))
    >>> x
    tensor([1.0, 1.0], grad_fn=<SqueezeBackward>)
    >>> x.sum().backward()
    >>> a.grad          # G = -(a^-1 1) x^T read on the upper triangle: G01 + G10
    tensor([[-0.1875, -0.3125],
            [0.0, -0.125]])
    """
    fn = "cho_solve"
    try:
        c, lower = c_and_lower
    except (TypeError, ValueError):
        raise TypeError(f"tapegrad.scipy.linalg.{fn}: the first argument must be the pair "
                        "(c, lower) that cho_factor returns") from None
    c, b = _operand(c, fn, "c"), _operand(b, fn, "b")
    n = _square(c, fn, "c")
    B, vector = _rhs(b, n, fn, np.shape(c))
    _check_finite(fn, check_finite, c, b)
    where = on_values(_zero_diagonal, c)
    if where is not None:
        raise _singular_error(fn, where, "diagonal entry of the factor")
    return _vector_out(_chol_solve(c, lower, B), vector)


# -- LU ------------------------------------------------------------------------------------
def _getrf(a):
    """SciPy's pivots of ``a`` (0-based row interchanges, int32, one row of
    pivots per matrix of the stack) and the first exactly zero pivot, or None."""
    import warnings

    import scipy.linalg as sl
    a = np.asarray(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    flat = a.reshape((int(np.prod(a.shape[:-2])), m, n))
    piv = np.empty((flat.shape[0], k), np.int32)
    zero = None
    for i, mat in enumerate(flat):
        if k == 0:
            continue
        with warnings.catch_warnings():  # a zero pivot: the error below says it
            warnings.simplefilter("ignore", sl.LinAlgWarning)
            lu_, p = sl.lu_factor(mat, check_finite=False)
        piv[i] = p
        d = np.flatnonzero(np.diagonal(lu_) == 0)
        if zero is None and d.size:
            zero = tuple(np.unravel_index(i, a.shape[:-2])) + (int(d[0]),)
    return piv.reshape(a.shape[:-2] + (k,)), zero


def _permutation(piv, m):
    """The row order ``perm`` of LAPACK's interchanges ``piv`` (row i and
    row piv[i], for i = 0, 1, ... in turn): ``P a = a[perm]``."""
    piv = np.asarray(piv)
    k = piv.shape[-1]
    p = piv.reshape((int(np.prod(piv.shape[:-1])), k))
    perm = np.tile(np.arange(m), (p.shape[0], 1))
    rows = np.arange(p.shape[0])
    for i in range(k):
        j = p[:, i]
        t = perm[rows, i].copy()
        perm[rows, i] = perm[rows, j]
        perm[rows, j] = t
    return perm.reshape(piv.shape[:-1] + (m,))


def _perm_matrix(perm, dtype=np.float64):
    """P with ``P @ a == a[perm]`` (rows), stacked like ``perm``."""
    m = perm.shape[-1]
    return (perm[..., :, None] == np.arange(m)).astype(dtype)


def _lu_square(M):
    """LU without pivoting of the square stack ``M`` (rows already in
    partial pivoting's order, so every multiplier is at most 1 in size): the
    unit lower factor below the diagonal and the upper one on and above it,
    in one matrix.  Blocked recursion: ``[[A, B], [C, D]]`` gives
    ``A = L1 U1``, ``B -> L1^-1 B``, ``C -> C U1^-1`` and the factors of
    ``D - C U1^-1 L1^-1 B``."""
    n = M.shape[-1]
    if n == 1:
        return M
    k = n // 2
    A, B, C, D = M[..., :k, :k], M[..., :k, k:], M[..., k:, :k], M[..., k:, k:]
    if k == 1:  # one column of elimination: the multipliers and a rank-1 update
        F = A
        Lc = C / A
        U = B
        S = D - Lc * U
    else:
        F = _lu_square(A)
        U = _tri_solve(F, B, True, unit_diagonal=True)
        Lc = _T(_tri_solve(F, _T(C), False, trans=1))
        S = D - tg.matmul(Lc, U)
    G = _lu_square(S)
    return tg.concatenate([tg.concatenate([F, U], axis=-1),
                           tg.concatenate([Lc, G], axis=-1)], axis=-2)


def _lu_rows(M):
    """:func:`_lu_square` of an (m, n) stack: a tall one's rows below the
    square top are ``C U^-1``; a wide one's columns right of it ``L^-1 B``."""
    m, n = M.shape[-2:]
    if m == n:
        return _lu_square(M)
    if m > n:
        F = _lu_square(M[..., :n, :])
        Lc = _T(_tri_solve(F, _T(M[..., n:, :]), False, trans=1))
        return tg.concatenate([F, Lc], axis=-2)
    F = _lu_square(M[..., :, :m])
    U = _tri_solve(F, M[..., :, m:], True, unit_diagonal=True)
    return tg.concatenate([F, U], axis=-1)


def _factor(a, fn, check_finite):
    a = _operand(a, fn, "a")
    shape = tuple(np.shape(a))
    if len(shape) < 2:
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: expected a matrix (or a stack of "
                         f"them, shape (..., M, N)), got shape {shape}")
    _check_finite(fn, check_finite, a)
    piv, zero = on_values(_getrf, a)
    if zero is not None:
        raise LinAlgError(
            f"tapegrad.scipy.linalg.{fn}: the matrix is singular (pivot {zero[-1]}"
            + (f" of matrix {zero[:-1]} of the stack" if len(zero) > 1 else "")
            + " is exactly zero): its LU factors are not differentiable there")
    m = shape[-2]
    if min(shape[-2:]) == 0:
        return a, piv
    M = tg.matmul(_perm_matrix(_permutation(piv, m), a.dtype), a)  # exact: one 1 per row
    return _lu_rows(M), piv


def lu_factor(a, overwrite_a=False, check_finite=True):
    """The pivoted LU factorisation for :func:`lu_solve`: ``scipy.linalg.lu_factor``.

    Returns ``(lu, piv)``: ``lu`` holds the unit lower factor ``L`` below
    the diagonal and the upper factor ``U`` on and above it, and ``piv``
    SciPy's pivots (0-based row interchanges: row ``i`` was swapped with
    row ``piv[i]``, for i = 0, 1, ... in turn), with ``P a = L U``.

    The pivots are SciPy's (``scipy.linalg.lu_factor`` on the values, a
    constant of the derivative); the factors are the LU factorisation of
    the rows in that order, recorded with tapegrad ops, so ``lu`` is
    differentiable in ``a`` to any order (its values agree with SciPy's to
    rounding).  A matrix may be rectangular, (..., M, N).

    Parameters
    ----------
    a : (..., M, N) array_like or Tensor
    overwrite_a : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.

    Returns
    -------
    lu : Tensor of a's shape
    piv : ndarray of int32, shape (..., min(M, N))

    Raises
    ------
    numpy.linalg.LinAlgError
        When a pivot is exactly zero (a singular matrix, whose factors SciPy
        returns with a warning; here they would carry no derivative).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import lu_factor
    >>> a = tg.tensor([[1.0, 2.0], [4.0, 2.0]], requires_grad=True)
    >>> lu, piv = lu_factor(a)
    >>> lu.numpy(), piv
    (array([[4.  , 2.  ],
           [0.25, 1.5 ]]), array([1, 1], dtype=int32))
    >>> lu[1, 0].backward()               # a[0, 0] / a[1, 0]
    >>> a.grad
    tensor([[0.25, 0.0],
            [-0.0625, 0.0]])
    """
    return _factor(a, "lu_factor", check_finite)


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True):
    """Solve ``a x = b`` given :func:`lu_factor`'s ``(lu, piv)``:
    ``scipy.linalg.lu_solve``.

    Differentiable in ``lu`` (of which the unit lower triangle without its
    diagonal and the upper triangle are read) and ``b``, to any order;
    ``piv`` is integer data.

    Parameters
    ----------
    lu_and_piv : tuple (lu, piv)
        The factors (..., N, N) and the pivots (..., N).
    b : (N,) or (..., N, K) array_like or Tensor
    trans : {0, 1, 2}
        Solve ``a x = b`` (0) or ``a.T x = b`` (1; 2 for real ``a``).
    overwrite_b : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.

    Returns
    -------
    x : Tensor of the broadcast shape of ``b``

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import lu_factor, lu_solve
    >>> a = tg.tensor([[1.0, 2.0], [4.0, 2.0]], requires_grad=True)
    >>> x = lu_solve(lu_factor(a), np.array([3.0, 6.0]))
    >>> x
    tensor([1.0, 1.0], grad_fn=<SqueezeBackward>)
    >>> x.sum().backward()
    >>> a.grad                              # -(a^-T 1) x^T
    tensor([[-0.33333333, -0.33333333],
            [-0.16666667, -0.16666667]])
    """
    fn = "lu_solve"
    try:
        LU, piv = lu_and_piv
    except (TypeError, ValueError):
        raise TypeError(f"tapegrad.scipy.linalg.{fn}: the first argument must be the pair "
                        "(lu, piv) that lu_factor returns") from None
    LU, b = _operand(LU, fn, "lu"), _operand(b, fn, "b")
    n = _square(LU, fn, "lu")
    piv = np.asarray(on_values(np.asarray, piv) if isinstance(piv, tg.Tensor) else piv)
    if piv.dtype.kind not in "iu" or piv.ndim < 1 or piv.shape[-1] != n:
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: piv must be an integer array of "
                         f"shape (..., {n}) as lu_factor returns, got "
                         f"{piv.dtype} of shape {piv.shape}")
    if piv.size and (piv.min() < 0 or piv.max() >= n):
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: pivots must lie in [0, {n}) "
                         "(0-based row interchanges, as lu_factor returns)")
    B, vector = _rhs(b, n, fn, np.shape(LU))
    t = _trans(trans, fn)
    _check_finite(fn, check_finite, LU, b)
    where = on_values(_zero_diagonal, LU)
    if where is not None:
        raise _singular_error(fn, where, "diagonal entry of U")
    P = _perm_matrix(_permutation(piv, n), LU.dtype)
    if t == 0:  # P a = L U:  L U x = P b
        y = _tri_solve(LU, tg.matmul(P, B), True, unit_diagonal=True)
        x = _tri_solve(LU, y, False)
    else:       # a^T = U^T L^T P:  x = P^T L^-T U^-T b
        z = _tri_solve(LU, B, False, trans=1)
        w = _tri_solve(LU, z, True, unit_diagonal=True, trans=1)
        x = tg.matmul(np.swapaxes(P, -1, -2), w)
    return _vector_out(x, vector)


def lu(a, permute_l=False, overwrite_a=False, check_finite=True, p_indices=False):
    """The pivoted LU decomposition ``a = P L U``: ``scipy.linalg.lu``.

    ``L`` (..., M, K) is unit lower triangular, ``U`` (..., K, N) upper
    triangular, ``K = min(M, N)``; both are differentiable in ``a`` to any
    order (as :func:`lu_factor`'s ``lu``).  ``P`` is a constant array.

    Parameters
    ----------
    a : (..., M, N) array_like or Tensor
    permute_l : bool
        Return ``(P @ L, U)``.
    overwrite_a : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.
    p_indices : bool
        Return the permutation as row indices ``p`` (``a = L[p] @ U``)
        instead of a matrix.

    Returns
    -------
    (p, l, u) or (pl, u)
        ``p`` an ndarray (float matrix, or int32 indices with
        ``p_indices``), ``l``, ``u`` and ``pl`` tensors.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import lu
    >>> p, l, u = lu(tg.tensor([[1.0, 2.0], [4.0, 2.0]]))
    >>> p
    array([[0., 1.],
           [1., 0.]])
    >>> (p @ l.numpy() @ u.numpy()).tolist()
    [[1.0, 2.0], [4.0, 2.0]]
    """
    F, piv = _factor(a, "lu", check_finite)
    m, n = np.shape(F)[-2:]
    k = min(m, n)
    L = tg.tril(F[..., :, :k], -1) + np.eye(m, k, dtype=F.dtype)
    U = tg.triu(F[..., :k, :])
    perm = _permutation(piv, m)
    if permute_l:
        return tg.matmul(np.swapaxes(_perm_matrix(perm, F.dtype), -1, -2), L), U
    if p_indices:
        return np.argsort(perm, axis=-1).astype(np.int32), L, U
    return np.swapaxes(_perm_matrix(perm, F.dtype), -1, -2), L, U


# -- solve, inv, det -----------------------------------------------------------------------
_STRUCTURES = {
    None: "gen", "gen": "gen", "general": "gen", "banded": "gen",
    "sym": "sym", "symmetric": "sym", "her": "sym", "hermitian": "sym",
    "pos": "pos", "positive definite": "pos",
    "diagonal": "diagonal", "tridiagonal": "tridiagonal",
    "upper triangular": "upper triangular", "lower triangular": "lower triangular",
}


def _structure(assume_a, fn, allowed):
    kind = _STRUCTURES.get(assume_a) if isinstance(assume_a, (str, type(None))) else None
    if kind is None or kind not in allowed:
        names = sorted(k for k, v in _STRUCTURES.items() if k is not None and v in allowed)
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: {assume_a!r} is not a recognized "
                         f"matrix structure; use one of {names}")
    return kind


def _symmetric(a, lower):
    """The symmetric matrix of a's lower (or upper) triangle."""
    if lower:
        return tg.tril(a) + _T(tg.tril(a, -1))
    return tg.triu(a) + _T(tg.triu(a, 1))


def _general_solve(A, B, fn):
    try:
        return tg.linalg.solve(A, B)
    except LinAlgError:
        raise LinAlgError(f"tapegrad.scipy.linalg.{fn}: singular matrix (an LU pivot is "
                          "exactly zero)") from None


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False):
    """Solve ``a x = b``: ``scipy.linalg.solve``.

    ``assume_a`` picks what is read, as in SciPy: the whole matrix (None,
    'gen', 'general', 'banded'), the symmetric matrix of one triangle
    ('sym', 'her', and 'pos', which factors it by Cholesky), the diagonal
    ('diagonal'), the three central diagonals ('tridiagonal') or one
    triangle ('upper triangular', 'lower triangular').  The gradient with
    respect to ``a`` lies on what is read.  Differentiable in ``a`` and
    ``b`` to any order.

    Parameters
    ----------
    a : (..., N, N) array_like or Tensor
    b : (N,) or (..., N, K) array_like or Tensor
    lower : bool
        For 'sym', 'her' and 'pos': read the lower triangle (True) or the
        upper one (False, the default).
    overwrite_a, overwrite_b : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.
    assume_a : str or None
        The structure (above).  None reads the whole matrix: the function
        SciPy computes then is the general solve, whatever structure it
        detects.
    transposed : bool
        Solve ``a.T x = b``.

    Returns
    -------
    x : Tensor of the broadcast shape of ``b``

    Raises
    ------
    numpy.linalg.LinAlgError
        For a singular matrix ('pos': one that is not positive definite).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import solve
    >>> a = tg.tensor([[3.0, 1.0], [0.0, 2.0]], requires_grad=True)
    >>> x = solve(a, np.array([4.0, 2.0]))
    >>> x
    tensor([1.0, 1.0], grad_fn=<SqueezeBackward>)
    >>> x[0].backward()
    >>> a.grad
    tensor([[-0.33333333, -0.33333333],
            [0.16666667, 0.16666667]])
    """
    fn = "solve"
    kind = _structure(assume_a, fn, set(_STRUCTURES.values()))
    a, b = _operand(a, fn, "a"), _operand(b, fn, "b")
    n = _square(a, fn)
    B, vector = _rhs(b, n, fn, np.shape(a))
    _check_finite(fn, check_finite, a, b)
    return _vector_out(_structured_solve(a, B, kind, lower, transposed, fn), vector)


def _nonzero_diagonal(a, fn):
    where = on_values(_zero_diagonal, a)
    if where is not None:
        raise _singular_error(fn, where)


def _structured_solve(a, B, kind, lower, transposed, fn):
    """op(A) X = B, B a stack of matrices, A what structure ``kind`` reads of a."""
    if kind == "pos":
        return _chol_solve(_cholesky(a, lower, fn), lower, B)
    if kind in ("upper triangular", "lower triangular"):
        _nonzero_diagonal(a, fn)
        return _tri_solve(a, B, kind == "lower triangular", trans=int(bool(transposed)))
    if kind == "diagonal":
        _nonzero_diagonal(a, fn)
        return B / tg.expand_dims(tg.diagonal(a, axis1=-2, axis2=-1), -1)
    if kind == "sym":
        A = _symmetric(a, lower)  # its own transpose
    else:
        A = tg.triu(tg.tril(a, 1), -1) if kind == "tridiagonal" else a
        A = _T(A) if transposed else A
    return _general_solve(A, B, fn)


def inv(a, overwrite_a=False, check_finite=True, *, assume_a=None, lower=False):
    """The inverse of a square matrix: ``scipy.linalg.inv``.

    ``assume_a`` picks what is read, as for :func:`solve`: the whole
    matrix (None, 'gen', 'general'), the symmetric matrix of one triangle
    ('sym', 'her', 'pos'; ``lower`` names it), the diagonal ('diagonal':
    the inverse is diagonal) or one triangle ('upper triangular', 'lower
    triangular').  Differentiable to any order.

    Parameters
    ----------
    a : (..., M, M) array_like or Tensor
    overwrite_a : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.
    assume_a : str or None
    lower : bool

    Returns
    -------
    ainv : Tensor of a's shape

    Raises
    ------
    numpy.linalg.LinAlgError
        For a singular matrix ('pos': one that is not positive definite).

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.scipy.linalg import inv
    >>> a = tg.tensor([[2.0, 0.0], [0.0, 4.0]], requires_grad=True)
    >>> inv(a)[1, 1].backward()
    >>> a.grad
    tensor([[0.0, 0.0],
            [0.0, -0.0625]])
    """
    fn = "inv"
    kind = _structure(assume_a, fn, {"gen", "sym", "pos", "diagonal", "upper triangular",
                                     "lower triangular"})
    a = _operand(a, fn, "a")
    n = _square(a, fn)
    _check_finite(fn, check_finite, a)
    if kind == "gen":
        try:
            return tg.linalg.inv(a)
        except LinAlgError:
            raise LinAlgError(f"tapegrad.scipy.linalg.{fn}: singular matrix (an LU pivot "
                              "is exactly zero)") from None
    eye = np.broadcast_to(np.eye(n, dtype=a.dtype), np.shape(a))
    return _structured_solve(a, eye, kind, lower, False, fn)


def det(a, overwrite_a=False, check_finite=True):
    """The determinant: ``scipy.linalg.det``, differentiable to any order.

    Parameters
    ----------
    a : (..., M, M) array_like or Tensor
    overwrite_a : bool
        Ignored.
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.

    Returns
    -------
    det : Tensor of shape a.shape[:-2]

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.scipy.linalg import det
    >>> a = tg.tensor([[2.0, 1.0], [1.0, 3.0]], requires_grad=True)
    >>> det(a).backward()                   # det(a) a^-T
    >>> a.grad
    tensor([[3.0, -1.0],
            [-1.0, 2.0]])
    """
    fn = "det"
    a = _operand(a, fn, "a")
    _square(a, fn)
    _check_finite(fn, check_finite, a)
    return tg.linalg.det(a)


# -- eigh ----------------------------------------------------------------------------------
_DRIVERS = (None, "ev", "evd", "evr", "evx", "gv", "gvd", "gvx")


def _in_interval(w, lo, hi):
    """Indices of the eigenvalues in (lo, hi], or None where the matrices of
    a stack keep different ones."""
    keep = (np.asarray(w) > lo) & (np.asarray(w) <= hi)
    rows = keep.reshape((-1, keep.shape[-1]))
    if rows.shape[0] and (rows != rows[0]).any():
        return None
    return tuple(int(i) for i in np.flatnonzero(rows[0])) if rows.shape[0] else ()


def eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False, overwrite_b=False,
         type=1, check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """Eigenvalues and eigenvectors of a symmetric matrix, or of the
    generalised problem with a symmetric positive definite ``b``:
    ``scipy.linalg.eigh``.

    Reads the symmetric matrix of the triangle named by ``lower`` of ``a``
    (and of ``b``); the gradient lies on it.  The problems: ``a v = w b v``
    (``type=1``), ``a b v = w v`` (2), ``b a v = w v`` (3); with ``b`` the
    eigenvectors are normalised as SciPy's, ``v.T b v = I`` (types 1, 2) or
    ``v.T b^-1 v = I`` (3).  Eigenvalues ascend; an eigenvector's sign may
    differ from SciPy's.  Eigenvalue gradients are defined everywhere,
    eigenvector gradients only for distinct eigenvalues (as in every
    framework).  ``driver`` is checked and otherwise ignored (the values
    agree to rounding).

    Parameters
    ----------
    a : (..., M, M) array_like or Tensor
    b : (..., M, M) array_like or Tensor, optional
    lower : bool
        Read the lower (True, the default) or upper triangle.
    eigvals_only : bool
        Return the eigenvalues only.
    overwrite_a, overwrite_b : bool
        Ignored.
    type : {1, 2, 3}
        The generalised problem (above).
    check_finite : bool
        Raise ``ValueError`` for infs or NaNs.
    subset_by_index : (lo, hi), optional
        Keep eigenvalues ``lo`` to ``hi`` (inclusive, 0-based, ascending).
    subset_by_value : (lo, hi), optional
        Keep the eigenvalues in ``(lo, hi]``; a stack must keep as many in
        each matrix.
    driver : str, optional

    Returns
    -------
    w : Tensor (..., K)
    v : Tensor (..., M, K), unless ``eigvals_only``

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.scipy.linalg import eigh
    >>> a = tg.tensor([[2.0, 1.0], [1.0, 2.0]], requires_grad=True)
    >>> w = eigh(a, eigvals_only=True)
    >>> w
    tensor([1.0, 3.0], grad_fn=<LinalgEighBackward>)
    >>> w[1].backward()                     # v v^T, on the lower triangle
    >>> a.grad
    tensor([[0.5, 0.0],
            [1.0, 0.5]])
    """
    fn = "eigh"
    if type not in (1, 2, 3):
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: type must be 1, 2 or 3, got {type!r}")
    if driver not in _DRIVERS:
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: driver must be one of "
                         f"{list(_DRIVERS[1:])} or None, got {driver!r}")
    if subset_by_index is not None and subset_by_value is not None:
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: give subset_by_index or "
                         "subset_by_value, not both")
    a = _operand(a, fn, "a")
    n = _square(a, fn)
    _check_finite(fn, check_finite, a)
    if b is None:
        A = a
    else:
        b = _operand(b, fn, "b")
        if _square(b, fn, "b") != n:
            raise ValueError(f"tapegrad.scipy.linalg.{fn}: a {tuple(np.shape(a))} and b "
                             f"{tuple(np.shape(b))} must be matrices of one size")
        _check_finite(fn, check_finite, b)
        L = _cholesky(b, True, fn, "b") if lower else _T(_cholesky(b, False, fn, "b"))
        S = _symmetric(a, lower)
        if type == 1:  # L^-1 a L^-T
            A = _T(_tri_solve(L, _T(_tri_solve(L, S, True)), True))
        else:          # L^T a L
            A = tg.matmul(tg.matmul(_T(L), S), L)
    w, V = tg.linalg.eigh(A, UPLO="L" if lower or b is not None else "U")
    if b is not None:
        V = _tri_solve(L, V, True, trans=1) if type in (1, 2) else tg.matmul(L, V)
    if subset_by_index is not None:
        try:
            lo, hi = (int(i) for i in subset_by_index)
        except (TypeError, ValueError):
            raise ValueError(f"tapegrad.scipy.linalg.{fn}: subset_by_index must be a pair "
                             f"of integers (lo, hi), got {subset_by_index!r}") from None
        if not 0 <= lo <= hi < n:
            raise ValueError(f"tapegrad.scipy.linalg.{fn}: subset_by_index must satisfy "
                             f"0 <= lo <= hi < {n}, got {subset_by_index!r}")
        w, V = w[..., lo:hi + 1], V[..., lo:hi + 1]
    elif subset_by_value is not None:
        lo, hi = (float(v) for v in subset_by_value)
        found = on_values(_in_interval, w, lo, hi)
        if found is None:
            raise ValueError(f"tapegrad.scipy.linalg.{fn}: subset_by_value keeps a "
                             "different number or different positions of eigenvalues in "
                             "the matrices of the stack; use subset_by_index, or one matrix "
                             "at a time")
        idx = np.array(found, dtype=np.intp)
        w, V = w[..., idx], V[..., idx]
    return w if eigvals_only else (w, V)


def eigvalsh(a, b=None, *, lower=True, overwrite_a=False, overwrite_b=False, type=1,
             check_finite=True, subset_by_index=None, subset_by_value=None, driver=None):
    """The eigenvalues of :func:`eigh`: ``scipy.linalg.eigvalsh``.

    Parameters
    ----------
    a, b, lower, overwrite_a, overwrite_b, type, check_finite, subset_by_index, \
subset_by_value, driver
        As for :func:`eigh`.

    Returns
    -------
    w : Tensor (..., K)
        The eigenvalues, ascending.

    Examples
    --------
    >>> import tapegrad as tg
    >>> from tapegrad.scipy.linalg import eigvalsh
    >>> eigvalsh(tg.tensor([[2.0, 1.0], [1.0, 2.0]]))
    tensor([1.0, 3.0])
    """
    return eigh(a, b, lower=lower, eigvals_only=True, type=type, check_finite=check_finite,
                subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                driver=driver)


# -- expm ----------------------------------------------------------------------------------
#: the largest 1-norm at which the [m/m] Pade approximant of exp has a
#: backward error below float64's unit roundoff (Higham, "The scaling and
#: squaring method for the matrix exponential revisited", 2005)
_THETA = {3: 1.495585217958292e-2, 5: 2.539398330063230e-1, 7: 9.504178996162932e-1,
          9: 2.097847961257068e0, 13: 5.371920351148152e0}


def _pade(m):
    """The coefficients c_j of the [m/m] Pade numerator of exp(x) (its
    denominator at -x): c_j = (2m - j)! m! / ((2m)! j! (m - j)!)."""
    f = math.factorial
    return [f(2 * m - j) * f(m) / (f(2 * m) * f(j) * f(m - j)) for j in range(m + 1)]


def _expm_plan(a):
    """(degree, squarings) for the largest 1-norm of the stack ``a``."""
    a = np.asarray(a)
    norm = float(np.abs(a).sum(axis=-2).max(initial=0.0)) if a.size else 0.0
    if not math.isfinite(norm):
        return None
    for m in (3, 5, 7, 9):
        if norm <= _THETA[m]:
            return m, 0
    return 13, max(0, math.ceil(math.log2(norm / _THETA[13])))


def expm(A):
    """The matrix exponential: ``scipy.linalg.expm``, differentiable to any order.

    Scaling and squaring with a Pade approximant of degree 3 to 13 (chosen
    from the largest 1-norm of the stack, as Higham's 2005 method does),
    written in tapegrad ops: the derivative is that of the approximant,
    accurate to about the same relative error as the value (Al-Mohy and
    Higham, 2009), and every transform follows it -- reverse, forward,
    Hessians and ``create_graph`` -- at a few matrix products per order,
    where the block-matrix identity ``expm([[A, E], [0, A]])`` would take
    an exponential of twice the size per derivative.

    Parameters
    ----------
    A : (..., N, N) array_like or Tensor

    Returns
    -------
    expm : Tensor of A's shape

    Raises
    ------
    ValueError
        For infs or NaNs in ``A`` (no degree fits them).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.scipy.linalg import expm
    >>> A = tg.tensor([[0.0, 1.0], [0.0, 0.0]], requires_grad=True)
    >>> expm(A)
    tensor([[1.0, 1.0],
            [0.0, 1.0]], grad_fn=<LinalgSolveBackward>)
    >>> expm(A)[0, 1].backward()
    >>> A.grad
    tensor([[0.5, 1.0],
            [0.16666667, 0.5]])
    """
    fn = "expm"
    A = _operand(A, fn, "A")
    n = _square(A, fn, "A")
    plan = on_values(_expm_plan, A)
    if plan is None:
        raise ValueError(f"tapegrad.scipy.linalg.{fn}: A contains infs or NaNs")
    m, s = plan
    if n == 0:
        return A * 1.0
    if s:
        A = A * (0.5 ** s)
    c = _pade(m)
    eye = np.eye(n, dtype=A.dtype)
    mm = tg.matmul
    A2 = mm(A, A)
    if m < 13:
        powers = [eye, A2]                       # A^0, A^2, A^4, ...
        while len(powers) <= m // 2:
            powers.append(mm(powers[-1], A2))
        odd = sum(c[2 * i + 1] * powers[i] for i in range(m // 2 + 1))
        V = sum(c[2 * i] * powers[i] for i in range(m // 2 + 1))
        U = mm(A, odd)
    else:  # degree 13 in six products: A^2, A^4, A^6 and two more
        A4 = mm(A2, A2)
        A6 = mm(A4, A2)
        U = mm(A, mm(A6, c[13] * A6 + c[11] * A4 + c[9] * A2)
               + c[7] * A6 + c[5] * A4 + c[3] * A2 + c[1] * eye)
        V = mm(A6, c[12] * A6 + c[10] * A4 + c[8] * A2) \
            + c[6] * A6 + c[4] * A4 + c[2] * A2 + c[0] * eye
    R = tg.linalg.solve(V - U, V + U)            # q(A)^-1 p(A), q(A) = p(-A)
    for _ in range(s):
        R = mm(R, R)
    return R
