"""Functions with several outputs (tuples, lists, dicts, nested, as JAX's
pytrees) under tg.jvp, tg.vjp, tg.jacfwd and tg.jacobian: results in the
output's structure, checked against central differences and against the
same transform of each output alone."""
import collections

import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(7)
X = RNG.standard_normal(3)
Y = RNG.standard_normal((2, 3))
TX = RNG.standard_normal(3)
TY = RNG.standard_normal((2, 3))


def two(x, y):
    """Two outputs of different shapes (a vector and a number)."""
    return np.sin(x) * y, (x * np.exp(y)).sum()


def nested(x, y):
    """A tuple holding an array, a list and a dict."""
    return (x ** 2, [y * x, np.tanh(x)], {"b": y.sum(axis=0), "a": np.cos(x[0])})


Pair = collections.namedtuple("Pair", "first second")


def named(x, y):
    return Pair(x * 3.0, np.log1p(y ** 2))


def leaves_of(tree):
    """The arrays of a result tree in the order tapegrad lists them (dict
    keys sorted)."""
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in leaves_of(t)]
    if isinstance(tree, dict):
        return [a for k in sorted(tree) for a in leaves_of(tree[k])]
    return [np.asarray(tree)]


def same_structure(a, b):
    if isinstance(b, dict):
        return type(a) is type(b) and sorted(a) == sorted(b) and all(
            same_structure(a[k], b[k]) for k in b)
    if isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(
            same_structure(u, v) for u, v in zip(a, b))
    return not isinstance(a, (tuple, list, dict))


def central(f, primals, tangents, h=1e-5):
    """Each output's directional derivative along the tangents, by the
    central difference in float64."""
    hi = f(*[p + h * t for p, t in zip(primals, tangents)])
    lo = f(*[p - h * t for p, t in zip(primals, tangents)])
    return [(a - b) / (2 * h) for a, b in zip(leaves_of(hi), leaves_of(lo))]


@pytest.mark.parametrize("f", [two, nested, named])
def test_jvp_matches_central_differences_and_keeps_the_structure(f):
    out, t = tg.jvp(f, (X, Y), (TX, TY))
    expected = f(X, Y)
    assert same_structure(out, expected) and same_structure(t, expected)
    for a, b in zip(leaves_of(out), leaves_of(expected)):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)
    for a, b in zip(leaves_of(t), central(f, (X, Y), (TX, TY))):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("f", [two, nested, named])
def test_jvp_of_each_output_alone_is_the_same(f):
    _, t = tg.jvp(f, (X, Y), (TX, TY))
    n = len(leaves_of(f(X, Y)))
    for k, tk in enumerate(leaves_of(t)):
        _, alone = tg.jvp(lambda x, y: leaves_of_tensors(f(x, y))[k], (X, Y), (TX, TY))
        np.testing.assert_array_equal(tk, alone)
    assert k == n - 1


def leaves_of_tensors(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in leaves_of_tensors(t)]
    if isinstance(tree, dict):
        return [a for k in sorted(tree) for a in leaves_of_tensors(tree[k])]
    return [tree]


def test_jvp_batch_of_directions_with_a_tuple_output():
    T = np.stack([TX, -2 * TX, np.ones(3)])
    TYs = np.stack([TY, TY, np.zeros((2, 3))])
    _, (a, b) = tg.jvp(two, (X, Y), (T, TYs))
    assert a.shape == (3, 2, 3) and b.shape == (3,)
    for k in range(3):
        _, (ak, bk) = tg.jvp(two, (X, Y), (T[k], TYs[k]))
        np.testing.assert_allclose(a[k], ak, rtol=1e-15, atol=0)
        np.testing.assert_allclose(b[k], bk, rtol=1e-15, atol=0)


def test_jvp_tuple_with_an_input_a_constant_and_a_complex_output():
    def f(x):
        return x, np.ones(2), x * (1 + 2j), [np.float64(4.0)]
    (x, c, z, [k]), (tx, tc, tz, [tk]) = tg.jvp(f, (X,), (TX,))
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(tx, TX)
    np.testing.assert_array_equal(tc, np.zeros(2))
    np.testing.assert_allclose(tz, TX * (1 + 2j), rtol=1e-15)
    assert float(k) == 4.0 and float(tk) == 0.0


def test_arrays_beside_tensors_are_constants():
    # an output of an argument that is not differentiated is a plain array
    (a, b), (ta, tb) = tg.jvp(lambda x: (x * 2.0, np.ones(2)), (X,), (TX,))
    np.testing.assert_array_equal(tb, np.zeros(2))
    ja, jb = tg.jacobian(lambda x, y: (x * y, y ** 2), argnums=0)(X, X)
    np.testing.assert_array_equal(ja, np.diag(X))
    np.testing.assert_array_equal(jb, np.zeros((3, 3)))


def test_outputs_all_cut_off_the_graph_raise():
    with pytest.raises(TypeError, match=r"jvp: the function returned a ndarray as output 0 "
                                        r"computed from its inputs outside the graph"):
        tg.jvp(lambda x: ((x * 2.0).numpy(), (x * 3.0).numpy()), (X,), (TX,))


