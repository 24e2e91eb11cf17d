"""``Tensor``: a NumPy value plus its place on this thread's tape.

A tensor that requires grad and was made by an op is a *non-leaf*: it knows
its record on the tape and holds the tape's epoch token, which keeps that
epoch's records alive (see :mod:`tapegrad.core.tape` for liveness).  A leaf that
requires grad gets a ``LEAF`` record lazily, the first time an op on the
current tape uses it, so parameters reused across many graphs never keep an
old graph alive.  Operators, NumPy-named methods and the NumPy
protocol are bound in :mod:`tapegrad.ops.methods`.
"""
import warnings

import numpy as np

from . import registry as R
from .tape import TOKEN_HOLDERS, _local

# object.__new__(Tensor): kept for the modules that import it; the hot paths
# call Tensor() instead (Tensor defines no __init__ or __new__, so both make
# the same empty instance, and type.__call__ skips object.__new__'s
# argument-checking wrapper: about 30 ns less per tensor)
_new = object.__new__
_FLOAT_KINDS = "f"


class Bindings:
    """Functions of an upper layer that a lower module calls: the upper
    module binds its own here when it is imported (``bind``), so that the
    lower one never imports it.  ``missing``: what a call of a name not bound
    yet says (``{name}`` is filled in)."""

    def __init__(self, missing):
        self.__dict__["_missing"] = missing

    def bind(self, **fns):
        self.__dict__.update(fns)

    def __getattr__(self, name):
        if name.startswith("_"):  # introspection (doctest, copy): a plain missing attribute
            raise AttributeError(name)
        raise RuntimeError(self._missing.format(name=name))


#: the functions of the layers above the core that Tensor's methods call
#: (graph nodes, hooks, backward, value writes); ``import tapegrad`` imports
#: the modules that bind them all
bound = Bindings("tapegrad is not fully imported ({name} is not bound): use `import tapegrad`")


_SCIPY_STATS_METHODS = {
    "norm": "logpdf pdf cdf logcdf sf logsf ppf", "lognorm": "logpdf pdf cdf logcdf sf logsf ppf",
    "expon": "logpdf pdf cdf logcdf sf logsf ppf", "uniform": "logpdf pdf cdf logcdf sf logsf ppf",
    "t": "logpdf pdf", "gamma": "logpdf pdf", "beta": "logpdf pdf",
    "multivariate_normal": "logpdf pdf", "poisson": "logpmf pmf", "binom": "logpmf pmf",
    "nbinom": "logpmf pmf"}

#: what ``tapegrad.scipy`` has, under SciPy's names: the counterparts that the
#: conversion error (SciPy's Python functions convert their input with
#: np.asarray, which no protocol reaches) and the error for a SciPy ufunc
#: tapegrad does not know name.  tests/test_scipy_namespace.py checks it
#: against tapegrad.scipy itself (this layer does not import it)
SCIPY_COUNTERPARTS = frozenset(
    [f"special.{n}" for n in (
        "betaln digamma entr erf erfc erfcx erfinv expit gamma gammaln i0 i0e i1 i1e "
        "log_expit log_ndtr log_softmax logit logsumexp multigammaln ndtr ndtri polygamma "
        "psi softmax xlog1py xlogy").split()]
    + [f"linalg.{n}" for n in (
        "cho_factor cho_solve cholesky det eigh eigvalsh expm inv lu lu_factor lu_solve solve "
        "solve_triangular").split()]
    + [f"stats.{d}.{m}" for d, ms in _SCIPY_STATS_METHODS.items() for m in ms.split()])


