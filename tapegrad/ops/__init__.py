"""Differentiable operations, one registry entry each (see :mod:`.registry`)."""
from . import composite, custom, elementwise, matrix, reductions, shape  # noqa: F401
from . import methods  # noqa: F401  (binds them to Tensor)
