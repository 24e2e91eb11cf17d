"""Shared test helpers and the independent oracle: central finite differences
in float64.

``check_vjp`` compares the VJP tapegrad computes for a random seed ``v``
with the directional derivative of ``<v, f(x)>`` along random directions,
as HIPS autograd's ``check_grads`` does: one scalar per (input, direction),
cheap enough to run on every op for many drawn shapes.
"""
import contextlib
import threading

import numpy as np

import tapegrad as tg

RTOL = 1e-12


def close(actual, expected, rtol=RTOL, atol=1e-14):
    """assert_allclose for tensors or arrays, tight by default (float64)."""
    actual = actual.numpy() if isinstance(actual, tg.Tensor) else np.asarray(actual)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


@contextlib.contextmanager
def record_by_record():
    """Backwards inside sweep record by record: no run of large elementwise
    records is fused (tapegrad/engine/fused.py), the reference the fused
    sweep must match bit for bit."""
    from tapegrad.engine import fused as fused_backward
    saved = fused_backward.runs
    fused_backward.runs = lambda *a: []
    try:
        yield
    finally:
        fused_backward.runs = saved


def compiled_grads(f, xs, fused=True, seed=None, retain=False, twice=False):
    """The gradients of ``f(*leaves)`` at arrays ``xs``, every kernel
    compiled: the backward's runs fused, or swept record by record
    (``fused=False``); seeded with ``seed``; the graph retained (``retain``),
    or swept twice, accumulating (``twice``).  Copies, and zeros of x's shape
    and dtype for a leaf the output does not reach."""
    from tapegrad.kernels import interpret
    leaves = [tg.tensor(x, requires_grad=True) for x in xs]
    with contextlib.ExitStack() as stack:
        stack.enter_context(interpret.mode(0))
        if not fused:
            stack.enter_context(record_by_record())
        y = f(*leaves)
        y.backward(seed, retain_graph=retain or twice)
        if twice:
            y.backward(seed)
    return [np.zeros_like(x) if t.grad is None else t.grad.numpy().copy()
            for x, t in zip(xs, leaves)]


def leaf(data):
    """A float64 leaf that requires grad."""
    return tg.tensor(np.asarray(data, dtype=np.float64), requires_grad=True)


def in_fresh_thread(fn):
    """Run fn on a new thread, so it gets a tape no other test has touched."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # re-raised on the calling thread
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


@contextlib.contextmanager
def sweep_dtypes():
    """Within the block, the dtype of each backward's adjoints, one entry per
    sweep as it starts (float32 for a float32 sweep: autograd.Adjoints)."""
    from tapegrad.engine import backward as AG
    seen = []
    real = AG.Adjoints.tape_arrays

    def spy(adj, tape):
        seen.append(adj.A.dtype)
        return real(adj, tape)
    AG.Adjoints.tape_arrays = spy
    try:
        yield seen
    finally:
        AG.Adjoints.tape_arrays = real


def _plain_forward(fn, arrays):
    with tg.no_grad():
        out = fn(*[tg.tensor(a) for a in arrays])
    return np.asarray(out.numpy() if isinstance(out, tg.Tensor) else out, dtype=np.float64)


def check_vjp(fn, arrays, rng, eps=1e-6, rtol=1e-5, atol=1e-7, directions=2,
              expect_name=None):
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    leaves = [tg.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*leaves)
    assert isinstance(y, tg.Tensor) and y.requires_grad
    if expect_name is not None:
        assert _names_reaching(y) >= {expect_name + "Backward"}, \
            f"{expect_name} was not recorded; graph has {_names_reaching(y)}"
    ref = _plain_forward(fn, arrays)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-12, atol=0)
    v = rng.standard_normal(y.shape)
    y.backward(v)
    for i, a in enumerate(arrays):
        g = leaves[i].grad
        g = np.zeros_like(a) if g is None else g.numpy()
        assert g.shape == a.shape and g.dtype == np.float64
        for _ in range(directions):
            d = rng.standard_normal(a.shape)
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[i] = a + eps * d
            lo[i] = a - eps * d
            num = (np.sum(v * _plain_forward(fn, hi)) - np.sum(v * _plain_forward(fn, lo))) / (2 * eps)
            ana = np.sum(g * d)
            assert abs(ana - num) <= atol + rtol * max(abs(num), abs(ana)), \
                f"input {i}: analytic {ana!r} vs numerical {num!r}"


def check_hvp(fn, arrays, rng, eps=1e-5, rtol=1e-5):
    """Second order: ``tg.hvp`` of a scalar made from ``fn``'s output (a
    weighted sum plus a weighted sum of squares, so linear functions have a
    nonzero Hessian too) against central differences of ``tg.grad`` along
    random tangents."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]

    def f(*xs):
        y = fn(*xs)
        w = np.arange(1, int(np.prod(np.shape(y))) + 1, dtype=float).reshape(np.shape(y)) * 0.1
        return (w * y).sum() + 0.25 * (np.sqrt(w) * y * y).sum()

    ts = [rng.standard_normal(a.shape) for a in arrays]
    _, hvs = tg.hvp(f, tuple(arrays), tuple(ts))
    g = tg.grad(f, argnums=tuple(range(len(arrays))))
    plus = g(*[a + eps * t for a, t in zip(arrays, ts)])
    minus = g(*[a - eps * t for a, t in zip(arrays, ts)])
    for h, p, m in zip(hvs, plus, minus):
        e = (p - m) / (2 * eps)
        scale = 1.0 + np.abs(e).max(initial=0.0)
        np.testing.assert_allclose(h, e, rtol=rtol, atol=rtol * scale)


def _names_reaching(y):
    seen, out, stack = set(), set(), [y.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        out.add(n.name())
        stack.extend(f for f, _ in n.next_functions)
    return out


def numpy_value(f, x):
    """NumPy's value of the scalar NumPy function f at x (on a copy: no
    program may write into its input)."""
    y = f(np.array(x, dtype=np.float64, copy=True))
    assert np.ndim(y) == 0
    return float(y)


def central_differences(f, x, eps=1e-4, indices=None):
    """The gradient of the scalar NumPy function f at x by the 5-point central
    difference (error O(eps**4)), at the flat indices given (all by default)."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros(x.shape)
    flat = g.reshape(-1)
    for i in range(x.size) if indices is None else indices:
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        flat[i] = (8.0 * (numpy_value(f, x + e) - numpy_value(f, x - e))
                   - (numpy_value(f, x + 2 * e) - numpy_value(f, x - 2 * e))) / (12 * eps)
    return g

