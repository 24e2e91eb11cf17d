"""The public API: every documented name exists, and functions accept plain
tensors and ndarrays.
"""

import numpy as np

import tapegrad as tg

from oracle import close


def test_public_names_exist():
    for name in ["tensor", "Tensor", "no_grad", "is_grad_enabled", "exp", "log", "log1p",
                 "expm1", "sqrt", "square", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                 "arcsin", "arccos", "arctan", "abs", "maximum", "minimum", "where", "clip",
                 "sum", "mean", "prod", "max", "min", "reshape", "transpose", "swapaxes",
                 "squeeze", "expand_dims", "broadcast_to", "concatenate", "stack", "split",
                 "matmul", "dot", "unbind", "logsumexp", "AccumulateGrad"]:
        assert callable(getattr(tg, name)), name


def test_functions_accept_plain_tensors_and_ndarrays():
    t = tg.tensor([1.0, 4.0])
    assert isinstance(tg.sqrt(t), tg.Tensor)
    close(tg.sqrt(t), [1.0, 2.0])
    close(tg.sum(t), 5.0)
    close(tg.concatenate([t, np.array([9.0])]), [1.0, 4.0, 9.0])
