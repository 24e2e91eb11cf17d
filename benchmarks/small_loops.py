"""A loop over tiny arrays, as scientific scripts write them: the gradient of
an RK4-integrated Lotka-Volterra least-squares loss.

Two states, four parameters, ``STEPS`` steps of classic RK4 written in plain
NumPy style (components indexed out, combined, stacked back), the squared
error against fixed observations summed over the trajectory.  Prints ms per
gradient for plain NumPy (loss only), tapegrad eager (``tg.value_and_grad``),
tapegrad traced (``ft.value_and_grad`` of ``tg.trace``, the replayed
forward alone, and the replay and reverse-sweep loops on their own), with
the tape's record count and the traced cost per record; PyTorch eager and
CasADi (an SX function of the value and gradient, built once) when they are
installed; HIPS autograd and JAX (eager, and ``jit`` with its compile time)
when installed, each in a fresh interpreter stopped after ``--cap`` seconds
(reported as such), their one-call times.  Medians of ``--repeat`` runs.

A second workload of another shape (``--only ode6``): a six-state ODE whose
right-hand side is a matrix-vector product plus an elementwise nonlinearity,
integrated by RK4 (matmul host records between the small elementwise ones,
which a trace's replay and sweep compute in their compiled loops:
kernels/small_matmul.py).

Run: ``python benchmarks/small_loops.py [--steps 500] [--repeat 7] [--only rk4,ode6]
[--cap 60]``.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import numpy as np  # noqa: E402

import tapegrad as tg  # noqa: E402

DT = 0.01


def _rhs(xp, u, th):
    x, y = u[0], u[1]
    a, b, c, d = th[0], th[1], th[2], th[3]
    return xp.stack([a * x - b * x * y, c * x * y - d * y])


def _sumsq(e):
    return (e * e).sum()


def _rk4_loss(rhs, u, th, steps, obs, sumsq=_sumsq):
    """sum over steps of ``sumsq(u_i - obs[i])`` along classic RK4 steps of
    ``du/dt = rhs(u, th)``: each workload's loss, for every library."""
    total = 0.0
    for i in range(steps):
        k1 = rhs(u, th)
        k2 = rhs(u + 0.5 * DT * k1, th)
        k3 = rhs(u + 0.5 * DT * k2, th)
        k4 = rhs(u + DT * k3, th)
        u = u + (DT / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        total = total + sumsq(u - obs[i])
    return total


def loss(th, steps, obs, xp=np):
    u = xp.stack([th[0] * 0 + 1.0, th[0] * 0 + 0.5])
    return _rk4_loss(lambda u, th: _rhs(xp, u, th), u, th, steps, obs)


#: the second workload: six states coupled by a fixed matrix, a damped
#: nonlinear ODE dx/dt = th[0] * (M @ x) + th[1:] * tanh(x), integrated by
#: RK4; matrix-vector products (host records) between the small elementwise
#: records
M6 = (np.random.default_rng(3).normal(size=(6, 6)) * 0.3 - np.eye(6))
X6 = np.linspace(0.5, 1.5, 6)


def _rhs6(xp, x, th, mv=None):
    return th[0] * (M6 @ x if mv is None else mv(M6, x)) + th[1:] * xp.tanh(x)


def loss6(th, steps, obs, xp=np, mv=None, x0=X6):
    return _rk4_loss(lambda x, th: _rhs6(xp, x, th, mv), th[0] * 0 + x0, th, steps, obs)


def _casadi_function(casadi, n, u0, rhs, steps, obs):
    """A workload's loss as a CasADi SX expression of ``n`` parameters (the
    same RK4 steps, ``u0(th)`` the initial state), and its value and gradient
    as one Function."""
    th = casadi.SX.sym("th", n)
    rows = [casadi.DM(o) for o in obs]
    total = _rk4_loss(rhs, u0(th), th, steps, rows, casadi.sumsqr)
    return casadi.Function("vg", [th], [total, casadi.gradient(total, th)])


def _casadi_value_and_grad(casadi, steps, obs):
    """``loss`` in CasADi (casadi.vertcat for np.stack)."""
    class _Ca:
        stack = staticmethod(lambda parts: casadi.vertcat(*parts))
    return _casadi_function(casadi, 4, lambda th: casadi.vertcat(th[0] * 0 + 1.0,
                                                                 th[0] * 0 + 0.5),
                            lambda u, th: _rhs(_Ca, u, th), steps, obs)


def _casadi_value_and_grad6(casadi, steps, obs):
    """``loss6`` in CasADi (casadi.mtimes for ``@``)."""
    class _Ca:
        tanh = staticmethod(casadi.tanh)
    mv = lambda m, v: casadi.mtimes(casadi.DM(m), v)   # noqa: E731
    return _casadi_function(casadi, 7, lambda th: th[0] * 0 + casadi.DM(X6),
                            lambda x, th: _rhs6(_Ca, x, th, mv), steps, obs)


def _median_ms(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


#: what a child interpreter runs for the slow rows: one gradient of a
#: workload with HIPS autograd or JAX (eager, or jit with its compile time),
#: printed as ``ms`` lines; the parent enforces the time cap
_CHILD = """
import sys, time, json
import numpy as np
sys.path.insert(0, {here!r})
import small_loops as S
which, how, steps = {which!r}, {how!r}, {steps}
rng = np.random.default_rng(0 if which == "rk4" else 1)
obs = rng.uniform(0.5, 1.5, (steps, 2 if which == "rk4" else 6))
th0 = S.TH0[which]
def loss(xp):
    if which == "rk4":
        return lambda th: S.loss(th, steps, obs, xp=xp)
    return lambda th: S.loss6(th, steps, obs, xp=xp)
out = {{}}
if how == "autograd":
    import autograd, autograd.numpy as anp
    f = autograd.value_and_grad(loss(anp))
    t0 = time.perf_counter(); v, g = f(th0); out["call"] = (time.perf_counter() - t0) * 1e3
else:
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    if how == "jax":
        f = jax.value_and_grad(loss(jnp))
        t0 = time.perf_counter(); v, g = f(jnp.asarray(th0)); g = np.asarray(g)
        out["call"] = (time.perf_counter() - t0) * 1e3
    else:
        t0 = time.perf_counter()
        f = jax.jit(jax.value_and_grad(loss(jnp))).lower(jnp.asarray(th0)).compile()
        out["compile"] = (time.perf_counter() - t0) * 1e3
        f(jnp.asarray(th0))
        ts = []
        for _ in range(5):
            t0 = time.perf_counter(); v, g = f(jnp.asarray(th0)); g = np.asarray(g)
            ts.append((time.perf_counter() - t0) * 1e3)
        out["call"] = sorted(ts)[2]
out["grad"] = [float(x) for x in np.asarray(g)]
print(json.dumps(out))
"""

TH0 = {"rk4": np.array([1.1, 0.4, 0.1, 0.4]),
       "ode6": np.array([0.8, 0.3, -0.2, 0.1, 0.4, -0.3, 0.2])}


def slow_rows(which, steps, g_ref, cap):
    """HIPS autograd and JAX rows (when installed), each in a fresh
    interpreter that is stopped after ``cap`` seconds: ``(name, ms or None,
    note)``; the gradients are checked against tapegrad's."""
    import importlib.util
    import json
    import subprocess
    import sys
    rows = []
    for how, label in (("autograd", "HIPS autograd value_and_grad (one call)"),
                       ("jax", "JAX eager value_and_grad (one call)"),
                       ("jit", "JAX jit(value_and_grad)")):
        if importlib.util.find_spec("autograd" if how == "autograd" else "jax") is None:
            continue
        if cap <= 0:
            rows.append((label, None, "skipped (--cap 0)"))
            continue
        code = _CHILD.format(here=os.path.dirname(os.path.abspath(__file__)), which=which,
                             how=how, steps=steps)
        env = dict(os.environ, OMP_NUM_THREADS="1", XLA_FLAGS="--xla_cpu_multi_thread_eigen=false")
        try:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                  timeout=cap, env=env)
        except subprocess.TimeoutExpired:
            rows.append((label, None, f"skipped: unfinished after the {cap:.0f} s cap"))
            continue
        if done.returncode != 0:
            rows.append((label, None, "failed: " + done.stderr.strip().splitlines()[-1]))
            continue
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert np.allclose(out["grad"], np.asarray(g_ref), rtol=1e-9, atol=1e-12), how
        if "compile" in out:
            label = f"{label} (compile once: {out['compile']:.0f} ms)"
        rows.append((label, out["call"], ""))
    return rows


def _print_rows(rows):
    for row in rows:
        name, ms = row[0], row[1]
        note = row[2] if len(row) > 2 else ""
        print(f"  {name:62} {ms:9.2f}" if ms is not None else f"  {name:62} {note}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="rk4,ode6", help="workloads: rk4, ode6")
    ap.add_argument("--cap", type=float, default=60.0,
                    help="seconds each autograd/JAX row may take (0: skip them)")
    a = ap.parse_args(argv)
    if "rk4" in a.only.split(","):
        main_rk4(a)
    if "ode6" in a.only.split(","):
        main6(a.steps, a.repeat, a.cap)


def main_rk4(a):
    """The RK4 Lotka-Volterra table."""
    steps = a.steps
    th0 = TH0["rk4"]
    obs = np.random.default_rng(0).uniform(0.5, 1.5, (steps, 2))

    rows = [("plain NumPy loss alone (no gradient)",
             _median_ms(lambda: loss(th0, steps, obs), a.repeat))]
    vg = tg.value_and_grad(lambda th: loss(th, steps, obs, xp=np))
    rows.append(("tapegrad eager value_and_grad", _median_ms(lambda: vg(th0), a.repeat)))

    th = tg.tensor(th0, requires_grad=True)
    records = loss(th, steps, obs)._rec + 1   # a fresh tape: records 0 .. root

    t0 = time.perf_counter()
    ft = tg.trace(lambda th: loss(th, steps, obs), th0)
    trace_ms = (time.perf_counter() - t0) * 1e3
    fvg = ft.value_and_grad
    traced = _median_ms(lambda: fvg(th0), a.repeat)
    rows.append((f"tapegrad traced value_and_grad (trace once: {trace_ms:.0f} ms)", traced))
    rows.append(("tapegrad traced forward alone", _median_ms(lambda: ft(th0), a.repeat)))
    # the traced call's two compiled loops on their own (trace_replay._Replay)
    (reps,) = ft.cache.values()
    rep = reps[0]
    seed = [np.ones(1)]
    rows.append(("  of which the replay loop (_Replay.forward)",
                 _median_ms(lambda: (rep.forward([th0]), rep.release()), a.repeat)))
    rows.append(("  of value_and_grad, the reverse sweep (_Replay.backward)",
                 _median_ms(lambda: rep.backward(seed), a.repeat)))
    v_e, g_e = vg(th0)
    v_t, g_t = fvg(th0)
    assert np.allclose(np.asarray(g_t), np.asarray(g_e), rtol=1e-12, atol=1e-14)

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        obs_t = torch.tensor(obs)

        def torch_grad():
            t = torch.tensor(th0, requires_grad=True)
            loss(t, steps, obs_t, xp=torch).backward()
            return t.grad
        rows.append(("PyTorch eager forward + backward", _median_ms(torch_grad, a.repeat)))

    try:
        import casadi
    except ImportError:
        casadi = None
    if casadi is not None:
        t0 = time.perf_counter()
        f_ca = _casadi_value_and_grad(casadi, steps, obs)
        build_ms = (time.perf_counter() - t0) * 1e3
        v_c, g_c = f_ca(th0)
        assert np.allclose(np.asarray(g_c).ravel(), np.asarray(g_e), rtol=1e-10, atol=1e-12)
        rows.append((f"CasADi SX value + gradient (build once: {build_ms:.0f} ms)",
                     _median_ms(lambda: f_ca(th0), a.repeat)))

    rows += slow_rows("rk4", steps, g_e, a.cap)
    print(f"RK4 Lotka-Volterra, {steps} steps, 4 parameters; {records} tape records; "
          f"median of {a.repeat}, ms per gradient")
    _print_rows(rows)
    print(f"  traced value_and_grad per record: {traced / records * 1e6:.0f} ns")


def main6(steps, repeat, cap=60.0):
    """The second workload's table: tapegrad eager and traced, PyTorch, CasADi,
    autograd and JAX."""
    th0 = TH0["ode6"]
    obs = np.random.default_rng(1).uniform(0.5, 1.5, (steps, 6))
    rows = [("plain NumPy loss alone (no gradient)",
             _median_ms(lambda: loss6(th0, steps, obs), repeat))]
    vg = tg.value_and_grad(lambda th: loss6(th, steps, obs))
    rows.append(("tapegrad eager value_and_grad", _median_ms(lambda: vg(th0), repeat)))
    th = tg.tensor(th0, requires_grad=True)
    records = loss6(th, steps, obs)._rec + 1
    t0 = time.perf_counter()
    ft = tg.trace(lambda th: loss6(th, steps, obs), th0)
    trace_ms = (time.perf_counter() - t0) * 1e3
    traced = _median_ms(lambda: ft.value_and_grad(th0), repeat)
    rows.append((f"tapegrad traced value_and_grad (trace once: {trace_ms:.0f} ms)", traced))
    (reps,) = ft.cache.values()
    rep = reps[0]
    rows.append(("  of which the replay loop (_Replay.forward)",
                 _median_ms(lambda: (rep.forward([th0]), rep.release()), repeat)))
    rows.append(("  of value_and_grad, the reverse sweep (_Replay.backward)",
                 _median_ms(lambda: rep.backward([np.ones(1)]), repeat)))
    _, g_e = vg(th0)
    assert np.allclose(np.asarray(ft.value_and_grad(th0)[1]), g_e, rtol=1e-12, atol=1e-14)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        obs_t, m_t, x_t = torch.tensor(obs), torch.tensor(M6), torch.tensor(X6)

        def torch_grad():
            t = torch.tensor(th0, requires_grad=True)
            loss6(t, steps, obs_t, xp=torch, mv=lambda m, v: m_t @ v, x0=x_t).backward()
            return t.grad
        assert np.allclose(torch_grad().numpy(), g_e, rtol=1e-10)
        rows.append(("PyTorch eager forward + backward", _median_ms(torch_grad, repeat)))
    try:
        import casadi
    except ImportError:
        casadi = None
    if casadi is not None:
        t0 = time.perf_counter()
        f_ca = _casadi_value_and_grad6(casadi, steps, obs)
        build_ms = (time.perf_counter() - t0) * 1e3
        assert np.allclose(np.asarray(f_ca(th0)[1]).ravel(), g_e, rtol=1e-10, atol=1e-12)
        rows.append((f"CasADi SX value + gradient (build once: {build_ms:.0f} ms)",
                     _median_ms(lambda: f_ca(th0), repeat)))
    rows += slow_rows("ode6", steps, g_e, cap)
    print(f"\n6-state ODE with a matrix-vector product, {steps} RK4 steps, 7 parameters; "
          f"{records} tape records; median of {repeat}, ms per gradient")
    _print_rows(rows)
    print(f"  traced value_and_grad per record: {traced / records * 1e6:.0f} ns")


if __name__ == "__main__":
    main()
