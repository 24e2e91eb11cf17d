"""``ft.grad_batch`` through the batched compiled kernel (kernels/batch.py):
every row equals ``ft.grad`` of that row exactly; traces with host records
keep the threaded path; rows whose guard fails go through ``grad``.  Small
matmuls (kernels/small_matmul.py) run in the kernel as in every replay, bit
for bit; with ``batch.MATMUL`` set, larger ones too, within 1e-12 of
``ft.grad``."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.tracing import batch as trace_batch
from tapegrad.kernels import batch as BK

DT = 0.01


def _rk4(th, steps=6):
    def rhs(u):
        x, y = u[0], u[1]
        return np.stack([th[0] * x - th[1] * x * y, th[2] * x * y - th[3] * y])

    u = np.stack([th[0] * 0 + 1.0, th[0] * 0 + 0.5])
    total = 0.0
    for i in range(steps):
        k1 = rhs(u)
        k2 = rhs(u + 0.5 * DT * k1)
        k3 = rhs(u + 0.5 * DT * k2)
        k4 = rhs(u + DT * k3)
        u = u + (DT / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        e = u - 0.1 * i
        total = total + (e * e).sum()
    return total


def _branchy(x):
    if x.sum() > 0:
        return (x * x * x).sum()
    return np.sin(x).sum() * 2.0


_C = np.linspace(-1.0, 1.0, 40)
_M = np.arange(6.0).reshape(3, 2) / 7.0
_A = np.random.default_rng(7).normal(size=(256, 16))
_Y = np.sign(_A @ np.random.default_rng(8).normal(size=16))
_B = np.random.default_rng(9).normal(size=(80, 64)) / 8.0   # 5120 multiply-adds: not small

CASES = {
    # name: (function, example inputs, whether the compiled path covers it)
    "elementwise": (lambda x: np.tanh(np.exp(np.sin(x) * 0.5) - x / 3.0) ** 2, (np.float64(0.3),),
                    True),
    "reductions": (lambda x: (x.max() + np.mean(x ** 2) + np.cumsum(x)[-1] * np.prod(x[:3])
                              + np.where(x > 0, x, -2 * x).sum()), (np.ones(5),), True),
    "indexing": (lambda x: (np.concatenate([x[::2], x[1:4] * x[-1]]) ** 2).sum()
                 + (x.reshape(5, 8)[:, 1:3] * _C[:10].reshape(5, 2)).sum()
                 + (x * _C).sum(), (np.ones(40),), True),
    "two_inputs": (lambda x, y: (x * np.sin(y)).sum() + (x[0] * y ** 2).mean(),
                   (np.ones(3), np.ones(3)), True),
    "rk4": (_rk4, (np.array([1.1, 0.4, 0.1, 0.4]),), True),
    "guard": (_branchy, (np.ones(3),), True),
    # matmuls: the small ones in the batch kernel as in the replay, larger
    # ones with BK.MATMUL (the same plain loops: within rounding of NumPy's
    # BLAS), else, and batched over a leading axis, the threaded path
    "matmul": (lambda x: np.tanh(np.ones((3, 4)) @ x).sum(), (np.ones(4),), True),
    "matmul_2d": (lambda x: (np.sin(x.reshape(2, 3) @ x.reshape(3, 2)) * (x[:3] @ _M)).sum()
                  + x[:2] @ x[2:4], (np.ones(6),), True),
    "logistic": (lambda w: np.logaddexp(0.0, -_Y * (_A @ w)).mean() + 1e-3 * (w * w).sum(),
                 (np.ones(16),), True),
    "batched_matmul": (lambda x: (x.reshape(2, 2, 2) @ x.reshape(2, 2, 2)).sum(), (np.ones(8),),
                       False),
    "large_matmul": (lambda x: np.tanh(_B @ x).sum() + x @ x, (np.ones(64),), True),
}
#: traces the kernel covers only with BK.MATMUL (then within rounding of grad)
ROUNDED = {"large_matmul"}


@pytest.fixture(params=[False, True], ids=["bitwise", "matmul"])
def matmul(request, monkeypatch):
    monkeypatch.setattr(BK, "MATMUL", request.param)
    return request.param


def _covered(name, matmul):
    return CASES[name][2] and (matmul or name not in ROUNDED)


def _batch(example, nb, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(nb,) + np.shape(e)) for e in example]


def _loop(ft, X):
    gs = [ft.grad(*[x[i] for x in X]) for i in range(len(X[0]))]
    if isinstance(gs[0], tuple):
        return tuple(np.stack([g[k] for g in gs]) for k in range(len(gs[0])))
    return np.stack(gs)


def _same(got, ref, exact=True):
    got = got if isinstance(got, tuple) else (got,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        if exact:
            assert np.array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


@pytest.fixture(scope="module")
def traced():
    return {name: tg.trace(f, *ex) for name, (f, ex, _) in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_path_chosen(traced, name, matmul):
    ft = traced[name]
    rep = next(iter(ft.cache.values()))[0]
    assert rep.batch_compiled() is _covered(name, matmul)


def _check_rows(ft, name, nb, exact):
    X = _batch(CASES[name][1], nb, seed=nb)
    ref = _loop(ft, X)
    _same(ft.grad_batch(*X), ref, exact)
    if nb > 1:
        for w in (1, 2):
            _same(ft.grad_batch(*X, workers=w), ref, exact)


@pytest.mark.parametrize("nb", [1, 7, 1000])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_equal_grad(traced, name, nb):
    _check_rows(traced[name], name, nb, exact=True)


@pytest.mark.parametrize("nb", [1, 7, 1000])
@pytest.mark.parametrize("name", sorted(ROUNDED))
def test_matmul_rows_within_rounding(traced, name, nb, monkeypatch):
    monkeypatch.setattr(BK, "MATMUL", True)
    _check_rows(traced[name], name, nb, exact=False)


def test_guard_rows_take_their_branch(traced, monkeypatch):
    monkeypatch.setattr(trace_batch, "BATCH_SPLIT_MIN", 1)  # two threads
    ft = traced["guard"]
    X = np.random.default_rng(3).normal(size=(200, 3))
    X[0] = 1.0  # the trace used for the batch: the branch of x.sum() > 0
    pos = X.sum(axis=1) > 0
    assert pos.any() and (~pos).any()
    got = ft.grad_batch(X)
    assert np.array_equal(got[pos], 3 * X[pos] ** 2)
    assert np.array_equal(got, _loop(ft, [X]))


def test_float32_inputs():
    ft = tg.trace(lambda x: (np.sin(x) * x).sum(), np.ones(3, np.float32))
    X = np.random.default_rng(4).normal(size=(9, 3)).astype(np.float32)
    got = ft.grad_batch(X)
    assert got.dtype == np.float32
    _same(got, _loop(ft, [X]))


def test_unused_input_gives_zeros():
    ft = tg.trace(lambda x, y: (x * x).sum(), np.ones(2), np.ones(2))
    X, Y = np.ones((5, 2)), np.ones((5, 2))
    gx, gy = ft.grad_batch(X, Y)
    assert np.array_equal(gx, 2 * X) and np.array_equal(gy, np.zeros((5, 2)))


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n][2]))
def test_kernel_computes_every_row(name, monkeypatch):
    # the rows come from the kernel itself, not from the one-by-one fallback,
    # split between two threads however small the batch
    monkeypatch.setattr(BK, "MATMUL", True)
    monkeypatch.setattr(trace_batch, "BATCH_SPLIT_MIN", 1)
    ft = tg.trace(CASES[name][0], *CASES[name][1])  # one trace: the example's branch
    rep = next(iter(ft.cache.values()))[0]
    nb = 50
    X = _batch(CASES[name][1], nb, seed=5)
    if name == "guard":
        X = [np.abs(X[0])]  # every row on the traced branch
    run, G, left = rep.batch_job(np.concatenate([x.reshape(nb, -1) for x in X], axis=1), 2)
    run()
    assert not left.any()
    ref = _loop(ft, X)
    flat = np.concatenate([r.reshape(nb, -1) for r in (ref if isinstance(ref, tuple) else (ref,))],
                          axis=1)
    _same(G, flat, name not in ROUNDED)


def test_warm_compiles_the_batched_kernel():
    """``python -m tapegrad warm`` has a step for grad_batch's compiled call,
    and that step builds it."""
    from tapegrad.__main__ import _steps
    from tapegrad.kernels import interpret
    steps = dict(_steps())
    assert "batched replay (grad_batch)" in steps
    with interpret.mode(0):
        steps["batched replay (grad_batch)"]()
    assert BK._DISPATCHER
