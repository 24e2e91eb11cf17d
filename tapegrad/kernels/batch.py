"""Many gradients of one trace in one compiled call: :func:`grad_rows`.

``grad_rows`` loops over the rows of a batch of inputs in one Numba kernel
(``parallel=True``: the rows are split into one contiguous part per thread,
``numba.prange`` over the parts, no GIL held).  Each thread owns a private
copy of the trace's value storage and adjoint arenas (the per-thread rows of
the 2-d workspaces the caller passes) and, per input row, writes the row
into the leaves' values, runs the replay loop (``replay._replay``) and the
reverse sweep (``sweep._sweep``) from a unit seed at the root, and copies
the leaves' adjoints into the row's gradient.  A row whose guard fails (or
whose replay or sweep stops for any other reason) is marked in ``status``
and its gradient is left to the caller.

Only traces whose every record runs in the compiled loops qualify
(:func:`covers`): no host records but the matmuls the loops compute
(``mmk``: the trace's small ones, which every replay of it computes so too,
and, when :data:`MATMUL` is set, every matmul of 1-d and 2-d operands, in
the same plain loops: within rounding of NumPy's BLAS, not bit for bit).
Their forward and VJP families must be in the tables before the kernel runs
(:func:`ensure_families`), since the kernel cannot hand back to Python to
compile one.

The kernel is compiled (or loaded from the cache) on the first call of
``grad_rows``; importing this module does not import Numba.
"""
import threading

from . import codes as C
from ._jit import _options, cached, compile_lock, inline, materialize, notice
from ._views import adjoint_span, value
from .dispatch import VJP, slot
from .interpret import _setting
from .replay import CMP_FIRST, FWD, _replay, fwd_slot
from .sweep import _sweep

#: ``numba.prange`` once the kernel is compiled (:func:`_dispatcher` sets it)
prange = range

#: let the batched kernel compute the matmuls larger than a replay's small
#: ones too (kernels/small_matmul.py's plain loops: within rounding of
#: NumPy's BLAS, so a row's gradient may differ from ``ft.grad``'s in the
#: last bits); off, a trace with such a matmul takes grad_batch's threaded
#: path, bit for bit
MATMUL = False

#: ``status`` of a row: done, or left to the caller
ROW_DONE, ROW_LEFT = 0, 1

# The workqueue threading layer (Numba's default without TBB or OpenMP)
# aborts the process when two parallel kernels are launched at once.
_LAUNCH = threading.Lock()
_DISPATCHER = []


@inline
def _forward(T, faddr, guard, goff, gvals, n, ftable, mmk):
    """The replay of every record; False when it stops (a failed guard)."""
    return _replay(T, faddr, guard, goff, gvals, 0, n, mmk, ftable) == -1


@inline
def _backward(T, freed, order, root, vtable, mmk):
    """The reverse sweep from ``root``; False when it stops."""
    return _sweep(T, freed, order, root, -1, mmk, vtable) == -1


