"""Values that would leave the graph without their gradient.

1. A tensor being differentiated turned into a Python number (``float(t)``,
   ``math.sin(t)``, ``t.item()``, ``out[i] = t``, ...) raises
   ConcretizationError inside a function transform or a trace (JAX's rule);
   elsewhere ``float(t)`` warns, as PyTorch's does.
2. A NumPy masked array meeting a tensor that requires grad is refused: the
   value may follow the mask, the gradient would not.
3. ``retain_grad`` follows its tensor through in-place writes (PyTorch).
"""
import math
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.engine.backward import in_transform

X = np.array([0.3, 1.7])


def _want(x):
    """d/dx of x[1] * sin(x[0])."""
    return np.array([x[1] * np.cos(x[0]), np.sin(x[0])])


# -- 1. Python numbers out of a differentiated tensor ---------------------------------
def test_the_issue_example_raises_and_its_fix_differentiates():
    with pytest.raises(tg.ConcretizationError) as e:
        tg.grad(lambda x: x[1] * math.sin(x[0]))(X)
    msg = str(e.value)
    for part in ("float(t)", "math.sin(t)", "shape ()", "np.sin(t)", "tg.sin(t)",
                 "float(t.detach())", "logging or control flow", "tg.grad"):
        assert part in msg, part
    assert isinstance(e.value, RuntimeError)
    assert not in_transform()  # the transform's frame is gone after the error
    np.testing.assert_allclose(tg.grad(lambda x: x[1] * np.sin(x[0]))(X), _want(X))
    np.testing.assert_allclose(tg.grad(lambda x: x[1] * tg.sin(x[0]))(X), _want(X))


def _store(t):
    out = np.zeros(2)
    out[1] = t
    return out[1]


#: every way a one-element tensor becomes a Python number, and the op the
#: error names
CONVERSIONS = {
    "float": (float, "float(t)"),
    "int": (int, "int(t)"),
    "item": (lambda t: t.item(), "t.item()"),
    "tolist": (lambda t: t.tolist(), "t.tolist()"),
    "np.float64": (np.float64, None),  # float(t), or NumPy's conversion of a 0-d array
    "math.sin": (math.sin, "float(t)"),
    "math.floor": (math.floor, "float(t)"),
    "complex": (complex, "float(t)"),
    "out[i] = t": (_store, "float(t)"),
}


def _f(conv):
    return lambda x: (x * conv(x[0])).sum() + (x ** 2).sum()


#: the transforms, each called on a function of one float vector
TRANSFORMS = {
    "grad": lambda f: tg.grad(f)(X),
    "value_and_grad": lambda f: tg.value_and_grad(f)(X),
    "jacobian": lambda f: tg.jacobian(f)(X),
    "jacobian_forward": lambda f: tg.jacobian(f, mode="forward")(X),
    "hessian": lambda f: tg.hessian(f)(X),
    "vjp": lambda f: tg.vjp(f, X)[1](1.0),
    "jvp": lambda f: tg.jvp(f, (X,), (np.ones(2),)),
    "jacfwd": lambda f: tg.jacfwd(f)(X),
    "hvp": lambda f: tg.hvp(f, (X,), (np.ones(2),)),
    "grad_of_grad": lambda f: tg.grad(lambda x: tg.grad(f)(x).sum())(X),
    "trace": lambda f: tg.trace(f, X),
}


@pytest.mark.parametrize("how", sorted(TRANSFORMS))
@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_conversions_raise_inside_every_transform(name, how):
    conv, what = CONVERSIONS[name]
    with pytest.raises((tg.ConcretizationError, ValueError)) as e:
        TRANSFORMS[how](_f(conv))
    err = e.value
    if name == "out[i] = t":
        # NumPy turns any error of float(t) into "setting an array element with
        # a sequence" (a tensor has __getitem__), raised from tapegrad's
        err = err.__cause__
    assert isinstance(err, tg.ConcretizationError)
    msg = str(err)
    assert "requires grad (shape ())" in msg
    assert "detach()" in msg
    if what is not None:
        assert msg.startswith(what) and "np.sin(t)" in msg
        assert ("tg.trace" in msg) == (how == "trace")
    assert not in_transform()


