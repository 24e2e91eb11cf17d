"""``create_graph=True`` to any order: third and fourth derivatives against
central differences (float64) of the exact second derivative (``tg.hessian``),
non-leaf inputs, mixed derivatives, and PyTorch where it is installed; ops
without a differentiable backward formula raise naming the op."""
import numpy as np
import pytest

import tapegrad as tg

RNG = np.random.default_rng(7)


def _flat_f(f, shapes):
    sizes = [int(np.prod(s)) for s in shapes]

    def F(z):
        parts, o = [], 0
        for s, n in zip(shapes, sizes):
            parts.append(z[o:o + n].reshape(s))
            o += n
        out = f(*parts)
        w = np.linspace(0.5, 1.5, int(np.size(out.numpy() if isinstance(out, tg.Tensor) else out)))
        flat = out.reshape(-1)
        return (flat * w).sum() + (flat * flat * flat * w).sum() / 3.0
    return F


def _third(F, z, v, w):
    """grad_z (w . H(z) v) by three create_graph steps."""
    x = tg.tensor(z, requires_grad=True)
    (g,) = tg.autograd.grad(F(x), x, create_graph=True)
    (h,) = tg.autograd.grad((g * v).sum(), x, create_graph=True)
    (t,) = tg.autograd.grad((h * w).sum(), x)
    return t.numpy()


def _fd_of_hessian(F, z, v, w, eps=1e-5):
    H = tg.hessian(F)
    out = np.zeros_like(z)
    for i in range(z.size):
        e = np.zeros_like(z)
        e[i] = eps
        out[i] = (w @ H(z + e) @ v - w @ H(z - e) @ v) / (2 * eps)
    return out


def _pos(s):
    return RNG.uniform(0.5, 1.5, s)


def _any(s):
    return RNG.uniform(-1.5, 1.5, s)


def _spd(s):
    b = RNG.uniform(-1, 1, s)
    return b @ b.T + s[0] * np.eye(s[0])


