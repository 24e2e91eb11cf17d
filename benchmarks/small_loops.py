"""Loops over tiny arrays, as scientific scripts write them: the gradient of
four small-array losses, each library side by side in one process.

* ``rk4``: an RK4-integrated Lotka-Volterra least-squares loss, two states,
  four parameters, 500 steps written in plain NumPy style (components
  indexed out, combined, stacked back), the squared error against fixed
  observations summed over the trajectory.
* ``ode6``: a six-state ODE whose right-hand side is a matrix-vector
  product plus an elementwise nonlinearity, 500 RK4 steps, 7 parameters
  (matmul host records between the small elementwise ones, which a trace's
  replay and sweep compute in their compiled loops: kernels/small_matmul.py).
* ``pendulum``: a double pendulum's trajectory loss, 1,000 RK4 steps, its
  four initial states the parameters; components indexed out, combined
  with ``np.sin``/``np.cos``, stacked back.
* ``kalman``: a Kalman filter's negative log-likelihood, 200 steps of a
  4-state constant-velocity model with 2-d observations (matrix products,
  a 2x2 inverse and ``slogdet`` per step), in the process and observation
  noise scales.

Prints ms per gradient for plain NumPy (loss only), tapegrad eager
(``tg.value_and_grad``), tapegrad traced (``ft.value_and_grad`` of
``tg.trace``, with the trace's time, the replayed forward alone, and the
replay and reverse-sweep loops on their own), with the tape's record count
and the traced cost per record; PyTorch eager and CasADi (an SX function of
the value and gradient, built once, with its build time) when they are
installed; HIPS autograd and JAX (eager, and ``jit`` with its compile time)
when installed, each in a fresh interpreter stopped after ``--cap`` seconds
(reported as such), their one-call times.  Medians of ``--repeat`` runs,
the garbage collector on.  Every column's gradient is checked against
tapegrad eager's and the largest elementwise relative difference printed
beside it.

Run: ``python benchmarks/small_loops.py [--steps N] [--repeat 7]
[--only rk4,ode6,pendulum,kalman] [--cap 60]``.
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


#: the third workload: a double pendulum (unit masses and lengths, gravity
#: G), its four initial states (two angles, two angular velocities) the
#: parameters, integrated by RK4; each right-hand side indexes the four
#: components out, combines them with sines and cosines, stacks them back
G = 9.81


def _rhs_pend(xp, u, th):
    a1, a2, w1, w2 = u[0], u[1], u[2], u[3]
    d = a1 - a2
    sd, cd = xp.sin(d), xp.cos(d)
    den = 3.0 - xp.cos(2.0 * d)
    dw1 = (-3.0 * G * xp.sin(a1) - G * xp.sin(a1 - 2.0 * a2)
           - 2.0 * sd * (w2 * w2 + w1 * w1 * cd)) / den
    dw2 = 2.0 * sd * (2.0 * w1 * w1 + 2.0 * G * xp.cos(a1) + w2 * w2 * cd) / den
    return xp.stack([w1, w2, dw1, dw2])


def loss_pend(th, steps, obs, xp=np):
    """The squared error of the pendulum's trajectory from the initial state
    ``th`` against ``obs`` (``steps`` x 4)."""
    return _rk4_loss(lambda u, th: _rhs_pend(xp, u, th), th, th, steps, obs)


#: the fourth workload: a Kalman filter's negative log-likelihood of 2-d
#: position observations under a 4-state constant-velocity model (positions,
#: velocities; time step KF_DT), in the process noise scale th[0] (Q =
#: th[0]**2 * KF_Q0, white-noise acceleration) and the observation noise
#: scale th[1] (R = th[1]**2 * I): per step 4x4 and 4x2 matrix products, a
#: 2x2 inverse and a log-determinant
KF_DT = 0.1
KF_F = np.array([[1.0, 0.0, KF_DT, 0.0], [0.0, 1.0, 0.0, KF_DT],
                 [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
KF_H = np.eye(2, 4)
KF_Q0 = np.kron(np.array([[KF_DT ** 3 / 3, KF_DT ** 2 / 2], [KF_DT ** 2 / 2, KF_DT]]), np.eye(2))
_LOG_2PI = float(np.log(2.0 * np.pi))


def kalman_obs(steps, rng, q=0.5, r=0.3):
    """``steps`` noisy 2-d positions of a track drawn from the model."""
    x, zs = np.array([0.0, 0.0, 1.0, 0.5]), []
    chol = np.linalg.cholesky(q * q * KF_Q0)
    for _ in range(steps):
        x = KF_F @ x + chol @ rng.normal(size=4)
        zs.append(KF_H @ x + r * rng.normal(size=2))
    return np.array(zs)


def loss_kf(th, steps, obs, xp=np, const=np.asarray, quad=None):
    """The filter's negative log-likelihood of ``obs`` (``steps`` x 2), from
    x = 0, P = I: predict, innovation, gain through the inverse of S, update.
    ``const`` makes the model's matrices, ``quad(y, A)`` is ``y @ A @ y``."""
    F, H, Q0, R0 = const(KF_F), const(KF_H), const(KF_Q0), const(np.eye(2))
    Q, R = th[0] * th[0] * Q0, th[1] * th[1] * R0
    x, P = const(np.zeros(4)), const(np.eye(4))
    total = 0.0
    for i in range(steps):
        x = F @ x
        P = F @ P @ F.T + Q
        y = obs[i] - H @ x
        S = H @ P @ H.T + R
        Si = xp.linalg.inv(S)
        K = P @ H.T @ Si
        x = x + K @ y
        P = P - K @ H @ P
        yy = y @ Si @ y if quad is None else quad(y, Si)
        total = total + 0.5 * (xp.linalg.slogdet(S)[1] + yy + 2.0 * _LOG_2PI)
    return total


