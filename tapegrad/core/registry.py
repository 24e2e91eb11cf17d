"""The op registry: one entry per differentiable operation.

An entry names the op (``grad_fn.name()`` is the name plus ``Backward``),
fixes its op code (the kernel family and sub code the sweep dispatches on),
and says how its forward is computed.  A code that some kernel switch has
no branch for is refused here (``kernels/coverage.py``).  Host ops (VJP in Python with NumPy,
for BLAS-bound work) carry their VJP function here as well.  The test suite
checks that every entry has a gradient test.

A host op's row is also the one place its other rules live, as a
primitive's rules sit beside it: its forward-mode tangent rule (``jvp``),
its second-order rule (``second``) and its ``create_graph`` VJP in
tapegrad's own ops (``graph_vjp``), each a function of the transform's
context object, or a string saying why the op has none, which the
transform reports.  The transforms read them from here
(:func:`rules`, a :class:`RowView`).
"""
from collections.abc import Mapping
from typing import Callable, NamedTuple, Optional, Union

from ..kernels import codes as C
from ..kernels.coverage import check as _check_handled
from ..kernels.optable import set_reads


class OpDef(NamedTuple):
    name: str                  # PyTorch-style node name without "Backward"
    code: int                  # kind << SHIFT | sub
    forward: Optional[Callable]  # the NumPy function that computes the value
    host_vjp: Optional[Callable] = None  # (tape, adjoints, r) -> None, for K_HOST
    #: the same for p adjoint vectors at once (``adjoints[r]`` is (p, size));
    #: without one, vector mode calls ``host_vjp`` once per vector
    batched_vjp: Optional[Callable] = None
    #: a host op's replay forward in a trace: ``(inputs, host info) -> value``
    replay: Optional[Callable] = None
    #: how many leading entries of its host info precede the input shapes
    host_extra: int = 0
    #: operands a tape file may give it (``"subscripts"``: one per einsum
    #: subscript); None: a file cannot hold it
    file_arity: object = None
    #: why a trace cannot replay it (None: it can)
    not_replayable: Optional[str] = None
    #: forward mode: ``(tape, tan, r) -> None`` writes the outputs' tangents
    #: through the tangent store ``tan``; or why there is none
    jvp: Union[Callable, str, None] = None
    #: second order (forward over reverse): ``(P, r) -> None`` adds the tangent
    #: of the VJP (outputs' gradients fixed) through the pass ``P``; or why none
    second: Union[Callable, str, None] = None
    #: create_graph: ``(W, r, u) -> None`` adds the VJP of the adjoint ``u``
    #: written in tapegrad's ops through the walk ``W``; or why there is none
    graph_vjp: Union[Callable, str, None] = None


REGISTRY = {}   # code -> OpDef
BY_NAME = {}    # name -> OpDef


def register(name, kind, sub, forward=None, host_vjp=None, batched_vjp=None, *, reads=None,
             replay=None, host_extra=0, file_arity=None, not_replayable=None, jvp=None,
             second=None, graph_vjp=None):
    """Add one op; returns its code.  Names and codes must be unique.

    A host op (``K_HOST``) also says which values its VJP reads (``reads``:
    ``"x"``, ``"y"``, both or ``""``; what the tape keeps for it), and
    either how a trace replays it (``replay``, ``host_extra``,
    ``file_arity``) or why it cannot (``not_replayable``): every table that
    needs those facts reads them from here.  It gives its other rules too,
    each a function or the reason it has none: ``jvp`` (forward mode),
    ``second`` (second order) and ``graph_vjp`` (``create_graph``)."""
    code = C.code(kind, sub)
    if code in REGISTRY or name in BY_NAME:
        raise ValueError(f"op {name!r} (code {code}) is registered twice")
    if (kind == C.K_HOST) != (host_vjp is not None):
        raise ValueError(f"op {name!r}: host_vjp is required exactly for host ops")
    if kind == C.K_HOST and (reads is None or (replay is None) == (not_replayable is None)):
        raise ValueError(f"op {name!r}: a host op says what its VJP reads, and either its "
                         "replay forward or why it has none")
    rules = {"jvp": jvp, "second": second, "graph_vjp": graph_vjp}
    for field, rule in rules.items():
        if kind == C.K_HOST and not (callable(rule) or isinstance(rule, str)):
            raise ValueError(f"op {name!r}: a host op gives its {field} rule, or a string "
                             "saying why it has none")
        if kind != C.K_HOST and rule is not None:
            raise ValueError(f"op {name!r}: only host ops carry a {field} rule")
    # a code that some kernel switch lacks would reach its NaN fallback: refuse
    # it now rather than give NaN (or worse) at the first sweep
    _check_handled(code)
    if reads is not None:
        set_reads(kind, sub, reads)
    d = OpDef(name, code, forward, host_vjp, batched_vjp, replay, host_extra, file_arity,
              not_replayable, jvp, second, graph_vjp)
    REGISTRY[code] = d
    BY_NAME[name] = d
    return code


def _given(value):
    return value is not None and value != 0


class RowView(Mapping):
    """One field of the registry's rows, for the rows that give it: by op
    code, or by op name (``by_name``). A rule field (``"jvp"``, ``"second"``,
    ``"graph_vjp"``: ``given=callable``) holds a function, or a string that
    :meth:`missing` returns, the reason the op has none. A live view, read
    again when rows were registered since."""

    def __init__(self, field, by_name=False, given=_given):
        self.field, self.by_name, self.given = field, by_name, given
        self.rows, self.seen = {}, -1

    def _rows(self):
        if self.seen != len(REGISTRY):
            self.rows = {(d.name if self.by_name else c): getattr(d, self.field)
                         for c, d in REGISTRY.items() if self.given(getattr(d, self.field))}
            self.seen = len(REGISTRY)
        return self.rows

    def __getitem__(self, key):
        return self._rows()[key]

    def __iter__(self):
        return iter(self._rows())

    def __len__(self):
        return len(self._rows())

    def missing(self, code):
        """Why op ``code`` has no such rule (its row's string), or ""."""
        value = getattr(REGISTRY.get(code), self.field, None)
        return value if isinstance(value, str) else ""


def rules(field):
    """The view of rule ``field`` by op code (see :class:`RowView`)."""
    return RowView(field, given=callable)


def differentiable_ops():
    """Names of every op with a VJP (what the gradient tests must cover)."""
    return sorted(d.name for d in REGISTRY.values()
                  if d.code >> C.SHIFT != C.K_NONE)


# Records that are not operations.
LEAF = register("AccumulateGrad", C.K_NONE, C.LEAF)
CONST = register("Constant", C.K_NONE, C.CONST)
OUTPUT = register("Output", C.K_NONE, C.OUTPUT)
FREED = register("Freed", C.K_NONE, C.FREED)
