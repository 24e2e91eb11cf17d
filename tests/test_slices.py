"""Selections NumPy makes as views -- basic indexing (a Slice record),
transposes, broadcast_to, flip, diagonal, unbind -- record the view's
offset, shape and element strides, no index map.  The compiled sweeps walk
the strides; a trace's replay, create_graph and the sparsity patterns read
the Index record of the same selection.

The oracles: NumPy's own view of the same key (``want[key] += w``), and the
same selection made with an integer-array key, which records an Index
record (an index map), through every transform.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad.kernels import codes as C
from tapegrad.core.index_maps import STRIDED_CODES
from tapegrad.core.tape import current

from oracle import close, in_fresh_thread, leaf

_SLICE = C.code(C.K_GATHER, C.SLICE)
_INDEX = C.code(C.K_GATHER, C.INDEX)
_VIEWS = {"SliceBackward", "ReshapeBackward", "SqueezeBackward", "UnsqueezeBackward"}


@st.composite
def shaped_keys(draw):
    """A shape of 1 to 3 axes (up to 64 x 64 x 4: past the sizes the sweep
    handles inline) and a basic key of it that selects something."""
    nd = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 64 if d < 2 else 4)) for d in range(nd))
    parts, d = [], 0
    while d < nd and draw(st.booleans()):
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis"]))
        if kind == "int":
            parts.append(draw(st.integers(-shape[d], shape[d] - 1)))
            d += 1
        elif kind == "slice":
            n = shape[d]
            start = draw(st.none() | st.integers(-n - 1, n))
            stop = draw(st.none() | st.integers(-n - 1, n))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            parts.append(slice(start, stop, step))
            d += 1
        elif kind == "none":
            parts.append(None)
        elif Ellipsis not in parts:
            parts.append(Ellipsis)
            d = nd  # what follows indexes nothing more: stop here
    key = tuple(parts) if len(parts) != 1 or draw(st.booleans()) else parts[0]
    return shape, key


@settings(max_examples=150, deadline=None)
@given(case=shaped_keys(), seed=st.integers(0, 2**32 - 1))
def test_basic_keys_against_numpys_view(case, seed):
    """The value is NumPy's ``X[key]``; the gradient of ``sum(w * x[key])`` is
    ``w`` added into zeros through NumPy's view of the same key."""
    shape, key = case
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(shape)
    ref = X[key]
    if np.size(ref) == 0:
        return
    w = rng.standard_normal(np.shape(ref))
    want = np.zeros(shape)
    view = want[key]
    if np.ndim(view):
        view += w
    else:
        want[key] = w
    x = leaf(X)
    y = x[key]
    assert y.shape == np.shape(ref)
    close(y, ref, rtol=0, atol=0)
    assert y.grad_fn.name() in _VIEWS
    (y * w).sum().backward()
    close(x.grad, want, rtol=0, atol=0)


def _select(t, view, fancy):
    """``view(t)``, a selection NumPy makes as a view, or the same elements
    through an integer-array key (an Index record with an index map)."""
    if not fancy:
        return view(t)
    flat = view(np.arange(t.size).reshape(t.shape))
    return tg.reshape(t, (-1,))[flat]


def _stencil(t, fancy=False):
    """Differences, a strided product, an int row, a reversed column, and
    each of the other strided gathers: transpose, swapaxes, moveaxis, flip,
    broadcast_to, diagonal, unbind."""
    def s(view):
        return _select(t, view, fancy)
    n = t.shape[0]
    d = s(lambda a: a[1:, :]) - s(lambda a: a[:-1, :])
    out = ((d * d).sum() + (s(lambda a: a[::2, 1::3]) * s(lambda a: a[1::2, 1::3])).sum()
           + (np.sin(s(lambda a: a[2, :n])) * s(lambda a: a[::-1, 4])).sum())
    sq = s(lambda a: a[:, :n])  # square: its transposes multiply it
    out = out + (sq * s(lambda a: a[:, :n].T) * s(lambda a: np.swapaxes(a[:, :n], 0, 1))).sum()
    out = out + (s(lambda a: np.moveaxis(a[:, :n], 0, 1)) ** 2
                 * s(lambda a: np.flip(a[:, :n]))).sum()
    out = out + (s(lambda a: np.broadcast_to(a[0, :n], (3, n))) ** 3).sum()
    out = out + (np.cos(s(lambda a: np.diagonal(a, 1)[:n - 1]))
                 * s(lambda a: np.diagonal(a)[:-1])).sum()
    for axis in (0, 1):  # unbind's outputs: rows, then columns
        if fancy:
            parts = [s(lambda a, j=j: np.take(a[:3, :3], j, axis)) for j in range(3)]
        else:
            parts = tg.unbind(t[:3, :3], axis=axis)
        out = out + (parts[0] * parts[1] + np.sin(parts[2])).sum()
    return out


