"""The shifted exponentials of the last large logsumexp, for the softmax of
the same value.

``logsumexp(x, axis)`` computes ``m = max(x)``, ``e = exp(x - m)`` and
``s = sum(e)``; ``softmax(x, axis)`` is ``e / s`` and ``log_softmax(x,
axis)`` is ``x - (log(s) + m)``.  A loss that uses both (a cross-entropy
beside the probabilities, an entropy) would compute the exponentials twice,
and ``exp`` is the most expensive pass of the three functions (NumPy's
float64 ``exp`` took 5-11 ms per million elements on a CPU without
AVX-512).  So the
logsumexp of a differentiated tensor remembers ``(m, e, s)`` on the
thread's tape and the softmax of the same tensor, along the same axes,
takes them instead of computing them again: the same arrays, so the same
values bit for bit, and the same records.

The memo is one entry.  It holds ``e`` weakly (the tape keeps it, for the
exponential's VJP, until the backward that frees the graph) and is used
only while it cannot be stale:

* the same tape epoch and the same record of ``x``: a recorded in-place
  write gives ``x`` a new record, a reset or compaction a new epoch;
* the same value array, and no write through tapegrad since (an unrecorded
  write, ``t.data[...] = v``, forgets the memo: :func:`forget`);
* NumPy cannot write into the array either: while a graph records a tensor,
  ``t.numpy()`` gives it read-only (ops/methods.py).
"""
import weakref

__all__ = ["remember", "recall", "forget"]


def remember(tape, x, r, axes, m, e, s):
    """Note that ``x`` (record ``r`` on ``tape``) has the maxima ``m``, the
    shifted exponentials ``e`` and their sums ``s`` along ``axes``."""
    try:
        xref, eref = weakref.ref(x._data), weakref.ref(e)
    except TypeError:  # a NumPy scalar takes no weak reference: nothing to share
        return
    tape.exp_memo = (tape.lkey, r, axes, xref, m, eref, s)


def recall(tape, x, axes):
    """``(m, e, s)`` of ``x`` along ``axes`` when the memo holds them, else None."""
    memo = tape.exp_memo
    if memo is None or tape.tracing:
        return None
    lkey, r, maxes, xref, m, eref, s = memo
    if lkey is not tape.lkey or maxes != axes or xref() is not x._data or tape.freed[r]:
        return None
    mine = x._rec if tape.is_live(x._tok) else (x._lrec if x._tok is None and x._ltok is lkey
                                              else -1)
    e = eref()
    if mine != r or e is None:
        return None
    return m, e, s


def forget():
    """Drop the memo of this thread's tape: a value was written in place."""
    from ..core.tape import _local
    tape = _local.__dict__.get("tape")
    if tape is not None:
        tape.exp_memo = None