@pytest.mark.parametrize("how", sorted(TRANSFORMS))
def test_arrays_out_of_a_transform_raise_the_same_class(how):
    def f(x):
        out = np.zeros(3)
        out[1:3] = x  # NumPy converts through __array__
        return (x * out[1:3]).sum()
    with pytest.raises(tg.ConcretizationError, match="converted to a NumPy array"):
        TRANSFORMS[how](f)


@pytest.mark.parametrize("how", sorted(TRANSFORMS))
def test_detached_values_and_branches_keep_working(how):
    def f(x):
        s = float(x[0].detach()) + x[1].detach().item() + sum(x.detach().tolist())
        if x.sum() > 0:  # bool(): control flow on the value, guarded by a trace
            return (x * s).sum() + (x ** 2).sum()
        return x.sum()
    TRANSFORMS[how](f)  # no error
    s = 2 * X.sum()
    if how == "grad":
        np.testing.assert_allclose(tg.grad(f)(X), s + 2 * X)


def test_no_grad_inside_a_transform_converts_quietly():
    def f(x):
        with tg.no_grad():
            s = float(x[0]) + x[1].item()
        return (x * s).sum()
    np.testing.assert_allclose(tg.grad(f)(X), np.full(2, X.sum()))


def test_after_the_error_the_tape_and_later_gradients_are_fine():
    x = tg.tensor(X, requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(tg.ConcretizationError):
        tg.grad(lambda z: z[1] * math.sin(z[0]))(X)
    y.backward()  # a graph recorded before the error
    np.testing.assert_allclose(x.grad.numpy(), 2 * X)
    np.testing.assert_allclose(tg.grad(lambda z: z[1] * np.sin(z[0]))(X), _want(X))
    assert float(x.detach()[0]) == X[0]


def test_trace_guards_detached_numbers_and_refuses_traced_ones():
    with pytest.raises(tg.ConcretizationError, match="tg.trace"):
        tg.trace(lambda x: x * float(x.sum()), X)
    ft = tg.trace(lambda x: (x * float(x.sum().detach())).sum(), X)
    x2 = np.array([1.0, 2.0])
    v, g = ft.value_and_grad(x2)
    assert v == pytest.approx(x2.sum() ** 2)
    np.testing.assert_allclose(g, np.full(2, x2.sum()))  # the number is a constant
    assert ft.retraces == 1  # its guard saw a different value


def test_complex_item_inside_a_transform_raises():
    def f(z):
        c = z.sum().item()
        return (np.abs(z) ** 2).sum() * abs(c)
    with pytest.raises(tg.ConcretizationError, match=r"t\.item\(\)"):
        tg.grad(f)(np.array([1.0 + 1.0j, 2.0]))


@pytest.mark.parametrize("name", ["float", "math.sin", "out[i] = t"])
def test_outside_transforms_a_warning_names_the_callers_line(name):
    conv, what = CONVERSIONS[name]
    x = tg.tensor(X, requires_grad=True)
    with pytest.warns(UserWarning, match="Converting a tensor that requires grad") as w:
        v = conv(x[0] * 2.0)
    assert v == conv(2 * X[0])
    assert w[0].filename == __file__ and what in str(w[0].message)


def test_no_warning_where_no_gradient_is_dropped():
    x = tg.tensor(X, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        float(tg.tensor(X)[0])
        x.detach()[0].item()
        int(x[0].detach())
        x.tolist()  # explicit requests for values, quiet as PyTorch's
        (x * 2.0)[1].item()
        int(x[1] * 2.0)
        with tg.no_grad():
            float(x[0])
            (x * 2.0)[1].item()


def test_outside_transforms_the_value_is_a_constant_as_before():
    x = tg.tensor(X, requires_grad=True)
    with pytest.warns(UserWarning):
        y = x[1] * math.sin(x[0])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, np.sin(X[0])])


