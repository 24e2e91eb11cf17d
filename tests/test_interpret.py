"""The interpreted tier (kernels/interpret.py) against the compiled one.

Both run the same kernel sources over the same tape memory; every op of the
op-case table, through each compiled loop (reverse, vector and block sweeps,
forward mode, replay), must give the compiled loop's bits when its kernels
run as Python.  The policy -- interpret a small first use, compile
once interpreting costs about a compilation, compile at once for large
work, load whatever the cache holds -- is checked in fresh processes.
"""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
import tapegrad.transforms.functional as ft
from tapegrad.kernels import interpret

import interpret_programs as P
from interpret_programs import X
from op_cases import CASES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _both(program):
    """``program()`` compiled, then with every uncompiled kernel interpreted
    (kernels a process has compiled it always calls compiled: the programs
    that must run every kernel as Python run in a fresh process, below)."""
    with interpret.mode(0):
        want = program()
    with interpret.mode("force"):
        got = program()
    return want, got


def _close(want, got):
    """The same bits (NaN where NaN)."""
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def _draw_cases():
    """Inputs for every op of the table: three drawn cases, and up to two
    with 32 x 48 operands where the drawn parameters fit them (the whole-array
    forms of the element loops run on those)."""
    cases = {}
    for name in sorted(CASES):
        strategy, fn = CASES[name]
        drawn = []

        @settings(max_examples=6, deadline=None, derandomize=True, database=None)
        @given(case=strategy, seed=st.integers(0, 2**32 - 1))
        def collect(case, seed):
            drawn.append((case, seed))

        collect()
        big = 0
        for i, ((shapes_, domains, params), seed) in enumerate(drawn):
            rng = np.random.default_rng(seed)
            if i < 3:
                cases[(name, i)] = (name, [d(rng, s) for d, s in zip(domains, shapes_)], params)
            if big < 2:
                try:
                    arrays = [d(rng, (32, 48)) for d in domains]
                    fn(*arrays, **params)
                except Exception:
                    continue  # these parameters do not fit 32 x 48 operands
                cases[(name, "32x48", i)] = (name, arrays, params)
                big += 1
    return cases


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """Every program of tests/interpret_programs.py run in a fresh process
    that interprets every kernel and compiles none; the drawn inputs too."""
    d = tmp_path_factory.mktemp("interpreted")
    cases = _draw_cases()
    with open(d / "in.pkl", "wb") as f:
        pickle.dump(cases, f)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(d / "cache"), TAPEGRAD_QUIET="1")
    env[interpret.BUDGET_ENV] = "force"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "interpret_programs.py"),
                          str(d / "in.pkl"), str(d / "out.pkl")], capture_output=True, text=True,
                         cwd=os.path.join(ROOT, "tests"), env=env, timeout=900)
    assert out.returncode == 0, out.stderr
    with open(d / "out.pkl", "rb") as f:
        results = pickle.load(f)
    return cases, results


def test_the_interpreted_process_compiled_nothing(interpreted):
    assert interpreted[1]["compiled"] is False


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_interpreted_as_compiled(name, interpreted):
    cases, results = interpreted
    keys = [k for k in cases if k[0] == name]
    assert keys
    with interpret.mode(0):
        for k in keys:
            _close(P.op_program(*cases[k]), results["ops"][k])


@pytest.mark.parametrize("transform", sorted(P.LOOPS))
def test_every_loop_interpreted_as_compiled(transform, interpreted):
    with interpret.mode(0):
        want = P.LOOPS[transform]()
    _close(want, interpreted[1]["loops"][transform])


@pytest.mark.parametrize("kind", sorted(P.ARRAYS))
def test_large_records_run_as_whole_arrays(kind, interpreted):
    """Each whole-array form runs (and a rule with no array form falls back
    to the element loop) with the compiled loops' numbers, to the last bit:
    the same IEEE operations on each element, libm's functions of each."""
    got, (as_arrays, fell_back) = interpreted[1]["arrays"][kind]
    with interpret.mode(0):
        want = P.arrays_program(kind)
    assert as_arrays > 0 and fell_back == 0, (as_arrays, fell_back)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_a_rule_that_takes_no_arrays_falls_back_to_the_element_loop():
    calls = []

    def arrays(v):
        calls.append("arrays")
        if v > 0:            # a branch on a value: TypeError for an array
            return v
        return v

    def loop(v):
        calls.append("loop")
        return v * 2

    before = list(interpret._array_calls)
    out = interpret._arrays_or_loop(arrays, loop)(np.ones(3))
    assert calls == ["arrays", "loop"] and np.array_equal(out, 2 * np.ones(3))
    assert interpret._array_calls[1] == before[1] + 1


