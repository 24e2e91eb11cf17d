"""Grad mode: whether operations are recorded, per thread (as in PyTorch)."""
import functools

from .tape import current


class no_grad:
    """Context manager and decorator that turns recording off in this thread.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor(1.0, requires_grad=True)
    >>> with tg.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    def __enter__(self):
        tape = current()
        self._prev = tape.enabled
        tape.enabled = False
        return self

    def __exit__(self, *exc):
        current().enabled = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class enable_grad(no_grad):
    """Context manager and decorator that turns recording on in this thread,
    e.g. inside a function run under :class:`no_grad`.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor(1.0, requires_grad=True)
    >>> with tg.no_grad():
    ...     with tg.enable_grad():
    ...         y = x * 2
    >>> y.requires_grad
    True
    """

    _flag = True

    def __enter__(self):
        tape = current()
        self._prev = tape.enabled
        tape.enabled = self._flag
        return self


class set_grad_enabled(no_grad):
    """Turn recording on or off in this thread.

    Called as a function it sets the mode at once; used in a ``with`` block it
    sets it for the block and restores the previous mode after, as PyTorch's.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor(1.0, requires_grad=True)
    >>> with tg.set_grad_enabled(False):
    ...     y = x * 2
    >>> y.requires_grad
    False
    >>> _ = tg.set_grad_enabled(False)
    >>> tg.is_grad_enabled()
    False
    >>> _ = tg.set_grad_enabled(True)
    >>> tg.is_grad_enabled()
    True
    """

    def __init__(self, mode):
        # the mode changes now, so that a plain call works; __enter__ has
        # nothing left to do but __exit__ restores what was there before
        tape = current()
        self._prev = tape.enabled
        self._flag = bool(mode)
        tape.enabled = self._flag

    def __enter__(self):
        return self

    def __call__(self, fn):
        flag = self._flag
        current().enabled = self._prev  # as a decorator: do not change the mode now

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(flag):
                return fn(*args, **kwargs)
        return wrapper


def is_grad_enabled():
    """Whether operations are being recorded in this thread.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.is_grad_enabled()
    True
    """
    return current().enabled
