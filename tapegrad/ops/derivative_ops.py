"""The derivatives of a ``tg.elementwise`` op as ``tg.elementwise`` ops, to any order.

``create_graph=True`` records the VJP of a user op ``y = f(x)`` as
``u * D(x)``, where ``D = op.derivative_op(0)`` is the user op ``x ->
dy/dx``; a binary op ``y = f(a, b)`` records ``u * Da(a, b)`` and
``u * Db(a, b)``.  ``D`` is an ordinary user op, so the compiled sweep,
``tg.hessian`` and a further ``create_graph=True`` go through it as through
any other, and its own derivative op is built the same way: every order
follows, each op built on first need.

What each op computes is one *spec*: a derivative function -- the user's,
or one ops/derive.py generated -- called as ``fn(x.., y)[pick]`` with
``y = f(x..)`` the first op's value (``fn(x..)`` where it takes no y;
``pick`` the entry of the tuple a binary op's derivatives return, None for
a scalar).  The derivative op of an op whose value is spec ``v`` has value
the ``i``-th entry of ``v``'s gradient, and its derivatives are

* the next given function: the first op's ``second_derivative`` gives the
  derivative of its derivative op (for a binary op, the row of the triple
  ``(d2y/da2, d2y/dadb, d2y/db2)``);
* else derived from ``v``'s source by ``derive(fn, nin, f, pick)``, which
  differentiates ``x.. -> fn(x.., f(x..))[pick]``: the gradient and the
  Hessian of the spec, one order and two orders up.  Generated code is read
  again the same way (its ``_tg_`` locals renamed), so derived orders go on.

Where the source cannot be differentiated, building the op raises
:class:`DerivativeError`, naming the first op, the order and the construct;
``create_graph`` then falls back to its one second-order node, whose own
further order raises with that message.

The ops compute in float64 only (the ``create_graph`` walk's values are
float64), are named after the first op (``softplus_dx``, ``softplus_dxx``;
``pow_da``, ``pow_dab``) and live as long as it does.
"""
import threading

from .custom import ElementwiseOp, _arity, numba
from .derive import derive, ready
from .derive_reader import GENERATED, DeriveError

_lock = threading.RLock()
_jitted = {}     # id(python function) -> (function, its Numba dispatcher)

_ORDINAL = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth"}


def _ordinal(k):
    return _ORDINAL.get(k, f"{k}th")


class DerivativeError(DeriveError):
    """A derivative of a ``tg.elementwise`` op of some order cannot be derived."""


def derivative_op(op, i):
    """``op``'s derivative op in input ``i`` (built once, then cached; a
    failure is cached too, as its message -- a kept exception's traceback
    would hold the frames, and the graphs, it passed through -- and raised
    again)."""
    with _lock:
        dops = op.__dict__.setdefault("_dops", {})
        got = dops.get(i)
        if got is None:
            try:
                got = _build(op, i)
            except DerivativeError as e:
                got = str(e)
            dops[i] = got
    if isinstance(got, str):
        raise DerivativeError(got)
    return got


# -- the tower -------------------------------------------------------------------------------
def _tower(op):
    """``(first op, path, value spec, gradient specs, Hessian specs or None)``
    of ``op``; a spec is ``(fn, pick)``."""
    t = op.__dict__.get("_tower")
    if t is not None:
        return t
    n = op.nin
    D, S = op.derivative, op.second_derivative
    grad = [(D, None)] if n == 1 else [(D, 0), (D, 1)]
    hess = None if S is None else ([(S, None)] if n == 1 else [(S, 0), (S, 1), (S, 2)])
    t = op._tower = (op, (), (op.forward, None), grad, hess)
    return t


