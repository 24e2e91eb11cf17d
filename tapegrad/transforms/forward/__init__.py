"""Forward mode (``tg.jvp``, ``tg.jacfwd``): the tangent sweep (``sweep.py``),
which runs the host records' rules given by their registry rows (``jvp=``)."""
