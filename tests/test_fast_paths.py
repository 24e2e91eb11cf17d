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
from tapegrad.core.tape import Tape, _local, current
from tapegrad.core.tensor import Tensor


@pytest.fixture(autouse=True, scope="module")
def _a_tape_of_its_own():
    """The records of the two paths are compared from a fresh epoch: this
    module records on a tape of its own, so that what earlier tests left
    alive on the thread's tape (until the garbage collector frees a cycle
    holding it) cannot shift them."""
    old = _local.__dict__.get("tape")
    _local.tape = Tape()
    yield
    if old is None:
        del _local.tape
    else:
        _local.tape = old


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


def run(f, value, dtype=None, via_general=False, leaf=False):
    """Build ``f(y)`` on a non-leaf ``y = x * 1.0`` of a fresh epoch (on the
    leaf x itself with ``leaf``); return what the two paths must agree on."""
    current()  # a fresh epoch: the previous graphs' tensors are gone
    x = tg.tensor(np.asarray(value, dtype=dtype), requires_grad=True)
    y = x if leaf else x * 1.0
    out = general(f, y) if via_general else f(y)
    tape = current()
    n, na, ni, nv = tape.n, tape.na, tape.ni, tape.nv
    recs = tuple(a.copy() for a in (tape.op[:n], tape.arg0[:n], tape.args[:na],
                                    tape.fp[:n], tape.v1[:n], tape.size[:n], tape.ip0[:n],
                                    tape.ip[:ni], tape.voff[:n], tape.vals[:nv]))
    names = node_names(out.grad_fn)
    value_bits = bits(out._data)
    views = (sorted(tape.aliases), len(getattr(y, "_views", ())),
             getattr(out, "_vw", (None, None))[1])
    (out.sum() if out.ndim else out).backward()
    grad = bits(x.grad._data)
    return (value_bits, out.requires_grad, names, [r.tobytes() for r in recs], views,
            out.is_leaf, grad)


def same_both_ways(f, value, dtype=None, leaf=False):
    fast = run(f, value, dtype, leaf=leaf)
    slow = run(f, value, dtype, via_general=True, leaf=leaf)
    assert fast == slow


def same_error_both_ways(make, value, leaf=False):
    """``make(y)()`` raises the same exception, with the same message, on both
    paths, and leaves the tape as it found it (``make`` builds the operands)."""
    msgs = []
    for via in (False, True):
        current()
        x = tg.tensor(np.asarray(value), requires_grad=True)
        y = x if leaf else x * 1.0
        f = make(y)
        tape = current()
        before = tape.n, tape.na, tape.ni, tape.nv
        with pytest.raises(Exception) as e:
            general(f) if via else f()
        assert (tape.n, tape.na, tape.ni, tape.nv) == before
        msgs.append((type(e.value), str(e.value)))
        del e, f, x, y
    assert msgs[0] == msgs[1]


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


# -- integer indexing, stack, small arrays (ops/shape.py: _item_fast, stack_fast;
# Tape.put) ------------------------------------------------------------------------------
ITEM_VALUES = [[0.5, 2.0], [1.5], [0.25, -1.0, 3.0, 4.5, 0.125] * 4]


