"""Looking at the graph: ``grad_fn`` nodes and ``next_functions``.

A node is a handle on one record of the tape, not an object the tape keeps:
nodes reached from different tensors compare and hash equal when they stand
for the same record.  A node holds the tape's epoch token (as a tensor does),
so the graph it shows stays on the tape while the node is alive.
"""
from ..kernels import codes as C
from ..core.registry import CONST, FREED, LEAF, OUTPUT, REGISTRY

FUNCTION = C.code(C.K_HOST, C.FUNCTION)  # see ops/function.py


class Node:
    """The backward function of one record, as PyTorch's ``grad_fn`` objects."""

    __slots__ = ("_tok", "_rec", "_code", "_user")

    def __init__(self, tok, rec):
        self._tok = tok
        self._rec = rec
        t = tok.tape
        self._code = code = int(t.op[rec])
        # a user op's name is read now: the node outlives its epoch's records
        self._user = None
        if code == FUNCTION:  # a tg.Function: the user's class name
            self._user = t.host[rec][0].__name__
        elif code >> C.SHIFT == C.K_USER:  # a tg.elementwise op: its name
            from ..ops.custom import USER_OPS
            self._user = USER_OPS[int(t.ip[t.ip0[rec]])].name

    def name(self):
        """``<Op>Backward``, e.g. ``AddBackward`` or ``UnbindBackward``."""
        if self._user is not None:
            return self._user + "Backward"
        return REGISTRY[self._code].name + "Backward"

    @property
    def next_functions(self):
        """One ``(node, output slot)`` pair per input, in argument order.

        Leaves that require grad appear as ``AccumulateGrad`` nodes, inputs
        that do not require grad as ``(None, 0)``.
        """
        t = self._tok.tape
        if t is None or not t.is_live(self._tok) or self._code == FREED:
            raise RuntimeError(
                f"the graph behind {self.name()} was freed by backward() and its "
                "tape reused; call backward(retain_graph=True) to keep it")
        r = self._rec
        end = t.arg0[r + 1] if r + 1 < t.n else t.na
        return tuple(_edge(t, int(p)) for p in t.args[t.arg0[r]:end])

    def __eq__(self, other):
        return isinstance(other, Node) and self._tok is other._tok and self._rec == other._rec

    def __hash__(self):
        return hash((id(self._tok), self._rec))

    def __repr__(self):
        return f"<{self.name()} object at record {self._rec}>"


class AccumulateGrad:
    """The node of a leaf that requires grad; ``variable`` is the leaf."""

    __slots__ = ("variable",)
    next_functions = ()

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "AccumulateGrad"

    def __eq__(self, other):
        return isinstance(other, AccumulateGrad) and other.variable is self.variable

    def __hash__(self):
        return hash(id(self.variable))

    def __repr__(self):
        return "<AccumulateGrad object>"


def _slot(t, r):
    """Output slot of an OUTPUT record (its only integer parameter)."""
    return int(t.ip[t.ip0[r]])


def _edge(t, p):
    code = t.op[p]
    if code == CONST:
        return (None, 0)
    if code == LEAF:
        return (AccumulateGrad(t.leaves[p]), 0)
    if code == OUTPUT:
        slot = _slot(t, p)
        return (Node(t.tok, p - 1 - slot), slot)
    q = origin(t, p)  # an input written without a record shows its node before the write
    if q != p:
        return _edge(t, q)
    return (Node(t.tok, p), 0)


def node_of(tensor):
    tok = tensor._tok
    t = tok.tape
    if t is None or not t.is_live(tok):
        return _FreedNode()
    # a write no graph records leaves the tensor's history as it was (PyTorch):
    # its node is the one it had before the write
    r = origin(t, tensor._rec)
    if t.op[r] == OUTPUT:
        return Node(tok, r - 1 - _slot(t, r))
    return Node(tok, r)


#: ops whose result PyTorch makes a view of its input (sharing its version
#: counter); basic indexing is among them too, noted per record (Tape.aliases)
VIEW_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Swapaxes",
            "Moveaxis", "Diagonal", "Split", "Unbind")
_view_codes = None


def view_codes():
    """The op codes of ``VIEW_OPS``, and OUTPUT (the pieces of split / unbind:
    a multi-output record's slots)."""
    global _view_codes
    if _view_codes is None:  # once every op module has registered its ops
        _view_codes = frozenset(c for c, d in REGISTRY.items() if d.name in VIEW_OPS) | {OUTPUT}
    return _view_codes


def is_view(tape, r):
    """Whether record r is a view of its input (in PyTorch's sense)."""
    return r in tape.aliases or int(tape.op[r]) in view_codes()


def origin(tape, r):
    """The record of the tensor now on record r, as graphs and gradients see it:
    the one it had before writes no graph recorded (``Tape.origin``; a graph
    recorded before such a write reads it), except that a view written so
    starts a new history at its write, as PyTorch's does (its grad_fn is made
    anew from its base's), so the walk stops above a view."""
    if not tape.stale.at:
        return r
    return tape.origin(r, lambda s: is_view(tape, s))


class _FreedNode:
    """What ``grad_fn`` shows once a freed graph's tape was reused."""

    __slots__ = ()

    def name(self):
        return "FreedBackward"

    @property
    def next_functions(self):
        raise RuntimeError(
            "the graph of this tensor was freed by backward() and its tape reused; "
            "call backward(retain_graph=True) to keep it for inspection")

    def __repr__(self):
        return "<FreedBackward object>"


from ..core.tape import TOKEN_HOLDERS  # noqa: E402
from ..core.tensor import bound  # noqa: E402

TOKEN_HOLDERS.add(Node)
# Tensor.grad_fn is this
bound.bind(node_of=node_of)
