"""Tape files: ``ft.save`` and ``tg.load`` (``io.py``), the checks every
loaded file passes before a kernel sees it (``checks.py``, ``screen.py``)."""
