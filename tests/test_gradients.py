"""Every differentiable op in the registry against central finite differences.

Shapes, broadcasting, axes and values are drawn by hypothesis; values are
kept inside each op's smooth domain (away from kinks and ties), where a
finite difference is a valid oracle.  ``test_every_op_has_a_row`` fails when
an op is registered without a row in ``op_cases.CASES``.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.core.registry import differentiable_ops

from op_cases import CASES, _NODE_NAMES
from oracle import check_vjp


def test_every_op_has_a_row():
    missing = set(differentiable_ops()) - set(CASES)
    assert not missing, f"ops without a gradient test row: {sorted(missing)}"
    assert not set(CASES) - set(differentiable_ops())


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_gradient(name):
    strategy, fn = CASES[name]

    @given(case=strategy, seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        shapes_, domains, params = case
        rng = np.random.default_rng(seed)
        arrays = [d(rng, s) for d, s in zip(domains, shapes_)]
        f = (lambda *xs: fn(*xs, **params)) if params else fn
        check_vjp(f, arrays, rng, expect_name=_NODE_NAMES.get(name, name))

    run()


def test_cumprod_gradient_is_exact_with_zeros():
    x = tg.tensor([2.0, 0.0, 3.0, 0.0], requires_grad=True)
    tg.cumprod(x).sum().backward()
    # d/dx_k of sum_j prod_{i<=j} x_i
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0 + 6.0, 0.0, 0.0])
