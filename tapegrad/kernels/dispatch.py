"""VJP families compiled on first use, called by the sweeps through a table.

A sweep that called every family's kernel directly would be compiled with all
of them, whether a program uses them or not (and LLVM would optimise each
family again inside the sweep's module).  Instead each family has a C entry
point, ``int32 f(tape*, r, sub)``, compiled -- or loaded from the cache -- the
first time a sweep meets a record of that kind; the sweeps read its address
from :data:`TABLE` (indexed by :func:`slot`) and call it through a pointer,
as the user-op kernel calls users' derivatives (kernels/user.py).  A zero
entry makes the sweep return ``MISSING - r`` so that Python compiles the
family and resumes the sweep at that record (nothing of it has run yet):
:meth:`Families.run`.  The other compiled loops (replay, forward mode, the
block sweep) call their own families the same way.

The tape tuple crosses the call by address, borrowed (kernels/_numba.py
defines the intrinsics that call an entry and load the tape back).
An entry returns 1; 0 means its kernel raised (Numba's C wrapper has printed
the exception) and the sweep stops, returning ``FAILED - r``.
"""
import numpy as np

from . import codes as C
from ._jit import cached, cached_bytes, compile_lock, deferred, entry, inline, notice
from ._views import OP, ARG0, SIZE, ARGS  # tape fields
from .interpret import TABLES, loaded, python_copy, run_as_python

#: the entries' signatures, by their names in kernels/_numba.py:
#: ``int32 f(tape*, r, sub)``, with one more integer, and with a context
SIG, SIG_EXTRA, SIG_CTX = "SIG", "SIG_EXTRA", "SIG_CTX"

#: ``call_entry(addr, T, r, sub)`` calls ``(*addr)(&T, r, sub)``;
#: ``call_entry_extra`` passes one more integer, ``call_entry_ctx`` the
#: block context by address too; an entry gets the tape back with
#: ``load_tape(ptr)`` (``load_tape32`` in a float32 sweep;
#: ``load_block_ctx(ptr)``), its arrays borrowed
call_entry = deferred("call_entry")
call_entry_extra = deferred("call_entry_extra")
call_entry_ctx = deferred("call_entry_ctx")
load_tape = deferred("load_tape")
load_tape32 = deferred("load_tape32")
load_block_ctx = deferred("load_block_ctx")

#: sweep returns: ``MISSING - r`` (record r's family is not compiled yet) and
#: ``FAILED - r`` (its kernel raised); far below the sweeps' other returns
#: (-1, ``-2 - r``) for any tape that fits in memory
MISSING = -(1 << 50)
FAILED = -(1 << 60)

#: slots of their own in the VJP table (:func:`slot`): sum and mean (over
#: every element, and over some axes), and binary ops that broadcast
SUM_SLOT = 15
BROADCAST_SLOT = 14
FULL_SUM_SLOT = 13


