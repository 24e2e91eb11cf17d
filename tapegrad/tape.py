"""The tape: a Wengert list in flat, growable NumPy arrays, one per thread.

Each operation on tensors that require grad appends one record: its op code,
its parents (record ids in argument order, CSR-style so ops with many inputs
fit), its output size, an offset into the integer parameters and one float
parameter.  Output values: one-element values in a per-record slot, values
of at most ``SMALL`` elements in a float64 arena, and larger ones only when a
VJP will read them (``optable.READS_INPUTS``/``READS_OUTPUT``), referenced in
place and made read-only while the tape holds them.  A record has one
output; an op with k outputs (``unbind``, ``split``) is one record of size 0
followed by k ``OUTPUT`` records, so the pair ``(record, slot)`` that
``grad_fn.next_functions`` shows is ``(op record, output record - op record
- 1)``.

Everything else the sweep needs is derived when a backward starts (value
and adjoint offsets are cumulative sums of sizes), so recording writes as
few numbers as it can: this is the hot path of eager code.

Memory follows liveness without a per-tensor destructor.  Every non-leaf
tensor and graph node holds the tape's current *epoch token*; the token's
reference count tells how many are alive.  The tape is reset (and its
arrays reused) when none is alive, or when a backward has freed every record
on it; tensors of the old epoch keep their values, and one that re-enters a
later graph does so as a freed stub, so differentiating through it again
raises the usual error.  When the tape has doubled since it last looked,
``compact`` drops the records no live tensor or node can reach (a loop that
keeps its previous result while recording the next never leaves the tape
entirely dead).  Resets and compactions happen only at the start of an
operation, before it resolves its inputs' records.
"""
import gc
import signal
import sys
import threading
import weakref

import numpy as np

from .kernels import codes as C
from .kernels._views import SMALL
from .kernels.optable import READS_INPUTS, READS_OUTPUT

_INT = np.int64
_FIRST_OP = 1 << C.SHIFT  # op codes below this are K_NONE records (no VJP)
_getrefcount = sys.getrefcount


class Epoch:
    """Token held by the tensors and nodes of one tape epoch."""

    __slots__ = ("tape", "__weakref__")

    def __init__(self, tape):
        self.tape = tape


#: the classes whose instances may hold an epoch token (Tensor, and the
#: graph's Node), registered by their modules: ``compact`` renumbers records
#: only when every holder of the token is one of these
TOKEN_HOLDERS = set()


class Stale(dict):
    """``Tape.stale``: record -> what was written in place after the record
    saved the value (``autograd.check_stale`` raises when a backward needs
    it), and ``at``: tape length -> the records marked stale when the tape
    held that many records.

    A write no graph records (under ``no_grad``, through ``.data`` or
    ``detach()``) marks the record of the tensor it writes stale and moves
    the tensor to a fresh record at once, recorded right then: an identity of
    the old record (ops/methods.py, ``_written``).  The lengths tell those
    identity records from any other, so that :meth:`Tape.origin` finds the
    record a tensor's value came from before such writes (the one a graph
    recorded earlier reads).
    """

    __slots__ = ("tape", "at")

    def __init__(self, tape):
        super().__init__()
        self.tape = weakref.ref(tape)  # no cycle: a thread's tape goes with its thread
        self.at = {}

    def __setitem__(self, r, what):
        dict.__setitem__(self, r, what)
        tape = self.tape()
        if not tape.freed[r]:  # a tensor on a freed record stays there (see _written)
            self.at.setdefault(tape.n, []).append(r)

    def clear(self):
        dict.clear(self)
        self.at.clear()

    def renumbered(self, keep, new_id):
        """A copy for ``compact``: records ``new_id`` of those kept; a length
        becomes the number of kept records below it, so the fresh record that
        followed a marking still comes right after it (a compaction may fall
        between the two: it runs at the start of the op that records it)."""
        out = Stale(self.tape())
        for r, what in self.items():
            if keep[r]:
                dict.__setitem__(out, int(new_id[r]), what)
        n = keep.size
        below = np.concatenate(([0], np.cumsum(keep)))
        for length, rs in self.at.items():
            if length < n and not keep[length]:  # its fresh record is gone
                continue
            kept = [int(new_id[r]) for r in rs if keep[r]]
            if kept:
                out.at.setdefault(int(below[length]), []).extend(kept)
        return out


