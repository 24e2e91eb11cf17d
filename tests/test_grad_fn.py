"""The public API: ``grad_fn`` / ``next_functions`` and ``no_grad``."""

import numpy as np
import pytest

import tapegrad as tg

from oracle import close, leaf


# -- grad_fn -------------------------------------------------------------------------------
class TestGradFn:
    def test_leaf_has_none(self):
        assert leaf([1.0]).grad_fn is None
        assert tg.tensor([1.0]).grad_fn is None

    @pytest.mark.parametrize("expr, name", [
        (lambda a, b: a + b, "AddBackward"),
        (lambda a, b: a * b, "MulBackward"),
        (lambda a, b: a - b, "SubBackward"),
        (lambda a, b: a / b, "DivBackward"),
        (lambda a, b: tg.exp(a), "ExpBackward"),
        (lambda a, b: a.sum(), "SumBackward"),
        (lambda a, b: tg.unbind(a)[0], "UnbindBackward"),
    ])
    def test_names(self, expr, name):
        a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
        y = expr(a, b)
        assert y.grad_fn.name() == name

    def test_next_functions_leaves_and_constants(self):
        a = leaf([1.0, 2.0])
        c = tg.tensor([3.0, 4.0])
        y = a * c
        nf = y.grad_fn.next_functions
        assert isinstance(nf, tuple) and len(nf) == 2
        (n0, s0), (n1, s1) = nf
        assert isinstance(n0, tg.AccumulateGrad)
        assert n0.name() == "AccumulateGrad"
        assert n0.variable is a
        assert s0 == 0
        assert (n1, s1) == (None, 0)
        z = np.array([1.0, 1.0]) + a
        (m0, _), (m1, _) = z.grad_fn.next_functions
        assert m0 is None and m1.variable is a

    def test_next_functions_chain(self):
        a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
        p = a * b
        s = p + a
        (n0, s0), (n1, s1) = s.grad_fn.next_functions
        assert n0 == p.grad_fn and hash(n0) == hash(p.grad_fn)
        assert n0.name() == "MulBackward" and s0 == 0
        assert n1.variable is a
        (q0, _), (q1, _) = n0.next_functions
        assert q0.variable is a and q1.variable is b

    def test_nodes_equal_from_any_tensor(self):
        a = leaf([1.0, 2.0])
        y = a * 2.0
        assert y.grad_fn == y.grad_fn
        assert hash(y.grad_fn) == hash(y.grad_fn)
        z = y + 1.0
        w = y * 3.0
        nz = z.grad_fn.next_functions[0][0]
        nw = w.grad_fn.next_functions[0][0]
        assert nz == nw == y.grad_fn
        assert len({nz, nw, y.grad_fn}) == 1
        assert z.grad_fn != w.grad_fn
        assert len({z.grad_fn, w.grad_fn}) == 2

    def test_accumulate_grad_equality(self):
        a, b = leaf([1.0]), leaf([2.0])
        y = a * b + a
        n_a1 = y.grad_fn.next_functions[0][0].next_functions[0][0]
        n_a2 = y.grad_fn.next_functions[1][0]
        n_b = y.grad_fn.next_functions[0][0].next_functions[1][0]
        assert n_a1.variable is a and n_a2.variable is a
        assert n_a1 == n_a2 and hash(n_a1) == hash(n_a2)
        assert n_a1 != n_b

    def test_unbind_multi_output(self):
        x = leaf([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        u0, u1, u2 = tg.unbind(x)
        s = u0 + u2
        (n0, slot0), (n1, slot1) = s.grad_fn.next_functions
        assert n0.name() == n1.name() == "UnbindBackward"
        assert (slot0, slot1) == (0, 2)
        assert n0 == n1 == u0.grad_fn == u1.grad_fn == u2.grad_fn
        assert len({n0, n1, u1.grad_fn}) == 1
        ((src, _),) = n0.next_functions
        assert src.variable is x

    def test_grad_fn_of_docstring_example(self):
        a, b = tg.unbind(tg.tensor([1.0, 2.0], requires_grad=True))
        assert (a + b).grad_fn.next_functions[1][1] == 1


# -- no_grad -------------------------------------------------------------------------------
class TestNoGrad:
    def test_context_manager(self):
        x = leaf([1.0, 2.0])
        assert tg.is_grad_enabled()
        with tg.no_grad():
            assert not tg.is_grad_enabled()
            y = x * 2.0 + tg.exp(x)
        assert tg.is_grad_enabled()
        assert not y.requires_grad and y.is_leaf and y.grad_fn is None
        close(y, 2 * np.array([1.0, 2.0]) + np.exp([1.0, 2.0]))

    def test_nested_and_restored_after_exception(self):
        with pytest.raises(ZeroDivisionError):
            with tg.no_grad():
                with tg.no_grad():
                    pass
                assert not tg.is_grad_enabled()
                1 / 0
        assert tg.is_grad_enabled()
        x = leaf([1.0])
        assert (x * 2.0).requires_grad

    def test_decorator(self):
        @tg.no_grad()
        def f(t):
            """doc"""
            assert not tg.is_grad_enabled()
            return t * t

        x = leaf([3.0])
        y = f(x)
        assert not y.requires_grad
        assert f.__name__ == "f" and f.__doc__ == "doc"
        assert tg.is_grad_enabled()
        assert f(x).numpy()[0] == 9.0   # reusable
        assert (x * x).requires_grad

    def test_graph_recorded_before_is_unaffected(self):
        x = leaf([1.0, 2.0])
        y = x * x
        with tg.no_grad():
            z = y * 3.0
        assert not z.requires_grad
        y.sum().backward()
        close(x.grad, [2.0, 4.0])

    def test_grad_mode_inside_function_used_in_graph(self):
        x = leaf([2.0])
        with tg.no_grad():
            scale = x * 10.0
        y = x * scale   # scale is a constant
        y.backward([1.0])
        close(x.grad, [20.0])
