"""Numba options, in one place, and where the compiled kernels are cached.

Numba caches a ``cache=True`` function next to its source, in the package's
``__pycache__``.  For an installed package that is wrong twice over: pip does
not know the files, so an uninstall leaves ``site-packages/tapegrad/`` behind
with only the cache in it -- a directory that shadows a later editable
install as an empty namespace package -- and a read-only installation cannot
cache at all.  tapegrad's kernels are therefore cached in a per-user
directory instead (:func:`cache_dir`):

* ``$NUMBA_CACHE_DIR/tapegrad/<stamp>`` when the user set ``NUMBA_CACHE_DIR``;
* else the user cache directory, ``~/.cache/tapegrad/<stamp>`` on Linux
  (``$XDG_CACHE_HOME`` if set), the platform's equivalent elsewhere;
* else, when neither is writable, ``<tempdir>/tapegrad-<user>/<stamp>``.

``<stamp>`` hashes every kernel source file, this package's location and the
Numba and Python versions.  Numba keys a cached function on its own source
file only: when a kernel module that another module's kernel calls into
changes, the caller's cached machine code would silently keep the old
callee.  A new stamp is a new, empty directory, so a stale sweep can never
run, and two installations never overwrite each other's cache.  Stamps not
used for :data:`KEEP_DAYS` days are removed.

Compiling: Numba's compiler is not documented as thread-safe, and LLVM
objects that Python's garbage collector frees on one thread while another
thread is inside LLVM can crash the process.  Every compilation tapegrad
starts outside a kernel's first call runs under :data:`compile_lock`
(Numba's own global compiler lock, which every Numba compilation takes), for
the whole of the build, so no two overlap.
"""
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time

from . import ledger

#: Options every kernel is compiled with.  ``nogil`` lets independent tapes on
#: different threads sweep at once; ``fastmath`` stays off: gradients must be
#: IEEE-exact to the same rules NumPy's forward uses.
OPTIONS = dict(cache=True, nogil=True, error_model="numpy", boundscheck=False)
#: cache directories of other stamps unused this long are removed
KEEP_DAYS = 30

_PACKAGE = pathlib.Path(__file__).resolve().parent.parent


def _options():
    # no writable cache directory: compile uncached rather than let Numba
    # fall back to caching inside the package (or fail the import)
    return OPTIONS if cache_dir() is not None else dict(OPTIONS, cache=False)


# -- kernels, recorded until Numba is needed -------------------------------------------
# Importing Numba is half of ``import tapegrad``; a program whose kernels run
# interpreted never needs it.  The decorators below record each function; the
# first kernel that must run compiled imports Numba (kernels/_numba.py) and
# makes every recorded function a dispatcher (:func:`materialize`).

_RECORDED = []
_MATERIALIZED = []
_materialize_lock = threading.RLock()


class Deferred:
    """A kernel before Numba is loaded: called from Python it runs
    interpreted (kernels/interpret.py) or loads Numba and compiles; any other
    attribute is the Numba dispatcher's, made on demand."""

    what = None

    def __init__(self, fn, how):
        self.py_func, self.how, self.dispatcher = fn, how, None
        self.__name__, self.__qualname__, self.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        self.__module__ = fn.__module__

    def __call__(self, *args):
        d = self.dispatcher
        if d is None:
            if self.how == "kernel":
                from .interpret import run_as_python
                done, result = run_as_python(self.py_func, lambda: cached_bytes(self.cache_name()),
                                             self.py_func, args)
                if done:
                    return result
            materialize()
            d = self.dispatcher
        return d(*args)

    def cache_name(self):
        """``module.qualname``, as Numba names the kernel's index file."""
        return kernel_cache_name(self)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if self.dispatcher is None:
            if name in ("overloads", "signatures"):
                return {} if name == "overloads" else []
            materialize()
        return getattr(self.dispatcher, name)

    def __repr__(self):
        return f"<tapegrad kernel {self.__qualname__} ({'compiled' if self.dispatcher else 'not loaded'})>"


def _record(fn, how):
    if _MATERIALIZED:
        from . import _numba
        return _numba.dispatcher(fn, how, _options())
    d = Deferred(fn, how)
    _RECORDED.append(d)
    return d


def kernel(fn):
    """Compile ``fn`` with tapegrad's kernel options (callable from Python).

    Until it is compiled, a call from Python may run its source as Python
    instead (kernels/interpret.py decides: small work, nothing cached)."""
    return _record(fn, "kernel")


def inner(fn):
    """A kernel that only other kernels call (the family VJPs and their
    loops): compiled once per signature and called, with no CPython wrapper
    (which would cost a third of a small function's compilation).  Python
    can still call it, through a compiled trampoline."""
    return _record(fn, "inner")


