"""Programs that tests/test_interpret.py runs twice: compiled in the test
process, and interpreted in a fresh process whose kernels are never
compiled (``TAPEGRAD_INTERPRET=force``, an empty Numba cache).

A process that has compiled a kernel always calls it compiled, so the
interpreted side must run where nothing is compiled: ``python
interpret_programs.py IN OUT`` reads the inputs the test drew (a pickle),
runs every program and writes each one's results, with how many element
loops ran as whole arrays or fell back to the element loop
(kernels/interpret.py: ``array_form``), and whether anything was compiled.
"""
import pickle
import sys

import numpy as np

import tapegrad as tg
import tapegrad.transforms.functional as ft
from tapegrad.kernels import interpret

from op_cases import CASES


def op_program(name, arrays, params):
    """The gradients of op-case ``name`` at ``arrays`` for a fixed cotangent."""
    fn = CASES[name][1]
    ts = [tg.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts, **params)
    y.backward(np.cos(np.arange(y.size)).reshape(y.shape))
    return [t.grad.numpy() for t in ts]


def _loss(x):
    return (tg.sin(x) * x + tg.exp(x[:2]).sum() * x.max() + (x.reshape(2, 2) @ x[:2]).sum()).sum()


X = np.array([0.3, -0.7, 1.1, 0.5])


def _traced():
    f = tg.trace(_loss, X)
    v, g = ft.value_and_grad(f)(X * 0.5)
    return [np.asarray(v), np.asarray(g)]


#: one program through each loop: reverse, vector and block sweeps, the
#: second-order sweeps, forward mode, replay
LOOPS = {
    "grad": lambda: [tg.grad(_loss)(X)],
    "jacobian": lambda: [tg.jacobian(lambda v: tg.sin(v) * v.sum() + tg.cumsum(v))(X)],
    "hessian": lambda: [tg.hessian(_loss)(X)],
    "hvp": lambda: [np.asarray(tg.hvp(_loss, (X,), (np.ones(4),))[1])],
    "jvp": lambda: [np.asarray(o) for o in
                    tg.jvp(lambda v: tg.sin(v) * v + v.max(), (X,), (np.arange(4.0),))],
    "traced": _traced,
}

_BIG = np.linspace(0.1, 0.9, 64 * 64).reshape(64, 64)

#: records large enough for the whole-array forms, one per form
ARRAYS = {
    "unary": lambda x, w: tg.sin(x).sum(),
    "scalar": lambda x, w: (x * 2.5 + 1.0).sum(),
    "binary": lambda x, w: (x * w - x / w).sum(),
    "x op x": lambda x, w: (x * x).sum(),
    "binary, one constant": lambda x, w: (x * np.full(x.shape, 3.0)).sum(),
    "sum over an axis": lambda x, w: (x.sum(axis=0) ** 2).sum(),
    "mean over trailing axes": lambda x, w: (x.mean(axis=1) * w.mean(axis=1)).sum(),
    "broadcast one element": lambda x, w: (x * w[0, 0] + w[1:2, 1:2] / x).sum(),
    "gather": lambda x, w: (x[::-1, 1:] * x[:, :-1] + x[[0, 3, 0, 1]].sum()).sum(),
    "maximum and fmax, ties and NaN": lambda x, w: (np.maximum(x, x.T) + tg.fmax(x, _NAN_T)).sum(),
    "remainder, fmod": lambda x, w: (np.remainder(x, w) * np.fmod(w, x)).sum(),
    "stack, concatenate": lambda x, w: (tg.stack([x, w, x], axis=1) ** 2).sum()
    + tg.concatenate([w, x]).sum(),
    "max over an axis, ties": lambda x, w: (tg.concatenate([x, x]).max(axis=0) * w[0]).sum(),
    "min of all": lambda x, w: (x * w).min(),
    "prod with zeros": lambda x, w: (x * _ZEROS).prod(axis=0).sum(),
    "cumsum along each axis": lambda x, w: (tg.cumsum(x, axis=0) * w).sum()
    + (tg.cumsum(x.reshape(-1)) * w.reshape(-1)).sum(),
    "softmax": lambda x, w: (tg.softmax(x, axis=0) * w).sum(),
    # the loop's recurrence: a step along the axis over every lane at once, or
    # down a single lane in Python
    "cumprod with zeros, along each axis": lambda x, w: (
        tg.cumprod(x * _ZEROS * 1.5, axis=0) * w).sum()
    + (tg.cumprod((x * 2.0).reshape(-1)[:200]) * w.reshape(-1)[:200]).sum()
    + (tg.cumprod(x * _ZEROS.T * 1.5, axis=1) * w).sum(),
    # the same rule on arrays, with libm's exp, log and pow of each element
    # (kernels/libm.py) and vecmath's exp on arrays, as compiled
    "logsumexp": lambda x, w: (tg.logsumexp(x, axis=1) * w[:, 0]).sum(),
    "pow": lambda x, w: (x ** w).sum(),
    "log_softmax": lambda x, w: (tg.log_softmax(x, axis=1) * w).sum(),
    # the special functions' derivatives: scalar loops in kernels of their own
    "special functions": lambda x, w: (tg.gammaln(x) + tg.digamma(x) + tg.i0e(x) + tg.i1e(x)
                                       + tg.log_ndtr(x - 0.5) + tg.erfinv(x - 0.5)).sum(),
}

_NAN_T = np.where(np.eye(64, dtype=bool), np.nan, _BIG.T)
_ZEROS = np.ones((64, 64))
_ZEROS[0, :32] = 0.0    # one zero in these columns
_ZEROS[1, :16] = 0.0    # two in these


def arrays_program(kind):
    x = tg.tensor(_BIG, requires_grad=True)
    w = tg.tensor(_BIG[::-1] + 1.0, requires_grad=True)
    ARRAYS[kind](x, w).backward()
    return [t.grad.numpy() if t.grad is not None else np.zeros(1) for t in (x, w)]


_softplus = []


def _user_op():
    if not _softplus:
        _softplus.append(tg.elementwise(lambda x: np.log1p(np.exp(x)),
                                        derivative=lambda x, y: 1.0 / (1.0 + np.exp(-x)),
                                        name="softplus_t"))
    return _softplus[0]


def user_op_program():
    """A user op (its derivative compiled by Numba as a C function)."""
    x = tg.tensor(X, requires_grad=True)
    _user_op()(x).sum().backward()
    return [x.grad.numpy()]


def _counted(program):
    before = list(interpret._array_calls)
    out = program()
    return out, (interpret._array_calls[0] - before[0], interpret._array_calls[1] - before[1])


def main(path_in, path_out):
    from tapegrad.kernels import _jit
    with open(path_in, "rb") as f:
        cases = pickle.load(f)
    results = {"ops": {}, "loops": {}, "arrays": {}}
    # user ops last: making one compiles the user's derivative (and so loads
    # the compiled tier), which nothing before them may do
    user = [k for k in cases if k[0].startswith("User")]
    for key in [k for k in cases if k not in user]:
        results["ops"][key] = op_program(*cases[key])
    for name, program in LOOPS.items():
        results["loops"][name] = program()
    for kind in ARRAYS:
        results["arrays"][kind] = _counted(lambda: arrays_program(kind))
    results["compiled"] = bool(_jit._MATERIALIZED)
    for key in user:
        results["ops"][key] = op_program(*cases[key])
    results["user"] = user_op_program()
    with open(path_out, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
