"""Hand-written NumPy forward passes and vector-Jacobian products (VJPs).

This is the honest baseline for the benchmark suite: what a careful person
writes by hand, without any autodiff library, for the three workloads that
``compare.py`` and the asv suite time.

* **Scalar chain** -- ``y <- y*0.999 + sin(y)*0.001`` for ``steps`` steps from a
  0-d float64 start.  Written with plain Python floats and :mod:`math`, which is
  the fastest way to do scalar arithmetic in CPython (``np.float64`` scalars
  and ``np.sin`` on them are several times slower).  The forward loop stores
  the inputs of each step, the reverse loop multiplies the local derivatives
  ``0.999 + 0.001*cos(y_k)``.
* **Elementwise** -- ``sum(3*a + 2*b*b + log(c))`` on float64 vectors,
  vectorized NumPy.
* **MLP step** -- ``h = tanh(X @ W1); z = h @ W2``; the loss is the mean softmax
  cross-entropy ``mean(logsumexp(z, axis=1) - z[i, labels[i]])``, vectorized
  NumPy with a numerically stable log-sum-exp.

Every workload is split into a ``*_forward`` function, which returns the value
and whatever the VJP needs (a "tape" of the minimum size), and a ``*_vjp``
function that maps that saved state and the output cotangent to the gradients
of the inputs.  ``*_value_and_grad`` chains the two.  :func:`self_check`
verifies every VJP against central finite differences; run this module as a
script to execute it.
"""

import math

import numpy as np

__all__ = [
    "CHAIN_A",
    "CHAIN_B",
    "chain_forward",
    "chain_vjp",
    "chain_value_and_grad",
    "elementwise_forward",
    "elementwise_vjp",
    "elementwise_value_and_grad",
    "mlp_forward",
    "mlp_vjp",
    "mlp_value_and_grad",
    "self_check",
]

#: Coefficients of one step of the scalar chain: ``y*CHAIN_A + sin(y)*CHAIN_B``.
CHAIN_A = 0.999
CHAIN_B = 0.001


# --------------------------------------------------------------------------
# Scalar chain
# --------------------------------------------------------------------------

def chain_forward(x0, steps):
    """Run the chain forward from ``x0``; return ``(y, saved)``.

    ``saved`` is the list of the ``steps`` inputs ``y_0 .. y_{steps-1}`` of each
    step, which is all the reverse sweep needs.
    """
    a, b, sin = CHAIN_A, CHAIN_B, math.sin
    y = float(x0)
    saved = [0.0] * steps
    for k in range(steps):
        saved[k] = y
        y = y * a + sin(y) * b
    return y, saved


def chain_vjp(saved, g=1.0):
    """Reverse sweep of the chain: ``g * dy/dx0`` from the saved step inputs."""
    a, b, cos = CHAIN_A, CHAIN_B, math.cos
    g = float(g)
    for y in reversed(saved):
        g *= a + b * cos(y)
    return g


def chain_value_and_grad(x0, steps):
    """Value and derivative of the chain with respect to its start ``x0``."""
    y, saved = chain_forward(x0, steps)
    return y, chain_vjp(saved)


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------

def elementwise_forward(a, b, c):
    """``sum(3*a + 2*b*b + log(c))``; the VJP only needs ``b`` and ``c``."""
    value = (3.0 * a + 2.0 * b * b + np.log(c)).sum()
    return value, (a.shape, a.dtype, b, c)


def elementwise_vjp(saved, g=1.0):
    """Gradients ``(da, db, dc)`` = ``g * (3, 4*b, 1/c)``."""
    shape, dtype, b, c = saved
    da = np.full(shape, 3.0 * g, dtype=dtype)
    db = (4.0 * g) * b
    dc = g / c
    return da, db, dc


def elementwise_value_and_grad(a, b, c):
    """Value and gradients of the elementwise workload."""
    value, saved = elementwise_forward(a, b, c)
    return value, elementwise_vjp(saved)


# --------------------------------------------------------------------------
# MLP step
# --------------------------------------------------------------------------

