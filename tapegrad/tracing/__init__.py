"""The tracing layer: ``tg.trace`` records a function once on a trace tape
(``tape.py``, ``api.py``), replays it on new inputs in compiled code
(``replay.py``, ``batch.py``), serves its transforms (``function.py``,
``tangents.py``, ``call.py``) and saves and loads it (``files/``)."""
