"""``tapegrad.scipy``: SciPy's functions on tensors, differentiable."""
from . import linalg, special, stats  # noqa: F401
