"""The tape's liveness: freeing after a backward, compaction, resets.

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

``_Liveness`` is a base class of :class:`tapegrad.core.tape.Tape`: these methods
run after a backward (``after_backward``) and at the start of an operation
(``current()`` calls ``reset`` and ``compact``), never on the recording path.
"""
import gc
import signal
import sys
import threading

import numpy as np

from ..kernels import codes as C
from ..kernels._views import SMALL
from .writes import Flipped, SavedIndex

_INT = np.int64
_FIRST_OP = 1 << C.SHIFT  # op codes below this are K_NONE records (no VJP)
#: parentless records (a leaf's value, a constant operand) that keep a value
#: for their consumers only: never freed themselves, they let it go once no
#: consumer can read it, and a later consumer keeps it anew (Tape._value)
_HOLDERS = (C.code(C.K_NONE, C.LEAF), C.code(C.K_NONE, C.CONST))
_FUNCTION = C.code(C.K_HOST, C.FUNCTION)  # a tg.Function's record (ops/function.py, engine/graph.py)
_getrefcount = sys.getrefcount
_FRAME = type(sys._getframe())


def _saves_by_code():
    """Which op codes save values for their backward, as PyTorch's nodes
    save tensors: those whose VJP reads a value (``optable``), and those
    whose PyTorch node saves one the VJP here does not need -- a Python
    number operand PyTorch wraps as a tensor (``x * c``, ``x / c``,
    ``c / x``, ``x ** c``, ``c ** x``), the index of advanced indexing,
    ``take``, ``take_along_axis``, ``sort`` (its permutation) and
    ``index_put``; and every host op (matmul, the decompositions, a
    ``tg.Function``, whose context goes with its record) and user op.
    Sums, means, views, slices, concatenations, additions, negation and
    the like save nothing: a second backward through them alone is no
    error (``after_backward``)."""
    from ..kernels.optable import READS_INPUTS, READS_OUTPUT
    saves = np.array(READS_INPUTS, np.bool_) | np.array(READS_OUTPUT, np.bool_)
    for sub in (C.MULC, C.DIVC, C.RDIVC, C.POWC, C.RPOWC):
        saves[C.code(C.K_SCALAR, sub)] = True
    # Index, Take, TakeAlongAxis, Sort, IndexPut (sub codes of ops/shape.py)
    for sub in (C.INDEX, 12, 13, 14, 19):
        saves[C.code(C.K_GATHER, sub)] = True
    for kind in (C.K_HOST, C.K_USER):
        saves[C.code(kind, 0):C.code(kind + 1, 0)] = True
    saves[:_FIRST_OP] = False
    return saves


#: indexed by op code: whether a record of it saved values for its backward,
#: so that a backward without ``retain_graph`` frees it (``after_backward``)
SAVES = _saves_by_code()
_SAVES = SAVES.tolist()
#: graphs of up to this many records are freed in plain Python (after_backward)
_FEW = 64

#: the classes whose instances may hold an epoch token (Tensor, and the
#: graph's Node), registered by their modules: ``compact`` renumbers records
#: only when every holder of the token is one of these
TOKEN_HOLDERS = set()