def test_np_asarray_raises_the_new_class_which_is_a_runtime_error():
    x = tg.tensor(X, requires_grad=True)
    with pytest.raises(tg.ConcretizationError):
        np.asarray(x)
    with pytest.raises(RuntimeError):
        np.asarray(x * 2.0)
    assert issubclass(tg.ConcretizationError, RuntimeError)
    assert "ConcretizationError" in tg.__all__


# -- 2. masked arrays ---------------------------------------------------------------------
C = np.array([1.0, 2.0, 3.0])
MASK = np.array([False, True, False])


def _m():
    return np.ma.masked_array(C, MASK)


def _inplace_add(x):
    y = x * 1.0
    y += _m()
    return y


MASKED = {
    "t * m": lambda x: x * _m(),
    "m * t": lambda x: _m() * x,
    "t + m": lambda x: x + _m(),
    "m - t": lambda x: _m() - x,
    "m / t": lambda x: _m() / x,
    "m ** t": lambda x: _m() ** x,
    "t @ m": lambda x: x @ _m(),
    "m @ t": lambda x: _m() @ x,
    "tg.sin(t * m)": lambda x: tg.sin(x * _m()),
    "tg.multiply(m, t)": lambda x: tg.multiply(_m(), x),
    "np.multiply(m, t)": lambda x: np.multiply(_m(), x),
    "np.multiply(t, m)": lambda x: np.multiply(x, _m()),
    "np.maximum(t, m)": lambda x: np.maximum(x, _m()),
    "np.dot(m, t)": lambda x: np.dot(_m(), x),
    "tg.dot(t, m)": lambda x: tg.dot(x, _m()),
    "np.einsum": lambda x: np.einsum("i,i->", x, _m()),
    "np.concatenate": lambda x: np.concatenate([x, _m()]),
    "tg.stack": lambda x: tg.stack([x, _m()]),
    "tg.where(c, t, m)": lambda x: tg.where(C > 1, x, _m()),
    "tg.where(mask cond)": lambda x: tg.where(_m() > 1, x, 0.0),
    "np.ma.multiply(m, t)": lambda x: np.ma.multiply(_m(), x),
    "np.ma.sin(t)": lambda x: np.ma.sin(x),
    "t * masked element": lambda x: x * _m()[1],
    "t += m": _inplace_add,
    "custom elementwise": lambda x: tg.elementwise(
        lambda a, b: a * b, derivative=lambda a, b, y: (b, a))(x, _m()),
}


@pytest.mark.parametrize("name", sorted(MASKED))
def test_masked_operands_are_refused_naming_the_mask_and_the_fix(name):
    x = tg.tensor([0.1, 0.2, 0.3], requires_grad=True)
    with pytest.raises(TypeError) as e:
        MASKED[name](x)
    msg = str(e.value)
    assert "masked array" in msg and "np.ma.filled(m, " in msg and "m.data" in msg, msg
    assert "tg.where(m.mask" in msg
    if "(np.ma" not in msg:
        assert "1 of 3 elements masked" in msg or "1 of 1 elements masked" in msg
    assert x.grad is None
    y = (x * np.ma.filled(_m(), 0.0)).sum()  # the fix; the tape is fine
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 3.0])


def test_the_fixes_in_the_message_give_the_masked_gradient():
    m = _m()
    g1 = tg.grad(lambda x: tg.sin(x * np.ma.filled(m, 0.0)).sum())(C)
    g2 = tg.grad(lambda x: tg.where(m.mask, 0.0, tg.sin(x * m.data)).sum())(C)
    want = np.where(MASK, 0.0, C * np.cos(C * C))
    np.testing.assert_allclose(g1, want)
    np.testing.assert_allclose(g2, want)


def test_masked_arrays_without_a_gradient_are_left_to_numpy():
    """Nothing is differentiated, so no gradient can disagree with the mask:
    NumPy's masked arithmetic runs as it did."""
    tg.tensor(C) * _m()
    _m() * tg.tensor(C)
    with tg.no_grad():
        x = tg.tensor(C, requires_grad=True)
        z = _m() * x
    assert np.ma.is_masked(z)


# -- 3. retain_grad through in-place writes -----------------------------------------------
def _h():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2.0
    return x, h


