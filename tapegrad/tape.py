"""The tape: a Wengert list in flat, growable NumPy arrays, one per thread.

Each operation on tensors that require grad appends one record: its op code,
its parents (record ids, in argument order, CSR-style so ops with many inputs
fit), its output size, and offsets of its integer and float parameters.  The
record's output value is kept too: values of at most ``SMALL`` elements are
copied into a float64 arena, larger ones are referenced in place and made
read-only while the tape holds them.  A record has one output; an op with k
outputs (``unbind``, ``split``) is one record of size 0 followed by k
``OUTPUT`` records, so the pair ``(record, slot)`` that
``grad_fn.next_functions`` shows is ``(op record, output record - op record -
1)``.

Everything the sweep needs is derived from these arrays when a backward
starts (value and adjoint offsets are cumulative sums of sizes), so recording
writes as few numbers as possible.

Memory follows liveness: the tape counts, per record, the tensors and graph
nodes that refer to it.  When no such reference to a record that is still
differentiable (not freed by a backward) remains, the whole tape is reset and
reused, just before the next record is written (so ``grad_fn`` of a tensor
stays inspectable right after the backward that freed its graph); tensors of a freed graph that are still alive keep their values and
re-enter a later tape as freed stubs, so differentiating through them again
raises the usual error.
"""
import threading

import numpy as np

from .kernels import codes as C
from .kernels._views import SMALL

_INT = np.int64


