"""In-place writes on the tape: the records they leave stale, and where a
tensor moved by a write no graph records came from.

``Stale`` is ``Tape.stale``; ``_Writes`` is a base class of
:class:`tapegrad.tape.Tape` (``wrote``, ``origin``).
"""
import weakref

import numpy as np

from .kernels import codes as C

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


class _Writes:
    """The methods of :class:`~tapegrad.tape.Tape` for in-place writes:
    marking the records that saved a written array stale, and the origin of
    a tensor that writes no graph records moved."""

    __slots__ = ()

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
