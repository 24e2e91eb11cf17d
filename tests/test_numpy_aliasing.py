"""NumPy's aliasing rule, program by program.

A tensor operation returns a view exactly when NumPy's does -- basic
indexing and ``...`` (a full integer index such as ``a[0]`` of a 1-d tensor
or ``a[1, 2]`` of a 2-d one is a copy, as NumPy's scalar is), ``reshape``
and ``ravel`` where NumPy needs no copy, ``.T`` / ``transpose`` /
``swapaxes`` / ``moveaxis`` / ``rollaxis``, ``squeeze`` / ``expand_dims``,
``diagonal`` and ``broadcast_to`` (both read-only), ``flip`` and the pieces
of ``split`` / ``array_split`` / ``hsplit`` / ``vsplit`` -- and a copy
otherwise.  A write through a writable view (item and slice assignment,
``+=``, ``-=``, ``*=``, ``/=``, ``**=``, ``np.copyto``) reaches its base and
every other live view, in value and in gradient; a read of any view after a
write sees it; views of views compose.

Each row below is a plain-NumPy function ``f(x)`` returning one number, and
is checked three ways on the same input:

* ``f`` on the ndarray: NumPy's value, the oracle;
* ``f`` on ``tg.tensor(x)`` (no gradient): the same value;
* ``tg.value_and_grad(f)(x)``: the same value, and a gradient equal to float64
  central differences of the NumPy function (the 5-point stencil, step 1e-4:
  checked against complex-step derivatives, its error stays under 1e-4 of
  the tolerance on every row);

and traced (``tg.trace(f, x)``, then ``value_and_grad`` at ``x`` and at a
second, different input).  Where PyTorch is installed, rows with a twin
written with torch's ops of the same view semantics (``torch.flip`` copies
and torch slices take no negative steps, so rows using those have none;
torch's ``a[0]`` is a view, so twins clone where NumPy gives a scalar) check
the gradient against torch's too.

Rows run on a 6-element ``x`` (the small path: at most 16 elements), many on
a 48-element one (the large path) and some on a 0-d one (NumPy's ufuncs give
a scalar for 0-d operands, so those rows start from ``(x * 1.0)[...]``, a 0-d
array; ``zero_d_ufunc_result_is_a_scalar_copy`` checks the scalar itself).
Read-only views (``diagonal``, ``broadcast_to``) refuse every kind of write
with NumPy's ``ValueError`` ("read-only"), with and without
``requires_grad``, and leave the base as it was, in value and gradient.

Two small tables cover 0-d values outside plain-NumPy rows: a tensor made from a
0-d array (``tg.tensor(np.array(0.7))``) shares its memory with its views both
ways, as the array does; a 0-d tensor that stands for a NumPy scalar (a ufunc's
0-d result, an item) has copies for "views", also after its value was read with
``.numpy()``.

Nothing here is xfail: a failing row is a place where tapegrad's aliasing
differs from NumPy's.
"""
import numpy as np
import pytest

import tapegrad as tg

from oracle import central_differences, in_fresh_thread, numpy_value

try:  # the PyTorch oracle is optional
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

X6 = np.array([0.3, 1.7, -0.4, 2.2, 0.9, 1.1])
X48 = np.round(np.linspace(-1.3, 2.1, 48) + 0.3 * np.sin(7.0 * np.arange(48)), 6)
X0 = np.array(0.7)
INPUTS = {"x6": X6, "x48": X48, "x0": X0}
# 3-d shapes for the 3-d rows, by size
SHAPE3 = {6: (1, 2, 3), 48: (4, 3, 4)}

VALUE_RTOL = 1e-12
GRAD_RTOL, GRAD_ATOL = 1e-6, 1e-7


def second_input(x):
    """A different input of the same shape, for the traced function's replay."""
    return x + 0.25 * np.cos(3.0 * np.arange(x.size)).reshape(x.shape)


def w(a):
    """Weights 1, 2, ... in a's shape (a tensor or an array), so that a
    permutation or a changed element shows in a weighted sum."""
    return np.arange(1.0, a.size + 1).reshape(a.shape)


def s3(x):
    return SHAPE3[x.size]


# -- the programs ---------------------------------------------------------------------------
# Every program is plain NumPy: it runs unchanged on ndarrays and on tensors.

def reshape_item_write(x):
    a = x * 1.0
    a.reshape(2, -1)[0, 0] = 10.0
    return np.sum(a ** 2)


def transpose_item_write(x):
    a = x.reshape(2, -1) * 1.0
    a.T[0, 1] = 5.0
    return np.sum(a ** 2)


def reshape_inplace_add_then_row_multiply(x):
    a = x * 1.0
    v = a.reshape(2, -1)
    v += 1.0
    v[1] *= 2.0
    return np.sum(a ** 2)


def split_pieces_written(x):
    a = x * 1.0
    p, q = np.split(a, 2)
    p[0] = 3.0
    q *= 0.5
    return np.sum(a ** 2)


def expand_dims_item_write(x):
    a = x * 1.0
    np.expand_dims(a, 0)[0, 3] = -1.0
    return np.sum(a ** 2)


