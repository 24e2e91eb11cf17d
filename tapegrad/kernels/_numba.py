"""What of the kernels needs Numba itself: dispatcher classes, intrinsics,
overloads and the Numba types of the tape.

Importing Numba costs about half of ``import tapegrad``, and a program whose
kernels all run interpreted (kernels/interpret.py) never needs it.  So no
kernel module imports Numba: the decorators of kernels/_jit.py record the
functions, the kernels name the intrinsics below through placeholders
(:func:`tapegrad.kernels._jit.deferred`), and the first kernel that must
be compiled or loaded imports this module (:func:`_jit.materialize`), which
turns every recorded function into a Numba dispatcher and every
placeholder into what it stands for.

Intrinsics that call through a function pointer pass the tape tuple by
address: the caller stores it on its stack, the callee loads it back with
its arrays' reference-count fields cleared (:func:`_borrowed_load`), so the
callee neither increments nor releases them -- the caller's references keep
them alive, as the borrowed views of kernels/_views.py do.
"""
import numba
import numba.core.ccallback
import numba.core.registry
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .dtypes import V1 as _V1, float_dtype
from .unhandled import unhandled

carray = numba.carray
CPUDispatcher = numba.core.registry.CPUDispatcher

_I = types.Array(types.int64, 1, "C")
_F = types.Array(types.float64, 1, "C")
_B = types.Array(types.boolean, 1, "C")
#: the Numba type of the tape tuple (kernels/_views.py)
TAPE = types.Tuple((_I, _I, _I, _I, _I, _I, _F, _F, _F, _I, _I, _I, _I, _B))
#: the same for a float32 sweep: ``v1`` and ``vals`` are float32, which
#: says that every value and adjoint is (kernels/_views.py: float_dtype)
_F32 = types.Array(types.float32, 1, "C")
TAPE32 = types.Tuple(TAPE.types[:_V1] + (_F32, _F32) + TAPE.types[_V1 + 2:])
_TAPES = (TAPE, TAPE32)
#: the block sweeps' context (kernels/hvp.py): per-record adjoint strides,
#: tangent addresses, which records carry tangents, the vector count, and
#: whether second-order terms are wanted
BLOCK_CTX = types.Tuple((_I, _I, _B, types.int64, types.boolean))

#: signatures of the family entries (kernels/dispatch.py), by name:
#: ``int32 f(tape*, r, sub)``, the same with one more integer (a forward
#: family's ``faddr[r]`` or the tangent count), ``int32 f(tape*, ctx*, r, sub)``
SIGNATURES = {
    "SIG": types.int32(types.voidptr, types.int64, types.int64),
    "SIG_EXTRA": types.int32(types.voidptr, types.int64, types.int64, types.int64),
    "SIG_CTX": types.int32(types.voidptr, types.voidptr, types.int64, types.int64),
}


@intrinsic
def voidptr(typingctx, addr):
    """An integer address as a ``void*`` (for ``carray``)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return types.voidptr(addr), codegen


@intrinsic
def f64_bits(typingctx, x):
    """The bits of a float64 as an int64 (a bit cast: no conversion), for
    kernels/vecmath.py's exponent and mantissa arithmetic, which LLVM can
    vectorise where a call of ``math.frexp`` could not."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(x), codegen


@intrinsic
def bits_f64(typingctx, i):
    """The float64 whose bits are the int64 ``i`` (the inverse of ``f64_bits``)."""
    if i != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(i), codegen


