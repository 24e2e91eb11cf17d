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

``Tape`` is one class in three modules: this one records (the arrays, their
growth, ``record``/``record1``, kept values, constants, the tuple the kernels
read) and holds the epoch token and ``current()``; its base classes add
liveness -- freeing after a backward, compaction, resets
(:mod:`tapegrad.core.liveness`) -- and in-place writes -- stale records and
origins (:mod:`tapegrad.core.writes`).
"""
import sys
import threading
import weakref

import numpy as np

from ..kernels import codes as C
from ..kernels._views import SMALL
from ..kernels.optable import READS_INPUTS, READS_OUTPUT
from .liveness import TOKEN_HOLDERS, _Liveness, _writeable  # noqa: F401 (re-exported)
from .writes import Flipped, SavedIndex, Stale, _Writes

_INT = np.int64
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_FIRST_OP = 1 << C.SHIFT  # op codes below this are K_NONE records (no VJP)
_getrefcount = sys.getrefcount
_weakref = weakref.ref
_get_ident = threading.get_ident


def masked(x):
    """Whether x is a NumPy masked array (np.ma is imported only by programs
    that use it: until then nothing can be one)."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(x, ma.MaskedArray)


def masked_operand(m):
    """The TypeError for a masked array ``m`` that meets a tensor being
    differentiated: the recorded gradient takes every element, masked ones
    included, while the value may follow the mask (NumPy's masked
    arithmetic) -- refused rather than silently wrong."""
    n = int(np.count_nonzero(np.ma.getmaskarray(m)))
    return TypeError(
        f"a NumPy masked array (shape {np.shape(m)}, {n} of {np.size(m)} elements masked) "
        "is an operand of an op on a tensor that requires grad: the gradient tapegrad "
        "records ignores the mask (the value may follow it), so the two would disagree. Say "
        "what the masked elements are: np.ma.filled(m, fill) gives a plain array (e.g. "
        "x * np.ma.filled(m, 0.0)), or use m.data and apply the mask explicitly, "
        "tg.where(m.mask, fill, f(x, m.data))")


def matrix_operand(m):
    """The TypeError for an ``np.matrix`` operand of a tensor op: a matrix
    keeps two dimensions through every reduction and index, and its ``*``
    is a matrix product, so neither the values nor the gradients tapegrad
    records would follow it -- refused, naming the conversion."""
    return TypeError(
        f"tapegrad does not take np.matrix operands (got a matrix of shape {np.shape(m)}): "
        "np.matrix keeps two dimensions through reductions and indexing and its * is a "
        "matrix product, so tapegrad's values and gradients would not follow it. Convert it "
        "to an array first, np.asarray(m) (and write matrix products as a @ b)")


def odd_operand(x):
    """The TypeError for an array subclass tapegrad refuses as an operand
    (``np.matrix``, a masked array), or None for any other value."""
    if isinstance(x, np.matrix):
        return matrix_operand(x)
    if masked(x):
        return masked_operand(x)
    return None


class Epoch:
    """Token held by the tensors and nodes of one tape epoch.

    A tensor belongs to its tape's live epoch when ``tok.tape is tape``: the
    tape holds the token only weakly (``Tape.tok`` makes it on first use), so
    the moment the epoch's last tensor or node is dropped -- ``del loss`` --
    the token dies and the arrays its records made read-only get their write
    flags back (``Tape._epoch_ended``), with no op needed to notice.  A reset
    while tensors still hold the token (every record freed by backward)
    detaches it: ``tape`` becomes None.
    """

    __slots__ = ("tape", "__weakref__")

    def __init__(self, tape):
        self.tape = tape


class Walking:
    """``with tape.walking():`` -- a walk over the tape's records that runs
    user code (a ``tg.Function``'s backward or jvp, a hook) which may record
    ops.  It holds the epoch token meanwhile, so that neither a reset nor a
    compaction (which renumbers records) happens under the walk, and lets it
    go on the way out, also on an error whose traceback is kept."""

    __slots__ = ("tok", "tape")

    def __init__(self, tape):
        self.tape = tape
        self.tok = None

    def __enter__(self):
        self.tok = self.tape.tok
        return self

    def __exit__(self, *exc):
        self.tok = None
        return False


