"""Workloads of the function transforms, shared by ``compare_transforms.py``
and the asv suite (``benchmarks/bench_transforms.py``):

* ``jacobian``: the full Jacobian of ``f(x) = tanh(A @ x) * x``, n = m = 200;
* ``grad_chain`` / ``backward_chain``: the gradient of the 8,000-record scalar
  chain through ``tg.grad`` and through ``backward()``;
* ``grad_elementwise`` / ``backward_elementwise``: the same for
  ``(3*a + 2*b*b + log(c)).sum()`` on 1e6-element vectors;
* ``hessian`` / ``hessian_traced``: the Hessian of the Rosenbrock function,
  n = 100, eager and on a function traced once (``benchmarks/hessian.py``
  compares both with PyTorch and JAX); ``hessian_dense``: eager with
  ``sparse=False`` (all n unit directions);
* ``sparse_hessian`` / ``sparse_hessian_traced``: the same Hessian as its
  nonzeros (``tg.sparse_hessian``, ``ft.sparse_hessian``), n = 10,000,
  where the dense one would take 800 MB.

Each implementation returns its result as NumPy arrays; ``check`` asserts
that they agree before anything is timed.
"""
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "benchmarks"))

import workloads as W  # noqa: E402

JAC_N = 200
HESS_N = 100
SPARSE_N = 10_000


def rosen(x):
    """NumPy code: tapegrad records it, JAX and PyTorch trace their own."""
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def rosen_hessian(x):
    """The closed form, tridiagonal."""
    n = x.size
    H = np.zeros((n, n))
    d = np.zeros(n)
    d[:-1] += 1200.0 * x[:-1] ** 2 - 400.0 * x[1:] + 2.0
    d[1:] += 200.0
    H[np.arange(n), np.arange(n)] = d
    i = np.arange(n - 1)
    H[i, i + 1] = H[i + 1, i] = -400.0 * x[:-1]
    return H


def rosen_hessian_at(x, rows, cols):
    """The closed form's entries ``H[rows[k], cols[k]]``, without the dense
    matrix (800 MB at n = 10,000)."""
    d = np.zeros(x.size)
    d[:-1] += 1200.0 * x[:-1] ** 2 - 400.0 * x[1:] + 2.0
    d[1:] += 200.0
    off = np.append(-400.0 * x[:-1], 0.0)  # H[i, i + 1]; padded so that the index is safe
    return np.where(rows == cols, d[rows],
                    np.where(np.abs(rows - cols) == 1, off[np.minimum(rows, cols)], 0.0))


def check_sparse_hessian(h, x, rtol=1e-10, atol=1e-8):
    """A ``tg.SparseHessian`` of Rosenbrock at x: no position twice, every
    position of the tridiagonal present, every entry the closed form's."""
    n = x.size
    assert h.shape == (n, n), h.shape
    keys = h.rows * n + h.cols
    assert np.unique(keys).size == keys.size, "a position listed twice"
    i = np.arange(n)
    tri = np.concatenate([i * n + i, i[:-1] * n + i[:-1] + 1, (i[:-1] + 1) * n + i[:-1]])
    assert np.isin(tri, keys).all(), "a tridiagonal position missing"
    np.testing.assert_allclose(h.data, rosen_hessian_at(x, h.rows, h.cols), rtol=rtol,
                               atol=atol)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((JAC_N, JAC_N)) / np.sqrt(JAC_N)
    x = rng.standard_normal(JAC_N)
    return {"jacobian": (A, x),
            "chain": (W.CHAIN_X0,),
            "elementwise": W.elementwise_inputs(),
            "hessian": (rng.uniform(-1.5, 1.5, HESS_N),),
            "sparse_hessian": (rng.uniform(-1.5, 1.5, SPARSE_N),)}


def jacobian_exact(A, x):
    t = np.tanh(A @ x)
    return np.diag(t) + ((1 - t ** 2) * x)[:, None] * A


def tapegrad_fns(tg):
    def jacobian(A, x):
        return tg.jacobian(lambda x: np.tanh(A @ x) * x)(x)

    def grad_chain(x0):
        return tg.grad(lambda x: W.tg_chain(tg, x))(x0)

    def backward_chain(x0):
        x = tg.tensor(x0, requires_grad=True)
        W.tg_chain(tg, x).backward()
        return x.grad.numpy()

    def grad_elementwise(a, b, c):
        return tg.grad(lambda a, b, c: W.tg_elementwise(tg, a, b, c), argnums=(0, 1, 2))(a, b, c)

    def backward_elementwise(a, b, c):
        # leaves that share the arrays, as tg.grad's do
        ts = [tg.from_numpy(v).requires_grad_() for v in (a, b, c)]
        W.tg_elementwise(tg, *ts).backward()
        return tuple(t.grad.numpy() for t in ts)

    traced = {}

    def traced_once(x):
        # traced on the first call (asv's setup makes it); one trace per size
        if x.size not in traced:
            traced[x.size] = tg.trace(rosen, x)
        return traced[x.size]

    def hessian_traced(x):
        return traced_once(x).hessian(x)

    def sparse_hessian_traced(x):
        return traced_once(x).sparse_hessian(x)

    return {"jacobian": jacobian, "grad_chain": grad_chain, "backward_chain": backward_chain,
            "grad_elementwise": grad_elementwise, "backward_elementwise": backward_elementwise,
            "hessian": tg.hessian(rosen), "hessian_traced": hessian_traced,
            "hessian_dense": tg.hessian(rosen, sparse=False),
            "sparse_hessian": tg.sparse_hessian(rosen),
            "sparse_hessian_traced": sparse_hessian_traced}


def torch_fns(torch):
    def jacobian(A, x):
        At = torch.from_numpy(A)
        f = lambda x: torch.tanh(At @ x) * x  # noqa: E731
        return torch.autograd.functional.jacobian(f, torch.from_numpy(x), vectorize=True).numpy()
    return {"jacobian": jacobian}


def jax_fns(jax):
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    cache = {}

    def jacobian(A, x):
        if "jac" not in cache:
            cache["jac"] = jax.jit(jax.jacrev(lambda A, x: jnp.tanh(A @ x) * x, argnums=1))
        return np.asarray(cache["jac"](A, x).block_until_ready())
    return {"jacobian": jacobian}


def autograd_fns(ag):
    import autograd.numpy as anp

    def jacobian(A, x):
        return ag.jacobian(lambda x: anp.tanh(A @ x) * x)(x)
    return {"jacobian": jacobian}


def check(fns, data):
    if "jacobian" in fns:
        np.testing.assert_allclose(fns["jacobian"](*data["jacobian"]),
                                   jacobian_exact(*data["jacobian"]), rtol=1e-10, atol=1e-12)
    for name in ("hessian", "hessian_traced", "hessian_dense"):
        if name in fns:
            x = data["hessian"][0]
            np.testing.assert_allclose(fns[name](x), rosen_hessian(x), rtol=1e-10, atol=1e-8)
    for name in ("sparse_hessian", "sparse_hessian_traced"):
        if name in fns:
            x = data["sparse_hessian"][0]
            check_sparse_hessian(fns[name](x), x)
    for name in ("chain", "elementwise"):
        g, b = fns.get("grad_" + name), fns.get("backward_" + name)
        if g and b:
            got, want = g(*data[name]), b(*data[name])
            for u, v in zip(np.atleast_1d(got) if name == "chain" else got,
                            np.atleast_1d(want) if name == "chain" else want):
                np.testing.assert_allclose(u, v, rtol=1e-12)