def _casadi_value_and_grad_pend(casadi, steps, obs):
    """``loss_pend`` in CasADi SX."""
    class _Ca:
        sin, cos = staticmethod(casadi.sin), staticmethod(casadi.cos)
        stack = staticmethod(lambda parts: casadi.vertcat(*parts))
    return _casadi_function(casadi, 4, lambda th: th,
                            lambda u, th: _rhs_pend(_Ca, u, th), steps, obs)


def _casadi_value_and_grad_kf(casadi, steps, obs):
    """``loss_kf`` in CasADi SX: ``casadi.inv`` of the symbolic 2x2 S, the
    log of its determinant, ``bilin`` for the quadratic form."""
    class _Linalg:
        inv = staticmethod(casadi.inv)
        slogdet = staticmethod(lambda s: (1.0, casadi.log(casadi.det(s))))

    class _Ca:
        linalg = _Linalg
    th = casadi.SX.sym("th", 2)
    total = loss_kf(th, steps, [casadi.DM(o) for o in obs], xp=_Ca, const=casadi.DM,
                    quad=lambda y, a: casadi.bilin(a, y, y))
    return casadi.Function("vg", [th], [total, casadi.gradient(total, th)])


def _median_ms(fn, repeat, warm_s=0.5):
    """Median ms of ``repeat`` calls of ``fn()`` with the garbage collector
    on, after calls for ``warm_s`` seconds (at least one, at most 50): a
    traced function loads its compiled loops on its first calls."""
    t0, n = time.perf_counter(), 0
    while n < 1 or (n < 50 and time.perf_counter() - t0 < warm_s):
        fn()
        n += 1
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
obs, th0, loss = S.workload(which, steps)
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
       "ode6": np.array([0.8, 0.3, -0.2, 0.1, 0.4, -0.3, 0.2]),
       "pendulum": np.array([0.3, -0.2, 0.0, 0.1]),
       "kalman": np.array([0.7, 0.4])}


def workload(which, steps):
    """``(obs, th0, loss_of)`` of a workload: ``loss_of(xp)`` is its loss as
    a function of the parameters alone, written with ``xp`` (numpy for
    NumPy and tapegrad, torch, jax.numpy, autograd.numpy)."""
    rng = np.random.default_rng({"rk4": 0, "ode6": 1, "pendulum": 2, "kalman": 3}[which])
    if which in ("rk4", "ode6"):
        obs = rng.uniform(0.5, 1.5, (steps, 2 if which == "rk4" else 6))
    elif which == "pendulum":
        obs = rng.normal(0.0, 0.3, (steps, 4))
    else:
        obs = kalman_obs(steps, rng)

    def loss_of(xp):
        if getattr(xp, "__name__", "") == "torch":
            import torch
            o, const = torch.tensor(obs), torch.tensor
        else:
            o, const = obs, np.asarray
        if which == "rk4":
            return lambda th: loss(th, steps, o, xp=xp)
        if which == "ode6":
            if o is obs:
                return lambda th: loss6(th, steps, o, xp=xp)
            m, x0 = const(M6), const(X6)
            return lambda th: loss6(th, steps, o, xp=xp, mv=lambda _, v: m @ v, x0=x0)
        if which == "pendulum":
            return lambda th: loss_pend(th, steps, o, xp=xp)
        return lambda th: loss_kf(th, steps, o, xp=xp, const=const)
    return obs, TH0[which], loss_of


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
        rel = _checked(out["grad"], g_ref, how)
        if "compile" in out:
            label = f"{label} (compile once: {out['compile']:.0f} ms)"
        rows.append((label, out["call"], rel))
    return rows


def _checked(g, g_ref, what, rtol=1e-9):
    """The largest relative difference of gradient ``g`` from tapegrad
    eager's ``g_ref``, as a table note; an error past ``rtol``."""
    g, g_ref = np.asarray(g, dtype=float).ravel(), np.asarray(g_ref, dtype=float).ravel()
    rel = float(np.max(np.abs(g - g_ref) / np.maximum(np.abs(g_ref), 1e-300)))
    if not rel <= rtol:
        raise AssertionError(f"{what}: gradient differs from tapegrad eager's by {rel:.2e} "
                             f"(relative): {g} against {g_ref}")
    return f"grad rel diff {rel:.1e}"


