"""Numba kernels: the only place in tapegrad with ``@njit`` code.

The Python layers validate and record; these modules only loop.  Layout of the
tape arrays they receive is documented in :mod:`tapegrad.tape`.
"""
