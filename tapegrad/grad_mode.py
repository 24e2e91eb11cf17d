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


def is_grad_enabled():
    """Whether operations are being recorded in this thread."""
    return current().enabled
