"""A user's own activation function as a compiled tapegrad op.

``tg.elementwise`` takes the activation and its derivative as scalar Python
functions; Numba compiles the forward to a NumPy ufunc and the derivative to
machine code that the reverse sweep calls directly, so training-style loops
pay no Python call per backward for it.  Here: the "squareplus" activation
(a smooth ReLU, x/2 + sqrt(x^2 + b)/2 with b = 4) in a two-layer regression
fitted with Adam.

Run: python examples/custom_activation.py
"""
import math

import numpy as np

import tapegrad as tg

B = 4.0


def squareplus_derivative(x, y):
    """d/dx of squareplus, given its input x (the output y is not needed)."""
    return 0.5 + 0.5 * x / math.sqrt(x * x + B)


@tg.elementwise(derivative=squareplus_derivative)
def squareplus(x):
    return 0.5 * (x + math.sqrt(x * x + B))


def fit(steps=400, lr=0.02, seed=0):
    """Fit y = sin(2x) + x^2/10 with a 1-32-1 squareplus network (Adam)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (256, 1))
    target = np.sin(2 * X) + 0.1 * X ** 2
    params = [tg.tensor(rng.standard_normal((1, 32)), requires_grad=True),
              tg.tensor(rng.uniform(-2, 2, 32), requires_grad=True),
              tg.tensor(rng.standard_normal((32, 1)) / np.sqrt(32), requires_grad=True),
              tg.tensor(np.zeros(1), requires_grad=True)]
    m = [np.zeros(p.shape) for p in params]
    v = [np.zeros(p.shape) for p in params]
    losses = []
    for step in range(1, steps + 1):
        W1, b1, W2, b2 = params
        h = squareplus(X @ W1 + b1)
        loss = ((h @ W2 + b2 - target) ** 2).mean()
        loss.backward()
        step_size = lr * np.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step)
        for p, mk, vk in zip(params, m, v):   # Adam, in plain NumPy
            g = p.grad.numpy()
            mk[...] = 0.9 * mk + 0.1 * g
            vk[...] = 0.999 * vk + 0.001 * g * g
            with tg.no_grad():  # update the leaf itself (not a detached copy)
                p -= step_size * mk / (np.sqrt(vk) + 1e-8)
            p.grad = None
        losses.append(float(loss.detach()))  # a number for the log, on purpose
    return losses


if __name__ == "__main__":
    losses = fit()
    print(f"squareplus network: loss {losses[0]:.4f} -> {losses[-1]:.4f} "
          f"after {len(losses)} steps")
