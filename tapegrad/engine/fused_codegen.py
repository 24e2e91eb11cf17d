"""One compiled loop per fused run: the planned reverse sweep of a run of
large elementwise records (tapegrad/engine/fused.py) as a single pass over
the elements.

The shared kernel (kernels/fused_segments.py ``seg_backward_stored``) sweeps
a run block by block and record by record: each record's VJP loop streams
its block once, and the adjoints internal to the run live in a block
scratch.  Here the same plan is written out as Python source of one loop
over the elements -- every internal adjoint a local variable, every record's
op code a literal -- and compiled by Numba.  Element for element it is the
same arithmetic in the same order as the shared kernel (``g * d`` from the
rules of kernels/rules.py, each write ``v + 0.0`` on the first write and
``v + old`` after), so the two give the same bits.

A loop is keyed by the run's structure and plan (op codes, which operands
are inside the run, which writes assign, which values are kept), never by
its numbers: the scalar constants and the plan's constant adjoints are
arguments.  Compiling one costs about a second, so a structure is compiled
once the shared kernel has spent that long on it in this process (a rent
rule, as the interpreted tier's, kernels/interpret.py), or at once when its
source and machine code are in the cache from an earlier process
(``<cache>/fused/``; the cache directory's stamp changes with the kernel
sources, so a cached loop never outlives the rules it inlines).
``TAPEGRAD_FUSE_LOOPS`` = ``0`` turns the loops off, ``now`` compiles each
structure at its first sweep (the tests use it).

Float64 and float32 sweeps: a float32 loop rounds what it stores as the
shared kernel's float32 scratch does.
"""
import contextlib
import hashlib
import importlib.util
import os
import sys
import threading
import time

import numpy as np

from ..kernels import codes as C
from ..kernels._files import write_atomic
from ..kernels._jit import OPTIONS, cache_dir, compile_lock
from ..kernels._views import APTR, ARG0, ARGS, FP, OP, PTRS, RIX, SIZE

ENV = "TAPEGRAD_FUSE_LOOPS"
#: seconds the shared kernel may spend on one structure before its own loop
#: is compiled (about what a compilation costs, measured: 0.4-1.2 s)
RENT = 1.0

_CONST = C.code(C.K_NONE, C.CONST)
_UNARY, _SCALAR, _NARY = C.K_UNARY, C.K_SCALAR, C.K_NARY


class _State:
    lock = threading.Lock()
    loops = {}      # key -> compiled loop (None: its compilation failed)
    spent = {}      # key -> seconds the shared kernel spent on it
    scratch = []    # a temporary folder for the sources, with no cache directory


def setting():
    """``"0"`` (off), ``"now"`` (compile at first sight) or ``""`` (rent)."""
    v = os.environ.get(ENV, "").strip().lower()
    return v if v in ("0", "now") else ""


class Plan:
    """A run's loop: its source, key, and the arguments of one call."""

    __slots__ = ("source", "key", "addrs", "consts")

    def __init__(self, source, addrs, consts):
        self.source = source
        self.key = hashlib.sha256(source.encode()).hexdigest()[:24]
        self.addrs = np.array(addrs, np.int64)
        self.consts = np.array(consts, np.float64)


