"""Elementwise ops that users define with Numba-compiled scalar functions.

``tapegrad.elementwise`` turns a scalar forward and its scalar derivative into
an op whose forward is a NumPy ufunc (``numba.vectorize``) and whose VJP runs
inside the compiled reverse sweep: the derivative is compiled to a C-callable
``cfunc`` and each record carries its address (see kernels/user.py).  A backward
through a user op therefore makes no Python call, unlike ``tg.Function``.
"""
import gc
import inspect
import math
import threading

import numpy as np

from ..kernels import codes as C
from ..kernels._jit import compile_lock
from ..core.tape import current
from ..core.tensor import Tensor, _plain, _result
from .derive import derive, ready
from .elementwise import _operand, broadcast_params
from .numpy_api import UFUNCS
from ..core.registry import register

_UNARY = register("UserElementwise", C.K_USER, C.USER_UNARY)
_BINARY = register("UserElementwiseBinary", C.K_USER, C.USER_BINARY)

#: Every user op ever defined in this process; records name theirs by index
#: (an op object must outlive the records that call its machine code).
USER_OPS = []
_lock = threading.Lock()



class _Numba:
    """The ``numba`` module, imported when a user op first compiles (not at
    ``import tapegrad``: kernels/_numba.py)."""

    def __getattr__(self, name):
        import numba
        return getattr(numba, name)


numba = _Numba()


def _f64_sig(n):
    return "float64(" + ", ".join(["float64"] * n) + ")"


def _cfunc(sig, fn):
    return numba.cfunc(sig, error_model="numpy")(fn)


def _arity(fn, what):
    try:
        params = inspect.signature(getattr(fn, "py_func", fn)).parameters.values()
    except (TypeError, ValueError):
        raise TypeError(f"tapegrad.elementwise: cannot read the signature of the {what} "
                        f"{fn!r}; pass a plain Python function") from None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        raise TypeError(f"tapegrad.elementwise: the {what} must take its scalars as plain "
                        "positional parameters (no *args, **kwargs or keyword-only ones)")
    return len(params)


def _locked(build):
    """``build()`` under Numba's compiler lock, with the cyclic garbage
    collector paused until it is done and then run under the lock.

    The lock keeps this build from overlapping any other compilation; the
    pause keeps a collection on another thread (a first kernel call there)
    from freeing LLVM objects while this thread is inside LLVM with the GIL
    released (LLVM is not thread-safe; that shows as a crash in llvmlite's
    ``ObjectRef._dispose``).  Collecting before the lock is released frees
    the build's own LLVM garbage while no other thread can be in LLVM."""
    with compile_lock:
        paused = gc.isenabled()
        gc.disable()
        try:
            return build()
        finally:
            if paused:
                gc.enable()
            gc.collect()


def _apart(build):
    """``build()`` run on a helper thread: its result, or the message of the
    NumbaError it raised (then the result is None).

    Numba keeps the tracebacks of failed compilations in its typing caches,
    and a traceback's frames hold their callers' frames alive.  Compiled here,
    the failure's frames end at this thread: a failed compile cannot pin the
    caller's locals -- the tensors of a graph being recorded or
    differentiated, which would keep the tape from being reused."""
    got = []

    def run():
        try:
            got.append((_locked(build), None))
        except numba.core.errors.NumbaError as e:
            got.append((None, str(e)))
        except BaseException as e:  # anything else, re-raised on the caller's thread
            got.append((None, e))

    if compile_lock.is_locked():   # inside a compilation already: the helper
        run()                      # would wait for this thread forever
    else:
        t = threading.Thread(target=run, name="tapegrad-compile")
        t.start()
        t.join()
    result, err = got[0]
    if isinstance(err, BaseException):
        raise err
    return result, err


