"""``create_graph=True``: the backward walk recorded as differentiable ops
(``walk.py``), with the rules for each kind of record (``kinds.py``),
indexing (``index.py``) and the decompositions (``linalg.py``)."""