def _print_rows(rows):
    for row in rows:
        name, ms = row[0], row[1]
        note = row[2] if len(row) > 2 else ""
        print(f"  {name:62} {ms:9.2f}   {note}" if ms is not None else f"  {name:62} {note}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None,
                    help="time steps (default: 500 for rk4 and ode6, 1000 for pendulum, "
                         "200 for kalman)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="rk4,ode6,pendulum,kalman",
                    help="workloads: rk4, ode6, pendulum, kalman")
    ap.add_argument("--cap", type=float, default=60.0,
                    help="seconds each autograd/JAX row may take (0: skip them)")
    a = ap.parse_args(argv)
    for which in a.only.split(","):
        table(which, a.steps or STEPS[which], a.repeat, a.cap)


#: each workload's default number of time steps
STEPS = {"rk4": 500, "ode6": 500, "pendulum": 1000, "kalman": 200}

#: each workload's title line and its CasADi builder
_TITLES = {
    "rk4": "RK4 Lotka-Volterra, {steps} steps, 4 parameters",
    "ode6": "6-state ODE with a matrix-vector product, {steps} RK4 steps, 7 parameters",
    "pendulum": "double pendulum, {steps} RK4 steps, 4 initial states as parameters",
    "kalman": "Kalman filter NLL, {steps} steps, 4 states, 2-d observations, 2 noise scales",
}
_CASADI = {"rk4": _casadi_value_and_grad, "ode6": _casadi_value_and_grad6,
           "pendulum": _casadi_value_and_grad_pend, "kalman": _casadi_value_and_grad_kf}


def table(which, steps, repeat, cap=60.0):
    """One workload's table: plain NumPy (loss only), tapegrad eager and
    traced (with the traced call's replay and sweep loops on their own),
    PyTorch eager, CasADi, autograd and JAX; every gradient checked against
    tapegrad eager's, its largest relative difference printed beside it."""
    obs, th0, loss_of = workload(which, steps)
    f = loss_of(np)
    rows = [("plain NumPy loss alone (no gradient)", _median_ms(lambda: f(th0), repeat))]
    vg = tg.value_and_grad(f)
    _, g_e = vg(th0)
    g_e = np.asarray(g_e)
    rows.append(("tapegrad eager value_and_grad", _median_ms(lambda: vg(th0), repeat)))
    records = f(tg.tensor(th0, requires_grad=True))._rec + 1   # a fresh tape: 0 .. root

    t0 = time.perf_counter()
    ft = tg.trace(f, th0)
    trace_ms = (time.perf_counter() - t0) * 1e3
    fvg = ft.value_and_grad
    traced = _median_ms(lambda: fvg(th0), repeat)
    rows.append((f"tapegrad traced value_and_grad (trace once: {trace_ms:.0f} ms)", traced,
                 _checked(fvg(th0)[1], g_e, "tapegrad traced", 1e-12)))
    rows.append(("tapegrad traced forward alone", _median_ms(lambda: ft(th0), repeat)))
    # the traced call's two compiled loops on their own (trace_replay._Replay)
    (reps,) = ft.cache.values()
    rep = reps[0]
    rows.append(("  of which the replay loop (_Replay.forward)",
                 _median_ms(lambda: (rep.forward([th0]), rep.release()), repeat)))
    rows.append(("  of value_and_grad, the reverse sweep (_Replay.backward)",
                 _median_ms(lambda: rep.backward([np.ones(1)]), repeat)))

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        f_t = loss_of(torch)

        def torch_grad():
            t = torch.tensor(th0, requires_grad=True)
            f_t(t).backward()
            return t.grad
        rows.append(("PyTorch eager forward + backward", _median_ms(torch_grad, repeat),
                     _checked(torch_grad().numpy(), g_e, "PyTorch", 1e-10)))
    try:
        import casadi
    except ImportError:
        casadi = None
    if casadi is not None:
        t0 = time.perf_counter()
        f_ca = _CASADI[which](casadi, steps, obs)
        build_ms = (time.perf_counter() - t0) * 1e3
        rows.append((f"CasADi SX value + gradient (build once: {build_ms:.0f} ms)",
                     _median_ms(lambda: f_ca(th0), repeat),
                     _checked(f_ca(th0)[1], g_e, "CasADi", 1e-10)))
    rows += slow_rows(which, steps, g_e, cap)
    print(f"\n{_TITLES[which].format(steps=steps)}; {records} tape records; "
          f"median of {repeat}, ms per gradient (garbage collection on)")
    _print_rows(rows)
    print(f"  traced value_and_grad per record: {traced / records * 1e6:.0f} ns")


if __name__ == "__main__":
    main()
