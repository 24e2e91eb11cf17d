"""The ops' inlined fast paths (tapegrad/ops/elementwise.py: ``_binary_op``,
``_reflected_op``, the unary ops' ``op``; the Tensor operators built from them
in ops/methods.py) give exactly what the general path gives.

``general(f)`` runs ``f`` with the tape's ``room`` at -1, which every fast path
checks, so the same call takes the general path (``_binary``/``_unary``,
``Tape.record``/``record1``); the results are compared bit for bit: values
and their Python types and dtypes, the records written (op codes, parents,
float parameters, values), gradients, grad_fn names and next_functions.
"""
import operator
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.ops import elementwise as E
from tapegrad.tape import _local, current
from tapegrad.tensor import Tensor


def general(f, *args):
    """``f(*args)`` with the fast paths stepping aside (room -1; the general
    path's record1 restores it)."""
    tape = _local.__dict__.get("tape")
    if tape is not None:
        tape.room = -1
    try:
        return f(*args)
    finally:
        if tape is not None:
            tape._update_room()


def bits(v):
    a = np.asarray(v)
    return (type(v), a.dtype.str, a.shape, a.tobytes())


def node_names(fn, depth=6):
    """grad_fn's name and its next_functions, a few levels deep."""
    if fn is None or depth == 0:
        return None
    return (type(fn).__name__, tuple((node_names(f, depth - 1), k)
                                     for f, k in fn.next_functions))


def run(f, value, dtype=None, via_general=False):
    """Build ``f(y)`` on a non-leaf ``y = x * 1.0`` of a fresh epoch; return what
    the two paths must agree on."""
    current()  # a fresh epoch: the previous graphs' tensors are gone
    x = tg.tensor(np.asarray(value, dtype=dtype), requires_grad=True)
    y = x * 1.0
    out = general(f, y) if via_general else f(y)
    tape = current()
    n, na = tape.n, tape.na
    recs = tuple(a.copy() for a in (tape.op[:n], tape.arg0[:n], tape.args[:na],
                                    tape.fp[:n], tape.v1[:n], tape.size[:n]))
    names = node_names(out.grad_fn)
    value_bits = bits(out._data)
    (out.sum() if out.ndim else out).backward()
    grad = bits(x.grad._data)
    return value_bits, out.requires_grad, names, [r.tobytes() for r in recs], grad


def same_both_ways(f, value, dtype=None):
    fast = run(f, value, dtype)
    slow = run(f, value, dtype, via_general=True)
    assert fast == slow


VALUES = [0.5, [0.5], -1.25, [[2.0]], [0.5, 2.0]]
DTYPES = [np.float64, np.float32]
CONSTS = [0.999, -2.0, 3, 0, -1, 0.0, 2 ** 60]

BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
          operator.floordiv, operator.mod]
FUNCS = [E.add, E.subtract, E.multiply, E.divide, E.power, E.maximum, E.hypot]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.__name__)
def test_operators_with_python_numbers(op, dtype, value):
    for c in CONSTS:
        if op is operator.pow and c == 2 ** 60:
            continue
        with np.errstate(all="ignore"):
            same_both_ways(lambda y: op(y, c), value, dtype)
            same_both_ways(lambda y: op(c, y), value, dtype)  # the reflected operator


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", BINARY + FUNCS, ids=lambda o: o.__name__)
def test_two_tensors(op, dtype, value):
    with np.errstate(all="ignore"):
        same_both_ways(lambda y: op(y, y * 0.5 + 1.0), value, dtype)
        same_both_ways(lambda y: op(y * 3.0, y), value, dtype)


@pytest.mark.parametrize("op", FUNCS, ids=lambda o: o.__name__)
def test_functions_with_numbers(op):
    for c in [0.75, 2, np.float64(1.5), np.float32(0.5), np.int64(3), np.array(2.0)]:
        same_both_ways(lambda y: op(y, c), 0.5)
        same_both_ways(lambda y: op(c, y), [0.25])


@pytest.mark.parametrize("scalar", [np.float64(1.5), np.float32(0.5), np.int64(3), True])
def test_operators_with_numpy_scalars_and_bool(scalar):
    for dtype in DTYPES:
        same_both_ways(lambda y: y * scalar - scalar, 0.5, dtype)
        same_both_ways(lambda y: scalar / (y + 1.0), [0.5], dtype)


UNARY = [E.sin, E.cos, E.exp, E.log, E.sqrt, E.tanh, E.negative, E.absolute, E.floor,
         E.erf, E.gammaln, E.reciprocal]


@pytest.mark.parametrize("value", [0.5, [0.5], [[1.5, 0.25]]])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_unary(fn, dtype, value):
    with np.errstate(all="ignore"):  # log of a negative: NaN on both paths
        same_both_ways(fn, value, dtype)
        same_both_ways(lambda y: fn(fn(y) * 0.5), value, dtype)


def test_operators_unary():
    same_both_ways(lambda y: -y, 0.5)
    same_both_ways(lambda y: abs(-y) + (+y), [0.5])


