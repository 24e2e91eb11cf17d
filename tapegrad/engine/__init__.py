"""The engine layer: the backward walk (``backward()``, ``autograd.grad``,
``create_graph`` and the transforms' reverse passes are one walk), graph
nodes (``grad_fn``), hooks, anomaly mode and fused elementwise runs."""