def test_retain_grad_follows_the_tensor_through_an_in_place_write():
    x, h = _h()
    h.retain_grad()
    h *= 3.0
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0, 36.0])  # 2 h, h = 6 x
    np.testing.assert_allclose(x.grad.numpy(), [72.0, 144.0, 216.0])
    assert h.retains_grad


@pytest.mark.parametrize("anomaly", [False, True])
def test_retain_grad_after_several_writes_and_with_anomaly_mode(anomaly):
    x, h = _h()
    h.retain_grad()
    with tg.detect_anomaly(anomaly):
        h *= 3.0
        h += 1.0
        (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [14.0, 26.0, 38.0])


def test_retain_grad_counts_only_uses_of_the_current_value():
    x, h = _h()
    h.retain_grad()
    a = h * 1.0  # a use of the old value
    h *= 3.0
    (h * h + a).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0, 36.0])
    np.testing.assert_allclose(x.grad.numpy(), [74.0, 146.0, 218.0])


def test_retain_grad_through_item_assignment_and_a_view():
    x, h = _h()
    h.retain_grad()
    h[0] = 5.0
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [10.0, 8.0, 12.0])
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 16.0, 24.0])
    x, h = _h()
    h.retain_grad()
    v = h[0:2]
    v *= 3.0  # writes h through its view
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0, 12.0])  # PyTorch 2.13's
    np.testing.assert_allclose(x.grad.numpy(), [72.0, 144.0, 24.0])


def test_retain_grad_of_a_graph_recorded_before_the_write():
    x, h = _h()
    h.retain_grad()
    loss = (h * 5.0).sum()
    h *= 3.0
    loss.backward()  # reaches only the old value: h's current one has no gradient
    assert h.grad is None
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 10.0, 10.0])
    x, h = _h()
    h.retain_grad()
    loss = (h * 5.0).sum()
    h *= 3.0
    (loss + h.sum()).backward()
    np.testing.assert_allclose(h.grad.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [16.0, 16.0, 16.0])


def test_retain_grad_accumulates_over_backwards_after_the_write():
    x, h = _h()
    h.retain_grad()
    h *= 3.0
    y = (h * h).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(h.grad.numpy(), [24.0, 48.0, 72.0])


def test_a_write_without_a_record_keeps_retain_grad_where_it_was():
    x, h = _h()
    h.retain_grad()
    with tg.no_grad():
        h *= 3.0
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0, 36.0])
    np.testing.assert_allclose(x.grad.numpy(), [24.0, 48.0, 72.0])


def test_hooks_stay_with_the_version_they_were_registered_on():
    x, h = _h()
    before, after = [], []
    h.register_hook(lambda g: before.append(g.numpy().copy()))
    h *= 3.0
    h.register_hook(lambda g: after.append(g.numpy().copy()))
    h.retain_grad()
    (h * h).sum().backward()
    np.testing.assert_allclose(before[0], [36.0, 72.0, 108.0])  # d loss / d (old h)
    np.testing.assert_allclose(after[0], [12.0, 24.0, 36.0])
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0, 36.0])
    x, h = _h()
    h.register_hook(lambda g: g * 10.0)  # replaces the old version's gradient
    h.retain_grad()
    h *= 3.0
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [12.0, 24.0, 36.0])
    np.testing.assert_allclose(x.grad.numpy(), [720.0, 1440.0, 2160.0])


def test_autograd_grad_after_retain_grad_and_a_write():
    x, h = _h()
    h.retain_grad()
    h *= 3.0
    y = (h * h).sum()
    g, = tg.autograd.grad(y, [x], retain_graph=True)
    np.testing.assert_allclose(g.numpy(), [72.0, 144.0, 216.0])
    gh, = tg.autograd.grad(y, [h], retain_graph=True)  # the current value's gradient
    np.testing.assert_allclose(gh.numpy(), [12.0, 24.0, 36.0])
    y.backward()  # the retain still follows h
    # as PyTorch's: both autograd.grad calls filled the retained gradient too
    np.testing.assert_allclose(h.grad.numpy(), [36.0, 72.0, 108.0])
