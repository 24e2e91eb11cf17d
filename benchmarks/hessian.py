#!/usr/bin/env python
"""Hessian of the Rosenbrock function (tridiagonal), one thread, medians in
ms; each result is checked against the closed form before it is timed.

n = 100 (``--size``): ``tg.hessian`` (forward-over-reverse; eager, with the
default ``sparse="auto"``, which below ``tapegrad.transforms.second.passes.SPARSE_MIN`` = 128
inputs takes all n unit directions on the first call and the coloured ones
from the second call of the same graph on -- the steady state timed here --
and with ``sparse=False`` / ``True`` forced), ``ft.hessian`` on a function traced once (the counterpart of JAX's
``jit``; a trace colours from 8 inputs on, so 3 directions here), against
PyTorch's ``torch.autograd.functional.hessian(vectorize=True)`` and
``jax.jit(jax.hessian(f))`` (steady state), where installed.  There is no
traced row with unit directions: nothing public makes a trace skip the
colouring, so eager ``sparse=False`` is the dense-directions row.

``--large`` adds n = 1,000 and n = 10,000: ``tg.sparse_hessian`` (eager) and
``ft.sparse_hessian`` (traced) return the 3n - 2 nonzeros from 3 coloured
directions; at n = 1,000 also the dense-output ``tg.hessian`` (coloured),
``ft.hessian``, ``tg.hessian(sparse=False)`` (1,000 directions), PyTorch
(when one call takes under ``--torch-limit`` s) and JAX ``jit(hessian)``.
Dense 10,000 x 10,000 float64 Hessians (800 MB) are skipped.  JAX's
``jit(vmap(hvp))`` over the same 3 directions, with the colouring given by
hand and the nonzeros gathered inside the jit, is the sparse counterpart:
it shows what the colouring costs when the pattern is known in advance.

Then a Hessian with no zeros, ``logsumexp(tanh(A @ x) * x)`` with a constant
A, n = 300: the dense forward-over-reverse pass against PyTorch and JAX; and
an arrowhead Hessian (a shared parameter coupled with every input), n =
1,000, which the star colouring covers with 2 directions.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/hessian.py [-n REPEAT] [--size N] [--large]``.
"""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

import argparse
import time
from types import SimpleNamespace

import _timing  # noqa: F401  (first: pins every library to one thread)

import numpy as np  # noqa: E402
from _timing import median_ms  # noqa: E402
from transform_workloads import (check_sparse_hessian, rosen, rosen_hessian,  # noqa: E402
                                 rosen_hessian_at)

LARGE = (1_000, 10_000)
DENSE_MAX = 1_000  # dense rows up to here: 8 MB at 1,000, 800 MB at 10,000


def _optional(name):
    try:
        return __import__(name)
    except ImportError:
        return None


def _setup_libs():
    torch, jax = _optional("torch"), _optional("jax")
    if torch is not None:
        torch.set_num_threads(1)
    if jax is not None:
        jax.config.update("jax_enable_x64", True)
    return torch, jax


def _torch_row(torch, x):
    def torch_h(t):
        return torch.autograd.functional.hessian(rosen, t, vectorize=True)
    return ("PyTorch `hessian(vectorize=True)`", torch_h, (torch.tensor(x),))


def _jax_row(jax, x):
    jh = jax.jit(jax.hessian(rosen))
    return ("JAX `jit(hessian)`", lambda a: jh(a).block_until_ready(), (jax.numpy.asarray(x),))


