"""Numba options, in one place, and the cache-staleness guard.

Numba's on-disk cache keys a function on its own source file only: when a
kernel module that another module's kernel calls into changes, the caller's
cached machine code would silently keep the old callee.  ``_check_cache``
hashes every kernel source file and wipes tapegrad's kernel cache when any of
them changed, so a stale sweep can never run.
"""
import hashlib
import os
import pathlib

from numba import njit

#: Options every kernel is compiled with.  ``nogil`` lets independent tapes on
#: different threads sweep at once; ``fastmath`` stays off: gradients must be
#: IEEE-exact to the same rules NumPy's forward uses.
OPTIONS = dict(cache=True, nogil=True, error_model="numpy", boundscheck=False)


def kernel(fn):
    """Compile ``fn`` with tapegrad's kernel options."""
    return njit(**OPTIONS)(fn)


def inline(fn):
    """A small helper that is always inlined into its callers."""
    return njit(inline="always", **OPTIONS)(fn)


def _check_cache():
    here = pathlib.Path(__file__).parent
    digest = hashlib.sha256()
    for src in sorted(here.glob("*.py")):
        digest.update(src.name.encode())
        digest.update(src.read_bytes())
    stamp = digest.hexdigest()
    cache = here / "__pycache__"
    mark = cache / "tapegrad-kernels.stamp"
    try:
        if mark.read_text() == stamp:
            return
    except OSError:
        pass
    try:
        cache.mkdir(exist_ok=True)
        for f in cache.iterdir():
            if f.suffix in (".nbi", ".nbc"):
                f.unlink()
        mark.write_text(stamp)
    except OSError:  # read-only install: Numba falls back to its own cache dir
        pass


if not os.environ.get("NUMBA_DISABLE_JIT"):
    _check_cache()
