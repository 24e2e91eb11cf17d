"""``python -m tapegrad warm`` compiles what typical programs use."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_warm_steps_cover_typical_programs():
    """After warm's steps, no kernel of tests/warm_programs.py's programs (a
    long chain, a fused elementwise run, an MLP, a small-array loop, a trace,
    Jacobians and Hessians, reductions) is left to load or compile."""
    env = dict(os.environ, TAPEGRAD_QUIET="1")
    out = subprocess.run([sys.executable, os.path.join(HERE, "warm_programs.py")],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "MISSED []", out.stdout[-2000:]


def test_warm_has_the_long_tape_step():
    """A tape longer than GRAPH_SEARCH_FROM records takes the graph search;
    warm has a step for it, and that step compiles both kernels."""
    from tapegrad.__main__ import _steps
    from tapegrad.kernels import interpret
    from tapegrad.kernels.sweep import graph_addresses, graph_of
    steps = dict(_steps())
    with interpret.mode(0):
        steps["graph search of a long tape"]()
    assert graph_of.signatures and graph_addresses.signatures