def inline(fn):
    """A small helper, compiled once per signature and marked for LLVM to
    inline into every caller (``alwaysinline``).

    Not Numba's ``inline="always"``: that inlines at the level of Numba's
    own IR and re-runs its front end on the helper at every call site, which
    made that front end most of tapegrad's compile time (``unary_loops``:
    9.7 s of 21.6 s in ``inline_inlinables``, 1.2 s in LLVM).  Nor a plain
    call: LLVM's cost model then keeps a call per element to the large
    per-op switches (``d_unary``) and per record in the sweeps, the loops
    specialised for a constant sub code stop vectorising (measured: the 1e6
    elementwise replay 5.4 -> 9.8 ms).  Forced inlining gives the loops of
    the IR-inlined kernels at the front-end cost of one compilation.

    Integer constants at call sites are typed as plain integers: Numba would
    otherwise compile a helper once per literal it is called with
    (``parent(T, r, 0)``, ``parent(T, r, 1)``, ...), each a full compilation
    of the same code; inlined, the constant reaches LLVM all the same."""
    return _record(fn, "inline")


class Name:
    """A placeholder for a name of kernels/_numba.py (an intrinsic, ``carray``):
    compiled code sees the real one once Numba is loaded, interpreted code
    a Python stand-in of the same name (kernels/interpret.py: STAND_INS)."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args):
        raise RuntimeError(f"{self.name} exists in compiled kernels only")


def deferred(name):
    """``name`` of kernels/_numba.py, or its placeholder while Numba is not loaded."""
    if _MATERIALIZED:
        from . import _numba
        return getattr(_numba, name)
    return Name(name)


def materialize():
    """Load Numba: make every recorded kernel a dispatcher and put it, and
    every placeholder's real object, in the place of the recorded ones in
    tapegrad's modules (so compiled code that names them finds them)."""
    if _MATERIALIZED:
        return
    with _materialize_lock:
        if _MATERIALIZED:
            return
        if not os.environ.get("NUMBA_DISABLE_JIT"):
            _install_locator()
            _load_numba_np()
        from . import _numba
        _numba.Tiered.cached, _numba.Tiered.notice = staticmethod(cached_bytes), staticmethod(notice)
        opts = _options()
        for d in _RECORDED:
            d.dispatcher = _numba.dispatcher(d.py_func, d.how, opts)
            if d.what is not None:
                d.dispatcher.what = d.what
        _MATERIALIZED.append(True)
        for mod in list(sys.modules.values()):
            if not getattr(mod, "__name__", "").startswith("tapegrad"):
                continue
            space = vars(mod)
            for k, v in list(space.items()):
                if isinstance(v, Deferred):
                    space[k] = v.dispatcher
                elif isinstance(v, Name):
                    space[k] = getattr(_numba, v.name)


class _CompileLock:
    """Numba's global compiler lock, which every Numba compilation takes
    (loading Numba on first use)."""

    def __enter__(self):
        materialize()
        from numba.core.compiler_lock import global_compiler_lock
        global_compiler_lock.__enter__()

    def __exit__(self, *exc):
        from numba.core.compiler_lock import global_compiler_lock
        return global_compiler_lock.__exit__(*exc)

    def is_locked(self):
        """True on a thread that holds the lock (inside a compilation)."""
        if not _MATERIALIZED:
            return False
        from numba.core.compiler_lock import global_compiler_lock
        return global_compiler_lock.is_locked()


compile_lock = _CompileLock()

#: options of the C entry points of :func:`entry` (the compiler flags of
#: ``kernel``, less what a cfunc does not take)
ENTRY_OPTIONS = dict(nogil=True, error_model="numpy", boundscheck=False)


def entry(fn, sig):
    """Compile ``fn`` now as a cached C function of signature ``sig`` (a
    name of ``_numba.SIGNATURES``); the returned object's ``address`` is
    its machine code (keep it alive)."""
    with compile_lock:
        from . import _numba
        return _numba.entry(fn, sig, ENTRY_OPTIONS, cache_dir() is not None)


# -- telling the user about a long first compilation ---------------------------------
#: set to 1 to silence the one-line notice of a first (uncached) compilation
QUIET_ENV = "TAPEGRAD_QUIET"
_NOTICED = []


def kernel_cache_name(k):
    """The cache name (``module.qualname``) of kernel ``k``: a ``Deferred``
    before Numba is loaded, its dispatcher after (``materialize`` puts the
    dispatchers in the importing modules' names), either way."""
    fn = k.py_func
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"


def cached(name):
    """True if this stamp's cache directory holds a compiled ``name``
    (``module.qualname`` as Numba names its index files)."""
    return cached_bytes(name) > 0


def cached_bytes(name):
    """The bytes of the compiled ``name`` in this stamp's cache directory
    (its ``.nbc`` files; at least 1 when only its index is there), 0 if it
    holds none: what loading it costs grows with them (interpret.load_price)."""
    d = cache_dir()
    if d is None:
        return 0
    for root, _dirs, files in os.walk(d):
        if any(f.startswith(name + "-") and f.endswith(".nbi") for f in files):
            total = 0
            for f in files:
                if f.startswith(name + "-") and f.endswith(".nbc"):
                    try:
                        total += os.path.getsize(os.path.join(root, f))
                    except OSError:  # removed meanwhile (another process's cache cleanup)
                        pass
            return max(total, 1)
    return 0