def _vector(t, fancy=False):
    def s(view):
        return _select(t, view, fancy)
    return (s(lambda a: a[1:, 2]) * s(lambda a: a[:-1, 3]) + s(lambda a: a[:0:-1, 0])
            + s(lambda a: a.T[1, 1:]) * s(lambda a: np.flip(a[:, 0])[1:]))


def _names(t):
    names, seen, todo = set(), set(), [t.grad_fn]
    while todo:
        f = todo.pop()
        if f is not None and repr(f) not in seen:  # "<name object at record r>"
            seen.add(repr(f))
            names.add(f.name())
            todo.extend(g for g, _ in f.next_functions)
    return names


_STRIDED_NAMES = {"SliceBackward", "TransposeBackward", "SwapaxesBackward", "MoveaxisBackward",
                  "FlipBackward", "ExpandBackward", "DiagonalBackward", "UnbindBackward"}


def test_the_oracle_records_index_maps():
    x = leaf(np.ones((6, 6)))
    assert _names(_stencil(x)) >= _STRIDED_NAMES and "IndexBackward" not in _names(_stencil(x))
    assert "IndexBackward" in _names(_stencil(x, True))
    assert not _names(_stencil(x, True)) & _STRIDED_NAMES


@pytest.mark.parametrize("shape", [(6, 6), (70, 90)])
def test_every_transform_agrees_with_index_maps(shape):
    """grad, jvp, double backward (create_graph) and a trace's replay of the
    stencil equal those of the same selections made by index maps; so do
    jacobians (several vectors at once), dense and sparse Hessians."""
    # (the strided gathers of a fancy index's own reshape are identity views)
    rng = np.random.default_rng(1)
    X = rng.standard_normal(shape)
    V = rng.standard_normal(shape)
    want = tg.grad(lambda t: _stencil(t, True))(X)
    close(tg.grad(_stencil)(X), want, rtol=1e-13)
    close(tg.trace(_stencil, X).value_and_grad(X)[1], want, rtol=1e-13)
    got = tg.jvp(_stencil, (X,), (V,))
    want = tg.jvp(lambda t: _stencil(t, True), (X,), (V,))
    close(got[1], want[1], rtol=1e-13)
    for fancy in (False, True):
        x = leaf(X)
        (g,) = tg.autograd.grad(_stencil(x, fancy), x, create_graph=True)
        (g * V).sum().backward()
        if not fancy:
            hv = x.grad.numpy()
    close(hv, x.grad, rtol=1e-12)
    if shape == (6, 6):
        close(tg.jacobian(_vector)(X), tg.jacobian(lambda t: _vector(t, True))(X), rtol=0)
        H = tg.hessian(lambda t: _stencil(t, True))(X)
        close(tg.hessian(_stencil)(X), H, rtol=1e-13, atol=1e-13)
        close(tg.sparse_hessian(_stencil)(X).toarray(), H.reshape(36, 36), rtol=1e-13, atol=1e-13)


def test_other_transforms_leave_the_tapes_slices_as_they_are():
    """A transform run on the same thread leaves the tape's Slice records as
    they are: a graph kept beside it still holds them and backwards
    correctly."""
    def run():
        X = np.arange(12.0).reshape(3, 4)
        x = leaf(X)
        y = (x[1:] * x[:-1]).sum()
        tape = current()
        n = tape.n
        op = tape.op[:n].copy()
        assert (op == _SLICE).sum() == 2
        H = tg.hessian(lambda t: (t[1:] * t[:-1]).sum())(X)  # on the same tape
        assert (H.reshape(12, 12)[:4, 4:8] == np.eye(4)).all()
        np.testing.assert_array_equal(tape.op[:n], op)
        y.backward()
        want = np.zeros((3, 4))
        want[1:] += X[:-1]
        want[:-1] += X[1:]
        close(x.grad, want, rtol=0, atol=0)
    in_fresh_thread(run)


def test_a_replay_holds_index_maps():
    """A trace records Slice and Transpose records as eager code does; its
    replay, whose loops read index maps, holds their Index records."""
    seen = []

    def f(t):
        seen.append(current())
        return (t[1:] * t[::2][:2]).sum() + (t.reshape(1, 3).T * t).sum()

    ft = tg.trace(f, np.zeros(3))
    close(ft.value_and_grad(np.arange(3.0))[1], [1.0 + 6, 0.0 + 6, 4.0 + 6])
    tape = seen[0]
    assert tape.tracing and np.isin(tape.op[:tape.n], STRIDED_CODES).sum() == 4
    (rep,) = [r for reps in ft.cache.values() for r in reps]
    assert not np.isin(rep.op, STRIDED_CODES).any() and (rep.op == _INDEX).sum() == 4


