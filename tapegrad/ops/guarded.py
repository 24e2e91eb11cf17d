"""NumPy calls on tensors' values that carry no gradient (an index, a count,
a mask), and that a trace turns into guards.

Below the other op modules, which all may use it.
"""
import numpy as np

from ..core.tape import _local
from ..core.tensor import Tensor


def _tracing():
    tape = _local.__dict__.get("tape")
    return tape if tape is not None and tape.tracing else None


def on_values(fn, *args, _exact=False, **kwargs):
    """``fn(*args, **kwargs)`` on the values of any tensors among the
    arguments (also inside list and tuple arguments): a result that carries
    no gradient, such as an index, a count or a mask.

    While ``tg.trace`` records, a traced value among the arguments makes the
    call a guard (``TraceTape.call``): a replay runs ``fn`` again on the
    replayed values and traces again when the result changes.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> from tapegrad.ops.guarded import on_values
    >>> int(on_values(np.argmax, tg.tensor([1.0, 3.0, 2.0], requires_grad=True)))
    1
    """
    tape = _tracing()
    if tape is not None:
        return tape.call(fn, args, kwargs, exact=_exact)
    conv = lambda x: np.asarray(x._data) if isinstance(x, Tensor) else x  # noqa: E731
    args = [conv(a) if not isinstance(a, (list, tuple)) else type(a)(conv(x) for x in a)
            for a in args]
    return fn(*args, **{k: conv(v) for k, v in kwargs.items()})