def _scipy_name(f):
    """``scipy.special.logsumexp``, ``scipy.stats.norm.logpdf``, ... for a
    frame of a public SciPy function or distribution method, else None;
    and whether it is a method of a frozen distribution."""
    name, mod = f.f_code.co_name, f.f_globals.get("__name__", "")
    if mod.split(".")[1].startswith("_"):
        # SciPy's own helpers (scipy._lib): the wrapper that broadcasts most
        # of scipy.linalg's functions over stacked matrices converts their
        # input itself; the function it wraps is its ``f``
        inner = f.f_locals.get("f")
        mod = getattr(inner, "__module__", None)
        if not callable(inner) or not isinstance(mod, str) or not mod.startswith("scipy."):
            return None, False
        return _scipy_public(mod, getattr(inner, "__name__", "_")), False
    if name.startswith("_"):
        return None, False
    if mod.startswith("scipy.stats."):
        obj = f.f_locals.get("self")
        if obj is None:
            return None, False
        dist = getattr(obj, "dist", None)  # a frozen univariate distribution
        dist_name = getattr(obj, "name", None) or getattr(dist, "name", None)
        if not isinstance(dist_name, str):
            dist_name = type(obj).__name__.removesuffix("_gen").removesuffix("_frozen")
        return f"scipy.stats.{dist_name}.{name}", dist is not None
    return _scipy_public(mod, name), False


def _scipy_public(mod, name):
    """``scipy.linalg.solve`` for the function ``solve`` of the module
    ``scipy.linalg._basic``; None for a private function or module."""
    parts = mod.split(".")
    if name.startswith("_") or len(parts) < 2 or parts[1].startswith("_"):
        return None
    return ".".join(parts[:2] + [name])


def _converter_hint():
    """For the conversion error: names the SciPy function that did the
    converting (scipy.special.logsumexp, scipy.stats.norm.logpdf, ...) and
    its differentiable counterpart in tapegrad.scipy, where there is one.
    Runs only on the error path, so walking the stack costs nothing else."""
    import sys
    f = sys._getframe(2)
    found = None
    # the SciPy (and NumPy) frames between the conversion and the caller's code:
    # the outermost public one is the function the caller called
    while f is not None:
        mod = f.f_globals.get("__name__", "")
        if not (mod.startswith("scipy.") or mod.startswith("numpy")):
            break
        name, frozen = _scipy_name(f) if mod.startswith("scipy.") else (None, False)
        if name is not None:
            found = name, frozen
        f = f.f_back
    if found is None:
        return ""
    name, frozen = found
    ours = "tapegrad." + name
    if name.removeprefix("scipy.") not in SCIPY_COUNTERPARTS:
        return (f"{name} converts its input to NumPy, which no protocol lets tapegrad see "
                "(tapegrad.scipy has no counterpart of it). ")
    if frozen:
        return (f"{name} (of a frozen distribution) converts its input to NumPy, which no "
                f"protocol lets tapegrad see: write {ours} with the distribution's "
                "parameters as arguments. ")
    return (f"{name} converts its input to NumPy, which no protocol lets tapegrad see: "
            f"write {ours} (same arguments). ")


class ConcretizationError(RuntimeError):
    """A tensor being differentiated was turned into a plain Python number or
    NumPy array, which carries no gradient.

    Raised by ``float(t)``, ``int(t)``, ``t.item()`` and ``t.tolist()`` inside
    a function transform (``tg.grad``, ``tg.jacobian``, ``tg.hessian``,
    ``tg.vjp``, ``tg.jvp``, ...) or while ``tg.trace`` records, as JAX raises
    for its tracers, and by ``np.asarray(t)`` of a tensor that requires grad
    anywhere (not by NumPy's integer and boolean casts, ``np.int64(t)``,
    whose derivative is 0).  A RuntimeError, as tapegrad's other refusals to drop a gradient.
    """


#: what the conversion error suggests, per conversion (``_concrete``)
_DETACHED = {"float(t)": "float(t.detach())", "int(t)": "int(t.detach())",
             "t.item()": "t.detach().item()", "t.tolist()": "t.detach().tolist()"}