class Tape:
    """Flat record arrays plus the bookkeeping for one thread's graphs."""

    def __init__(self, capacity=1024):
        self.enabled = True        # grad mode of this thread
        self.epoch = 0             # bumped by every reset
        self._alloc(capacity, 256, 4 * capacity, capacity, 4 * capacity)
        self.n = 0                 # records
        self.na = 0                # parent entries
        self.ni = 0                # integer parameters
        self.nf = 0                # float parameters
        self.nv = 0                # arena elements used
        self.refs = []             # large values, one per large record
        self.leaves = {}           # LEAF record -> Tensor
        self.host = {}             # host record -> what its VJP needs
        self.flipped = []          # arrays we made read-only, to restore
        self.pinned = 0            # records referenced and not freed
        self.stale = False         # nothing pinned: reset before the next record

    # -- storage -------------------------------------------------------------
    def _alloc(self, nrec, nargs, nip, nfp, nvals):
        self.op = np.zeros(nrec, _INT)
        self.arg0 = np.zeros(nrec + 1, _INT)
        self.size = np.zeros(nrec, _INT)
        self.ip0 = np.zeros(nrec, _INT)
        self.fp0 = np.zeros(nrec, _INT)
        self.refc = np.zeros(nrec, _INT)
        self.freed = np.zeros(nrec, np.bool_)
        self.args = np.zeros(nargs, _INT)
        self.ip = np.zeros(nip, _INT)
        self.fp = np.zeros(nfp, np.float64)
        self.vals = np.zeros(nvals, np.float64)

    @staticmethod
    def _grown(a, need):
        cap = len(a)
        while cap < need:
            cap *= 2
        b = np.zeros(cap, a.dtype)
        b[:len(a)] = a
        return b

    def _grow_records(self):
        cap = 2 * len(self.op)
        for name in ("op", "arg0", "size", "ip0", "fp0", "refc", "freed"):
            a = getattr(self, name)
            b = np.zeros(cap + (name == "arg0"), a.dtype)
            b[:len(a)] = a
            setattr(self, name, b)

    def reserve(self, nargs=0, nip=0, nfp=0, nvals=0):
        """Make room for a record's variable-size parts."""
        if self.n + 2 > len(self.op):
            self._grow_records()
        if self.na + nargs > len(self.args):
            self.args = self._grown(self.args, self.na + nargs)
        if self.ni + nip > len(self.ip):
            self.ip = self._grown(self.ip, self.ni + nip)
        if self.nf + nfp > len(self.fp):
            self.fp = self._grown(self.fp, self.nf + nfp)
        if self.nv + nvals > len(self.vals):
            self.vals = self._grown(self.vals, self.nv + nvals)

    # -- recording -----------------------------------------------------------
    def record(self, op, parents, value, ints=None, const=None):
        """Append one record and return its id.

        ``parents`` are record ids; ``value`` is the output (any float array
        or scalar, stored as float64); ``ints`` are integer parameters and
        ``const`` is the one float parameter of a K_SCALAR record.
        This is the recording hot path: it writes only what cannot be derived.
        """
        size = value.size
        nargs = len(parents)
        r = self.n
        na = self.na
        if r + 2 > len(self.op) or na + nargs > len(self.args):
            self.reserve(nargs)
        self.op[r] = op
        self.arg0[r] = na
        if nargs == 1:
            self.args[na] = parents[0]
        elif nargs:
            self.args[na:na + nargs] = parents
        self.na = na + nargs
        self.size[r] = size
        if ints is not None:
            ni = self.ni
            k = len(ints)
            if ni + k > len(self.ip):
                self.reserve(nip=k)
            self.ip0[r] = ni
            if k == 1:
                self.ip[ni] = ints[0]
            else:
                self.ip[ni:ni + k] = ints
            self.ni = ni + k
        if const is not None:
            nf = self.nf
            if nf + 1 > len(self.fp):
                self.reserve(nfp=1)
            self.fp0[r] = nf
            self.fp[nf] = const
            self.nf = nf + 1
        if size <= SMALL:
            nv = self.nv
            if nv + size > len(self.vals):
                self.reserve(nvals=size)
            if size == 1 and not value.ndim:
                self.vals[nv] = value
            elif size:
                self.vals[nv:nv + size] = np.ravel(value)
            self.nv = nv + size
        else:
            self.refs.append(self._hold(value))
        self.n = r + 1
        return r

    def _hold(self, value):
        """Keep a large value for the sweep without copying when possible.

        The array is made read-only while the tape holds it, so a gradient is
        never computed from data changed after it was recorded; the flag is
        restored when the tape lets the array go.
        """
        if value.dtype != np.float64 or not value.flags.c_contiguous:
            return np.ascontiguousarray(value, dtype=np.float64)
        if value.flags.writeable:
            value.flags.writeable = False
            self.flipped.append(value)
        return value

    def constant(self, value):
        """Record a non-differentiable operand (an ndarray) as a CONST record."""
        value = np.asarray(value)
        if value.dtype.kind not in "f":
            value = value.astype(np.float64)
        return self.record(C.code(C.K_NONE, C.CONST), (), value)

    # -- liveness --------------------------------------------------------------
    def pin(self, r):
        if self.refc[r] == 0 and not self.freed[r]:
            self.pinned += 1
        self.refc[r] += 1

    def unpin(self, r):
        c = self.refc[r] - 1
        self.refc[r] = c
        if c == 0 and not self.freed[r]:
            self.pinned -= 1
            if self.pinned == 0:
                self.stale = True

    def recount(self):
        """Recount pinned records after a backward freed some of them."""
        n = self.n
        self.pinned = int(np.count_nonzero((self.refc[:n] > 0) & ~self.freed[:n]))
        if self.pinned == 0:
            self.stale = True

    def reset(self):
        """Forget every record; tensors still alive hold their own values."""
        n = self.n
        self.refc[:n] = 0
        self.freed[:n] = False
        self.ip0[:n] = 0
        self.fp0[:n] = 0
        self.n = self.na = self.ni = self.nf = self.nv = 0
        self.pinned = 0
        self.stale = False
        self.epoch += 1
        for a in self.flipped:
            try:
                a.flags.writeable = True
            except ValueError:  # its base became read-only meanwhile
                pass
        self.flipped.clear()
        self.refs.clear()
        self.leaves.clear()
        self.host.clear()

    # -- the view the kernels take -----------------------------------------------
    def arrays(self, upto):
        """The tuple of arrays the sweep reads, for records ``< upto``."""
        n = upto
        self.arg0[n] = self.arg0[n] if n < self.n else self.na
        size = self.size[:n]
        small = size <= SMALL
        vsz = np.where(small, size, 0)
        voff = np.cumsum(vsz) - vsz
        rix = np.cumsum(~small) - 1
        ptrs = np.fromiter((0 if a is None else a.ctypes.data for a in self.refs),
                           _INT, len(self.refs))
        aoff = np.cumsum(size) - size
        T = (self.op, self.arg0, self.size, self.ip0, self.fp0, self.args,
             self.ip, self.fp, self.vals, voff, rix, ptrs, aoff)
        return T, int(aoff[-1] + size[-1]) if n else 0

    def value(self, T, r):
        """Python-side view of record r's value (for host VJPs)."""
        n = self.size[r]
        if n <= SMALL:
            o = T[9][r]
            return self.vals[o:o + n]
        return self.refs[T[10][r]]

    def release_freed(self, T):
        """Drop large values that no live (not freed) record can read."""
        from .kernels.sweep import consumed
        n = self.n
        if not self.refs:
            return
        keep = consumed(T, n, self.freed)
        big = np.flatnonzero((self.size[:n] > SMALL) & self.freed[:n] & ~keep)
        rix = T[10]
        for r in big:
            self.refs[rix[r]] = None


_local = threading.local()


def current():
    """This thread's tape (created on first use), reset first if nothing pins it.

    Every op fetches the tape through here before it resolves its inputs, so
    a reset never happens between reading a parent's record id and writing
    the record that uses it.
    """
    try:
        t = _local.tape
    except AttributeError:
        t = _local.tape = Tape()
    if t.stale:
        t.reset()
    return t
