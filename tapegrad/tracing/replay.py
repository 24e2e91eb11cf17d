"""One trace as arrays, replayed: :class:`_Replay`.

A ``_Replay`` runs the function once on a :class:`~tapegrad.tracing.tape.TraceTape`
and keeps its records, their values, a value and adjoint layout, the
guards and the fused segments.  ``forward`` writes new inputs into the input
records and recomputes every other record in order in compiled code
(:mod:`tapegrad.kernels.replay`), host records with NumPy
(``_HOST_FORWARD``) but for the small matmuls, which the compiled loops
compute and differentiate themselves (kernels/small_matmul.py: plain loops,
so a replayed product agrees with NumPy's BLAS to rounding, not bit for
bit; ``_plan_matmuls`` picks them); ``backward`` runs the ordinary reverse
sweep on the replayed values.  ``arrays(adj)`` gives the tape view the
other sweeps read, so the transforms run on a replay as on a tape.

Fusion: runs of consecutive same-size elementwise records of at least
``FUSE_MIN`` elements go forward and reverse block by block (``CHUNK``
elements of :mod:`tapegrad.kernels.replay`); the intermediates nothing
outside the run reads live in block scratch, and the reverse sweep
recomputes the ones its VJPs read (``_reads``).  Segments of at least
``PAR_MIN`` elements split their blocks among threads (``_split``).

``_LOCK`` is the one lock every traced function holds while it replays.
"""
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..engine.backward import Adjoints
from ..core.index_maps import as_index_records
from ..kernels import codes as C
from ..kernels import optable
from ..kernels import replay as RK
from ..kernels._views import SMALL
from ..kernels.sweep import layout, sweep
from ..core.registry import REGISTRY, RowView
from ..core.tape import _local, _writeable
from ..core.tensor import Tensor, _node, _plain
from .batch import _BatchMethods
from .tape import TraceTape, _signature

# One lock for all traced functions: a replay reuses its trace's value and
# adjoint storage, so two calls of one trace must not interleave.
_LOCK = threading.RLock()

#: host ops the replay computes with NumPy: name -> forward(inputs, host info)
_HOST_FORWARD = RowView("replay", by_name=True)
#: how many leading entries of ``tape.host[r]`` precede the input shapes
_HOST_EXTRA = RowView("host_extra", by_name=True)
#: records whose replay would silently be wrong at new inputs: name -> why
_NOT_REPLAYABLE = RowView("not_replayable", by_name=True)


#: fused segments: records of at least this many elements, at least two op records
FUSE_MIN = 4096
#: fused segments of at least this many elements split their blocks among
#: threads (the kernels release the GIL), as XLA's CPU backend splits a large
#: fused loop
PAR_MIN = 1 << 17
_NCPU = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
    os.cpu_count() or 1)
_POOL = []