def diagonal_sees_base_write(x):
    a = x.reshape(2, -1) * 1.0
    d = a.diagonal()
    a[0, 0] = 5.0
    return np.sum(d ** 2)


def transpose_sees_base_write(x):
    a = x.reshape(2, -1) * 1.0
    t = a.T
    a[0, 1] = 7.0
    return np.sum(t ** 2 * w(t))


def swap_through_a_temporary(x):
    a = x * 1.0
    t = a[0]                 # a NumPy scalar: a copy
    a[0] = a[1]
    a[1] = t
    return np.sum(a * np.arange(1, a.size + 1))


def swap_by_tuple_assignment(x):
    a = x * 1.0
    a[0], a[3] = a[3], a[0]  # two scalars (copies), then two writes
    return np.sum(a * np.arange(1, a.size + 1))


def swap_of_2d_items(x):
    a = x.reshape(2, -1) * 1.0
    a[0, 0], a[1, 2] = a[1, 2], a[0, 0]
    return np.sum(a * w(a))


def row_swap_is_numpys_pitfall(x):
    # rows are views: after a[0] = a[1] the view a[0] given to a[1] holds row 1,
    # so both rows end equal to the old row 1 (NumPy's well-known result)
    a = x.reshape(2, -1) * 1.0
    a[0], a[1] = a[1], a[0]
    return np.sum(a * w(a))


def row_written_from_input(x):
    a = x * 1.0
    v = a.reshape(2, -1)
    v[1] = x[0] ** 2
    return np.sum(a ** 2)


def transpose_column_from_sin_of_another(x):
    a = x.reshape(2, -1) * 1.0
    a.T[:, 0] = np.sin(a.T[:, 1])
    return np.sum(a ** 2 * w(a))


def view_of_view_of_view_write(x):
    a = x * 1.0
    a.reshape(2, -1).T[1:, ::-1][0, 0] = np.cos(x[2])
    return np.sum(a ** 2 * w(a))


def ravel_of_transpose_is_a_copy(x):
    a = x.reshape(2, -1) * 1.0
    r = a.T.ravel()
    r[0] = 100.0
    return np.sum(a ** 2) + np.sum(r * w(r))


def reshape_of_transpose_is_a_copy(x):
    a = x.reshape(2, -1) * 1.0
    a.T.reshape(-1)[1] = 100.0
    return np.sum(a ** 2 * w(a))


def ravel_of_contiguous_is_a_view(x):
    a = x.reshape(2, -1) * 1.0
    r = a.ravel()
    r[1] = 100.0
    r[-2:] *= x[1]
    return np.sum(a ** 2 * w(a))


def flatten_is_a_copy(x):
    a = x.reshape(2, -1) * 1.0
    r = a.flatten()
    r[0] = 100.0
    return np.sum(a ** 2) + np.sum(r * w(r))


def ravel_of_reversed_1d_is_a_copy(x):
    a = x * 1.0
    r = np.ravel(a[::-1])    # not C-contiguous: NumPy's ravel copies (reshape(-1) would not)
    r[0] = 100.0
    return np.sum(a ** 2 * w(a)) + np.sum(r * w(r))


def augmented_write_into_an_item_stays_in_the_item(x):
    a = x * 1.0
    s = a[2]                 # a NumPy scalar: += and *= make new scalars
    s += 10.0
    s *= x[0]
    a[1] = s
    return np.sum(a ** 2 * w(a)) + np.sum(s)


def augmented_write_into_a_2d_item_stays_in_the_item(x):
    a = x.reshape(2, -1) * 1.0
    s = a[1, 0]
    s **= 2
    s -= a[0, 1]
    return np.sum(a ** 2 * w(a)) + np.sum(s * 3.0)


def broadcast_to_sees_base_write(x):
    a = x * 1.0
    b = np.broadcast_to(a, (3,) + a.shape)
    a[1] = 4.0
    a[2:4] *= x[0]
    return np.sum(np.sin(b) * w(b))


def copyto_into_a_whole_tensor(x):
    a = x * 2.0
    np.copyto(a, np.sin(x))
    return np.sum(a ** 2 * w(a))


def swapaxes_3d_item_write(x):
    a = x.reshape(s3(x)) * 1.0
    np.swapaxes(a, 0, 2)[-1, 1, 0] = 4.0
    return np.sum(a ** 2 * w(a))


def moveaxis_3d_slab_multiply(x):
    a = x.reshape(s3(x)) * 1.0
    m = np.moveaxis(a, 0, -1)
    m[1] *= -2.0
    return np.sum(a ** 2 * w(a))


def rollaxis_3d_slab_write(x):
    a = x.reshape(s3(x)) * 1.0
    np.rollaxis(a, 2)[0] = np.tanh(x.reshape(s3(x))[..., 1])
    return np.sum(a ** 2 * w(a))


def rollaxis_that_moves_nothing_is_a_view(x):
    a = x.reshape(s3(x)) * 1.0
    r = np.rollaxis(a, 1, 2)  # NumPy: a[...], a view
    r[0, 0, 0] = 6.0
    a[-1] *= 2.0
    return np.sum(a ** 2 * w(a)) + np.sum(np.sin(r) * w(r))


