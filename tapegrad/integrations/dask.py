"""Traced gradients on Dask: over the blocks of a dask array, over a bag or a
list of inputs on a ``dask.distributed`` cluster, with the kernels warm on
every worker.

Needs the ``dask`` extra (``pip install 'tapegrad[dask]'``: ``dask[array]``
and ``distributed``).  ``import tapegrad`` never imports Dask, and neither
does importing this module: each function imports what it uses when called
and raises an ``ImportError`` naming the extra when it is missing.

A traced function (``tg.trace``, ``@tg.compile``, ``tg.load``) travels to the
workers as it pickles: its traces as the bytes of a tape file, validated
again on the worker, and its Python function when that pickles (a function
of an importable module by reference, one defined in ``__main__`` by value;
a lambda stays behind, and the workers' copy replays the traces it has but
cannot trace again).  Each worker deserialises it once per graph.

Functions
---------
``grad_blocks(ft, *arrays, axis=0)``
    Gradients at every input of one or more dask arrays, each block a batch
    of inputs along the batch axis: ``ft.grad_batch`` per block.  The result
    has the chunks of the input.
``value_and_grad_blocks(ft, *arrays, axis=0)``
    The values too, as a dask array with one element per input.
``map_inputs(client, ft, inputs, method="grad")``
    ``ft.<method>`` at every input of a list, on a ``distributed.Client``,
    in batches (``client.map`` over the batches); the results in order.
``map_bag(ft, bag, method="grad")``
    The same over a ``dask.bag.Bag``, lazily: a bag of the results.
``warm_workers(client, *examples, full=None)``
    Compile (or load from the cache) the kernels on every worker, now and on
    workers that join later (a worker plugin, :class:`WarmKernels`).

Kernels on the workers
----------------------
The compiled kernels are cached per user and per machine (``_jit.cache_dir``),
and every worker process on a machine shares that cache.  The warm-up runs
under a lock file in the cache directory, so one worker per machine compiles
and the others load what it wrote (about 1 s for every kernel of
``python -m tapegrad warm``, against about 80 s to compile them on a 2-core
machine).

Workers compile instead of interpreting: the plugin sets
``TAPEGRAD_INTERPRET=0`` in each worker process (``interpret=`` changes or
keeps the setting).  The interpreted tier exists for short programs that
would spend longer compiling than computing; a worker is a long-lived process
that runs many gradients, and interpreted kernels hold the GIL, so a worker's
threads would take turns.  Without the plugin, workers follow the default
rule (start interpreted, compile once it pays), which gives the same numbers.

Batches and threads
-------------------
A block runs ``ft.grad_batch(..., workers=threads)`` with ``threads=1`` by
default: Dask already runs one task per worker thread, so a task that
started a thread per core would oversubscribe them.  Traced functions share
one lock per process for their ordinary calls (``ft.grad``,
``ft.value_and_grad``, ...), so run workers with one thread each
(``LocalCluster(n_workers=cores, threads_per_worker=1)``) when the calls are
not batched; ``grad_batch`` replays on copies of the trace and needs no lock.
"""
import asyncio
import contextlib
import importlib
import math
import os
import time

import numpy as np

#: the traced functions' methods that ``map_inputs`` and ``map_bag`` call
METHODS = ("grad", "value_and_grad", "grad_batch", "vjp", "jacobian", "jvp", "hvp", "hessian",
           "sparse_hessian", "__call__")

#: the name the worker plugin is registered under
PLUGIN_NAME = "tapegrad-warm"

_EXTRA = "pip install 'tapegrad[dask]'"


