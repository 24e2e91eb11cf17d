"""The last branch of every op switch, and the check that no code reaches it.

Every per-op switch in the kernels ends in ``unhandled(sub)`` rather than in
a default that looks like an answer (a zero derivative, a replayed ``rint``).
Compiled, it is NaN: no branch, no exception path in the hot loops, and a
NaN gradient is what ``detect_anomaly`` reports.  Run as plain Python it
raises :class:`UnhandledCode`: ``kernels/coverage.py: check(code)`` runs the
scalar switches that the op's kind must pass through as Python (cheap: no
compilation) when the registry adds the code, so an op that some switch does
not know fails at import, before any sweep could give it a wrong number.

The array kernels whose sub codes form a small closed family (reductions,
scans, user ops) fill their outputs with NaN for an unknown sub; ``check``
holds those families to the subs listed in ``FAMILIES``, and the test suite
runs every registered code through every sweep against an oracle.
"""

from . import codes as C


class UnhandledCode(LookupError):
    """An op code that some kernel switch has no branch for."""


def unhandled(sub):
    """The fallback of an op switch: raises as Python, NaN compiled."""
    raise UnhandledCode(sub)

# compiled, it is NaN: the overload is in kernels/_numba.py


#: kinds whose kernels switch on a closed set of subs (kernels/structural.py,
#: tangents.py, replay.py, user.py; tapegrad/transforms/second/rules.py); their last branch
#: writes NaN
FAMILIES = {
    C.K_REDUCE: (C.SUM, C.MEAN, C.MAX, C.MIN, C.PROD, C.LOGSUMEXP, C.SOFTMAX,
                 C.LOG_SOFTMAX),
    C.K_SCAN: (C.CUMSUM, C.CUMPROD),
    C.K_USER: (C.USER_UNARY, C.USER_BINARY),
}

#: every kind the sweeps dispatch on
KINDS = (C.K_NONE, C.K_UNARY, C.K_SCALAR, C.K_NARY, C.K_REDUCE, C.K_GATHER, C.K_CONCAT,
         C.K_HOST, C.K_SCAN, C.K_USER)