CASES = {
    "Exp/Sin/Mul": ([(3,), (3,)], [_any, _any], lambda a, b: tg.exp(a * 0.5) * tg.sin(b) * a),
    "Log/Sqrt/Div": ([(2, 2), (2,)], [_pos, _pos], lambda a, b: tg.log(a) / tg.sqrt(b) + a / b),
    "Tanh/Atan/Pow": ([(3,), (1,)], [_pos, _pos], lambda a, b: tg.tanh(a) + tg.arctan(a) * a ** b),
    "PowScalar/Rdiv/Rpow": ([(3,)], [_pos], lambda a: a ** 2.5 + 2.0 / a + 2.0 ** a),
    "Erf/Erfinv/Gammaln": ([(3,)], [lambda s: RNG.uniform(0.2, 0.7, s)],
                           lambda a: tg.erf(a) + tg.erfinv(a) + tg.gammaln(a + 1.0)),
    "LogNdtr/I0e/Log1p": ([(3,)], [_pos], lambda a: tg.log_ndtr(a) + tg.i0e(a) + tg.log1p(a)),
    "Hypot/Atan2/Logaddexp": ([(2, 3), (3,)], [_pos, _pos],
                              lambda a, b: np.hypot(a, b) + np.arctan2(a, b) + np.logaddexp(a, b)),
    "Maximum/Where/Abs": ([(4,), (4,)], [lambda s: np.array([0.3, -0.8, 1.2, 0.5]),
                                         lambda s: np.array([0.1, 0.4, -0.6, 0.9])],
                          lambda a, b: np.maximum(a, b) ** 3 + tg.where(a.numpy() > 0, a * b, b)
                          + abs(a) ** 3),
    "Sum/Mean/Prod": ([(2, 3)], [_pos], lambda a: a.sum(axis=0) ** 2 + np.mean(a, axis=1).sum()
                      * tg.prod(a, axis=0)),
    "Max/Logsumexp": ([(2, 3)], [lambda s: np.array([[0.1, 0.9, -0.4], [0.6, -1.1, 0.3]])],
                      lambda a: a.max(axis=1) * tg.logsumexp(a, axis=0).sum()),
    "Softmax/LogSoftmax": ([(2, 3)], [_any], lambda a: tg.softmax(a, axis=1) * tg.log_softmax(a, axis=0)),
    "Mm": ([(2, 3), (3, 2)], [_any, _any], lambda a, b: tg.tanh(a @ b) @ b.T),
    "Mm vector/batched": ([(2, 2, 3), (3,)], [_any, _any], lambda a, b: tg.sin(a @ b) * (b @ b)),
    "Index/Take/Flip": ([(3, 4)], [_any], lambda a: a[1:, ::2] * a[0, :2] + tg.take(a, [0, 0, 5])[:2]
                        + tg.flip(a, 0)[0, :2] * a[2, 1:3]),
    "Reshape/Transpose/Expand": ([(2, 3)], [_any], lambda a: tg.sin(a.reshape(3, 2)) @ a
                                 + tg.broadcast_to(a.T, (2, 3, 2)).sum(axis=0) @ a),
    "Cat/Stack/Split/Unbind": ([(2, 3), (2, 3)], [_any, _any],
                               lambda a, b: tg.concatenate([a, b * a], axis=1).sum(axis=0)
                               + np.stack([a, b]).prod(axis=0).reshape(-1)
                               + tg.concatenate(np.split(a * b, [1], axis=1), axis=1).reshape(-1)
                               + sum(tg.unbind(tg.cos(a), 0)).sum()),
    "Cumsum/Cumprod": ([(2, 3)], [_pos], lambda a: tg.cumsum(a * a, axis=1) * tg.cumprod(a, axis=0)),
    "Einsum": ([(2, 3), (3, 2)], [_any, _any], lambda a, b: tg.einsum("ij,jk->ik", tg.sin(a), b * b)),
    "Inv/Det/Solve/Slogdet": ([(3, 3), (3,)], [_spd, _any],
                              lambda A, b: tg.linalg.inv(A).sum(axis=0) * tg.linalg.det(A)
                              + tg.linalg.solve(A, b * b) + tg.linalg.slogdet(A)[1]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_third_order_matches_central_differences_of_the_hessian(name):
    shapes, doms, f = CASES[name]
    F = _flat_f(f, shapes)
    z = np.concatenate([d(s).reshape(-1) for s, d in zip(shapes, doms)])
    v, w = RNG.uniform(-1, 1, z.size), RNG.uniform(-1, 1, z.size)
    got = _third(F, z, v, w)
    want = _fd_of_hessian(F, z, v, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * (1 + np.abs(want).max()))


@pytest.mark.parametrize("name", ["Exp/Sin/Mul", "Mm", "Softmax/LogSoftmax", "Index/Take/Flip"])
def test_fourth_order_matches_second_differences_of_the_hessian(name):
    shapes, doms, f = CASES[name]
    F = _flat_f(f, shapes)
    z = np.concatenate([d(s).reshape(-1) for s, d in zip(shapes, doms)])
    v, w, u = (RNG.uniform(-1, 1, z.size) for _ in range(3))
    x = tg.tensor(z, requires_grad=True)
    (g,) = tg.autograd.grad(F(x), x, create_graph=True)
    (h,) = tg.autograd.grad((g * v).sum(), x, create_graph=True)
    (t,) = tg.autograd.grad((h * w).sum(), x, create_graph=True)
    (q,) = tg.autograd.grad((t * u).sum(), x)
    H, e = tg.hessian(F), 1e-3
    q_fd = (w @ H(z + e * u) @ v - 2 * w @ H(z) @ v + w @ H(z - e * u) @ v) / e ** 2
    np.testing.assert_allclose(q.numpy() @ u, q_fd, rtol=1e-4, atol=1e-6)


def test_non_leaf_inputs_and_mixed_derivatives():
    x = tg.tensor([0.3, 0.9, 1.4], requires_grad=True)
    w = tg.tensor([0.5, -1.0, 2.0], requires_grad=True)
    h = tg.sin(x) * w
    (gh,) = tg.autograd.grad((h ** 3).sum(), h, create_graph=True)   # 3 h^2
    np.testing.assert_allclose(gh.numpy(), 3 * h.numpy() ** 2)
    (gx, gw) = tg.autograd.grad(gh.sum(), [x, w])                   # 6 h dh
    hv = h.numpy()
    np.testing.assert_allclose(gx.numpy(), 6 * hv * np.cos(x.numpy()) * w.numpy())
    np.testing.assert_allclose(gw.numpy(), 6 * hv * np.sin(x.numpy()))


def test_backward_create_graph_third_order_accumulates():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (x ** 5).sum().backward(create_graph=True)          # x.grad = 5 x^4, a graph tensor
    g1 = x.grad
    x.grad = None
    g1.sum().backward(create_graph=True)                 # 20 x^3
    g2 = x.grad
    x.grad = None
    g2.sum().backward()                                  # 60 x^2
    np.testing.assert_allclose(x.grad.numpy(), [60.0, 240.0])


def test_a_gradient_linear_in_the_input_carries_no_graph():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    (g,) = tg.autograd.grad((x * 3.0).sum(), x, create_graph=True)
    assert not g.requires_grad                           # as PyTorch's
    with pytest.raises(RuntimeError, match="does not require grad"):
        g.sum().backward()


_CUBE = []


def _opaque_cube_derivative(x, y):
    return 3.0 * x.real * x    # an attribute: Numba compiles it, tapegrad cannot derive it


def _cube():
    """x^3 as a tg.elementwise op (made once, on first use) whose derivative
    cannot be derived and no second derivative: no differentiable backward
    formula for create_graph."""
    if not _CUBE:
        _CUBE.append(tg.elementwise(lambda x: x * x * x, derivative=_opaque_cube_derivative,
                                    name="cube"))
    return _CUBE[0]


def test_ops_without_a_formula_name_the_op():
    x = tg.tensor([0.4, 1.3], requires_grad=True)
    h = x * 1.0
    with pytest.raises(NotImplementedError, match="not a leaf.*cube .a tg.elementwise op"):
        tg.autograd.grad(_cube()(h).sum(), h, create_graph=True)
    # nothing half-done: the graph still differentiates
    (g1,) = tg.autograd.grad(_cube()(h).sum(), x)
    np.testing.assert_allclose(g1.numpy(), 3 * x.numpy() ** 2)


# -- against PyTorch ------------------------------------------------------------------
def _both(fn):
    torch = pytest.importorskip("torch")
    return fn(tg, lambda a: tg.tensor(a, requires_grad=True), lambda t: t.numpy()), \
        fn(torch, lambda a: torch.tensor(a, dtype=torch.float64, requires_grad=True),
           lambda t: t.detach().numpy())


def test_gradient_penalty_matches_torch():
    X, W1 = RNG.uniform(-1, 1, (4, 3)), RNG.uniform(-1, 1, (3, 5))

    def run(m, leaf, npy):
        x, w = leaf(X), leaf(W1)
        y = m.tanh(x @ w).sum()
        (g,) = m.autograd.grad(y, x, create_graph=True)
        pen = ((g * g).sum(1) - 1.0) ** 2
        pen.sum().backward()
        return npy(w.grad), npy(x.grad)
    (a, b), (c, d) = _both(run)
    np.testing.assert_allclose(a, c, rtol=1e-10)
    np.testing.assert_allclose(b, d, rtol=1e-10)


def test_maml_two_level_inner_loop_matches_torch():
    X, Y = RNG.uniform(-1, 1, (5, 3)), RNG.uniform(-1, 1, (5,))
    W0 = RNG.uniform(-1, 1, (3,))

    def run(m, leaf, npy):
        w = leaf(W0)

        def loss(p):
            return ((m.tanh(m.tensor(X) @ p) - m.tensor(Y)) ** 2).mean()
        p = w
        for _ in range(2):     # two inner steps, each differentiable
            (g,) = m.autograd.grad(loss(p), p, create_graph=True)
            p = p - 0.3 * g
        (gw,) = m.autograd.grad(loss(p), w, create_graph=True)
        (gg,) = m.autograd.grad((gw * gw).sum(), w)   # a third-order quantity
        return npy(gw), npy(gg)
    (a, b), (c, d) = _both(run)
    np.testing.assert_allclose(a, c, rtol=1e-10)
    np.testing.assert_allclose(b, d, rtol=1e-9)


def test_third_order_and_non_leaf_inputs_match_torch():
    Z = np.array([0.2, -0.7, 1.1])

    def run(m, leaf, npy):
        x = leaf(Z)
        h = m.exp(x) * x
        y = (m.sin(h) * h.sum()).sum()
        (g,) = m.autograd.grad(y, h, create_graph=True)
        (g2,) = m.autograd.grad((g * g).sum(), x, create_graph=True)
        (g3,) = m.autograd.grad(g2.sum(), [x], retain_graph=True)
        (gh,) = m.autograd.grad(g2.sum(), h)
        return npy(g), npy(g2), npy(g3), npy(gh)
    got, want = _both(run)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_a_seed_that_requires_grad_gets_its_gradient():
    # grad_outputs=[v] with v in a graph: the gradient is linear in v, and a
    # later backward reaches v (PyTorch: v.grad = d/dv sum(2 x v) = 2 x)
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    v = tg.tensor([1.0, 1.0], requires_grad=True)
    (g,) = tg.autograd.grad([x * x], [x], [v], create_graph=True)
    g.sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])
    # backward(gradient=v, create_graph=True) as well: x.grad = 2 x v
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    v = tg.tensor([1.0, 3.0], requires_grad=True)
    (x * x).backward(v, create_graph=True)
    (x.grad * x.grad).sum().backward()   # d/dv sum(4 x^2 v^2) = 8 x^2 v
    np.testing.assert_allclose(v.grad.numpy(), [8.0, 96.0])
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 156.0])  # 2 x v + 8 x v^2
    x.grad = None


