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
installed.  Medians of ``--repeat`` runs.

Run: ``python benchmarks/small_loops.py [--steps 500] [--repeat 7]``.
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


def loss(th, steps, obs, xp=np):
    u = xp.stack([th[0] * 0 + 1.0, th[0] * 0 + 0.5])
    total = 0.0
    for i in range(steps):
        k1 = _rhs(xp, u, th)
        k2 = _rhs(xp, u + 0.5 * DT * k1, th)
        k3 = _rhs(xp, u + 0.5 * DT * k2, th)
        k4 = _rhs(xp, u + DT * k3, th)
        u = u + (DT / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        e = u - obs[i]
        total = total + (e * e).sum()
    return total


def _casadi_value_and_grad(casadi, steps, obs):
    """The same loss as a CasADi SX expression (the same RK4 steps, with
    casadi.vertcat for np.stack), and its value and gradient as one Function."""
    class _Ca:
        stack = staticmethod(lambda parts: casadi.vertcat(*parts))

    th = casadi.SX.sym("th", 4)
    u = casadi.vertcat(th[0] * 0 + 1.0, th[0] * 0 + 0.5)
    total = 0.0
    for i in range(steps):
        k1 = _rhs(_Ca, u, th)
        k2 = _rhs(_Ca, u + 0.5 * DT * k1, th)
        k3 = _rhs(_Ca, u + 0.5 * DT * k2, th)
        k4 = _rhs(_Ca, u + DT * k3, th)
        u = u + (DT / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        total = total + casadi.sumsqr(u - casadi.DM(obs[i]))
    return casadi.Function("vg", [th], [total, casadi.gradient(total, th)])


def _median_ms(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    steps = a.steps
    th0 = np.array([1.1, 0.4, 0.1, 0.4])
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

    print(f"RK4 Lotka-Volterra, {steps} steps, 4 parameters; {records} tape records; "
          f"median of {a.repeat}, ms per gradient")
    for name, ms in rows:
        print(f"  {name:62} {ms:9.2f}")
    print(f"  traced value_and_grad per record: {traced / records * 1e6:.0f} ns")


if __name__ == "__main__":
    main()
