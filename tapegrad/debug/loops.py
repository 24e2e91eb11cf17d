"""Finding the body of a Python loop in a recorded graph.

A loop written in Python (``for step in range(n): state = rk4(state)``)
records the same operations once per trip: in the sequence of a graph's
records, each record matches the one a period earlier -- the same op, the
same shape, parents at the same distance back (or the same leaf: the
parameters every trip reads). :func:`find_loop` finds the period and the
trips that repeat it. Pictures of the graph draw the body once
(``debug/viz.py``).

Candidate periods are the gaps between occurrences of a signature that
repeats only a few times (one per trip) plus every small period; the loop
is the run of matches that covers the most records, so the repeated stages
inside one trip (RK4's four right-hand sides) lose to the trip itself.
"""
from typing import NamedTuple

import numpy as np

#: periods up to this many records are always tried
SMALL_PERIOD = 64
#: signatures whose occurrences propose periods (the rarest that repeat)
PROPOSERS = 8


class Loop(NamedTuple):
    """``trips`` repetitions of a body of ``period`` items, from ``start``."""
    start: int
    period: int
    trips: int

    def trip_of(self, i):
        """The trip item ``i`` belongs to (-1 outside the loop)."""
        j = i - self.start
        return j // self.period if 0 <= j < self.period * self.trips else -1

    def body_of(self, i):
        """The item of the first trip that item ``i`` repeats (``i`` outside the loop)."""
        j = i - self.start
        return self.start + j % self.period if 0 <= j < self.period * self.trips else i


def signatures(items, kind, parents):
    """Integer signatures of ``items`` (in order): ``kind(i)`` (hashable:
    the op and shape) and the parents, each as its distance back in the
    sequence, or as itself where ``fixed(p)`` (a leaf). ``parents(i)``:
    ``(p, fixed, slot)`` triples."""
    at = {r: k for k, r in enumerate(items)}
    ids, out = {}, np.empty(len(items), np.int64)
    for k, r in enumerate(items):
        ps = []
        for p, fixed, slot in parents(r):
            ps.append(("leaf", p, slot) if fixed or p not in at else (k - at[p], slot))
        out[k] = ids.setdefault((kind(r), tuple(ps)), len(ids))
    return out


def _longest_run(eq):
    """(start, length) of the longest run of True in ``eq``."""
    if not eq.any():
        return 0, 0
    d = np.diff(np.concatenate(([0], eq.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k] - starts[k])


def _candidates(sig, min_period):
    m = sig.size
    found = set(range(min_period, min(SMALL_PERIOD, m // 3) + 1))
    ids, counts = np.unique(sig, return_counts=True)
    repeated = ids[counts >= 3]
    rare = repeated[np.argsort(counts[counts >= 3], kind="stable")][:PROPOSERS]
    for s in rare:
        gaps = np.diff(np.flatnonzero(sig == s))
        found.update(int(g) for g in np.unique(gaps) if min_period <= g <= m // 3)
    return sorted(found)


def find_loop(sig, min_trips=3, min_period=1):
    """The :class:`Loop` that covers the most items of the signature
    sequence ``sig`` with at least ``min_trips`` trips and a body of at
    least ``min_period`` items, or None.

    >>> find_loop(np.array([7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 9]))
    Loop(start=1, period=3, trips=3)
    """
    sig = np.asarray(sig)
    best = None
    for period in _candidates(sig, min_period):
        start, run = _longest_run(sig[:-period] == sig[period:])
        trips = (run + period) // period
        if trips >= min_trips and not _repeats_within(sig[start:start + trips * period], period):
            cover = trips * period
            if best is None or cover > best[0]:
                best = (cover, Loop(start, period, trips))
    return None if best is None else best[1]


def _repeats_within(seq, period):
    """Whether ``seq`` (trips of a body of ``period``) is itself the repeat of
    a shorter body: then it is that body's loop (or, for one op, a chain)."""
    return any(period % d == 0 and (seq[d:] == seq[:-d]).all() for d in range(1, period))