def _need(module, who):
    """Import ``module`` (dask.array, dask.bag, distributed, ...) or raise an
    ImportError that names the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"tapegrad.integrations.dask.{who} needs {module.split('.')[0]}, which "
                          f"is not installed: {_EXTRA} (dask[array] and distributed)") from e


def _traced(ft, who):
    from ..tracing.api import TracedFunction
    if isinstance(ft, TracedFunction):
        return ft
    if callable(ft):
        name = getattr(ft, "__name__", type(ft).__name__)
        raise TypeError(f"tapegrad.integrations.dask.{who}: {name} is not a traced function; trace "
                        "it first (ft = tg.trace(f, *example_args), or decorate f with "
                        "@tg.compile) and pass ft")
    raise TypeError(f"tapegrad.integrations.dask.{who} takes a traced function (tg.trace, "
                    f"tg.compile, tg.load) as its first argument, not {type(ft).__name__}")


def _method(method, who):
    if method not in METHODS:
        raise ValueError(f"tapegrad.integrations.dask.{who}: method={method!r} is not a traced "
                         f"function's method; choose one of {', '.join(METHODS)}")
    return method


def _as_args(item):
    """One input of a list or bag: a tuple or list holds the arguments, anything
    else is the only argument."""
    return tuple(item) if isinstance(item, (tuple, list)) else (item,)


# -- dask arrays: one block is a batch ---------------------------------------------------


def _arrays(arrays, axis, who):
    """Validated dask arrays with the batch axis moved first."""
    da = _need("dask.array", who)
    if not arrays:
        raise TypeError(f"tapegrad.integrations.dask.{who} needs at least one dask array of inputs")
    out = []
    for i, a in enumerate(arrays):
        if not isinstance(a, da.Array):
            raise TypeError(
                f"tapegrad.integrations.dask.{who}: argument {i} is a {type(a).__name__}, not a dask "
                "array; wrap it (dask.array.from_array(x, chunks=...)) or call ft.grad_batch(x) "
                "on it directly")
        if a.ndim == 0:
            raise ValueError(f"tapegrad.integrations.dask.{who}: argument {i} is 0-d; it needs a "
                             "batch axis (one input per index along it)")
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"tapegrad.integrations.dask.{who}: argument {i} has dtype {a.dtype}; "
                            "the inputs must be floating-point (cast with .astype(float))")
        ax = axis + a.ndim if -a.ndim <= axis < 0 else axis
        if not 0 <= ax < a.ndim:
            raise ValueError(f"tapegrad.integrations.dask.{who}: axis={axis} is out of range for "
                             f"argument {i} of shape {a.shape}")
        split = [d for d in range(a.ndim) if d != ax and len(a.chunks[d]) > 1]
        if split:
            fix = ", ".join(f"{d}: -1" for d in split)
            raise ValueError(
                f"tapegrad.integrations.dask.{who}: argument {i} (shape {a.shape}, chunks "
                f"{a.chunks}) is split along axis {', '.join(map(str, split))}; a block must "
                f"hold whole inputs, split along the batch axis {ax} only: rechunk it first, "
                f"x.rechunk({{{fix}}})")
        out.append(da.moveaxis(a, ax, 0) if ax else a)
    lengths = {a.shape[0] for a in out}
    if len(lengths) != 1:
        raise ValueError(f"tapegrad.integrations.dask.{who}: the arguments have different lengths "
                         f"along the batch axis: {[a.shape[0] for a in out]}")
    # the blocks of all arguments must pair up: the first argument's batch chunks
    out = [out[0]] + [a if a.chunks[0] == out[0].chunks[0] else a.rechunk({0: out[0].chunks[0]})
                      for a in out[1:]]
    return da, out


def _check_signature(ft, arrays, who):
    """A loaded function cannot trace again: refuse, before any task runs,
    inputs of a signature it has no trace for."""
    from ..tracing.api import LoadedFunction, _signature
    if isinstance(ft, LoadedFunction):
        key = _signature([np.empty(a.shape[1:], a.dtype) for a in arrays])[0]
        if key not in ft.cache:
            raise ValueError(
                f"tapegrad.integrations.dask.{who}: the loaded function {ft.__name__} has no trace "
                f"for inputs of shape and dtype {[(a.shape[1:], str(a.dtype)) for a in arrays]} "
                f"(one row of each block); it holds traces for {list(ft.cache)}")


def _describe(key):
    """A signature (``trace_tape._signature``'s key) in words: the shape and
    dtype of each argument, or its value for a static one."""
    parts = []
    for k in key:
        if k and k[0] == "static":
            parts.append(f"static {k[2]!r:.40}")
        else:
            parts.append(f"shape {tuple(k[0])} {np.dtype(k[1]).name}")
    return "(" + ", ".join(parts) + ")"


def _traced_for(ft):
    """The signatures ``ft`` holds traces for, in words."""
    return ", ".join(_describe(k) for k in ft.cache) or "none"


def _retraces_on_workers(ft):
    """Whether the workers' copy of ``ft`` can trace again: it carries its
    Python function when that pickles (``TracedFunction.__reduce__``)."""
    import pickle

    from ..tracing.api import LoadedFunction
    if isinstance(ft, LoadedFunction) or getattr(ft, "f", None) is None:
        return False
    try:
        pickle.dumps(ft.f)
    except Exception:   # noqa: BLE001 -- whatever stops it pickling, it stays behind
        return False
    return True


#: methods whose input is the function's arguments alone (no cotangent or tangent)
_ARGS_ONLY = ("grad", "value_and_grad", "jacobian", "hessian", "sparse_hessian", "__call__")


def _check_inputs(ft, batches, method, who):
    """Refuse, before anything is sent, an input whose signature the workers'
    copy of ``ft`` has no trace for and cannot trace (a loaded function, or
    one whose Python function does not pickle), naming the input's index
    and shapes and the shapes ``ft`` was traced for."""
    from ..tracing.tape import _signature
    if method not in _ARGS_ONLY or _retraces_on_workers(ft):
        return
    i = 0
    for batch in batches:
        for args in batch:
            key = _signature(args)[0]
            if key not in ft.cache:
                raise ValueError(
                    f"tapegrad.integrations.dask.{who}: input {i} has arguments {_describe(key)}, "
                    f"but {ft.__name__} holds traces for {_traced_for(ft)} only and cannot "
                    "trace again on the workers (it was loaded, or its Python function does "
                    "not pickle: define it at module level); give inputs of a traced shape, "
                    "or call ft once on such an input before map_inputs")
            i += 1


def _failed(e, who, first, args, expected, count=1):
    """The error ``e`` of a worker's task made to name the input it came from
    (index ``first``, None when unknown; ``count`` same-shaped inputs from
    there when a whole stacked batch failed), its arguments' shapes, and the
    signatures ``ft`` was traced for (``expected``)."""
    from ..tracing.tape import _signature
    try:
        sig = f"arguments {_describe(_signature(args)[0])}"
    except Exception:   # noqa: BLE001 -- the original error is the one to show
        sig = "arguments of no signature"
    if first is None:
        what = f"an input with {sig}"
    elif count == 1:
        what = f"input {first}, with {sig},"
    else:
        what = f"inputs {first} to {first + count - 1}, each with {sig},"
    msg = (f"tapegrad.integrations.dask.{who}: {what} failed on a worker: {type(e).__name__}: {e} "
           f"(the function was traced for {expected}; an input of another shape traces it "
           "again, and fails where the function fails at that shape)")
    # the nearest built-in type: a subclass may take other arguments or not
    # pickle back from the worker with a new message (numpy's AxisError)
    for base in (NotImplementedError, RuntimeError, TypeError, ValueError, IndexError,
                 KeyError, ArithmeticError, MemoryError):
        if isinstance(e, base):
            return base(msg)
    return RuntimeError(msg)


def _signature_string(arrays, values):
    cores = ["(" + ",".join(f"d{i}_{j}" for j in range(a.ndim - 1)) + ")"
             for i, a in enumerate(arrays)]
    return ",".join(cores) + "->" + ",".join((["()"] if values else []) + cores)


def _grad_block(*blocks, ft, threads):
    if len(blocks[0]) == 0:   # an empty chunk (after slicing): grad_batch refuses empty batches
        out = [np.empty(b.shape, b.dtype) for b in blocks]
    else:
        g = ft.grad_batch(*blocks, workers=threads)
        out = list(g) if isinstance(g, tuple) else [g]
        out = [np.asarray(o, b.dtype) for o, b in zip(out, blocks)]
    return out[0] if len(out) == 1 else tuple(out)


def _value_and_grad_block(*blocks, ft, value_dtype):
    n = len(blocks[0])
    values = np.empty(n, value_dtype)
    grads = [np.empty(b.shape, b.dtype) for b in blocks]
    for i in range(n):
        v, g = ft.value_and_grad(*[b[i] for b in blocks])
        values[i] = v
        for out, gk in zip(grads, g if isinstance(g, tuple) else (g,)):
            out[i] = gk
    return (values, *grads)


def _blocks(ft, arrays, axis, who, values, threads=1):
    ft = _traced(ft, who)
    da, arrays = _arrays(arrays, axis, who)
    _check_signature(ft, arrays, who)
    delayed = _need("dask.delayed", who).delayed
    shared = delayed(ft, pure=True)   # one copy of ft in the graph, not one per block
    metas = [np.empty((0,) * a.ndim, a.dtype) for a in arrays]
    if values:
        dtype = np.result_type(*[a.dtype for a in arrays])
        func, kwargs = _value_and_grad_block, {"value_dtype": dtype}
        metas = [np.empty((0,), dtype)] + metas
    else:
        func, kwargs = _grad_block, {"threads": threads}
    out = da.apply_gufunc(func, _signature_string(arrays, values), *arrays, ft=shared,
                          meta=tuple(metas) if len(metas) > 1 else metas[0], **kwargs)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    first = 1 if values else 0
    ax = [axis + a.ndim if axis < 0 else axis for a in arrays]
    for k, a in enumerate(ax):
        if a:
            out[first + k] = da.moveaxis(out[first + k], 0, a)
    if values:
        return out[0], (out[1] if len(out) == 2 else tuple(out[1:]))
    return out[0] if len(out) == 1 else tuple(out)


def grad_blocks(ft, *arrays, axis=0, threads=1):
    """Gradients of the traced function ``ft`` at every input of the dask
    arrays ``arrays`` (one per argument of ``ft``), lazily.

    Index ``i`` along ``axis`` (the batch axis) of each array is one input;
    each block is a batch, whose gradients come from one
    ``ft.grad_batch(*blocks, workers=threads)`` call.  ``ft`` must have one
    output element.  The blocks may be split along the batch axis only:
    every block holds whole inputs.  Returns a dask array with the shape and
    chunks of the input (a tuple of them for several arguments).

    Runs on whichever scheduler computes it: threads, processes or a
    ``distributed`` cluster (see :func:`warm_workers`).  For example::

        ft = tg.trace(f, np.zeros(8))
        X = dask.array.random.random((100_000, 8), chunks=(10_000, 8))
        G = grad_blocks(ft, X)          # G[i] == ft.grad(X[i])
        G.compute()
    """
    return _blocks(ft, arrays, axis, "grad_blocks", values=False, threads=threads)


def value_and_grad_blocks(ft, *arrays, axis=0):
    """``(values, gradients)`` of ``ft`` at every input of the dask arrays,
    lazily: ``values`` has one element per input (the batch axis), the
    gradients are as in :func:`grad_blocks`.  Each input runs
    ``ft.value_and_grad`` (one replay, forward and reverse)."""
    return _blocks(ft, arrays, axis, "value_and_grad_blocks", values=True)


# -- lists and bags ----------------------------------------------------------------------


def _stackable(items):
    first = items[0]
    if not all(isinstance(a, (np.ndarray, float)) for a in first):
        return False
    kinds = [(np.shape(a), np.asarray(a).dtype) for a in first]
    return all(len(it) == len(first)
               and all(isinstance(a, (np.ndarray, float)) and (np.shape(a), np.asarray(a).dtype)
                       == k for a, k in zip(it, kinds))
               for it in items) and all(np.issubdtype(d, np.floating) for _, d in kinds)


def _run_batch(items, ft, method, first=None, expected=None):
    """``ft.<method>(*args)`` for each item of a batch (a list, or a bag's
    partition); gradients of same-shaped arrays go through one grad_batch.
    An error names the input it came from (``first``: the index of the
    batch's first input in ``map_inputs``'s list) and ``expected``, the
    signatures ``ft`` was traced for when it was sent."""
    items = [_as_args(x) for x in items]
    who = "map_bag" if first is None else "map_inputs"
    if expected is None:
        expected = _traced_for(ft)
    if method == "grad" and len(items) > 1 and _stackable(items):
        try:
            g = ft.grad_batch(*[np.stack([np.asarray(it[k]) for it in items])
                                for k in range(len(items[0]))], workers=1)
        except Exception as e:   # noqa: BLE001 -- raised again, naming the inputs
            raise _failed(e, who, first, items[0], expected, len(items)) from e
        if isinstance(g, tuple):
            return [tuple(gk[i] for gk in g) for i in range(len(items))]
        return [g[i] for i in range(len(items))]
    fn = getattr(ft, method)
    out = []
    for k, args in enumerate(items):
        try:
            out.append(fn(*args))
        except Exception as e:   # noqa: BLE001 -- raised again, naming the input
            raise _failed(e, who, None if first is None else first + k, args,
                          expected) from e
    return out


def map_inputs(client, ft, inputs, method="grad", batch_size=None):
    """``ft.<method>(*args)`` for every input of ``inputs`` on the cluster of
    ``client`` (a ``distributed.Client``); returns the results in order.

    An input that is a tuple or list holds the arguments; anything else is
    the only argument.  ``method`` is one of :data:`METHODS`.  The inputs go
    in batches of ``batch_size`` (default: about four batches per worker
    thread), one task each, so that a task's cost is the gradients' and not
    Dask's (a few milliseconds per task); gradients of same-shaped arrays in
    a batch run as one ``ft.grad_batch``, and when every input is such an
    array they travel stacked, one array per argument and batch (Dask
    serialises each small array of a list on its own, which costs more than
    its gradient).  ``ft`` is sent to every worker once
    (``client.scatter(..., broadcast=True)``).

    An input of a signature (shapes, dtypes) that ``ft`` has no trace for is
    traced again on the worker; where the workers' copy cannot trace (a
    loaded function, or one whose Python function does not pickle), such an
    input is refused before anything is sent, with a ``ValueError`` naming
    its index and shapes and the shapes ``ft`` was traced for.  An error on a
    worker is raised again (as its built-in type: ``ValueError``, ...)
    naming the input it came from, its shapes and the shapes ``ft`` was
    traced for.
    """
    ft = _traced(ft, "map_inputs")
    _method(method, "map_inputs")
    distributed = _need("distributed", "map_inputs")
    if not isinstance(client, distributed.Client):
        raise TypeError("tapegrad.integrations.dask.map_inputs takes a distributed.Client as its "
                        f"first argument, not {type(client).__name__}")
    items = list(inputs)
    if not items:
        return []
    if batch_size is None:
        threads = sum(client.nthreads().values()) or 1
        batch_size = math.ceil(len(items) / (4 * threads))
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"tapegrad.integrations.dask.map_inputs: batch_size={batch_size!r}; "
                         "expected a positive integer")
    batch_size = int(batch_size)
    batches = [[_as_args(x) for x in items[i:i + batch_size]]
               for i in range(0, len(items), batch_size)]
    _check_inputs(ft, batches, method, "map_inputs")
    expected = _traced_for(ft)
    [shared] = client.scatter([ft], broadcast=True, hash=False)
    if method == "grad" and _stackable([a for b in batches for a in b]):
        # same-shaped arrays travel as one array per argument and batch, not as
        # many small objects (Dask serialises each of those on its own)
        stacked = [[np.stack([np.asarray(a[k]) for a in b]) for k in range(len(b[0]))]
                   for b in batches]
        futures = client.map(_grad_stacked, stacked, range(0, len(items), batch_size),
                             ft=shared, expected=expected, pure=False)
        out = []
        for g in client.gather(futures):
            if isinstance(g, tuple):
                out.extend(tuple(gk[i] for gk in g) for i in range(len(g[0])))
            else:
                out.extend(g)
        return out
    futures = client.map(_run_listed, batches, range(0, len(items), batch_size), ft=shared,
                         method=method, expected=expected, pure=False)
    out = []
    for part in client.gather(futures):
        out.extend(part)
    return out


def _run_listed(items, first, ft, method, expected):
    """:func:`_run_batch` of ``map_inputs``'s batch that starts at input ``first``."""
    return _run_batch(items, ft, method, first, expected)


