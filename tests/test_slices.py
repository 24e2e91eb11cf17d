"""Basic indexing (ints, slices, ``None``, ``...``) records a Slice: the
selection's offset, shape and element strides, no index map.  The
first-order sweep adds the gradient through the strides; every other
transform reads the Index record of the same selection.

The oracles: NumPy's own view of the same key (``want[key] += w``), and the
same selection made with an integer-array key, which records an Index
record (an index map), through every transform.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapegrad as tg
from tapegrad.kernels import codes as C
from tapegrad.tape import current

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


def _select(t, key, fancy):
    """``t[key]``, or the same elements through an integer-array key (an
    Index record with an index map)."""
    if not fancy:
        return t[key]
    flat = np.arange(t.size).reshape(t.shape)[key]
    return tg.reshape(t, (-1,))[flat]


def _stencil(t, fancy=False):
    """Differences, a strided product, an int row and a reversed column."""
    s = lambda k: _select(t, k, fancy)  # noqa: E731
    d = s(np.s_[1:, :]) - s(np.s_[:-1, :])
    return ((d * d).sum() + (s(np.s_[::2, 1::3]) * s(np.s_[1::2, 1::3])).sum()
            + (tg.sin(s(np.s_[2, :t.shape[0]])) * s(np.s_[::-1, 4])).sum())


def _vector(t, fancy=False):
    s = lambda k: _select(t, k, fancy)  # noqa: E731
    return s(np.s_[1:, 2]) * s(np.s_[:-1, 3]) + s(np.s_[:0:-1, 0])


def _names(t):
    seen, todo = set(), [t.grad_fn]
    while todo:
        f = todo.pop()
        if f is not None and f.name() not in seen:
            seen.add(f.name())
            todo.extend(g for g, _ in f.next_functions)
    return seen


def test_the_oracle_records_index_maps():
    x = leaf(np.ones((6, 6)))
    assert "SliceBackward" in _names(_stencil(x)) and "IndexBackward" not in _names(_stencil(x))
    assert "IndexBackward" in _names(_stencil(x, True))
    assert "SliceBackward" not in _names(_stencil(x, True))


@pytest.mark.parametrize("shape", [(6, 6), (70, 90)])
def test_every_transform_reads_slices_as_their_index_maps(shape):
    """grad, jvp, double backward (create_graph) and a trace's replay of the
    stencil equal those of the same selections made by index maps; so do
    jacobians (several vectors at once), dense and sparse Hessians."""
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
    """A transform that reads index maps gets them in copies: a graph kept on
    the same tape still holds its Slice records and backwards correctly."""
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


def test_traces_record_index_maps():
    """A trace's kernels read index maps: its tape holds no Slice record."""
    seen = []

    def f(t):
        seen.append(current())
        return (t[1:] * t[::2][:2]).sum()

    ft = tg.trace(f, np.zeros(3))
    close(ft.value_and_grad(np.arange(3.0))[1], [1.0, 0.0, 4.0])
    tape = seen[0]
    assert tape.tracing and not (tape.op[:tape.n] == _SLICE).any()
    assert (tape.op[:tape.n] == _INDEX).any()


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
