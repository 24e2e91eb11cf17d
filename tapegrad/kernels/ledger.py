"""What interpreting each kernel cost in earlier processes: the interpreted
tier's budget (kernels/interpret.py) kept across runs.

The tier rents a kernel -- runs its source as Python -- until the rent
reaches the price of compiling it.  Counted in one process only, a short
script run again and again never gets there: each run interprets for a few
milliseconds and exits, and the next one starts from nothing.  So the
seconds spent interpreting each kernel that the cache does not hold (past
the price of a load: below) are kept in a small file beside the compiled
kernels, :data:`NAME` in
``_jit.cache_dir()`` -- a folder already keyed on a hash of the kernel
sources, Numba and Python, so a changed kernel starts from nothing.  A
process starts each kernel's budget with what earlier processes put there;
the run in which the sum passes the price compiles the kernel, Numba caches
it, and the runs after find it there.

What a run puts there is what it would have saved had the kernel been
cached: the seconds it interpreted the kernel beyond the price of loading
it (:data:`FIRST_LOAD`, 0.4 s, in a process that loaded nothing: Numba's
import and the kernels' loads; the least load's, ``interpret.load_price``,
in one that loaded some).  A run that interprets less than that would be
no faster with the kernel cached -- loading is paid by every process
again, and that budget stays per process -- so it adds nothing: a script
that only ever does small work never compiles, run as often as it may be,
while one whose runs each interpret a kernel for most of a second compiles
it after a few of them (a run that interprets it for longer than the
budget compiles it by itself).

The file is text: a header line ``tapegrad-interpreted 1 <tapegrad version>
<stamp>``, then one line per kernel, ``<seconds> <module.qualname>``.  It is
read once, at a process's first interpreted call, and written at most once,
at exit (``atexit``), by a process that has something to add: holding an
exclusive lock (``fcntl.flock`` on :data:`LOCK`, where there is ``fcntl``),
it reads the file again, adds this process's seconds to what is there now,
removes the kernels it compiled, and writes the result to a temporary file
renamed over the old one (kernels/_files.py: ``write_atomic``).  A reader
always sees a whole file, and processes that exit at once add up; without
``fcntl`` (Windows) one of two writes at the same moment may be lost, never
the file.  A file that is missing, not a regular file, unreadable, malformed
or written by another version counts as empty; a folder that cannot be
written is left as it is.  Either way nothing is raised: the budget is then
the process's own, as with :data:`ENV` ``=0``, which turns the file off.
``TAPEGRAD_INTERPRET=0`` or ``force``, and a block under
``interpret.mode``, neither read nor write it.
"""
import contextlib
import math
import os
import sys
import threading
import time

#: set to ``0`` to keep each process's interpretation budget its own (the
#: file is then neither read nor written)
ENV = "TAPEGRAD_INTERPRET_LEDGER"
#: the file, in ``_jit.cache_dir()``, and the lock file beside it
NAME = "interpreted.txt"
LOCK = "interpreted.lock"
_HEADER = "tapegrad-interpreted 1"
#: a file larger than this is not one this module wrote: ignored
MAX_BYTES = 1 << 20
#: how long the write at exit waits for another process's lock (seconds);
#: past it, this process's seconds are dropped rather than risk a lost merge
LOCK_WAIT = 0.5
#: seconds the first load of a process costs: Numba's import (0.25 s here)
#: and the kernels' own loads (import and a first backward from a warm cache:
#: 0.52 s against 0.08 s interpreted, docs/performance.md; a first
#: ``tg.hessian`` of 5 inputs: 0.49 s against 0.03-0.05 s).
#: A run that loaded nothing would have paid this to use a cached kernel;
#: it is the interpreted tier's LOAD_BUDGET where that is larger
FIRST_LOAD = 0.4

_lock = threading.Lock()
_prior = []       # [name -> seconds read from the file], once read
_added = {}       # name -> seconds interpreted in this process
_dropped = set()  # names compiled in this process
_hooked = []      # [pid] once the exit hook is registered


def enabled():
    """False when :data:`ENV` is ``0``."""
    return os.environ.get(ENV, "").strip() != "0"


#: bound by the modules that own them (the ledger imports none of tapegrad's,
#: so that no import circle runs through it): ``_jit.cache_dir`` and
#: ``interpret``'s price of a load and whether the process has loaded a kernel
bound = {"cache_dir": lambda: None, "load_price": None, "warm": lambda: False}


