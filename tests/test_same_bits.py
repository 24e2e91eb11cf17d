"""One gradient, one set of bits, whichever tier computes it.

A kernel runs interpreted (its source as Python over NumPy, kernels/
interpret.py) until compiling it pays, then compiled; traced functions
replay in their own loops, ``grad_batch`` in a batched kernel.  Every one of
them must give the same bits, float64 and float32, so that a result does
not change its last bits when the kernels compile, and ``grad_batch``, Dask
workers (fresh processes, interpreted at first) and ``ft.grad`` agree.

The programs below run twice: in this process with every kernel compiled
(the suite's ``TAPEGRAD_INTERPRET=0``), and in a fresh process with
``TAPEGRAD_INTERPRET=force`` (``python test_same_bits.py OUT``), whose
kernels are never compiled.  The results are compared bit for bit
(``np.array_equal`` of their bits; a NaN equals a NaN).
"""
import ast
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.kernels import interpret

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


# -- the programs ---------------------------------------------------------------------

def _logistic(samples=256, features=16, seed=0):
    """The mean logistic loss of a weight vector on a fixed data set."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(samples, features))
    y = np.sign(A @ rng.normal(size=features) + 0.3 * rng.normal(size=samples))

    def loss(w):
        return np.logaddexp(0.0, -y * (A @ w)).mean() + 1e-3 * (w * w).sum()
    return loss


W = np.random.default_rng(1).normal(size=(3000, 16))


def logistic_program(batch_rows=len(W)):
    """The gradient of a traced logistic loss at 3,000 weight vectors, one
    ``ft.grad`` each, and at the first ``batch_rows`` through ``grad_batch``
    (interpreted, 300 of them: 2 ms a row)."""
    ft = tg.trace(_logistic(), W[0])
    return {"rows": np.stack([np.asarray(ft.grad(w)) for w in W]),
            "batch": np.asarray(ft.grad_batch(W[:batch_rows]))}


_RNG = np.random.default_rng(7)
#: inputs in (0.05, 0.95) (every op's domain), 40 elements (whole-array
#: forms) and 6 (element loops)
_U = {n: _RNG.uniform(0.05, 0.95, n) for n in (40, 6)}
_V = {n: _RNG.uniform(0.3, 2.0, n) for n in (40, 6)}
_G = {n: np.cos(np.arange(n) * 1.3) for n in (40, 6)}

#: elementwise ops and reductions: ``name -> f(x, w)``, w a second operand
OPS = {
    "exp": lambda x, w: tg.exp(x), "log": lambda x, w: tg.log(x),
    "log1p": lambda x, w: tg.log1p(x), "expm1": lambda x, w: tg.expm1(x),
    "sin": lambda x, w: tg.sin(x), "cos": lambda x, w: tg.cos(x),
    "tan": lambda x, w: tg.tan(x), "sinh": lambda x, w: tg.sinh(x),
    "cosh": lambda x, w: tg.cosh(x), "tanh": lambda x, w: tg.tanh(x),
    "arcsin": lambda x, w: tg.arcsin(x), "arccos": lambda x, w: tg.arccos(x),
    "arctan": lambda x, w: tg.arctan(x), "arcsinh": lambda x, w: tg.arcsinh(x),
    "arccosh": lambda x, w: tg.arccosh(x + 1.0), "arctanh": lambda x, w: tg.arctanh(x),
    "exp2": lambda x, w: tg.exp2(x), "log2": lambda x, w: tg.log2(x),
    "log10": lambda x, w: tg.log10(x), "cbrt": lambda x, w: tg.cbrt(x),
    "sqrt": lambda x, w: tg.sqrt(x),
    "x ** w": lambda x, w: x ** w, "x ** 2.5": lambda x, w: x ** 2.5,
    "2.5 ** x": lambda x, w: 2.5 ** x,
    "arctan2": lambda x, w: np.arctan2(x, w), "hypot": lambda x, w: np.hypot(x, w),
    "logaddexp": lambda x, w: np.logaddexp(x, -w), "logaddexp2": lambda x, w: np.logaddexp2(x, w),
    "erf": lambda x, w: tg.erf(x), "gammaln": lambda x, w: tg.gammaln(x),
    "digamma": lambda x, w: tg.digamma(x), "log_ndtr": lambda x, w: tg.log_ndtr(x - 0.5),
    "sum, mean": lambda x, w: x * x.sum() + x * x.mean(),
    "sum over an axis": lambda x, w: (x * w).reshape(2, -1).sum(axis=1),
    "logsumexp": lambda x, w: tg.logsumexp((x * w).reshape(2, -1), axis=1),
    "softmax": lambda x, w: tg.softmax((x * w).reshape(2, -1), axis=1),
    "log_softmax": lambda x, w: tg.log_softmax((x * w).reshape(2, -1), axis=0),
    "prod": lambda x, w: tg.prod((1.0 + x).reshape(2, -1), axis=1),
    "max": lambda x, w: tg.max((x * w).reshape(2, -1), axis=1),
    "cumsum": lambda x, w: tg.cumsum(x * w),
    "cumprod": lambda x, w: tg.cumprod(0.5 + x)
    + tg.cumprod((0.5 + x).reshape(2, -1), axis=0).ravel(),
    "matmul": lambda x, w: (x.reshape(-1, 2) @ w.reshape(2, -1)[:, :2]).ravel(),
}


def eager_program():
    """Each op's gradient by eager ``backward``, over 40 and over 6
    elements, float64 and float32."""
    out = {}
    for name, f in OPS.items():
        for n in (40, 6):
            for dt in (np.float64, np.float32):
                x = tg.tensor(_U[n].astype(dt), requires_grad=True)
                w = tg.tensor(_V[n].astype(dt), requires_grad=True)
                y = f(x, w)
                y.backward(_G[n][:y.size].reshape(y.shape).astype(y.dtype))
                out[(name, n, dt.__name__)] = [x.grad.numpy(),
                                               None if w.grad is None else w.grad.numpy()]
    return out


def _mix(x):
    return (tg.sin(x) * tg.exp(-x) + tg.log1p(x) * tg.tanh(x) + tg.arctan(x) ** 1.5
            + np.logaddexp(x, 1.0 - x) + tg.expm1(x) / tg.cosh(x) + tg.log(x) * tg.cbrt(x))


def other_loops_program():
    """A traced function's values (the replay's forwards) and gradients,
    second order, forward mode and the vector sweep, on 40 elements."""
    x = _U[40]
    ft = tg.trace(lambda v: _mix(v), x)
    f = lambda v: _mix(v).sum()
    return {"replay": np.asarray(ft(x)), "traced vjp": np.asarray(ft.vjp(x, _G[40])),
            "hessian": np.asarray(tg.hessian(f)(x[:8])),
            "hvp": np.asarray(tg.hvp(f, (x,), (_V[40],))[1]),
            "jvp": np.asarray(tg.jvp(_mix, (x,), (_V[40],))[1]),
            "jacobian": np.asarray(tg.jacobian(_mix)(x[:8]))}


def _chain(x):
    return tg.tanh(tg.exp(x * 0.5) * tg.sin(x) + tg.log(x)) * x


def fused_program():
    """Runs of elementwise records large enough to be fused: eager (the
    fused reverse sweep) and traced (fused replay segments)."""
    big = np.linspace(0.05, 0.95, 1 << 18)
    x = tg.tensor(big, requires_grad=True)
    _chain(x).sum().backward()
    mid = big[:5000]
    ft = tg.trace(lambda v: _chain(v).sum(), mid)
    return {"eager": x.grad.numpy(), "traced": np.asarray(ft.grad(mid))}


PROGRAMS = {"logistic": logistic_program, "eager": eager_program,
            "loops": other_loops_program, "fused": fused_program}


# -- the two sides ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """Every program run in a fresh process that compiles nothing."""
    d = tmp_path_factory.mktemp("same_bits")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(d / "cache"), TAPEGRAD_QUIET="1")
    env[interpret.BUDGET_ENV] = "force"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + env.get("PYTHONPATH", "").split(os.pathsep))
    out = subprocess.run([sys.executable, str(HERE / "test_same_bits.py"), str(d / "out.pkl")],
                         capture_output=True, text=True, cwd=str(HERE), env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    with open(d / "out.pkl", "rb") as f:
        return pickle.load(f)


def _bits(a):
    a = np.ascontiguousarray(a)
    a = np.where(np.isnan(a), np.nan, a).astype(a.dtype)  # one NaN for every NaN
    return a.view(np.int64 if a.dtype == np.float64 else np.int32)


def _same(want, got, what):
    assert want.shape == got.shape and want.dtype == got.dtype, what
    diff = _bits(want) != _bits(got)
    assert not diff.any(), (f"{what}: {int(diff.sum())} of {diff.size} elements differ, "
                            f"first at {np.argwhere(diff)[0].tolist()}")


@pytest.fixture(scope="module")
def compiled():
    """Every program in this process, its kernels compiled at first use."""
    with interpret.mode(0):
        return {name: program() for name, program in PROGRAMS.items()}


def test_the_interpreted_process_compiled_nothing(interpreted):
    assert interpreted["compiled"] is False


def test_a_traced_logistic_loss_keeps_its_bits_when_its_kernels_compile(compiled, interpreted):
    want, got = compiled["logistic"], interpreted["logistic"]
    _same(want["rows"], got["rows"], "ft.grad per row, compiled vs interpreted")
    _same(want["batch"], want["rows"], "grad_batch vs ft.grad per row, compiled")
    _same(got["batch"], want["rows"][:300], "grad_batch interpreted vs ft.grad compiled")


@pytest.mark.parametrize("name", sorted(OPS))
def test_eager_backward_interpreted_as_compiled(name, compiled, interpreted):
    keys = [k for k in compiled["eager"] if k[0] == name]
    assert len(keys) == 4
    for key in keys:
        want, got = compiled["eager"][key], interpreted["eager"][key]
        for k, (w, g) in enumerate(zip(want, got)):
            if w is None:
                assert g is None
            else:
                _same(w, g, f"{key}, operand {k}")


@pytest.mark.parametrize("loop", ["replay", "traced vjp", "hessian", "hvp", "jvp", "jacobian"])
def test_other_loops_interpreted_as_compiled(loop, compiled, interpreted):
    _same(compiled["loops"][loop], interpreted["loops"][loop], loop)


@pytest.mark.parametrize("what", ["eager", "traced"])
def test_fused_runs_as_the_interpreted_record_by_record_sweep(what, compiled, interpreted):
    _same(compiled["fused"][what], interpreted["fused"][what], what)


# -- the pieces: libm's functions and vecmath's, element by element ---------------------

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, np.inf, -np.inf, np.nan, 1e-310,
            -1e-310, 1e-20, 100.0, -100.0, 710.0, -746.0, 1e300, -1e300]
_LIBM = ([("np", n, 1) for n in ("exp expm1 exp2 log log1p log2 log10 sin cos tan arcsin "
                                 "arccos arctan sinh cosh tanh arcsinh arccosh arctanh "
                                 "cbrt").split()]
         + [("math", n, 1) for n in "exp log log1p sin cos cosh sinh erf erfc lgamma sqrt".split()]
         + [("np", n, 2) for n in "power arctan2 hypot logaddexp logaddexp2".split()]
         + [("math", n, 2) for n in "pow atan2 hypot".split()])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_libm_stand_ins_give_what_compiled_code_computes(dtype):
    """kernels/libm.py's functions (the interpreted tier's ``np`` and
    ``math``) against the same calls compiled by Numba, on ordinary and
    special arguments, on arrays and one element at a time."""
    import math
    import numba
    from tapegrad.kernels import libm
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):  # 1e300 as a float32 is inf
        x = np.concatenate([_SPECIAL, rng.uniform(-5, 5, 400), rng.normal(size=200) * 50,
                            np.exp(rng.uniform(-30, 30, 200))]).astype(dtype)
        y = np.concatenate([_SPECIAL[::-1], _SPECIAL,
                            rng.uniform(-4, 4, x.size - 40)]).astype(dtype)
    lines = [f"        out[{k}, i] = {mod}.{name}(x[i]{', y[i]' if n == 2 else ''})"
             for k, (mod, name, n) in enumerate(_LIBM)]
    ns = {"np": np, "math": math}
    exec("def run(x, y, out):\n    for i in range(x.size):\n" + "\n".join(lines), ns)
    out = np.empty((len(_LIBM), x.size), dtype)
    with np.errstate(all="ignore"):
        numba.njit(ns["run"])(x, y, out)
        for k, (mod, name, n) in enumerate(_LIBM):
            f = getattr(libm.NUMPY if mod == "np" else libm.MATH, name)
            args = (x, y)[:n]
            _same(out[k], f(*args), f"{mod}.{name} of arrays")
            one = np.array([f(*a) for a in zip(*args)])
            _same(out[k], one, f"{mod}.{name} of single elements")


def test_vecmath_array_forms_give_the_compiled_bits():
    """``exp_v``, ``log_v`` and ``tanh_v`` compiled against their array forms
    (the interpreted tier's), on whole arrays and single elements."""
    import numba
    from tapegrad.kernels import _jit, vecmath
    _jit.materialize()
    ev, lv, tv = vecmath.exp_v, vecmath.log_v, vecmath.tanh_v

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[0, i] = ev(x[i])
            out[1, i] = lv(x[i])
            out[2, i] = tv(x[i])

    rng = np.random.default_rng(5)
    x = np.concatenate([_SPECIAL, [709.782712893384, -745.1332191019412, 20.0, 0.34657359027997264,
                                   2.2250738585072014e-308, 5e-324],
                        rng.uniform(-745, 709.7, 20000), rng.uniform(-25, 25, 20000),
                        np.exp(rng.uniform(-740, 700, 20000)), rng.uniform(1e-320, 1e-307, 2000)])
    out = np.empty((3, x.size))
    run(x, out)
    for k, f in enumerate((vecmath.exp_arrays, vecmath.log_arrays, vecmath.tanh_arrays)):
        _same(out[k], f(x), f"{f.__name__} of an array")
        _same(out[k][:3000], np.array([f(v) for v in x[:3000]]), f"{f.__name__} of elements")


def test_kernel_sources_write_no_power_operator():
    """``x ** n`` is n-1 multiplications compiled (Numba unrolls an integer
    exponent) and a call of ``pow`` in Python; ``np.power`` is ``pow`` in
    both tiers (kernels/libm.py)."""
    found = []
    for path in sorted((ROOT / "tapegrad" / "kernels").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


if __name__ == "__main__":
    from tapegrad.kernels import _jit
    results = {name: program() for name, program in PROGRAMS.items() if name != "logistic"}
    results["logistic"] = logistic_program(batch_rows=300)
    results["compiled"] = bool(_jit._MATERIALIZED)
    with open(sys.argv[1], "wb") as f:
        pickle.dump(results, f)