def _split(fn, n, threads):
    """``fn(w, lo, hi)`` over ``0 .. n`` in ``threads`` parts cut at block
    boundaries, part 0 on this thread and the rest on a shared pool."""
    w = threads if n >= PAR_MIN else 1
    if w == 1:
        fn(0, 0, n)
        return
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(_NCPU - 1, thread_name_prefix="tapegrad-replay"))
    cuts = [(n * i // w) // RK.CHUNK * RK.CHUNK for i in range(w)] + [n]
    futs = [_POOL[0].submit(fn, i, cuts[i], cuts[i + 1]) for i in range(1, w)]
    fn(0, cuts[0], cuts[1])
    for f in futs:
        f.result()


def _reads(kind, sub):
    """The values elementwise record ``kind, sub``'s VJP reads, a subset of
    "xaby" (kernels/optable.py): a fused segment recomputes only those
    intermediates in its reverse sweep."""
    return optable.row(kind, sub)[0]



class _Replay(_BatchMethods):
    """One trace: its records, value storage and adjoint layout."""

    def __init__(self, f, args):
        _, self.pos, xs = _signature(args)
        tape = TraceTape()
        had = "tape" in _local.__dict__
        prev = _local.__dict__.get("tape")
        _local.tape = tape
        try:
            leaves = [_plain(np.array(x)[()] if x.ndim == 0 else np.array(x)).requires_grad_()
                      for x in xs]
            self.leaf_rec = [_node(tape, t) for t in leaves]
            call = list(args)
            for i, t in zip(self.pos, leaves):
                call[i] = t
            out = f(*call)
        finally:
            if had:
                _local.tape = prev
            else:
                del _local.tape
            for a in tape.flipped:
                _writeable(a)
            tape.flipped.clear()
        self.multi = isinstance(out, (tuple, list))
        outs = list(out) if self.multi else [out]
        if isinstance(out, dict) or any(isinstance(o, (tuple, list, dict)) for o in outs):
            raise NotImplementedError(
                "tapegrad.trace: the function must return a tensor or a flat tuple of "
                f"tensors, got {type(out).__name__}" + (" with nested containers"
                                                        if self.multi else ""))
        if self.multi and not outs:
            raise ValueError("tapegrad.trace: the function returned an empty tuple")
        outs = [o if isinstance(o, Tensor) else _plain(np.asarray(o)) for o in outs]
        self.in_shapes = [x.shape for x in xs]
        self.in_dtypes = [x.dtype for x in xs]
        self.out_shapes = [o.shape for o in outs]
        self.out_dtypes = [o._data.dtype if o._data.dtype.kind == "f" else np.dtype(np.float64)
                           for o in outs]
        self.calls = list(tape.calls)
        self.roots = [tape.traced(o) for o in outs]
        self.const_outs = [None if r is not None else np.array(o._data, np.float64)
                           for r, o in zip(self.roots, outs)]
        # the single output's description (what a tape file holds)
        self.out_shape, self.out_dtype = self.out_shapes[0], self.out_dtypes[0]
        self.root, self.const_out = self.roots[0], self.const_outs[0]
        self.tol = (1e-6, 1e-9) if all(d == np.float64 for d in self.in_dtypes) else (1e-3, 1e-5)
        self._build(tape)
        self.lock = threading.Lock()

    # -- building ---------------------------------------------------------------------
    def _build(self, tape):
        n = self.n = tape.n
        tape.arg0[n] = tape.na
        self.op = tape.op[:n].copy()
        self.arg0 = tape.arg0[:n + 1].copy()
        self.size = tape.size[:n].copy()
        self.ip0 = tape.ip0[:n].copy()
        self.args = tape.args[:max(tape.na, 1)].copy()
        self.ip = tape.ip[:max(tape.ni, 1)].copy()
        # the replay's loops read index maps: strided gathers as Index records
        self.op, self.ip0, self.ip = as_index_records(self.op, self.ip0, self.ip, n, self.ip.size)
        self.fp = tape.fp[:n].copy()
        self.host = dict(tape.host)
        self._check_ops()
        self._allocate()
        self._plan_matmuls()
        self.v1[:] = tape.v1[:n]
        m = min(tape.nv, self.vals.size)
        self.vals[:m] = tape.vals[:m]
        for r, view in zip(np.flatnonzero(self.size > SMALL), self.refs):
            view[:] = np.ravel(tape.refs[tape.rix[r]])
        self.guard = np.zeros(n, np.int64)
        self.goff = np.zeros(n, np.int64)
        self.gvals = np.zeros(1)
        self.segs = []
        self._self_check(tape)
        self._plan_segments()

    def _allocate(self):
        """Value and adjoint storage for the records (op, size, ... set)."""
        n = self.n
        self.voff, aoff, leaf, inner, outer = layout(self.op, self.size, n, SMALL)
        self.v1 = np.zeros(n)
        mid = self.size[(self.size > 1) & (self.size <= SMALL)]
        self.vals = np.zeros(max(int(mid.sum()), 1))
        large = np.flatnonzero(self.size > SMALL)
        boff = np.zeros(large.size, np.int64)
        if large.size:
            boff[1:] = np.cumsum(self.size[large])[:-1]
        self.big = np.zeros(max(int(self.size[large].sum()), 1))
        self.rix = np.full(n, -1, np.int64)
        self.rix[large] = np.arange(large.size)
        self.refs = []
        for k, r in enumerate(large):
            self.refs.append(self.big[boff[k]:boff[k] + self.size[r]])
        self.ptrs = self.big.ctypes.data + 8 * boff
        # inputs may be read in place (see forward): the storage to go back to
        self.own_ptrs, self.own_refs, self.borrowed = self.ptrs.copy(), list(self.refs), []
        self.faddr = np.zeros(n, np.int64)
        from ..ops.custom import USER_OPS
        for r in np.flatnonzero((self.op >> C.SHIFT) == C.K_USER):
            self.faddr[r] = USER_OPS[int(self.ip[self.ip0[r]])].forward_address()
        # adjoints: leaves in a fresh arena per gradient, the rest reused
        self.A = np.empty(max(inner, 1))
        self.L = np.empty(max(outer, 1))
        self.aoff, self.leaf = aoff, leaf
        self.aptr0 = aoff * 8 + np.where(leaf, self.L.ctypes.data, self.A.ctypes.data)
        self.L_refs = sys.getrefcount(self.L) + 1  # + the Adjoints' reference
        self.aptr = self.aptr0.copy()
        self.reached = np.zeros(n, np.bool_)
        self.freed = np.zeros(n, np.bool_)
        # every record, descending: the sweep's order for any span (it starts
        # at the first entry <= start), allocated once rather than per sweep
        self.order = np.arange(n - 1, -1, -1, dtype=np.int64)
        self.adj = Adjoints.__new__(Adjoints)
        self.adj.voff, self.adj.off, self.adj.leaf = self.voff, aoff, leaf
        self.adj.A, self.adj.L, self.adj.size = self.A, self.L, self.size
        self.adj.aptr, self.adj.reached = self.aptr, self.reached
        self.T = (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                  self.v1, self.vals, self.voff, self.rix, self.ptrs, self.aptr, self.reached)

    def _plan_segments(self):
        """Runs of consecutive same-size elementwise records that replay fuses
        (kernels/replay.py ``seg_forward``/``seg_backward``): per run
        ``(r0, r1, n, slot, need)``, where ``slot`` gives the block-scratch row
        of each record that nothing outside the run reads (-1: it has storage),
        and ``need`` marks those the reverse sweep must recompute."""
        n = self.n
        kind, sub = self.op >> C.SHIFT, self.op & C.MASK
        a0 = self.arg0
        fusable = np.zeros(n, np.bool_)
        passive = (kind == C.K_NONE) & (sub <= C.CONST)  # leaves and constants
        for r in np.flatnonzero(((kind == C.K_UNARY) | (kind == C.K_SCALAR)
                                 | ((kind == C.K_NARY) & (sub != C.WHERE)))
                                & (self.size >= FUSE_MIN) & (self.guard == 0)):
            ps = self.args[a0[r]:a0[r + 1]]
            fusable[r] = bool(np.all(self.size[ps] == self.size[r]))
        runs, r = [], 0
        while r < n:
            if not fusable[r]:
                r += 1
                continue
            m, e, last = self.size[r], r + 1, r
            while e < n and (passive[e] or (fusable[e] and self.size[e] == m)):
                if fusable[e]:
                    last = e
                e += 1
            if np.count_nonzero(fusable[r:last + 1]) >= 2:
                runs.append((r, last + 1, int(m)))
            r = last + 1
        self.segs = []
        if not runs:
            return
        seg_of = np.full(n, -1, np.int64)
        for i, (r0, r1, _) in enumerate(runs):
            seg_of[r0:r1] = i
        # records read from outside their run keep their storage
        outside = np.zeros(n, np.bool_)
        consumer = np.repeat(np.arange(n), np.diff(a0[:n + 1]))
        ps = self.args[:a0[n]]
        outside[ps[seg_of[ps] != seg_of[consumer]]] = True
        for r in np.flatnonzero((kind == C.K_NONE) & (sub >= RK.CMP_FIRST)):
            b = self.ip0[r]
            outside[self.ip[b:b + 2]] = True
        for r in self.roots:
            if r is not None:
                outside[r] = True
        for c in self.calls:  # guarded calls read these after the replay
            outside[c.records()] = True
        for r0, r1, m in runs:
            k = r1 - r0
            internal = fusable[r0:r1] & ~outside[r0:r1]
            slot = np.where(internal, np.cumsum(internal) - 1, -1).astype(np.int64)
            need = np.zeros(k, np.bool_)
            for r in range(r1 - 1, r0 - 1, -1):
                if not fusable[r]:
                    continue
                rd = _reads(int(kind[r]), int(sub[r]))
                ps = self.args[a0[r]:a0[r + 1]]
                wants = [ps[0]] if ("x" in rd or "a" in rd) else []
                if "b" in rd:
                    wants.append(ps[1])
                if "y" in rd and internal[r - r0]:
                    # its own VJP reads its value: recomputed, so before the
                    # test below (sin -> tanh -> exp had left sin's value stale)
                    need[r - r0] = True
                if need[r - r0]:  # recomputed: its operands are needed too
                    wants.extend(ps)
                for p in wants:
                    if r0 <= p < r1 and internal[p - r0]:
                        need[p - r0] = True
            self.segs.append((r0, r1, m, slot, need.astype(np.uint8)))
        self._seg_scratch()

    def _seg_scratch(self, threads=_NCPU):
        """Block scratch for the fused segments, one per thread."""
        rows = max([int(s[3].max()) + 1 for s in self.segs] + [1])
        self.threads = threads
        self.seg_v = [np.zeros((rows, RK.CHUNK)) for _ in range(threads)]
        self.seg_g = [np.zeros((rows, RK.CHUNK)) for _ in range(threads)]

    @classmethod
    def from_state(cls, t):
        """A replay from a validated trace description (tapefile.parse)."""
        self = cls.__new__(cls)
        self.pos = list(t["pos"])
        self.leaf_rec = [int(r) for r in t["leaf_rec"]]
        self.in_shapes, self.in_dtypes = list(t["in_shapes"]), list(t["in_dtypes"])
        self.out_shape, self.out_dtype, self.root = t["out_shape"], t["out_dtype"], t["root"]
        self.const_out = (None if self.root is not None
                          else np.array(t["const_out"], np.float64).reshape(self.out_shape))
        self.multi = False  # tape files hold single-output traces
        self.calls = []     # ... and no guarded Python calls (save refuses them)
        self.roots, self.out_shapes = [self.root], [self.out_shape]
        self.out_dtypes, self.const_outs = [self.out_dtype], [self.const_out]
        self.n = int(t["op"].size)
        for name in ("op", "arg0", "size", "ip0", "args", "ip", "fp", "guard", "goff", "gvals"):
            setattr(self, name, np.array(t[name], order="C"))  # owned, writeable
        self.host = dict(t["hosts"])
        self._allocate()
        self._plan_matmuls()
        at = 0
        for r in t["held"]:
            k = int(self.size[r])
            self.view(r)[:] = t["held_vals"][at:at + k]
            at += k
        self.n_guards = int(np.count_nonzero(self.guard))
        self._plan_segments()
        self.lock = threading.Lock()
        return self

    def clone(self):
        """An independent copy (own value and adjoint storage) for another thread."""
        new = _Replay.__new__(_Replay)
        new.__dict__.update(self.__dict__)
        self.release()
        new._allocate()
        new.v1[:], new.vals[:], new.big[:] = self.v1, self.vals, self.big
        if new.segs:
            new._seg_scratch(1)  # a copy runs on one of grad_batch's threads
        new.lock = threading.Lock()
        return new

    def _check_ops(self):
        for r in range(self.n):
            code = int(self.op[r])
            name = REGISTRY[code].name if code in REGISTRY else f"op code {code}"
            why = _NOT_REPLAYABLE.get(name)
            if why is None and code >> C.SHIFT == C.K_HOST and name not in _HOST_FORWARD:
                why = "no replay forward for this host op"
            if why is not None:
                raise NotImplementedError(
                    f"tapegrad.trace cannot replay {name} ({why}); call the function "
                    "eagerly, or keep this op outside the traced function")

    def _self_check(self, tape):
        """Replay at the trace's own inputs; every record must match eager."""
        old_v1, old_vals, old_big = self.v1.copy(), self.vals.copy(), self.big.copy()
        s = self.forward(None)
        assert s, "a replay without guards cannot fail one"
        rt, at = self.tol
        bad = None
        for new, old in ((self.v1, old_v1), (self.vals, old_vals), (self.big, old_big)):
            if not np.allclose(new, old, rtol=rt, atol=at, equal_nan=True):
                bad = True
        if bad:
            for r in range(self.n):
                if self.size[r] and not np.allclose(self.view(r), self._traced_value(
                        r, old_v1, old_vals, old_big), rtol=rt, atol=at, equal_nan=True):
                    name = REGISTRY[int(self.op[r])].name
                    raise NotImplementedError(
                        f"tapegrad.trace cannot replay {name} (record {r}) as it was "
                        "called: its replayed value differs from the eager one (e.g. "
                        "round with decimals, pad with a nonzero constant)")
        # guards: truth as eager code saw it, values as the replay computes them
        goff, gvals = [], []
        consumed = np.zeros(self.n, np.bool_)
        consumed[self.args[:self.arg0[self.n]]] = True
        for r in np.flatnonzero(((self.op >> C.SHIFT) == C.K_NONE)
                                & ((self.op & C.MASK) >= RK.CMP_FIRST) & ~consumed):
            tape.guards[int(r)] = (RK.G_VALUE, None)  # went to Python or NumPy
        at = 0
        for r, (kind, expect) in sorted(tape.guards.items()):
            v = self.view(r).copy()
            if kind == RK.G_TRUTH:
                if (v[0] != 0) != (expect != 0):
                    raise NotImplementedError(
                        f"tapegrad.trace: the replay decides a branch (record {r}) "
                        "differently from eager code (float32 rounding?)")
                v[:] = expect
            self.guard[r] = kind
            self.goff[r] = at
            gvals.append(v)
            at += v.size
        if gvals:
            self.gvals = np.concatenate(gvals)
        self.n_guards = len(gvals)
        for c in self.calls:
            if not c.holds(self.view):
                raise NotImplementedError(
                    f"tapegrad.trace: numpy.{c.name} gives another result on the replayed "
                    "values than on the eager ones (float32 rounding?); call the function "
                    "eagerly")

    def _traced_value(self, r, v1, vals, big):
        n = self.size[r]
        if n == 1:
            return v1[r:r + 1]
        if n <= SMALL:
            return vals[self.voff[r]:self.voff[r] + n]
        o = (self.refs[self.rix[r]].ctypes.data - self.big.ctypes.data) // 8
        return big[o:o + n]

    # -- running -----------------------------------------------------------------------
    @property
    def na(self):
        return int(self.arg0[self.n])

    def arrays(self, adj):
        """The tape view the sweeps read (kernels/_views.py): this replay's
        values with the adjoint or tangent layout ``adj`` -- so transforms/forward/sweep.py's
        tangent sweep and transforms/second/passes.py's hvp pass run on a replay as on a tape."""
        return (self.op, self.arg0, self.size, self.ip0, self.args, self.ip, self.fp,
                self.v1, self.vals, adj.voff, self.rix, self.ptrs, adj.aptr)

    def view(self, r):
        """Record r's value storage, flat."""
        n = self.size[r]
        if n == 1:
            return self.v1[r:r + 1]
        if n <= SMALL:
            return self.vals[self.voff[r]:self.voff[r] + n]
        return self.refs[self.rix[r]]

    def forward(self, xs, full=False):
        """Replay at inputs ``xs`` (None: as stored); False if a guard fails.

        Float64 C-contiguous inputs are read in place (no copy) until
        ``release``.  Fused segments keep their intermediates in block
        scratch; ``full=True`` computes every record's value into its storage
        instead, for passes that read them all (jvp, hvp).
        """
        if xs is not None:
            for r, x in zip(self.leaf_rec, xs):
                k = self.rix[r]
                if (k >= 0 and x.dtype == np.float64 and x.flags.c_contiguous
                        and x.flags.aligned):
                    flat = x.reshape(-1)
                    self.ptrs[k], self.refs[k] = flat.ctypes.data, flat
                    self.borrowed.append(k)
                else:
                    if k >= 0:
                        self.ptrs[k], self.refs[k] = self.own_ptrs[k], self.own_refs[k]
                    self.view(r)[:] = x.reshape(-1)
        guard = self.guard if xs is not None else np.zeros(self.n, np.int64)
        segs = self.segs if not full and xs is not None else ()
        start, i = 0, 0
        while True:
            stop = segs[i][0] if i < len(segs) else self.n
            s = RK.replay(self.T, self.faddr, guard, self.goff, self.gvals, start, stop,
                          self.mmk)
            if s == -1:
                if i == len(segs):
                    # guarded NumPy calls: their results must not change
                    return xs is None or all(c.holds(self.view) for c in self.calls)
                r0, r1, m, slot, _ = segs[i]
                _split(lambda w, lo, hi: RK.seg_forward(self.T, r0, r1, lo, hi, slot,
                                                        self.seg_v[w]), m, self.threads)
                start, i = r1, i + 1
                continue
            if s < -1:
                return False
            self._host_forward(s)
            if guard[s]:
                v, e = self.view(s), self.gvals[self.goff[s]:self.goff[s] + self.size[s]]
                if guard[s] == RK.G_TRUTH and (v[0] != 0) != (e[0] != 0):
                    return False
                if guard[s] == RK.G_VALUE and not np.array_equal(v, e, equal_nan=True):
                    return False
            start = s + 1

    def release(self):
        """Stop reading the caller's input arrays (back to own storage)."""
        for k in self.borrowed:
            self.ptrs[k], self.refs[k] = self.own_ptrs[k], self.own_refs[k]
        self.borrowed.clear()

    def _host_forward(self, r):
        d = REGISTRY[int(self.op[r])]
        h = self.host[r]
        extra = _HOST_EXTRA.get(d.name, 0)
        a0, a1 = self.arg0[r], self.arg0[r + 1]
        xs = [self.view(p).reshape(shape)
              for p, shape in zip(self.args[a0:a1], h[extra:extra + a1 - a0])]
        with np.errstate(all="ignore"):
            y = np.ravel(_HOST_FORWARD[d.name](xs, h))
        if y.size != self.size[r]:  # only a loaded file can disagree
            raise ValueError(f"{d.name} (record {r}) computes {y.size} elements where "
                             f"the trace has {self.size[r]}")
        self.view(r)[:] = y

    def outputs(self):
        """``(record or None, shape, dtype)`` of every output."""
        return list(zip(self.roots, self.out_shapes, self.out_dtypes))

    def value(self):
        """The output (a tuple for a multi-output function), after a ``forward``;
        0-d results as NumPy scalars."""
        vals = []
        for (r, shape, dt), const in zip(self.outputs(), self.const_outs):
            v = (const if r is None else self.view(r)).reshape(shape).astype(dt)
            vals.append(v[()] if v.ndim == 0 else v)
        return tuple(vals) if self.multi else vals[0]

    def backward(self, seeds):
        """Gradients w.r.t. every input for one cotangent per output (flat
        float64; None: zero), after a ``forward``.

        Float64 gradients are views of the leaves' adjoint arena, not copies.
        The next backward reuses that arena (no fresh pages to fault in) when
        the caller has let go of every gradient it handed out, and takes a new
        one otherwise: the reference count tells.
        """
        roots = [(r, s) for r, s in zip(self.roots, seeds) if r is not None and s is not None]
        if not roots:
            return [np.zeros(s, d) for s, d in zip(self.in_shapes, self.in_dtypes)]
        if sys.getrefcount(self.L) > self.L_refs:
            self.L = self.adj.L = np.empty(self.L.size)
            self.aptr0[:] = self.aoff * 8 + np.where(self.leaf, self.L.ctypes.data,
                                                     self.A.ctypes.data)
        self.aptr[:] = self.aptr0
        self.reached[:] = False
        for r, seed in roots:
            self.adj.add(r, seed)
        start = max(r for r, _ in roots)
        for r0, r1, m, slot, need in reversed(self.segs):
            if r0 > start:
                continue
            self._sweep(start, r1 - 1)
            plan = RK.seg_plan(self.T, r0, r1, slot)
            _split(lambda w, lo, hi: RK.seg_backward(self.T, r0, r1, lo, hi, slot, need, *plan,
                                                     self.seg_v[w], self.seg_g[w]),
                   m, self.threads)
            start = r0 - 1
        self._sweep(start, -1)
        out = []
        for r, shape, dt in zip(self.leaf_rec, self.in_shapes, self.in_dtypes):
            if self.reached[r]:
                out.append(self.adj[r].reshape(shape).astype(dt, copy=False))
            else:
                out.append(np.zeros(shape, dt))
        return out

    def _sweep(self, start, stop):
        """The compiled sweep over records ``start .. stop+1``, host VJPs in Python."""
        while True:
            s = sweep(self.T, self.freed, start, stop, self.order, self.mmk)
            if s == -1:
                return
            REGISTRY[int(self.op[s])].host_vjp(self, self.adj, s)
            start = s - 1

