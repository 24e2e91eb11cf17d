"""The fused reverse sweep of large eager runs that start from a full sum or
mean (engine/fused.py ``_constant_root``) and carry constant adjoints
through adds, subtractions and scalings (kernels/fused_segments.py
``seg_plan_stored``).

Every program is checked against the record-by-record sweep (equal), against
central differences of the same NumPy program in float64 along random
directions, and against PyTorch when it is installed.  The programs are
chosen so that each case of the plan occurs: constants that stay numbers,
constants written into a leaf's gradient (alone or next to an array
contribution), a constant that meets an array later (prefill), a constant
adjoint read by a VJP that needs values (fillown), ``x op x``, a seed, a
mean, retained graphs and accumulation, hooks and retained gradients on the
reduced record, and a reduced record reached from another path as well.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.engine import fused as FB
from tapegrad.kernels import interpret

from oracle import compiled_grads

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

N = FB.FUSE_MIN + 1234   # not a multiple of the block: a partial last block


def _log(x):
    return torch.log(x) if torch is not None and isinstance(x, torch.Tensor) else np.log(x)


def _sin(x):
    return torch.sin(x) if torch is not None and isinstance(x, torch.Tensor) else np.sin(x)


# name -> f(a, b, c) on tapegrad tensors, ndarrays or torch tensors alike
PROGRAMS = {
    "brief": lambda a, b, c: (3 * a + 2 * b * b + _log(c)).sum(),
    "brief_mean": lambda a, b, c: (3 * a + 2 * b * b + _log(c)).mean(),
    "linear_only": lambda a, b, c: (2.0 * a - b / 4.0 + (1.5 - c) + (-a)).sum(),
    "leaf_twice": lambda a, b, c: (a * 3.0 + a * b + a).sum(),
    "x_plus_x": lambda a, b, c: ((a + a) * 0.5 + (b - b) + c * c).sum(),
    "prefill": lambda a, b, c: _prefill(a, b),
    "const_read_by_sin": lambda a, b, c: (_sin(a * 2.0) + b).sum(),
    "deep_linear": lambda a, b, c: ((((a + b) * 2.0 - c) / 3.0 + 1.0) * -1.0).sum(),
    "mul_of_sums": lambda a, b, c: ((a + b) * (b + c) + c).mean(),
}


def _prefill(a, b):
    y = a * 2.0          # reached first as a constant (from y + ...), then by y * y
    z = y + y * y + b
    return z.sum()


def _inputs(seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, N)
    b = rng.uniform(-1.0, 1.0, N)
    c = rng.uniform(0.5, 2.0, N)
    return a, b, c


def _fused_calls(f, xs):
    calls = []
    saved = FB.sweep_run

    def spy(*a):
        calls.append(a[5] if len(a) > 5 else -1)   # the constant root, if any
        return saved(*a)
    FB.sweep_run = spy
    try:
        compiled_grads(f, xs)
    finally:
        FB.sweep_run = saved
    return calls


def _central(f, xs, grads, rng, h=1e-6):
    for _ in range(2):
        ds = [rng.standard_normal(N) for _ in xs]
        up = float(f(*[x + h * d for x, d in zip(xs, ds)]))
        dn = float(f(*[x - h * d for x, d in zip(xs, ds)]))
        fd = (up - dn) / (2 * h)
        an = sum(float(g @ d) for g, d in zip(grads, ds))
        assert abs(fd - an) <= 1e-6 * max(1.0, abs(fd)), (fd, an)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_agree_with_the_plain_sweep_differences_and_torch(name):
    f = PROGRAMS[name]
    xs = _inputs(sorted(PROGRAMS).index(name))
    fused = compiled_grads(f, xs)
    plain = compiled_grads(f, xs, fused=False)
    for g, p in zip(fused, plain):
        np.testing.assert_array_equal(g, p)
    _central(f, xs, fused, np.random.default_rng(5))
    if torch is not None:
        ts = [torch.tensor(x, requires_grad=True) for x in xs]
        f(*ts).backward()
        for g, t in zip(fused, ts):
            want = np.zeros(N) if t.grad is None else t.grad.numpy()
            np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_programs_start_the_run_from_the_constant(name):
    calls = _fused_calls(PROGRAMS[name], _inputs(0))
    assert calls and calls[-1] >= 0


def test_the_brief_example_is_exact():
    a, b, c = _inputs(1)
    ga, gb, gc = compiled_grads(PROGRAMS["brief"], (a, b, c))
    np.testing.assert_array_equal(ga, np.full(N, 3.0))
    np.testing.assert_array_equal(gb, 2.0 * b + b * 2.0)   # the sweep's two terms
    np.testing.assert_array_equal(gc, 1.0 / c)
    ma, mb, mc = compiled_grads(PROGRAMS["brief_mean"], (a, b, c))
    np.testing.assert_array_equal(ma, np.full(N, 3.0 * (1.0 / N)))
    np.testing.assert_allclose(mc, 1.0 / c / N, rtol=1e-15)


@pytest.mark.parametrize("seed", [2.5, -0.0, np.float64(1e-300)])
def test_a_seed_scales_the_constant(seed):
    xs = _inputs(3)
    f = PROGRAMS["leaf_twice"]
    fused = compiled_grads(f, xs, seed=np.asarray(seed))
    plain = compiled_grads(f, xs, fused=False, seed=np.asarray(seed))
    for g, p in zip(fused, plain):
        np.testing.assert_array_equal(g, p)


def test_nonfinite_seed_propagates_as_the_plain_sweep_does():
    xs = _inputs(4)
    for seed in (np.inf, np.nan):
        fused = compiled_grads(PROGRAMS["brief"], xs, seed=np.asarray(seed))
        plain = compiled_grads(PROGRAMS["brief"], xs, fused=False, seed=np.asarray(seed))
        for g, p in zip(fused, plain):
            np.testing.assert_array_equal(g, p)


def test_retain_graph_accumulates_and_a_third_backward_raises():
    xs = _inputs(6)
    f = PROGRAMS["mul_of_sums"]
    once = compiled_grads(f, xs)
    twice = compiled_grads(f, xs, twice=True)
    for g1, g2 in zip(once, twice):
        np.testing.assert_array_equal(g2, g1 + g1)
    A = tg.tensor(xs[0], requires_grad=True)
    with interpret.mode(0):
        y = (A * 2.0 + A).sum()
        y.backward(retain_graph=True)
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()
    np.testing.assert_array_equal(A.grad.numpy(), np.full(N, 6.0))


def test_gradients_accumulate_into_existing_grad():
    a, b, c = _inputs(7)
    A = tg.tensor(a, requires_grad=True)
    with interpret.mode(0):
        (A * 3.0 + A * A).sum().backward()
        (A * 3.0 + A * A).sum().backward()
    np.testing.assert_allclose(A.grad.numpy(), 2 * (3.0 + 2 * a), rtol=1e-15)


def test_a_hook_and_retain_grad_on_the_reduced_record():
    a, b, _ = _inputs(8)
    A, B = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    seen = []
    with interpret.mode(0):
        z = A * 2.0 + B * B
        z.retain_grad()
        z.register_hook(lambda g: (seen.append(g.numpy().copy()), g * 3.0)[1])
        z.sum().backward()
    np.testing.assert_array_equal(seen[0], np.ones(N))
    np.testing.assert_array_equal(z.grad.numpy(), np.ones(N) * 3.0)
    np.testing.assert_array_equal(A.grad.numpy(), np.full(N, 6.0))
    np.testing.assert_allclose(B.grad.numpy(), 6.0 * b, rtol=1e-15)


def test_a_hook_on_the_sum_itself():
    a, _, _ = _inputs(9)
    A = tg.tensor(a, requires_grad=True)
    with interpret.mode(0):
        s = (A * 2.0 + A * A).sum()
        s.register_hook(lambda g: g * 4.0)
        s.backward()
    np.testing.assert_allclose(A.grad.numpy(), 4.0 * (2.0 + 2 * a), rtol=1e-15)


def test_the_reduced_record_reached_from_another_path_too():
    a, b, _ = _inputs(10)
    A, B = tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True)
    with interpret.mode(0):
        z = A * 2.0 + B * B
        w = tg.concatenate([z, z])            # z is read after the sum as well
        y = z.sum() + (w * 0.5).sum()
        y.backward()
    np.testing.assert_allclose(A.grad.numpy(), np.full(N, 4.0), rtol=1e-15)
    np.testing.assert_allclose(B.grad.numpy(), 4.0 * b, rtol=1e-15)


def test_two_sums_of_one_record():
    a, _, _ = _inputs(11)
    A = tg.tensor(a, requires_grad=True)
    with interpret.mode(0):
        z = A * A + A
        y = z.sum() * 2.0 + z.mean()
        y.backward()
    np.testing.assert_allclose(A.grad.numpy(), (2.0 + 1.0 / N) * (2 * a + 1.0), rtol=1e-14, atol=1e-15)


def test_tg_grad_and_autograd_grad_of_an_intermediate():
    a, b, c = _inputs(12)
    f = PROGRAMS["brief"]
    with interpret.mode(0):
        ga, gb, gc = tg.grad(f, argnums=(0, 1, 2))(a, b, c)
        A = tg.tensor(a, requires_grad=True)
        h = A * 3.0
        y = (h + h * h).sum()
        gh, gA = tg.autograd.grad(y, [h, A])
    np.testing.assert_array_equal(np.asarray(ga), np.full(N, 3.0))
    np.testing.assert_allclose(np.asarray(gb), 4 * b, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(gc), 1 / c, rtol=1e-15)
    np.testing.assert_allclose(gh.numpy(), 1 + 6 * a, rtol=1e-14)
    np.testing.assert_allclose(gA.numpy(), 3 * (1 + 6 * a), rtol=1e-14)


def test_a_value_written_in_place_raises_and_changes_nothing():
    a, _, _ = _inputs(13)
    A = tg.tensor(a, requires_grad=True)
    with interpret.mode(0):
        h = A * 2.0
        y = (h * h + h).sum()
        with tg.no_grad():
            h += 1.0
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
    assert A.grad is None


def test_a_freed_graph_raises_on_the_second_backward():
    a, _, _ = _inputs(14)
    A = tg.tensor(a, requires_grad=True)
    with interpret.mode(0):
        y = (A * 2.0 + A * A).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()


def test_writes_through_a_numpy_view_of_a_leaf_after_recording_raise():
    a, _, _ = _inputs(15)
    base = a.copy()
    A = tg.tensor(base, requires_grad=True)
    with interpret.mode(0):
        y = (A * A * 2.0).sum()            # the product keeps A's value
        with pytest.raises(ValueError):
            A.numpy()[0] = 5.0             # read-only while the tape holds it
        y.backward()
    np.testing.assert_allclose(A.grad.numpy(), 4.0 * a, rtol=1e-15)
