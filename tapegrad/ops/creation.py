"""Tensors made from shapes, ranges and random numbers, with PyTorch's
``requires_grad=`` keyword: ``tg.zeros``, ``ones``, ``full``, the ``*_like``
forms, ``arange``, ``linspace``, ``randn``, ``rand``, and ``from_numpy``
(which shares the array's memory, as ``torch.from_numpy`` does).

Random numbers come from a NumPy ``Generator``: the one passed as
``generator=``, a fresh one seeded with ``seed=``, or else a module-level
generator made once per process.
"""
import operator

import numpy as np

from ..core.tensor import Tensor, _plain
from . import numeric as N

_DEFAULT_RNG = None


def _leaf(data, requires_grad):
    t = _plain(data if np.ndim(data) else np.asarray(data)[()])
    if requires_grad:
        t.requires_grad_(True)
    return t


def _size(size, who):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        return tuple(operator.index(n) for n in size)
    except TypeError:
        raise TypeError(f"{who}: the size must be ints or one tuple of ints, got "
                        f"{size!r}") from None


def _shape_arg(shape):
    return (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)


def zeros(shape, dtype=float, requires_grad=False):
    """``numpy.zeros`` as a leaf tensor.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.zeros((2,), requires_grad=True)
    tensor([0.0, 0.0], requires_grad=True)
    """
    return _leaf(np.zeros(_shape_arg(shape), dtype), requires_grad)


def ones(shape, dtype=float, requires_grad=False):
    """``numpy.ones`` as a leaf tensor.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.ones(2)
    tensor([1.0, 1.0])
    """
    return _leaf(np.ones(_shape_arg(shape), dtype), requires_grad)


def full(shape, fill_value, dtype=None, requires_grad=False):
    """``numpy.full`` as a leaf tensor (a tensor ``fill_value`` gives its value).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.full((1, 2), 3.0)
    tensor([[3.0, 3.0]])
    """
    v = fill_value._data if isinstance(fill_value, Tensor) else fill_value
    return _leaf(np.full(_shape_arg(shape), v, dtype), requires_grad)


def _like_shape(a):
    return np.shape(a._data if isinstance(a, Tensor) else a)


def _like_dtype(a, dtype):
    if dtype is not None:
        return dtype
    return a.dtype if isinstance(a, Tensor) else np.asarray(a).dtype


def zeros_like(a, dtype=None, requires_grad=False):
    """A leaf of zeros with ``a``'s shape and dtype (``numpy.zeros_like`` on
    a tensor gives the same, without ``requires_grad``).

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.zeros_like(tg.tensor([1.0, 2.0]), requires_grad=True)
    tensor([0.0, 0.0], requires_grad=True)
    """
    return _leaf(np.zeros(_like_shape(a), _like_dtype(a, dtype)), requires_grad)


def ones_like(a, dtype=None, requires_grad=False):
    """A leaf of ones with ``a``'s shape and dtype."""
    return _leaf(np.ones(_like_shape(a), _like_dtype(a, dtype)), requires_grad)


def full_like(a, fill_value, dtype=None, requires_grad=False):
    """A leaf filled with ``fill_value``, with ``a``'s shape and dtype."""
    v = fill_value._data if isinstance(fill_value, Tensor) else fill_value
    return _leaf(np.full(_like_shape(a), v, _like_dtype(a, dtype)), requires_grad)


def arange(start, stop=None, step=None, dtype=None, requires_grad=False):
    """``numpy.arange`` as a leaf tensor.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.arange(0.0, 1.0, 0.25, requires_grad=True)
    tensor([0.0, 0.25, 0.5, 0.75], requires_grad=True)
    """
    args = [v._data if isinstance(v, Tensor) else v for v in (start, stop, step)
            if v is not None]
    if step is not None and stop is None:
        args.insert(1, None)
    return _leaf(np.arange(*args, dtype=dtype), requires_grad)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0,
             requires_grad=False):
    """``numpy.linspace``: differentiable in tensor endpoints that require
    grad; with ``requires_grad=True`` (and endpoints that do not) a leaf.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.linspace(0.0, 1.0, 3, requires_grad=True)
    tensor([0.0, 0.5, 1.0], requires_grad=True)
    """
    tracked = any(isinstance(v, Tensor) and v.requires_grad for v in (start, stop))
    if tracked:
        if requires_grad:
            raise ValueError(
                "linspace: requires_grad=True makes a leaf, but start or stop require grad "
                "already (the result is differentiable in them); drop requires_grad=")
        return N.linspace(start, stop, num, endpoint, retstep, dtype, axis)
    vals = [v._data if isinstance(v, Tensor) else v for v in (start, stop)]
    out = np.linspace(*vals, num, endpoint=endpoint, retstep=retstep, dtype=dtype, axis=axis)
    if retstep:
        return _leaf(out[0], requires_grad), out[1]
    return _leaf(out, requires_grad)


def from_numpy(a):
    """A leaf tensor that shares ``a``'s memory (``torch.from_numpy``):
    writes into ``a`` change the tensor and in-place writes into the tensor
    change ``a``.  While a graph holds the value the array is read-only, so
    a saved value never changes under a gradient.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = np.array([1.0, 2.0])
    >>> t = tg.from_numpy(a)
    >>> a[0] = 5.0
    >>> t
    tensor([5.0, 2.0])
    """
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected an ndarray, got {type(a).__name__} "
                        "(tg.tensor copies any array-like)")
    if a.dtype.kind not in "biuf":
        raise TypeError(f"from_numpy: dtype {a.dtype} is not supported (real numbers "
                        "only: bool, integers, floats)")
    return _plain(a)


def _generator(seed, generator, who):
    global _DEFAULT_RNG
    if seed is not None and generator is not None:
        raise TypeError(f"{who}: pass seed= or generator=, not both")
    if generator is not None:
        if not isinstance(generator, np.random.Generator):
            raise TypeError(f"{who}: generator= must be a numpy.random.Generator (as "
                            f"np.random.default_rng() makes), got {type(generator).__name__}")
        return generator
    if seed is not None:
        return np.random.default_rng(seed)
    if _DEFAULT_RNG is None:
        _DEFAULT_RNG = np.random.default_rng()
    return _DEFAULT_RNG


def _float_dtype(dtype, who):
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise TypeError(f"{who}: dtype must be float32 or float64, got {dt}")
    return dt


def randn(*size, dtype=np.float64, requires_grad=False, seed=None, generator=None):
    """Standard normal samples (``Generator.standard_normal``) as a leaf.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> tg.randn(2, 3, seed=0).shape
    (2, 3)
    >>> bool(np.all(tg.randn(4, seed=1) == tg.randn(4, seed=1)))
    True
    """
    shape = _size(size, "randn")
    rng = _generator(seed, generator, "randn")
    return _leaf(rng.standard_normal(shape, dtype=_float_dtype(dtype, "randn")), requires_grad)


def rand(*size, dtype=np.float64, requires_grad=False, seed=None, generator=None):
    """Uniform samples in [0, 1) (``Generator.random``) as a leaf.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> g = np.random.default_rng(0)
    >>> tg.rand((2,), generator=g).shape
    (2,)
    """
    shape = _size(size, "rand")
    rng = _generator(seed, generator, "rand")
    return _leaf(rng.random(shape, dtype=_float_dtype(dtype, "rand")), requires_grad)