class ElementwiseOp:
    """A differentiable elementwise op made of Numba scalar functions.

    Create one with :func:`tapegrad.elementwise`.  Calling it on tensors
    records one tape record; on anything else it is a plain NumPy ufunc call.
    ``op.ufunc`` is the NumPy ufunc of the forward; called on a tensor, it
    records the op as well.
    """

    def __init__(self, forward, derivative, name, second_derivative=None):
        self.nin = _arity(forward, "forward")
        if self.nin not in (1, 2):
            raise TypeError(f"tapegrad.elementwise: the forward {forward.__name__}() takes "
                            f"{self.nin} scalars; unary and binary ops are supported")
        nd = _arity(derivative, "derivative")
        allowed = (1, 2) if self.nin == 1 else (3,)
        if nd not in allowed:
            want = ("(x) or (x, y) and return dy/dx" if self.nin == 1
                    else "(a, b, y) and return the pair (dy/da, dy/db)")
            raise TypeError(f"tapegrad.elementwise: the derivative of {name} must take {want}, "
                            f"where y is the forward's value; it takes {nd} parameters")
        if second_derivative is not None:
            n2 = _arity(second_derivative, "second derivative")
            if n2 not in allowed:
                want = ("(x) or (x, y) and return d2y/dx2" if self.nin == 1
                        else "(a, b, y) and return the triple (d2y/da2, d2y/dadb, d2y/db2)")
                raise TypeError(f"tapegrad.elementwise: the second derivative of {name} must "
                                f"take {want}, where y is the forward's value; it takes {n2} "
                                "parameters")
        self.forward = getattr(forward, "py_func", forward)
        self.derivative = getattr(derivative, "py_func", derivative)
        self.second_derivative = getattr(second_derivative, "py_func", second_derivative)
        self._second = None  # its ufuncs, built on the first Hessian that needs them
        self.name = name
        self.__name__ = name
        self.__doc__ = forward.__doc__
        self._compiled = None  # (ufunc, cfuncs, addresses), built on first use
        self.float64_only = False
        self.second_error = None

    def _compile(self):
        # lazily: importing a module that defines ops should not compile them
        with _lock:
            if self._compiled is not None:
                return self._compiled
            # float32 first: NumPy takes the first loop its inputs cast to safely
            sigs = (["float32(float32)", "float64(float64)"] if self.nin == 1
                    else ["float32(float32, float32)", "float64(float64, float64)"])
            if self.float64_only:   # a derivative op: it runs on float64 values only
                sigs = sigs[1:]

            def build():
                ufunc = numba.vectorize(sigs)(self.forward)
                # IEEE arithmetic, as the built-in ops' kernels: 1 / 0 is inf,
                # not a ZeroDivisionError.  A C callback cannot raise into the
                # sweep (Numba would print "Exception ignored" and return 0.0),
                # so any other exception the derivative raises makes its value
                # NaN, which propagates and which detect_anomaly reports
                d = numba.njit(error_model="numpy")(ready(self.derivative))
                if self.nin == 1:
                    if _arity(self.derivative, "derivative") == 1:
                        def dx(x, y):
                            try:
                                return float(d(x))
                            except Exception:
                                return math.nan
                    else:
                        def dx(x, y):
                            try:
                                return float(d(x, y))
                            except Exception:
                                return math.nan
                    return ufunc, (_cfunc(_f64_sig(2), dx),)

                def da(a, b, y):
                    try:
                        return float(d(a, b, y)[0])
                    except Exception:
                        return math.nan

                def db(a, b, y):
                    try:
                        return float(d(a, b, y)[1])
                    except Exception:
                        return math.nan
                sig = _f64_sig(3)
                return ufunc, (_cfunc(sig, da), _cfunc(sig, db))

            built, err = _apart(build)
            if err is not None:
                raise TypeError(
                    f"tapegrad.elementwise: Numba could not compile {self.name}'s forward or "
                    f"derivative as scalar float64 functions (use math, not NumPy arrays or "
                    f"Python objects):\n{err}")
            ufunc, cfuncs = built
            USER_OPS.append(self)
            addrs = [cf.address for cf in cfuncs] + [0] * (2 - len(cfuncs))
            # the cfunc objects stay referenced here: their machine code must
            # live as long as any record that points at it
            self._compiled = (ufunc, cfuncs, [len(USER_OPS) - 1] + addrs)
            UFUNCS[ufunc] = self  # op.ufunc(tensor) records the op too
            return self._compiled

    def second_rules(self):
        """The second derivatives as float64 NumPy ufuncs, for ``tg.hessian`` /
        ``tg.hvp`` (``tapegrad/transforms/second/rules.py`` applies them with NumPy): ``(d2(x,
        y),)`` for a unary op, ``(d_aa, d_ab, d_bb)`` of ``(a, b, y)`` for a
        binary one; None when the op was defined without one.  Compiled on
        first use only: ops that never meet a Hessian never pay for it."""
        if self.second_derivative is None:
            if self.second_error is not None:   # a derivative op's, not derivable
                raise NotImplementedError(self.second_error)
            return None
        with _lock:
            if self._second is not None:
                return self._second
            sig = "float64(float64, float64)" if self.nin == 1 else \
                "float64(float64, float64, float64)"

            def build():
                # IEEE arithmetic, as for the derivative (see _compile)
                d2 = numba.njit(error_model="numpy")(ready(self.second_derivative))
                if self.nin == 1:
                    if _arity(self.second_derivative, "second derivative") == 1:
                        def dxx(x, y):
                            try:
                                return float(d2(x))
                            except Exception:
                                return math.nan
                    else:
                        def dxx(x, y):
                            try:
                                return float(d2(x, y))
                            except Exception:
                                return math.nan
                    fns = (dxx,)
                else:
                    # one ufunc per entry of the returned triple (a ufunc
                    # returns one number)
                    def daa(a, b, y):
                        try:
                            return float(d2(a, b, y)[0])
                        except Exception:
                            return math.nan

                    def dab(a, b, y):
                        try:
                            return float(d2(a, b, y)[1])
                        except Exception:
                            return math.nan

                    def dbb(a, b, y):
                        try:
                            return float(d2(a, b, y)[2])
                        except Exception:
                            return math.nan
                    fns = (daa, dab, dbb)
                return tuple(numba.vectorize([sig])(f) for f in fns)

            ufuncs, err = _apart(build)
            if err is not None:
                raise TypeError(
                    f"tapegrad.elementwise: Numba could not compile {self.name}'s second "
                    "derivative as a scalar float64 function (use math, not NumPy arrays or "
                    f"Python objects; a binary op's returns a triple):\n{err}")
            self._second = ufuncs
            return ufuncs

    def forward_address(self):
        """Address of the forward compiled as a C function of float64s, for
        ``tapegrad.trace``'s compiled replay (compiled on first request only:
        eager use never pays for it)."""
        with _lock:
            cf = self.__dict__.get("_forward_cfunc")
            if cf is None:
                sig = _f64_sig(self.nin)
                cf = self._forward_cfunc = _locked(lambda: numba.cfunc(sig)(self.forward))
            return cf.address

    @property
    def ufunc(self):
        """The forward as a NumPy ufunc (float32 and float64 loops)."""
        return self._compile()[0]

    def __call__(self, *args):
        if len(args) != self.nin:
            raise TypeError(f"{self.name}() takes {self.nin} argument"
                            f"{'s' if self.nin > 1 else ''}, got {len(args)}")
        ufunc, _, ints = self._compile()
        datas = [a._data if isinstance(a, Tensor) else np.asarray(a) for a in args]
        data = ufunc(*datas)
        need = any(isinstance(a, Tensor) and a._requires_grad for a in args)
        if not need:
            return _plain(data) if any(isinstance(a, Tensor) for a in args) else data
        tape = current()
        if not tape.enabled:
            return _plain(data)
        parents = tuple(_operand(tape, a) for a in args)
        if self.nin == 1:
            r = tape.record(_UNARY, parents, data, ints[:2], inputs=tuple(datas))
        else:
            shapes = [np.shape(x) for x in datas]
            p = broadcast_params(np.shape(data), shapes, np.size(data)) or [0]
            r = tape.record(_BINARY, parents, data, ints + p, inputs=tuple(datas))
        return _result(tape, r, data)

    def __repr__(self):
        return f"<tapegrad elementwise op {self.name}>"