def transpose_3d_augmented(x):
    a = x.reshape(s3(x)) * 1.0
    t = a.transpose(1, 2, 0)
    t[:, 0] -= 0.5
    t[-1] /= 4.0
    return np.sum(a ** 2 * w(a))


def squeeze_3d_writes(x):
    a = x.reshape(2, 1, -1) * 1.0
    s = np.squeeze(a)
    s[1, 0] = np.sin(x[1])
    s[:, -1] += 1.0
    return np.sum(a ** 2 * w(a))


def flip_view_writes(x):
    a = x * 1.0
    f = np.flip(a)
    f[0] = 9.0
    f[1:3] *= 2.0
    return np.sum(a ** 2 * w(a))


def flipud_fliplr_view_writes(x):
    a = x.reshape(2, -1) * 1.0
    np.flipud(a)[0, 1] = -3.0
    np.fliplr(a)[:, 0] += x[0]
    return np.sum(a ** 2 * w(a))


def copyto_column_from_input(x):
    a = x * 1.0
    np.copyto(a.reshape(2, -1)[:, 1], x[:2] ** 2)
    return np.sum(a ** 2 * w(a))


def copyto_scalar_into_slice_of_transpose(x):
    a = x.reshape(2, -1) * 1.0
    np.copyto(a.T[1:], 0.5)
    return np.sum(a ** 2 * w(a))


def base_written_then_several_views_read(x):
    a = x * 1.0
    v1 = a.reshape(2, -1)
    v2 = a[::2]
    v3 = v1.T
    a[2] = 4.0
    a *= 1.5
    return np.sum(v1 ** 2) + np.sum(v2 * w(v2)) + np.sum(np.sin(v3))


def view_taken_base_written_view_written(x):
    a = x * 1.0
    v = a.reshape(-1, 2)
    a[0] = 2.0
    v[0, 0] += 1.0           # reads the 2.0
    v[0, 1] *= 3.0
    return np.sum(a ** 2 * w(a))


def view_written_other_view_read(x):
    a = x * 1.0
    v = a.reshape(2, -1)
    u = a[1:]
    v[0, 1] = 3.0
    return np.sum(u ** 2 * w(u))


def every_augmented_operator_through_a_transpose(x):
    a = x.reshape(2, -1) * 1.0
    v = a.T
    v -= 0.5
    v /= 2.0
    v **= 2
    v += x.reshape(2, -1).T
    v *= 1.5
    return np.sum(a * w(a))


def split_pieces_of_2d(x):
    a = x.reshape(2, -1) * 1.0
    np.array_split(a, 2, axis=1)[1][0] = -2.0
    np.vsplit(a, 2)[1] *= 3.0
    np.hsplit(a, a.shape[1])[-1][0, 0] = np.sin(x[0])
    return np.sum(a ** 2 * w(a))


# NumPy's ufuncs give a scalar for 0-d operands: (x * 1.0)[...] is a 0-d array.
def zero_d_ellipsis_view_augmented(x):
    a = (x * 1.0)[...]
    v = a[...]
    v += 1.0
    v *= x
    return np.sum(a ** 2)


def zero_d_reshape_item_write(x):
    a = (x.reshape(1) * 1.0).reshape(())
    a.reshape(1)[0] = np.sin(x)
    return np.sum(a ** 2) + np.sum(a * x)


def zero_d_expand_dims_sees_base_write(x):
    a = (x * 1.0)[...]
    e = np.expand_dims(a, 0)
    a += 2.0
    return np.sum(e ** 3)


def zero_d_ufunc_result_is_a_scalar_copy(x):
    a = x * 1.0              # a NumPy scalar: += rebinds it, e is a copy
    e = np.expand_dims(a, 0)
    a += 2.0
    return np.sum(e ** 3) + np.sum(a)


def zero_d_ufunc_result_ellipsis_is_a_copy(x):
    a = x * 1.0              # a NumPy scalar: a[...] is a new 0-d array
    v = a[...]
    a += 2.0
    a *= x
    return np.sum(v ** 3) + np.sum(a)


def zero_d_broadcast_to_sees_base_write(x):
    a = (x * 1.0)[...]
    b = np.broadcast_to(a, (3,))
    a[...] = 2.0 * x
    return np.sum(np.sin(b) * np.arange(1.0, 4.0))


def zero_d_empty_index_is_a_copy(x):
    a = (x * 1.0)[...]
    s = a[()]                # a NumPy scalar: a copy
    a[...] = 5.0 * x
    return np.sum(s * a)


def zero_d_ravel_and_transpose_views(x):
    a = (x * 1.0)[...]
    r = a.ravel()
    r[0] = 3.0 * x
    a.T[...] = a ** 2
    return np.sum(r * 2.0) + np.sum(a)


# -- torch twins (NumPy's semantics with torch's ops; a clone where NumPy gives a scalar) ---

def _tw(a):
    return torch.arange(1.0, a.numel() + 1, dtype=torch.float64).reshape(a.shape)


def _t_s3(x):
    return SHAPE3[x.numel()]


def _t_reshape_item(x):
    a = x * 1.0
    a.reshape(2, -1)[0, 0] = 10.0
    return (a ** 2).sum()


