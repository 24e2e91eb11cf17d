"""Differentiable operations, one registry entry each (see :mod:`.registry`)."""
from . import elementwise, linalg, reductions, shape  # noqa: F401  (registration)
from . import methods  # noqa: F401  (binds them to Tensor)