class Tape(_Liveness, _Writes):
    """Flat record arrays plus the bookkeeping for one thread's graphs."""

    #: first tape size at which ``compact`` looks for unreachable records
    CHECK_RECORDS = 4096
    #: ... or once the values kept by reference reach this many bytes (twice
    #: what the last look kept): graphs dropped without a backward, beside one
    #: that keeps the tape alive, would otherwise hold their large values
    #: until the record count doubled
    CHECK_BYTES = 64 << 20

    # slots: the recording fast paths read a dozen attributes per op
    __slots__ = ("_enabled", "op", "arg0", "size", "ip0", "fp", "v1", "rix", "freed", "args", "ip",
                 "vals", "refs", "leaves", "host", "flipped", "scratch", "check_at", "n",
                 "na", "ni", "nv", "all_freed", "tok_hold", "tok_ref", "base", "released", "owner", "lkey", "room", "hooks",
                 "where", "stale", "consts", "sums", "aliases", "voff", "n_none", "n_freed",
                 "spent", "n_spent",
                 "ptrs", "nptrs", "graph", "wstale", "w_op", "w_arg0", "w_args", "w_ip0", "w_ip",
                 "w_v1", "w_fp", "w_size", "w_voff", "saved", "ref_rec", "nheld", "zeroed",
                 "kept_bytes", "check_bytes", "f32", "held32", "scratch32", "max_size", "exp_memo",
                 "quick", "__weakref__")

    #: anomaly mode (tapegrad.engine.anomaly.AnomalyTape) checks every adjoint
    check_nan = False
    #: large float32 outputs are marked (``f32``) and kept as float32
    #: (a trace's tape keeps float64 values: its replay computes in float64)
    keeps_float32 = True
    #: a tapegrad.tracing.tape.TraceTape: comparisons record and item()/bool() guard
    tracing = False

    def __init__(self, capacity=1024):
        self._enabled = True       # grad mode of this thread
        self.wstale = True         # the w_ memoryviews are built by _update_room
        self._alloc(capacity)
        self.args = np.zeros(4 * capacity, _INT)
        self.ip = np.zeros(4 * capacity, _INT)
        self.vals = np.zeros(capacity, np.float64)
        self.refs = []             # large values kept for VJPs (rix[r] indexes it)
        self.ref_rec = {}          # refs index -> the record that kept it (Tape.keep)
        self.nheld = {}            # id(array) -> how many refs hold it (Tape.keep)
        self.ptrs = np.zeros(64, _INT)  # their addresses (0: released), for the kernels
        self.nptrs = 0             # refs whose address ptrs holds (see arrays)
        self.leaves = {}           # LEAF record -> Tensor
        self.host = {}             # host record -> what its VJP needs
        self.hooks = {}            # record -> its tensor's hooks (tapegrad.engine.hooks)
        self.where = {}            # record -> source line, only in anomaly mode
        self.flipped = Flipped(first=self._watch)  # arrays made read-only, to restore
        self.owner = _get_ident()  # the thread whose ops record here
        self.tok_hold = None       # the live epoch's token (see Tape.tok)
        self.tok_ref = None        # ... or a weak reference to it
        self.base = 0
        # record -> what was written in place after it saved it; and when it
        # was marked (see Stale, origin)
        self.stale = Stale(self)
        self.aliases = set()       # basic-index records: views of their parent's memory
        self.consts = []           # (array, CONST record) of small copied operands
        self.saved = SavedIndex()  # array -> records that saved it, for in-place writes
        self.sums = []             # (array, checksum) of kept values, in anomaly mode
        self.scratch = None        # adjoint arena, reused across backwards
        self.scratch32 = None      # the same for float32 sweeps
        self.graph = None          # the last graph search's key and result (autograd.Adjoints)
        self.quick = None          # the addresses a small backward reads (engine/backward.py)
        self.zeroed = {}           # dtype -> an all-zero scratch array (Tape.zeros)
        self.kept_bytes = 0        # bytes of the values in refs (Tape.keep)
        self.held32 = 0            # float32 values in refs (see arrays)
        self.check_bytes = self.CHECK_BYTES  # kept bytes from which to try compact()
        self.check_at = self.CHECK_RECORDS  # when to try compact(); kept
        # across epochs, so a tape that regularly grows large is not scanned
        self._new_epoch()

    # The live epoch's token.  While no record of the epoch made an array
    # read-only, the tape holds it (``tok_hold``) and current() finds the
    # epoch over by its reference count, as cheap as an attribute; from the
    # first such array on (``_watch``) it holds it only weakly (``tok_ref``),
    # so that the token's death -- the moment its last tensor or node is
    # dropped -- gives the arrays their write flags back (``_epoch_ended``).
    @property
    def tok(self):
        """The live epoch's token, made on first use: ops hand it to the
        tensors they record (compare with ``tok.tape is tape``, or
        :meth:`is_live`, which make none)."""
        tok = self.tok_hold
        if tok is not None:
            return tok
        ref = self.tok_ref
        if ref is not None:
            tok = ref()
            return tok if tok is not None else self._token_again()
        tok = Epoch(self)          # the epoch's first token
        if self.flipped.arrays:
            self.tok_ref = _weakref(tok, self._epoch_ended)
        else:
            self.tok_hold = tok
            self.base = _getrefcount(tok) - 1   # the tape's own reference and the call's
        return tok

    def _token_again(self):
        # the epoch ended inside an op (a collection dropped its last tensor)
        # and the op goes on recording on its records: a new token for them,
        # and they read their arrays again
        tok = Epoch(self)
        self.tok_ref = _weakref(tok, self._epoch_ended)
        if self.released:
            self.released = False
            for a in self.flipped:
                a.flags.writeable = False
        return tok

    def live_tok(self):
        """The live epoch's token, or None when the epoch has none or is over
        (makes none)."""
        tok = self.tok_hold
        if tok is not None:
            return tok if _getrefcount(tok) - 1 > self.base else None
        ref = self.tok_ref
        return ref() if ref is not None else None

    def epoch_over(self):
        """Whether no tensor or node holds the live epoch's token any more."""
        tok = self.tok_hold
        if tok is not None:
            return _getrefcount(tok) - 1 <= self.base
        ref = self.tok_ref
        return ref is None or ref() is None

    def is_live(self, tok):
        """Whether ``tok`` (a tensor's or node's ``_tok``) is this tape's live
        epoch."""
        return tok is not None and tok.tape is self

    def _watch(self):
        # the epoch makes its first array read-only: from now on the tape
        # holds its token weakly, and its death calls _epoch_ended (graphs
        # that copy what they save -- small values -- never pay for this)
        tok = self.tok_hold
        if tok is not None:
            self.tok_ref = _weakref(tok, self._epoch_ended)
            self.tok_hold = None

    def _epoch_ended(self, ref):
        # the weak reference's callback: the epoch's last tensor or node is
        # gone, so no graph can read its records; the next current() resets
        # the tape.  Dropped on another thread (which must not touch this
        # tape while its own thread may be recording), the flags come back
        # with that reset instead.
        if ref is not self.tok_ref or _get_ident() != self.owner:
            return
        self.released = True
        for a in self.flipped:
            _writeable(a)

    def _alloc(self, cap):
        self.op = np.zeros(cap, _INT)
        self.arg0 = np.zeros(cap + 1, _INT)
        self.size = np.ones(cap, _INT)  # one-element records need not write it
        self.ip0 = np.zeros(cap, _INT)
        self.fp = np.zeros(cap, np.float64)
        self.v1 = np.zeros(cap, np.float64)
        self.rix = np.full(cap, -1, _INT)  # index in refs of a kept large value
        self.freed = np.zeros(cap, np.bool_)
        # op records a backward ran that saved nothing (see tape_liveness.after_backward)
        self.spent = np.zeros(cap, np.bool_)
        self.voff = np.zeros(cap, _INT)  # where a mid-size value starts in vals
        # a large (> SMALL elements) float32 output: its kept value stays
        # float32, and a graph of only such records sweeps in float32
        self.f32 = np.zeros(cap, np.bool_)

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
        self.n_spent = 0          # op records spent (see after_backward)
        # the largest value recorded this epoch (an upper bound after a
        # compaction): a backward with none large enough to fuse skips the
        # look for runs (fused_backward.run)
        self.max_size = 0
        self._update_room()
        # the next epoch's token is made on first use; a token still held is
        # detached: its tensors belong to no live epoch (its callback, should
        # it run now, finds it is no longer the tape's)
        old = self.tok_hold
        self.tok_hold = None
        ref = self.tok_ref
        if ref is not None:
            self.tok_ref = None    # the old token's callback does nothing now
            old = ref()
        if old is not None:
            old.tape = None
        self.released = False
        self.lkey = object()       # identifies the epoch to leaves, uncounted
        self.graph = None
        self.exp_memo = None       # the last large logsumexp's exponentials (ops/exp_memo.py)

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
        self._unpublish()
        cap = 2 * len(self.op)
        grown = {}
        for k in ("arg0", "size", "ip0", "fp", "v1", "rix", "freed", "spent", "voff", "f32",
                  "op"):
            a = getattr(self, k)
            b = np.full(cap + (k == "arg0"), {"size": 1, "rix": -1}.get(k, 0), a.dtype)
            b[:len(a)] = a
            grown[k] = b
        for k, b in grown.items():
            setattr(self, k, b)
        self._update_room()

    def _grow_args(self, need):
        self._unpublish()
        self.args = self._grown(self.args, need)
        self._update_room()

    def _make_room(self, nargs):
        if self.n + 2 > len(self.op):
            self._grow_records()
        if self.na + nargs > len(self.args):
            self._grow_args(self.na + nargs)
        self._update_room()

    def reserve(self, records, ints=0, parents=2):
        """Whether ``records`` more records (``parents`` parents each) and
        ``ints`` integer parameters fit without growing, growing the arrays
        if they must: the check of the fast paths that write records of more
        than one parent or with integer parameters (``room`` is a
        conservative bound that only a growth renews).  False while ``room``
        is -1 (no_grad)."""
        if self.n + records > self.room or parents > 2:
            if self.room < 0:
                return False
            while self.n + records + 2 > len(self.op):
                self._grow_records()
            if self.na + records * parents > len(self.args):
                self._grow_args(self.na + records * parents)
            self._update_room()
        if self.ni + ints > len(self.ip):
            self._grow_ip(self.ni + ints)
        return True

    def _update_room(self):
        """``room``: records the hot paths may append (with up to 2 parents each)
        before they must check capacities again; -1 while grad mode is off, so
        the hot paths need one comparison for both."""
        if self.wstale:
            self._writers()
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
        self._unpublish()
        self.ip = self._grown(self.ip, need)
        self._update_room()

    # The fast paths write single elements of the record arrays through
    # memoryviews of them (``w_op`` for ``op``, ...): an item assignment costs
    # about two thirds of an ndarray's, and an op writes five or more.  They
    # write only while ``r < room``, and ``room`` is only set (_update_room)
    # once the views are those of the current arrays, so a growth first takes
    # room away: a KeyboardInterrupt inside one leaves the fast paths off
    # (they give way to record/record1, whose _make_room renews both) rather
    # than writing into an array the tape no longer holds.
    def _unpublish(self):
        self.room = -1
        self.wstale = True
        self.quick = None  # its addresses are those of the arrays being replaced

    def _writers(self):
        for k in _WRITTEN:
            setattr(self, "w_" + k, memoryview(getattr(self, k)))
        self.wstale = False

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

    def record_leaf(self, value):
        """``record(LEAF, (), value)``: a leaf's record, written as the ops'
        fast paths write theirs while ``room`` allows (see ``_binary_op`` in
        ops/elementwise.py), on a plain tape only."""
        r = self.n
        # a subclass's record (a trace's: guards, leaf bookkeeping) must see it
        if r >= self.room or type(value) is not np.ndarray or type(self) is not Tape:
            return self.record(_LEAF, (), value)
        na = self.na
        try:  # free of cost unless raised (Ctrl-C): see abandon
            self.w_op[r] = _LEAF
            self.w_arg0[r] = na
            if value.ndim:
                self.put(r, value, None)
            else:
                self.w_v1[r] = value  # size is 1 by default
            self.n = r + 1
        except BaseException:
            self.abandon(r, na)
            raise
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
        self.f32[r] = False
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
        else:
            if size > self.max_size:
                self.max_size = size
            if value.dtype == _F32 and self.keeps_float32:
                self.f32[r] = True
            if READS_OUTPUT[self.op[r]]:
                self.keep(r, value)
        if inputs is not None and READS_INPUTS[self.op[r]]:
            a0 = self.arg0[r]
            for j, x in enumerate(inputs):
                p = self.args[a0 + j]
                if self.size[p] > SMALL and self.rix[p] < 0:
                    self.keep(p, x)

    def put(self, r, data, inputs):
        """``_value`` for an array result of an elementwise fast path, whose
        operands have its size or one element: when it fits the arena it goes
        there without the look at the operands (none of at most SMALL
        elements is kept by reference), else through ``_value``."""
        m = data.size
        nv = self.nv
        if 1 < m <= SMALL and nv + m <= len(self.vals):
            self.w_size[r] = m
            self.vals[nv:nv + m] = data if data.ndim == 1 else data.ravel()
            self.w_voff[r] = nv
            self.nv = nv + m
        else:
            self._value(r, data, inputs)

    def keep(self, r, value):
        """Keep record r's large value for the sweep: float32 if the record's
        output is (``f32``), else float64."""
        a = self._hold(np.asarray(value), _F32 if self.f32[r] else _F64)
        k = self.rix[r] = len(self.refs)
        self.refs.append(a)
        self.ref_rec[k] = r
        self.nheld[id(a)] = self.nheld.get(id(a), 0) + 1
        self.kept_bytes += a.nbytes
        if a.dtype == _F32:
            self.held32 += 1

    def walking(self):
        """A :class:`Walking` context for a walk that runs user code."""
        return Walking(self)

    def _hold(self, value, dtype):
        """Keep a large value for the sweep as a C-contiguous array of
        ``dtype``, without copying when it is one.

        The array is made read-only while the tape holds it, so a gradient is
        never computed from data changed after it was recorded; the flag is
        restored when the tape lets the array go.
        """
        if value.dtype != dtype or not value.flags.c_contiguous:
            return np.ascontiguousarray(value, dtype=dtype)
        if value.flags.writeable:
            value.flags.writeable = False
            self.flipped.append(value)
        return value

    def constant(self, value):
        """Record a non-differentiable operand (an ndarray) as a CONST record.

        A view of someone else's memory is copied: making the view read-only
        would not stop writes through its base.
        """
        if type(value) is not np.ndarray:
            e = odd_operand(value)
            if e is not None:
                raise e
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

    # -- scratch marks of a graph search -----------------------------------------------
    def zeros(self, dtype, n):
        """``n`` zeros of ``dtype``, taken from the tape's scratch when it is
        large enough: a fresh zeroed allocation of a long tape's length costs
        more than the backward of a small graph on it.  Give it back with
        :meth:`rezero` once only the entries ``marked`` were written."""
        a = self.zeroed.pop(np.dtype(dtype), None)
        if a is None or a.size < n:
            a = np.zeros(max(2 * n, 1024), dtype)  # room for the records to come
        return a[:n]

    def rezero(self, a, marked):
        """Clear the entries ``marked`` of an array :meth:`zeros` gave, and keep
        it for the next call."""
        a[marked] = 0
        base = a if a.base is None else a.base
        old = self.zeroed.get(a.dtype)
        if old is None or old.size <= base.size:
            self.zeroed[a.dtype] = base

    # -- the view the kernels take ---------------------------------------------------
    def arrays(self, adj):
        """The tuple of arrays the sweep reads (see kernels/_views.py), with the
        value and adjoint layout ``adj`` (an :class:`~tapegrad.engine.backward.Adjoints`).
        Gathers may be in the strided form (kernels/codes.py: ``STRIDED``),
        which every compiled loop over a tape reads.

        Kept float32 values are addressed as they are for a float32 sweep
        (``adj.float32``); every other loop reads float64, and gets the
        addresses of float64 copies of them, which ``adj`` holds."""
        self.arg0[self.n] = self.na  # closes the last record's parents
        m = self.addresses()
        ptrs = self.ptrs[:m]
        if self.held32 and not getattr(adj, "float32", False):
            ptrs = _float64_ptrs(self.refs, ptrs, adj)
        return (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                self.v1, self.vals, adj.voff, self.rix, ptrs, adj.aptr)


    def addresses(self):
        """Fill ``ptrs`` with the addresses of the kept values (found once per
        value: a backward costs what its graph costs, not what every kept
        value does); returns how many it holds, ``len(refs)``."""
        m, k = len(self.refs), self.nptrs
        if m > k:
            if m > self.ptrs.size:
                self.ptrs = self._grown(self.ptrs, m)
            self.ptrs[k:m] = np.fromiter((0 if a is None else a.ctypes.data
                                          for a in self.refs[k:m]), _INT, m - k)
            self.nptrs = m
        return m


