"""The NumPy-coverage workloads, in tapegrad, hand-written NumPy and PyTorch.

Five forward+backward workloads, each the gradient of a scalar loss:

* ``softmax``: ``sum(logsumexp(X, axis=1)) + sum(W * softmax(X, axis=1))``, X 1000x1000;
* ``solve``: ``sum(w * solve(A, b))`` for a batch of 64 32x32 systems;
* ``einsum``: ``sum(W * einsum('bij,bjk->bik', P, Q))``, P 64x32x48, Q 64x48x16;
* ``stencil``: ``sum((u[1:] - u[:-1])**2) + sum((u[:, 1:] - u[:, :-1])**2)``,
  the finite-difference energy of a 1000x1000 grid (basic slicing);
* ``transpose``: ``sum((X.T - X)**2)`` of a 1000x1000 X.

Every implementation returns its gradients as NumPy arrays; ``check`` asserts
they agree before anything is timed.  The differentiable inputs are leaves
that share the given arrays (``tg.from_numpy``, ``torch.from_numpy``), so no
column copies its inputs inside the timed call: hand NumPy reads them in place
too.  Used by ``compare_ops.py`` and by the
asv suite (``benchmarks/bench_ops.py``).
"""
import numpy as np

SEED = 0


def inputs():
    rng = np.random.default_rng(SEED)
    soft = (rng.standard_normal((1000, 1000)), rng.standard_normal((1000, 1000)))
    A = rng.standard_normal((64, 32, 32)) + 8.0 * np.eye(32)
    solve = (A, rng.standard_normal((64, 32)), rng.standard_normal((64, 32)))
    ein = (rng.standard_normal((64, 32, 48)), rng.standard_normal((64, 48, 16)),
           rng.standard_normal((64, 32, 16)))
    grid = (rng.standard_normal((1000, 1000)),)
    return {"softmax": soft, "solve": solve, "einsum": ein, "stencil": grid,
            "transpose": (rng.standard_normal((1000, 1000)),)}


# -- hand-written NumPy: forward and VJP ---------------------------------------
def np_softmax(X, W):
    m = X.max(axis=1, keepdims=True)
    e = np.exp(X - m)
    s = e.sum(axis=1, keepdims=True)
    p = e / s
    loss = (np.log(s[:, 0]) + m[:, 0]).sum() + (W * p).sum()
    gX = p + p * (W - (W * p).sum(axis=1, keepdims=True))
    return loss, (gX,)


def np_solve(A, b, w):
    x = np.linalg.solve(A, b[..., None])[..., 0]
    loss = (w * x).sum()
    gb = np.linalg.solve(np.swapaxes(A, -1, -2), w[..., None])[..., 0]
    gA = -gb[..., :, None] * x[..., None, :]
    return loss, (gA, gb)


def np_einsum(P, Q, W):
    out = np.einsum("bij,bjk->bik", P, Q)
    loss = (W * out).sum()
    return loss, (np.einsum("bik,bjk->bij", W, Q), np.einsum("bij,bik->bjk", P, W))


def np_stencil(U):
    dx, dy = U[1:] - U[:-1], U[:, 1:] - U[:, :-1]
    loss = (dx * dx).sum() + (dy * dy).sum()
    g = np.zeros_like(U)
    dx *= 2.0
    dy *= 2.0
    g[1:] += dx
    g[:-1] -= dx
    g[:, 1:] += dy
    g[:, :-1] -= dy
    return loss, (g,)


def np_transpose(X):
    D = X.T - X
    loss = (D * D).sum()
    D *= 2.0
    return loss, (D.T - D,)


NUMPY = {"softmax": np_softmax, "solve": np_solve, "einsum": np_einsum,
         "stencil": np_stencil, "transpose": np_transpose}
WORKLOADS = tuple(NUMPY)


# -- tapegrad ---------------------------------------------------------------------
def tapegrad_fns(tg):
    def leaf(a):
        # the leaf shares the caller's array, as hand NumPy reads it in place
        return tg.from_numpy(a).requires_grad_()

    def softmax(X, W):
        x = leaf(X)
        loss = tg.logsumexp(x, axis=1).sum() + (W * tg.softmax(x, axis=1)).sum()
        loss.backward()
        return loss.item(), (x.grad.numpy(),)

    def solve(A, b, w):
        a, bb = leaf(A), leaf(b)
        loss = (w * tg.linalg.solve(a, bb[..., None])[..., 0]).sum()
        loss.backward()
        return loss.item(), (a.grad.numpy(), bb.grad.numpy())

    def einsum(P, Q, W):
        p, q = leaf(P), leaf(Q)
        loss = (W * tg.einsum("bij,bjk->bik", p, q)).sum()
        loss.backward()
        return loss.item(), (p.grad.numpy(), q.grad.numpy())

    def stencil(U):
        u = leaf(U)
        loss = ((u[1:] - u[:-1]) ** 2).sum() + ((u[:, 1:] - u[:, :-1]) ** 2).sum()
        loss.backward()
        return loss.item(), (u.grad.numpy(),)

    def transpose(X):
        x = leaf(X)
        loss = ((x.T - x) ** 2).sum()
        loss.backward()
        return loss.item(), (x.grad.numpy(),)

    return {"softmax": softmax, "solve": solve, "einsum": einsum, "stencil": stencil,
            "transpose": transpose}


# -- PyTorch -------------------------------------------------------------------------
def torch_fns(torch):
    def leaf(a):
        return torch.from_numpy(a).requires_grad_()

    def softmax(X, W):
        x = leaf(X)
        loss = torch.logsumexp(x, 1).sum() + (torch.from_numpy(W) * torch.softmax(x, 1)).sum()
        loss.backward()
        return loss.item(), (x.grad.numpy(),)

    def solve(A, b, w):
        a, bb = leaf(A), leaf(b)
        loss = (torch.from_numpy(w) * torch.linalg.solve(a, bb[..., None])[..., 0]).sum()
        loss.backward()
        return loss.item(), (a.grad.numpy(), bb.grad.numpy())

    def einsum(P, Q, W):
        p, q = leaf(P), leaf(Q)
        loss = (torch.from_numpy(W) * torch.einsum("bij,bjk->bik", p, q)).sum()
        loss.backward()
        return loss.item(), (p.grad.numpy(), q.grad.numpy())

    def stencil(U):
        u = leaf(U)
        loss = ((u[1:] - u[:-1]) ** 2).sum() + ((u[:, 1:] - u[:, :-1]) ** 2).sum()
        loss.backward()
        return loss.item(), (u.grad.numpy(),)

    def transpose(X):
        x = leaf(X)
        loss = ((x.T - x) ** 2).sum()
        loss.backward()
        return loss.item(), (x.grad.numpy(),)

    return {"softmax": softmax, "solve": solve, "einsum": einsum, "stencil": stencil,
            "transpose": transpose}


def check(fns, data):
    """Assert that ``fns`` compute the hand-written gradients."""
    for name, fn in fns.items():
        want = NUMPY[name](*data[name])
        got = fn(*data[name])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-9)
        for g, w in zip(got[1], want[1]):
            np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-10)
