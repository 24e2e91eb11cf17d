"""Second order (``tg.hvp``, ``tg.hessian``, sparse Hessians): the
forward-over-reverse passes (``passes.py``), the host records' second-order
rules (``rules.py``, ``decompositions.py``)."""
