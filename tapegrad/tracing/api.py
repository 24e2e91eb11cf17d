"""Trace once, replay compiled: ``tg.trace(f, *args)`` and ``@tg.compile``.

Tracing runs ``f`` once, eagerly, on a private tape (a :class:`TraceTape`
installed as the thread's tape for the duration) that keeps every value.
The records it leaves are the function: a replay writes new inputs into the
input records and recomputes every other record in order in compiled code
(:mod:`tapegrad.kernels.replay`), and the ordinary reverse sweep then runs on
the replayed values.  Host records (matmul, solve, ...) are computed by NumPy
during a replay, as their VJPs are during a sweep -- but for small matmuls
(1-d and 2-d operands, at most ``kernels.small_matmul.SMALL_MATMUL``
multiply-adds), which the compiled replay and sweep loops compute in plain
loops (within rounding of NumPy's BLAS, the same in every replay).

Runs of consecutive same-size elementwise records (of at least
``FUSE_MIN`` elements) are fused: forward and reverse go over them block by
block (``CHUNK`` elements, split among threads for large arrays), so the
intermediates that nothing outside the run reads never reach memory and the
reverse sweep recomputes the few its VJPs need (``trace_replay._reads``).  Inputs are
read in place; gradients are handed out from the leaves' adjoint arena,
which the next call reuses once the caller has dropped them.  ``ft.jvp`` and
``ft.hvp`` replay every value and run ``tg.jvp``'s tangent sweep and
``tg.hvp``'s pass on the replay as on a tape.  ``f`` may return a tuple of
tensors (``ft.vjp`` then takes a tuple of cotangents).

What a trace fixes
------------------
* Shapes and dtypes: a call with different ones traces again (one cache
  entry per signature; the ``cache_size`` signatures used last are kept,
  ``MAX_SIGNATURES`` = 64 by default, and a dropped one traces again).
  Python ints, bools, strings, tuples and other
  hashable objects among the arguments are static: part of the signature
  by type and value (``(1,)`` and ``(True,)`` are two signatures; an
  object hashed by identity is keyed on its attributes too, so a config
  object changed between calls traces again).
* Arrays and tensors that ``f`` closes over are constants of the trace,
  read at trace time.
* A traced value that leaves the tape is guarded: a replay whose guard no
  longer holds traces again transparently (``ft.retraces`` counts these; a
  warning is issued past ``RETRACE_WARNING``).  That covers Python control
  flow (``bool()``, an ``if`` on a comparison, and ``float()``, ``int()``,
  ``.item()`` of a detached traced value, ``float(t.detach())``: the truth
  or the exact value is checked; of the traced tensor itself these raise
  ``tg.ConcretizationError``, as in every transform, since the number
  would carry no gradient), NumPy functions
  with plain results (``np.argmax``, ``np.argsort``, ``np.searchsorted``,
  ``np.nonzero``, ``np.isnan``, ``np.allclose``, ...: the function runs
  again on the replayed values and its result must not change), the
  indices behind ``np.sort`` and ``np.unique``, and a detached traced value
  (``x.detach()``) used as an operand (its exact value is checked).
  Comparisons of traced tensors are records, so a ``where`` mask, a
  ``x * (x > 0)`` or the NaN masks of ``nansum`` are recomputed by the
  replay without a guard; a comparison whose result no record consumes (it
  went to NumPy or Python) is guarded as a whole.
* Replay computes in float64 (the tape's precision); a float32 function's
  results are cast back to float32.

Saving, pickling, batches
-------------------------
``ft.save(path)`` writes every trace to one ``.npz`` of plain arrays and
``tg.load(path)`` reads it back, validated, in any process (see
:mod:`tapegrad.tracing.files.io`); a loaded function replays but cannot trace again.
Traced functions pickle through the same arrays (with ``f`` when ``f``
pickles), so ``multiprocessing`` workers can run them.  ``ft.grad_batch(X)``
splits a batch among threads, each replaying its own copy of the trace.

A trace that guards a NumPy call runs Python at every replay and cannot be
saved (``ft.save`` raises; a pickle keeps its other traces).

Ops that cannot be replayed (``tg.sort``, ``tg.Function``, eigh, qr, svd,
lstsq) raise ``NotImplementedError`` naming the op when traced; every trace
is also replayed once at its own inputs and compared record by record with
the eager values, so an op whose replay would differ fails loudly there.

Where the parts live
--------------------
This module is the front end (``trace``, ``compile``) and the names users
know; the parts, lowest first: :mod:`tapegrad.tracing.tape` (the tape a trace
records on, guards, the signatures traces are cached under),
:mod:`tapegrad.tracing.replay` (one trace replayed: value and adjoint storage,
fused segments, the host forwards), :mod:`tapegrad.tracing.function`
(``TracedFunction``, ``LoadedFunction``) and :mod:`tapegrad.tracing.files.io`
(files and pickles).
"""
import numpy as np

