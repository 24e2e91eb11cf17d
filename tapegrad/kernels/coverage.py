"""The registry's check that every op code has a branch in every switch it
passes through (see kernels/unhandled.py for the fallback it looks for) and
a row in the elementwise op table.

It runs the kernels' sources as plain Python (``as_python``: no compilation),
so it can sit above every kernel module; nothing in ``kernels/`` imports it.
"""
import numpy as np

from . import codes as C
from . import optable
from . import replay as R
from . import rules as RU
from . import vecmath  # noqa: F401  (adds its whole-array stand-ins first)
from .interpret import STAND_INS, python_copy
from .unhandled import FAMILIES, KINDS, UnhandledCode

#: the interpreted tier's stand-ins, less its NaN fallback: here an op switch's
#: last branch must raise, to be seen
_STRICT = {k: v for k, v in STAND_INS.items() if k != "unhandled"}


def as_python(fn):
    """A kernel's source as a plain Python function, whose calls of other
    kernels run their sources too (so nothing is compiled); an op switch's
    fallback raises :class:`UnhandledCode`."""
    return python_copy(fn, _STRICT)


def reaches_fallback(fn, *args):
    """True if ``fn(*args)`` run as Python takes its ``unhandled`` branch.
    Any other exception (a domain error at the probe values) means some
    branch took the code."""
    try:
        with np.errstate(all="ignore"):
            as_python(fn)(*args)
    except UnhandledCode:
        return True
    except Exception:
        return False
    return False


def switches(kind, sub):
    """``(name, fn, args)`` of every scalar switch that code ``kind, sub``
    passes through: its derivative (reverse and forward mode), its second
    derivative where it has one, its replayed forward."""
    x, y, c = 0.5, 0.25, 0.75  # probes: any values reach the op's branch
    out = []
    if kind == C.K_UNARY:
        out += [("d_unary", RU.d_unary, (sub, x, y)), ("f_unary", RU.f_unary, (sub, x))]
        if as_python(RU.unary_has_d2)(sub):
            out.append(("d2_unary", RU.d2_unary, (sub, x, y)))
    elif kind == C.K_SCALAR:
        out += [("d_scalar", RU.d_scalar, (sub, x, y, c)),
                ("f_scalar", RU.f_scalar, (sub, x, c))]
        if as_python(RU.scalar_has_d2)(sub):
            out.append(("d2_scalar", RU.d2_scalar, (sub, x, y, c)))
    elif kind == C.K_NARY and sub != C.WHERE:  # where: its own branch in every kernel
        out += [("d_binary", RU.d_binary, (sub, x, c, y)),
                ("f_binary", RU.f_binary, (sub, x, c))]
        if as_python(RU.nary_has_d2)(sub):
            out.append(("d2_binary", RU.d2_binary, (sub, x, c, y)))
    elif kind == C.K_NONE and sub >= R.CMP_FIRST:
        out.append(("f_compare", R.f_compare, (sub, x, c)))
    return out


def check(code):
    """Raise ``UnhandledCode`` naming the switch when op ``code`` would reach
    the fallback of a switch it must pass through."""
    kind, sub = code >> C.SHIFT, code & C.MASK
    if kind not in KINDS:
        raise UnhandledCode(f"op code {code}: kind {kind} is not one the sweeps dispatch on")
    if kind in FAMILIES and sub not in FAMILIES[kind]:
        raise UnhandledCode(f"op code {code}: sub code {sub} of kind {kind} has no branch in "
                            "its kernels (kernels/unhandled.py: FAMILIES)")
    for name, fn, args in switches(kind, sub):
        if reaches_fallback(fn, *args):
            raise UnhandledCode(f"op code {code} (kind {kind}, sub {sub}) has no branch in "
                                f"{name}; add one there")
    if kind in optable.TABLE and sub not in optable.TABLE[kind]:
        raise UnhandledCode(f"op code {code}: elementwise sub code {sub} of kind {kind} has "
                            "no row in kernels/optable.py (what its derivatives read, how "
                            "it curves); add one there")