def _concrete(t, what, stacklevel, warn=True):
    """Called before ``what`` (float(t), t.item(), ...) turns the value of t,
    a tensor that requires grad, into Python numbers, which no gradient can
    follow: a derivative through them would silently be 0.  Inside a function
    transform or a trace -- where the derivative is the point -- that raises
    ConcretizationError; elsewhere it warns (``stacklevel`` names the user's
    line, so Python's default filter shows it once per place; ``warn=False``
    for the explicit ways to ask for values, ``item()``, ``int()`` and
    ``tolist()``, which PyTorch leaves quiet too).  Under no_grad
    nothing is being differentiated: it says nothing."""
    tape = _local.__dict__.get("tape")
    if tape is not None and not tape.enabled:
        return
    fix = ("Keep the gradient by staying with tensors: np.sin(t) or tg.sin(t), not "
           "math.sin(t); tg.stack or a tensor, not an ndarray filled by out[i] = t. For a "
           f"value meant only for logging or control flow, write {_DETACHED[what]} "
           "(`if t > 0:` works as it is).")
    via = (" (called by math.sin(t), np.float64(t), complex(t) and out[i] = t too)"
           if what == "float(t)" else "")
    if tape is not None and tape.tracing:
        where = "while tg.trace records (the number would be a constant of the trace)"
    elif bound.in_transform():
        where = ("inside a function being differentiated (tg.grad, tg.jacobian, tg.hessian, "
                 "tg.vjp, tg.jvp, ...)")
    else:
        if warn:
            warnings.warn(
                f"Converting a tensor that requires grad to a Python number: {what}{via}, "
                f"shape {t.shape}. The number carries no gradient, so what is computed from it "
                f"is differentiated as a constant. {fix}", UserWarning, stacklevel=stacklevel + 1)
        return
    raise ConcretizationError(
        f"{what}{via} of a tensor that requires grad (shape {t.shape}) {where}: the Python "
        f"number carries no gradient, so every derivative through it would silently be "
        f"lost. {fix}")