def _jax_colored_row(jax, x):
    """3 HVPs in one jitted vmap; colour of column j is j % 3 (valid for any
    tridiagonal H), entry (i, j) read from product j % 3 at row i."""
    jnp = jax.numpy
    n = x.size
    i = np.arange(n)
    rows = np.concatenate([i, i[:-1], i[1:]])
    cols = np.concatenate([i, i[1:], i[:-1]])
    seeds = (np.arange(n)[None, :] % 3 == np.arange(3)[:, None]).astype(np.float64)
    g = jax.grad(rosen)

    @jax.jit
    def coo(x, S, r, c):
        hv = jax.vmap(lambda s: jax.jvp(g, (x,), (s,))[1])(S)
        return hv[c % 3, r]

    args = tuple(jnp.asarray(a) for a in (x, seeds, rows, cols))

    def run(*a):
        return coo(*a).block_until_ready()

    def result(*a):  # the SparseHessian fields the check reads
        return SimpleNamespace(data=np.asarray(run(*a)), rows=rows, cols=cols, shape=(n, n))
    return ("JAX `jit(vmap(hvp))`, 3 hand-coloured directions, nonzeros", run, args, result)


def _check(label, fn, a, x, expect, sparse):
    got = fn(*a)
    if sparse:
        check_sparse_hessian(got, x)
    else:
        np.testing.assert_allclose(np.asarray(got), expect, rtol=1e-10, atol=1e-8,
                                   err_msg=label)


def _table(title, rows, repeat):
    """rows: (label, fn, args, repeat or None); ratios to the first row."""
    print(title + "\n")
    print("| | ms | x first row |")
    print("|---|---:|---:|")
    base = None
    for label, fn, a, rep in rows:
        ms = median_ms(fn, a, rep or repeat)
        base = base or ms
        print(f"| {label} | {ms:.3f} | {ms / base:.2f} |")
    print()


def _repeat_for(fn, a, repeat, budget_s=1.5):
    """Fewer repeats for slow rows: about ``budget_s`` of timed calls, at least 5."""
    t0 = time.perf_counter()
    fn(*a)
    dt = time.perf_counter() - t0
    return int(max(5, min(repeat, budget_s / max(dt, 1e-9))))


def small(tg, torch, jax, n, repeat):
    from tapegrad.transforms.second.passes import SPARSE_MIN
    x = np.random.default_rng(0).uniform(-1.5, 1.5, n)
    expect = rosen_hessian(x)
    p = tg.sparse_hessian(rosen)(x).colors
    auto = (f"{p} coloured directions" if n >= SPARSE_MIN
            else f"{p} coloured directions from the 2nd call of one graph")
    ft = tg.trace(rosen, x)
    rows = [(f"tapegrad `tg.hessian` (eager, records f each call; auto: {auto})",
             tg.hessian(rosen), (x,)),
            (f"tapegrad `tg.hessian(sparse=False)` (eager, {n} unit directions)",
             tg.hessian(rosen, sparse=False), (x,)),
            (f"tapegrad `tg.hessian(sparse=True)` (eager, {p} coloured directions)",
             tg.hessian(rosen, sparse=True), (x,)),
            (f"tapegrad `tg.trace(f).hessian` (traced once; {p} coloured directions)",
             ft.hessian, (x,))]
    if torch is not None:
        rows.append(_torch_row(torch, x))
    if jax is not None:
        rows.append(_jax_row(jax, x))
    for label, fn, a in rows:
        _check(label, fn, a, x, expect, False)
    _table(f"Hessian of Rosenbrock, n = {n}; median of {repeat}, one thread; "
           f"`sparse=\"auto\"` colours eager Hessians from {SPARSE_MIN} inputs on, and "
           "below that once f has recorded the same graph twice",
           [r + (None,) for r in rows], repeat)