from .files import io as tapefile  # noqa: F401  (binds saving and pickling into traced_function.files)
from ..core.tensor import Tensor
from .replay import FUSE_MIN, PAR_MIN, _Replay  # noqa: F401  (the fusion thresholds)
from .tape import TraceTape, _signature  # noqa: F401
from .function import (  # noqa: F401
    MAX_SIGNATURES, MAX_TRACES, RETRACE_WARNING, LoadedFunction, TracedFunction, _LOCK)


def trace(f, *example_args, cache_size=None, **kwargs):
    """Trace ``f`` at ``example_args`` and return a :class:`TracedFunction`.

    ``f`` takes float arrays (or tensors, or floats) and returns one tensor;
    it runs once, eagerly, and later calls with arguments of the same shapes
    and dtypes replay what it did in compiled code, forward and reverse.
    Arrays ``f`` closes over are constants of the trace.  Traces are kept
    for the ``cache_size`` input signatures (shapes, dtypes, static
    arguments) used last -- ``MAX_SIGNATURES`` (64) unless given; a call
    with a signature whose traces were dropped traces again.  Called with a
    tensor or array instead of a function, this is ``numpy.trace`` (the sum
    of a diagonal), the name tapegrad had before.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> def f(x):
    ...     return (np.sin(x) * x).sum()
    >>> ft = tg.trace(f, np.zeros(3))
    >>> v, g = ft.value_and_grad(np.array([0.0, 1.0, 2.0]))
    >>> bool(np.isclose(v, np.sin(1.0) + 2 * np.sin(2.0)))
    True
    >>> tg.trace(tg.tensor(np.eye(2)))
    tensor(2.0)
    """
    if not callable(f) or isinstance(f, (Tensor, np.ndarray)):
        from ..ops.composite import trace as diagonal_trace
        if cache_size is not None:
            raise TypeError("tapegrad.trace of an array (numpy.trace) takes no cache_size")
        return diagonal_trace(f, *example_args, **kwargs)
    if kwargs:
        raise TypeError("tapegrad.trace takes the example arguments positionally")
    ft = TracedFunction(f, cache_size)
    with _LOCK:
        key, _, _ = _signature(example_args)
        ft.cache[key] = [_Replay(f, example_args)]
    return ft


def compile(f=None, *, cache_size=None):  # noqa: A001  (the name the issue asks for)
    """Decorator: trace ``f`` on its first call for each input signature
    (shapes and dtypes) and replay it in compiled code afterwards.

    Traces are kept for the ``cache_size`` signatures used last
    (``MAX_SIGNATURES``, 64, unless given: ``@tg.compile(cache_size=8)``);
    a call with a signature whose traces were dropped traces again.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> @tg.compile
    ... def f(x):
    ...     return (x ** 2).sum() if (x.sum() > 0) else -x.sum()
    >>> float(f(np.array([1.0, 2.0]))), float(f(np.array([-1.0, -2.0]))), f.retraces
    (5.0, 3.0, 1)
    >>> f.grad(np.array([1.0, 2.0]))
    array([2., 4.])
    """
    if f is None:
        return lambda g: TracedFunction(g, cache_size)
    return TracedFunction(f, cache_size)