class Families:
    """A table of C entry points, one per kernel family, each compiled (or
    loaded from the cache) the first time a compiled loop asks for it.

    ``table`` (passed to the loop) holds each slot's entry address, 0 while
    it is not compiled; ``families`` maps a slot to ``(entry source, what
    the one-line notice calls it)``; ``sig`` is the entries' signature;
    ``slot(T, r, kind, sub)`` (compiled, inlined into the loop) gives the
    slot of record r."""

    def __init__(self, module, sig, families, slot):
        self.module, self.sig, self.families, self.slot = module, sig, families, slot
        self.table = np.zeros(16, np.int64)
        self.entries = {}   # slot -> CFunc (keeps the machine code alive)
        self._python = None
        TABLES[id(self.table)] = self

    def python_table(self):
        """The interpreted tier's table (kernels/interpret.py): each slot's
        entry as a Python function, 0 where there is none."""
        if self._python is None:
            t = [0] * self.table.size
            for k, (fn, _what) in self.families.items():
                t[k] = python_copy(fn)
            self._python = t
        return self._python

    def ensure(self, slot):
        """Put slot's entry address in the table, compiling it if needed."""
        if self.table[slot]:
            return
        with compile_lock:
            if self.table[slot]:
                return
            try:
                fn, what = self.families[slot]
            except KeyError:
                raise RuntimeError(f"no compiled kernel family for slot {slot} in "
                                   f"kernels/{self.module}.py") from None
            if not cached(self.name_of(slot)):
                notice(what)
            cf = entry(fn, self.sig)
            loaded()
            self.entries[slot] = cf
            self.table[slot] = cf.address

    def run(self, kernel, args, at):
        """Run ``kernel(*args)``, a compiled loop over the records of the tape
        ``args[0]`` from ``args[at]`` that reads this table (its last
        argument), until it returns anything but :data:`MISSING` - r (then
        compile record r's family and resume at r, or run the rest of the
        loop interpreted while the family is not worth compiling yet:
        kernels/interpret.py) or :data:`FAILED` - r (its kernel raised:
        raise here)."""
        args = list(args)
        T = args[0]
        s = kernel(*args)
        while True:
            if s > MISSING // 2:
                return s
            if s < FAILED // 2:
                r = FAILED - s
                raise RuntimeError(f"the compiled kernel of record {r} (op code "
                                   f"{int(T[OP][r])}) raised an exception (printed above); "
                                   "no result was written")
            r = args[at] = MISSING - s
            code = int(T[OP][r])
            k = self.slot.py_func(T, r, code >> C.SHIFT, code & C.MASK)
            # not compiled yet: the rest of the loop as Python, with the
            # Python table, while that family is not worth compiling
            done, s = run_as_python((id(self), k), lambda: cached_bytes(self.name_of(k)), kernel, args,
                                    name=self.families[k][0])
            if not done:
                self.ensure(k)
                s = kernel(*args)

    def name_of(self, slot):
        """The cache name of slot's entry (``module.function``)."""
        return f"{self.module}.{self.families[slot][0].__name__}"

    def warm(self):
        """``(what, compile it)`` for every family (``python -m tapegrad warm``)."""
        return [(what, (lambda k=k: self.ensure(k))) for k, (_fn, what) in self.families.items()]


@inline
def slot(T, r, kind, sub):
    """Index in :data:`TABLE` of the family that runs record ``r`` (of
    ``kind, sub``): a binary op whose operands both have the output's size
    runs in the compact same-shape family, one that broadcasts (or
    ``where``) in the odometer family."""
    if kind == C.K_REDUCE and (sub == C.SUM or sub == C.MEAN):
        return FULL_SUM_SLOT if T[SIZE][r] == 1 else SUM_SLOT
    if kind == C.K_NARY:
        size, a0, args = T[SIZE], T[ARG0][r], T[ARGS]
        n = size[r]
        if sub == C.WHERE or size[args[a0]] != n or size[args[a0 + 1]] != n:
            return BROADCAST_SLOT
    return kind


# -- the entries: one per family, each a one-line call of its kernel ----------------
# Written out one by one, not made by a factory: Numba caches a function under
# its qualified name and source line, so entries made by one factory would
# share a cache slot and could load each other's machine code.  The other
# Families tables (replay.py, tangents.py, hvp.py) follow the same rule.
from .elementwise_vjp import broadcast_vjp, nary_vjp, scalar_vjp, unary_vjp  # noqa: E402
from .structural import (concat_vjp, full_sum_vjp, gather_vjp, reduce_vjp,  # noqa: E402
                         scan_vjp, sum_vjp)
from .small_matmul import mm_vjp  # noqa: E402
from .user import user_vjp  # noqa: E402


def _unary(tp, r, sub):
    unary_vjp(load_tape(tp), r, sub)
    return 1


def _scalar(tp, r, sub):
    scalar_vjp(load_tape(tp), r, sub)
    return 1


def _nary(tp, r, sub):
    nary_vjp(load_tape(tp), r, sub)
    return 1


def _broadcast(tp, r, sub):
    broadcast_vjp(load_tape(tp), r, sub)
    return 1


def _reduce(tp, r, sub):
    reduce_vjp(load_tape(tp), r, sub)
    return 1


def _full_sum(tp, r, sub):
    full_sum_vjp(load_tape(tp), r, sub)
    return 1


def _sum(tp, r, sub):
    sum_vjp(load_tape(tp), r, sub)
    return 1


def _gather(tp, r, sub):
    gather_vjp(load_tape(tp), r, sub)
    return 1


def _concat(tp, r, sub):
    concat_vjp(load_tape(tp), r, sub)
    return 1


