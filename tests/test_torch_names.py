"""The names a PyTorch user reaches for: constructors with requires_grad=,
seeded random tensors, from_numpy, clone, and the in-place methods, which
follow the rules of ``t += v``; and the conversions NumPy's protocols cannot
route to tapegrad, which raise saying what to write instead."""
import numpy as np
import pytest

import tapegrad as tg

from oracle import check_hvp, check_vjp, leaf


@pytest.mark.parametrize("make, ref", [
    (lambda: tg.zeros((2, 3)), np.zeros((2, 3))),
    (lambda: tg.zeros(4, dtype=np.float32), np.zeros(4, np.float32)),
    (lambda: tg.ones(3), np.ones(3)),
    (lambda: tg.full((2,), 7.5), np.full((2,), 7.5)),
    (lambda: tg.full((2,), tg.tensor(2.0)), np.full((2,), 2.0)),
    (lambda: tg.zeros_like(tg.tensor([[1.0, 2.0]])), np.zeros((1, 2))),
    (lambda: tg.ones_like(np.arange(3)), np.ones(3, int)),
    (lambda: tg.full_like(tg.tensor([1.0, 2.0]), 4.0), np.full(2, 4.0)),
    (lambda: tg.arange(5), np.arange(5)),
    (lambda: tg.arange(1.0, 2.0, 0.25), np.arange(1.0, 2.0, 0.25)),
    (lambda: tg.arange(0.0, 2.0, dtype=np.float32), np.arange(0.0, 2.0, dtype=np.float32)),
    (lambda: tg.linspace(0.0, 1.0, 5), np.linspace(0.0, 1.0, 5)),
    (lambda: tg.linspace(0.0, 1.0, 4, endpoint=False), np.linspace(0.0, 1.0, 4, endpoint=False)),
])
def test_constructors_match_numpy(make, ref):
    t = make()
    assert isinstance(t, tg.Tensor) and not t.requires_grad
    assert t.dtype == ref.dtype and t.shape == ref.shape
    np.testing.assert_array_equal(t.numpy(), ref)


@pytest.mark.parametrize("make", [
    lambda: tg.zeros((2,), requires_grad=True), lambda: tg.ones(2, requires_grad=True),
    lambda: tg.full((2,), 3.0, requires_grad=True),
    lambda: tg.zeros_like(np.ones(2), requires_grad=True),
    lambda: tg.ones_like(tg.tensor([1.0, 2.0]), requires_grad=True),
    lambda: tg.full_like(np.ones(2), 2.0, requires_grad=True),
    lambda: tg.arange(0.0, 2.0, requires_grad=True),
    lambda: tg.linspace(0.0, 1.0, 2, requires_grad=True),
    lambda: tg.randn(2, requires_grad=True, seed=0), lambda: tg.rand(2, requires_grad=True)])
def test_requires_grad_makes_a_differentiable_leaf(make):
    t = make()
    assert t.requires_grad and t.is_leaf and t.grad_fn is None
    (t * t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 2 * t.numpy())


def test_requires_grad_on_integers_is_refused():
    with pytest.raises(RuntimeError, match="only tensors of floating point dtype"):
        tg.arange(3, requires_grad=True)


def test_linspace_between_tensors_that_require_grad():
    a, b = leaf(0.5), leaf(2.0)
    y = tg.linspace(a, b, 4)
    assert y.requires_grad
    np.testing.assert_allclose(y.numpy(), np.linspace(0.5, 2.0, 4))
    check_vjp(lambda s, e: tg.linspace(s, e, 5), [np.array(0.5), np.array(2.0)],
              np.random.default_rng(0))
    with pytest.raises(ValueError, match="requires_grad=True makes a leaf"):
        tg.linspace(a, b, 4, requires_grad=True)


def test_random_tensors():
    a = tg.randn(3, 4, seed=7)
    assert a.shape == (3, 4) and a.dtype == np.float64 and not a.requires_grad
    np.testing.assert_array_equal(a.numpy(), np.random.default_rng(7).standard_normal((3, 4)))
    np.testing.assert_array_equal(tg.randn((3, 4), seed=7).numpy(), a.numpy())
    g = np.random.default_rng(3)
    r = tg.rand(5, generator=g, dtype=np.float32)
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r.numpy(), np.random.default_rng(3).random(5, dtype=np.float32))
    # the generator advances: two draws differ
    assert not np.array_equal(tg.rand(5, generator=g).numpy(), tg.rand(5, generator=g).numpy())
    assert tg.randn().shape == ()
    assert not np.array_equal(tg.randn(8).numpy(), tg.randn(8).numpy())


@pytest.mark.parametrize("call, exc, match", [
    (lambda: tg.randn(2, seed=1, generator=np.random.default_rng()), TypeError, "not both"),
    (lambda: tg.rand(2, generator=np.random.RandomState(0)), TypeError,
     "must be a numpy.random.Generator"),
    (lambda: tg.randn(2, dtype=np.int64), TypeError, "float32 or float64"),
    (lambda: tg.randn(2.5), TypeError, "the size must be ints"),
    (lambda: tg.from_numpy([1.0, 2.0]), TypeError, "expected an ndarray"),
    (lambda: tg.from_numpy(np.array(["a"])), TypeError, "is not supported"),
])
def test_constructor_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_from_numpy_shares_memory_both_ways():
    a = np.array([1.0, 2.0, 3.0])
    t = tg.from_numpy(a)
    a[0] = 10.0
    assert t.numpy()[0] == 10.0
    t += 1.0  # no graph: a value write
    np.testing.assert_array_equal(a, [11.0, 3.0, 4.0])
    # a graph holding the value makes the array read-only
    t.requires_grad_(True)
    y = (t * t).sum()
    with pytest.raises(ValueError, match="read-only"):
        a[1] = 0.0
    y.backward()
    np.testing.assert_array_equal(t.grad.numpy(), 2 * a)


