"""Numba kernels: the compiled sweeps, VJPs, tangent rules and replay.

The only other Numba code is in :mod:`tapegrad.ops.custom`, which compiles
the scalar functions users give ``tapegrad.elementwise``.

The Python layers validate and record; these modules only loop.  Layout of the
tape arrays they receive is documented in :mod:`tapegrad.core.tape`.
"""
