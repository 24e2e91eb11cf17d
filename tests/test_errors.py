"""Errors, and what must still hold after them.

Every error is checked for its exact type and a fragment of its message.
After each one the library must keep working: the same tape, the other live
graphs and the gradients already accumulated are intact
(``test_error_leaves_everything_intact``).  Also here: protection of values
a graph saved (read-only arrays, copy-on-write of in-place updates, item
assignment).
"""
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, in_fresh_thread, leaf


def run_isolated(code, timeout=300):
    """Run code in a new interpreter (for bugs that crash the process)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


FREED_MSG = "Trying to backward through the graph a second time"


# -- creation ------------------------------------------------------------------------------
class TestCreationErrors:
    @pytest.mark.parametrize("data, exc, fragment", [
        ("abc", TypeError, "strings are not numbers"),
        (["a", "b"], TypeError, "strings are not numbers"),
        (b"ab", TypeError, "not numbers"),
        (object(), TypeError, "not a rectangular array of numbers"),
        ({"a": 1.0}, TypeError, "not a rectangular array of numbers"),
        (None, TypeError, "not a rectangular array of numbers"),
        ([1.0, "x"], TypeError, "strings are not numbers"),
        ([[1.0], [1.0, 2.0]], ValueError, "rectangular"),
        ([[1.0, 2.0], 3.0], ValueError, "rectangular"),
    ], ids=["str", "str_list", "bytes", "object", "dict", "None", "mixed", "ragged",
            "ragged_scalar"])
    def test_bad_data(self, data, exc, fragment):
        with pytest.raises(exc, match=fragment):
            tg.tensor(data)
        with pytest.raises(exc, match=fragment):
            tg.tensor(data, requires_grad=True)

    @pytest.mark.parametrize("data", [[1, 2, 3], np.array([1, 2], np.int32), 5, [True, False]],
                             ids=["int_list", "int32", "int_scalar", "bool"])
    def test_only_floating_tensors_require_grad(self, data):
        with pytest.raises(RuntimeError, match="only tensors of floating point dtype can require"):
            tg.tensor(data, requires_grad=True)
        t = tg.tensor(data)
        with pytest.raises(RuntimeError, match="floating point"):
            t.requires_grad_()
        with pytest.raises(RuntimeError, match="floating point"):
            t.requires_grad = True
        assert not t.requires_grad

    def test_error_message_names_the_dtype(self):
        with pytest.raises(RuntimeError, match="int"):
            tg.tensor([1, 2], requires_grad=True)


# -- conversions ---------------------------------------------------------------------------
class TestConversionErrors:
    def test_item_and_float_need_one_element(self):
        x = leaf([1.0, 2.0, 3.0])
        with pytest.raises(ValueError, match="one element"):
            x.item()
        with pytest.raises(ValueError, match=r"\(3,\)"):
            float(x)

    def test_bool_of_many_elements_is_ambiguous(self):
        x = leaf([1.0, 2.0, 3.0])
        with pytest.raises(ValueError, match="ambiguous"):
            bool(x > 0)
        with pytest.raises(ValueError, match="ambiguous"):
            if x > 0:
                pass

    def test_len_of_zero_dim(self):
        with pytest.raises(TypeError, match="0-d"):
            len(tg.tensor(1.0))

    def test_iterate_zero_dim(self):
        with pytest.raises(TypeError, match="0-d"):
            iter(tg.tensor(1.0, requires_grad=True))

    def test_grad_assignment_of_wrong_shape(self):
        x = leaf([1.0, 2.0])
        with pytest.raises(RuntimeError, match="shape"):
            x.grad = np.ones(3)
        assert x.grad is None
        x.grad = np.array([5.0, 6.0])
        close(x.grad, [5.0, 6.0])
        (x * 2.0).sum().backward()
        close(x.grad, [7.0, 8.0])


# -- backward errors -----------------------------------------------------------------------
class TestBackwardErrors:
    def test_second_backward(self):
        x = leaf([1.0, 2.0])
        y = (x * x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match=FREED_MSG) as info:
            y.backward()
        assert "retain_graph=True" in str(info.value)
        close(x.grad, [2.0, 4.0])

    def test_second_backward_after_retain(self):
        x = leaf([1.0, 2.0])
        y = tg.exp(x).sum()
        y.backward(retain_graph=True)
        y.backward()
        with pytest.raises(RuntimeError, match=FREED_MSG):
            y.backward()
        close(x.grad, 2 * np.exp([1.0, 2.0]))

    def test_backward_through_freed_intermediate(self):
        x = leaf([1.0, 2.0])
        h = tg.sin(x)
        h.sum().backward()
        close(x.grad, np.cos([1.0, 2.0]))
        z = (h * 2.0).sum()
        with pytest.raises(RuntimeError, match=FREED_MSG):
            z.backward()
        close(x.grad, np.cos([1.0, 2.0]))

    def test_partially_freed_graph(self):
        x = leaf([1.0, 2.0])
        h = x * 3.0
        a = (h * h).sum()
        b = tg.exp(h).sum()
        a.backward()               # frees h's record
        with pytest.raises(RuntimeError, match=FREED_MSG):
            b.backward()
        close(x.grad, 18 * np.array([1.0, 2.0]))

    def test_implicit_gradient_needs_scalar(self):
        x = leaf([1.0, 2.0, 3.0])
        y = x * 2.0
        with pytest.raises(RuntimeError,
                           match="grad can be implicitly created only for scalar outputs"):
            y.backward()
        y.backward([1.0, 1.0, 1.0])   # the graph is still usable
        close(x.grad, [2.0, 2.0, 2.0])

    def test_shape_mismatch_message(self):
        x = leaf([1.0, 2.0, 3.0])
        y = x * 2.0
        with pytest.raises(RuntimeError) as info:
            y.backward(np.ones((3, 3)))
        assert "Mismatch in shape: gradient has shape (3, 3) and output has shape (3,)" \
            in str(info.value)
        with pytest.raises(RuntimeError, match="Mismatch in shape"):
            y.backward([1.0, 2.0])
        with pytest.raises(RuntimeError, match="Mismatch in shape"):
            y.backward(np.ones((1, 3)))
        assert x.grad is None
        y.backward(np.ones(3))
        close(x.grad, [2.0, 2.0, 2.0])

    def test_scalar_seed_for_vector_output(self):
        y = leaf([1.0, 2.0]) * 2.0
        with pytest.raises(RuntimeError, match="Mismatch in shape"):
            y.backward(1.0)

    @pytest.mark.parametrize("seed, fragment", [
        (["a", "b"], "real numbers"),
        (np.array([1 + 1j, 2.0]), "real numbers"),
        ([[1.0], [1.0, 2.0]], "rectangular"),
    ], ids=["strings", "complex", "ragged"])
    def test_bad_seed_type(self, seed, fragment):
        x = leaf([1.0, 2.0])
        y = x * 2.0
        with pytest.raises(TypeError, match=fragment):
            y.backward(seed)
        y.backward([1.0, 1.0])
        close(x.grad, [2.0, 2.0])

    def test_output_that_does_not_require_grad(self):
        with pytest.raises(RuntimeError, match="does not require grad"):
            tg.tensor([1.0]).backward()
        with pytest.raises(RuntimeError, match="does not require grad"):
            (tg.tensor([1.0, 2.0]) * 2.0).sum().backward()
        x = leaf([1.0, 2.0])
        with tg.no_grad():
            y = (x * x).sum()
        with pytest.raises(RuntimeError, match="does not require grad"):
            y.backward()
        with pytest.raises(RuntimeError, match="does not require grad"):
            (x > 1.0).backward(np.ones(2))
        assert x.grad is None

    def test_grad_fn_nodes_of_freed_graph(self):
        x = leaf([1.0, 2.0])
        y = (x * x).sum()
        node = y.grad_fn
        assert node.name() == "SumBackward"
        y.backward()
        # grad_fn may still be inspected, or raise a clear RuntimeError; never crash
        try:
            nf = node.next_functions
        except RuntimeError as e:
            assert "freed" in str(e)
        else:
            assert isinstance(nf, tuple)


# -- the library keeps working after each error --------------------------------------------
X_VAL = np.linspace(0.1, 2.0, 20)     # large: referenced by the tape, made read-only
W_VAL = np.array([0.5, -1.5, 2.0])    # small: copied into the tape


def _bystander(x, w):
    """A graph that shares both leaves with the victim; returns (y, dx, dw)."""
    y = (tg.sin(w) * x[:3]).sum() + (tg.log(x) * 0.5).sum()
    dx = 0.5 / X_VAL
    dx[:3] += np.sin(W_VAL)
    dw = np.cos(W_VAL) * X_VAL[:3]
    return y, dx, dw


def _victim(x, w):
    return tg.exp(x * 0.5) * w.sum()


def _second_backward(x, w):
    v = _victim(x, w)
    v.backward(np.ones(20))
    return v, lambda: v.backward(np.ones(20))


def _simple(trigger):
    def setup(x, w):
        v = _victim(x, w)
        return v, lambda: trigger(v, x, w)
    return setup


def _with_no_grad(x, w):
    with tg.no_grad():
        v = _victim(x, w)
    return v, lambda: v.backward(np.ones(20))


def _readonly_write(x, w):
    v = _victim(x, w)
    return v, lambda: x.numpy().__setitem__(0, 123.0)


def _inplace(x, w):
    v = _victim(x, w)
    return v, lambda: x.__iadd__(1.0)


def _setitem(x, w):
    v = _victim(x, w)
    return v, lambda: x.__setitem__(0, 1.0)


ERROR_CASES = {
    "second_backward": (_second_backward, RuntimeError, FREED_MSG, False),
    "implicit_nonscalar": (_simple(lambda v, x, w: v.backward()), RuntimeError,
                           "only for scalar outputs", True),
    "shape_mismatch": (_simple(lambda v, x, w: v.backward(np.ones((3, 3)))), RuntimeError,
                       r"Mismatch in shape: gradient has shape \(3, 3\)", True),
    "bad_seed": (_simple(lambda v, x, w: v.backward(["a"] * 20)), TypeError, "real numbers",
                 True),
    "no_grad_output": (_with_no_grad, RuntimeError, "does not require grad", False),
    "broadcast_error": (_simple(lambda v, x, w: v + np.ones(7)), ValueError, "broadcast",
                        True),
    "matmul_shape": (_simple(lambda v, x, w: v @ np.ones((3, 3))), ValueError, "mismatch",
                     True),
    "unsupported_numpy": (_simple(lambda v, x, w: np.unwrap(v)), TypeError, "unwrap", True),
    "ufunc_out": (_simple(lambda v, x, w: np.exp(v, out=np.empty(20))), TypeError, "out=",
                  True),
    "readonly_write": (_readonly_write, ValueError, "read-only", True),
    "inplace_leaf": (_inplace, RuntimeError, "in-place", True),
    "setitem": (_setitem, RuntimeError, "item assignment", True),
    "axis_error": (_simple(lambda v, x, w: v.sum(axis=3)), np.exceptions.AxisError,
                   "out of bounds", True),
}


def _matrix():
    for case in sorted(ERROR_CASES):
        for victim_first in (True, False):
            yield pytest.param(case, victim_first,
                               id=f"{case}-{'victim' if victim_first else 'bystander'}_first")


@pytest.mark.parametrize("case, victim_first", list(_matrix()))
def test_error_leaves_everything_intact(case, victim_first):
    # a fresh thread has a fresh tape: the outcome does not depend on earlier tests
    in_fresh_thread(lambda: _error_scenario(case, victim_first))


def _error_scenario(case, victim_first):
    setup, exc, fragment, victim_usable = ERROR_CASES[case]
    x, w = leaf(X_VAL), leaf(W_VAL)
    k = leaf([1.0, 2.0])
    keep = (k * k).sum()       # one more live graph, recorded first
    # gradients accumulated before anything goes wrong
    (x * 2.0).sum().backward()
    (w * w).sum().backward()
    if victim_first:
        victim, trigger = setup(x, w)
        by, dx, dw = _bystander(x, w)
    else:
        by, dx, dw = _bystander(x, w)
        victim, trigger = setup(x, w)
    gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()

    with pytest.raises(exc, match=fragment):
        trigger()

    # nothing observable changed
    assert np.array_equal(x.grad.numpy(), gx)
    assert np.array_equal(w.grad.numpy(), gw)
    assert np.array_equal(x.numpy(), X_VAL)
    assert np.array_equal(w.numpy(), W_VAL)
    # the other live graph still backprops correctly
    by.backward()
    close(x.grad, gx + dx)
    close(w.grad, gw + dw)
    # the victim too, when the error did not consume it
    if victim_usable:
        gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
        victim.backward(np.ones(20))
        e = np.exp(X_VAL * 0.5)
        close(x.grad, gx + 0.5 * e * W_VAL.sum())
        close(w.grad, gw + e.sum())
    # and new graphs work
    gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
    (x * w.sum()).sum().backward()
    close(x.grad, gx + W_VAL.sum())
    close(w.grad, gw + X_VAL.sum())
    keep.backward()
    close(k.grad, [2.0, 4.0])


def test_backward_of_earlier_graph_with_freed_large_graph_after_it():
    # regression: _release_freed indexed past the backward's records (IndexError)
    in_fresh_thread(_earlier_graph_scenario)


def _earlier_graph_scenario():
    w = leaf([2.0, 3.0])
    x = leaf(np.arange(20.0))
    v = leaf([1.0])
    b = (w * w).sum()          # recorded first
    a = (x * 2.0).sum()        # a large intermediate, freed below
    c = v * 3.0                # a third graph that stays alive
    a.backward()
    b.backward()
    close(w.grad, [4.0, 6.0])
    c.backward([1.0])
    close(v.grad, [3.0])


def test_reusing_freed_large_intermediate_raises_instead_of_crashing():
    r = run_isolated("""
        import numpy as np, tapegrad as tg
        k = tg.tensor([1.0, 2.0], requires_grad=True)
        keep = (k * k).sum()                  # another live graph
        x = tg.tensor(np.linspace(0.1, 2.0, 20), requires_grad=True)
        h = tg.exp(x)                         # a large intermediate
        h.backward(np.ones(20))               # frees h's graph
        w = tg.tensor([0.5], requires_grad=True)
        try:
            (h * w).sum().backward()
        except RuntimeError as e:
            assert "backward through the graph a second time" in str(e), e
        else:
            raise AssertionError("no error")
        assert w.grad is None
        keep.backward()
        assert np.allclose(k.grad.numpy(), [2.0, 4.0])
        print("OK")
    """)
    assert r.returncode == 0, f"exit code {r.returncode}: {r.stderr[-3000:]}"
    assert "OK" in r.stdout


def test_reusing_freed_small_intermediate_while_other_graph_lives():
    def body():
        k = leaf([1.0, 2.0])
        keep = (k * k).sum()
        x = leaf([0.5, 1.5])
        h = tg.exp(x)
        h.backward(np.ones(2))
        w = leaf([0.5])
        with pytest.raises(RuntimeError, match=FREED_MSG):
            (h * w).sum().backward()
        assert w.grad is None
        close(x.grad, np.exp([0.5, 1.5]))
        keep.backward()
        close(k.grad, [2.0, 4.0])
    in_fresh_thread(body)


def test_failed_sweep_changes_no_gradient():
    x, w = leaf([1.0, 2.0]), leaf([3.0])
    h = x * 2.0
    h.sum().backward()                       # frees h
    (w * 1.0).sum().backward()
    gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
    y = (w * w).sum() + (h * w).sum() + (x * w).sum()   # reaches w and x before h's stub
    with pytest.raises(RuntimeError, match=FREED_MSG):
        y.backward()
    assert np.array_equal(x.grad.numpy(), gx)
    assert np.array_equal(w.grad.numpy(), gw)


def test_errors_in_a_loop_do_not_leak_or_corrupt():
    x = leaf(X_VAL)
    for i in range(200):
        y = tg.exp(x * 0.5)
        with pytest.raises(RuntimeError):
            y.backward()
        with pytest.raises(RuntimeError):
            y.backward(np.ones(3))
        if i % 50 == 0:
            y.backward(np.ones(20))
    close(x.grad, 4 * 0.5 * np.exp(X_VAL * 0.5))


# -- misc op errors ------------------------------------------------------------------------
class TestOpErrors:
    def test_reduction_axis_errors(self):
        x = leaf(np.ones((2, 3)))
        with pytest.raises(np.exceptions.AxisError, match="out of bounds"):
            x.sum(axis=2)
        with pytest.raises(np.exceptions.AxisError):
            tg.mean(x, axis=-3)
        with pytest.raises(ValueError, match="repeated axis"):
            x.sum(axis=(0, 0))
        with pytest.raises(TypeError, match="axis must be an int"):
            x.sum(axis=1.5)

    def test_matmul_with_scalar(self):
        with pytest.raises(ValueError, match="scalar"):
            tg.matmul(leaf([1.0, 2.0]), 2.0)

    def test_dot_of_3d_with_misaligned_shapes(self):
        with pytest.raises(ValueError, match="not aligned"):
            tg.dot(leaf(np.ones((2, 2, 2))), leaf(np.ones((3, 2))))
        with pytest.raises(ValueError, match="shape-mismatch"):
            tg.tensordot(leaf(np.ones((2, 3))), leaf(np.ones((2, 3))), axes=([1], [0]))

    def test_reshape_order_f(self):
        with pytest.raises(NotImplementedError, match="order"):
            tg.reshape(leaf(np.ones((2, 2))), (4,), order="F")

    def test_bad_reshape(self):
        with pytest.raises(ValueError):
            leaf(np.ones(6)).reshape(4, 2)

    def test_clip_without_bounds(self):
        with pytest.raises(ValueError, match="a_min"):
            tg.clip(leaf([1.0]), None, None)

    def test_concatenate_nothing(self):
        with pytest.raises(ValueError):
            tg.concatenate([])

    def test_index_out_of_range(self):
        x = leaf([1.0, 2.0])
        with pytest.raises(IndexError):
            x[5]
        with pytest.raises(IndexError):
            x[np.array([0, 2])]
        (x * 1.0).sum().backward()
        close(x.grad, [1.0, 1.0])


# -- saved values cannot be silently mutated -----------------------------------------------
class TestReadOnly:
    def test_large_leaf_read_only_while_graph_lives(self):
        x = leaf(np.arange(20.0))
        y = (x * x).sum()
        with pytest.raises(ValueError, match="read-only"):
            x.numpy()[0] = 1.0
        y.backward()
        close(x.grad, 2 * np.arange(20.0))

    def test_large_intermediate_read_only(self):
        x = leaf(np.arange(20.0))
        h = tg.exp(x * 0.1)
        y = (h * h).sum()
        with pytest.raises(ValueError, match="read-only"):
            h.numpy()[0] = 1.0
        y.backward()
        close(x.grad, 0.2 * np.exp(0.2 * np.arange(20.0)))

    def test_large_constant_read_only(self):
        c = np.arange(20.0)
        x = leaf(np.ones(20))
        y = (x * c).sum()
        with pytest.raises(ValueError, match="read-only"):
            c[0] = 5.0
        y.backward()
        close(x.grad, np.arange(20.0))

    def test_small_values_are_copied(self):
        c = np.array([1.0, 2.0, 3.0])
        x = leaf([1.0, 1.0, 1.0])
        y = (x * c).sum()
        c[0] = 100.0          # small arrays stay writeable; the tape has its copy
        y.backward()
        close(x.grad, [1.0, 2.0, 3.0])

    def test_constant_writeable_again_after_graph_gone(self):
        def body():
            c = np.arange(20.0)
            x = leaf(np.ones(20))
            y = (x * c).sum()
            assert not c.flags.writeable
            y.backward()
            del y
            tg.tensor([1.0], requires_grad=True) * 2.0   # the next operation
            assert c.flags.writeable
            c[0] = 7.0
            return True
        assert in_fresh_thread(body)

    def test_leaf_writeable_again_after_graph_gone(self):
        def body():
            x = leaf(np.arange(20.0))
            y = tg.sin(x).sum()
            assert not x.numpy().flags.writeable
            y.backward()
            del y
            tg.tensor([1.0], requires_grad=True) * 2.0
            assert x.numpy().flags.writeable
            return True
        assert in_fresh_thread(body)

    def test_retained_graph_keeps_value_read_only(self):
        def body():
            c = np.arange(20.0)
            x = leaf(np.ones(20))
            y = (x * c).sum()
            y.backward(retain_graph=True)
            tg.tensor([1.0], requires_grad=True) * 2.0
            assert not c.flags.writeable
            y.backward()
            close(x.grad, 2 * np.arange(20.0))
            return True
        assert in_fresh_thread(body)

    def test_users_read_only_array_stays_read_only(self):
        def body():
            c = np.arange(20.0)
            c.flags.writeable = False
            x = leaf(np.ones(20))
            y = (x * c).sum()
            y.backward()
            del y
            tg.tensor([1.0], requires_grad=True) * 2.0
            assert not c.flags.writeable
            return True
        assert in_fresh_thread(body)

    @pytest.mark.parametrize("make_view", [lambda x: x[:4], lambda x: tg.split(x, 5)[0]],
                             ids=["slice", "split"])
    def test_view_of_saved_leaf_cannot_write_through(self, make_view):
        x = leaf(np.arange(20.0))
        p = make_view(x)
        y = (x * x).sum()
        try:
            p.numpy()[1] = 100.0
        except ValueError:
            pass
        assert x.numpy()[1] == 1.0
        y.backward()
        close(x.grad, 2 * np.arange(20.0))

    def test_constant_view_of_writeable_base(self):
        base = np.arange(40.0)
        c = base[:20]
        x = leaf(np.ones(20))
        y = (x * c).sum()
        try:
            base[0] = 100.0
        except ValueError:
            pass
        y.backward()
        close(x.grad, np.arange(20.0))


# -- in-place updates ----------------------------------------------------------------------
class TestInPlace:
    @pytest.mark.parametrize("op", ["__iadd__", "__isub__", "__imul__", "__itruediv__",
                                    "__ipow__"])
    def test_on_leaf_requiring_grad_raises(self, op):
        x = leaf([1.0, 2.0])
        with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
            getattr(x, op)(2.0)
        assert np.array_equal(x.numpy(), [1.0, 2.0])

    def test_augmented_assignment_statement(self):
        x = leaf([1.0, 2.0])
        with pytest.raises(RuntimeError, match="in-place"):
            x += 1.0
        with pytest.raises(RuntimeError, match="in-place"):
            x *= np.array([1.0, 2.0])

    def test_works_under_no_grad(self):
        x = leaf([1.0, 2.0])
        x_id = id(x)
        with tg.no_grad():
            x += 1.0
            x *= np.array([2.0, 3.0])
            x -= tg.tensor([1.0, 1.0])
            x /= 2.0
            x **= 2.0
        assert id(x) == x_id and x.is_leaf and x.requires_grad
        close(x, ((np.array([2.0, 3.0]) * [2.0, 3.0] - 1.0) / 2.0) ** 2)
        (x * x).sum().backward()
        close(x.grad, 2 * x.numpy())

    def test_sgd_step(self):
        def body():
            w = leaf([1.0, -2.0, 3.0])
            for _ in range(3):
                loss = (w * w).sum()
                loss.backward()
                with tg.no_grad():
                    w -= 0.1 * w.grad
                w.grad = None
            close(w, np.array([1.0, -2.0, 3.0]) * 0.8 ** 3)
        in_fresh_thread(body)

    @pytest.mark.parametrize("n", [3, 20])
    def test_sgd_step_while_another_graph_lives(self, n):
        def body():
            k = leaf([1.0, 2.0])
            keep = (k * k).sum()        # any live graph on this thread
            w0 = np.linspace(1.0, 2.0, n)
            w = leaf(w0)
            for _ in range(3):
                loss = (w * w).sum()
                loss.backward()
                with tg.no_grad():
                    w -= 0.1 * w.grad
                w.grad = None
            close(w, w0 * 0.8 ** 3)
            keep.backward()
        in_fresh_thread(body)

    def test_new_graph_sees_value_assigned_under_no_grad(self):
        def body():
            k = leaf([1.0, 2.0])
            keep = (k * k).sum()  # noqa: F841
            x = leaf([1.0, 2.0, 3.0])
            (x * x).sum().backward()
            x.grad = None
            with tg.no_grad():
                x[0] = 10.0
            (x * x).sum().backward()
            close(x.grad, [20.0, 4.0, 6.0])
        in_fresh_thread(body)

    def test_on_plain_tensor(self):
        t = tg.tensor([1.0, 2.0])
        t += 1.0
        t *= tg.tensor([2.0, 2.0])
        close(t, [4.0, 6.0])
        assert not t.requires_grad

    def test_shape_changing_update_raises(self):
        t = tg.tensor([1.0, 2.0])
        with pytest.raises(ValueError, match="shape"):
            t += np.ones((2, 2))
        close(t, [1.0, 2.0])

    def test_on_non_leaf_records_functionally(self):
        x = leaf([1.0, 2.0])
        y = x * 3.0
        z = y * y                  # uses the old y
        same = y
        y += x
        assert y is same and not y.is_leaf
        close(y, 4 * np.array([1.0, 2.0]))
        (z + y).sum().backward()
        close(x.grad, 18 * np.array([1.0, 2.0]) + 4.0)

    def test_int_tensor_updated_with_float(self):
        i = tg.tensor([1, 2])
        with pytest.raises((TypeError, RuntimeError)):
            i += 0.5
        assert np.array_equal(i.numpy(), [1, 2])


def _mul(x, W):
    return (x * x).sum()


def _sin(x, W):
    return tg.sin(x).sum()


def _pow(x, W):
    return (x ** 3).sum()


def _rdiv(x, W):
    return (1.0 / x).sum()


def _prod(x, W):
    return (x * 0.5).prod()


def _matmul(x, W):
    return (x @ W).sum()


def _ref(name, xv, Wv):
    """Gradients with respect to x and W at the old values."""
    return {
        "mul": (2 * xv, None), "sin": (np.cos(xv), None), "pow": (3 * xv ** 2, None),
        "rdiv": (-1 / xv ** 2, None),
        "prod": (np.prod(xv * 0.5) / xv, None),
        "matmul": (Wv.sum(axis=1), np.outer(xv, np.ones(Wv.shape[1]))),
    }[name]


COW_CASES = [
    pytest.param(name, n, dtype)
    for name in ["mul", "sin", "pow", "rdiv", "prod", "matmul"]
    for n, dtype in [(4, np.float64), (20, np.float64), (20, np.float32)]
]


@pytest.mark.parametrize("name, n, dtype", COW_CASES)
@pytest.mark.parametrize("update", ["imul", "isub", "setitem"])
def test_write_into_saved_value_raises_at_backward(name, n, dtype, update):
    """PyTorch's version-counter rule: the write reaches x (and every alias),
    the graph that saved the old value refuses to backward, leaving .grad
    alone, and a graph recorded after the write differentiates at the new
    value."""
    fn = {"mul": _mul, "sin": _sin, "pow": _pow, "rdiv": _rdiv, "prod": _prod,
          "matmul": _matmul}[name]
    xv = np.linspace(0.5, 1.5, n).astype(dtype)
    Wv = np.linspace(-1.0, 1.0, 2 * n).reshape(n, 2).astype(dtype)
    x = tg.tensor(xv, requires_grad=True)
    W = tg.tensor(Wv, requires_grad=True)
    y = fn(x, W)
    with tg.no_grad():
        if update == "imul":
            x *= 3.0
        elif update == "isub":
            x -= 1.0
        else:
            x[0] = 42.0
    new = {"imul": xv * dtype(3.0), "isub": xv - dtype(1.0),
           "setitem": np.concatenate([[42.0], xv[1:]]).astype(dtype)}[update]
    close(x, new)
    assert x.dtype == dtype
    if name == "prod":  # (x * 0.5).prod() saves x * 0.5, not x: PyTorch backpropagates
        y.backward()
        gx, gW = _ref(name, xv.astype(np.float64), Wv.astype(np.float64))
        tol = 1e-5 if dtype == np.float32 else 1e-12
        close(x.grad, gx, rtol=tol, atol=tol)
        return
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    assert x.grad is None and W.grad is None
    fn(x, W).backward()
    gx, gW = _ref(name, new.astype(np.float64), Wv.astype(np.float64))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    close(x.grad, gx, rtol=tol, atol=tol)
    if gW is not None:
        close(W.grad, gW, rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [3, 20])
def test_write_into_saved_constant_tensor_raises_at_backward(n):
    cv = np.arange(1.0, n + 1)
    c = tg.tensor(cv)
    x = leaf(np.ones(n))
    y = (x * c).sum()
    c += 10.0                 # c does not require grad: allowed in grad mode
    close(c, cv + 10.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()         # the graph saved c's old value (PyTorch's rule)
    assert x.grad is None
    (x * c).sum().backward()
    close(x.grad, cv + 10.0)


def test_small_ndarray_operand_of_matmul_is_saved():
    M = np.array([[1.0, 2.0], [3.0, 4.0]])
    v = leaf([1.0, 1.0])
    W = leaf(np.eye(2))
    y = (M @ v).sum() + (M @ W).sum()
    M[0, 0] = 100.0
    y.backward()
    close(v.grad, [4.0, 6.0])
    close(W.grad, [[4.0, 4.0], [6.0, 6.0]])


def test_non_contiguous_ndarray_operand_of_matmul_is_saved():
    B = np.arange(25.0).reshape(5, 5)
    expected = B.T.sum(axis=0).copy()
    v = leaf(np.ones(5))
    y = (B.T @ v).sum()
    try:
        B[:] = 0.0
    except ValueError:
        pass
    y.backward()
    close(v.grad, expected)


class TestItemAssignment:
    def test_on_leaf_requiring_grad_raises(self):
        x = leaf([1.0, 2.0, 3.0])
        with pytest.raises(RuntimeError, match="item assignment"):
            x[0] = 5.0
        assert np.array_equal(x.numpy(), [1.0, 2.0, 3.0])

    def test_on_non_leaf_is_a_functional_update(self):
        x = leaf([1.0, 2.0, 3.0])
        v = leaf(7.0)
        y = x * 2.0
        y[1:] = v * 0.5
        close(y, [2.0, 3.5, 3.5])
        assert y.grad_fn.name() == "WhereBackward"
        (y * np.array([1.0, 10.0, 100.0])).sum().backward()
        close(x.grad, [2.0, 0.0, 0.0])     # only the element not overwritten
        close(v.grad, 0.5 * 110.0)

    def test_fill_loop_differentiates(self):
        """The scientific-code pattern: fill an array in a loop."""
        x = leaf([0.5, 1.5])
        out = tg.tensor(np.zeros(4))
        for i in range(4):
            out[i] = x[0] ** i + x[1] * i
        out.sum().backward()
        close(x.grad, [sum(i * 0.5 ** (i - 1) for i in range(1, 4)), 6.0])

    def test_under_no_grad(self):
        x = leaf([1.0, 2.0, 3.0])
        with tg.no_grad():
            x[0] = 5.0
            x[np.array([False, True, False])] = -1.0
            x[2:] = tg.tensor([9.0])
        close(x, [5.0, -1.0, 9.0])
        assert x.requires_grad and x.is_leaf

    def test_on_plain_tensor(self):
        t = tg.tensor(np.zeros((2, 3)))
        t[1] = 4.0
        t[0, 2] = 1.0
        close(t, [[0.0, 0.0, 1.0], [4.0, 4.0, 4.0]])
