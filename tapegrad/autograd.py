"""``tapegrad.engine.backward``: PyTorch's ``torch.autograd`` names.

``grad`` returns the gradients of outputs with respect to inputs (with
``grad_outputs``, ``retain_graph``, ``create_graph`` and ``allow_unused`` as
in PyTorch); ``backward(t, gradient)`` is ``t.backward(gradient)``.  Both are
the one backward walk of ``tapegrad/engine/backward.py``.

Examples
--------
>>> import tapegrad as tg
>>> x = tg.tensor([1.0, 2.0], requires_grad=True)
>>> tg.autograd.grad((x * x).sum(), x)
(tensor([2.0, 4.0]),)
"""
from .core.grad_mode import enable_grad, no_grad, set_grad_enabled
from .engine.anomaly import detect_anomaly
from .engine.backward import backward, grad
from .ops.function import Function, FunctionCtx

__all__ = ["Function", "FunctionCtx", "backward", "detect_anomaly", "enable_grad", "grad",
           "no_grad", "set_grad_enabled"]