def mlp_forward(X, W1, W2, labels):
    """Two-layer tanh MLP with mean softmax cross-entropy; ``(loss, saved)``.

    ``saved`` holds the hidden activations and the softmax probabilities,
    which is what the backward pass needs (the pre-activations are not).
    """
    n = X.shape[0]
    rows = np.arange(n)
    h = np.tanh(X @ W1)
    z = h @ W2
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(s[:, 0])
    loss = (lse - z[rows, labels]).mean()
    p = e / s  # softmax(z)
    return loss, (X, W2, labels, rows, h, p)


def mlp_vjp(saved, g=1.0):
    """Gradients ``(dW1, dW2)`` of the MLP loss, scaled by ``g``."""
    X, W2, labels, rows, h, p = saved
    n = X.shape[0]
    dz = p  # reuse the buffer: p is not needed afterwards
    dz[rows, labels] -= 1.0
    dz *= g / n
    dW2 = h.T @ dz
    da = dz @ W2.T
    da *= 1.0 - h * h
    dW1 = X.T @ da
    return dW1, dW2


def mlp_value_and_grad(X, W1, W2, labels):
    """Value and gradients ``(dW1, dW2)`` of the MLP loss."""
    loss, saved = mlp_forward(X, W1, W2, labels)
    return loss, mlp_vjp(saved)


# --------------------------------------------------------------------------
# Self-check against finite differences
# --------------------------------------------------------------------------

def _central_difference(f, x, eps=1e-6):
    """Central-difference gradient of the scalar function ``f`` at array ``x``."""
    x = np.array(x, dtype=np.float64)
    grad = np.empty_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        fp = f(x)
        flat[i] = old - eps
        fm = f(x)
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * eps)
    return grad


def self_check(seed=0, rtol=1e-5, atol=1e-7, verbose=False):
    """Check every hand-written VJP against central finite differences.

    Uses small inputs so that it runs in well under a second.  Raises
    ``AssertionError`` on a mismatch; returns ``True`` otherwise.
    """
    rng = np.random.default_rng(seed)

    def check(name, got, want):
        ok = np.allclose(got, want, rtol=rtol, atol=atol)
        if verbose:
            err = np.max(np.abs(np.asarray(got) - np.asarray(want)))
            print(f"{name:<12} max abs err {err:.2e}  {'ok' if ok else 'FAIL'}")
        assert ok, f"{name}: VJP disagrees with finite differences"

    # Chain, full length (it is cheap).
    steps = 2000
    _, dx = chain_value_and_grad(0.5, steps)
    fd = _central_difference(lambda v: chain_forward(v[()], steps)[0], 0.5)
    check("chain", dx, fd)

    # Elementwise on a short vector.
    a, b = rng.standard_normal(7), rng.standard_normal(7)
    c = rng.uniform(0.5, 2.0, 7)
    _, grads = elementwise_value_and_grad(a, b, c)
    for name, i, arr in (("elem da", 0, a), ("elem db", 1, b), ("elem dc", 2, c)):
        args = [a, b, c]

        def f(v, i=i, args=args):
            args = list(args)
            args[i] = v
            return elementwise_forward(*args)[0]

        check(name, grads[i], _central_difference(f, arr))

    # MLP with small dimensions.
    n, d, hdim, k = 6, 5, 4, 3
    X = rng.standard_normal((n, d))
    W1 = rng.standard_normal((d, hdim)) * 0.5
    W2 = rng.standard_normal((hdim, k)) * 0.5
    labels = rng.integers(0, k, n)
    _, (dW1, dW2) = mlp_value_and_grad(X, W1, W2, labels)
    check("mlp dW1", dW1,
          _central_difference(lambda w: mlp_forward(X, w, W2, labels)[0], W1))
    check("mlp dW2", dW2,
          _central_difference(lambda w: mlp_forward(X, W1, w, labels)[0], W2))
    return True


if __name__ == "__main__":
    self_check(verbose=True)
    print("hand-written VJPs agree with finite differences")
