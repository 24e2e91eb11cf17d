"""NumPy's floor division of floats at one element, for the rows of
``formulas.py`` whose formulas call it (``remainder``, ``floor_divide``).
"""
import math

import numpy as np

from ._jit import inline


@inline
def divmod_floor(a, b):
    """NumPy's ``divmod`` of floats: (floor quotient, remainder with b's sign)."""
    if b == 0.0:
        return a / b, np.fmod(a, b)
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != 0.0:
        if (b < 0.0) != (mod < 0.0):
            mod += b
            div -= 1.0
    else:
        mod = math.copysign(0.0, b)
    if div != 0.0:
        fl = np.floor(div)
        if div - fl > 0.5:
            fl += 1.0
    else:
        fl = math.copysign(0.0, a / b)
    return fl, mod
