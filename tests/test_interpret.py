"""The interpreted tier (kernels/interpret.py) against the compiled one.

Both run the same kernel sources over the same tape memory; every op of the
op-case table, through each compiled loop (reverse, vector and block sweeps,
forward mode, replay), must give the compiled loop's numbers when its
kernels run as Python.  The policy -- interpret a small first use, compile
once interpreting costs about a compilation, compile at once for large
work, load whatever the cache holds -- is checked in fresh processes.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
import tapegrad.functional as ft
from tapegrad.kernels import interpret

from op_cases import CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _both(program):
    """``program()`` compiled, then with every uncompiled kernel interpreted;
    the second run's kernels are Python because this process compiles only
    what ``mode(0)`` runs, and force mode never compiles."""
    with interpret.mode(0):
        want = program()
    with interpret.mode("force"):
        got = program()
    return want, got


def _close(want, got):
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_interpreted_as_compiled(name):
    strategy, fn = CASES[name]

    @settings(max_examples=3, deadline=None)
    @given(case=strategy, seed=st.integers(0, 2**32 - 1))
    def run(case, seed):
        shapes_, domains, params = case
        rng = np.random.default_rng(seed)
        arrays = [d(rng, s) for d, s in zip(domains, shapes_)]
        f = (lambda *xs: fn(*xs, **params)) if params else fn

        def program():
            ts = [tg.tensor(a, requires_grad=True) for a in arrays]
            y = f(*ts)
            y.backward(np.cos(np.arange(y.size)).reshape(y.shape))
            return [t.grad.numpy() for t in ts]

        _close(*_both(program))

    run()


def _loss(x):
    return (tg.sin(x) * x + tg.exp(x[:2]).sum() * x.max() + (x.reshape(2, 2) @ x[:2]).sum()).sum()


X = np.array([0.3, -0.7, 1.1, 0.5])


@pytest.mark.parametrize("transform", ["grad", "jacobian", "hessian", "hvp", "jvp", "traced"])
def test_every_loop_interpreted_as_compiled(transform):
    def program():
        if transform == "grad":
            return [tg.grad(_loss)(X)]
        if transform == "jacobian":
            return [tg.jacobian(lambda v: tg.sin(v) * v.sum() + tg.cumsum(v))(X)]
        if transform == "hessian":
            return [tg.hessian(_loss)(X)]
        if transform == "hvp":
            return [np.asarray(tg.hvp(_loss, (X,), (np.ones(4),))[1])]
        if transform == "jvp":
            out = tg.jvp(lambda v: tg.sin(v) * v + v.max(), (X,), (np.arange(4.0),))
            return [np.asarray(o) for o in out]
        f = tg.trace(_loss, X)
        v, g = ft.value_and_grad(f)(X * 0.5)
        return [np.asarray(v), np.asarray(g)]

    _close(*_both(program))


def test_user_op_interpreted_calls_its_compiled_derivative():
    softplus = tg.elementwise(lambda x: np.log1p(np.exp(x)),
                              derivative=lambda x, y: 1.0 / (1.0 + np.exp(-x)), name="softplus_t")

    def program():
        x = tg.tensor(X, requires_grad=True)
        softplus(x).sum().backward()
        return [x.grad.numpy()]

    want, got = _both(program)
    _close(want, got)
    np.testing.assert_allclose(got[0], 1 / (1 + np.exp(-X)), rtol=1e-14)


def test_force_mode_compiles_nothing():
    from tapegrad.kernels.sweep import layout
    before = len(layout.overloads)
    with interpret.mode("force"):
        x = tg.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
    assert x.grad.numpy().tolist() == [2.0, 4.0]
    assert len(layout.overloads) == before


def test_a_bad_budget_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv(interpret.BUDGET_ENV, "soon")
    with pytest.raises(ValueError, match="TAPEGRAD_INTERPRET='soon': expected a number of "
                                         "seconds, 0 .always compile. or 'force'"):
        interpret._setting()
    monkeypatch.setenv(interpret.BUDGET_ENV, "force")
    assert interpret._setting() == "force"
    monkeypatch.setenv(interpret.BUDGET_ENV, "2.5")
    assert interpret._setting() == 2.5


# -- the policy, in fresh processes with an empty cache -------------------------------

def _fresh(code, tmp_path, budget=None):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), TAPEGRAD_QUIET="1")
    env.pop(interpret.BUDGET_ENV, None)
    if budget is not None:
        env[interpret.BUDGET_ENV] = budget
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=900)
    assert out.returncode == 0, out.stderr
    return out.stdout


_SMALL = """
    import numpy as np, tapegrad as tg
    from tapegrad.kernels.sweep import _sweep, layout
    from tapegrad.kernels import dispatch as D
    a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = 3 * a + 2 * a * a + np.log(a)
    y.backward([0.1, 1.0, 0.0001])
    assert np.allclose(a.grad.numpy(), np.array([0.1, 1.0, 0.0001]) * (3 + 4 * a.numpy() + 1 / a.numpy()))
    import sys
    print(len(_sweep.overloads), len(layout.overloads), int((D.TABLE != 0).sum()),
          "numba" in sys.modules)