def _build(op, i):
    root, path, _value, grad, hess = _tower(op)
    n, f = root.nin, root.forward
    if not 0 <= i < n:
        raise IndexError(f"{op.name} has {n} input{'s' if n > 1 else ''}; no input {i}")
    v = grad[i]
    order = len(path) + 1          # the op's value is the order-th derivative
    second_error = None
    if hess is not None:           # given: the Hessian's row i
        dgrad = [hess[0]] if n == 1 else [hess[i], hess[i + 1]]
        try:
            _, h = derive(v[0], n, f, v[1])
        except DeriveError as e:
            h, second_error = None, _message(root, order + 2, v, e)
    else:
        try:
            g, h = derive(v[0], n, f, v[1])
        except DeriveError as e:
            raise DerivativeError(_message(root, order + 1, v, e)) from None
        dgrad = [(g, None)] if n == 1 else [(g, 0), (g, 1)]
    dhess = None if h is None else ([(h, None)] if n == 1 else [(h, 0), (h, 1), (h, 2)])
    names = _params(root)
    name = f"{root.name}_d" + "".join(names[k] for k in path + (i,))
    new = ElementwiseOp(_function(root, [v], "value", name),
                        _function(root, dgrad, "derivative", name), name,
                        None if dhess is None else _function(root, dhess, "second", name))
    new.float64_only = True
    new.second_error = second_error
    new._tower = (root, path + (i,), v, dgrad, dhess)
    return new


def _params(root):
    import inspect
    names = list(inspect.signature(root.forward).parameters)
    if len(set(names)) != len(names) or any(len(nm) > 8 for nm in names):
        names = ["a", "b"][:root.nin] if root.nin == 2 else ["x"]
    return names


def _message(root, order, spec, e):
    fn = spec[0]
    what = ("derived code" if fn.__code__.co_filename.startswith(GENERATED)
            else f"{fn.__qualname__}")
    why = str(e).split(". Write the derivative by hand")[0]
    return (f"tapegrad.elementwise: the {_ordinal(order)} derivative of the op {root.name} "
            f"cannot be derived (from {what}, its {_ordinal(order - 1)} derivative): {why}. "
            "Pass the derivatives explicitly (derivative=, second_derivative=) written with "
            "constructs tapegrad can read and in the inputs alone (one that reads y, the "
            "op's value, is differentiated through the forward): every further order is "
            "derived from them")


# -- Python functions Numba compiles ---------------------------------------------------------
def _dispatcher(fn):
    with _lock:
        got = _jitted.get(id(fn))
        if got is None or got[0] is not fn:
            got = _jitted[id(fn)] = (fn, numba.njit(error_model="numpy")(ready(fn)))
        return got[1]


def _function(root, specs, role, name):
    """A Python function over float64 scalars that Numba compiles: ``value``
    ``(x..) -> spec``, ``derivative`` / ``second`` ``(x.., z) -> entry or
    tuple of entries``, in the shapes ElementwiseOp takes."""
    n = root.nin
    xs = "x" if n == 1 else "a, b"
    ns = {}
    calls = []
    for k, (fn, pick) in enumerate(specs):
        ns[f"f{k}"] = _dispatcher(fn)
        ar = _arity(fn, "derivative")
        if ar == n:
            args = xs
        elif fn.__code__.co_filename.startswith(GENERATED):
            args = xs + ", 0.0"       # derived code never reads y
        else:
            ns["forward"] = _dispatcher(root.forward)
            args = f"{xs}, forward({xs})"
        call = f"f{k}({args})" + ("" if pick is None else f"[{pick}]")
        calls.append(f"float({call})")
    params = xs if role == "value" else xs + ", z"
    body = calls[0] if len(calls) == 1 else "(" + ", ".join(calls) + ")"
    src = f"def {role}({params}):\n    return {body}\n"
    exec(compile(src, f"<tapegrad {role} of {name}>", "exec"), ns)
    out = ns[role]
    out.__qualname__ = out.__name__ = f"{name}_{role}"
    return out


def derived_second(op):
    """The second derivatives of a first op defined with ``derivative=`` only,
    derived from that function's source, as the ufuncs
    ``ElementwiseOp.second_rules`` gives (for ``tg.hessian`` / ``tg.hvp``);
    None where they cannot be derived."""
    with _lock:
        got = op.__dict__.get("_derived_second", False)
        if got is not False:
            return got
        root, path, _, grad, _ = _tower(op)
        got = None
        if not path:
            n = root.nin
            try:
                gs = [derive(fn, n, root.forward, pick)[0] for fn, pick in grad]
            except DeriveError:
                gs = None
            if gs is not None:
                specs = [(gs[0], None)] if n == 1 else [(gs[0], 0), (gs[0], 1), (gs[1], 1)]
                name = root.name
                helper = ElementwiseOp(root.forward, root.derivative, name,
                                       _function(root, specs, "second", name))
                got = helper.second_rules()
        op._derived_second = got
        return got