def _call_codegen(n_ptrs):
    """Codegen of ``(*addr)(&a_1, .., &a_n, i_1, ..)``: the first ``n_ptrs``
    arguments after the address (tuples) are stored on the caller's stack
    and passed by address, the rest as int64."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        n_ints = len(args) - 1 - n_ptrs
        fnty = ir.FunctionType(ir.IntType(32), [cgutils.voidptr_t] * n_ptrs + [i64] * n_ints)
        fn = builder.inttoptr(context.cast(builder, args[0], signature.args[0], types.int64),
                              fnty.as_pointer())
        ptrs = [builder.bitcast(cgutils.alloca_once_value(builder, v), cgutils.voidptr_t)
                for v in args[1:1 + n_ptrs]]
        ints = [context.cast(builder, v, t, types.int64)
                for v, t in zip(args[1 + n_ptrs:], signature.args[1 + n_ptrs:])]
        return builder.call(fn, ptrs + ints)
    return codegen


@intrinsic
def call_entry(typingctx, addr, T, r, sub):
    """``(*addr)(&T, r, sub)`` for an entry of signature ``SIG``."""
    if not isinstance(addr, types.Integer) or T not in _TAPES:
        return None
    return types.int32(addr, T, r, sub), _call_codegen(1)


@intrinsic
def call_entry_extra(typingctx, addr, T, r, sub, extra):
    """``(*addr)(&T, r, sub, extra)`` for an entry of signature ``SIG_EXTRA``."""
    if not isinstance(addr, types.Integer) or T not in _TAPES:
        return None
    return types.int32(addr, T, r, sub, extra), _call_codegen(1)


@intrinsic
def call_entry_ctx(typingctx, addr, T, ctx, r, sub):
    """``(*addr)(&T, &ctx, r, sub)`` for an entry of signature ``SIG_CTX``."""
    if not isinstance(addr, types.Integer) or T != TAPE or ctx != BLOCK_CTX:
        return None
    return types.int32(addr, T, ctx, r, sub), _call_codegen(2)


def _borrowed_load(tuple_type):
    """An intrinsic ``load(ptr)``: the tuple of ``tuple_type`` a caller stored
    at ``ptr``, its arrays borrowed (reference-count fields cleared, so the
    callee neither increments nor releases them)."""
    @intrinsic
    def load(typingctx, ptr):
        if ptr != types.voidptr:
            return None

        def codegen(context, builder, signature, args):
            ptr_ty = context.get_value_type(tuple_type).as_pointer()
            tup = builder.load(builder.bitcast(args[0], ptr_ty))
            items = []
            for i, ty in enumerate(tuple_type.types):
                v = builder.extract_value(tup, i)
                if isinstance(ty, types.Array):
                    a = context.make_array(ty)(context, builder, value=v)
                    a.meminfo = cgutils.get_null_value(a.meminfo.type)
                    a.parent = cgutils.get_null_value(a.parent.type)
                    v = a._getvalue()
                items.append(v)
            return context.make_tuple(builder, tuple_type, items)

        return tuple_type(ptr), codegen

    return load


#: the tape tuple stored at a pointer by :func:`call_entry`, borrowed
load_tape = _borrowed_load(TAPE)
load_tape32 = _borrowed_load(TAPE32)
load_block_ctx = _borrowed_load(BLOCK_CTX)


def _double_fn(addr, xs):
    """Typing and codegen of ``(*addr)(x_1, .., x_n)`` for a C function of
    doubles returning a double (users' derivatives and forwards,
    kernels/user.py)."""
    if not isinstance(addr, types.Integer):
        return None
    n = len(xs)
    sig = types.float64(addr, *([types.float64] * n))

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * n)
        fn = builder.inttoptr(args[0], fnty.as_pointer())
        vs = [context.cast(builder, v, t, types.float64)
              for v, t in zip(args[1:], signature.args[1:])]
        return builder.call(fn, vs)

    return sig, codegen


@intrinsic
def call_d1(typingctx, addr, x):
    """``(*addr)(x)`` for a C function ``double f(double)``."""
    return _double_fn(addr, (x,))


@intrinsic
def call_d2(typingctx, addr, x, y):
    """``(*addr)(x, y)`` for a C function ``double f(double, double)``."""
    return _double_fn(addr, (x, y))


@intrinsic
def call_d3(typingctx, addr, a, b, y):
    """``(*addr)(a, b, y)`` for a C function ``double f(double, double, double)``."""
    return _double_fn(addr, (a, b, y))


@overload(float_dtype, inline="always")
def _float_dtype_compiled(T):
    # a constant of the tuple's type (kernels/_views.py)
    if T.types[_V1].dtype == types.float32:
        return lambda T: np.float32
    return lambda T: np.float64


@overload(unhandled, inline="always")
def _unhandled_compiled(sub):
    # compiled, an op switch's last branch is NaN (kernels/unhandled.py)
    return lambda sub: np.nan


# -- dispatchers -----------------------------------------------------------------------

class Tiered(CPUDispatcher):
    """A kernel whose first calls from Python may be interpreted
    (kernels/interpret.py); once compiled (or loaded from the cache) it is a
    plain dispatcher again, so its calls pay nothing for the choice."""

    #: what the one-line notice of a first compilation calls it
    what = None
    #: ``cached(name)`` and ``notice(what)`` of kernels/_jit.py, bound by
    #: it when it loads this module
    cached = notice = None

    def __call__(self, *args):
        if not self.overloads:
            from .interpret import loaded, run_as_python
            name = cache_name(self.py_func)
            done, result = run_as_python(self.py_func, lambda: Tiered.cached(name), self, args)
            if done:
                return result
            if not Tiered.cached(name):
                # getattr: another thread may have made this a plain
                # dispatcher (below) since the call began
                Tiered.notice(getattr(self, "what", None) or "the kernels")
            self.__class__ = CPUDispatcher
            result = CPUDispatcher.__call__(self, *args)
            loaded()  # Numba's start is paid: the next loads cost their size
            return result
        self.__class__ = CPUDispatcher
        return CPUDispatcher.__call__(self, *args)


class FromKernels(CPUDispatcher):
    """A dispatcher compiled without a CPython wrapper; called from Python
    (tests, debugging) it goes through a small compiled trampoline of the
    same arity, made on the first such call."""

    def __call__(self, *args):
        tramps = self.__dict__.setdefault("_trampolines", {})
        t = tramps.get(len(args))
        if t is None:
            names = ", ".join(f"a{i}" for i in range(len(args)))
            scope = {"target": self}
            exec(f"def trampoline({names}):\n    return target({names})\n", scope)
            t = tramps[len(args)] = njit(cache=False)(scope["trampoline"])
        return t(*args)


def cache_name(fn):
    """``module.qualname``, as Numba names a function's index file."""
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"


def plain_ints(dispatcher):
    """Type integer literals at call sites as plain integers (one
    compilation, not one per literal)."""
    typed = dispatcher.get_call_template

    def get_call_template(args, kws):
        return typed(tuple(types.unliteral(a) for a in args),
                     {k: types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    return dispatcher


def dispatcher(fn, how, options):
    """The Numba dispatcher of a kernel recorded by kernels/_jit.py:
    ``how`` is ``"kernel"``, ``"inner"`` or ``"inline"`` (see there)."""
    if how == "kernel":
        d = njit(**options)(fn)
        d.__class__ = Tiered
        return d
    if how == "inner":
        d = njit(no_cpython_wrapper=True, no_cfunc_wrapper=True, **options)(fn)
    else:
        d = plain_ints(njit(forceinline=True, no_cpython_wrapper=True, no_cfunc_wrapper=True,
                            **options)(fn))
    d.__class__ = FromKernels
    return d


def entry(fn, sig, options, caching):
    """``fn`` compiled now as a C function of the named signature."""
    cf = numba.core.ccallback.CFunc(fn, numba.core.sigutils.normalize_signature(SIGNATURES[sig]),
                                    {}, dict(options))
    if caching:
        cf.enable_caching()
    cf.compile()
    return cf
