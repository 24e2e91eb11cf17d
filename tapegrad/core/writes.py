"""In-place writes on the tape: the records they leave stale, and where a
tensor moved by a write no graph records came from.

``Stale`` is ``Tape.stale``; ``_Writes`` is a base class of
:class:`tapegrad.core.tape.Tape` (``wrote``, ``origin``).
"""
import weakref

import numpy as np

from ..kernels import codes as C

_IDENT = C.code(C.K_UNARY, C.IDENT)


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


class Flipped:
    """``Tape.flipped``: the arrays the tape made read-only, to be given their
    write flag back when no graph reads them any more; a set by identity
    (an array's ``id`` cannot be reused while this holds it)."""

    __slots__ = ("arrays", "new", "first")

    def __init__(self, arrays=(), first=None):
        self.arrays = {id(a): a for a in arrays}
        self.new = []   # flipped since the last look of a release (take_new)
        # called before the first array is added (Tape._watch: from then on
        # the epoch's end must give the flags back)
        self.first = first

    def append(self, a):
        if not self.arrays and self.first is not None:
            self.first()
        self.arrays[id(a)] = a
        self.new.append(a)

    def take_new(self):
        """The arrays flipped since the last call (a backward's release looks
        at each once; later only a release of what holds it can free it)."""
        new, self.new = self.new, []
        return new

    def holds(self, a):
        return self.arrays.get(id(a)) is a

    def __iter__(self):
        return iter(list(self.arrays.values()))

    def __len__(self):
        return len(self.arrays)

    def clear(self):
        self.arrays.clear()
        self.new.clear()


class _Saved:
    """One array's entry in :class:`SavedIndex`: the records that saved it,
    as a small copied operand (``consts``) or by reference (``held``: kept
    values and leaves), and how many of each a write has marked stale."""

    __slots__ = ("ref", "consts", "held", "consts_marked", "held_marked")

    def __init__(self, a):
        self.ref = weakref.ref(a)   # the index keeps no value alive
        self.consts, self.held = [], []
        self.consts_marked = self.held_marked = 0


class SavedIndex:
    """``Tape.saved``: id(array) -> the records that saved that very array.

    Built lazily from what the tape already keeps (``consts``, ``refs`` with
    ``ref_rec``, ``leaves``), catching up only with what was added since the
    last look, so recording pays nothing for it and an in-place write pays for
    the records saved since the previous write.  A compaction or a reset
    renumbers the records and clears it.
    """

    __slots__ = ("by_id", "nconsts", "nrefs", "leaf_upto")

    def __init__(self):
        self.clear()

    def clear(self):
        self.by_id = {}
        self.nconsts = self.nrefs = 0
        self.leaf_upto = -1

    def _add(self, a, r, held):
        if not isinstance(a, np.ndarray):
            return
        e = self.by_id.get(id(a))
        if e is None or e.ref() is not a:  # new, or an id a dead array had
            e = self.by_id[id(a)] = _Saved(a)
        (e.held if held else e.consts).append(r)

    def entry(self, tape, a):
        """The entry of array ``a`` (None if no record saved it), up to date."""
        self.catch_up(tape)
        e = self.by_id.get(id(a))
        return e if e is not None and e.ref() is a else None

    def catch_up(self, tape):
        """Index what the tape saved since the last look."""
        consts, refs, leaves = tape.consts, tape.refs, tape.leaves
        for k in range(self.nconsts, len(consts)):
            c, r = consts[k]
            self._add(c, r, False)
        self.nconsts = len(consts)
        rec = tape.ref_rec
        for k in range(self.nrefs, len(refs)):
            v = refs[k]
            if v is not None and k in rec:
                self._add(v, rec[k], True)
        self.nrefs = len(refs)
        new = []
        for r, leaf in reversed(leaves.items()):  # LEAF records come in order
            if r <= self.leaf_upto:
                break
            new.append((r, leaf))
        if new:
            self.leaf_upto = new[0][0]
            for r, leaf in reversed(new):
                self._add(leaf._data, r, True)


class _Writes:
    """The methods of :class:`~tapegrad.core.tape.Tape` for in-place writes:
    marking the records that saved a written array stale, and the origin of
    a tensor that writes no graph records moved."""

    __slots__ = ()

    def wrote(self, array, what):
        """Note that ``array``, which this tape may hold, was written in place
        (through tapegrad, see ops/methods.py); the records that saved it are
        marked stale, and a backward that needs one of them raises
        (``check_stale``).  Returns whether the tape held it."""
        # through the index of saved arrays: a write costs what the records
        # saved since the last write cost, not what the whole tape holds (a
        # metric kept from every step of a loop would make each step's write
        # slower than the last)
        entry = self.saved.entry(self, array)
        if entry is None:
            return self.flipped.holds(array)
        consts = entry.consts
        self._mark(consts, entry.consts_marked, what)
        entry.consts_marked = len(consts)
        if not self.flipped.holds(array):
            return bool(consts)
        held = entry.held
        self._mark(held, entry.held_marked, what)
        entry.held_marked = len(held)
        return True

    def _mark(self, records, start, what):
        stale = self.stale
        for k in range(start, len(records)):
            r = records[k]
            if r not in stale:
                stale[r] = what

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