def notice(what):
    """Say once per process, on stderr, that ``what`` is being compiled --
    unless :data:`QUIET_ENV` is set."""
    if _NOTICED or os.environ.get(QUIET_ENV, "") not in ("", "0"):
        return
    _NOTICED.append(what)
    where = cache_dir() or "Numba's cache"
    print(f"tapegrad: compiling {what} for this machine (seconds, once: cached in "
          f"{where}; {QUIET_ENV}=1 silences this)",
          file=sys.stderr, flush=True)


def numba_version():
    """The installed Numba's version, read without importing Numba (or
    ``importlib.metadata``, which costs as much): from the name of the one
    ``numba-<version>.dist-info`` beside the package; Numba's own
    ``__version__`` when that is not clear."""
    import importlib.util
    spec = importlib.util.find_spec("numba")
    if spec is not None and spec.origin:
        site = os.path.dirname(os.path.dirname(spec.origin))
        try:
            found = [n for n in os.listdir(site)
                     if n.startswith("numba-") and n.endswith(".dist-info")]
        except OSError:
            found = []
        if len(found) == 1:
            return found[0][len("numba-"):-len(".dist-info")]
    import numba
    return numba.__version__


def _stamp():
    digest = hashlib.sha256()
    for part in (str(_PACKAGE), numba_version(), sys.version, getattr(sys, "abiflags", "")):
        digest.update(part.encode() + b"\0")
    for src in sorted((_PACKAGE / "kernels").glob("*.py")):
        digest.update(src.name.encode() + b"\0")
        digest.update(src.read_bytes())
    return digest.hexdigest()[:20]


def _user_cache_root():
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(r"~\AppData\Local")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "tapegrad")


def _candidates(stamp):
    numba_cache = os.environ.get("NUMBA_CACHE_DIR", "")   # Numba's own setting
    if numba_cache:
        yield os.path.join(numba_cache, "tapegrad", stamp)
        return   # the user chose the place: nothing else
    yield os.path.join(_user_cache_root(), stamp)
    try:
        user = str(os.getuid())
    except AttributeError:
        user = os.environ.get("USERNAME", "user")
    yield os.path.join(tempfile.gettempdir(), f"tapegrad-{user}", stamp)


def _writable(path):
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def _prune(path):
    """Mark ``path`` used now; remove sibling stamps unused for KEEP_DAYS."""
    mark = os.path.join(path, "last-used")
    try:
        pathlib.Path(mark).touch()
        parent = os.path.dirname(path)
        old = time.time() - KEEP_DAYS * 86400
        for other in os.listdir(parent):
            o = os.path.join(parent, other)
            if o != path and os.path.isfile(os.path.join(o, "last-used")) \
                    and os.path.getmtime(os.path.join(o, "last-used")) < old:
                shutil.rmtree(o, ignore_errors=True)
    except OSError:
        pass


_DIR = []


def cache_dir():
    """The directory tapegrad's compiled kernels are cached in (None when no
    candidate is writable: then they are not cached at all)."""
    if not _DIR:
        stamp = _stamp()
        found = next((p for p in _candidates(stamp) if _writable(p)), None)
        if found is not None:
            _prune(found)
        _DIR.append(found)
    return _DIR[0]


ledger.bound["cache_dir"] = cache_dir  # the interpretation ledger lives beside the cache


def _locator_class():
    from numba.core import caching

    class _Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        """Numba cache locator for functions defined in tapegrad's own files."""

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            # one subfolder per source folder, as Numba's own locators do
            self._cache_path = os.path.join(cache_dir(), self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            try:
                inside = pathlib.Path(py_file).resolve().is_relative_to(_PACKAGE)
            except (OSError, ValueError):
                inside = False
            if not inside or cache_dir() is None:
                return None
            return super().from_function(py_func, py_file)

    return _Locator


_LOCATOR = []


def _install_locator():
    """Put tapegrad's cache locator first in Numba's list (once)."""
    from numba.core import caching, config
    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    if impl is None or getattr(config, "CACHE_LOCATOR_CLASSES", None) or _LOCATOR:
        return   # a Numba without the hook, or the user chose the locators
    _LOCATOR.append(_locator_class())
    impl._locator_classes = [_LOCATOR[0], *impl._locator_classes]


def _load_numba_np():
    """Import Numba's NumPy implementations (which its first compilation or
    cache load would import) without letting them import SciPy.

    ``numba.np.arraymath`` asks at import whether SciPy's BLAS is there, and
    that import of ``scipy.linalg`` took a second of every process's first
    gradient; tapegrad's kernels call no BLAS.  With SciPy installed the
    answer is yes all the same, and Numba checks SciPy for real when some
    code compiles ``np.dot`` or ``np.linalg``; without SciPy nothing is
    changed."""
    import importlib.util
    if "numba.np.arraymath" in sys.modules or importlib.util.find_spec("scipy") is None:
        return
    from numba.np import linalg
    real = linalg.ensure_blas
    linalg.ensure_blas = lambda: None
    try:
        from numba.np import arraymath
        arraymath.ensure_blas = real
    finally:
        linalg.ensure_blas = real
