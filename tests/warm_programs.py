"""Typical programs, run after ``python -m tapegrad warm``'s steps in the same
process: tests/test_warm.py runs this file in a fresh interpreter and expects
it to print ``MISSED []``.

After the warm steps every kernel they reached is loaded in this process, so
a kernel that one of these programs still has to decide about (interpret,
load from the cache or compile: ``kernels/interpret.run_as_python``) is one
that ``warm`` left out -- a program that runs after ``warm`` would pay its
compilation, or the interpreted tier's rent, on first use.
"""
import numpy as np

import tapegrad as tg
import tapegrad.transforms.functional as ft
from tapegrad.__main__ import _steps
from tapegrad.kernels import dispatch, interpret


def _chain(n):
    x = tg.tensor(0.5, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 0.999 + np.sin(y) * 0.001
    y.backward()


def programs():
    _chain(3000)  # a tape longer than GRAPH_SEARCH_FROM records
    a = tg.tensor(np.linspace(0.1, 0.9, 1 << 18), requires_grad=True)
    (3 * a + 2 * a * a + np.log(a)).sum().backward()  # a fused elementwise run
    rng = np.random.default_rng(0)
    X = rng.random((64, 30))
    W1 = tg.tensor(rng.random((30, 16)), requires_grad=True)
    W2 = tg.tensor(rng.random((16, 5)), requires_grad=True)
    z = np.tanh(X @ W1) @ W2
    loss = (tg.logsumexp(z, axis=1) - z[:, 0]).mean()
    loss.backward(retain_graph=True)
    loss.backward()
    tg.grad(lambda w: (np.tanh(X @ w) ** 2).sum())(W1.numpy())
    s = tg.tensor(np.array([1.0, 0.5]), requires_grad=True)
    for _ in range(50):  # a small-array loop: indexing and stacking
        s = np.stack([s[0] + 0.01 * s[0] * s[1], s[1] - 0.01 * s[0] * s[1]])
    (s * s).sum().backward()
    f = tg.trace(lambda v: (np.sin(v) * v).sum() + np.exp(v).max(), np.linspace(0, 1, 5))
    ft.value_and_grad(f)(np.linspace(0, 2, 5))
    f.grad_batch(np.ones((3, 5)))
    tg.jacobian(lambda v: np.tanh(v) * v)(np.ones(4))
    M = rng.random((30, 30))
    tg.jacobian(lambda v: np.tanh(M @ v) * v)(np.ones(30))
    fm = tg.trace(lambda v: np.tanh(M @ v) * v, np.ones(30))
    fm.jacobian(np.ones(30))
    tg.jacobian(fm)(np.ones(30))
    tg.vjp(fm, np.ones(30))[1](np.ones(30))
    tg.hessian(lambda v: (np.exp(v) * v).sum())(np.ones(4))
    x = tg.tensor(rng.random((20, 7)), requires_grad=True)
    y = ((tg.softmax(x, axis=1) * x).sum() + x.sum(axis=0).max() + np.maximum(x, 0.5).mean()
         + tg.concatenate([x, x * 2]).std() + tg.where(x > 0.5, x, -x).sum())
    y.backward()
    x = tg.tensor(rng.random(100), requires_grad=True)
    tg.autograd.grad((np.cumsum(x) * x[::-1]).sum(), [x])


def main():
    with interpret.mode(0):
        for _what, fn in _steps():
            fn()
    missed = set()
    decide = interpret.run_as_python

    def spy(key, in_cache, kernel, args):
        missed.add(getattr(kernel, "__qualname__", None) or repr(key))
        return decide(key, in_cache, kernel, args)

    interpret.run_as_python = dispatch.run_as_python = spy
    programs()
    print("MISSED", sorted(missed))


if __name__ == "__main__":
    main()