def _scan(tp, r, sub):
    scan_vjp(load_tape(tp), r, sub)
    return 1


def _user(tp, r, sub):
    user_vjp(load_tape(tp), r, sub)
    return 1


def _matmul(tp, r, sub):
    # a small matmul of a trace (the sweep's ``mmk``): sub is its inner
    # dimension k, not the op's sub code
    mm_vjp(load_tape(tp), r, sub)
    return 1


#: the VJP families of the sweeps, by slot
VJP = Families("dispatch", SIG, {
    C.K_UNARY: (_unary, "unary elementwise VJPs"),
    C.K_SCALAR: (_scalar, "elementwise-with-constant VJPs"),
    C.K_NARY: (_nary, "binary elementwise VJPs"),
    BROADCAST_SLOT: (_broadcast, "broadcasting binary VJPs"),
    FULL_SUM_SLOT: (_full_sum, "full sum/mean VJPs"),
    SUM_SLOT: (_sum, "sum/mean-over-axes VJPs"),
    C.K_REDUCE: (_reduce, "reduction VJPs"),
    C.K_GATHER: (_gather, "indexing/shape VJPs"),
    C.K_CONCAT: (_concat, "concatenation VJPs"),
    C.K_SCAN: (_scan, "cumulative-op VJPs"),
    C.K_USER: (_user, "user-op VJPs"),
    C.K_HOST: (_matmul, "small traced matmul VJPs"),
}, slot)
TABLE, FAMILIES, _ENTRIES = VJP.table, VJP.families, VJP.entries

# -- the same entries for float32 sweeps (kernels/_views.py: float_dtype) ------------
# Each family kernel compiles a second time for the float32 tuple, when a
# float32 graph first reaches it; float64 programs never compile these.

def _unary32(tp, r, sub):
    unary_vjp(load_tape32(tp), r, sub)
    return 1


def _scalar32(tp, r, sub):
    scalar_vjp(load_tape32(tp), r, sub)
    return 1


def _nary32(tp, r, sub):
    nary_vjp(load_tape32(tp), r, sub)
    return 1


def _broadcast32(tp, r, sub):
    broadcast_vjp(load_tape32(tp), r, sub)
    return 1


def _reduce32(tp, r, sub):
    reduce_vjp(load_tape32(tp), r, sub)
    return 1


def _full_sum32(tp, r, sub):
    full_sum_vjp(load_tape32(tp), r, sub)
    return 1


def _sum32(tp, r, sub):
    sum_vjp(load_tape32(tp), r, sub)
    return 1


def _gather32(tp, r, sub):
    gather_vjp(load_tape32(tp), r, sub)
    return 1


def _concat32(tp, r, sub):
    concat_vjp(load_tape32(tp), r, sub)
    return 1


def _scan32(tp, r, sub):
    scan_vjp(load_tape32(tp), r, sub)
    return 1


def _user32(tp, r, sub):
    user_vjp(load_tape32(tp), r, sub)
    return 1


def _matmul32(tp, r, sub):
    mm_vjp(load_tape32(tp), r, sub)
    return 1


#: the VJP families of float32 sweeps, by slot (the slots of :data:`VJP`)
VJP32 = Families("dispatch", SIG, {
    C.K_UNARY: (_unary32, "unary elementwise VJPs (float32)"),
    C.K_SCALAR: (_scalar32, "elementwise-with-constant VJPs (float32)"),
    C.K_NARY: (_nary32, "binary elementwise VJPs (float32)"),
    BROADCAST_SLOT: (_broadcast32, "broadcasting binary VJPs (float32)"),
    FULL_SUM_SLOT: (_full_sum32, "full sum/mean VJPs (float32)"),
    SUM_SLOT: (_sum32, "sum/mean-over-axes VJPs (float32)"),
    C.K_REDUCE: (_reduce32, "reduction VJPs (float32)"),
    C.K_GATHER: (_gather32, "indexing/shape VJPs (float32)"),
    C.K_CONCAT: (_concat32, "concatenation VJPs (float32)"),
    C.K_SCAN: (_scan32, "cumulative-op VJPs (float32)"),
    C.K_USER: (_user32, "user-op VJPs (float32)"),
    C.K_HOST: (_matmul32, "small traced matmul VJPs (float32)"),
}, slot)