def _grad_stacked(arrays, first, ft, expected):
    try:
        return ft.grad_batch(*arrays, workers=1)
    except Exception as e:   # noqa: BLE001 -- raised again, naming the inputs
        raise _failed(e, "map_inputs", first, tuple(a[0] for a in arrays), expected,
                      len(arrays[0])) from e


def map_bag(ft, bag, method="grad"):
    """A ``dask.bag.Bag`` of ``ft.<method>(*args)`` at every element of
    ``bag``, lazily (elements as the inputs of :func:`map_inputs`); one task
    per partition, each partition's gradients one ``ft.grad_batch`` when its
    inputs are same-shaped arrays.  Each element is a Python object to Dask:
    for many small inputs that are arrays already, a dask array
    (:func:`grad_blocks`) or :func:`map_inputs` moves them in far fewer
    pieces."""
    ft = _traced(ft, "map_bag")
    _method(method, "map_bag")
    db = _need("dask.bag", "map_bag")
    if not isinstance(bag, db.Bag):
        raise TypeError("tapegrad.integrations.dask.map_bag takes a dask.bag.Bag, not "
                        f"{type(bag).__name__} (dask.bag.from_sequence(inputs, npartitions=...) "
                        "makes one; map_inputs takes a list)")
    delayed = _need("dask.delayed", "map_bag").delayed
    return bag.map_partitions(_run_batch, ft=delayed(ft, pure=True), method=method)


