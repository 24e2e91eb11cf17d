"""Write docs/numpy_functions.md: which NumPy functions and ufuncs tapegrad
differentiates, which run on plain values, and what the others raise; and
the scipy.linalg, scipy.special and scipy.stats functions that
tapegrad.scipy provides.

Run ``python docs/make_function_table.py``; ``tests/test_docs.py`` fails when
the file is out of date.
"""
import pathlib

import numpy as np

from tapegrad.ops import complex_linalg as CL
from tapegrad.ops import complex_tensor as Z
from tapegrad.ops.numpy_api import HANDLED_FUNCTIONS, PLAIN_UFUNCS, SPECIAL_UFUNCS, UFUNCS
from tapegrad.scipy import linalg as SL, special as SS, stats as ST

OUT = pathlib.Path(__file__).with_name("numpy_functions.md")
NAMESPACES = [("numpy", np), ("numpy.linalg", np.linalg), ("numpy.fft", np.fft)]


def _public(ns):
    for name in sorted(dir(ns)):
        obj = getattr(ns, name)
        if name.startswith("_") or not callable(obj) or isinstance(obj, type):
            continue
        yield name, obj


def rows():
    plain = {f for f, g in HANDLED_FUNCTIONS.items() if getattr(g, "plain_values", False)}
    for prefix, ns in NAMESPACES:
        for name, obj in _public(ns):
            full = f"{prefix}.{name}"
            if isinstance(obj, np.ufunc):
                if obj in UFUNCS:
                    yield full, "differentiable", UFUNCS[obj].__name__
                elif obj in PLAIN_UFUNCS:
                    yield full, "plain values", "no gradient"
                else:
                    yield full, "TypeError", f"tapegrad cannot differentiate {full} yet"
            elif obj in HANDLED_FUNCTIONS:
                if obj in plain:
                    yield full, "plain values", "no gradient"
                else:
                    yield full, "differentiable", HANDLED_FUNCTIONS[obj].__name__
            elif hasattr(obj, "_implementation"):  # dispatches __array_function__
                yield full, "TypeError", f"tapegrad cannot differentiate {full} yet"
            else:  # not overridable: NumPy converts tensors with __array__
                yield full, "plain values", "converts tensors to arrays (no gradient)"


def scipy_rows():
    """``(namespace, SciPy name, tapegrad.scipy name)`` of every function
    tapegrad.scipy provides: scipy.linalg's and scipy.special's functions,
    and the methods of scipy.stats' distributions."""
    for mod in (SL, SS):
        ns = mod.__name__.removeprefix("tapegrad.")
        for name in mod.__all__:
            yield ns, f"{ns}.{name}", f"{mod.__name__}.{name}"
    for name in ST.__all__:
        dist = getattr(ST, name)
        for method in sorted(m for m in dir(dist) if not m.startswith("_")
                             and callable(getattr(dist, m))):
            yield "scipy.stats", f"scipy.stats.{name}.{method}", \
                f"tapegrad.scipy.stats.{name}.{method}"


def _scipy_lines():
    ufuncs = set(SPECIAL_UFUNCS) | {"digamma"}  # psi's other name, as above
    lines = [
        "",
        "## tapegrad.scipy",
        "",
        "SciPy's Python functions (`scipy.linalg`'s, `scipy.special.logsumexp`, the",
        "`scipy.stats` distributions' methods) convert their input with `np.asarray`,",
        "so on a tensor that requires grad they raise tapegrad's conversion error, and",
        "the SciPy ufuncs tapegrad does not know raise a TypeError; both errors name",
        "the counterpart below where there is one. `tapegrad.scipy` has these under",
        "SciPy's names, with SciPy's arguments and values, as tensors built from",
        "tapegrad's differentiable ops (each module's docstring says which derivatives",
        "reach through which function). The last column says what SciPy's own",
        "function does with a tensor that requires grad.",
    ]
    rows = list(scipy_rows())
    for ns in ("scipy.linalg", "scipy.special", "scipy.stats"):
        lines += ["", f"### {ns}", "", "| function | tapegrad.scipy | SciPy's own, on a tensor |",
                  "|---|---|---|"]
        for n, full, ours in rows:
            if n != ns:
                continue
            if ns == "scipy.special" and full.removeprefix("scipy.special.") in ufuncs:
                own = "records (a ufunc: the table above)"
            else:
                own = "raises, naming this counterpart"
            lines.append(f"| `{full}` | `{ours}` | {own} |")
    return lines


def _qualname(f):
    for prefix, ns in NAMESPACES:
        if getattr(ns, f.__name__, None) is f:
            return f"{prefix}.{f.__name__}"
    return f.__name__


def _complex_order(f):
    if Z.UFUNCS.get(f) is Z._not_ordered:
        return "raises (no order)"
    if f in (np.equal, np.not_equal, np.iscomplexobj, np.isrealobj, np.shape, np.ndim,
             np.size):
        return "no gradient"
    if f in CL.FIRST_ORDER_ONLY:
        return "first order"
    if f in CL.NO_HESSIAN:
        return "first order, jvp, create_graph=True (no tg.hessian)"
    if f in CL.PARTLY_NO_HESSIAN:
        return ("first and second order; for ord 2, -2, 'nuc': first order, jvp, "
                "create_graph=True (no tg.hessian)")
    return "first and second order"


