"""A transform's function whose result left the graph raises; a function that
never used its input is a constant, with derivative 0 (as in JAX)."""
import numpy as np
import pytest

import tapegrad as tg

X = np.array([1.0, 2.0])


@pytest.mark.parametrize("f", [lambda x: (x * x).sum().numpy(),
                               lambda x: float((x * x).sum().detach()),
                               lambda x: (x * x).sum().detach().item()])
def test_a_result_cut_off_the_graph_raises(f):
    with pytest.raises(TypeError, match="computed from its inputs outside the graph .* "
                                        "return the tensor itself"):
        tg.grad(f)(X)


@pytest.mark.parametrize("f", [lambda x: float((x * x).sum()),
                               lambda x: (x * x).sum().item()])
def test_a_python_number_of_the_result_raises_where_it_is_made(f):
    with pytest.raises(tg.ConcretizationError, match="inside a function being differentiated"):
        tg.grad(f)(X)


def test_a_vector_result_cut_off_the_graph_raises_in_jacobian():
    with pytest.raises(TypeError, match="outside the graph"):
        tg.jacobian(lambda x: (x * 2.0).numpy())(X)


def test_constants_have_derivative_zero():
    np.testing.assert_array_equal(tg.grad(lambda x: 1.0)(X), [0.0, 0.0])
    np.testing.assert_array_equal(tg.jacobian(lambda x: np.ones(3))(X), np.zeros((3, 2)))
    np.testing.assert_array_equal(tg.grad(lambda x: (x * x).sum())(X), [2.0, 4.0])