@pytest.mark.parametrize("value", ITEM_VALUES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("leaf", [False, True])
def test_integer_index(value, dtype, leaf):
    n = len(value)
    for k in (0, n - 1, -1, -n):
        same_both_ways(lambda y: y[k], value, dtype, leaf)
        same_both_ways(lambda y: y[k] * y[0] - y[-1], value, dtype, leaf)


def test_integer_index_chains_and_other_keys():
    # the fast path's int keys into 1-d tensors, next to the keys it leaves to
    # the general path (2-d values, slices, bools, NumPy ints, lists)
    same_both_ways(lambda y: y[1:][0] + y[::-1][1], [0.5, 2.0, 3.0])
    same_both_ways(lambda y: y[0][1] * y[1][0], [[0.5, 2.0], [3.0, 4.0]])
    same_both_ways(lambda y: y[np.int64(1)] + y[True] + y[[0]][0], [0.5, 2.0])
    same_both_ways(lambda y: tg.sin(y)[1] + tg.exp(y[0]), [0.5, 2.0])


def test_integer_index_errors():
    for value in ([0.5, 2.0], 0.5):
        for k in (2, -3):
            same_error_both_ways(lambda y: lambda: y[k], value)
            same_error_both_ways(lambda y: lambda: y[k], value, leaf=True)


def test_integer_index_no_grad_and_plain_tensors():
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x * 1.0
    n = current().n
    with tg.no_grad():
        for t in (x, y):
            out = t[1]
            assert out.is_leaf and not out.requires_grad and type(out._data) is np.float64
    assert current().n == n
    p = tg.tensor([0.5, 2.0])[0]
    assert p.is_leaf and not p.requires_grad


def test_integer_index_is_a_copy():
    # y[0] of a 1-d tensor is NumPy's scalar, a copy, on both paths: a write
    # into it leaves y as it was, value and gradient
    def f(y):
        v = y[0]
        v += 3.0
        return y * v
    same_both_ways(f, [0.5, 2.0])
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x * 1.0
    v = y[1]
    v *= 2.0
    assert y.tolist() == [0.5, 2.0] and v.tolist() == 4.0
    (y * y).sum().backward()
    assert x.grad.tolist() == [1.0, 4.0]


def test_integer_index_with_an_ellipsis_is_a_view():
    # y[1, ...] is a 0-d view in NumPy: a write into it reaches y
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x * 1.0
    v = y[1, ...]
    v *= 2.0
    assert y.tolist() == [0.5, 4.0]
    (y * y).sum().backward()
    assert x.grad.tolist() == [1.0, 16.0]


def test_integer_index_of_a_leaf_that_is_read_only():
    # a leaf's first use records it (read-only while the graph holds it)
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x[0] * 2.0
    assert not x.numpy().flags.writeable
    y.backward()
    assert x.grad.tolist() == [2.0, 0.0]


def test_integer_index_grows_the_tape():
    x = tg.tensor([0.5, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    total = y[0]
    for i in range(5000):  # past the first capacities of records and parameters
        total = total + y[i % 3] * x[(i + 1) % 3]
    total.backward()
    want = np.array([0.5, 2.0, 3.0])
    g = np.zeros(3)
    g[0] += 1.0
    for i in range(5000):
        g[i % 3] += want[(i + 1) % 3]
        g[(i + 1) % 3] += want[i % 3]
    np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-12)


STACKS = [
    (0.5, lambda y: np.stack([y * 2.0, y, tg.sin(y)])),
    (0.5, lambda y: tg.stack([y * 2.0, y + 1.0])),
    (0.5, lambda y: np.stack((y * 2.0,))),
    (0.5, lambda y: tg.stack([y * 2.0, y], axis=-1)),
    ([0.5, 2.0], lambda y: np.stack([y[0] * y[1], y[1] - y[0]])),
    ([0.5, 2.0], lambda y: np.stack([y, y * 3.0, y])),
    ([0.5, 2.0], lambda y: tg.stack([y, y * 3.0], 1)),
    ([0.5, 2.0], lambda y: tg.stack([y, y * 3.0], axis=-1)),
    ([[0.5, 2.0], [1.0, 3.0]], lambda y: tg.stack([y, -y], axis=1)),
    ([[0.5, 2.0], [1.0, 3.0]], lambda y: tg.stack([y.T, -y], axis=2)),
    (list(range(12)), lambda y: np.stack([y, y * 2.0])),          # past the arena's SMALL
    (list(range(12)), lambda y: np.stack([y[i] for i in range(12)] * 2)),
]


@pytest.mark.parametrize("case", range(len(STACKS)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_stack(case, dtype):
    value, f = STACKS[case]
    same_both_ways(f, value, dtype)


def test_stack_that_takes_the_general_path():
    # leaves, constants, mixed shapes or dtypes, keywords: the general path on both
    same_both_ways(lambda y: np.stack([y, y * 2.0]), 0.5, leaf=True)
    same_both_ways(lambda y: np.stack([y * 2.0, np.float64(1.0)]), 0.5)
    same_both_ways(lambda y: np.stack([y * 2.0, tg.tensor(1.0)]), 0.5)
    same_both_ways(lambda y: np.stack([y * 2.0, tg.astype(y, np.float32) * 1.0]), 0.5)
    same_both_ways(lambda y: np.stack([y * 2.0, y], axis=0, dtype=np.float32), 0.5)
    same_both_ways(lambda y: np.stack([y[0] * 1.0, y[1] * 1.0], axis=0), [0.5, 2.0])


def test_stack_errors():
    def operands(y):
        return [y, y * 2.0, y[0] * 2.0]

    def making(f):
        return lambda y: (lambda ops: lambda: f(*ops))(operands(y))
    for f in (lambda a, b, c: np.stack([a, b], axis=2),
              lambda a, b, c: tg.stack([a, b], axis=-3),
              lambda a, b, c: np.stack([a, c]),
              lambda a, b, c: tg.stack((c, a)),
              lambda a, b, c: tg.stack([]),
              lambda a, b, c: np.stack(iter([a, b]))):
        same_error_both_ways(making(f), [0.5, 2.0])


def test_stack_no_grad():
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x * 1.0
    n = current().n
    with tg.no_grad():
        out = np.stack([y, y * 2.0])
    assert out.is_leaf and not out.requires_grad and current().n == n
    assert out.tolist() == [[0.5, 2.0], [1.0, 4.0]]


def test_stack_result_is_writable_and_its_own():
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x * 1.0
    s = np.stack([y[0], y[1]])
    assert s._data.flags.writeable and not np.shares_memory(s._data, y._data)
    s[0] = s[1] * 3.0      # a recorded write into the stacked result
    s.sum().backward()
    assert x.grad.tolist() == [0.0, 4.0]


SMALL_ARRAYS = [[0.5, 2.0], [[0.5, 2.0], [1.5, -1.0]], [0.25] * 16, [0.25] * 17]


@pytest.mark.parametrize("value", SMALL_ARRAYS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_small_arrays(value, dtype):
    with np.errstate(all="ignore"):
        same_both_ways(lambda y: (y + 0.5 * y) * y - tg.sin(y) / (1.0 + y), value, dtype)
        same_both_ways(lambda y: 2.0 ** (y * y) - tg.tanh(3.0 - y), value, dtype)


def _rk4(th, steps=6, dt=0.05):
    # a loop over tiny arrays in plain NumPy style: every fast path above
    def rhs(u):
        x, y = u[0], u[1]
        a, b, c, d = th[0], th[1], th[2], th[3]
        return np.stack([a * x - b * x * y, c * x * y - d * y])
    u = np.stack([th[0] * 0 + 1.0, th[0] * 0 + 0.5])
    total = 0.0
    for i in range(steps):
        k1 = rhs(u)
        k2 = rhs(u + 0.5 * dt * k1)
        k3 = rhs(u + 0.5 * dt * k2)
        k4 = rhs(u + dt * k3)
        u = u + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        total = total + ((u - np.array([1.0, 0.5 + 0.1 * i])) ** 2).sum()
    return total


def test_rk4_loop_both_ways():
    th0 = np.array([1.1, 0.4, 0.1, 0.4])
    got = [run(_rk4, th0, leaf=True, via_general=via) for via in (False, True)]
    assert got[0] == got[1]


def test_rk4_loop_traced_replays_against_central_differences():
    ft = tg.trace(_rk4, np.array([1.1, 0.4, 0.1, 0.4]))
    for th in (np.array([0.9, 0.5, 0.2, 0.3]), np.array([1.3, 0.2, 0.15, 0.6])):
        v, g = ft.value_and_grad(th)
        assert float(v) == float(_rk4(th))   # the plain NumPy forward
        fd = np.zeros(4)
        for j in range(4):
            e = np.zeros(4)
            e[j] = 1e-6
            fd[j] = (_rk4(th + e) - _rk4(th - e)) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
        x = tg.tensor(th, requires_grad=True)
        _rk4(x).backward()    # eager, on the fast paths
        np.testing.assert_allclose(x.grad.numpy(), g, rtol=1e-13, atol=1e-15)


ARRAY_OPERANDS = [np.array([0.75, -1.5]), np.array([[0.5, 2.0], [1.0, 4.0]]).T,
                  np.array([0.5, 3.0], np.float32), np.arange(16.0), np.arange(17.0)]


@pytest.mark.parametrize("c", range(len(ARRAY_OPERANDS)))
@pytest.mark.parametrize("op", BINARY + FUNCS, ids=lambda o: o.__name__)
def test_tensor_with_an_array(op, c):
    c = ARRAY_OPERANDS[c]
    value = np.linspace(0.25, 2.0, c.size).reshape(c.shape)
    with np.errstate(all="ignore"):
        same_both_ways(lambda y: op(y, c), value)
        same_both_ways(lambda y: op(c, y), value)


def test_tensor_with_an_array_that_takes_the_general_path():
    for c in (np.array([1, 2]), np.array([0.5]), np.array(0.5), np.array([[0.5, 2.0]]),
              np.array([True, False])):
        with np.errstate(all="ignore"):
            same_both_ways(lambda y: y - c, [0.5, 2.0])
            same_both_ways(lambda y: c * y, [0.5, 2.0])
    same_both_ways(lambda y: y * np.array([0.5, 2.0]), [0.5, 2.0], leaf=True)


def test_tensor_with_an_array_notes_writes_into_the_array():
    # the array is copied into the tape; a later tapegrad write into it is noted
    c = tg.tensor([0.5, 2.0])
    x = tg.tensor([1.0, 3.0], requires_grad=True)
    y = x * 1.0
    z = y * c.numpy()
    c[0] = 7.0
    with pytest.raises(RuntimeError):
        (z * z).sum().backward()


def test_tensor_with_an_array_errors():
    same_error_both_ways(lambda y: lambda: y - np.array([1.0, 2.0, 3.0]), [0.5, 2.0])
    same_error_both_ways(lambda y: lambda: np.array([1.0, 2.0, 3.0]) * y, [0.5, 2.0])
    same_error_both_ways(lambda y: lambda: y - np.array([0.5, 2.0], dtype=object), [0.5, 2.0])


UFUNC_CALLS = [lambda y: np.sin(y), lambda y: np.exp(np.tanh(y)), lambda y: np.add(y, y),
               lambda y: np.multiply(2.0, y), lambda y: np.subtract(np.array([1.0, 2.0]), y),
               lambda y: np.maximum(y, 1), lambda y: np.hypot(y, y * 2.0),
               lambda y: np.arctan2(y, np.array([1.0, -1.0], np.float32))]


@pytest.mark.parametrize("f", range(len(UFUNC_CALLS)))
def test_numpy_ufunc_calls(f):
    same_both_ways(UFUNC_CALLS[f], [0.5, 2.0])


def test_numpy_ufunc_calls_that_take_the_general_path():
    y = tg.tensor([0.5, 2.0], requires_grad=True) * 1.0
    assert type(np.multiply(y, 1j)).__name__ == "ComplexTensor"
    assert type(np.add(np.array([1j, 2.0]), y)).__name__ == "ComplexTensor"
    assert np.sin(y, dtype=np.float32).dtype == np.float32
    assert np.isnan(y).tolist() == [False, False]
    with pytest.raises(TypeError, match="out="):
        np.sin(y, out=np.zeros(2))
    assert np.add.reduce(y).item() == 2.5


@pytest.mark.parametrize("value", SMALL_ARRAYS + [[[[0.5, 1.5]], [[2.5, -1.0]]]])
@pytest.mark.parametrize("dtype", DTYPES)
def test_full_sum_method(value, dtype):
    same_both_ways(lambda y: (y * y).sum(), value, dtype)
    same_both_ways(lambda y: y.sum() * y.sum(axis=None), value, dtype)


def test_sum_method_with_arguments_takes_the_general_path():
    same_both_ways(lambda y: y.sum(0).sum(), [[0.5, 2.0], [1.5, -1.0]])
    same_both_ways(lambda y: y.sum(keepdims=True).sum(), [0.5, 2.0])
    same_both_ways(lambda y: y.sum(where=np.array([True, False])), [0.5, 2.0])
    same_both_ways(lambda y: y.sum(initial=1.0), [0.5, 2.0])
    same_both_ways(lambda y: y.sum(), [0.5, 2.0], leaf=True)
    same_both_ways(lambda y: y.sum(), 0.5)
    same_error_both_ways(lambda y: lambda: y.sum(axis=2), [0.5, 2.0])
    with tg.no_grad():
        s = (tg.tensor([0.5, 2.0], requires_grad=True) * 1.0).sum()
    assert s.is_leaf and not s.requires_grad and s.item() == 2.5


# -- the record arrays' memoryviews (Tape._writers) ----------------------------------
def _writers_current(tape):
    from tapegrad.core.tape import _WRITTEN
    return all(getattr(tape, "w_" + k).obj is getattr(tape, k) for k in _WRITTEN)


def test_writers_follow_growth():
    x = tg.tensor([0.5, 2.0, 1.5], requires_grad=True)
    y = x * 1.0
    tape = current()
    total = y.sum()
    for i in range(3000):  # grows records, parents, parameters and the arena
        total = total + np.stack([y[i % 3], y[0] * 0.5]).sum() + (y * 1.0).sum()
        assert tape.room < 0 or _writers_current(tape)
    total.backward()
    g = np.full(3, 3001.0)
    g += [1500.0, 0.0, 0.0]          # y[0] * 0.5, 3000 times
    g += [1000.0, 1000.0, 1000.0]    # y[i % 3]
    np.testing.assert_array_equal(x.grad.numpy(), g)


@pytest.mark.parametrize("grow", ["_grow_records", "_grow_args", "_grow_ip"])
def test_interrupted_growth_leaves_the_fast_paths_off_until_renewed(grow, monkeypatch):
    from tapegrad.core.tape import Tape
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = x * 1.0
    tape = current()

    def interrupted(a, need):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(Tape, "_grown", staticmethod(interrupted))
        m.setattr(np, "full", lambda *a, **k: interrupted(None, 0))
        with pytest.raises(KeyboardInterrupt):
            getattr(tape, grow)(len(tape.ip) + 1) if grow != "_grow_records" \
                else tape._grow_records()
    assert tape.room == -1
    total = y[0] * 1.0
    for i in range(2000):
        total = total + y[i % 2] * y[1] - 1.0
        assert tape.room < 0 or _writers_current(tape)
    total.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0 + 1000 * 2.0, 1000 * 0.5 + 1000 * 2 * 2.0])


SLICES = [slice(1, None), slice(None, None, -2), slice(-3, -1), slice(4, 1, -1), slice(None),
          slice(2, 3), slice(-100, 100), slice(1, None, 3), slice(np.int64(1), None)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [2, 6, 20])
def test_slices(n, dtype):
    value = np.linspace(0.5, 3.0, n)
    for k in SLICES:
        same_both_ways(lambda y: y[k] * 2.0, value, dtype)
        same_both_ways(lambda y: y[k][::-1] + y[k] * y[k], value, dtype)
    same_both_ways(lambda y: y[5:1], value, dtype)           # empty: the general path
    for k in SLICES:
        same_both_ways(lambda y: y[k] * 2.0 + y[k].sum(), value, dtype, leaf=True)


def test_slice_errors():
    for k in (slice(None, None, 0), slice(1.5, None), slice("a", None)):
        same_error_both_ways(lambda y: lambda: y[k], [0.5, 2.0, 3.0])
        same_error_both_ways(lambda y: lambda: y[k], [0.5, 2.0, 3.0], leaf=True)


def test_slice_is_a_read_only_view_written_through():
    x = tg.tensor([0.5, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    v = y[1:]
    assert not v._data.flags.writeable and np.shares_memory(v._data, y._data)
    v[0] = v[1] * 10.0     # a recorded write through the view reaches y
    assert y.tolist() == [0.5, 30.0, 3.0]
    (y * y).sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 2 * 30.0 * 10.0 + 6.0]


def test_scalar_broadcast_both_ways():
    for value in ([0.5, 2.0], [[0.5, 2.0], [1.0, 3.0]], list(np.linspace(0.1, 2.0, 20))):
        for op in BINARY + FUNCS:
            with np.errstate(all="ignore"):
                same_both_ways(lambda y: op(y.sum() * 1.0, y), value)
                same_both_ways(lambda y: op(y, y.sum() * 1.0), value)