def render():
    lines = [
        "# NumPy functions in tapegrad",
        "",
        f"Generated by `python docs/make_function_table.py` with NumPy {np.__version__}.",
        "*differentiable*: the call",
        "records on the tape when given tensors (the tapegrad function it dispatches to",
        "is named); *plain values*: it runs on the tensors' values and returns arrays",
        "without gradient; *TypeError*: it raises with the message shown, which also",
        "says to pass `t.numpy()` to compute on plain values.",
        "",
        "| function | status | detail |",
        "|---|---|---|",
    ]
    counts = {}
    for full, status, detail in rows():
        counts[status] = counts.get(status, 0) + 1
        lines.append(f"| `{full}` | {status} | {detail} |")
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    lines.insert(9, f"In all: {summary}.\n")
    lines += [
        "",
        "## scipy.special",
        "",
        "These SciPy ufuncs reach tapegrad through `__array_ufunc__` (tapegrad does not",
        "import SciPy; any other SciPy ufunc raises the TypeError above, naming",
        "`scipy.special` and, where there is one, its differentiable counterpart in",
        "`tapegrad.scipy.special`). `scipy.special.logsumexp`, `softmax`, `log_softmax`,",
        "`polygamma`, `multigammaln` and the `scipy.stats` distributions are Python",
        "functions that convert their input with `np.asarray`, which no NumPy protocol",
        "lets tapegrad intercept: they raise tapegrad's conversion error, which names",
        "the counterpart in `tapegrad.scipy.special` or `tapegrad.scipy.stats` (same",
        "arguments and values, as tensors; see docs/reference.md).",
        "",
        "| function | status | detail |",
        "|---|---|---|",
    ]
    names = {"psi": "digamma"}
    lines_after = [
        "",
        "## On complex tensors",
        "",
        "A complex tensor (`tg.tensor(complex_array)`, `tg.complex(re, im)`, a tensor",
        "times a complex number, `np.fft.fft(t)`) is a pair of real tensors; these",
        "ufuncs and functions take it, and any other raises a TypeError naming the",
        "function and saying to work on `z.real` and `z.imag`. `np.abs`, `np.real`,",
        "`np.imag` and `np.angle` give real tensors; comparisons other than `==` and",
        "`!=` raise (complex numbers have no order). Gradients are PyTorch's:",
        "`z.grad = dL/dx + i dL/dy` for a real loss L of `z = x + iy`.",
        "",
        "Most are written as real recorded ops on the parts, so second derivatives",
        "(`tg.hessian`, `hvp`, `create_graph`) go through them: `inv` and `solve`",
        "through the real embedding `[[Ar, -Ai], [Ai, Ar]]`, `det`, `slogdet` and",
        "`cholesky` by block elimination in partial pivoting's row order. The",
        "decompositions whose vectors are fixed only up to a phase (`eigh`, `svd`,",
        "`eig`) have their own rules: reverse and forward mode (`tg.jvp`; `eig`'s",
        "eigenvector tangents keep LAPACK's normalisation, unit length and the",
        "largest entry real) and `create_graph=True` to any order, but no",
        "`tg.hessian` / `tg.hvp`; their gradient raises, as PyTorch's, when the loss",
        "depends on those phases.",
        "",
        "| function | derivatives |",
        "|---|---|",
        *[f"| `{_qualname(f)}` | {_complex_order(f)} |"
          for f in sorted(set(Z.UFUNCS) | set(Z.FUNCTIONS), key=_qualname)],
        "",
        "## What NumPy's protocols cannot reach",
        "",
        "NumPy calls tapegrad only when a tensor is itself an argument. A Python list",
        "of tensors (`np.array([t1, t2])`, `np.asarray([t1, t2])`, `np.mean([t1, t2])`,",
        "`np.sum([t1, t2], axis=0)`, `np.r_[t1, t2]`) is converted element by element",
        "with `np.asarray`, which would drop the gradient: for tensors that require",
        "grad it raises tapegrad's conversion error, which says to build the array",
        "with `tg.stack` / `tg.concatenate` (`np.mean(tg.stack([t1, t2]), axis=0)`).",
        "The same error comes from Python functions of other libraries that convert",
        "their input first, such as `scipy.special.logsumexp`.",
    ]
    for name in sorted(SPECIAL_UFUNCS):
        lines.append(f"| `scipy.special.{name}` | differentiable | "
                     f"{SPECIAL_UFUNCS[name].__name__} |")
        if name in names:
            lines.append(f"| `scipy.special.{names[name]}` | differentiable | "
                         f"{SPECIAL_UFUNCS[name].__name__} |")
    return "\n".join(lines + _scipy_lines() + lines_after) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
