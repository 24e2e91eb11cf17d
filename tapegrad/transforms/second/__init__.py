"""Second order (``tg.hvp``, ``tg.hessian``, sparse Hessians): the
forward-over-reverse passes (``passes.py``) and the second-order rules
(``rules.py``), which run the host records' rules given by their registry
rows (``second=``)."""
