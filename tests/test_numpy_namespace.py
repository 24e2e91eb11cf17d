"""``tapegrad.numpy``: NumPy's names, differentiable.

Checked against NumPy itself (values on plain arrays and on tensors) and
against float64 central differences (gradients through lists of tensors,
``r_``/``c_``/``append``/``block``/``make_diagonal``), plus the public-names
check and that ``import tapegrad`` leaves this namespace unimported.
"""
import subprocess
import sys

import numpy
import pytest

import tapegrad as tg
import tapegrad.numpy as np

RNG = numpy.random.default_rng(7)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((4,))
S = RNG.standard_normal((3, 3)) + 3.0 * numpy.eye(3)

#: (name, function of the namespace, arguments): the namespace's value on plain
#: arrays is NumPy's, on tensors NumPy's value as a tensor
VALUE_CASES = [
    ("sum", lambda m: m.sum(A, axis=0), ()),
    ("mean", lambda m: m.mean(A, axis=1, keepdims=True), ()),
    ("std", lambda m: m.std(A), ()),
    ("var", lambda m: m.var(A, axis=0, ddof=1), ()),
    ("prod", lambda m: m.prod(B), ()),
    ("dot", lambda m: m.dot(A, B), ()),
    ("sin", lambda m: m.sin(A), ()),
    ("exp", lambda m: m.exp(B), ()),
    ("tanh", lambda m: m.tanh(A), ()),
    ("where", lambda m: m.where(A > 0, A, 0.5 * A), ()),
    ("concatenate", lambda m: m.concatenate([A, A], axis=1), ()),
    ("stack", lambda m: m.stack([B, B]), ()),
    ("transpose", lambda m: m.transpose(A), ()),
    ("reshape", lambda m: m.reshape(A, (4, 3)), ()),
    ("cumsum", lambda m: m.cumsum(B), ()),
    ("einsum", lambda m: m.einsum("ij,j->i", A, B), ()),
    ("linalg.inv", lambda m: m.linalg.inv(S), ()),
    ("linalg.det", lambda m: m.linalg.det(S), ()),
    ("linalg.norm", lambda m: m.linalg.norm(A), ()),
    ("fft.rfft", lambda m: m.fft.rfft(B), ()),
    ("outer", lambda m: m.outer(B, B), ()),
    ("clip", lambda m: m.clip(A, -0.5, 0.5), ()),
    ("maximum", lambda m: m.maximum(A, 0.0), ()),
    ("logaddexp", lambda m: m.logaddexp(A, 1.0), ()),
    ("trace", lambda m: m.trace(S), ()),
    ("diag", lambda m: m.diag(B), ()),
]


def _tensorize(fn):
    """``fn`` run with A, B, S as tensors (rebinding the module globals)."""
    g = globals()
    saved = {k: g[k] for k in ("A", "B", "S")}
    try:
        for k in saved:
            g[k] = tg.tensor(saved[k], requires_grad=True)
        return fn(np)
    finally:
        g.update(saved)


def _value(x):
    if isinstance(x, (tg.Tensor, tg.ComplexTensor)):
        return x.detach().numpy()
    return numpy.asarray(x)