def _t_transpose_item(x):
    a = x.reshape(2, -1) * 1.0
    a.T[0, 1] = 5.0
    return (a ** 2).sum()


def _t_reshape_add_row(x):
    a = x * 1.0
    v = a.reshape(2, -1)
    v += 1.0
    v[1] *= 2.0
    return (a ** 2).sum()


def _t_split(x):
    a = x * 1.0
    n = a.shape[0] // 2        # torch refuses writes into chunk()'s pieces: slices
    p, q = a[:n], a[n:]
    p[0] = 3.0
    q *= 0.5
    return (a ** 2).sum()


def _t_expand_dims(x):
    a = x * 1.0
    a.unsqueeze(0)[0, 3] = -1.0
    return (a ** 2).sum()


def _t_diagonal(x):
    a = x.reshape(2, -1) * 1.0
    d = a.diagonal()
    a[0, 0] = 5.0
    return (d ** 2).sum()


def _t_transpose_sees(x):
    a = x.reshape(2, -1) * 1.0
    t = a.T
    a[0, 1] = 7.0
    return (t ** 2 * _tw(t)).sum()


def _t_swap_temp(x):
    a = x * 1.0
    t = a[0].clone()
    a[0] = a[1]
    a[1] = t
    return (a * _tw(a)).sum()


def _t_swap_tuple(x):
    a = x * 1.0
    a[0], a[3] = a[3].clone(), a[0].clone()
    return (a * _tw(a)).sum()


def _t_swap_2d(x):
    a = x.reshape(2, -1) * 1.0
    a[0, 0], a[1, 2] = a[1, 2].clone(), a[0, 0].clone()
    return (a * _tw(a)).sum()


def _t_row_swap(x):
    a = x.reshape(2, -1) * 1.0
    a[0], a[1] = a[1], a[0]
    return (a * _tw(a)).sum()


def _t_row_from_input(x):
    a = x * 1.0
    v = a.reshape(2, -1)
    v[1] = x[0] ** 2
    return (a ** 2).sum()


def _t_transpose_column(x):
    a = x.reshape(2, -1) * 1.0
    a.T[:, 0] = torch.sin(a.T[:, 1].clone())   # torch saves sin's input view
    return (a ** 2 * _tw(a)).sum()


def _t_ravel_transpose(x):
    a = x.reshape(2, -1) * 1.0
    r = a.T.reshape(-1)
    r[0] = 100.0
    return (a ** 2).sum() + (r * _tw(r)).sum()


def _t_reshape_transpose(x):
    a = x.reshape(2, -1) * 1.0
    a.T.reshape(-1)[1] = 100.0
    return (a ** 2 * _tw(a)).sum()


def _t_ravel_contiguous(x):
    a = x.reshape(2, -1) * 1.0
    r = a.view(-1)
    r[1] = 100.0
    r[-2:] *= x[1]
    return (a ** 2 * _tw(a)).sum()


def _t_flatten(x):
    a = x.reshape(2, -1) * 1.0
    r = a.flatten().clone()
    r[0] = 100.0
    return (a ** 2).sum() + (r * _tw(r)).sum()


def _t_ravel_reversed(x):
    a = x * 1.0
    r = torch.flip(a, (0,)).reshape(-1)
    r[0] = 100.0
    return (a ** 2 * _tw(a)).sum() + (r * _tw(r)).sum()


def _t_item_augmented(x):
    a = x * 1.0
    s = a[2].clone()
    s += 10.0
    s *= x[0]
    a[1] = s
    return (a ** 2 * _tw(a)).sum() + s


def _t_2d_item_augmented(x):
    a = x.reshape(2, -1) * 1.0
    s = a[1, 0].clone()
    s **= 2
    s -= a[0, 1]
    return (a ** 2 * _tw(a)).sum() + s * 3.0


def _t_broadcast_sees(x):
    a = x * 1.0
    b = a.expand((3,) + tuple(a.shape))
    a[1] = 4.0
    a[2:4] *= x[0]
    return (torch.sin(b) * _tw(b)).sum()


def _t_copyto_whole(x):
    a = x * 2.0
    a.copy_(torch.sin(x))
    return (a ** 2 * _tw(a)).sum()


def _t_rollaxis_noop(x):
    a = x.reshape(_t_s3(x)) * 1.0
    r = a.permute(0, 1, 2)
    r[0, 0, 0] = 6.0
    a[-1] *= 2.0
    return (a ** 2 * _tw(a)).sum() + (torch.sin(r) * _tw(r)).sum()


def _t_swapaxes(x):
    a = x.reshape(_t_s3(x)) * 1.0
    a.transpose(0, 2)[-1, 1, 0] = 4.0
    return (a ** 2 * _tw(a)).sum()


def _t_moveaxis(x):
    a = x.reshape(_t_s3(x)) * 1.0
    m = torch.movedim(a, 0, -1)
    m[1] *= -2.0
    return (a ** 2 * _tw(a)).sum()


def _t_rollaxis(x):
    a = x.reshape(_t_s3(x)) * 1.0
    a.permute(2, 0, 1)[0] = torch.tanh(x.reshape(_t_s3(x))[..., 1])
    return (a ** 2 * _tw(a)).sum()


