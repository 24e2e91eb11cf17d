"""Looking at the graph: ``grad_fn`` nodes and ``next_functions``.

A node is a handle on one record of the tape, not an object the tape keeps:
nodes reached from different tensors compare and hash equal when they stand
for the same record.  A node pins its record (like a tensor does) so the
graph it shows stays on the tape while the node is alive.
"""
from .ops.registry import FREED, LEAF, CONST, OUTPUT, REGISTRY


class Node:
    """The backward function of one record, as PyTorch's ``grad_fn`` objects."""

    __slots__ = ("_tape", "_epoch", "_rec", "_code", "__weakref__")

    def __init__(self, tape, rec):
        self._tape = tape
        self._epoch = tape.epoch
        self._rec = rec
        self._code = int(tape.op[rec])
        tape.pin(rec)

    def __del__(self):
        try:
            t = self._tape
            if self._epoch == t.epoch:
                t.unpin(self._rec)
        except AttributeError:
            pass

    def name(self):
        """``<Op>Backward``, e.g. ``AddBackward`` or ``UnbindBackward``."""
        return REGISTRY[self._code].name + "Backward"

    @property
    def next_functions(self):
        """One ``(node, output slot)`` pair per input, in argument order.

        Leaves that require grad appear as ``AccumulateGrad`` nodes, inputs
        that do not require grad as ``(None, 0)``.
        """
        t = self._tape
        if self._epoch != t.epoch or t.op[self._rec] == FREED:
            raise RuntimeError(
                f"the graph behind {self.name()} was freed by backward() and its "
                "tape reused; call backward(retain_graph=True) to keep it")
        out = []
        for j in range(t.arg0[self._rec], _end(t, self._rec)):
            out.append(_edge(t, int(t.args[j])))
        return tuple(out)

    def _key(self):
        return (id(self._tape), self._epoch, self._rec)

    def __eq__(self, other):
        return isinstance(other, Node) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

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


def _end(t, r):
    return t.arg0[r + 1] if r + 1 < t.n else t.na


def _edge(t, p):
    code = t.op[p]
    if code == CONST:
        return (None, 0)
    if code == LEAF:
        return (AccumulateGrad(t.leaves[p]), 0)
    if code == OUTPUT:
        slot = int(t.ip[t.ip0[p]])
        return (Node(t, p - 1 - slot), slot)
    return (Node(t, p), 0)


def node_of(tensor):
    t = tensor._tape
    r = tensor._rec
    if tensor._epoch != t.epoch:
        raise RuntimeError(
            "the graph of this tensor was freed by backward() and its tape reused; "
            "call backward(retain_graph=True) to keep it for inspection")
    if t.op[r] == OUTPUT:
        return Node(t, r - 1 - tensor._slot)
    return Node(t, r)


def freed_stub(tape, tensor):
    """Enter a tensor whose graph was freed and reset into the current tape."""
    r = tape.record(FREED, (), tensor._data)
    tape.freed[r] = True
    tensor._epoch = tape.epoch
    tensor._rec = r
    tape.refc[r] = 1  # freed records never count as pinned
    return r