def test_int_of_a_vector_and_writes_through_a_slice():
    """``x[i]`` of a vector is a Slice too (scalar code's fast path), and a
    write through a slice reaches its base, value and gradient."""
    x = leaf([0.5, 2.0, 3.0])
    y = x * 1.0
    assert y[1].grad_fn.name() == "SliceBackward"
    v = y[::2]
    v *= 3.0
    assert y.tolist() == [1.5, 2.0, 9.0]
    (y * y).sum().backward()
    close(x.grad, [9.0, 4.0, 54.0], rtol=0, atol=0)


@st.composite
def shaped_views(draw, side=5):
    """A shape of 0 to 4 axes of up to ``side`` and one of the view ops on it."""
    shape = tuple(draw(st.lists(st.integers(0, side), min_size=0, max_size=4)))
    nd = len(shape)
    ops = ["transpose", "flip", "broadcast_to"]
    if nd >= 1:
        ops += ["moveaxis", "flip_axis"]
    if nd >= 2:
        ops += ["swapaxes", "diagonal"]
    op = draw(st.sampled_from(ops))
    axis = st.integers(-nd, nd - 1) if nd else st.just(0)
    if op == "transpose":
        perm = draw(st.permutations(range(nd)))
        return shape, op, (lambda a: np.transpose(a, perm)), f"axes={perm}"
    if op == "flip":
        return shape, op, np.flip, ""
    if op == "flip_axis":
        k = draw(axis)
        return shape, op, (lambda a: np.flip(a, k)), f"axis={k}"
    if op == "broadcast_to":
        lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        return shape, op, (lambda a: np.broadcast_to(a, lead + shape)), f"lead={lead}"
    if op == "moveaxis":
        s, d = draw(axis), draw(axis)
        return shape, op, (lambda a: np.moveaxis(a, s, d)), f"{s}->{d}"
    a1, a2 = draw(axis), draw(axis)
    if op == "swapaxes":
        return shape, op, (lambda a: np.swapaxes(a, a1, a2)), f"{a1},{a2}"
    if a1 % nd == a2 % nd:
        a2 = (a1 + 1) % nd
    k = draw(st.integers(-4, 4))
    return shape, op, (lambda a: np.diagonal(a, k, a1, a2)), f"{k},{a1},{a2}"


@settings(max_examples=300, deadline=None)
@given(case=shaped_views())
def test_view_ops_record_numpys_selection(case):
    """The strided form recorded for a view op is, as an index map, NumPy's
    view of the element numbers (empty ones included)."""
    from tapegrad.core.index_maps import slice_map
    from tapegrad.ops.shape import _view_params
    shape, _op, view, _what = case
    try:
        want = view(np.arange(int(np.prod(shape))).reshape(shape))
    except (ValueError, IndexError):  # refused by NumPy (flip of a 0-d array)
        return
    p = _view_params(shape, view)
    if p is None:  # NumPy gave a scalar, no view: the op records an index map
        assert not isinstance(want, np.ndarray)
        return
    p = np.array(p)
    assert p[0] == want.size and tuple(p[3:3 + p[2]]) == want.shape
    if want.size:
        np.testing.assert_array_equal(slice_map(p, 0), want.ravel())


@settings(max_examples=200, deadline=None)
@given(case=shaped_views(side=12), seed=st.integers(0, 2**32 - 1))
def test_view_ops_gradients_against_numpys_view(case, seed):
    """The gradient of ``sum(w * view(x))`` is ``w`` added at the elements
    NumPy's view of the element numbers selects (np.add.at, repeats of a
    broadcast included), through the row-by-row and the column-by-column
    (transposed layouts) loops."""
    shape, _op, view, _what = case
    numbers = np.arange(int(np.prod(shape))).reshape(shape)
    try:
        sel = view(numbers)
    except (ValueError, IndexError):
        return
    rng = np.random.default_rng(seed)
    X = rng.standard_normal(shape)
    w = rng.standard_normal(np.shape(sel))
    want = np.zeros(X.size)
    np.add.at(want, np.ravel(sel), np.ravel(w))
    x = leaf(X)
    y = view(x)
    close(y, view(X), rtol=0, atol=0)
    (y * w).sum().backward()
    close(x.grad if x.grad is not None else np.zeros(shape), want.reshape(shape),
          rtol=1e-15, atol=1e-15)
