"""A trace's gradients at many inputs in one compiled call: the methods of
:class:`~tapegrad.trace_replay._Replay` (a base class of it) that decide
whether kernels/batch.py can run the trace and build its per-thread storage
(``ft.grad_batch``'s compiled path)."""
import numpy as np

from .kernels import codes as C
from .kernels import replay as RK
from .ops.registry import REGISTRY

#: grad_batch's compiled path gives each thread at least this many records
#: times rows (fewer threads for a smaller batch): starting the other threads
#: costs tens of microseconds, and milliseconds when the cores are busy
BATCH_SPLIT_MIN = 1 << 15


class _BatchMethods:
    """``batch_compiled``, ``batch_job``: see the module docstring.  Reads the
    replay's arrays (``op``, ``host``, ``T``, the value storage ...)."""
    __slots__ = ()

    def batch_compiled(self):
        """True when ``batch_job`` can run this trace: one output record,
        every record in the compiled replay and sweep loops (no host records;
        matmuls of 1-d and 2-d operands when kernels/batch.py's ``MATMUL``
        is set), no fused segments and no guarded NumPy calls (both need
        Python between the kernels)."""
        from .kernels import batch as BK
        return (not self.multi and self.root is not None and not self.segs
                and not self.calls and BK.covers(self.op, self._batch_mm()))

    def _batch_mm(self):
        """Per record ``(m, k, n)`` of a matmul ``(m, k) @ (k, n)`` (a 1-d
        operand as one row or column), zeros elsewhere: what kernels/batch.py
        computes in place of the host forward and VJP (all zeros unless its
        ``MATMUL`` is set)."""
        from .kernels import batch as BK
        mm = np.zeros((self.n, 3), np.int64)
        if not BK.MATMUL:
            return mm
        for r in np.flatnonzero((self.op >> C.SHIFT) == C.K_HOST):
            if REGISTRY[int(self.op[r])].name != "Mm":
                continue
            sa, sb = (tuple(int(d) for d in s) for s in self.host[int(r)][:2])
            if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2 and sa[-1] == sb[0]):
                continue
            m, k, n = (sa[0] if len(sa) == 2 else 1), sa[-1], (sb[1] if len(sb) == 2 else 1)
            if m * n == self.size[r] and m * k and k * n:
                mm[r] = (m, k, n)
        return mm

    def batch_job(self, X, threads):
        """``(run, G, left)`` for the gradients at every row of ``X`` (float64,
        ``(rows, elements of all inputs)``, inputs in order) through
        kernels/batch.py: ``run()`` fills ``G`` (same shape as ``X``) in one
        compiled call on up to ``threads`` Numba threads (one per
        ``BATCH_SPLIT_MIN`` records times rows), each with its own copy of
        this trace's storage made here (so ``run`` needs no lock), and marks
        in ``left`` the rows it did not compute (a guard failed).  Matmuls
        (with ``MATMUL`` set) are summed in plain loops: within rounding of
        ``grad``'s NumPy products; every other record bit for bit."""
        from .kernels import batch as BK
        from .kernels.dispatch import TABLE
        BK.ensure_families(self.T)
        nb, n = X.shape[0], self.n
        w = max(1, min(threads, nb, nb * n // BATCH_SPLIT_MIN))
        V1, VALS, BIG = (np.tile(a, (w, 1)) for a in (self.v1, self.vals, self.big))
        boff = (self.own_ptrs - self.big.ctypes.data) // 8
        PTRS = (BIG.ctypes.data + 8 * BIG.shape[1] * np.arange(w)[:, None]
                + 8 * boff[None, :]).astype(np.int64).reshape(w, -1)
        A, L = np.empty((w, self.A.size)), np.empty((w, self.L.size))
        APTR0 = np.empty((w, n), np.int64)
        for k in range(w):
            APTR0[k] = self.aoff * 8 + np.where(self.leaf, L[k].ctypes.data, A[k].ctypes.data)
        APTR, REACHED = APTR0.copy(), np.zeros((w, n), np.bool_)
        leaves = np.array(self.leaf_rec, np.int64)
        loff = np.zeros(leaves.size, np.int64)
        loff[1:] = np.cumsum(self.size[leaves])[:-1]
        G = np.empty(X.shape)
        left = np.zeros(nb, np.uint8)
        root = int(self.root)
        args = (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                self.voff, self.rix, self.faddr, self.guard, self.goff, self.gvals,
                V1, VALS, PTRS, APTR, APTR0, REACHED, np.zeros(n, np.bool_),
                np.arange(root, -1, -1, dtype=np.int64), root, leaves, loff,
                X, G, left, RK.FWD.table, TABLE, self._batch_mm())

        def run(keep=(BIG, A, L)):  # the storage PTRS and APTR point into
            BK.grad_rows(args, w)

        return run, G, left
