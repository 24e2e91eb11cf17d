"""The float dtype of a tape tuple's values and adjoints.

A float32 graph is swept with ``v1`` and ``vals`` (the small-value arenas)
as float32 arrays, and with float32 large values and adjoints
(kernels/_views.py); the tuple's type tells the two sweeps apart.  Here,
below both kernels/_views.py and kernels/_numba.py, which overloads
:func:`float_dtype` for compiled code, where it is a constant of the
tuple's type.
"""

#: ``v1``'s position in the tape tuple (the table of kernels/_views.py)
V1 = 7


def float_dtype(T):
    """float32 in a float32 sweep, else float64: the dtype of ``T``'s ``v1``."""
    return T[V1].dtype