def plan(T, r0, r1, gslot, reach, write, assign, linear, fillown, prefill, cfill, cv, cval,
         dtype=np.float64, bcast=None):
    """The loop that sweeps records ``r0 .. r1-1`` as ``seg_plan_stored``
    planned them (the same arguments ``seg_backward_stored`` takes), over
    values and adjoints of ``dtype`` (the sweep's: float64 or float32).

    In a float32 sweep the shared kernel stores every adjoint, internal ones
    included, as float32: here each one written is rounded the same way
    (``np.float32(...)``), and the constants it reads back from its float32
    block scratch are rounded as they were stored.

    ``bcast = (root, address, inner, leading)``: record ``root`` of the run
    enters with the adjoint of a sum over some of its axes, broadcast back
    (planned with ``seg_plan_stored``'s root ``-2 - root``): element i reads element
    ``i // inner`` (the trailing axes were summed) or ``i % inner`` (the
    leading ones) of the sum's adjoint at ``address`` -- what the sum's VJP
    would write into the root's adjoint, which here is never written."""
    f32 = dtype == np.float32
    dname = "np.float32" if f32 else "np.float64"

    def stored(v):
        return f"np.float32({v})" if f32 else v
    # Python lists of the few records' fields: an element of a NumPy array
    # costs a scalar object per look, and a plan looks at each several times
    op = T[OP][r0:r1].tolist()
    arg0 = T[ARG0][r0:r1 + 1].tolist()
    a_lo = arg0[0]
    args = T[ARGS][a_lo:arg0[-1]].tolist()
    fp = T[FP][r0:r1].tolist()
    rix, ptrs, aptr, size = T[RIX], T[PTRS], T[APTR], T[SIZE]
    gslot, reach, write, assign = gslot.tolist(), reach.tolist(), write.tolist(), assign.tolist()
    linear, fillown, prefill, cfill = linear.tolist(), fillown.tolist(), prefill.tolist(), cfill.tolist()
    cv, cval = cv.tolist(), cval.tolist()
    k = r1 - r0
    addrs, consts = [], []
    arrays = {}       # ("v" | "g", record) -> local array name
    kept = {}         # record -> whether its value is kept (in storage)
    body = []

    def array(kind, p):
        name = arrays.get((kind, p))
        if name is None:
            name = f"{kind}{len(arrays)}"
            arrays[(kind, p)] = name
            addrs.append(int(ptrs[rix[p]]) if kind == "v" else int(aptr[p]))
        return name

    def const(x):
        consts.append(x)
        return f"c[{len(consts) - 1}]"

    def inside(p):
        q = p - r0
        return 0 <= q < k and gslot[q] >= 0

    def value(p):
        v = kept.get(p)
        if v is None:
            v = kept[p] = bool(rix[p] >= 0)
        return f"{array('v', p)}[i]" if v else stored("0.0")

    def adjoint(p):
        return f"a{p - r0}" if inside(p) else f"{array('g', p)}[i]"

    def put(p, v, first):
        t = adjoint(p)
        old = "0.0" if first else t
        body.append(f"{t} = {stored(f'{v} + {old}')}")

    pre = []
    if bcast is not None:
        root, address, inner, leading = bcast
        addrs.append(int(address))
        arrays[("b", root)] = "gr"
        pre.append(f"    dv = np.int64({const(float(inner))})")
        body.append(f"a{root - r0} = {'gr[j]' if leading else 'go'}")
    for r in range(r1 - 1, r0 - 1, -1):
        q = r - r0
        code = op[q]
        kind, sub = code >> C.SHIFT, code & C.MASK
        if kind == C.K_NONE or not reach[q]:
            continue
        a0, na = arg0[q] - a_lo, arg0[q + 1] - arg0[q]
        ps = args[a0:a0 + na]
        if linear[q]:
            for j, p in enumerate(ps):
                if cfill[2 * q + j]:
                    put(p, const(cv[2 * q + j]), assign[2 * q + j])
            continue
        for j, p in enumerate(ps):
            if prefill[2 * q + j]:
                body.append(f"{adjoint(p)} = {stored(const(cval[p - r0]))}")
        g = stored(const(cval[q])) if fillown[q] else adjoint(r)
        body.append(f"g = {g}")
        y = value(r)
        pa = ps[0]
        # a constant smaller than the record, broadcast into an add or a
        # subtraction (fused_backward.runs lets only those in): its partial
        # reads no value, and indexing it by the run's elements would read
        # past its end
        xa = value(pa) if size[pa] == size[r] else stored("0.0")
        if kind == _UNARY:
            if write[2 * q]:
                put(pa, f"g * d_unary({sub}, {xa}, {y})", assign[2 * q])
        elif kind == _SCALAR:
            if write[2 * q]:
                put(pa, f"g * d_scalar({sub}, {xa}, {y}, {const(fp[q])})", assign[2 * q])
        elif kind == _NARY and na == 2:
            pb = ps[1]
            xb = value(pb) if size[pb] == size[r] else stored("0.0")
            wa, wb = write[2 * q], write[2 * q + 1]
            if pb == pa:
                if wa:
                    body.append(f"da, db = d_binary({sub}, {xa}, {xa}, {y})")
                    put(pa, "g * (da + db)", assign[2 * q])
            elif wa or wb:
                body.append(f"da, db = d_binary({sub}, {xa}, {xb}, {y})")
                if wa:
                    put(pa, "g * da", assign[2 * q])
                if wb:
                    put(pb, "g * db", assign[2 * q + 1])
        else:
            return None   # not a run the loops know: the shared kernel sweeps it
    views = [f"    {name} = carray(voidptr(p[{j}]), (n,), {dname})"
             for j, name in enumerate(arrays.values())]
    src = "\n".join([
        "import numpy as np",
        "from numba import carray",
        "from tapegrad.kernels._numba import voidptr",
        "from tapegrad.kernels.rules import d_binary, d_scalar, d_unary",
        "",
        "",
        "def loop(n, p, c):",
        *views,
        *pre,
        *(["    for i in range(n):"] if bcast is None else [
            # rows of the sum's operand: no division per element
            "    for o in range(n // dv):",
            *([] if bcast[3] else ["        go = gr[o]"]),
            "        for j in range(dv):",
            "            i = o * dv + j"]),
        *(("        " if bcast is None else "            ") + line for line in body),
        "",
    ])
    return Plan(src, addrs, consts)