def _t_transpose_3d(x):
    a = x.reshape(_t_s3(x)) * 1.0
    t = a.permute(1, 2, 0)
    t[:, 0] -= 0.5
    t[-1] /= 4.0
    return (a ** 2 * _tw(a)).sum()


def _t_squeeze(x):
    a = x.reshape(2, 1, -1) * 1.0
    s = a.squeeze()
    s[1, 0] = torch.sin(x[1])
    s[:, -1] += 1.0
    return (a ** 2 * _tw(a)).sum()


def _t_copyto_column(x):
    a = x * 1.0
    a.reshape(2, -1)[:, 1].copy_(x[:2] ** 2)
    return (a ** 2 * _tw(a)).sum()


def _t_copyto_scalar(x):
    a = x.reshape(2, -1) * 1.0
    a.T[1:].fill_(0.5)
    return (a ** 2 * _tw(a)).sum()


def _t_several_views(x):
    a = x * 1.0
    v1 = a.reshape(2, -1)
    v2 = a[::2]
    v3 = v1.T
    a[2] = 4.0
    a *= 1.5
    return (v1 ** 2).sum() + (v2 * _tw(v2)).sum() + torch.sin(v3).sum()


def _t_view_base_view(x):
    a = x * 1.0
    v = a.reshape(-1, 2)
    a[0] = 2.0
    v[0, 0] += 1.0
    v[0, 1] *= 3.0
    return (a ** 2 * _tw(a)).sum()


def _t_other_view(x):
    a = x * 1.0
    v = a.reshape(2, -1)
    u = a[1:]
    v[0, 1] = 3.0
    return (u ** 2 * _tw(u)).sum()


def _t_every_augmented(x):
    a = x.reshape(2, -1) * 1.0
    v = a.T
    v -= 0.5
    v /= 2.0
    v **= 2
    v += x.reshape(2, -1).T
    v *= 1.5
    return (a * _tw(a)).sum()