def test_constant_outputs_of_a_function_that_ignores_its_input():
    out, t = tg.jvp(lambda x: (np.ones(2), [3.0]), (X,), (TX,))
    np.testing.assert_array_equal(out[0], np.ones(2))
    np.testing.assert_array_equal(t[0], np.zeros(2))
    assert float(t[1][0]) == 0.0


def test_jvp_single_output_still_returns_a_bare_array():
    out, t = tg.jvp(lambda x: np.sin(x), (X,), (TX,))
    assert isinstance(out, np.ndarray) and isinstance(t, np.ndarray)
    np.testing.assert_allclose(t, np.cos(X) * TX, rtol=1e-14)


def test_jvp_a_one_element_tuple_stays_a_tuple():
    out, t = tg.jvp(lambda x: (2 * x,), (X,), (TX,))
    assert isinstance(out, tuple) and isinstance(t, tuple) and len(t) == 1
    np.testing.assert_allclose(t[0], 2 * TX, rtol=1e-15)


@pytest.mark.parametrize("f", [two, nested, named])
def test_vjp_is_the_sum_of_each_outputs_vjp(f):
    out, vjp_fn = tg.vjp(f, X, Y)
    assert same_structure(out, f(X, Y))
    cts = [RNG.standard_normal(a.shape) for a in leaves_of(out)]
    ct_tree = rebuild(out, iter(cts))
    gx, gy = vjp_fn(ct_tree)
    ex, ey = np.zeros(3), np.zeros((2, 3))
    for k, c in enumerate(cts):
        _, one = tg.vjp(lambda x, y: leaves_of_tensors(f(x, y))[k], X, Y)
        ax, ay = one(c)
        ex, ey = ex + ax, ey + ay
    np.testing.assert_allclose(gx, ex, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gy, ey, rtol=1e-13, atol=1e-15)
    # and against central differences: <c, J t> = <vjp(c), t>
    lhs = sum((c * d).sum() for c, d in zip(cts, central(f, (X, Y), (TX, TY))))
    np.testing.assert_allclose((gx * TX).sum() + (gy * TY).sum(), lhs, rtol=1e-7)


def rebuild(like, it):
    if isinstance(like, dict):
        return {k: rebuild(like[k], it) for k in sorted(like)}
    if isinstance(like, tuple) and hasattr(like, "_fields"):
        return type(like)(*[rebuild(v, it) for v in like])
    if isinstance(like, (tuple, list)):
        return type(like)(rebuild(v, it) for v in like)
    return next(it)


