"""Atomic file writes: what ``ft.save`` and the fused loops' source cache
write through (no Numba, nothing of tapegrad's: any layer may use it).

:func:`write_atomic` writes a temporary file next to the target, flushes it
(and fsyncs it, unless told not to) and renames it over the target, so a
reader sees the old file or the new one, never a part.  Two rules on top
of the rename:

* The target is a regular file or a new path.  Anything else -- a FIFO, a
  character or block device, a socket, a directory, directly or through a
  symlink -- raises :class:`NotARegularFileError` (a ``ValueError``) naming
  the path and what it is, before anything is written: a rename would
  silently turn a device or a pipe into a plain file (as root,
  ``/dev/null``).
* A process killed while it writes (SIGKILL, a power cut) leaves its
  temporary file behind.  Temporary files are named
  ``.<name>.tapegrad-<pid>@<host>.<random>.tmp`` (:func:`temp_prefix`), so
  the next write to the same path recognises the ones made for that path by
  a process of this machine that is gone, and removes them (POSIX only:
  whether a process lives is asked with ``os.kill(pid, 0)``; a pid reused by
  a live process keeps its file until that process is gone too).
"""
import hashlib
import os
import re
import secrets
import socket
import stat

__all__ = ["NotARegularFileError", "describe_mode", "temp_prefix", "write_atomic"]


class NotARegularFileError(ValueError):
    """The target of a save is there and is not a regular file."""


def _unlink_quietly(name):
    """Remove file ``name`` if it is there (a partial write's temp file)."""
    try:
        os.unlink(name)
    except OSError:
        pass


def describe_mode(mode):
    """What ``st_mode`` says a path is, in words (``"a FIFO (named pipe)"``)."""
    return ("a directory" if stat.S_ISDIR(mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode)
            else "a regular file" if stat.S_ISREG(mode)
            else "not a regular file")


def _host():
    """This machine, as 8 hex digits (a pid means something on one machine only)."""
    return hashlib.sha1(socket.gethostname().encode(errors="replace")).hexdigest()[:8]


def _stem(base):
    """``base`` as it appears in its temporary files' names (long names are
    shortened, with a digest, to keep within the 255-byte name limit)."""
    if len(base.encode(errors="surrogateescape")) <= 150:
        return base
    return base[:60] + "~" + hashlib.sha1(base.encode(errors="surrogateescape")).hexdigest()[:16]


def temp_prefix(base, pid=None):
    """The start of the names of the temporary files a process (``pid``,
    default this one) writes for the file ``base`` in the same folder."""
    return f".{_stem(base)}.tapegrad-{os.getpid() if pid is None else pid}@{_host()}."


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # EPERM: it lives, as another user's process
        return True
    return True


def remove_stale(folder, base):
    """Remove the temporary files of writes to ``folder/base`` whose process
    (on this machine) is gone; returns their names."""
    if os.name != "posix":   # os.kill(pid, 0) would end the process on Windows
        return []
    pattern = re.compile(re.escape(f".{_stem(base)}.tapegrad-") + r"([0-9]+)@"
                         + re.escape(_host()) + r"\.[0-9a-f]{16}\.tmp\Z")
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = pattern.match(name)
        if m is None or _alive(int(m.group(1))):
            continue
        try:
            os.unlink(os.path.join(folder, name))
            removed.append(name)
        except OSError:   # another writer removed it first, or no permission
            pass
    return removed


def check_target(path, target):
    """Raise :class:`NotARegularFileError` if ``target`` (``path`` with its
    symlinks resolved) exists and is not a regular file; else its
    permission bits (None when it does not exist)."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        return stat.S_IMODE(st.st_mode)
    shown = os.fspath(path)
    via = f" (a symlink to {target!r})" if os.path.abspath(shown) != target else ""
    raise NotARegularFileError(
        f"cannot save to {shown!r}{via}: it is {describe_mode(st.st_mode)}, not a regular "
        "file; saves write a regular file or a new path (renaming the file over it would "
        "replace it) -- choose a file name")


def write_atomic(path, write, durable=True):
    """Call ``write(fh)`` on a new binary file in ``path``'s directory and
    rename it over ``path`` once it is complete (and, if ``durable``, on
    disk).

    An exception or a signal at any point (Ctrl-C half-way through a large
    write) leaves ``path`` as it was and removes the partial file; a killed
    process leaves it behind, and the next write to ``path`` removes it.
    A symlink is followed, as ``open(path, "wb")`` would, so the file it
    points at is the one replaced; a target that is not a regular file
    raises :class:`NotARegularFileError` before anything is written.  The new
    file keeps an existing file's permission bits."""
    target = os.path.realpath(os.fspath(path))
    folder, base = os.path.split(target)
    mode = check_target(path, target)
    remove_stale(folder, base)
    prefix = temp_prefix(base)
    while True:
        tmp = os.path.join(folder, f"{prefix}{secrets.token_hex(8)}.tmp")
        try:
            # 0o666 minus the umask, as a plain open() would give
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:
            continue
        except BaseException:
            # a signal handled as the open returned (Ctrl-C): the file may have
            # been made, and then it is this call's (O_EXCL) -- remove it
            _unlink_quietly(tmp)
            raise
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        check_target(path, target)   # made in the meantime: still no rename over it
        os.replace(tmp, target)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    if not durable:
        return
    try:   # the rename itself on disk too (POSIX; not possible on Windows)
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