def _float64_ptrs(refs, ptrs, holder):
    """``ptrs`` with each float32 value's address replaced by a float64
    copy's; ``holder.wide`` keeps the copies alive."""
    ptrs = ptrs.copy()
    copies = []
    for k, a in enumerate(refs):
        if a is not None and a.dtype == _F32:
            c = a.astype(_F64)
            copies.append(c)
            ptrs[k] = c.ctypes.data
    holder.wide = copies
    return ptrs


_CONST = C.code(C.K_NONE, C.CONST)
_LEAF = C.code(C.K_NONE, C.LEAF)
#: the record arrays the fast paths write through memoryviews (Tape._writers)
_WRITTEN = ("op", "arg0", "args", "ip0", "ip", "v1", "fp", "size", "voff")


class _NoTape:
    """Stands for "this thread has no tape yet" in the ops' fast paths: no
    token matches its ``tok`` and it has no room."""

    tok = object()
    n = 0
    room = -1


NO_TAPE = _NoTape()
_local = threading.local()


#: ``check_at`` from which a tape is never compacted (a trace's tape, whose
#: record ids must stay; a checkpoint's recomputation inside a backward)
NO_COMPACTION = 1 << 62


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
        if t.all_freed or t.epoch_over():
            t.reset()
        elif t.n >= t.check_at or (t.kept_bytes >= t.check_bytes and t.check_at < NO_COMPACTION):
            t.compact()
    return t