class Tape:
    """Flat record arrays plus the bookkeeping for one thread's graphs."""

    #: first tape size at which ``compact`` looks for unreachable records
    CHECK_RECORDS = 4096

    # slots: the recording fast paths read a dozen attributes per op
    __slots__ = ("_enabled", "op", "arg0", "size", "ip0", "fp", "v1", "rix", "freed", "args", "ip",
                 "vals", "refs", "leaves", "host", "flipped", "scratch", "check_at", "n",
                 "na", "ni", "nv", "all_freed", "tok", "base", "lkey", "room", "hooks",
                 "where", "stale", "consts", "sums", "aliases", "voff", "n_none", "n_freed",
                 "ptrs", "nptrs", "graph", "__weakref__")

    #: anomaly mode (tapegrad.anomaly.AnomalyTape) checks every adjoint
    check_nan = False
    #: a tapegrad.trace_tape.TraceTape: comparisons record and item()/bool() guard
    tracing = False

    def __init__(self, capacity=1024):
        self._enabled = True       # grad mode of this thread
        self._alloc(capacity)
        self.args = np.zeros(4 * capacity, _INT)
        self.ip = np.zeros(4 * capacity, _INT)
        self.vals = np.zeros(capacity, np.float64)
        self.refs = []             # large values kept for VJPs (rix[r] indexes it)
        self.ptrs = np.zeros(64, _INT)  # their addresses (0: released), for the kernels
        self.nptrs = 0             # refs whose address ptrs holds (see arrays)
        self.leaves = {}           # LEAF record -> Tensor
        self.host = {}             # host record -> what its VJP needs
        self.hooks = {}            # record -> its tensor's hooks (tapegrad.hooks)
        self.where = {}            # record -> source line, only in anomaly mode
        self.flipped = []          # arrays made read-only, to restore
        # record -> what was written in place after it saved it; and when it
        # was marked (see Stale, origin)
        self.stale = Stale(self)
        self.aliases = set()       # basic-index records: views of their parent's memory
        self.consts = []           # (array, CONST record) of small copied operands
        self.sums = []             # (array, checksum) of kept values, in anomaly mode
        self.scratch = None        # adjoint arena, reused across backwards
        self.graph = None          # the last graph search's key and result (autograd.Adjoints)
        self.check_at = self.CHECK_RECORDS  # when to try compact(); kept
        # across epochs, so a tape that regularly grows large is not scanned
        self._new_epoch()

    def _alloc(self, cap):
        self.op = np.zeros(cap, _INT)
        self.arg0 = np.zeros(cap + 1, _INT)
        self.size = np.ones(cap, _INT)  # one-element records need not write it
        self.ip0 = np.zeros(cap, _INT)
        self.fp = np.zeros(cap, np.float64)
        self.v1 = np.zeros(cap, np.float64)
        self.rix = np.full(cap, -1, _INT)  # index in refs of a kept large value
        self.freed = np.zeros(cap, np.bool_)
        self.voff = np.zeros(cap, _INT)  # where a mid-size value starts in vals

    def _new_epoch(self):
        self.n = 0                 # records
        self.na = 0                # parent entries
        self.ni = 1                # integer parameters; ip[0] == 0 is shared
        self.nv = 0                # arena elements used
        self.all_freed = False     # a backward freed every record
        # records that are no op (leaves, constants, outputs: the ops' fast
        # paths never record one) and op records freed: the op records not
        # freed are n - n_none - n_freed (see after_backward)
        self.n_none = 0
        self.n_freed = 0
        self._update_room()
        self.tok = Epoch(self)
        self.base = _getrefcount(self.tok)
        self.lkey = object()       # identifies the epoch to leaves, uncounted
        self.graph = None

    # -- growth ----------------------------------------------------------------
    @staticmethod
    def _grown(a, need):
        cap = len(a)
        while cap < need:
            cap *= 2
        b = np.zeros(cap, a.dtype)
        b[:len(a)] = a
        return b

    def _grow_records(self):
        # Grow aside, then publish with op last: every capacity check reads
        # len(self.op), so a KeyboardInterrupt between these statements leaves
        # arrays at least as long as op that hold every record (growing in
        # place, an interrupt after _alloc lost records or overran size).
        cap = 2 * len(self.op)
        grown = {}
        for k in ("arg0", "size", "ip0", "fp", "v1", "rix", "freed", "voff", "op"):
            a = getattr(self, k)
            b = np.full(cap + (k == "arg0"), {"size": 1, "rix": -1}.get(k, 0), a.dtype)
            b[:len(a)] = a
            grown[k] = b
        for k, b in grown.items():
            setattr(self, k, b)
        self._update_room()

    def _grow_args(self, need):
        self.args = self._grown(self.args, need)
        self._update_room()

    def _make_room(self, nargs):
        if self.n + 2 > len(self.op):
            self._grow_records()
        if self.na + nargs > len(self.args):
            self._grow_args(self.na + nargs)
        self._update_room()

    def _update_room(self):
        """``room``: records the hot paths may append (with up to 2 parents each)
        before they must check capacities again; -1 while grad mode is off, so
        the hot paths need one comparison for both."""
        if self._enabled:
            self.room = min(len(self.op) - 2, self.n + (len(self.args) - self.na) // 2)
        else:
            self.room = -1

    @property
    def enabled(self):
        """Grad mode of this thread: whether operations are recorded."""
        return self._enabled

    @enabled.setter
    def enabled(self, flag):
        self._enabled = bool(flag)
        self._update_room()

    def _grow_ip(self, need):
        self.ip = self._grown(self.ip, need)

    # -- recording -------------------------------------------------------------
    def record(self, op, parents, value, ints=None, const=0.0, inputs=None):
        """Append one record and return its id.

        ``parents`` are record ids; ``value`` is the output (a float array or
        NumPy scalar, stored as float64); ``ints`` are integer parameters and
        ``const`` the float parameter of a K_SCALAR record; ``inputs`` are the
        parents' values, kept if the op's VJP reads them.
        """
        r = self.n
        if r + 2 > len(self.op):
            self._grow_records()
        na = self.na
        k = len(parents)
        if na + k > len(self.args):
            self._grow_args(na + k)
        try:
            self.op[r] = op
            self.arg0[r] = na
            if k == 1:
                self.args[na] = parents[0]
            elif k == 2:
                self.args[na] = parents[0]
                self.args[na + 1] = parents[1]
            elif k:
                self.args[na:na + k] = parents
            self.na = na + k
            if ints is not None:
                self._ints(r, ints)
            if const:
                self.fp[r] = const
            self._value(r, value, inputs)
            self.n = r + 1
        except BaseException:
            self.abandon(r, na)
            raise
        if op < _FIRST_OP:
            self.n_none += 1
        if k > 2:
            self._update_room()
        return r

    def record1(self, op, parent, value, const=0.0, inputs=None):
        """``record`` for one parent and no integer parameters (the hot path)."""
        r = self.n
        na = self.na
        if r >= self.room:
            self._make_room(1)
        try:
            self.op[r] = op
            self.arg0[r] = na
            self.args[na] = parent
            self.na = na + 1
            if const:
                self.fp[r] = const
            if value.ndim:
                self._value(r, value, inputs)
            else:
                self.v1[r] = value  # size is 1 by default
            self.n = r + 1
        except BaseException:
            self.abandon(r, na)
            raise
        if op < _FIRST_OP:
            self.n_none += 1
        return r

    def abandon(self, r, na):
        """Undo record r, which an exception (Ctrl-C) left half-written.

        Record writers fill a slot field by field and publish it last
        (``n = r + 1``); the next record reuses the slot and relies on its
        defaults (size 1, no kept value, no parameters) and on ``na``/``nv``
        being where the last published record left them.  A stale field
        there would silently corrupt every later gradient, so put them back.
        """
        if self.n > r:  # it was published after all: nothing to undo
            return
        self.na = na
        self.size[r] = 1
        self.rix[r] = -1
        self.ip0[r] = 0
        self.fp[r] = 0.0
        s = self.size[:r]
        self.nv = int(s[(s > 1) & (s <= SMALL)].sum())

    def _ints(self, r, ints):
        ni = self.ni
        k = len(ints)
        if ni + k > len(self.ip):
            self._grow_ip(ni + k)
        self.ip0[r] = ni
        self.ip[ni:ni + k] = ints
        self.ni = ni + k

    def _value(self, r, value, inputs=None):
        """Store record r's output value; keep large inputs its VJP reads."""
        size = value.size
        if size != 1:
            self.size[r] = size
        if size == 1:
            self.v1[r] = value if not value.ndim else value.reshape(())[()]
        elif size <= SMALL:
            nv = self.nv
            if nv + size > len(self.vals):
                self.vals = self._grown(self.vals, nv + size)
            self.vals[nv:nv + size] = np.ravel(value)
            self.voff[r] = nv
            self.nv = nv + size
        elif READS_OUTPUT[self.op[r]]:
            self.keep(r, value)
        if inputs is not None and READS_INPUTS[self.op[r]]:
            a0 = self.arg0[r]
            for j, x in enumerate(inputs):
                p = self.args[a0 + j]
                if self.size[p] > SMALL and self.rix[p] < 0:
                    self.keep(p, x)

    def keep(self, r, value):
        """Keep record r's large value for the sweep."""
        self.rix[r] = len(self.refs)
        self.refs.append(self._hold(np.asarray(value)))

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
        """Record a non-differentiable operand (an ndarray) as a CONST record.

        A view of someone else's memory is copied: making the view read-only
        would not stop writes through its base.
        """
        value = given = np.asarray(value)
        if value.dtype.kind == "c":  # the cast below would drop the imaginary part silently
            raise TypeError(f"complex numbers are not supported: an operand of dtype "
                            f"{value.dtype} cannot enter a graph of real tensors")
        if value.dtype.kind != "f":
            value = value.astype(np.float64)
        elif value.size > SMALL and value.base is not None:
            value = value.copy()
        r = self.record(_CONST, (), value)
        if value.size > SMALL:  # operands are read by most VJPs that have them
            self.keep(r, value)
        elif given.ndim:  # copied: a tapegrad write into it later is noted (wrote)
            self.consts.append((given, r))
        return r

    # -- liveness ----------------------------------------------------------------
    def after_backward(self, reached, T, order=None):
        """Free what a backward without ``retain_graph`` used: the reached op
        records of ``order`` (the graph the sweep walked), or of the tape.

        With ``order`` this costs what the graph costs, however many other
        records the tape holds: whether every op record is freed now comes
        from the counts (``n_none``, ``n_freed``), confirmed by a scan only
        when they say so, and large values can only become unneeded if the
        graph holds some."""
        from .kernels.sweep import free_reached
        if order is None:
            all_freed = free_reached(self.op, self.freed, reached, self.n)
            self.n_freed = int(np.count_nonzero((self.op[:self.n] >= _FIRST_OP)
                                                & self.freed[:self.n]))
        else:
            mine = order[reached[order] & (self.op[order] >= _FIRST_OP) & ~self.freed[order]]
            self.freed[mine] = True
            self.n_freed += mine.size
            all_freed = self.n - self.n_none - self.n_freed <= 0 and bool(
                np.all(self.freed[:self.n] | (self.op[:self.n] < _FIRST_OP)))
        if self.hooks:  # a freed record's hooks can never fire again
            self.hooks = {r: h for r, h in self.hooks.items() if not self.freed[r]}
        if all_freed:
            self.all_freed = True
            # no record that is still differentiable reads a held array: give
            # users their arrays' write permission back now, not at the reset
            for a in self.flipped:
                _writeable(a)
            self.flipped.clear()
        elif order is None or bool(np.any(self.rix[order] >= 0)):
            # only the graph's records can have lost their last reader now
            self._release_freed(T)

    def _release_freed(self, T):
        """Drop large values that no record still differentiable can read, and
        give back the write flag of every array no such record reads: a
        user's buffer is writable again as soon as the last graph that used
        it has been freed."""
        if not self.refs and not self.flipped:
            return
        from .kernels._views import ARG0, ARGS
        from .kernels.sweep import consumed
        n = self.n
        # the sweep's T may predate records that a host VJP (a tg.Function's
        # backward, which may record) added, and arrays that grew meanwhile:
        # read the parents from the tape's arrays as they are now
        self.arg0[n] = self.na
        T = T[:ARG0] + (self.arg0,) + T[ARG0 + 1:ARGS] + (self.args,) + T[ARGS + 1:]
        keep = consumed(T, n, self.freed)
        rix = self.rix[:n]
        for r in np.flatnonzero((rix >= 0) & self.freed[:n] & ~keep):
            self.refs[rix[r]] = None
            if rix[r] < self.nptrs:
                self.ptrs[rix[r]] = 0
        if not self.flipped:
            return
        needed = {id(a) for a in self.refs if a is not None}
        needed.update(id(leaf._data) for r, leaf in self.leaves.items() if keep[r])
        still = []
        for a in self.flipped:
            if id(a) in needed:
                still.append(a)
            else:
                _writeable(a)
        self.flipped = still

    def wrote(self, array, what):
        """Note that ``array``, which this tape may hold, was written in place
        (through tapegrad, see ops/methods.py); the records that saved it are
        marked stale, and a backward that needs one of them raises
        (``check_stale``).  Returns whether the tape held it."""
        small = [r for a, r in self.consts if a is array]
        for r in small:
            self.stale[r] = what
        if not any(a is array for a in self.flipped):
            return bool(small)
        # the kept values that are this array, then the records that saved
        # them, found with array operations (this runs at every in-place
        # write while graphs live: a loop over records in Python would cost
        # each write what the tape holds)
        held = [k for k, a in enumerate(self.refs) if a is array]
        if held:
            for r in np.flatnonzero(np.isin(self.rix[:self.n], held)).tolist():
                self.stale[r] = what
        for r, leaf in self.leaves.items():
            if leaf._data is array:
                self.stale[r] = what
        return True

    def compact(self):
        """Drop the records no live tensor or node can reach; renumber the rest.

        Runs when the tape has doubled since the last look, so its cost is
        amortised; it finds the epoch's live tensors and nodes exactly, as the
        holders of the epoch token.  This bounds memory in loops that keep
        the previous iteration's result alive while recording the next one
        (``y = f(x)`` in a loop, without backward), where the tape is never
        completely dead.

        Interrupt-safe: the new state is computed into locals first, then
        written with signal handlers held back (:class:`_SignalsHeld`), so a
        KeyboardInterrupt leaves either the old tape or the compacted one.
        """
        from .kernels.sweep import live_records
        n = self.n
        holders = [h for h in gc.get_referrers(self.tok) if h is not self]
        # each holder holds one reference: more references than holders found
        # are holders gc cannot show (objects moved out of its reach by
        # gc.freeze(), a running frame's locals), whose records must stay put
        if (len(holders) != _getrefcount(self.tok) - self.base
                or not all(type(h) in TOKEN_HOLDERS for h in holders)):
            self.check_at = 2 * n
            return  # something else holds the token (an op in progress)
        roots = np.array([h._rec for h in holders], dtype=_INT)
        self.arg0[n] = self.na  # closes the last record (the sweep writes it too)
        keep = live_records((self.op, self.arg0, self.size, None, self.args), n, roots)
        idx = np.flatnonzero(keep)
        m = idx.size
        if m > n // 2:
            self.check_at = 2 * n
            return
        new_id = np.full(n, -1, _INT)
        new_id[idx] = np.arange(m)
        size = self.size[:n]

        def segments(starts, lengths, src):
            """Concatenation of ``src[starts[i]:starts[i]+lengths[i]]``."""
            total = int(lengths.sum())
            pos = (np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
                   + np.repeat(starts, lengths))
            return src[pos], np.cumsum(lengths) - lengths

        nargs = self.arg0[idx + 1] - self.arg0[idx]
        args, arg0 = segments(self.arg0[idx], nargs, self.args)
        args = new_id[args]
        has_ip = self.ip0[:n] > 0
        ip_starts = self.ip0[:n][has_ip]
        ip_len = np.zeros(n, _INT)
        ip_len[has_ip] = np.diff(np.append(ip_starts, self.ni))
        ips, ip0 = segments(self.ip0[idx], ip_len[idx], self.ip)
        ip0 = np.where(ip_len[idx] > 0, ip0 + 1, 0)
        mid = (size > 1) & (size <= SMALL)
        vsz = np.where(mid, size, 0)
        vals, _ = segments((np.cumsum(vsz) - vsz)[idx], vsz[idx], self.vals)
        new_mid = mid[idx]
        voff = np.cumsum(np.where(new_mid, size[idx], 0)) - np.where(new_mid, size[idx], 0)
        is_op = self.op[idx] >= _FIRST_OP
        n_none = int(m - np.count_nonzero(is_op))
        n_freed = int(np.count_nonzero(is_op & self.freed[idx]))
        kept_rix = self.rix[idx]
        rix = np.where(kept_rix >= 0, np.cumsum(kept_rix >= 0) - 1, -1)
        cols = [(name, getattr(self, name)[idx]) for name in ("op", "size", "fp", "v1", "freed")]
        refs = [self.refs[k] for k in kept_rix if k >= 0]
        kept = {id(a) for a in refs if a is not None}
        host = {int(new_id[r]): v for r, v in self.host.items() if keep[r]}
        hooks = {int(new_id[r]): v for r, v in self.hooks.items() if keep[r]}
        where = {int(new_id[r]): v for r, v in self.where.items() if keep[r]}
        leaves = {int(new_id[r]): leaf for r, leaf in self.leaves.items() if keep[r]}
        kept.update(id(leaf._data) for leaf in leaves.values())
        flipped = [a for a in self.flipped if id(a) in kept]
        released = [a for a in self.flipped if id(a) not in kept]
        stale = self.stale.renumbered(keep, new_id)
        aliases = {int(new_id[r]) for r in self.aliases if keep[r]}
        consts = [(a, int(new_id[r])) for a, r in self.consts if keep[r]]
        sums = [(int(new_id[r]), a, c) for r, a, c in self.sums if keep[r]]
        recs = [int(new_id[h._rec]) for h in holders]
        lkey = object()
        held = _SignalsHeld()
        try:
            held.hold()
            # the new state, written over the old records; nothing below can fail
            for name, col in cols:
                a = getattr(self, name)
                a[:m] = col
                a[m:n] = name == "size"  # the defaults: size 1, everything else 0
            self.rix[:m] = rix
            self.rix[m:n] = -1
            self.arg0[:m] = arg0
            self.ip0[:m] = ip0
            self.ip0[m:n] = 0
            self.args[:args.size] = args
            self.ip[1:1 + ips.size] = ips
            self.vals[:vals.size] = vals
            self.voff[:m] = voff
            self.n, self.na, self.ni, self.nv = m, args.size, 1 + ips.size, vals.size
            self.n_none, self.n_freed = n_none, n_freed
            self._update_room()
            self.refs = refs
            self.nptrs = 0
            self.host, self.hooks, self.where, self.stale = host, hooks, where, stale
            self.aliases = aliases
            self.consts, self.sums = consts, sums
            self.lkey = lkey
            for r, leaf in leaves.items():
                leaf._ltok, leaf._lrec = lkey, r
            self.leaves = leaves
            for h, r in zip(holders, recs):
                h._rec = r
            self.flipped = flipped
            for a in released:
                _writeable(a)
            self.check_at = max(self.CHECK_RECORDS, 2 * m)
        finally:
            held.release()  # a signal that came meanwhile is handled now

    def reset(self):
        """Forget every record; tensors still alive hold their own values."""
        n = self.n
        self.freed[:n] = False
        self.ip0[:n] = 0
        self.fp[:n] = 0.0
        self.size[:n] = 1
        self.rix[:n] = -1
        for a in self.flipped:
            _writeable(a)
        self.flipped.clear()
        self.refs.clear()
        self.nptrs = 0
        self.leaves.clear()
        self.host.clear()
        self.hooks.clear()
        self.where.clear()
        self.stale.clear()
        self.aliases.clear()
        self.consts.clear()
        self.sums.clear()
        self._new_epoch()

    # -- writes no graph records ------------------------------------------------------
    def origin(self, r, stop=None):
        """The record whose value a tensor now on record r had before the
        writes no graph recorded (see :class:`Stale`): r itself for a tensor
        never written so, else the record it was on before the first such
        write -- the one graphs recorded before the writes read, and through
        whose identity records the later uses (they read r) reach the
        tensor's history too.  ``stop(s)``: a record s the walk must not go
        down to (a view: PyTorch gives a view written so a new history)."""
        at = self.stale.at
        while at:
            s = self._moved_from(r)
            if s is None or stop is not None and stop(s):
                return r
            r = s
        return r

    def _moved_from(self, r):
        """The record a write no graph records moved a tensor from to record
        r (the identity record ``ops/methods.py``'s ``_written`` makes, right
        after it marks the old record stale), or None."""
        cands = self.stale.at.get(r)
        if not cands or int(self.op[r]) != _IDENT:
            return None
        end = self.arg0[r + 1] if r + 1 < self.n else self.na
        if end - self.arg0[r] != 1:
            return None
        s = int(self.args[self.arg0[r]])
        return s if s in cands else None

    # -- the view the kernels take ---------------------------------------------------
    def arrays(self, adj):
        """The tuple of arrays the sweep reads (see kernels/_views.py), with the
        value and adjoint layout ``adj`` (an :class:`~tapegrad.autograd.Adjoints`)."""
        self.arg0[self.n] = self.na  # closes the last record's parents
        # the addresses of the kept values, found once per value: a backward
        # costs what its graph costs, not what every kept value does
        m, k = len(self.refs), self.nptrs
        if m > k:
            if m > self.ptrs.size:
                self.ptrs = self._grown(self.ptrs, m)
            self.ptrs[k:m] = np.fromiter((0 if a is None else a.ctypes.data
                                          for a in self.refs[k:m]), _INT, m - k)
            self.nptrs = m
        ptrs = self.ptrs[:m]
        return (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                self.v1, self.vals, adj.voff, self.rix, ptrs, adj.aptr)


class _SignalsHeld:
    """Holds back Python-level signal handlers while the tape is rewritten.

    A signal's Python handler (``default_int_handler`` for Ctrl-C, or any
    handler that raises) runs in the main thread between any two bytecodes;
    one that raised in the middle of :meth:`Tape.compact`'s write-back would
    leave records renumbered but tensors not.  ``hold`` swaps every callable
    handler for this object, which only notes the signal; ``release`` puts
    them back and runs the noted ones.  Other threads never run handlers, so
    there is nothing to hold there.  Only compaction uses it: the recording
    hot path pays nothing.
    """

    __slots__ = ("saved", "pending", "done")

    def __init__(self):
        self.saved = {}      # signal -> its own handler, filled as each is swapped
        self.pending = []
        self.done = False

    def __call__(self, signum, frame):
        if self.done:        # a release interrupted halfway left us installed
            return self.saved[signum](signum, frame)
        self.pending.append((signum, frame))

    def hold(self):
        if threading.current_thread() is not threading.main_thread():
            return
        handlers = [(s, h) for s in signal.valid_signals() if callable(h := signal.getsignal(s))]
        for s, h in handlers:
            self.saved[s] = h
            signal.signal(s, self)

    def release(self):
        self.done = True
        for s, h in self.saved.items():
            signal.signal(s, h)
        for s, frame in self.pending:
            self.saved[s](s, frame)


def _writeable(a):
    """Give an array we made read-only its write permission back."""
    try:
        a.flags.writeable = True
    except ValueError:  # its base became read-only meanwhile
        pass


_CONST = C.code(C.K_NONE, C.CONST)
_IDENT = C.code(C.K_UNARY, C.IDENT)
class _NoTape:
    """Stands for "this thread has no tape yet" in the ops' fast paths: no
    token matches its ``tok`` and it has no room."""

    tok = object()
    n = 0
    room = -1


NO_TAPE = _NoTape()
_local = threading.local()


def current():
    """This thread's tape, created on first use.

    Every op fetches the tape through here before it resolves its inputs, so
    a reset (which only happens here) never falls between reading a parent's
    record id and writing the record that uses it.  (The ops' inlined fast
    paths skip this call only when an input is a live non-leaf of the
    current epoch, which proves the tape cannot be reset.)
    """
    try:
        t = _local.tape
    except AttributeError:
        t = _local.tape = Tape()
    if t.n:
        if t.all_freed or _getrefcount(t.tok) <= t.base:
            t.reset()
        elif t.n >= t.check_at:
            t.compact()
    return t