class Tensor:
    """An array that records the operations applied to it.

    Create tensors with :func:`tapegrad.tensor`.  Differentiable operations
    are NumPy's: operators, ``tg.sin(t)`` or ``np.sin(t)``, methods such as
    ``t.sum(axis=0)``.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad
    tensor([2.0, 4.0, 6.0])
    """

    # _tok/_rec: epoch token and record of a non-leaf (None/unset for leaves);
    # _ltok/_lrec: the epoch's leaf key and the LEAF record of a leaf (a leaf
    # must not hold the token: it would keep its first graph's epoch alive).
    # _base: the tensor whose value a ``detach()``/``.data`` alias shares (writes
    # through the alias go to it); _vw: how a view tensor was taken from its
    # base (tapegrad.ops.views); _scalar: a 0-d array that stands for a NumPy
    # scalar (numpy() of one gave it memory to share), whose "views" are
    # copies, as a scalar's are.  All are unset on most tensors.
    __slots__ = ("_data", "_requires_grad", "_tok", "_rec", "_ltok", "_lrec",
                 "_grad", "_base", "_vw", "_views", "_scalar", "__weakref__")
    __array_priority__ = 1000

    # -- basic properties ---------------------------------------------------
    @property
    def data(self):
        """The value as a plain tensor that shares memory (like ``detach``).

        Writes through it reach this tensor, as in PyTorch: ``p.data -= lr *
        p.grad`` updates p in place.  Assigning ``p.data = value`` gives p a
        new value of any shape.  A graph recorded before either write that
        needs the old value raises at backward.

        Examples
        --------
        >>> import tapegrad as tg
        >>> p = tg.tensor([1.0, 2.0], requires_grad=True)
        >>> p.data -= 0.5
        >>> p
        tensor([0.5, 1.5], requires_grad=True)
        """
        return self.detach()

    @data.setter
    def data(self, value):
        bound.replace_value(self, value)

    @property
    def shape(self):
        # an array's or NumPy scalar's own attribute: np.shape(x) costs ten
        # times as much, on paths (a backward's seed, each leaf's gradient)
        # that run once per step of a small loop
        try:
            return self._data.shape
        except AttributeError:
            return np.shape(self._data)

    @property
    def ndim(self):
        try:
            return self._data.ndim
        except AttributeError:
            return np.ndim(self._data)

    @property
    def size(self):
        try:
            return self._data.size
        except AttributeError:
            return np.size(self._data)

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    @property
    def is_leaf(self):
        """True unless the tensor was made by a recorded operation."""
        return self._tok is None

    @property
    def grad(self):
        """Accumulated gradient (a Tensor) or None; assign None to reset."""
        try:
            return self._grad
        except AttributeError:  # non-leaves start without the slot
            import warnings
            warnings.warn(
                "the .grad of a tensor that is not a leaf is not filled by backward(); "
                "call t.retain_grad() before backward to keep it, or use a hook "
                "(t.register_hook)", UserWarning, stacklevel=2)
            return None

    @grad.setter
    def grad(self, value):
        if value is None:
            self._grad = None
            return
        g = value._data if isinstance(value, Tensor) else np.asarray(value)
        if np.shape(g) != self.shape:
            raise RuntimeError(
                f"assigned grad has shape {np.shape(g)} but the tensor has shape "
                f"{self.shape}")
        self._grad = _plain(np.array(g, dtype=self.dtype))

    @property
    def grad_fn(self):
        """The graph node that made this tensor, or None for a leaf."""
        if self._tok is None:
            return None
        return bound.node_of(self)

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` in place on a leaf; returns the tensor."""
        if self._tok is not None:
            raise RuntimeError(
                "you can only change requires_grad of leaf tensors; use "
                "t.detach() to get a leaf that shares the value")
        if requires_grad and self._data.dtype.kind not in _FLOAT_KINDS:
            raise RuntimeError(
                f"only tensors of floating point dtype can require gradients, "
                f"this one is {self._data.dtype}; create it with dtype=float64")
        self._requires_grad = bool(requires_grad)
        self._ltok = None
        return self

    # -- conversion ----------------------------------------------------------
    def numpy(self):
        """The value as an ndarray that shares memory with the tensor.

        Writes into it change the tensor.  While a recorded graph holds the
        value (the tensor is an operand or result of an op whose gradient is
        still to be computed) the array is read-only, so a saved value can
        never change under a gradient: NumPy raises "assignment destination
        is read-only".  Write through tapegrad instead (``t.data[...] = v``,
        ``t += v`` under ``tg.no_grad()``), which a later backward of that
        graph reports, or make a copy (``t.numpy().copy()``).
        """
        tape = _local.__dict__.get("tape")
        if tape is not None and tape.tracing:
            tape.leave(self)  # the exact value leaves the trace: a replay must see it unchanged
        return bound.exposed(self)

    def __array__(self, dtype=None, copy=None):
        # NumPy calls this when it converts a tensor behind tapegrad's back
        # (np.asarray(t), t stored into an ndarray with out[i] = t): the result
        # would carry no gradient, and a gradient that silently goes missing
        # looks like any other number.  So refuse, as PyTorch and JAX do,
        # while the tensor is part of what is being differentiated.
        if self._requires_grad and getattr(_local.__dict__.get("tape"), "enabled", True):
            if dtype is not None and np.dtype(dtype).kind in "biu":
                return self._integer_cast(np.dtype(dtype))
            raise ConcretizationError(
                f"a tensor that requires grad (shape {self.shape}) was converted to a "
                "NumPy array, which would drop its gradient -- e.g. by np.asarray(t) or by "
                "storing it into an ndarray (out[i] = t). " + _converter_hint() +
                "Keep it a tensor: build arrays "
                "with tg.stack/tg.concatenate, or assign into a tensor (out = "
                "tg.tensor(np.zeros(n)); out[i] = t). To use the value without its "
                "gradient, call t.detach() or t.numpy().")
        a = np.asarray(self._data)
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def _integer_cast(self, dtype):
        """NumPy's cast of this tensor, which requires grad, to an integer
        or boolean dtype (``np.int64(t)``, ``np.asarray(t, dtype=int)``,
        ``out[:] = t`` into an integer array): an array of integers is
        piecewise constant in t, its derivative 0 wherever it has one, so the
        cast drops no gradient and gives the integer array, a constant (as
        autograd and JAX's ``x.astype(int)`` do).  While ``tg.trace`` records,
        the cast is a guard: a replay casts the new values and traces again
        when the integers change, so they never stay stale constants."""
        tape = _local.__dict__.get("tape")
        if tape is not None and tape.tracing:
            return np.asarray(tape.call(lambda d: np.asarray(d).astype(dtype), (self,), {}))
        return np.asarray(self._data).astype(dtype)

    @property
    def _mask(self):
        # NumPy's masked-array code (m * t with a masked array m on the left,
        # np.ma.* functions) reads a tensor's value through its ``_data`` and
        # then asks for its ``_mask``: the one point where tapegrad sees it.
        # Its result is a masked array with no gradient, so refuse there for a
        # tensor being differentiated; others have no mask, as NumPy expects.
        if self._requires_grad and getattr(_local.__dict__.get("tape"), "enabled", True):
            raise TypeError(
                f"NumPy's masked-array code (np.ma: m * t with a masked array m on the left, "
                f"or an np.ma function) was given a tensor that requires grad (shape "
                f"{self.shape}); it computes with the tensor's values, so its result carries "
                "no gradient. Turn the masked array into a plain one first: "
                "np.ma.filled(m, fill) (e.g. np.ma.filled(m, 0.0) * t), or m.data with the "
                "mask applied explicitly, tg.where(m.mask, fill, t * m.data)")
        raise AttributeError("_mask")

    def item(self):
        """The value of a one-element tensor as a Python number.

        A Python number carries no gradient: of a tensor that requires grad
        this raises :class:`ConcretizationError` inside a function transform
        or a trace (``t.detach().item()`` says the value is meant to leave
        the graph); elsewhere it is the logging idiom (``loss.item()``) and
        says nothing, as in PyTorch, where ``float(t)`` warns.
        """
        return self._number("t.item()")

    def __float__(self):
        return float(self._number("float(t)"))

    def __int__(self):
        return int(self._number("int(t)"))

    def _number(self, what):
        """``item()``, ``float()`` and ``int()``: the one element as a Python
        number, once ``_concrete`` allows it."""
        if self.size != 1:
            raise ValueError(
                f"item() needs a tensor with one element, this one has shape {self.shape}")
        if self._requires_grad:  # outside transforms PyTorch warns for float() alone
            _concrete(self, what, 3, warn=what == "float(t)")
        v = np.asarray(self._data).item()
        tape = _local.__dict__.get("tape")
        if tape is not None and tape.tracing:  # a traced value steers Python
            tape.guard(self, v, False)
        return v

    def __bool__(self):
        if self.size != 1:
            raise ValueError(
                f"the truth value of a tensor with {self.size} elements is ambiguous; "
                "use .any() or .all() on t.numpy()")
        v = bool(np.asarray(self._data).item())
        tape = _local.__dict__.get("tape")
        if tape is not None and tape.tracing:
            tape.guard(self, v, True)
        return v

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def detach(self):
        """A leaf that shares this value and does not require grad.

        In-place writes through it (``d += 1``, ``d[0] = 5``) reach this
        tensor, as in PyTorch; a graph that saved the old value raises at
        backward.
        """
        t = _plain(self._data)
        t._base = _owner(self)
        return t

    def tolist(self):
        """The value as nested Python lists (raises inside a transform for a
        tensor that requires grad, as ``item()`` does)."""
        if self._requires_grad:
            _concrete(self, "t.tolist()", 2, warn=False)
        tape = _local.__dict__.get("tape")
        if tape is not None and tape.tracing:
            tape.leave(self)
        return np.asarray(self._data).tolist()

    def __repr__(self):
        a = np.asarray(self._data)
        if a.dtype.kind in "fc":
            body = np.array2string(a, separator=", ", formatter={"float_kind": _fmt},
                                   prefix="tensor(")
        else:
            body = np.array2string(a, separator=", ", prefix="tensor(")
        extra = ""
        if a.dtype.kind == "f" and a.dtype != np.float64:
            extra += f", dtype={a.dtype}"
        if self._tok is not None:
            extra += f", grad_fn=<{self.grad_fn.name()}>"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # -- hooks -----------------------------------------------------------------------
    def register_hook(self, hook):
        """Call ``hook(grad)`` with this tensor's gradient in every backward.

        ``grad`` is a Tensor of this tensor's shape; a hook that returns a
        Tensor or array replaces the gradient that flows on (and, for a
        leaf, the one accumulated into ``.grad``); returning None keeps it.
        Hooks run in the order they were registered.  Returns a handle whose
        ``remove()`` takes the hook off.

        Examples
        --------
        >>> import tapegrad as tg
        >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
        >>> y = x * 3
        >>> h = y.register_hook(lambda g: g * 10)
        >>> y.sum().backward()
        >>> x.grad
        tensor([30.0, 30.0])
        >>> h.remove()
        """
        return bound.register_hook(self, hook)

    def retain_grad(self):
        """Keep this non-leaf tensor's gradient in ``.grad`` (leaves always do).

        Later backwards accumulate into it, as they do into leaves.

        Examples
        --------
        >>> import tapegrad as tg
        >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
        >>> y = x * x
        >>> y.retain_grad()
        >>> (3 * y).sum().backward()
        >>> y.grad
        tensor([3.0, 3.0])
        """
        bound.retain_grad(self)

    @property
    def retains_grad(self):
        """True for a non-leaf after ``retain_grad()``."""
        return bound.retains_grad(self)

    # -- backward ------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate ``gradient``-weighted derivatives of this tensor into leaves.

        Computes the vector-Jacobian product ``gradient^T dself/dleaf`` for
        every leaf that requires grad and adds it to ``leaf.grad``.

        Parameters
        ----------
        gradient : Tensor, ndarray, list or number, optional
            The seed, of this tensor's shape.  May be omitted for one-element
            tensors (then 1).
        retain_graph : bool, optional
            Keep the graph for another backward.  Without it the graph is
            freed and a second backward through it raises RuntimeError.
            Defaults to ``create_graph``.
        create_graph : bool, default False
            Make the accumulated gradients tensors of the graph, so they can
            be differentiated again (second derivatives: gradient penalties,
            Hessian-vector products by hand).  Gradients with respect to
            leaves; the graph is kept.
        inputs : sequence of Tensor, optional
            Accumulate into these tensors' ``.grad`` only (leaves, or
            non-leaves, which then get a ``.grad`` too), as PyTorch's
            ``inputs=``; other leaves are left alone.

        Examples
        --------
        >>> import tapegrad as tg
        >>> a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> y = 3 * a
        >>> y.backward([0.1, 1.0, 0.0001])
        >>> a.grad
        tensor([0.3, 3.0, 0.0003])
        """
        if create_graph:
            bound.backward_graph(self, gradient, inputs)
            return
        retain_graph = bool(retain_graph)
        if inputs is not None:
            bound.backward_to(self, gradient, retain_graph, inputs)
            return
        bound.backward(self, gradient, retain_graph)


def _fmt(v):
    """Up to 8 significant decimals, positional where that reads well."""
    v = float(v)  # float16/float32: compare without overflow, print the value
    if not np.isfinite(v):
        return str(v)
    a = abs(v)
    if v == 0 or 1e-4 <= a < 1e8:
        return np.format_float_positional(v, precision=8, unique=True, trim="0")
    return np.format_float_scientific(v, precision=8, unique=True, trim="0")


def _plain(data):
    """A leaf tensor that does not require grad."""
    t = Tensor()
    t._data = data
    t._requires_grad = False
    t._tok = None
    t._ltok = None
    t._grad = None
    return t


def _owner(t):
    """The tensor that owns t's value (t itself unless t is a detach() alias)."""
    try:
        b = t._base
    except AttributeError:
        return t
    return t if b is None else b


def _result(tape, r, data):
    """The non-leaf tensor for record r of the tape's current epoch.

    A result that is a view (of its input's memory) is made read-only: the
    tape may hold that memory, and a write through the view would change
    recorded values.
    """
    if type(data) is np.ndarray and data.base is not None:
        data.flags.writeable = False
    t = Tensor()
    t._data = data
    t._requires_grad = True
    tok = tape.tok_hold    # Tape.tok, without a property call on this path
    if tok is None:
        ref = tape.tok_ref
        tok = ref() if ref is not None else None
        if tok is None:
            tok = tape.tok
    t._tok = tok
    t._rec = r
    return t


def _node(tape, t):
    """Record id of tensor ``t`` (which requires grad) on ``tape``."""
    tok = t._tok
    if tok is not None and tok.tape is tape:
        return t._rec
    if tok is None:  # a leaf: one LEAF record per epoch
        if t._ltok is tape.lkey:
            return t._lrec
        d = t._data
        r = tape.record_leaf(d)
        if type(d) is np.ndarray and d.flags.writeable:
            # the record saved this value (a copy, or the array itself): a
            # NumPy write into it now would give this graph's gradient a
            # value its forward never saw
            d.flags.writeable = False
            tape.flipped.append(d)
        tape.leaves[r] = t
        t._ltok = tape.lkey
        t._lrec = r
        return r
    if tok.tape is not tape and tok.tape is not None:
        raise RuntimeError(
            "this tensor was recorded on another thread's tape; each thread "
            "differentiates its own graphs. Pass t.detach() (a leaf) between "
            "threads and call requires_grad_() on it there")
    # its graph was freed by backward() and the tape reused: enter as a stub
    # that raises "backward through the graph a second time" if reached
    r = tape.record(R.FREED, (), t._data)
    tape.freed[r] = True
    t._tok = tape.tok
    t._rec = r
    return r


def tensor(data, requires_grad=False, dtype=None):
    """Create a leaf tensor from array-like data (always copies).

    Dtypes follow NumPy: Python floats give float64, a float32 array stays
    float32, integer data stays integer.  Only floating tensors may require
    grad.

    Examples
    --------
    >>> import tapegrad as tg
    >>> tg.tensor([0.1, 1.0, 0.0001])
    tensor([0.1, 1.0, 0.0001])
    >>> tg.tensor(2.0, requires_grad=True)
    tensor(2.0, requires_grad=True)
    """
    if isinstance(data, Tensor):
        data = data._data
    try:
        a = np.array(data, dtype=dtype, copy=True)
    except ValueError as e:
        raise ValueError(
            f"tapegrad.tensor needs rectangular numeric data; could not convert "
            f"{type(data).__name__}: {e}") from None
    except TypeError as e:
        raise TypeError(f"tapegrad.tensor could not convert {type(data).__name__}: {e}") from None
    if a.dtype.kind == "c":  # a pair of real tensors (ops/complex_tensor.py binds it)
        return bound.complex_tensor(a, requires_grad)
    if a.dtype.kind not in "biuf":
        what = {"U": "strings are not numbers", "S": "bytes are not numbers",
                "O": "the data is not a rectangular array of numbers"}.get(
                    a.dtype.kind, f"dtype {a.dtype} is not supported")
        raise TypeError(f"tapegrad.tensor: {what} (got {a.dtype}); pass real "
                        "numbers as floats or ints")
    t = _plain(a)  # a 0-d array, as np.array gives: its views share its memory
    if requires_grad:
        t.requires_grad_(True)
    return t


TOKEN_HOLDERS.add(Tensor)