def elementwise(forward=None, derivative=None, *, second_derivative=None, name=None):
    """Define a differentiable elementwise op from Numba-compiled scalar functions.

    ``forward(x)`` (or ``forward(a, b)``) computes one output element from
    one element of each input, with ``math`` functions and arithmetic: Numba
    compiles it to a NumPy ufunc.  ``derivative(x, y)`` returns dy/dx, given
    the input ``x`` and the forward's value ``y`` (``derivative(x)`` also
    works); for a binary op, ``derivative(a, b, y)`` returns the pair
    ``(dy/da, dy/db)``.  Numba compiles the derivative to machine code that
    the reverse sweep calls directly: a backward through the op makes no
    Python call.  Binary ops broadcast as NumPy does.  Use it as a decorator
    (``@tg.elementwise`` or ``@tg.elementwise(derivative=...)``) or call it
    with the functions.  They are compiled on the op's first call (about a
    second).

    Without ``derivative``, both derivatives are derived from the forward's
    source (``tapegrad/ops/derive.py``: forward mode, branches and loops
    included, calls of other Python and ``@numba.njit`` functions followed);
    a construct that cannot be differentiated raises
    :class:`tapegrad.DeriveError` here, naming its file and line.  A
    ``second_derivative`` given beside it is kept.

    The derivatives follow IEEE arithmetic, as the built-in ops do: a
    division by zero gives inf or NaN.  A derivative that raises (an explicit
    ``raise``, say) cannot stop the compiled sweep; its value is NaN there,
    and ``tg.detect_anomaly()`` names the op.

    ``second_derivative`` (optional) makes the op usable in ``tg.hessian``
    and ``tg.hvp``: ``second_derivative(x, y)`` (or ``(x)``) returns
    d2y/dx2; for a binary op ``second_derivative(a, b, y)`` returns the
    triple ``(d2y/da2, d2y/dadb, d2y/db2)``.  It is compiled when a Hessian
    first needs it.  Without it, the second derivatives are derived from the
    derivative's source (``NotImplementedError`` where that cannot be done).

    Every further order follows: ``create_graph=True`` records the op's VJP
    with its derivative op, itself a user op whose derivatives are derived
    in turn (``tapegrad/ops/derivative_ops.py``).

    Examples
    --------
    >>> import math, numpy as np, tapegrad as tg
    >>> def softplus_grad(x, y):
    ...     return 1.0 / (1.0 + math.exp(-x))
    >>> @tg.elementwise(derivative=softplus_grad)
    ... def softplus(x):
    ...     return max(x, 0.0) + math.log1p(math.exp(-abs(x)))
    >>> x = tg.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    >>> softplus(x).sum().backward()
    >>> np.allclose(x.grad.data, 1 / (1 + np.exp(-x.data)))
    True
    >>> softplus(x).grad_fn.name()
    'softplusBackward'

    With the second derivative, Hessians go through the op too:

    >>> def logistic(x, y):                 # softplus'' = s (1 - s), s = softplus'
    ...     s = 1.0 / (1.0 + math.exp(-x))
    ...     return s * (1.0 - s)
    >>> sp2 = tg.elementwise(softplus.forward, softplus_grad, second_derivative=logistic)
    >>> H = tg.hessian(lambda x: sp2(x).sum())(np.array([0.0, 1.0]))
    >>> np.allclose(H, np.diag([0.25, np.exp(-1) / (1 + np.exp(-1)) ** 2]))
    True

    Derived, the same derivatives without writing them:

    >>> @tg.elementwise
    ... def softplus3(x):
    ...     return max(x, 0.0) + math.log1p(math.exp(-abs(x)))
    >>> x = np.array([-1.0, 2.0])
    >>> np.allclose(tg.hessian(lambda x: softplus3(x).sum())(x),
    ...             tg.hessian(lambda x: sp2(x).sum())(x))
    True
    """
    if forward is None:
        return lambda f: elementwise(f, derivative, second_derivative=second_derivative,
                                     name=name)
    if derivative is None and callable(forward) and _arity(forward, "forward") in (1, 2):
        # derived from the forward's source (ops/derive.py); a given second derivative wins
        derivative, derived = derive(forward)
        second_derivative = derived if second_derivative is None else second_derivative
    for f, what in ((forward, "forward"), (derivative, "derivative"),
                    (second_derivative, "second derivative")):
        if f is not None and not callable(f):
            raise TypeError(f"tapegrad.elementwise: the {what} must be a function, "
                            f"got {type(f).__name__}")
    return ElementwiseOp(forward, derivative, name or forward.__name__, second_derivative)