def test_clone_keeps_the_graph_and_copies():
    x = leaf([1.0, 2.0])
    y = x.clone()
    assert y.requires_grad and not np.shares_memory(y.numpy(), x.numpy())
    (y * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    p = tg.tensor([1.0, 2.0])
    q = p.clone()
    q += 1.0
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])
    check_hvp(lambda t: t.clone() ** 3, [np.array([0.5, 1.5])], np.random.default_rng(0))


def test_in_place_methods_follow_the_rules_of_augmented_assignment():
    x = leaf([1.0, 2.0])
    for method, args in [("add_", (1.0,)), ("mul_", (2.0,)), ("zero_", ()), ("fill_", (1.0,)),
                         ("copy_", ([3.0, 4.0],)), ("sub_", (1.0,)), ("div_", (2.0,)),
                         ("pow_", (2.0,))]:
        with pytest.raises(RuntimeError, match="leaf tensor that requires grad is being used in "
                                               "an in-place operation"):
            getattr(x, method)(*args)
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])  # nothing half-done
    # on a tensor in a graph: recorded, the gradient is the functional one's
    y = x * 1.0
    assert y.add_(x, alpha=2.0) is y
    y.mul_(x).sub_(1.0, alpha=3.0).div_(2.0).pow_(2.0)
    y.sum().backward()
    xv = x.numpy()
    # y = ((3x * x - 3) / 2) ** 2, dy/dx = 2 * (3x^2 - 3)/2 * 3x
    np.testing.assert_allclose(x.grad.numpy(), (3 * xv ** 2 - 3) * 3 * xv)


def test_zero_fill_and_copy_in_a_graph():
    x = leaf([1.0, 2.0])
    s = leaf([0.5, -1.0])
    z = x * 1.0
    z.zero_()
    np.testing.assert_array_equal(z.numpy(), [0.0, 0.0])
    w = x * 1.0
    w.copy_(s * 2.0)  # the gradient reaches s, not x
    (z + w * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * s.numpy())
    np.testing.assert_allclose(s.grad.numpy(), 2 * x.numpy())
    q = x * 1.0
    q.fill_(np.inf)
    (q * 0.0 + x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * s.numpy() + 1.0)


def test_in_place_methods_under_no_grad_and_on_plain_tensors():
    x = leaf([1.0, 2.0])
    with tg.no_grad():
        x.mul_(3.0).add_(1.0)
        x.grad = np.ones(2)
        x.grad.zero_()
    np.testing.assert_array_equal(x.numpy(), [4.0, 7.0])
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    i = tg.tensor([1, 2])
    i.fill_(3.7)
    np.testing.assert_array_equal(i.numpy(), [3, 3])
    with pytest.raises(TypeError, match="cannot cast float64 to the tensor's int64"):
        i.add_(0.5)
    with pytest.raises(ValueError, match="would change the shape"):
        tg.tensor([1.0, 2.0]).add_(np.ones((3, 2)))


def test_in_place_write_is_seen_by_a_graph_that_saved_the_value():
    # unrecorded write into a value a graph saved: PyTorch's in-place error
    x = leaf([1.0, 2.0])
    d = x.detach()
    y = (x * x).sum()
    d.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_sigmoid_is_expit():
    x = leaf([-1.0, 0.0, 3.0])
    tg.sigmoid(x).sum().backward()
    s = 1 / (1 + np.exp(-x.numpy()))
    np.testing.assert_allclose(x.grad.numpy(), s * (1 - s), rtol=1e-14)


# -- what NumPy's protocols cannot route to tapegrad --------------------------------------
@pytest.mark.parametrize("call", [
    lambda a, b: np.array([a, b]),
    lambda a, b: np.mean([a, b]),
    lambda a, b: np.asarray([a, b]),
    lambda a, b: np.r_[a, b],
    lambda a, b: np.sum([a, b], axis=0),
])
def test_lists_of_tensors_raise_saying_to_stack(call):
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    with pytest.raises(RuntimeError, match=r"converted to a NumPy array.*tg\.stack"):
        call(a, b)
    # what to write instead
    np.testing.assert_allclose(np.mean(tg.stack([a, b]), axis=0).numpy(), [2.0, 3.0])


def test_a_plain_tensor_updated_with_one_that_requires_grad_joins_the_graph():
    x = leaf([1.0, 2.0])
    for update in (lambda z: z.__iadd__(x), lambda z: z.add_(x, alpha=3.0),
                   lambda z: z.mul_(x), lambda z: z.copy_(x * 2.0)):
        z = tg.ones(2)
        update(z)
        assert z.requires_grad and z.grad_fn is not None
    z = tg.ones(2)
    z += x
    z *= x
    z.sum().backward()
    # z = (1 + x) x: dz/dx = 1 + 2x
    np.testing.assert_allclose(x.grad.numpy(), 1 + 2 * x.numpy())
    with tg.no_grad():  # no graph: a value write, z stays plain
        w = tg.ones(2)
        w += x
    assert not w.requires_grad
    np.testing.assert_array_equal(w.numpy(), [2.0, 3.0])