class _Liveness:
    """The methods of :class:`~tapegrad.core.tape.Tape` that free records and
    values: after a backward, by compaction, at a reset."""

    __slots__ = ()

    #: whether kept values outlive a backward that freed every record, until
    #: the reset (a trace's tape: its replay is built from them; anomaly
    #: mode's: it checks them)
    keeps_freed_values = False

    # -- liveness ----------------------------------------------------------------
    def after_backward(self, reached, T, order=None):
        """Free what a backward without ``retain_graph`` used: of the op
        records it ran (``reached``, among those of ``order``, the graph the
        sweep walked, or of the tape), those that saved values for their
        backward (:data:`SAVES`), as PyTorch frees a node's saved tensors.

        A record that saved nothing stays differentiable: a second backward
        through it is no error (PyTorch's ``(-x).sum()`` backpropagates any
        number of times), and its hooks stay.  It is *spent* instead when the
        graph the backward ran saved something -- that graph can never be
        run again -- so that the tape resets once every op record is freed
        or spent (``all_freed``), as it did when every record was freed.

        With ``order`` this costs what the graph costs, however many other
        records the tape holds: whether every op record is settled comes
        from the counts (``n_none``, ``n_freed``, ``n_spent``), confirmed by
        a scan only when they say so, and large values can only become
        unneeded if the graph holds some."""
        op, freed, spent, n = self.op, self.freed, self.spent, self.n
        ran_all = False
        if reached.size <= _FEW:
            # a small graph: plain Python costs less than a dozen NumPy calls
            m = reached.size
            codes, was = op[:m].tolist(), freed[:m].tolist()
            mine, rest = [], []
            hits = 0
            for r, hit in enumerate(reached.tolist()):
                if hit and codes[r] >= _FIRST_OP:
                    hits += 1
                    if not _SAVES[codes[r]]:
                        rest.append(r)
                    elif not was[r]:
                        mine.append(r)
            if mine:
                for r in mine:
                    freed[r] = True
                self.n_freed += len(mine)
                if hits == n - self.n_none:
                    # it ran every op record of the tape (a loop's backward):
                    # all are freed or spent now, and the reset clears the marks
                    self.n_spent = n - self.n_none - self.n_freed
                    ran_all = True
                elif rest:
                    # the rest of a graph that saved something never runs whole again
                    old = spent[:m].tolist()
                    spend = [r for r in rest if not old[r]]
                    spent[spend] = True
                    self.n_spent += len(spend)
        elif order is None or 4 * order.size >= reached.size:
            # masks over the records (outside the graph ``reached`` is False):
            # a few passes over contiguous arrays cost less than index arrays
            m = reached.size
            codes = op[:m]
            hit = codes >= _FIRST_OP
            hit &= reached
            saves = SAVES.take(codes)
            # (a record the sweep ran is not freed: it raises at a freed one)
            new = saves & hit
            k = int(np.count_nonzero(new))
            mine = ()
            if k:
                freed[:m] |= new
                self.n_freed += k
                if int(np.count_nonzero(hit)) == n - self.n_none:
                    # it ran every op record of the tape (a loop's backward):
                    # all are freed or spent now, and the reset clears the marks
                    self.n_spent = n - self.n_none - self.n_freed
                    ran_all = True
                else:
                    spend = hit & ~saves & ~spent[:m]
                    spent[:m] |= spend
                    self.n_spent += int(np.count_nonzero(spend))
                if self.hooks or self.host:
                    mine = np.flatnonzero(new).tolist()
                else:
                    mine = (True,)  # (only whether any was freed is read below)
        else:
            recs = order[reached[order]]
            recs = recs[op[recs] >= _FIRST_OP]
            saves = SAVES[op[recs]]
            mine = recs[saves]
            mine = mine[~freed[mine]]
            if mine.size:
                freed[mine] = True
                self.n_freed += mine.size
                spend = recs[~saves]
                spend = spend[~spent[spend]]
                spent[spend] = True
                self.n_spent += spend.size
            mine = mine.tolist() if mine.size and (self.hooks or self.host) else \
                (True,) * bool(mine.size)  # (only whether any was freed is read then)
        # every op record freed or spent: confirmed by a scan when the counts say so
        all_freed = ran_all or n - self.n_none - self.n_freed - self.n_spent <= 0 and (
            all(c < _FIRST_OP or f or s for c, f, s in
                zip(op[:n].tolist(), freed[:n].tolist(), spent[:n].tolist())) if n <= _FEW
            else not np.any((op[:n] >= _FIRST_OP) & ~freed[:n] & ~spent[:n]))
        if self.hooks and mine:  # a freed record's hooks can never fire again
            self.hooks = {r: h for r, h in self.hooks.items() if not freed[r]}
        if self.host and not self.keeps_freed_values and mine:
            self._drop_host(mine)
        if all_freed:
            self.settled()
        elif mine and (order is None or bool(np.any(self.rix[order] >= 0))):
            # only the graph's records can have lost their last reader now
            self._release_freed(T, order)

    def settled(self):
        """Every op record of the tape is freed or spent (``all_freed``): no
        record that is still differentiable reads a held array, so users get
        their arrays' write permission back now, not at the reset, and the
        kept values go, as PyTorch frees a graph's saved tensors in its
        backward.  (The small backward of engine/backward.py frees its
        records in its compiled call and ends here too.)"""
        self.all_freed = True
        for a in self.flipped:
            _writeable(a)
        self.flipped.clear()
        if not self.keeps_freed_values:
            refs = self.refs
            for k in range(len(refs)):
                refs[k] = None
            self.nheld.clear()
            self.kept_bytes = 0
            self.held32 = 0
            if self.nptrs:
                self.ptrs[:self.nptrs] = 0

    def _drop_host(self, records):
        """What the freed host records among ``records`` kept for their VJPs
        (a decomposition's factors, a tg.Function's context) goes with them,
        as their kept values do: graphs kept alive beside them would hold it
        until the tape resets.  A tg.Function keeps its class, which names its
        ``grad_fn``."""
        host, op = self.host, self.op
        for r in records:
            h = host.get(r)
            if h is None:
                continue
            if int(op[r]) == _FUNCTION and isinstance(h, tuple) and h:
                host[r] = (h[0],)
            else:
                del host[r]

    def _release_freed(self, T, order=None):
        """Drop large values that no record still differentiable can read, and
        give back the write flag of every array no such record reads: a
        user's buffer is writable again as soon as the last graph that used
        it has been freed.

        ``order``: the graph the backward walked.  Only its records can have
        lost their last reader (a record outside it is read by none of it),
        so only their values are looked at: the cost is the graph's, not
        that of every graph kept alive beside it.
        """
        if not self.refs and not self.flipped:
            return
        from ..kernels._views import ARG0, ARGS
        from ..kernels.sweep import consumed
        n = self.n
        # the sweep's T may predate records that a host VJP (a tg.Function's
        # backward, which may record) added, and arrays that grew meanwhile:
        # read the parents from the tape's arrays as they are now
        self.arg0[n] = self.na
        T = T[:ARG0] + (self.arg0,) + T[ARG0 + 1:ARGS] + (self.args,) + T[ARGS + 1:]
        # a record that saved nothing reads no value: it keeps none alive
        settled = self.freed[:n] if self.keeps_freed_values else \
            self.freed[:n] | ~SAVES[self.op[:n]]
        keep = consumed(T, n, settled)
        cand = np.arange(n) if order is None else order[order < n]
        rix = self.rix[cand]
        refs, nptrs, nheld = self.refs, self.nptrs, self.nheld
        flipped = self.flipped
        if flipped:
            self.saved.catch_up(self)  # the values released below stay findable
        # the flipped arrays that may have lost their last reader now: the
        # values released below, the leaves of the graph no live record reads
        # any more, and arrays flipped since the last look; with no graph,
        # every one
        fresh = flipped.take_new()
        maybe = dict(flipped.arrays) if order is None else {id(a): a for a in fresh}
        gone = self.freed[cand]
        if not self.keeps_freed_values:
            # a value kept for its consumers only (a leaf's, a constant's, an
            # op's that saved nothing itself) goes once none of them reads it
            gone = gone | np.isin(self.op[cand], _HOLDERS) | ~SAVES[self.op[cand]]
        for r in cand[(rix >= 0) & gone & ~keep[cand]].tolist():
            k = self.rix[r]
            a = refs[k]
            if int(self.op[r]) in _HOLDERS:
                self.rix[r] = -1   # a consumer recorded later keeps the value again
            if a is not None:
                refs[k] = None
                self.kept_bytes -= a.nbytes
                self.held32 -= a.dtype == np.float32
                if k < nptrs:
                    self.ptrs[k] = 0
                c = nheld.get(id(a))
                if c is not None:
                    if c > 1:
                        nheld[id(a)] = c - 1
                    else:
                        del nheld[id(a)]
                        maybe[id(a)] = a
        if not flipped:
            return
        leaves = self.leaves
        if order is not None:
            for r in cand[~keep[cand]].tolist():
                leaf = leaves.get(r)
                if leaf is not None:
                    maybe[id(leaf._data)] = leaf._data
        # an array no kept value is may still be a leaf's that a live graph
        # reads: looked up through the index of saved arrays (newest records
        # first), or, for an array it has no entry for, among all leaves
        every = None
        for i, a in maybe.items():
            if i in nheld or not flipped.holds(a):
                continue
            e = self.saved.entry(self, a)
            if e is not None:
                needed = any(r in leaves and keep[r] and leaves[r]._data is a
                             for r in reversed(e.held))
            else:
                if every is None:
                    every = {id(leaf._data) for r, leaf in leaves.items() if keep[r]}
                needed = i in every
            if not needed:
                del flipped.arrays[i]
                _writeable(a)

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
        from ..kernels.sweep import live_records
        n = self.n
        tok = self.live_tok()
        if tok is None:        # the epoch is over: the next current() resets
            return
        holders = [h for h in gc.get_referrers(tok) if h is not self and type(h) is not _FRAME]
        # each holder holds one reference: more references than holders found
        # are holders gc cannot show (objects moved out of its reach by
        # gc.freeze(), a running frame's locals), whose records must stay put
        # (not counted: ``tok`` here, the call's argument, and the tape's own
        # reference while it holds the token)
        if (len(holders) != _getrefcount(tok) - 2 - (self.tok_hold is tok)
                or not all(type(h) in TOKEN_HOLDERS for h in holders)):
            # an op in progress or a sweep holds it: look again once the tape
            # has doubled; for kept bytes, at the next op (an op's fallback
            # path may hold it), then once an eighth more bytes are kept (each
            # look scans gc's objects: not at every op of a sweep)
            self.check_at = max(self.check_at, 2 * n)
            kept = self.kept_bytes
            if kept >= self.check_bytes:
                self.check_bytes = (0 if self.check_bytes
                                    else max(self.CHECK_BYTES, kept + kept // 8))
            return
        roots = np.array([h._rec for h in holders], dtype=_INT)
        self.arg0[n] = self.na  # closes the last record (the sweep writes it too)
        keep = live_records((self.op, self.arg0, self.size, None, self.args), n, roots)
        idx = np.flatnonzero(keep)
        m = idx.size
        if m > n // 2:
            # most records live: worth it only if the dead ones hold most of
            # the kept bytes (large values of graphs dropped without backward)
            dead = self.rix[:n][~keep & (self.rix[:n] >= 0)].tolist()
            if 2 * sum(self.refs[k].nbytes for k in dead
                       if self.refs[k] is not None) < self.kept_bytes:
                # look again when the tape has doubled, or its kept bytes have
                self.check_at = max(self.check_at, 2 * n)
                self.check_bytes = max(self.CHECK_BYTES, 2 * self.kept_bytes)
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
        n_spent = int(np.count_nonzero(is_op & self.spent[idx]))
        kept_rix = self.rix[idx]
        rix = np.where(kept_rix >= 0, np.cumsum(kept_rix >= 0) - 1, -1)
        cols = [(name, getattr(self, name)[idx])
                for name in ("op", "size", "fp", "v1", "freed", "spent", "f32")]
        refs = [self.refs[k] for k in kept_rix if k >= 0]
        ref_rec = dict(enumerate(np.flatnonzero(kept_rix >= 0).tolist()))
        nheld = {}
        for k, a in enumerate(refs):
            if a is not None and k in ref_rec:
                nheld[id(a)] = nheld.get(id(a), 0) + 1
        kept_bytes = sum(a.nbytes for a in refs if a is not None)
        kept = {id(a) for a in refs if a is not None}
        host = {int(new_id[r]): v for r, v in self.host.items() if keep[r]}
        hooks = {int(new_id[r]): v for r, v in self.hooks.items() if keep[r]}
        where = {int(new_id[r]): v for r, v in self.where.items() if keep[r]}
        leaves = {int(new_id[r]): leaf for r, leaf in self.leaves.items() if keep[r]}
        kept.update(id(leaf._data) for leaf in leaves.values())
        # the leaves whose next use reads their record: not one written in
        # place since (``_written`` let it go, its record is stale), whose
        # next use records its new value
        attached = [(int(new_id[r]), leaf) for r, leaf in self.leaves.items()
                    if keep[r] and leaf._ltok is self.lkey and leaf._lrec == r]
        flipped = Flipped((a for a in self.flipped if id(a) in kept), self.flipped.first)
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
            self.n_none, self.n_freed, self.n_spent = n_none, n_freed, n_spent
            self._update_room()
            self.refs, self.ref_rec, self.nheld = refs, ref_rec, nheld
            self.kept_bytes = kept_bytes
            self.held32 = sum(a is not None and a.dtype == np.float32 for a in refs)
            self.check_bytes = max(self.CHECK_BYTES, 2 * kept_bytes)
            self.saved = SavedIndex()
            self.nptrs = 0
            self.host, self.hooks, self.where, self.stale = host, hooks, where, stale
            self.aliases = aliases
            self.consts, self.sums = consts, sums
            self.lkey = lkey
            for r, leaf in attached:
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
        # (a column no record of the epoch wrote is left alone: each clear
        # costs a small step's backward a quarter of a microsecond)
        if self.n_spent:            # marks are only set with n_spent counting them
            self.spent[:n] = False
        self.ip0[:n] = 0
        self.fp[:n] = 0.0
        self.size[:n] = 1
        if self.refs:               # a kept value (rix >= 0) is an entry of refs
            self.rix[:n] = -1
        if self.max_size > SMALL:   # only a large value is marked float32
            self.f32[:n] = False
        self.held32 = 0
        if not self.released:      # (the epoch's end gave them back already)
            for a in self.flipped:
                _writeable(a)
        self.flipped.clear()
        self.refs.clear()
        self.ref_rec.clear()
        self.nheld.clear()
        self.kept_bytes = 0
        self.saved.clear()
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
