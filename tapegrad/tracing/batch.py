"""The methods of :class:`~tapegrad.tracing.replay._Replay` (a base class of
it) that choose what the compiled loops compute beyond the compiled kinds:
which matmuls the replay and the sweep run themselves
(kernels/small_matmul.py), whether kernels/batch.py can run the whole
trace, and its per-thread storage (``ft.grad_batch``'s compiled path)."""
import numpy as np

from ..kernels import replay as RK
from ..kernels.small_matmul import SMALL_MATMUL
from ..ops.matrix import _MATMUL

#: grad_batch's compiled path gives each thread at least this many records
#: times rows (fewer threads for a smaller batch): starting the other threads
#: costs tens of microseconds, and milliseconds when the cores are busy
BATCH_SPLIT_MIN = 1 << 15


class _BatchMethods:
    """``_plan_matmuls``, ``batch_compiled``, ``batch_job``: see the module
    docstring.  Reads the replay's arrays (``op``, ``host``, ``T``, the value
    storage ...)."""
    __slots__ = ()

    def _plan_matmuls(self):
        """``self.mmk``: per record the inner dimension k of a matmul ``(m, k)
        @ (k, n)`` of at most ``SMALL_MATMUL`` multiply-adds, which the
        replay and sweep loops compute (kernels/small_matmul.py), else 0."""
        self.mmk = self._matmul_k(SMALL_MATMUL)

    def _matmul_k(self, most):
        """Per record the inner dimension k of a matmul of 1-d and 2-d
        operands, ``(m, k) @ (k, n)`` (a 1-d operand as one row or column),
        of at most ``most`` multiply-adds (None: any), else 0.  The shapes
        must agree with the records' element counts, which the loops trust
        (a tape file's are checked here too)."""
        mmk = np.zeros(self.n, np.int64)
        for r in np.flatnonzero(self.op == _MATMUL):
            r = int(r)
            if self.arg0[r + 1] - self.arg0[r] != 2:
                continue
            sa, sb = (tuple(int(d) for d in s) for s in self.host[r][:2])
            if not (1 <= len(sa) <= 2 and 1 <= len(sb) <= 2 and sa[-1] == sb[0]):
                continue
            m, k, n = (sa[0] if len(sa) == 2 else 1), sa[-1], (sb[1] if len(sb) == 2 else 1)
            ra, rb = (int(p) for p in self.args[self.arg0[r]:self.arg0[r] + 2])
            if (min(m, k, n) >= 1 and (most is None or m * k * n <= most)
                    and self.size[r] == m * n and self.size[ra] == m * k
                    and self.size[rb] == k * n):
                mmk[r] = k
        return mmk

    def batch_compiled(self):
        """True when ``batch_job`` can run this trace: one output record,
        every record in the compiled replay and sweep loops (no host records
        but the small matmuls they compute, and every matmul of 1-d and 2-d
        operands when kernels/batch.py's ``MATMUL`` is set), no fused
        segments and no guarded NumPy calls (both need Python between the
        kernels)."""
        from ..kernels import batch as BK
        return (not self.multi and self.root is not None and not self.segs
                and not self.calls and BK.covers(self.op, self._batch_mmk()))

    def _batch_mmk(self):
        """The matmuls kernels/batch.py computes (``mmk`` of the loops): the
        replay's small ones, and every one of 1-d and 2-d operands when its
        ``MATMUL`` is set."""
        from ..kernels import batch as BK
        return self._matmul_k(None) if BK.MATMUL else self.mmk

    def batch_job(self, X, threads):
        """``(run, G, left)`` for the gradients at every row of ``X`` (float64,
        ``(rows, elements of all inputs)``, inputs in order) through
        kernels/batch.py: ``run()`` fills ``G`` (same shape as ``X``) in one
        compiled call on up to ``threads`` Numba threads (one per
        ``BATCH_SPLIT_MIN`` records times rows), each with its own copy of
        this trace's storage made here (so ``run`` needs no lock), and marks
        in ``left`` the rows it did not compute (a guard failed).  Every
        row's gradient is ``grad``'s bit for bit, but for the matmuls larger
        than the replay's (with ``MATMUL`` set): those are summed in the
        small matmuls' plain loops, within rounding of ``grad``'s NumPy
        products."""
        from ..kernels import batch as BK
        from ..kernels.dispatch import TABLE
        mmk = self._batch_mmk()
        BK.ensure_families(self.T, mmk)
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
                X, G, left, RK.FWD.table, TABLE, mmk)

        def run(keep=(BIG, A, L)):  # the storage PTRS and APTR point into
            BK.grad_rows(args, w)

        return run, G, left
