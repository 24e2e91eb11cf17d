"""One compiled loop per fused run (tapegrad/engine/fused_codegen.py).

The random programs of test_fused_backward.py, on float64 and on float32
leaves, swept three ways: by the
run's own generated loop (``TAPEGRAD_FUSE_LOOPS=now``), by the shared fused
kernel (``=0``) and record by record.  The three must give the same bits,
and the generated loop must be the one that ran.  Then the rules that
decide when a loop is compiled (rent, cache, off) and what a loop's key
depends on.
"""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.engine import fused as FB
from tapegrad.engine import fused_codegen as FC
from tapegrad.kernels import interpret

import test_fused_backward as P


def _loops_run(monkeypatch):
    ran = []
    real = FC.run
    monkeypatch.setattr(FC, "run", lambda fn, p, n: (ran.append(p.key), real(fn, p, n)))
    return ran


@pytest.mark.parametrize("seed", range(16))
def test_random_programs_same_bits_as_the_shared_kernel_and_the_plain_sweep(seed, monkeypatch):
    prog, xs = P._program(seed, 10), P._inputs(seed)
    monkeypatch.setenv(FC.ENV, "0")
    shared = P._grads(prog, xs)
    plain = P._grads(prog, xs, fused=False)
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    looped = P._grads(prog, xs)
    for a, b, c in zip(looped, shared, plain):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_the_random_programs_reach_the_generated_loops(monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    for seed in range(16):
        P._grads(P._program(seed, 10), P._inputs(seed))
    assert len(set(ran)) >= 12


def _brief(k=3.0):
    rng = np.random.default_rng(0)
    a, b, c = (tg.tensor(rng.uniform(0.5, 1.5, P.N), requires_grad=True) for _ in range(3))
    with interpret.mode(0):
        (k * a + 2 * b * b + tg.log(c)).sum().backward()
    return a, b, c


def test_the_brief_example_against_closed_forms(monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    a, b, c = _brief()
    assert ran
    np.testing.assert_array_equal(a.grad.numpy(), np.full(P.N, 3.0))
    np.testing.assert_allclose(b.grad.numpy(), 4 * b.numpy(), rtol=1e-15)
    np.testing.assert_allclose(c.grad.numpy(), 1 / c.numpy(), rtol=1e-15)


def test_a_loop_is_keyed_by_structure_not_by_its_constants(monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    a, _, _ = _brief(3.0)
    a2, _, _ = _brief(5.0)
    assert len(ran) == 2 and ran[0] == ran[1]
    np.testing.assert_array_equal(a2.grad.numpy(), np.full(P.N, 5.0))


def test_off_never_compiles(monkeypatch):
    monkeypatch.setenv(FC.ENV, "0")
    ran = _loops_run(monkeypatch)
    monkeypatch.setattr(FC, "_load", lambda *a: pytest.fail("compiled with the loops off"))
    monkeypatch.setattr(FC._State, "loops", {})
    _brief()
    assert not ran


def test_rent_compiles_once_the_shared_kernel_has_spent_it(monkeypatch, tmp_path):
    monkeypatch.delenv(FC.ENV, raising=False)
    monkeypatch.setattr(FC._State, "loops", {})
    monkeypatch.setattr(FC._State, "spent", {})
    monkeypatch.setattr(FC, "_in_cache", lambda key: False)
    ran = _loops_run(monkeypatch)
    monkeypatch.setattr(FC, "RENT", 1e9)
    _brief()
    _brief()
    assert not ran and len(FC._State.spent) == 1
    (key, spent), = FC._State.spent.items()
    assert spent > 0
    monkeypatch.setattr(FC, "RENT", spent)
    _brief()
    assert ran == [key]


def test_a_cached_loop_is_used_at_once(monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    _brief()                        # compiled, its source in the cache
    key = ran[0]
    monkeypatch.delenv(FC.ENV)
    monkeypatch.setattr(FC._State, "loops", {})
    monkeypatch.setattr(FC._State, "spent", {})
    monkeypatch.setattr(FC, "RENT", 1e9)
    _brief()
    assert ran == [key, key]


def test_a_failed_compilation_falls_back_to_the_shared_kernel(monkeypatch):
    monkeypatch.delenv(FC.ENV, raising=False)
    monkeypatch.setattr(FC._State, "loops", {})
    monkeypatch.setattr(FC, "RENT", 0.0)

    def broken(key, source):
        raise RuntimeError("no compiler")
    monkeypatch.setattr(FC, "_load", broken)
    ran = _loops_run(monkeypatch)
    a, b, c = _brief()
    assert not ran
    np.testing.assert_allclose(b.grad.numpy(), 4 * b.numpy(), rtol=1e-15)
    # under "now" (the tests' setting) the failure is not hidden
    monkeypatch.setenv(FC.ENV, "now")
    monkeypatch.setattr(FC._State, "loops", {})
    with pytest.raises(RuntimeError, match="no compiler"):
        _brief()


@pytest.mark.parametrize("seed", range(16))
def test_float32_programs_same_bits_three_ways(seed, monkeypatch):
    """float32 leaves: the generated loop rounds what it stores as the shared
    kernel's float32 block scratch does -- the same bits again."""
    prog, xs = P._program(seed, 10), [x.astype(np.float32) for x in P._inputs(seed)]
    monkeypatch.setenv(FC.ENV, "0")
    shared = P._grads(prog, xs)
    plain = P._grads(prog, xs, fused=False)
    monkeypatch.setenv(FC.ENV, "now")
    looped = P._grads(prog, xs)
    for a, b, c in zip(looped, shared, plain):
        assert a.dtype == b.dtype == c.dtype
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_float32_sweeps_run_float32_loops(monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.uniform(0.5, 1.5, P.N).astype(np.float32), requires_grad=True)
    with interpret.mode(0):
        (2 * x * x + tg.log(x)).sum().backward()
    assert ran and x.grad.dtype == np.float32
    xd = x.numpy().astype(np.float64)
    np.testing.assert_allclose(x.grad.numpy(), 4 * xd + 1 / xd, rtol=1e-6)
    # a float32 loop is not the float64 loop of the same program
    x64 = tg.tensor(x.numpy().astype(np.float64), requires_grad=True)
    with interpret.mode(0):
        (2 * x64 * x64 + tg.log(x64)).sum().backward()
    assert len(ran) == 2 and ran[0] != ran[1]


def test_float32_programs_reach_the_generated_loops(monkeypatch):
    monkeypatch.setenv(FC.ENV, "now")
    ran = _loops_run(monkeypatch)
    for seed in range(16):
        P._grads(P._program(seed, 10), [x.astype(np.float32) for x in P._inputs(seed)])
    assert len(set(ran)) >= 8