# -- the kernels on the workers ------------------------------------------------------------

#: what this process's warm-up did (read by warm_workers through client.run)
_WARMED = {}


@contextlib.contextmanager
def _machine_lock():
    """Hold a lock file in the kernel cache directory: the worker processes of
    one machine share the cache, so one compiles and the others load."""
    from ..kernels._jit import cache_dir
    try:
        import fcntl
    except ImportError:      # no flock (Windows): each worker warms on its own
        fcntl = None
    where = cache_dir()
    if fcntl is None or where is None:
        yield
        return
    with open(os.path.join(where, "warm.lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _example(example):
    if not isinstance(example, (tuple, list)) or len(example) not in (2, 3):
        raise TypeError("tapegrad.integrations.dask.warm_workers: an example is (ft, args) or "
                        f"(ft, args, method), not {example!r:.80}")
    ft, args = _traced(example[0], "warm_workers"), _as_args(example[1])
    method = _method(example[2] if len(example) == 3 else "value_and_grad", "warm_workers")
    return ft, args, method


def warm_here(examples=(), full=False, interpret="0"):
    """Warm this process's kernels (what :class:`WarmKernels` runs on each
    worker): set ``TAPEGRAD_INTERPRET`` to ``interpret`` (None: leave it),
    then, holding the machine's lock, run ``python -m tapegrad warm``'s steps
    if ``full`` and each example ``(ft, args[, method])``, every kernel they
    reach compiled or loaded from the cache.  Returns what it did."""
    from ..kernels import interpret as tier
    from ..kernels._jit import cache_dir
    if interpret is not None:
        os.environ[tier.BUDGET_ENV] = str(interpret)
    os.environ.setdefault("TAPEGRAD_QUIET", "1")
    examples = [_example(e) for e in examples]
    t0 = time.perf_counter()
    with _machine_lock():
        waited = time.perf_counter() - t0
        with tier.mode(0):
            if full:
                from ..__main__ import _steps
                for _, step in _steps():
                    step()
            for ft, args, method in examples:
                getattr(ft, method)(*args)
    _WARMED.update(seconds=time.perf_counter() - t0, waited=waited, cache=cache_dir(),
                   full=bool(full), examples=len(examples), pid=os.getpid())
    return dict(_WARMED)


def _warm_report():
    return dict(_WARMED)


def _plugin_class():
    distributed = _need("distributed", "WarmKernels")

    class WarmKernels(distributed.WorkerPlugin):
        """A ``distributed`` worker plugin that runs :func:`warm_here` on each
        worker when registered and on every worker that joins later (register
        it with :func:`warm_workers`, or ``client.register_plugin``)."""

        idempotent = False

        def __init__(self, examples=(), full=False, interpret="0"):
            self.examples = [_example(e) for e in examples]
            self.full = bool(full)
            self.interpret = interpret

        async def setup(self, worker):
            # off the worker's event loop: a compilation takes seconds, and the
            # worker must keep answering the scheduler meanwhile
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, warm_here, self.examples, self.full,
                                       self.interpret)

    WarmKernels.__module__ = __name__
    WarmKernels.__qualname__ = "WarmKernels"
    return WarmKernels


def _plugin():
    cls = globals().get("WarmKernels")
    if cls is None:
        cls = globals()["WarmKernels"] = _plugin_class()
    return cls


def __getattr__(name):
    # WarmKernels subclasses distributed.WorkerPlugin, so it is made on first
    # use; pickles name it by module and name, and this builds it on a worker
    if name == "WarmKernels":
        return _plugin()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def warm_workers(client, *examples, full=None, interpret="0"):
    """Make the kernels warm on every worker of ``client``'s cluster, and on
    workers that join it later; returns ``{worker address: report}`` (seconds
    spent, seconds waited for the machine's lock, cache directory).

    Each example is ``(ft, args)`` or ``(ft, args, method)``: the worker runs
    ``ft.<method>(*args)`` (default ``value_and_grad``) with every kernel it
    reaches compiled or loaded from the cache.  ``full`` (the default when no
    example is given) runs every step of ``python -m tapegrad warm`` too.
    ``interpret`` is the ``TAPEGRAD_INTERPRET`` value set on the workers
    (``"0"``: compile each kernel on its first call; None leaves the
    workers' setting).  One worker per machine compiles while the others wait
    for its lock, then load from the shared cache.
    """
    distributed = _need("distributed", "warm_workers")
    if not isinstance(client, distributed.Client):
        raise TypeError("tapegrad.integrations.dask.warm_workers takes a distributed.Client as its "
                        f"first argument, not {type(client).__name__}")
    if full is None:
        full = not examples
    plugin = _plugin()(examples, full=full, interpret=interpret)
    client.register_plugin(plugin, name=PLUGIN_NAME)
    return client.run(_warm_report)