def _t_split_2d(x):
    a = x.reshape(2, -1) * 1.0
    a[:, (a.shape[1] + 1) // 2:][0] = -2.0      # array_split's pieces, as slices
    a[1:] *= 3.0
    a[:, -1:][0, 0] = torch.sin(x[0])
    return (a ** 2 * _tw(a)).sum()


def _t_zero_d_ellipsis(x):
    a = (x * 1.0)[...]
    v = a[...]
    v += 1.0
    v *= x
    return (a ** 2).sum()


def _t_zero_d_reshape(x):
    a = (x.reshape(1) * 1.0).reshape(())
    a.reshape(1)[0] = torch.sin(x)
    return (a ** 2).sum() + (a * x).sum()


def _t_zero_d_expand(x):
    a = (x * 1.0)[...]
    e = a.unsqueeze(0)
    a += 2.0
    return (e ** 3).sum()


def _t_zero_d_scalar(x):
    a = x * 1.0
    e = a.unsqueeze(0).clone()
    a = a + 2.0
    return (e ** 3).sum() + a.sum()


def _t_zero_d_ufunc_ellipsis(x):
    a = x * 1.0
    v = a[...].clone()
    a = (a + 2.0) * x
    return (v ** 3).sum() + a.sum()


def _t_zero_d_broadcast(x):
    a = (x * 1.0)[...]
    b = a.expand(3)
    a[...] = 2.0 * x
    return (torch.sin(b) * torch.arange(1.0, 4.0, dtype=torch.float64)).sum()


def _t_zero_d_empty_index(x):
    a = (x * 1.0)[...]
    s = a[()].clone()
    a[...] = 5.0 * x
    return (s * a).sum()


def _t_zero_d_ravel_transpose(x):
    a = (x * 1.0)[...]
    r = a.reshape(-1)
    r[0] = 3.0 * x
    a[...] = a.clone() ** 2    # .T of a 0-d tensor: the tensor itself; pow saves its input
    return (r * 2.0).sum() + a.sum()


TWINS = {
    reshape_item_write: _t_reshape_item,
    transpose_item_write: _t_transpose_item,
    reshape_inplace_add_then_row_multiply: _t_reshape_add_row,
    split_pieces_written: _t_split,
    expand_dims_item_write: _t_expand_dims,
    diagonal_sees_base_write: _t_diagonal,
    transpose_sees_base_write: _t_transpose_sees,
    swap_through_a_temporary: _t_swap_temp,
    swap_by_tuple_assignment: _t_swap_tuple,
    swap_of_2d_items: _t_swap_2d,
    row_swap_is_numpys_pitfall: _t_row_swap,
    row_written_from_input: _t_row_from_input,
    transpose_column_from_sin_of_another: _t_transpose_column,
    ravel_of_transpose_is_a_copy: _t_ravel_transpose,
    reshape_of_transpose_is_a_copy: _t_reshape_transpose,
    ravel_of_contiguous_is_a_view: _t_ravel_contiguous,
    flatten_is_a_copy: _t_flatten,
    ravel_of_reversed_1d_is_a_copy: _t_ravel_reversed,
    augmented_write_into_an_item_stays_in_the_item: _t_item_augmented,
    augmented_write_into_a_2d_item_stays_in_the_item: _t_2d_item_augmented,
    broadcast_to_sees_base_write: _t_broadcast_sees,
    copyto_into_a_whole_tensor: _t_copyto_whole,
    rollaxis_that_moves_nothing_is_a_view: _t_rollaxis_noop,
    swapaxes_3d_item_write: _t_swapaxes,
    moveaxis_3d_slab_multiply: _t_moveaxis,
    rollaxis_3d_slab_write: _t_rollaxis,
    transpose_3d_augmented: _t_transpose_3d,
    squeeze_3d_writes: _t_squeeze,
    copyto_column_from_input: _t_copyto_column,
    copyto_scalar_into_slice_of_transpose: _t_copyto_scalar,
    base_written_then_several_views_read: _t_several_views,
    view_taken_base_written_view_written: _t_view_base_view,
    view_written_other_view_read: _t_other_view,
    every_augmented_operator_through_a_transpose: _t_every_augmented,
    split_pieces_of_2d: _t_split_2d,
    zero_d_ellipsis_view_augmented: _t_zero_d_ellipsis,
    zero_d_reshape_item_write: _t_zero_d_reshape,
    zero_d_expand_dims_sees_base_write: _t_zero_d_expand,
    zero_d_ufunc_result_is_a_scalar_copy: _t_zero_d_scalar,
    zero_d_ufunc_result_ellipsis_is_a_copy: _t_zero_d_ufunc_ellipsis,
    zero_d_broadcast_to_sees_base_write: _t_zero_d_broadcast,
    zero_d_empty_index_is_a_copy: _t_zero_d_empty_index,
    zero_d_ravel_and_transpose_views: _t_zero_d_ravel_transpose,
}

# (program, inputs it runs on)
BOTH = ("x6", "x48")
PROGRAMS = [
    (reshape_item_write, BOTH),
    (transpose_item_write, BOTH),
    (reshape_inplace_add_then_row_multiply, BOTH),
    (split_pieces_written, BOTH),
    (expand_dims_item_write, BOTH),
    (diagonal_sees_base_write, BOTH),
    (transpose_sees_base_write, BOTH),
    (swap_through_a_temporary, BOTH),
    (swap_by_tuple_assignment, BOTH),
    (swap_of_2d_items, BOTH),
    (row_swap_is_numpys_pitfall, BOTH),
    (row_written_from_input, BOTH),
    (transpose_column_from_sin_of_another, BOTH),
    (view_of_view_of_view_write, BOTH),
    (ravel_of_transpose_is_a_copy, BOTH),
    (reshape_of_transpose_is_a_copy, BOTH),
    (ravel_of_contiguous_is_a_view, BOTH),
    (flatten_is_a_copy, BOTH),
    (ravel_of_reversed_1d_is_a_copy, BOTH),
    (augmented_write_into_an_item_stays_in_the_item, BOTH),
    (augmented_write_into_a_2d_item_stays_in_the_item, BOTH),
    (broadcast_to_sees_base_write, BOTH),
    (copyto_into_a_whole_tensor, BOTH),
    (rollaxis_that_moves_nothing_is_a_view, BOTH),
    (swapaxes_3d_item_write, BOTH),
    (moveaxis_3d_slab_multiply, BOTH),
    (rollaxis_3d_slab_write, BOTH),
    (transpose_3d_augmented, BOTH),
    (squeeze_3d_writes, BOTH),
    (flip_view_writes, BOTH),
    (flipud_fliplr_view_writes, BOTH),
    (copyto_column_from_input, BOTH),
    (copyto_scalar_into_slice_of_transpose, BOTH),
    (base_written_then_several_views_read, BOTH),
    (view_taken_base_written_view_written, BOTH),
    (view_written_other_view_read, BOTH),
    (every_augmented_operator_through_a_transpose, BOTH),
    (split_pieces_of_2d, BOTH),
    (zero_d_ellipsis_view_augmented, ("x0",)),
    (zero_d_reshape_item_write, ("x0",)),
    (zero_d_expand_dims_sees_base_write, ("x0",)),
    (zero_d_ufunc_result_is_a_scalar_copy, ("x0",)),
    (zero_d_ufunc_result_ellipsis_is_a_copy, ("x0",)),
    (zero_d_broadcast_to_sees_base_write, ("x0",)),
    (zero_d_empty_index_is_a_copy, ("x0",)),
    (zero_d_ravel_and_transpose_views, ("x0",)),
]
ROWS = [pytest.param(f, name, id=f"{f.__name__}-{name}") for f, names in PROGRAMS
        for name in names]
TORCH_ROWS = [r for r in ROWS if r.values[0] in TWINS]


# -- the oracles ----------------------------------------------------------------------------
def assert_value(got, f, x, how):
    want = numpy_value(f, x)
    got = float(got.numpy() if isinstance(got, tg.Tensor) else got)
    np.testing.assert_allclose(got, want, rtol=VALUE_RTOL, atol=1e-13,
                               err_msg=f"{how}: value differs from NumPy's")


def assert_gradient(g, f, x, how):
    want = central_differences(f, x)
    g = np.asarray(g, dtype=np.float64)
    assert g.shape == np.shape(x), f"{how}: gradient shape {g.shape}, input {np.shape(x)}"
    scale = max(1.0, abs(numpy_value(f, x)))
    np.testing.assert_allclose(g, want, rtol=GRAD_RTOL, atol=GRAD_ATOL * scale,
                               err_msg=f"{how}: gradient differs from central differences")


# -- the checks -----------------------------------------------------------------------------
@pytest.mark.parametrize("f, name", ROWS)
def test_plain_tensor_gives_numpys_value(f, name):
    x = INPUTS[name]
    got = in_fresh_thread(lambda: float(f(tg.tensor(x.copy())).numpy()))
    assert_value(got, f, x, "f(tg.tensor(x))")


@pytest.mark.parametrize("f, name", ROWS)
def test_value_and_grad_gives_numpys_value_and_gradient(f, name):
    x = INPUTS[name]
    value, g = in_fresh_thread(lambda: tg.value_and_grad(f)(x.copy()))
    assert_value(value, f, x, "tg.value_and_grad(f)(x)")
    assert_gradient(g, f, x, "tg.value_and_grad(f)(x)")


@pytest.mark.parametrize("f, name", ROWS)
def test_traced_function_gives_numpys_value_and_gradient(f, name):
    x = INPUTS[name]
    x2 = second_input(x)

    def run():
        ft = tg.trace(f, x.copy())
        v1, g1 = ft.value_and_grad(x.copy())
        v2, g2 = ft.value_and_grad(x2.copy())
        return (float(v1), np.array(g1, copy=True)), (float(v2), np.array(g2, copy=True))
    (v1, g1), (v2, g2) = in_fresh_thread(run)
    assert_value(v1, f, x, "traced, at the traced input")
    assert_gradient(g1, f, x, "traced, at the traced input")
    assert_value(v2, f, x2, "traced, at a second input")
    assert_gradient(g2, f, x2, "traced, at a second input")


@pytest.mark.parametrize("f, name", TORCH_ROWS)
def test_gradient_matches_torch(f, name):
    pytest.importorskip("torch")
    x = INPUTS[name]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    yt = TWINS[f](xt)
    # the twin is the program: same value as NumPy's, same gradient as the differences
    assert_value(float(yt.detach()), f, x, "torch twin (test's own check)")
    yt.backward()
    assert_gradient(xt.grad.numpy(), f, x, "torch twin (test's own check)")
    _, g = in_fresh_thread(lambda: tg.value_and_grad(f)(x.copy()))
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-10, atol=1e-12,
                               err_msg="tg.value_and_grad(f)(x) against torch")


