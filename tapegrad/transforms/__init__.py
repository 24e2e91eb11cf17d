"""The transforms layer: ``grad``, ``vjp``, ``jacobian`` (``functional.py``,
``reverse.py``), forward mode (``forward/``), second order (``second/``),
``create_graph`` (``create_graph/``), sparsity and checkpointing."""
