"""The examples: the README's main one prints the seeds' numbers, and an
unmodified NumPy routine (examples/lennard_jones.py) differentiates."""
import pathlib
import runpy
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_seeds_example_prints_the_answers():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "seeds.py")],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    assert "a.grad = tensor([0.3, 3.0, 0.0003])" in out
    assert "b.grad = tensor([1.2, 16.0, 0.002])" in out
    assert "c.grad = tensor([0.01666667, 0.14285714, 1.25e-05])" in out
    assert "a.grad = tensor(3.0)  b.grad = tensor(4.0)  c.grad = tensor(10.0)" in out
    assert "a.grad = tensor(6.0)  b.grad = tensor(8.0)  c.grad = tensor(2.0)" in out
    assert "Trying to backward through the graph a second time" in out
    assert "same UnbindBackward node: True | slots: 0 1" in out


def test_lennard_jones_forces_match_closed_form_and_finite_differences():
    main = runpy.run_path(str(ROOT / "examples" / "lennard_jones.py"))["main"]
    forces, exact, numeric = main()
    np.testing.assert_allclose(forces, exact, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(forces, numeric, rtol=1e-5, atol=1e-6)


def test_custom_activation_example_trains():
    ns = runpy.run_path(str(ROOT / "examples" / "custom_activation.py"))
    losses = ns["fit"](steps=400)
    assert losses[-1] < 0.01 * losses[0]
    # the op's compiled derivative against a central difference
    x = np.linspace(-3, 3, 13)
    h = 1e-6
    numeric = (ns["squareplus"](x + h) - ns["squareplus"](x - h)) / (2 * h)
    exact = [ns["squareplus_derivative"](v, 0.0) for v in x]
    np.testing.assert_allclose(exact, numeric, rtol=1e-8)