def _load(key, source):
    """The compiled loop of ``source``: its file in the cache (written once,
    atomically, so that Numba's cache of it stays valid), imported and
    compiled, or loaded from Numba's cache."""
    base = cache_dir()
    if base is None:   # nothing writable to cache in: one folder for this process
        if not _State.scratch:
            import tempfile
            _State.scratch.append(tempfile.mkdtemp(prefix="tapegrad-fused-"))
        base = _State.scratch[0]
    folder = os.path.join(base, "fused")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"loop_{key}.py")
    try:   # a FIFO there would block the read: regular files only
        with open(path) if os.path.isfile(path) else contextlib.nullcontext() as f:
            same = f is not None and f.read() == source
    except OSError:
        same = False
    if not same:   # absent, or not what its name says: (re)written whole (a
        # non-file there raises, and the shared kernel sweeps the run)
        write_atomic(path, lambda fh: fh.write(source.encode()), durable=False)
    name = f"tapegrad_fused_loop_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    # Numba's cache names the module of a loop's environment and imports it
    # when it loads the machine code: it must be importable by that name
    sys.modules[name] = mod
    with compile_lock:
        spec.loader.exec_module(mod)
        import numba
        fn = numba.njit(**OPTIONS)(mod.loop)
        fn.compile("(int64, int64[::1], float64[::1])")
    return fn


def _in_cache(key):
    base = cache_dir()
    return base is not None and os.path.exists(os.path.join(base, "fused", f"loop_{key}.py"))


def loop_for(p):
    """The compiled loop for plan ``p`` if it is compiled, cached or due
    (see the module docstring); None: sweep with the shared kernel and
    count the time (``spent``)."""
    fn = _State.loops.get(p.key, False)
    if fn is not False:
        return fn
    mode = setting()
    if mode == "0":
        return None
    if mode == "now" or _State.spent.get(p.key, 0.0) >= RENT or _in_cache(p.key):
        with _State.lock:
            fn = _State.loops.get(p.key, False)
            if fn is False:
                try:
                    fn = _load(p.key, p.source)
                except Exception:   # noqa: BLE001 -- the shared kernel still sweeps it
                    if mode == "now":
                        raise
                    fn = None
                _State.loops[p.key] = fn
        return fn
    return None


def spent(p, seconds):
    _State.spent[p.key] = _State.spent.get(p.key, 0.0) + seconds


def run(fn, p, n):
    fn(n, p.addrs, p.consts)


def clock():
    return time.perf_counter()