def test_the_scalar_chain_records_what_the_general_path_records():
    def chain(y):
        for _ in range(50):
            y = y * 0.999 + tg.sin(y) * 0.001
        return y
    same_both_ways(chain, 0.5)
    same_both_ways(chain, [0.5], np.float32)


def test_values_are_the_same_kind_of_object():
    x = tg.tensor(0.5, requires_grad=True)
    y = x * 1.0
    for out in (y * 2.0, 2.0 * y, y + y, tg.sin(y), y - 1, 1 - y):
        assert type(out) is Tensor and type(out._data) is np.float64
        assert out.dtype == np.float64 and out.shape == () and not out.is_leaf
    z = tg.tensor(np.float32(0.5), requires_grad=True) * 1.0
    for out in (z * 2.0, 2.0 * z, z + z, tg.sin(z)):
        assert type(out._data) is np.float32


def test_no_grad():
    x = tg.tensor(0.5, requires_grad=True)
    y = x * 1.0
    with tg.no_grad():
        for out in (y * 2.0, 3.0 - y, y + y, tg.sin(y), y ** 2):
            assert not out.requires_grad and out.is_leaf and out.grad_fn is None
            assert type(out._data) is np.float64
    n = current().n
    with tg.no_grad():
        y * 2.0 + tg.sin(y)
    assert current().n == n  # nothing recorded


def test_tensor_has_no_constructor_of_its_own():
    # the fast paths make results with Tensor(), which must be object.__new__'s
    # empty instance
    assert Tensor.__init__ is object.__init__ and Tensor.__new__ is object.__new__


def test_leaf_operands_take_the_general_path():
    x = tg.tensor(0.5, requires_grad=True)
    out = x * 2.0 + tg.sin(x) + 1.0 / x
    out.backward()
    assert x.grad.item() == 2.0 + np.cos(0.5) - 1.0 / 0.25


def test_in_place_write_then_fast_ops():
    def f(y):
        y += 2.0       # a recorded write: y now stands for a new record
        z = y * 3.0
        z -= y
        return tg.sin(z) * y
    same_both_ways(f, 0.5)
    same_both_ways(f, [0.5])


def test_write_under_no_grad_is_seen_by_backward():
    x = tg.tensor([0.5], requires_grad=True)
    y = x * 1.0
    z = y * y           # saves y's value
    with tg.no_grad():
        y.data[...] = 2.0
    with pytest.raises(RuntimeError):
        z.sum().backward()


def test_other_threads_tensor_raises():
    made = {}

    def worker():
        x = tg.tensor(0.5, requires_grad=True)
        made["y"] = x * 1.0
        made["tape"] = current()  # keeps that thread's epoch alive
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    y = made["y"]
    msgs = []
    for f in (lambda: y * 2.0, lambda: 2.0 * y, lambda: y + y, lambda: tg.sin(y)):
        for via in (f, lambda: general(f)):
            with pytest.raises(RuntimeError, match="another thread") as e:
                via()
            msgs.append(str(e.value))
    assert len(set(msgs)) == 1


def test_stale_epoch_operand():
    # a non-leaf whose graph was freed by backward enters a later graph as a
    # stub: not the fast path (its token is not the live epoch's)
    x = tg.tensor(0.5, requires_grad=True)
    y = x * 1.0
    (y * 2.0).backward()
    with pytest.raises(RuntimeError):
        (y * 3.0).backward()


# -- tracing: the fast paths step aside so that TraceTape notes every value ---------
def _detached_reads(x):
    z = (x * 2.0) * 3.0
    w = tg.sin(x * 2.0)
    s = z + w
    v = s.detach().numpy()      # leaves the tape: a guard on its exact value
    return x * float(v) - 1.0 + 2.0 * x


def test_trace_guards_values_made_on_fast_paths():
    ft = tg.trace(_detached_reads, np.array(1.0))
    for x1 in (1.0, 2.0, -0.5):
        want = _detached_reads(tg.tensor(x1))
        assert float(ft(np.array(x1))) == float(want)


def test_trace_of_the_chain_matches_eager():
    def chain(x):
        y = x * 1.0
        for _ in range(20):
            y = y * 0.999 + tg.sin(y) * 0.001
        return y
    ft = tg.trace(chain, np.array(0.5))
    v, g = ft.value_and_grad(np.array(0.25))
    x = tg.tensor(0.25, requires_grad=True)
    out = chain(x)
    out.backward()
    assert bits(np.float64(v)) == bits(np.float64(out.item()))
    assert float(g) == x.grad.item()


def test_operator_names():
    # the operators keep the names of the general operators they fall back to
    from tapegrad.ops import methods as M
    for name, fn in M._OPERATORS.items():
        assert getattr(Tensor, name).__name__ == M._or_complex(name, fn).__name__


def test_complex_operands_still_reach_the_complex_ops():
    x = tg.tensor(0.5, requires_grad=True)
    y = x * 1.0
    for out in (y * 1j, 1j * y, y + (1 + 2j), (2 - 1j) - y):
        assert type(out).__name__ == "ComplexTensor"