ZERO_D_VIEWS = {
    "expand_dims": lambda a: np.expand_dims(a, 0),
    "reshape(1, 1)": lambda a: a.reshape(1, 1),
    "[...]": lambda a: a[...],
    "[None]": lambda a: a[None],
    ".T": lambda a: a.T,
    "ravel": lambda a: a.ravel(),
    "squeeze": lambda a: np.squeeze(a),
    "broadcast_to (read)": lambda a: np.broadcast_to(a, (3,)),
}


@pytest.mark.parametrize("view, direction", [
    (v, d) for d in ("base written, view read", "view written, base read") for v in ZERO_D_VIEWS
    if not (d.startswith("view written") and v.startswith("broadcast_to"))])   # read-only
def test_views_of_a_zero_d_tensor_made_from_an_array_share_it(view, direction):
    """tg.tensor(np.array(0.7)) is a 0-d array, not a NumPy scalar: its views share
    its memory both ways, as NumPy's do (no grad: a leaf that requires grad takes no
    writes)."""
    make = ZERO_D_VIEWS[view]

    def program(a):
        v = make(a)
        if direction == "base written, view read":
            a[...] = 5.0
            a += 1.0
            return np.sum(v * 2.0)
        v[...] = 5.0
        v *= 3.0
        return np.sum(a * 2.0)
    want = float(program(X0.copy()))
    got = in_fresh_thread(lambda: float(program(tg.tensor(X0.copy())).numpy()))
    assert got == want, (got, want)


SCALAR_MAKERS = {
    "x * 1.0 of a 0-d x": (X0, lambda x: x * 1.0),
    "item a[1] of a 1-d a": (X6, lambda x: (x * 1.0)[1]),
}
READS = {
    "not read": lambda t: None,
    "t.numpy()": lambda t: t.numpy(),
    "t.detach().numpy()": lambda t: t.detach().numpy(),
}
SCALAR_VIEWS = ("[...]", "expand_dims", "reshape(1, 1)", "broadcast_to (read)")


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("view", SCALAR_VIEWS)
@pytest.mark.parametrize("read", list(READS))
@pytest.mark.parametrize("make", list(SCALAR_MAKERS))
def test_views_of_a_scalar_are_copies_even_after_its_value_is_read(make, read, view,
                                                                   requires_grad):
    """A 0-d tensor that stands for a NumPy scalar (a ufunc's 0-d result, an item)
    stays one when its value is read (.numpy()): its "views" are new arrays, as
    those of NumPy's scalar are, so an in-place write into it reaches none of them."""
    x, mk = SCALAR_MAKERS[make]
    take = ZERO_D_VIEWS[view]

    def program(t, reader):
        reader(t)
        v = take(t)
        t += 1.0
        t *= 3.0
        return np.sum(v * 2.0)
    want = float(program(mk(x.copy()), lambda t: None))

    def run():
        t = mk(tg.tensor(x.copy(), requires_grad=requires_grad))
        return float(program(t, READS[read]).detach().numpy())
    got = in_fresh_thread(run)
    assert got == want, f"a view taken after {read} saw the write into t: {got} (NumPy: {want})"