def test_a_freed_graph_over_the_same_leaf_is_not_visited():
    # the second-order pass seeds x's tangent: a record of an earlier graph
    # that reads x, freed by its backward, leads to no root and must be
    # skipped (it was visited, and its freed host record raised ValueError)
    import math

    def fwd(v):
        return max(v, 0.0) + math.log1p(math.exp(-abs(v)))

    def d1(v, y):
        return 1.0 / (1.0 + math.exp(-v))

    def d2(v, y):
        s = 1.0 / (1.0 + math.exp(-v))
        return s * (1.0 - s)

    softplus = tg.elementwise(fwd, d1, second_derivative=d2)
    x = tg.tensor([0.0, 1.0], requires_grad=True)
    (g,) = tg.autograd.grad((softplus(x) * x).sum(), x, create_graph=True)
    (g * g).sum().backward()
    (g,) = tg.autograd.grad(softplus(x).sum(), x, create_graph=True)
    (h,) = tg.autograd.grad(g.sum(), x)
    s = 1.0 / (1.0 + np.exp(-np.array([0.0, 1.0])))
    np.testing.assert_allclose(h.numpy(), s * (1.0 - s), rtol=1e-12)
    # and forward mode over the same tape
    _, t = tg.jvp(lambda v: (softplus(v) * v).sum(), (np.array([0.0, 1.0]),),
                  (np.array([1.0, 0.0]),))
    # d/dv0 of softplus(v0) v0 at 0: sigma(0) * 0 + softplus(0) = log 2
    np.testing.assert_allclose(t, np.log(2.0), rtol=1e-12)