def _where():
    """``(file, lock file, header)``, or None without a cache folder."""
    folder = bound["cache_dir"]()
    if folder is None:
        return None
    version = "".join(str(getattr(sys.modules.get("tapegrad"), "__version__", "0")).split())
    header = f"{_HEADER} {version or '0'} {os.path.basename(folder)}"
    return os.path.join(folder, NAME), os.path.join(folder, LOCK), header


def read(path, header):
    """The seconds by kernel name in the file ``path``; empty when it is
    missing, not a regular file, unreadable, larger than :data:`MAX_BYTES`,
    not headed ``header`` or has a line that is not ``<seconds> <name>``
    with a finite, non-negative number of seconds."""
    try:
        if not os.path.isfile(path):   # a FIFO there would block the read
            return {}
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        lines = raw.decode("utf-8").split("\n")
    except (OSError, ValueError):   # UnicodeDecodeError is a ValueError
        return {}
    if len(raw) > MAX_BYTES or lines[0] != header or lines[-1] != "":
        return {}
    got = {}
    for line in lines[1:-1]:
        seconds, _, name = line.partition(" ")
        try:
            s = float(seconds)
        except ValueError:
            return {}
        if not name or name.split() != [name] or not math.isfinite(s) or s < 0:
            return {}
        got[name] = s
    return got


def before(name):
    """Seconds that earlier processes put in the file for the kernel
    ``name`` (their interpretation of it past a load's price); 0 when none
    did, or the file is off, absent or unreadable."""
    if not _prior:
        with _lock:
            if not _prior:
                try:
                    where = _where() if enabled() else None
                    _prior.append({} if where is None else read(where[0], where[2]))
                except Exception:   # noqa: BLE001 -- never in the user's way
                    _prior.append({})
    return _prior[0].get(name, 0.0)


def add(name, seconds):
    """Count ``seconds`` of interpreting the kernel ``name`` in this
    process (at exit, what passes the price of a load is added to the
    file)."""
    with _lock:
        _added[name] = _added.get(name, 0.0) + seconds
        _hook()


def compiled(name):
    """Note that the kernel ``name`` is compiled in this process: at exit
    its line is removed (Numba's cache holds it now; one that could not be
    cached starts renting again from nothing)."""
    with _lock:
        _dropped.add(name)
        _hook()


def _hook():
    if not _hooked:
        import atexit
        atexit.register(save)
        _hooked.append(os.getpid())


def save():
    """Merge this process's seconds into the file (registered with
    ``atexit``; never raises)."""
    try:
        _save()
    except Exception:   # noqa: BLE001 -- a read-only or odd folder: nothing kept
        pass


@contextlib.contextmanager
def _exclusive(path):
    """Hold an exclusive lock on the file ``path``; yields False when it
    stays taken for :data:`LOCK_WAIT` seconds (True without ``fcntl``)."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.005)
        yield True
    finally:
        os.close(fd)   # releases the lock


def _load_price():
    """Seconds of a run's interpretation that a cached kernel would not have
    saved it: the price of loading one -- the first load's
    (:data:`FIRST_LOAD`) in a process that loaded nothing, else the least
    (kernels/interpret.py: ``load_price``)."""
    price = bound["load_price"](1)
    return price if bound["warm"]() else max(FIRST_LOAD, price)


def _save():
    # a forked child inherits the parent's counts: only the process that
    # counted them writes them
    if not _hooked or _hooked[0] != os.getpid() or not enabled():
        return
    with _lock:
        added, dropped = dict(_added), set(_dropped)
        _added.clear()
        _dropped.clear()
    free = _load_price()
    added = {n: s - free for n, s in added.items()
             if n.split() == [n] and math.isfinite(s) and s > free}
    if not added and not dropped:
        return
    where = _where()
    if where is None:
        return
    path, lock_path, header = where
    with _exclusive(lock_path) as held:
        if not held:
            return
        now = read(path, header)
        for n, s in added.items():
            now[n] = now.get(n, 0.0) + s
        for n in dropped:
            now.pop(n, None)
        text = "".join([header, "\n"] + [f"{s!r} {n}\n" for n, s in sorted(now.items())])
        from ._files import write_atomic
        write_atomic(path, lambda fh: fh.write(text.encode()), durable=False)
