"""Forward mode (``tg.jvp``, ``tg.jacfwd``): the tangent sweep (``sweep.py``)
and the host records' rules (``host_rules.py``)."""