def large(tg, torch, jax, n, repeat, torch_limit):
    x = np.random.default_rng(0).uniform(-1.5, 1.5, n)
    ft = tg.trace(rosen, x)
    h = tg.sparse_hessian(rosen)(x)
    p, nnz = h.colors, h.data.size
    rows = [(f"tapegrad `tg.sparse_hessian` (eager; {p} directions, {nnz} nonzeros)",
             tg.sparse_hessian(rosen), (x,), True),
            ("tapegrad `tg.trace(f).sparse_hessian` (traced once)", ft.sparse_hessian, (x,),
             True)]
    notes = []
    if jax is not None:
        label, fn, a, result = _jax_colored_row(jax, x)
        check_sparse_hessian(result(*a), x)
        rows.append((label, fn, a, None))  # checked here: fn returns only the data
    if n <= DENSE_MAX:
        rows += [("tapegrad `tg.hessian` (eager, dense output; auto: coloured)",
                  tg.hessian(rosen), (x,), False),
                 ("tapegrad `tg.trace(f).hessian` (traced once, dense output)", ft.hessian,
                  (x,), False),
                 (f"tapegrad `tg.hessian(sparse=False)` (eager, {n} unit directions)",
                  tg.hessian(rosen, sparse=False), (x,), False)]
        if torch is not None:
            label, fn, a = _torch_row(torch, x)
            t0 = time.perf_counter()
            fn(*a)
            dt = time.perf_counter() - t0
            if dt < torch_limit:
                rows.append((label, fn, a, False))
            else:
                notes.append(f"PyTorch skipped: one call took {dt:.1f} s")
        if jax is not None:
            rows.append(_jax_row(jax, x) + (False,))
    else:
        notes.append(f"dense rows (`tg.hessian`, `ft.hessian`, PyTorch, JAX `jit(hessian)`) "
                     f"skipped: a dense {n:,} x {n:,} float64 Hessian takes "
                     f"{n * n * 8 / 1e6:,.0f} MB")
    expect = rosen_hessian(x) if n <= DENSE_MAX else None
    timed = []
    for label, fn, a, sparse in rows:
        if sparse is not None:
            _check(label, fn, a, x, expect, sparse)
        timed.append((label, fn, a, _repeat_for(fn, a, repeat)))
    reps = sorted({r for *_, r in timed})
    _table(f"Hessian of Rosenbrock, n = {n:,}; median of {'/'.join(map(str, reps))} "
           f"(fewer for slow rows), one thread", timed, repeat)
    for note in notes:
        print(f"- {note}")
    if notes:
        print()


def dense(tg, torch, jax, n, repeat):
    """A Hessian with no zeros: ``logsumexp(tanh(A @ x) * x)``, A a constant
    n x n matrix.  The colouring cannot help (the pattern is full, so
    ``sparse="auto"`` falls back to n unit directions): this times the
    forward-over-reverse pass itself, matmul VJPs and all."""
    rng = np.random.default_rng(2)
    A = rng.standard_normal((n, n)) / np.sqrt(n)
    x = rng.uniform(-1.5, 1.5, n)

    def f(x):
        lib = tg if isinstance(x, (np.ndarray, tg.Tensor)) else None
        if lib is None and torch is not None and isinstance(x, torch.Tensor):
            return torch.logsumexp(torch.tanh(torch.from_numpy(A) @ x) * x, 0)
        if lib is None:
            import jax.numpy as jnp
            from jax.scipy.special import logsumexp
            return logsumexp(jnp.tanh(jnp.asarray(A) @ x) * x)
        return tg.logsumexp(tg.tanh(A @ x) * x)

    ft = tg.trace(f, x)
    rows = [("tapegrad `tg.hessian` (eager; the pattern is full: unit directions)",
             tg.hessian(f), (x,)),
            ("tapegrad `tg.trace(f).hessian` (traced once)", ft.hessian, (x,))]
    if torch is not None:
        tx = torch.tensor(x)
        rows.append(("PyTorch `hessian(vectorize=True)`",
                     lambda t: torch.autograd.functional.hessian(f, t, vectorize=True), (tx,)))
    if jax is not None:
        jh = jax.jit(jax.hessian(f))
        jx = jax.numpy.asarray(x)
        rows.append(("JAX `jit(hessian)`", lambda a: jh(a).block_until_ready(), (jx,)))
    # no closed form: the libraries check each other, and central differences
    # of tapegrad's gradient check the first
    H = np.asarray(rows[0][1](x))
    g = tg.grad(f)
    fd = np.array([(g(x + 1e-6 * e) - g(x - 1e-6 * e)) / 2e-6 for e in np.eye(n)[:5]])
    np.testing.assert_allclose(H[:5], fd, rtol=1e-5, atol=1e-7)
    for label, fn, a in rows[1:]:
        np.testing.assert_allclose(np.asarray(fn(*a)), H, rtol=1e-9, atol=1e-12,
                                   err_msg=label)
    _table(f"Dense Hessian of logsumexp(tanh(A @ x) * x), n = {n}; median of {repeat}, "
           "one thread", [r + (None,) for r in rows], repeat)


