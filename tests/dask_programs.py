"""Functions that tests/test_dask.py traces and sends to Dask workers.

They live in a module of their own, which the workers import by name (the
test's cluster puts tests/ on their PYTHONPATH), so that a traced function
travels with its Python function and can trace again on a worker.
"""
import numpy as np


def energy(x):
    """A scalar of a vector: elementwise records, a sum."""
    return (np.sin(x) * x).sum() + 0.5 * (x ** 2).sum()


def layer(x, w):
    """Two inputs, a host record (matmul) between elementwise ones."""
    return (np.tanh(x @ w) ** 2).sum()


def matrix_loss(a):
    """A matrix input: reductions along an axis."""
    return np.log(np.exp(a).sum(axis=1)).sum()


def branchy(x):
    """A Python branch on a traced value: a guard, retraced where it flips."""
    if x.sum() > 0:
        return (x ** 3).sum()
    return -(np.cos(x)).sum()


def vector_out(x):
    """Not a scalar: gradients of it are refused."""
    return np.sin(x) * 2.0


def scalar_input(t):
    """One float per input."""
    return np.exp(-t * t) * t