def test_the_oracle_catches_a_write_that_does_not_reach_the_base():
    """Not vacuous: the program that writes through a view and the one that
    writes into a copy differ in value and gradient at these inputs."""
    def into_copy(x):
        a = x * 1.0
        b = a.reshape(2, -1) * 1.0
        b[0, 0] = 10.0
        return np.sum(a ** 2)
    for x in (X6, X48):
        assert numpy_value(into_copy, x) != numpy_value(reshape_item_write, x)
        assert not np.allclose(central_differences(into_copy, x),
                               central_differences(reshape_item_write, x))


# -- read-only views ------------------------------------------------------------------------
READ_ONLY_VIEWS = {
    "diagonal": lambda a: a.diagonal(),
    "np.diagonal offset reversed": lambda a: np.diagonal(a, 1)[::-1],   # a view of one
    "broadcast_to": lambda a: np.broadcast_to(a, (3,) + a.shape),
    "broadcast_to transposed": lambda a: np.broadcast_to(a, (3,) + a.shape).T,
}
WRITES = {
    "item": lambda v: v.__setitem__((0,) * v.ndim, 1.0),
    "slice": lambda v: v.__setitem__(slice(None), 2.0),
    "+=": lambda v: v.__iadd__(1.0),
    "-=": lambda v: v.__isub__(1.0),
    "*=": lambda v: v.__imul__(2.0),
    "/=": lambda v: v.__itruediv__(2.0),
    "**=": lambda v: v.__ipow__(2),
    "copyto": lambda v: np.copyto(v, 3.0),
}
# (input, how the written-into tensor is made from it): for a 0-d input, x * 1.0 is a
# NumPy scalar and (x * 1.0)[...] a 0-d array; broadcast_to views both read-only
READ_ONLY_BASES = {
    "2x3": (X6.reshape(2, 3), lambda x: x * 1.0),
    "4x12": (X48.reshape(4, 12), lambda x: x * 1.0),
    "0-d scalar": (X0, lambda x: x * 1.0),
    "0-d array": (X0, lambda x: (x * 1.0)[...]),
}
READ_ONLY_ROWS = [pytest.param(vn, wn, bn, id=f"{vn}-{wn}-{bn}")
                  for vn in READ_ONLY_VIEWS for wn in WRITES for bn in READ_ONLY_BASES
                  if not bn.startswith("0-d") or vn.startswith("broadcast_to")]


def _read_only_write(view, write, base, make):
    """NumPy refuses the write and leaves the base (the row's own check)."""
    a = make(base)
    with pytest.raises(ValueError, match="read-only"):
        write(view(a))
    np.testing.assert_array_equal(a, base)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("view, write, base", READ_ONLY_ROWS)
def test_write_into_read_only_view_raises_and_leaves_base(view, write, base, requires_grad):
    v, wr, (b, make) = READ_ONLY_VIEWS[view], WRITES[write], READ_ONLY_BASES[base]
    _read_only_write(v, wr, b, make)       # NumPy's behaviour, the oracle

    def run():
        x = tg.tensor(b.copy(), requires_grad=requires_grad)
        a = make(x)
        try:
            wr(v(a))
        except ValueError as e:
            err = str(e)
        else:
            err = None
        after = a.numpy().copy()
        grad = None
        if requires_grad:
            np.sum(a ** 2 * w(a)).backward()
            grad = x.grad.numpy().copy()
        return err, after, grad
    err, after, grad = in_fresh_thread(run)
    assert err is not None, "the write into a read-only view did not raise ValueError"
    assert "read-only" in err, err
    np.testing.assert_array_equal(after, b, err_msg="the refused write changed the base")
    if requires_grad:
        np.testing.assert_allclose(grad, 2 * b * w(b), rtol=1e-14,
                                   err_msg="the refused write changed the gradient")


@pytest.mark.parametrize("view", list(READ_ONLY_VIEWS))
def test_read_only_view_inside_value_and_grad_raises(view):
    """The same refusal inside a differentiated function: it propagates out of
    tg.value_and_grad as NumPy's ValueError."""
    v = READ_ONLY_VIEWS[view]

    def f(x):
        a = x * 1.0
        v(a)[...] = 0.0
        return np.sum(a)
    with pytest.raises(ValueError, match="read-only"):
        f(X6.reshape(2, 3).copy())
    with pytest.raises(ValueError, match="read-only"):
        in_fresh_thread(lambda: tg.value_and_grad(f)(X6.reshape(2, 3).copy()))
