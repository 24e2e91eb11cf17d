"""The seeds' examples (shared/seeds/) as acceptance tests, with their numbers."""
import numpy as np
import pytest

import tapegrad as tg


def _abc(values):
    return [tg.tensor(v, requires_grad=True) for v in values]


def test_example1_gradient_vector():
    a, b, c = _abc([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]])
    y = 3 * a + 2 * b * b + tg.log(c)
    y.backward(tg.tensor([0.1, 1.0, 0.0001]), retain_graph=True)
    np.testing.assert_allclose(a.grad.numpy(), [3.0e-01, 3.0e+00, 3.0e-04], rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), [1.2e+00, 1.6e+01, 2.0e-03], rtol=1e-12)
    np.testing.assert_allclose(c.grad.numpy(), [1.6667e-02, 1.4286e-01, 1.2500e-05], rtol=1e-4)
    np.testing.assert_allclose(c.grad.numpy(), [0.1 / 6, 1.0 / 7, 0.0001 / 8], rtol=1e-14)


def test_example2_scalars_implicit_seed():
    a, b, c = _abc([0.1, 1.0, 0.1])
    y = 3 * a + 2 * b * b + tg.log(c)
    y.backward()
    assert a.grad.item() == pytest.approx(3.0)
    assert b.grad.item() == pytest.approx(4.0)
    assert c.grad.item() == pytest.approx(10.0)


def test_example4_retain_graph_then_accumulate():
    a, b, c = _abc([1.0, 1.0, 1.0])
    y = 3 * a + 2 * b * b + tg.log(c)
    y.backward(retain_graph=True)
    y.backward()
    assert (a.grad.item(), b.grad.item(), c.grad.item()) == (6.0, 8.0, 2.0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    assert (a.grad.item(), b.grad.item(), c.grad.item()) == (6.0, 8.0, 2.0)


def test_unbind_next_functions_slots():
    a, b = tg.tensor(np.random.default_rng(1).standard_normal(2), requires_grad=True).unbind()
    c = a + b
    (na, sa), (nb, sb) = c.grad_fn.next_functions
    assert c.grad_fn.name() == "AddBackward"
    assert na.name() == "UnbindBackward" and nb.name() == "UnbindBackward"
    assert (sa, sb) == (0, 1)
    assert na == nb and hash(na) == hash(nb)
    assert a.grad_fn == na and b.grad_fn == nb
    (leaf, slot), = na.next_functions
    assert leaf.name() == "AccumulateGrad" and slot == 0
    c.backward()
    np.testing.assert_array_equal(leaf.variable.grad.numpy(), [1.0, 1.0])


def test_split_slots_and_constant_inputs():
    x = tg.tensor(np.arange(6.0), requires_grad=True)
    p, q, r = tg.split(x, 3)
    y = r * np.ones(2) + p
    assert y.grad_fn.name() == "AddBackward"
    mul, add_slot = y.grad_fn.next_functions[0]
    split_node, slot = mul.next_functions[0]
    assert split_node.name() == "SplitBackward" and slot == 2
    assert mul.next_functions[1] == (None, 0)   # the ndarray operand
    assert y.grad_fn.next_functions[1][1] == 0  # p is slot 0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 0, 0, 1, 1])