def _grad_rows(op, arg0, size, ip0, args, ip, fp, voff, rix, faddr, guard, goff, gvals,
               V1, VALS, PTRS, APTR, APTR0, REACHED, freed, order, root, leaves, loff,
               X, G, status, ftable, vtable, mmk):
    """Row i of ``G``: the gradient at row i of ``X`` (the inputs' elements
    side by side, leaf k's from ``loff[k]``), or ``status[i] = ROW_LEFT``.
    The 2-d workspaces (``V1`` ... ``REACHED``) hold one copy of the trace's
    storage per part of the rows; the other arrays are the trace's, read
    only."""
    nw = V1.shape[0]
    nb = X.shape[0]
    n = op.size
    nl = leaves.size
    for w in prange(nw):
        aptr, aptr0, reached = APTR[w], APTR0[w], REACHED[w]
        T = (op, arg0, size, ip0, args, ip, fp, V1[w], VALS[w], voff, rix, PTRS[w], aptr,
             reached)
        for i in range(w * nb // nw, (w + 1) * nb // nw):
            for k in range(nl):
                y = value(T, leaves[k])
                o = loff[k]
                for j in range(y.size):
                    y[j] = X[i, o + j]
            if not _forward(T, faddr, guard, goff, gvals, n, ftable, mmk):
                status[i] = ROW_LEFT
                continue
            for r in range(n):
                aptr[r] = aptr0[r]
                reached[r] = False
            adjoint_span(T, root, 1)[0] = 1.0
            reached[root] = True
            if not _backward(T, freed, order, root, vtable, mmk):
                status[i] = ROW_LEFT
                continue
            for k in range(nl):
                lr = leaves[k]
                o = loff[k]
                m = size[lr]
                if reached[lr]:
                    g = adjoint_span(T, lr, m)
                    for j in range(m):
                        G[i, o + j] = g[j]
                else:
                    for j in range(m):
                        G[i, o + j] = 0.0
            status[i] = ROW_DONE


def _dispatcher():
    """The compiled ``_grad_rows`` (made on first use)."""
    if _DISPATCHER:
        return _DISPATCHER[0]
    with compile_lock:  # loads Numba (materialize) and holds its compiler lock
        if not _DISPATCHER:
            materialize()
            import numba
            from . import _views, replay, sweep
            space = globals()
            space["prange"] = numba.prange
            # the dispatchers in place of the recorded kernels
            space["_replay"], space["_sweep"] = replay._replay, sweep._sweep
            space["value"], space["adjoint_span"] = _views.value, _views.adjoint_span
            if not cached("batch._grad_rows"):
                notice("the batched replay and sweep")
            opts = _options()
            _DISPATCHER.append(numba.njit(parallel=True, **opts)(_grad_rows))
    return _DISPATCHER[0]


def threads_for(workers):
    """Numba threads for ``workers`` (None: Numba's default count)."""
    materialize()
    import numba
    most = numba.config.NUMBA_NUM_THREADS
    if workers is None:
        return numba.get_num_threads()
    return max(1, min(int(workers), most))


def covers(op, mmk):
    """True when every record of the trace with op codes ``op`` runs in the
    compiled replay and sweep loops (no host records but the matmuls they
    compute, ``mmk[r] > 0``; no unknown kinds), and kernels may be compiled
    (not ``TAPEGRAD_INTERPRET=force``)."""
    kind = op >> C.SHIFT
    host = kind == C.K_HOST
    return _setting() != "force" and bool(((~host | (mmk > 0)) & (kind <= C.K_USER)).all())


def _hot(kind, sub, n):
    # a one-element elementwise record: both loops compute it inline
    return n == 1 and kind <= C.K_NARY and kind != C.K_NONE and sub != C.WHERE


def ensure_families(T, mmk):
    """Compile (or load) every forward and VJP family the records of tape
    view ``T`` reach (``mmk``: the matmuls the loops compute), so that the
    batched kernel never meets an empty slot."""
    op, size = T[0], T[2]
    if (mmk > 0).any():
        FWD.ensure(C.K_HOST)
        VJP.ensure(C.K_HOST)
    for r in range(op.size):
        code = int(op[r])
        kind, sub = code >> C.SHIFT, code & C.MASK
        if kind == C.K_NONE:
            if sub >= CMP_FIRST:
                FWD.ensure(fwd_slot.py_func(T, r, kind, sub))
            continue
        if kind == C.K_HOST or _hot(kind, sub, int(size[r])):
            continue
        k = fwd_slot.py_func(T, r, kind, sub)
        if k >= 0:
            FWD.ensure(k)
        VJP.ensure(slot.py_func(T, r, kind, sub))


def grad_rows(args, threads):
    """Run the batched kernel with ``threads`` Numba threads; ``args`` are
    ``_grad_rows``'s arguments (the workspaces have ``threads`` rows)."""
    d = _dispatcher()
    import numba
    with _LAUNCH:
        old = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            d(*args)
        finally:
            numba.set_num_threads(old)

