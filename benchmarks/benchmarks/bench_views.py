"""asv benchmarks of NumPy's aliasing model in tapegrad: taking a view costs
the same whatever the size (no copy, no index map), a write through a view
costs its scatter into the base, and a script that fills a trajectory through
a transposed view (``traj.T[:, i] = state``) differentiates at the cost of
its writes."""
import numpy as np

from .bench_core import _tapegrad


class TakeView:
    """Taking ``a.reshape(...)``, ``a.T`` and ``a[::2]`` of a tensor in a graph."""
    params = [[1_000, 1_000_000]]
    param_names = ["size"]

    def setup(self, size):
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(np.random.default_rng(0).normal(size=size), requires_grad=True)
        self.a = (self.x * 1.0).reshape(size // 1000, 1000)

    def time_reshape_transpose_slice(self, size):
        a = self.a
        a.reshape(-1)
        a.T
        a[::2]


class WriteThroughView:
    """``a.T[0] = v`` (a scatter into the base) and its backward."""
    params = [[1_000, 1_000_000]]
    param_names = ["size"]

    def setup(self, size):
        self.tg = tg = _tapegrad()
        self.x = tg.tensor(np.random.default_rng(0).normal(size=size), requires_grad=True)
        self.v = tg.tensor(np.ones(size // 1000), requires_grad=True)

    def time_write_and_backward(self, size):
        a = (self.x * 1.0).reshape(-1, 1000)
        a.T[0] = self.v * 2.0
        (a * a).sum().backward()
        self.x.grad = self.v.grad = None


class FillTrajectory:
    """An explicit Euler loop of 3 states that stores each state through a
    transposed view of the trajectory, then a loss over it."""
    params = [[50, 200]]
    param_names = ["steps"]

    def setup(self, steps):
        self.tg = tg = _tapegrad()

        def loss(p):
            traj = tg.zeros((3, steps))
            s = p * 1.0
            for i in range(steps):
                s = s + 0.01 * np.sin(s[::-1])
                traj.T[i] = s
            return (traj ** 2).sum()
        self.vg = tg.value_and_grad(loss)
        self.p0 = np.array([0.1, 0.2, 0.3])
        self.vg(self.p0)

    def time_value_and_grad(self, steps):
        self.vg(self.p0)