def test_user_op_interpreted_calls_its_compiled_derivative(interpreted):
    # the sweep runs as Python and calls the user's compiled derivative
    # through its address (interpret.STAND_INS: call_d2)
    with interpret.mode(0):
        want = P.user_op_program()
    got = interpreted[1]["user"]
    _close(want, got)
    np.testing.assert_allclose(got[0], 1 / (1 + np.exp(-X)), rtol=1e-14)


def test_force_mode_compiles_nothing():
    from tapegrad.kernels.sweep import whole_layout as layout  # the eager backward's
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
    from tapegrad.kernels.sweep import _sweep, whole_layout as layout
    from tapegrad.kernels import dispatch as D
    a = tg.tensor(np.linspace(1.0, 3.0, 12), requires_grad=True)  # past the sweep's TINY
    v = np.linspace(0.1, 1.0, 12)
    y = 3 * a + 2 * a * a + np.log(a)
    y.backward(v)
    assert np.allclose(a.grad.numpy(), v * (3 + 4 * a.numpy() + 1 / a.numpy()))
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
    # the same cache, the default budget: small backwards in a loop run
    # interpreted until one kernel has cost the first load's price (Numba's
    # start); after it, a small cached kernel (layout, 50 kB) is loaded once
    # it has cost its own size's price, not the first load's
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels import interpret
        from tapegrad.kernels.sweep import _sweep, whole_layout as layout
        a = tg.tensor(np.linspace(1.0, 3.0, 12), requires_grad=True)
        v = np.linspace(0.1, 1.0, 12)
        n = 0
        while not (_sweep.overloads and layout.overloads) and n < 100000:
            a.grad = None
            (3 * a + 2 * a * a + np.log(a)).backward(v)
            assert np.allclose(a.grad.numpy(), v * (3 + 4 * a.numpy() + 1 / a.numpy()))
            n += 1
        st = interpret._states[layout.py_func]
        print(n, bool(interpret._warm), st.spent, interpret.load_price(st.cached))
    """, tmp_path)
    n, warm, spent, price = out.split()
    assert int(n) < 100000 and warm == "True"
    assert float(price) < interpret.LOAD_BUDGET / 4
    assert float(spent) < interpret.LOAD_BUDGET / 2, (spent, price)


def test_the_price_of_loading_a_cached_kernel(monkeypatch):
    monkeypatch.setattr(interpret, "_warm", [])
    # before any kernel ran compiled, a load pays Numba's start too
    assert interpret.load_price(10_000) == interpret.load_price(10**9) == interpret.LOAD_BUDGET
    interpret.loaded()
    assert interpret._warm == [True]
    assert interpret.load_price(1) == interpret.LOAD_FLOOR
    assert interpret.load_price(300_000) == pytest.approx(300_000 * interpret.LOAD_PER_BYTE)
    assert interpret.load_price(10**9) == interpret.LOAD_BUDGET


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
    # a user op's derivative is a compiled function called element by
    # element (no whole-array form): 10^6 calls of it are too much work to
    # run as Python, so the sweep compiles at once
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels.sweep import _sweep
        softplus = tg.elementwise(lambda x: np.log1p(np.exp(x)),
                                  derivative=lambda x, y: 1.0 / (1.0 + np.exp(-x)))
        v = np.linspace(-3.0, 3.0, 1_000_000)
        x = tg.tensor(v, requires_grad=True)
        softplus(x).sum().backward()
        assert np.allclose(x.grad.numpy(), 1.0 / (1.0 + np.exp(-v)), rtol=1e-13)
        print(len(_sweep.overloads))
    """, tmp_path)
    assert out.split() == ["1"]