def test_vjp_a_batch_of_tuple_cotangents():
    _, vjp_fn = tg.vjp(two, X, Y)
    C0 = RNG.standard_normal((4, 2, 3))
    C1 = RNG.standard_normal(4)
    gx, gy = vjp_fn((C0, C1))
    assert gx.shape == (4, 3) and gy.shape == (4, 2, 3)
    for k in range(4):
        ax, ay = vjp_fn((C0[k], C1[k]))
        np.testing.assert_allclose(gx[k], ax, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(gy[k], ay, rtol=1e-14, atol=1e-15)


def test_vjp_accepts_a_list_for_a_tuple():
    _, vjp_fn = tg.vjp(two, X, Y)
    c = (np.ones((2, 3)), 2.0)
    np.testing.assert_array_equal(vjp_fn(list(c))[0], vjp_fn(c)[0])


@pytest.mark.parametrize("bad, shown", [
    (np.ones((2, 3)), "got one ndarray"),
    ((np.ones((2, 3)),), r"got \(\*,\)"),
    ((np.ones((2, 3)), 1.0, 1.0), r"got \(\*, \*, \*\)"),
])
def test_vjp_cotangent_of_the_wrong_structure(bad, shown):
    _, vjp_fn = tg.vjp(two, X, Y)
    with pytest.raises(TypeError, match=r"vjp: the cotangent must have the structure of the "
                                        r"function's output, \(\*, \*\) \(one array per \*\); "
                                        + shown):
        vjp_fn(bad)


def test_vjp_nested_cotangent_of_the_wrong_structure_names_both():
    _, vjp_fn = tg.vjp(nested, X, Y)
    bad = (np.ones(3), [np.ones((2, 3)), np.ones(3)], {"a": 1.0, "c": np.ones(3)})
    with pytest.raises(TypeError, match=r"output, \(\*, \[\*, \*\], \{'a': \*, 'b': \*\}\) "
                                        r".*got \(\*, \[\*, \*\], \{'a': \*, 'c': \*\}\)"):
        vjp_fn(bad)


def test_vjp_cotangent_of_the_wrong_shape_names_the_output():
    _, vjp_fn = tg.vjp(two, X, Y)
    with pytest.raises(ValueError, match=r"the cotangent 1 has shape \(2, 2\); it must have "
                                         r"the output 1's shape \(\)"):
        vjp_fn((np.ones((2, 3)), np.ones((2, 2))))


def test_vjp_mixed_batch_and_single_cotangents_raise():
    _, vjp_fn = tg.vjp(two, X, Y)
    with pytest.raises(ValueError, match="every cotangent has its output's shape, or every "
                                         r"one has a batch axis .* got shapes "
                                         r"\[\(5, 2, 3\), \(\)\] for outputs of "
                                         r"shapes \[\(2, 3\), \(\)\]"):
        vjp_fn((np.ones((5, 2, 3)), 1.0))


def jac_by_differences(f, x, y, argnum, h=1e-5):
    """Per output, the Jacobian with respect to argument ``argnum`` by central
    differences."""
    p = [x, y][argnum]
    cols = []
    for j in range(p.size):
        e = np.zeros(p.size)
        e[j] = 1.0
        ts = [np.zeros_like(x), np.zeros_like(y)]
        ts[argnum] = e.reshape(p.shape)
        cols.append(central(f, (x, y), ts, h))
    return [np.stack([c[k] for c in cols], axis=-1).reshape(np.shape(cols[0][k]) + p.shape)
            for k in range(len(cols[0]))]


@pytest.mark.parametrize("transform", [tg.jacfwd, tg.jacobian,
                                       lambda f, argnums: tg.jacobian(f, argnums,
                                                                      mode="reverse"),
                                       lambda f, argnums: tg.jacobian(f, argnums,
                                                                      mode="forward")])
@pytest.mark.parametrize("f", [two, nested, named])
def test_jacobians_of_several_outputs(transform, f):
    both = transform(f, argnums=(0, 1))(X, Y)
    only_y = transform(f, argnums=1)(X, Y)
    expected = f(X, Y)
    # the output's structure outside, the arguments' inside (as JAX)
    assert same_structure(only_y, expected)
    flat = per_output(both, expected)  # per output a pair
    assert all(isinstance(p, tuple) and len(p) == 2 for p in flat)
    dx, dy = jac_by_differences(f, X, Y, 0), jac_by_differences(f, X, Y, 1)
    for (jx, jy), ex, ey, alone in zip(flat, dx, dy, leaves_of(only_y)):
        np.testing.assert_allclose(jx, ex, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(jy, ey, rtol=1e-7, atol=1e-8)
        np.testing.assert_array_equal(alone, jy)


def per_output(result, like):
    """The leaves of ``result`` where ``like`` (the output) has its leaves:
    a transform's per output results, which may themselves be tuples."""
    if isinstance(like, dict):
        return [a for k in sorted(like) for a in per_output(result[k], like[k])]
    if isinstance(like, (tuple, list)):
        return [a for r, v in zip(result, like) for a in per_output(r, v)]
    return [result]


def test_jacobian_of_each_output_alone_is_the_same():
    for transform in (tg.jacfwd, tg.jacobian):
        a, b = transform(two)(X, Y)
        np.testing.assert_allclose(a, transform(lambda x, y: two(x, y)[0])(X, Y), rtol=1e-15)
        np.testing.assert_allclose(b, transform(lambda x, y: two(x, y)[1])(X, Y), rtol=1e-15)


def test_reverse_jacobian_in_chunks_across_outputs(monkeypatch):
    from tapegrad.transforms import functional
    whole = tg.jacobian(nested, argnums=(0, 1), mode="reverse")(X, Y)
    monkeypatch.setattr(functional, "JACOBIAN_BYTES", 1)  # one row per sweep
    rows = tg.jacobian(nested, argnums=(0, 1), mode="reverse")(X, Y)
    like = nested(X, Y)
    for a, b in zip(per_output(whole, like), per_output(rows, like)):
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=1e-15, atol=0)


def test_jacobian_output_that_does_not_depend_on_the_input():
    a, b, c = tg.jacobian(lambda x, y: (x * 2.0, tg.tensor(np.ones(2)), y.sum()),
                          argnums=0)(X, Y)
    np.testing.assert_array_equal(a, 2.0 * np.eye(3))
    np.testing.assert_array_equal(b, np.zeros((2, 3)))
    np.testing.assert_array_equal(c, np.zeros(3))


def test_grad_of_a_tuple_says_it_takes_one_output():
    with pytest.raises(TypeError, match="grad: the function returned a tuple of outputs, and "
                                        "value_and_grad takes a function with one output"):
        tg.grad(lambda x: (x.sum(), x.sum()))(X)


def test_traced_function_with_tuple_output_agrees():
    ft = tg.trace(lambda x: (np.sin(x), (x * x).sum()), X)
    J = ft.jacobian(X)
    for mode in ("auto", "reverse"):  # a traced call has no forward rule
        got = tg.jacobian(ft, mode=mode)(X)
        for a, b in zip(got, J):
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)
    out, vjp_fn = tg.vjp(ft, X)
    _, expected = ft.vjp(X, (TX, 2.0))
    np.testing.assert_allclose(vjp_fn((TX, 2.0))[0], expected, rtol=1e-14)
    _, t = tg.jvp(ft, (X,), (TX,))
    _, t2 = ft.jvp(X, TX)
    for a, b in zip(t, t2):
        np.testing.assert_allclose(a, b, rtol=1e-14)