@pytest.mark.parametrize("name,fn,_", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_match_numpy(name, fn, _):
    expected = fn(numpy)
    plain = fn(np)
    assert type(plain) is type(expected)  # plain in: NumPy's own result
    numpy.testing.assert_allclose(plain, expected, rtol=1e-13, atol=1e-13)
    out = _tensorize(fn)
    assert isinstance(out, (tg.Tensor, tg.ComplexTensor)), name  # tensors in: a tensor out
    numpy.testing.assert_allclose(_value(out), expected, rtol=1e-12, atol=1e-12)


def _central(f, x, eps=1e-6):
    """Central differences of scalar ``f`` at float64 array ``x``."""
    x = numpy.array(x, dtype=float)
    g = numpy.zeros_like(x)
    for i in numpy.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (float(_value(f(xp))) - float(_value(f(xm)))) / (2 * eps)
    return g


#: scalar functions of x (shape (3,)) built from lists holding tensors
GRAD_CASES = [
    ("array", lambda x: np.sum(np.array([x[0] * x[1], np.sin(x[2]), 2.0]) ** 2)),
    ("array-nested", lambda x: np.sum(np.array([[x[0], 1.0], [x[1] * x[2], x[0]]]) @ x[:2])),
    ("array-tuple", lambda x: np.sum(np.array(((x[0], x[1]), (3.0, x[2]))) ** 3)),
    ("asarray", lambda x: np.prod(np.asarray([x[0], x[1] + 1.0, x[2]]))),
    ("mean-list", lambda x: np.mean([x[0], x[1] * x[2], 4.0])),
    ("sum-list", lambda x: np.sum([np.exp(x[0]), x[1], x[2] ** 2])),
    ("std-tuple", lambda x: np.std((x[0], x[1], x[2] * 2.0))),
    ("r_", lambda x: np.sum(np.r_[x, 0.5, x[:1] ** 2, numpy.ones(2)] ** 2)),
    ("r_-directive",
     lambda x: np.sum(np.r_["0,2", x, numpy.arange(3.0)] * numpy.arange(6.0).reshape(2, 3))),
    ("c_", lambda x: np.sum(np.c_[x, x ** 2, numpy.ones(3)] @ numpy.array([1.0, 2.0, 3.0]))),
    ("append", lambda x: np.sum(np.append(x, [x[0] * x[1], 1.5]) ** 2)),
    ("concatenate-mixed", lambda x: np.sum(np.concatenate([x, numpy.ones(2), [x[2], 2.0]]) ** 3)),
    ("vstack-mixed", lambda x: np.sum(np.vstack([x, numpy.ones(3)]) ** 2)),
    ("linalg.norm-list", lambda x: np.linalg.norm([x[0], x[1] + 2.0, x[2]])),
    ("block", lambda x: np.sum(np.block([[x[:2], 1.0], [numpy.zeros(2), x[2]]]) ** 2)),
    ("make_diagonal", lambda x: np.sum(np.make_diagonal(x, axis1=-1, axis2=-2) @ x)),
    ("polyval-list", lambda x: np.polyval([x[0], x[1], x[2]], 0.7)),
]


@pytest.mark.parametrize("name,f", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_through_lists(name, f):
    x0 = numpy.array([0.3, -0.8, 1.1])
    g = tg.grad(f)(x0)
    numpy.testing.assert_allclose(g, _central(f, x0), rtol=1e-6, atol=1e-8)
    # the same function on plain values is NumPy's
    assert not isinstance(f(x0), (tg.Tensor, tg.ComplexTensor))


def test_lists_of_tensors_match_numpy_values():
    t1 = tg.tensor([1.0, 2.0], requires_grad=True)
    t2 = tg.tensor([3.0, 4.0])
    a = np.array([t1, t2])
    assert isinstance(a, tg.Tensor) and a.shape == (2, 2)
    numpy.testing.assert_array_equal(a.detach().numpy(), [[1.0, 2.0], [3.0, 4.0]])
    # floats and ints mixed in, nested: NumPy's shape and float64
    b = np.array([[t1[0], 1], [2.5, t2[1]]])
    assert b.shape == (2, 2) and b.dtype == numpy.float64
    numpy.testing.assert_array_equal(b.detach().numpy(), [[1.0, 1.0], [2.5, 4.0]])
    assert np.array([t1, t2], ndmin=3).shape == (1, 2, 2)
    assert np.asarray(t1) is t1
    assert np.array(t1) is not t1
    for key in ((t1, 0.0, numpy.ones(2)), (t1, slice(0, 3)), ("0,2", t1, t2),
                ("1", t1[None], t2[None])):
        plain = tuple(k.detach().numpy() if isinstance(k, tg.Tensor) else k for k in key)
        numpy.testing.assert_array_equal(np.r_[key].detach().numpy(), numpy.r_[plain])
    numpy.testing.assert_array_equal(np.c_[t1, t2, numpy.zeros(2)].detach().numpy(),
                                     numpy.c_[[1.0, 2.0], [3.0, 4.0], numpy.zeros(2)])
    numpy.testing.assert_array_equal(np.append(t1, [t2[0], 7]).detach().numpy(), [1, 2, 3, 7])
    assert float(np.mean([t1[0], t2[1]]).detach()) == 2.5
    # plain lists stay NumPy's
    assert type(np.array([1.0, 2.0])) is numpy.ndarray
    assert type(np.r_[1.0, numpy.ones(2)]) is numpy.ndarray
    with pytest.raises(ValueError, match="same shape"):
        np.array([t1, tg.tensor([1.0, 2.0, 3.0])])


def test_zeros_like_and_constants():
    t = tg.tensor(A, requires_grad=True)
    z = np.zeros_like(t)
    assert isinstance(z, tg.Tensor) and z.shape == A.shape and not z.requires_grad
    assert np.pi == numpy.pi and np.float64 is numpy.float64 and np.newaxis is None
    assert np.sin is numpy.sin  # ufuncs are NumPy's own (reaching tapegrad by the protocol)
    assert np.random is numpy.random
    assert np.__version__ == numpy.__version__


def test_submodules_import():
    import tapegrad.numpy.fft
    import tapegrad.numpy.linalg
    import tapegrad.numpy.random as npr
    assert npr is numpy.random
    assert np.linalg is tapegrad.numpy.linalg and np.fft is tapegrad.numpy.fft
    assert np.linalg.LinAlgError is numpy.linalg.LinAlgError
    with pytest.raises(AttributeError, match="no attribute 'not_a_numpy_name'"):
        np.not_a_numpy_name  # noqa: B018


def test_every_numpy_name_exists():
    missing = [n for n in dir(numpy) if not n.startswith("_") and not hasattr(np, n)]
    assert not missing, missing
    assert set(n for n in dir(numpy) if not n.startswith("_")) <= set(dir(np))
    for sub, ours in ((numpy.linalg, np.linalg), (numpy.fft, np.fft)):
        missing = [n for n in dir(sub) if not n.startswith("_") and not hasattr(ours, n)]
        assert not missing, (sub.__name__, missing)


def test_import_tapegrad_does_not_import_the_namespace():
    code = ("import sys, tapegrad; "
            "print(sorted(m for m in sys.modules if m.startswith('tapegrad.numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_migration_page_examples_run():
    import pathlib
    import re
    page = pathlib.Path(__file__).resolve().parent.parent / "docs" / "from_autograd.md"
    blocks = [b for b in re.findall(r"```python\n(.*?)\n```", page.read_text(), re.S)
              if "autograd" not in b]
    assert blocks
    for block in blocks:
        scope = {}
        exec(compile(block, str(page), "exec"), scope)
    assert scope["g"].shape == (3,)


def test_what_the_autograd_suite_found():
    # a 0-d complex tensor's value is an ndarray (np.asarray of it used to fail)
    z = tg.complex(tg.tensor(1.0), tg.tensor(2.0))
    assert type(z.numpy()) is numpy.ndarray and numpy.asarray(z).shape == ()
    # create_graph through c ** y with c == 0: the kernels' limit, 0 (was a math domain error)
    from tapegrad.autograd import grad as agrad
    y = tg.tensor(0.49, requires_grad=True)
    (g,) = agrad(np.power(0.0, y), y, create_graph=True)
    assert float(g.detach()) == 0.0
    y = tg.tensor(0.49, requires_grad=True)
    (g,) = agrad(np.power(2.0, y), y, create_graph=True)
    (h,) = agrad(g, y)
    numpy.testing.assert_allclose(float(h), 2.0 ** 0.49 * numpy.log(2.0) ** 2, rtol=1e-13)


def test_helpers_use_the_builtins_whatever_was_looked_up_before():
    # looking up np.max or np.any binds NumPy's function in the module; the
    # namespace's own helpers (block, r_) must still use Python's builtins
    for name in ("max", "min", "any", "all", "sum", "abs", "round"):
        getattr(np, name)
    x = tg.tensor(numpy.array([1.0, 2.0, 3.0]), requires_grad=True)
    out = np.block([[x[:2], 1.0], [numpy.zeros(2), x[2]]])
    numpy.testing.assert_array_equal(out.detach().numpy(), [[1.0, 2.0, 1.0], [0.0, 0.0, 3.0]])
    numpy.testing.assert_array_equal(np.r_[x, 4.0].detach().numpy(), [1.0, 2.0, 3.0, 4.0])