@pytest.mark.parametrize("spec", ["ii,ij->j", "ijk,lji,lli->lki", "iij->ij"])
def test_einsum_with_a_repeated_index_to_second_order(spec):
    # an index repeated within one operand reads its diagonal: the gradient
    # recorded under create_graph lays it back on the diagonal, and is
    # differentiated again (checked against differences of the gradient)
    rng = np.random.default_rng(3)
    sizes = {c: 3 for c in "ijkl"}
    ins = spec.split("->")[0].split(",")
    vals = [rng.normal(size=tuple(sizes[c] for c in s)) for s in ins]

    def f(*ts):
        return (tg.einsum(spec, *ts) ** 2).sum()

    def grad0(v0):
        x = tg.tensor(v0, requires_grad=True)
        rest = [tg.tensor(v) for v in vals[1:]]
        (g,) = tg.autograd.grad(f(x, *rest), x, create_graph=True)
        return x, g

    x, g = grad0(vals[0])
    w = rng.normal(size=g.shape)
    (hv,) = tg.autograd.grad((g * w).sum(), x)
    h, d = 1e-6, rng.normal(size=vals[0].shape)
    gp = grad0(vals[0] + h * d)[1].detach().numpy()
    gm = grad0(vals[0] - h * d)[1].detach().numpy()
    np.testing.assert_allclose((hv.numpy() * d).sum(), (((gp - gm) / (2 * h)) * w).sum(),
                               rtol=1e-6, atol=1e-8)