"""


def test_a_small_first_gradient_compiles_nothing(tmp_path):
    # nothing compiled, nothing cached, and Numba not even imported
    assert _fresh(_SMALL, tmp_path).split() == ["0", "0", "0", "False"]
    index = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".nbi")]
    assert index == []


def test_budget_zero_compiles_at_first_use(tmp_path):
    sweeps, layouts, families, numba = _fresh(_SMALL, tmp_path, budget="0").split()
    assert sweeps == "1" and layouts == "1" and int(families) >= 2 and numba == "True"


def test_repeated_small_work_is_compiled_once_it_has_cost_the_budget(tmp_path):
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels.sweep import _sweep
        x = tg.tensor(np.linspace(0.1, 0.9, 50), requires_grad=True)
        n = 0
        while not _sweep.overloads and n < 10000:
            x.grad = None
            (tg.sin(x) * x).sum().backward()
            assert np.allclose(x.grad.numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()))
            n += 1
        x.grad = None
        (tg.sin(x) * x).sum().backward()   # compiled now
        assert np.allclose(x.grad.numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()))
        print(n, len(_sweep.overloads))
    """, tmp_path, budget="0.2")
    n, compiled = out.split()
    assert 1 < int(n) < 10000 and compiled == "1"


def test_large_work_compiles_at_once(tmp_path):
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels.sweep import _sweep
        x = tg.tensor(np.linspace(0.1, 0.9, 400_000), requires_grad=True)
        (tg.sin(x) * x).sum().backward()
        assert np.allclose(x.grad.numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()))
        print(len(_sweep.overloads))
    """, tmp_path)
    assert out.split() == ["1"]


def test_a_new_family_beside_a_compiled_sweep_is_interpreted(tmp_path):
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels import interpret, dispatch as D, codes as C
        x = tg.tensor(np.linspace(0.1, 0.9, 6), requires_grad=True)
        with interpret.mode(0):
            (x * 2.0).sum().backward()          # compiles the sweep and two families
        x.grad = None
        tg.max(x.reshape(2, 3), axis=1).sum().backward()   # reductions: not compiled
        assert x.grad.numpy().tolist() == [0, 0, 1, 0, 0, 1]
        print(int(D.TABLE[C.K_REDUCE] != 0), int(D.TABLE[D.FULL_SUM_SLOT] != 0))
    """, tmp_path)
    assert out.split() == ["0", "1"]


def test_threads_meeting_the_tier_at_once(tmp_path):
    # four threads take their first gradients together, small and large, with
    # a tiny budget: some calls interpret, some compile, the kernels change
    # tier under the others' feet; every gradient must be right
    out = _fresh("""
        import threading
        import numpy as np, tapegrad as tg
        errors = []
        def work(k):
            try:
                for n in (5, 50, 20_000, 5, 200_000):
                    x = tg.tensor(np.linspace(0.1, 0.9, n) + k, requires_grad=True)
                    (tg.sin(x) * x).sum().backward()
                    want = np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy())
                    assert np.allclose(x.grad.numpy(), want), (k, n)
            except BaseException as e:
                errors.append(repr(e))
        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
        print(len(errors), errors[:1])
    """, tmp_path, budget="0.01")
    assert out.split()[0] == "0", out
