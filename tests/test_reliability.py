"""The bad-input table in docs/reliability.md: up to date, and every row harmless.

Each row of the table (docs/make_reliability_table.py) runs again here on a
busy tape: two leaves with gradients already accumulated, a graph that
saves them, another live graph.  The row must give its documented outcome,
and afterwards the leaves' values and gradients are unchanged, both graphs
still differentiate correctly and new graphs work.
"""
import pathlib
import runpy

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, in_fresh_thread

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = runpy.run_path(str(ROOT / "docs" / "make_reliability_table.py"))
DOC = ROOT / "docs" / "reliability.md"

X_VAL = np.linspace(0.1, 2.0, 20)
W_VAL = np.array([0.5, -1.5, 2.0])


def test_table_is_up_to_date():
    doc = DOC.read_text()
    if f"Generated with NumPy {np.__version__};" not in doc:
        pytest.skip("docs/reliability.md was generated with another NumPy version")
    assert doc == TABLE["render"](doc), \
        "docs/reliability.md is stale: run python docs/make_reliability_table.py"


def _documented():
    doc = DOC.read_text()
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| ") and not line.startswith("| input"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells[1]
    return rows


@pytest.mark.parametrize("i", range(len(TABLE["CASES"])),
                         ids=[f"row{i}" for i in range(len(TABLE["CASES"]))])
def test_row_leaves_everything_intact(i):
    label, trigger = TABLE["CASES"][i]
    in_fresh_thread(lambda: _scenario(label, trigger))


def _scenario(label, trigger):
    x, w, saver = TABLE["standard_leaves"]()      # saver's graph saves x (read-only)
    k = tg.tensor([1.0, 2.0], requires_grad=True)
    other = (tg.exp(k) * k).sum()                   # another live graph
    (x * 2.0).sum().backward()                      # gradients accumulated before
    (w * w).sum().backward()
    gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()

    kind, _ = TABLE["outcome"](trigger, x, w)
    documented = _documented().get(TABLE["_cell"](label))
    if documented is not None:  # a row added since the table was generated is caught above
        assert kind == documented, (label, kind, documented)

    assert np.array_equal(x.numpy(), X_VAL) and np.array_equal(w.numpy(), W_VAL)
    assert np.array_equal(x.grad.numpy(), gx) and np.array_equal(w.grad.numpy(), gw)
    saver.backward()
    close(x.grad, gx + 0.5 / X_VAL + np.r_[np.sin(W_VAL), np.zeros(17)])
    close(w.grad, gw + np.cos(W_VAL) * X_VAL[:3])
    other.backward()
    close(k.grad, np.exp([1.0, 2.0]) * (1.0 + np.array([1.0, 2.0])))
    gx = x.grad.numpy().copy()
    (x * w.sum()).sum().backward()
    close(x.grad, gx + W_VAL.sum())


@pytest.mark.parametrize("make", [
    lambda x: x * __import__("fractions").Fraction(3, 2),
    lambda x: __import__("fractions").Fraction(3, 2) * x,
    lambda x: x + np.array([__import__("fractions").Fraction(1, 2)] * 3, dtype=object),
    lambda x: np.multiply(x, __import__("fractions").Fraction(2)),
    lambda x: x ** __import__("fractions").Fraction(1, 2),
])
def test_object_dtype_is_refused_at_the_boundary(make):
    """An operand NumPy keeps as a Python object would make an object-dtype
    tensor that the next op fails on with an internal error: the op itself
    refuses it, naming the dtype, and records nothing."""
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2.0
    with pytest.raises(TypeError, match="dtype object"):
        make(x)
    y.sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])
