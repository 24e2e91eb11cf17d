"""docs/numpy_functions.md lists every function tapegrad.scipy provides, and
SciPy's own scipy.linalg functions, given a tensor that requires grad, name
their tapegrad.scipy counterpart in the conversion error."""
import pathlib
import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.core.tensor import SCIPY_COUNTERPARTS
from tapegrad.scipy import linalg as SL

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "numpy_functions.md"


def test_the_page_lists_every_tapegrad_scipy_function_once():
    text = PAGE.read_text()
    section = text[text.index("## tapegrad.scipy"):text.index("## On complex tensors")]
    rows = re.findall(r"^\| `scipy\.([\w.]+)` \| `tapegrad\.scipy\.([\w.]+)` \|", section,
                      flags=re.M)
    assert all(a == b for a, b in rows)
    listed = [a for a, _ in rows]
    assert len(listed) == len(set(listed))
    assert set(listed) == SCIPY_COUNTERPARTS
    for ns in ("linalg", "special", "stats"):
        assert f"### scipy.{ns}" in section


def test_every_listed_function_exists():
    import tapegrad.scipy as TS
    for name in SCIPY_COUNTERPARTS:
        obj = TS
        for part in name.split("."):
            obj = getattr(obj, part)
        assert callable(obj), name


A = np.array([[4.0, 1.0], [1.0, 3.0]])
B = np.array([1.0, 2.0])


def _calls(sl, a):
    return {"cho_factor": lambda: sl.cho_factor(a),
            "cho_solve": lambda: sl.cho_solve((a, False), B),
            "cholesky": lambda: sl.cholesky(a), "det": lambda: sl.det(a),
            "eigh": lambda: sl.eigh(a), "eigvalsh": lambda: sl.eigvalsh(a),
            "expm": lambda: sl.expm(a), "inv": lambda: sl.inv(a), "lu": lambda: sl.lu(a),
            "lu_factor": lambda: sl.lu_factor(a),
            "lu_solve": lambda: sl.lu_solve((a, np.array([0, 1])), B),
            "solve": lambda: sl.solve(a, B), "solve_triangular": lambda: sl.solve_triangular(a, B)}


def test_scipy_linalg_names_its_counterpart():
    sl = pytest.importorskip("scipy.linalg")
    a = tg.tensor(A, requires_grad=True)
    calls = _calls(sl, a)
    assert sorted(calls) == sorted(SL.__all__)
    for name, call in calls.items():
        # most of scipy.linalg's functions convert their input inside SciPy's
        # wrapper that broadcasts over stacked matrices: the error still names them
        with pytest.raises(tg.ConcretizationError,
                           match=rf"scipy\.linalg\.{name} converts its input to NumPy.*write "
                                 rf"tapegrad\.scipy\.linalg\.{name} \(same arguments\)"):
            call()
    with pytest.raises(tg.ConcretizationError,
                       match=r"scipy\.linalg\.qr converts its input to NumPy.*no counterpart"):
        sl.qr(a)

