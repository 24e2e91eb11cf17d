"""The generated docs table matches what the code dispatches."""
import pathlib
import runpy

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_numpy_function_table_is_up_to_date():
    table = (ROOT / "docs" / "numpy_functions.md").read_text()
    if f"with NumPy {np.__version__}." not in table:
        pytest.skip("docs/numpy_functions.md was generated with another NumPy version")
    render = runpy.run_path(str(ROOT / "docs" / "make_function_table.py"))["render"]
    assert table == render(), \
        "docs/numpy_functions.md is stale: run python docs/make_function_table.py"
