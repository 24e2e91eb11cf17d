"""Forces from an energy: a plain NumPy routine, differentiated unchanged.

``lj_energy`` is ordinary NumPy code for the Lennard-Jones potential energy of
a cluster of atoms, written for arrays with no knowledge of tapegrad.  Handed
a tensor of positions, it records; ``backward`` gives dE/dx, and the forces
are its negative -- checked here against the closed form and against finite
differences.
"""
import numpy as np


def lj_energy(positions, epsilon=1.0, sigma=1.0):
    """Total Lennard-Jones energy of atoms at ``positions`` (n x 3), plain NumPy."""
    i, j = np.triu_indices(positions.shape[0], k=1)   # each pair once
    diff = positions[i] - positions[j]
    r = np.sqrt(np.sum(diff ** 2, axis=-1))
    s6 = (sigma / r) ** 6
    return np.sum(4.0 * epsilon * (s6 ** 2 - s6))


def lj_forces_closed_form(positions, epsilon=1.0, sigma=1.0):
    """The forces -dE/dx written out by hand, for comparison."""
    diff = positions[:, None, :] - positions[None, :, :]
    r2 = np.sum(diff ** 2, axis=-1)
    np.fill_diagonal(r2, np.inf)
    s6 = (sigma ** 2 / r2) ** 3
    coef = 24.0 * epsilon * (2.0 * s6 ** 2 - s6) / r2
    return np.sum(coef[:, :, None] * diff, axis=1)


def main():
    import tapegrad as tg

    rng = np.random.default_rng(0)
    grid = np.stack(np.meshgrid(*[np.arange(2.0)] * 3), -1).reshape(-1, 3) * 1.12
    x0 = grid + rng.normal(scale=0.05, size=grid.shape)   # 8 atoms, a perturbed cube

    x = tg.tensor(x0, requires_grad=True)
    energy = lj_energy(x)                  # the NumPy function, given a tensor
    energy.backward()
    forces = -x.grad.numpy()

    exact = lj_forces_closed_form(x0)
    eps = 1e-6
    numeric = np.zeros_like(x0)
    for k in np.ndindex(x0.shape):
        e = np.zeros_like(x0)
        e[k] = eps
        numeric[k] = -(lj_energy(x0 + e) - lj_energy(x0 - e)) / (2 * eps)
    print(f"energy            {energy.detach().item(): .10f}  (NumPy: {lj_energy(x0): .10f})")
    print(f"max |tapegrad - closed form|      {np.abs(forces - exact).max():.2e}")
    print(f"max |tapegrad - finite difference| {np.abs(forces - numeric).max():.2e}")
    return forces, exact, numeric


if __name__ == "__main__":
    main()