def test_a_large_special_function_compiles_only_its_own_kernels(tmp_path):
    # gammaln over 10^6 elements: its forward and its derivative (digamma)
    # run in small kernels of their own, compiled alone; the sweep stays
    # interpreted
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels.sweep import _sweep
        from tapegrad.kernels import special_arrays as S
        v = np.linspace(0.5, 5.0, 1_000_000)
        x = tg.tensor(v, requires_grad=True)
        tg.gammaln(x).sum().backward()
        print(len(_sweep.overloads), len(S.VALUES[S.C.GAMMALN].overloads),
              len(S.LOOPS[S.C.GAMMALN].overloads),
              sum(len(f.overloads) for f in (*S.VALUES.values(), *S.LOOPS.values())))
        assert np.allclose(x.grad.numpy(), np.asarray(tg.digamma(v)), rtol=1e-13)
    """, tmp_path)
    assert out.split() == ["0", "1", "1", "2"]


def test_large_cumprod_runs_as_arrays(tmp_path):
    # cumprod's recurrence in the loop's order, down the one lane: no
    # compilation, exact with zeros (no division), and finite where a
    # partial product of another order would overflow
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels import _jit
        from tapegrad.kernels.sweep import _sweep
        from tapegrad.kernels import interpret
        n = 1_000_000
        x = tg.tensor(np.ones(n), requires_grad=True)
        tg.cumprod(x).sum().backward()
        assert np.array_equal(x.grad.numpy(), np.arange(n, 0, -1.0))
        v = np.ones(4096); v[100] = 0.0; v[3000] = 0.0
        x = tg.tensor(v, requires_grad=True)
        tg.cumprod(x).sum().backward()
        want = np.zeros(4096)
        want[:100] = np.arange(100, 0, -1.0)   # the terms j = k .. 99
        want[100] = 2900.0                     # x_100 left out: y_j = 1 for j = 100 .. 2999
        assert np.array_equal(x.grad.numpy(), want)
        print(len(_sweep.overloads), bool(_jit._MATERIALIZED), interpret._array_calls[0])
        # y_j / y_0 overflows (x_1 x_2 = 1e310), y does not
        big = np.ones(64); big[:3] = 1e-300, 1e160, 1e150
        x = tg.tensor(big, requires_grad=True)
        g = np.zeros(64); g[1] = 1.0
        before = interpret._array_calls[0]
        (tg.cumprod(x) * g).sum().backward()
        assert np.array_equal(x.grad.numpy()[:2], [1e160, 1e-300]) and (x.grad.numpy()[2:] == 0).all()
        print(interpret._array_calls[0] > before)
    """, tmp_path, budget="5")   # a budget that a loaded machine does not spend
    n, materialized, arrays, as_arrays = out.split()
    assert (n, materialized) == ("0", "False") and int(arrays) >= 2 and as_arrays == "True"


def test_large_reductions_scans_and_concatenations_run_as_arrays(tmp_path):
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels import _jit
        from tapegrad.kernels.sweep import _sweep
        v = np.linspace(0.1, 0.9, 1_000_000)
        x = tg.tensor(v, requires_grad=True)
        m = x.reshape(1000, 1000)
        loss = ((tg.cumsum(x) * x).sum() + m.max(axis=1).sum() + tg.softmax(m, axis=0)[0].sum()
                + (tg.concatenate([x, x]) * 2.0).sum() + np.maximum(x, 0.5).sum())
        loss.backward()
        s = np.exp(v.reshape(1000, 1000) - v.reshape(1000, 1000).max(axis=0))
        s /= s.sum(axis=0)
        want = (np.cumsum(v[::-1])[::-1] + np.cumsum(v) + 4.0 + (v > 0.5)
                + (np.arange(10**6) % 1000 == 999)).reshape(1000, 1000)
        want[0] += s[0] * (1 - s[0])
        want[1:] -= s[0] * s[1:]
        assert np.allclose(x.grad.numpy(), want.ravel(), rtol=1e-12, atol=1e-12)
        print(len(_sweep.overloads), bool(_jit._MATERIALIZED))
    """, tmp_path)
    assert out.split() == ["0", "False"]


def test_large_elementwise_work_runs_as_arrays_without_compiling(tmp_path):
    out = _fresh("""
        import numpy as np, tapegrad as tg
        from tapegrad.kernels import _jit
        from tapegrad.kernels.sweep import _sweep
        x = tg.tensor(np.linspace(0.1, 0.9, 1_000_000), requires_grad=True)
        (tg.sin(x) * x + x * 2.0).sum().backward()
        assert np.allclose(x.grad.numpy(), np.cos(x.numpy()) * x.numpy() + np.sin(x.numpy()) + 2.0)
        print(len(_sweep.overloads), bool(_jit._MATERIALIZED))
    """, tmp_path)
    assert out.split() == ["0", "False"]


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


def test_the_binary_twins_are_the_element_rules():
    """rules.BINARY_TWINS (whole-array forms of the derivative rules that
    branch on a value) against the rules element by element: ties, NaN,
    infinities, signed zeros; to the last bit, both as the interpreted tier
    runs them (libm's log and pow of each element)."""
    from tapegrad.kernels import rules
    special = [0.0, -0.0, 1.0, 2.0, -1.5, np.nan, np.inf, -np.inf, 0.5, 3.0]
    rng = np.random.default_rng(0)
    a = np.concatenate([np.repeat(special, len(special)), rng.normal(size=300) * 3])
    b = np.concatenate([np.tile(special, len(special)), rng.normal(size=300) * 3])
    d = interpret.python_copy(rules.d_binary)
    f = interpret.python_copy(rules.f_binary)
    for sub, twin in rules.BINARY_TWINS.items():
        with np.errstate(all="ignore"):
            y = np.array([f(sub, p, q) for p, q in zip(a, b)])
            want = np.array([d(sub, p, q, z) for p, q, z in zip(a, b, y)], dtype=float)
            got = np.stack(np.broadcast_arrays(*interpret.python_copy(twin)(a, b, y)), axis=1)
        np.testing.assert_array_equal(got, want)
