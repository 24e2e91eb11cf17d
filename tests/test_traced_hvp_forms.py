"""A traced function's ``ft.hvp`` and ``ft.jvp`` take the eager
``tg.hvp`` / ``tg.jvp`` forms -- two tuples ``(primals, tangents)`` and
``batched=`` -- besides their own ``(*args, tangents)``, and give the same
results as the eager transforms in every form."""
import numpy as np
import pytest

import tapegrad as tg

R = np.random.default_rng(4)


def f2(x, y):
    return (np.sin(x) * y[:2].sum() + x ** 3).sum() + (y * y * x[0]).sum()


X, Y = R.standard_normal(2), R.standard_normal(3)
VX, VY = R.standard_normal(2), R.standard_normal(3)


def _same(got, want):
    assert type(got) is type(want) and len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)


def test_hvp_two_inputs_every_form():
    ft = tg.trace(f2, X, Y)
    want = tg.hvp(f2, (X, Y), (VX, VY))
    for got in (ft.hvp((X, Y), (VX, VY)), ft.hvp([X, Y], [VX, VY]), ft.hvp(X, Y, (VX, VY)),
                ft.hvp((X, Y), (VX, VY), batched=False)):
        _same(got[0], want[0])
        _same(got[1], want[1])


def test_hvp_one_input_tuple_and_bare_forms():
    f = lambda x: (x ** 3).sum() * np.cos(x[0])  # noqa: E731
    ft = tg.trace(f, X)
    want = tg.hvp(f, (X,), (VX,))
    for got in (ft.hvp((X,), (VX,)), ft.hvp(X, VX), ft.hvp(X, (VX,))):
        _same(got[0], want[0])
        _same(got[1], want[1])


def test_hvp_batch_of_directions_and_batched_flag():
    ft = tg.trace(f2, X, Y)
    TX, TY = R.standard_normal((4, 2)), R.standard_normal((4, 3))
    want = tg.hvp(f2, (X, Y), (TX, TY))
    assert want[1][0].shape == (4, 2)
    for got in (ft.hvp((X, Y), (TX, TY)), ft.hvp((X, Y), (TX, TY), batched=True),
                ft.hvp(X, Y, (TX, TY))):
        _same(got[0], want[0])
        _same(got[1], want[1])
    # a batch of one direction, asked for explicitly
    got = ft.hvp((X, Y), (TX[:1], TY[:1]), batched=True)
    _same(got[1], tg.hvp(f2, (X, Y), (TX[:1], TY[:1]), batched=True)[1])
    # batched=True insists, with the eager transform's message
    with pytest.raises(ValueError, match=r"with batched=True, tangent 0 must have shape"):
        tg.hvp(f2, (X, Y), (VX, VY), batched=True)
    with pytest.raises(ValueError, match=r"with batched=True, tangent 0 must have shape"):
        ft.hvp((X, Y), (VX, VY), batched=True)


def test_hvp_float32_and_a_static_argument():
    x32 = X.astype(np.float32)
    v32 = VX.astype(np.float32)

    def g(x, k):
        return (x ** k).sum()

    ft = tg.trace(g, x32, 3)
    want = tg.hvp(lambda x: g(x, 3), (x32,), (v32,))
    # the tangents of tg.hvp's form: one per array argument, or one per primal
    for got in (ft.hvp((x32, 3), (v32,)), ft.hvp((x32, 3), (v32, None)), ft.hvp(x32, 3, v32)):
        assert got[0][0].dtype == np.float32 == want[0][0].dtype
        _same(got[0], want[0])
        _same(got[1], want[1])


def test_jvp_takes_the_same_forms():
    f = lambda x, y: np.tanh(x) * y[:2] + y[2]  # noqa: E731
    ft = tg.trace(f, X, Y)
    out, tan = tg.jvp(f, (X, Y), (VX, VY))
    for got_out, got_tan in (ft.jvp((X, Y), (VX, VY)), ft.jvp(X, Y, (VX, VY))):
        np.testing.assert_allclose(got_out, out.numpy() if isinstance(out, tg.Tensor) else out,
                                   rtol=1e-14)
        np.testing.assert_allclose(got_tan, tan, rtol=1e-13)
    TX, TY = R.standard_normal((3, 2)), R.standard_normal((3, 3))
    np.testing.assert_allclose(ft.jvp((X, Y), (TX, TY), batched=True)[1],
                               tg.jvp(f, (X, Y), (TX, TY), batched=True)[1], rtol=1e-13)


def test_wrong_counts_raise():
    ft = tg.trace(f2, X, Y)
    with pytest.raises(ValueError, match="2 traced inputs but 1 tangents"):
        ft.hvp((X, Y), (VX,))
    with pytest.raises(TypeError, match="give the arguments and then the tangents"):
        ft.hvp()
