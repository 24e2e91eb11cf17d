"""Anomaly detection: which operation made a gradient NaN or infinite.

While :class:`detect_anomaly` is on, this thread's tape is switched to a
subclass whose ``record`` methods also remember the user's source line and
the output's shape, and whose ``room`` stays -1 so that the ops' inlined
fast paths fall back to those methods.  Switching the class (not testing a
flag) is what keeps recording free when anomaly mode is off.  A backward
on such a tape runs the sweep one record at a time and checks the gradients
each VJP wrote.
"""
import functools
import linecache
import os
import sys
import zlib

import numpy as np

from ..core.registry import CONST, LEAF
from ..core.tape import Tape, current

_SKIP = tuple(os.path.dirname(m.__file__) + os.sep
              for m in (sys.modules[__package__.partition(".")[0]], np))


def _caller(shape):
    """(file, line, function, shape) of the first frame outside tapegrad and NumPy."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_SKIP):
        f = f.f_back
    if f is None:
        return (None, 0, None, shape)
    return (f.f_code.co_filename, f.f_lineno, f.f_code.co_name, shape)


class TracingTape(Tape):
    """A tape that remembers where each record was made (``tape.where``)."""

    keeps_freed_values = True  # see tape_liveness._Liveness

    __slots__ = ()
    check_nan = False

    def _update_room(self):
        self.room = -1  # every op takes record/record1 below

    def record(self, op, parents, value, ints=None, const=0.0, inputs=None):
        r = Tape.record(self, op, parents, value, ints, const, inputs)
        self.where[r] = _caller(np.shape(value))
        return r

    def record1(self, op, parent, value, const=0.0, inputs=None):
        r = Tape.record1(self, op, parent, value, const, inputs)
        self.where[r] = _caller(np.shape(value))
        return r


class AnomalyTape(TracingTape):
    """A tracing tape whose backward checks every gradient for NaN and inf,
    and every value kept by reference against its checksum at recording."""

    __slots__ = ()
    check_nan = True

    def keep(self, r, value):
        TracingTape.keep(self, r, value)
        a = self.refs[-1]
        self.sums.append((r, a, zlib.crc32(memoryview(a).cast("B"))))


def check_saved(tape, reached):
    """Raise if a value kept by reference that this backward read changed
    since it was recorded: written through a NumPy view taken before the
    graph, or after someone set ``flags.writeable = True`` -- writes the
    read-only flag cannot stop and only a checksum sees."""
    held = {id(a) for a in tape.refs if a is not None}
    m = reached.size
    arg0 = tape.arg0[:m + 1]
    args = tape.args[:int(arg0[-1])]
    for r, a, crc in tape.sums:
        if id(a) not in held or r >= m:
            continue
        users = [int(c) for c in np.searchsorted(arg0, np.flatnonzero(args == r), "right") - 1]
        if not any(reached[c] for c in users + [r]):
            continue
        if zlib.crc32(memoryview(a).cast("B")) != crc:
            kind = ("a leaf tensor's value" if r >= 0 and tape.op[r] == LEAF else
                    "a constant operand" if r >= 0 and tape.op[r] == CONST else
                    f"the output of {_name(tape, r)}" if r >= 0 else "a value")
            raise RuntimeError(
                f"{kind} saved for the gradient (shape {a.shape}, record {r}) was changed "
                "after it was "
                "recorded -- through a NumPy view of it taken before the graph, or after "
                "its flags.writeable was set back to True. Copy an array before writing "
                "into it while a graph uses it, or record the graph after the write.\n"
                + (_describe(tape, r) if r >= 0 else ""))


class detect_anomaly:
    """Context manager and decorator: find the operation that made a gradient
    non-finite.

    While it is on (in this thread), each recorded operation remembers the
    line of user code that made it, and ``backward`` checks the gradients
    every operation's VJP produces: the first NaN or infinity raises a
    RuntimeError naming the operation's node (e.g. ``LogBackward``), that
    line, and the shapes.  Backward runs one record at a time then, so it is
    slower; with anomaly mode off nothing is recorded or checked.

    Parameters
    ----------
    check_nan : bool, default True
        Check gradients.  With False, only the source lines are kept, and
        they are added to errors raised inside a backward (custom
        functions' ``backward``, hooks).

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> x = tg.tensor([0.0, 1.0], requires_grad=True)
    >>> with tg.detect_anomaly(), np.errstate(divide="ignore"):
    ...     y = tg.log(x).sum()
    ...     y.backward()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    RuntimeError: Function 'LogBackward' returned inf values in the gradient of its input 0 ...
    >>> x.grad is None
    True
    """

    def __init__(self, check_nan=True):
        self.check_nan = bool(check_nan)

    def __enter__(self):
        tape = current()
        self._prev = tape.__class__
        tape.__class__ = AnomalyTape if self.check_nan else TracingTape
        tape._update_room()
        return self

    def __exit__(self, *exc):
        tape = current()
        tape.__class__ = self._prev
        tape._update_room()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(self.check_nan):
                return fn(*args, **kwargs)
        return wrapper


def is_anomaly_enabled():
    """Whether anomaly detection is on in this thread.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.is_anomaly_enabled()
    False
    """
    return isinstance(current(), TracingTape)


def _name(tape, r):
    from .graph import Node
    return Node(tape.tok, r).name()


def _shape(tape, r):
    w = tape.where.get(r)
    return str(w[3]) if w else f"({tape.size[r]} elements)"


def _source(tape, r):
    w = tape.where.get(r)
    if w is None:
        return ("  (recorded outside tg.detect_anomaly(): record the forward pass "
                "inside it to see the line)")
    path, line, func, _ = w
    if path is None:
        return "  (no source line: recorded from tapegrad's own code)"
    text = linecache.getline(path, line).strip()
    return f'  File "{path}", line {line}, in {func}' + (f"\n    {text}" if text else "")


def _describe(tape, r):
    a0, a1 = tape.arg0[r], tape.arg0[r + 1] if r + 1 < tape.n else tape.na
    ins = ", ".join(_shape(tape, int(p)) for p in tape.args[a0:a1])
    return (f"The operation was recorded at\n{_source(tape, r)}\n"
            f"Its output has shape {_shape(tape, r)}; its inputs have shapes {ins}.")


def _note(e, tape, r):
    """Tell an error raised in record r's VJP where r came from."""
    if hasattr(e, "add_note") and tape.where:
        e.add_note(f"[tg.detect_anomaly] raised in the backward of {_name(tape, r)}. "
                   + _describe(tape, r))


def note(e, tape, r):
    """Tell an error raised at record r in a backward (its VJP, a hook on
    it) where r came from."""
    _note(e, tape, r)


def checked_run(tape, adj, T, start, stop, run):
    """The reverse sweep over records ``start .. stop+1`` one record at a
    time, checking what each VJP wrote.

    ``run(tape, adj, T, start, stop)`` sweeps a span (see autograd); the
    walk (autograd.walk) stops at hooked records as in a normal backward,
    and calls :func:`check_saved` once the sweep is over.
    """
    reached = adj.reached
    op, arg0, args = tape.op, tape.arg0, tape.args
    check = tape.check_nan
    for r in range(start, stop, -1):
        if not reached[r]:
            continue
        try:
            run(tape, adj, T, r, r - 1)
        except Exception as e:
            _note(e, tape, r)
            raise
        if not check:
            continue
        for j in range(arg0[r], arg0[r + 1]):
            p = int(args[j])
            if not reached[p] or op[p] == CONST:
                continue
            g = adj[p]
            if not np.isfinite(g).all():
                what = "nan" if np.isnan(g).any() else "inf"
                raise RuntimeError(
                    f"Function '{_name(tape, r)}' returned {what} values in the gradient "
                    f"of its input {j - arg0[r]} (shape {_shape(tape, p)}).\n"
                    + _describe(tape, r))