def arrowhead(tg, torch, jax, n, repeat):
    """A shared parameter: ``sum((x[0] * x[1:] - y) ** 2) + 0.1 sum(x[1:] ** 4)``.
    Its Hessian is an arrowhead -- row 0 is full -- so every pair of columns
    shares a row and a distance-2 colouring needs n colours; the star
    colouring needs 2."""
    rng = np.random.default_rng(3)
    y = rng.standard_normal(n - 1)
    x = rng.uniform(0.5, 1.5, n)

    def f(x):
        yy = y if isinstance(x, (np.ndarray, tg.Tensor)) else (
            torch.from_numpy(y) if torch is not None and isinstance(x, torch.Tensor)
            else __import__("jax.numpy").numpy.asarray(y))
        return ((x[0] * x[1:] - yy) ** 2).sum() + 0.1 * (x[1:] ** 4).sum()

    p = tg.sparse_hessian(f)(x).colors
    ft = tg.trace(f, x)
    rows = [(f"tapegrad `tg.hessian` (eager; {p} star colours)", tg.hessian(f), (x,)),
            (f"tapegrad `tg.hessian(sparse=False)` (eager, {n} unit directions)",
             tg.hessian(f, sparse=False), (x,)),
            ("tapegrad `tg.trace(f).hessian` (traced once)", ft.hessian, (x,))]
    if torch is not None:
        rows.append(("PyTorch `hessian(vectorize=True)`",
                     lambda t: torch.autograd.functional.hessian(f, t, vectorize=True),
                     (torch.tensor(x),)))
    if jax is not None:
        jh = jax.jit(jax.hessian(f))
        rows.append(("JAX `jit(hessian)`", lambda a: jh(a).block_until_ready(),
                     (jax.numpy.asarray(x),)))
    # closed form: H00 = 2 sum(x_i^2), H0i = Hi0 = 4 x0 x_i - 2 y_i,
    # Hii = 2 x0^2 + 1.2 x_i^2
    H = np.diag(np.concatenate(([2 * (x[1:] ** 2).sum()], 2 * x[0] ** 2 + 1.2 * x[1:] ** 2)))
    H[0, 1:] = H[1:, 0] = 4 * x[0] * x[1:] - 2 * y
    for label, fn, a in rows:
        np.testing.assert_allclose(np.asarray(fn(*a)), H, rtol=1e-10, atol=1e-10,
                                   err_msg=label)
    _table(f"Arrowhead Hessian (a shared parameter), n = {n}; median of {repeat}, one thread",
           [r + (None,) for r in rows], repeat)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--repeat", type=int, default=51)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--large", action="store_true",
                        help=f"also n = {', '.join(f'{n:,}' for n in LARGE)}")
    parser.add_argument("--torch-limit", type=float, default=3.0,
                        help="skip PyTorch at large n when one call takes longer (s)")
    args = parser.parse_args()
    # the entrywise closed form of the large checks, against the dense one
    xs = np.random.default_rng(1).uniform(-1.5, 1.5, 7)
    r, c = np.indices((7, 7)).reshape(2, -1)
    np.testing.assert_array_equal(rosen_hessian_at(xs, r, c), rosen_hessian(xs).ravel())

    import tapegrad as tg
    torch, jax = _setup_libs()
    small(tg, torch, jax, args.size, args.repeat)
    dense(tg, torch, jax, 300, min(args.repeat, 21))
    arrowhead(tg, torch, jax, 1000, min(args.repeat, 21))
    if args.large:
        for n in LARGE:
            large(tg, torch, jax, n, args.repeat, args.torch_limit)


if __name__ == "__main__":
    main()
