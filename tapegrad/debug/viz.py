"""Pictures of the graph: Graphviz DOT text of what reaches a tensor.

Boxes are the ``grad_fn`` nodes (``MulBackward``, ``UnbindBackward``, ...)
with their output shapes, leaves that require grad (blue) and the output
(green); arrows run in the direction data flowed, from inputs to the
operations that used them, and an arrow from a multi-output op is labelled
with the output slot that ``next_functions`` shows.  Constants are not drawn.

Big graphs are summarised: a chain of three or more operations of one kind,
each the only user of the one before (``x = x * w`` in a loop), is drawn as
its first box, one box ``× k`` for the middle and its last box; if more than
``max_nodes`` boxes remain, those farthest from the output are folded into
one box that lists what it holds.

Shapes come from the tensors still alive, leaves, values the tape kept and
the op's parameters; where none of these tells, the box shows the element
count (``6 elements``).
"""
import gc

import numpy as np

from ..kernels import codes as C
from ..core.registry import CONST, FREED, LEAF, OUTPUT

_INSTALL = ("tg.viz.render needs the 'graphviz' Python package and Graphviz's "
            "'dot' program: pip install 'tapegrad[viz]' (or pip install graphviz) "
            "and install Graphviz with your system's package manager (e.g. "
            "apt-get install graphviz). tg.viz.to_dot(output) works without them.")


def _esc(s):
    return str(s).replace("\\", "\\\\").replace('"', '\\"')


def _fmt_shape(shape):
    if isinstance(shape, int):  # the shape is not known, the element count is
        return f"{shape:,} element" + ("s" if shape != 1 else "")
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


_NEXT = "next trip"  # the slot label of an edge from one trip of a loop to the next


class _Rolled:
    """A loop of the picture: ``body_of(box)``, the first trip's box that a
    box repeats; ``body(box)``, whether a box is drawn inside the frame."""

    def __init__(self, loop, boxes):
        self.trips = loop.trips
        at = {b: k for k, b in enumerate(boxes)}
        self._trip = {b: loop.trip_of(at[b]) for b in boxes}
        self._body = {b: boxes[loop.body_of(at[b])] for b in boxes}
        self._drawn = {self._body[b] for b in boxes if self._trip[b] >= 0}

    def body_of(self, box):
        return self._body.get(box, box)

    def trip(self, box):
        return self._trip.get(box, -1)

    def body(self, box):
        return box in self._drawn


def _roll(boxes, edges, op, label_name, size):
    """``boxes`` and ``edges`` with the longest repeated loop drawn once:
    every trip's boxes become the first trip's, an edge from one trip to a
    later one becomes a "next trip" edge; the loop (a :class:`_Rolled`), or
    None when no part of the graph repeats three times."""
    from .loops import find_loop, signatures
    ins = {}
    for s, d, slot in edges:
        ins.setdefault(d, []).append((s, op[s] == LEAF, slot))
    # the op and the element count (a shape may be known in one trip only)
    sig = signatures(boxes, lambda b: (label_name[b], int(size[b])), lambda b: ins.get(b, ()))
    found = find_loop(sig, min_period=2)  # a chain of one op folds instead (fold=)
    if found is None:
        return boxes, edges, None
    loop = _Rolled(found, boxes)
    new_edges = []
    for s, d, slot in edges:
        ts, td = loop.trip(s), loop.trip(d)
        if ts >= 0 and td >= 0 and td > ts:
            slot = _NEXT
        new_edges.append((loop.body_of(s), loop.body_of(d), slot))
    kept = [b for b in boxes if loop.trip(b) <= 0]
    return kept, list(dict.fromkeys(new_edges)), loop


def _graph_of(outputs):
    """(tape, root records, leaves that are themselves outputs)."""
    from ..core.tensor import Tensor
    tape, roots, leaf_outs = None, [], []
    for t in outputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"to_dot needs tensors, got {type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError("this tensor does not require grad: it has no graph to draw")
        if t._tok is None:
            leaf_outs.append(t)
            continue
        tp = t._tok.tape
        if tp is None or not tp.is_live(t._tok):
            raise RuntimeError(
                "the graph of this tensor was freed by backward() and its tape reused; "
                "draw it before backward or call backward(retain_graph=True)")
        if tape is not None and tp is not tape:
            raise RuntimeError("to_dot: the outputs were recorded on different threads")
        tape = tp
        roots.append(int(t._rec))
    return tape, roots, leaf_outs


def _parent_lists(tape):
    """``parents(r)``: record r's parents as a list (Python lists: a graph
    picture walks every record, and NumPy scalar indexing is slow for that)."""
    n = tape.n
    tape.arg0[n] = tape.na
    a0 = tape.arg0[:n + 1].tolist()
    args = tape.args[:tape.na].tolist()
    return lambda r: args[a0[r]:a0[r + 1]]


def _op_names(tape):
    """``name(r)``: r's node name, cached per op code where the code fixes it."""
    from ..engine.graph import FUNCTION, Node
    cache = {LEAF: "AccumulateGrad", FREED: "Freed"}
    per_record = (FUNCTION, getattr(C, "K_USER", -1))  # named by the user

    def name(r):
        code = int(tape.op[r])
        nm = cache.get(code)
        if nm is None:
            nm = Node(tape.tok, r).name()
            if code != per_record[0] and code >> C.SHIFT != per_record[1]:
                cache[code] = nm
        return nm
    return name


def _is_shape(x):
    return isinstance(x, tuple) and all(isinstance(d, (int, np.integer)) for d in x)


def _host_shape(info, size):
    """Output shape of a host record from what its VJP keeps (see ops/matrix.py,
    ops/function.py): an output shape last, a tg.Function's output shapes, or
    matmul's two operand shapes."""
    if not isinstance(info, tuple) or not info:
        return None
    cands = [info[-1]]
    if len(info) == 4 and isinstance(info[3], tuple) and len(info[3]) == 1:
        cands.append(info[3][0])                    # tg.Function, one output
    if len(info) == 2 and _is_shape(info[0]) and _is_shape(info[1]):
        sa, sb = info                               # matmul
        if len(sa) and len(sb):
            try:
                lead = np.broadcast_shapes(sa[:-2], sb[:-2])
            except ValueError:
                lead = None
            if lead is not None:
                cands.append(lead + sa[-2:-1] + sb[-1:] if len(sb) > 1 else lead + sa[-2:-1])
    for c in cands:
        if _is_shape(c) and int(np.prod(c)) == size:
            return tuple(int(d) for d in c)
    return None


def _shapes(tape, recs, parents):
    """Best-known output shape of each record in ``recs`` (ascending ids)."""
    from ..core.tensor import Tensor
    known = {}
    tok = tape.live_tok()
    for h in gc.get_referrers(tok) if tok is not None else ():
        if type(h) is Tensor and h._tok is tok:
            known[h._rec] = np.shape(h._data)
    for r, leaf in tape.leaves.items():
        known[r] = leaf.shape
    for r, w in tape.where.items():
        known.setdefault(r, w[3])
    shapes = {}
    n = tape.n
    op, size, rix, ip0 = (getattr(tape, k)[:n].tolist() for k in ("op", "size", "rix", "ip0"))
    ip = tape.ip
    for r in recs:
        s = known.get(r)
        if s is None and rix[r] >= 0 and tape.refs[rix[r]] is not None:
            s = np.shape(tape.refs[rix[r]])
        code = op[r]
        kind, sub = code >> C.SHIFT, code & C.MASK
        m = size[r]
        if s is None and kind == C.K_HOST:
            s = _host_shape(tape.host.get(r), m)
        if s is None and kind == C.K_NARY and ip0[r] > 0:
            nd = int(ip[ip0[r]])
            s = tuple(ip[ip0[r] + 1:ip0[r] + 1 + nd].tolist())
            if int(np.prod(s)) != m:
                s = None
        if s is None and (kind in (C.K_SCALAR, C.K_NARY)
                          or (kind == C.K_UNARY and sub < C.VIEW_FIRST)):
            # elementwise: the shape of an operand of the same size
            for p in parents(r):
                ps = shapes.get(p, known.get(p))
                if ps is not None and not isinstance(ps, int) and size[p] == m:
                    s = ps
                    break
        shapes[r] = tuple(s) if s is not None else m
    return shapes


def _summary(names):
    counts = {}
    for nm in names:
        counts[nm] = counts.get(nm, 0) + 1
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} × {v:,}" for k, v in items[:4])
    if len(items) > 4:
        text += ", …"
    return text


def to_dot(output, params=None, max_nodes=300, fold=True, roll=True):
    """Graphviz DOT text of the graph that reaches ``output``.

    Parameters
    ----------
    output : Tensor or sequence of Tensors
        The tensor(s) whose graph to draw (they must require grad).
    params : dict of name -> Tensor, optional
        Names for leaves, shown in their boxes (e.g. ``dict(W=W, b=b)``).
    max_nodes : int, default 300
        Boxes drawn at most; the rest (farthest from the output) are folded
        into one summary box.
    fold : bool, default True
        Fold chains of operations of one kind into ``× k`` boxes.
    roll : bool, default True
        Draw the body of a Python loop once (``debug/loops.py`` finds it),
        framed with its trip count; dashed "next trip" arrows carry the
        values one trip hands the next.

    Returns
    -------
    str
        The DOT source; render it with :func:`render`, the ``dot`` program,
        or any Graphviz viewer.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> a, b = tg.unbind(tg.sin(x))
    >>> dot = tg.viz.to_dot(a * b, params={"x": x})
    >>> print(dot.splitlines()[0])
    digraph tapegrad {
    >>> "SinBackward" in dot and "MulBackward" in dot and 'label="1"' in dot
    True
    """
    from ..kernels.sweep import live_records
    from ..core.tensor import Tensor
    outputs = [output] if isinstance(output, Tensor) else list(output)
    tape, roots, leaf_outs = _graph_of(outputs)
    names = {id(v): k for k, v in (params or {}).items()}
    lines = ["digraph tapegrad {",
             '  graph [rankdir=TB, fontname="Helvetica"];',
             '  node [shape=box, style="rounded,filled", fillcolor="#f2f2f2", '
             'fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for t in leaf_outs:  # an output that is itself a leaf: one box
        nm = _esc(names.get(id(t), "leaf"))
        lines.append(f'  leaf{id(t)} [label="{nm}\\n{_fmt_shape(t.shape)}", '
                     'fillcolor="#d1e7dd"];')
    if tape is None:
        lines.append("}")
        return "\n".join(lines) + "\n"

    n = tape.n
    tape.arg0[n] = tape.na
    keep = live_records((tape.op, tape.arg0, tape.size, None, tape.args), n,
                        np.array(roots, dtype=np.int64))
    recs = np.flatnonzero(keep).tolist()
    op = tape.op[:n].tolist()
    parents = _parent_lists(tape)

    # the boxes: every reached record but constants and output slots (their
    # op record's box stands for them, the slot labels the edge)
    def box_of(p):
        c = op[p]
        if c == OUTPUT:
            slot = int(tape.ip[tape.ip0[p]])
            return p - 1 - slot, str(slot)
        return p, None

    reached = set()
    stack = list(roots)
    while stack:  # what the roots reach, without the unused sibling slots
        r = stack.pop()
        if r in reached:
            continue
        reached.add(r)
        stack.extend(parents(r))
    boxes = [r for r in recs if r in reached and op[r] != CONST and op[r] != OUTPUT]
    for r in roots:
        if op[r] == OUTPUT:
            boxes.append(box_of(r)[0])
    boxes = sorted(set(boxes))
    shapes = _shapes(tape, recs, parents)
    name_of = _op_names(tape)
    label_name = {r: name_of(r) for r in boxes}

    edges = []  # (src box, dst box, slot label or None)
    for r in boxes:
        for p in parents(r):
            if op[p] == CONST:
                continue
            src, slot = box_of(p)
            edges.append((src, r, slot))
    loop = None
    if roll:
        boxes, edges, loop = _roll(boxes, edges, op, label_name, tape.size)
    consumers = {}
    inputs = {}
    for s, d, slot in edges:
        consumers.setdefault(s, []).append(d)
        inputs.setdefault(d, []).append((s, slot))

    # fold chains: box d continues box s's chain when s is d's input, s's only
    # consumer is d, both are the same op with the same shape
    rep = {r: r for r in boxes}     # box -> the box drawn for it
    folded = {}                     # middle box id -> (first, last, count)
    if fold:
        nxt = {}
        for s, d, slot in edges:
            if (slot is None and s != d and consumers[s] == [d] and op[s] != LEAF
                    and op[s] != FREED and label_name[s] == label_name[d]
                    and shapes[s] == shapes[d] and s not in nxt):
                nxt[s] = d
        has_prev = set(nxt.values())
        for s in boxes:
            if s in has_prev or s not in nxt:
                continue
            chain = [s]
            while chain[-1] in nxt:
                chain.append(nxt[chain[-1]])
            if len(chain) < 4:
                continue
            mid = chain[1:-1]
            folded[mid[0]] = len(mid)
            for m in mid:
                rep[m] = mid[0]
    drawn = sorted({rep[r] for r in boxes})

    # cap: keep the boxes nearest the outputs (by edges), fold the rest
    hidden = set()
    if len(drawn) > max_nodes:
        dist = {rep[loop.body_of(box_of(r)[0]) if loop else box_of(r)[0]]: 0 for r in roots}
        for d in sorted(drawn, reverse=True):
            if d not in dist:
                continue
            for m in [b for b in boxes if rep[b] == d] if d in folded else [d]:
                for s, _ in inputs.get(m, ()):
                    s = rep[s]
                    if s != d and (s not in dist or dist[s] > dist[d] + 1):
                        dist[s] = dist[d] + 1
        # leaves are what users look for: keep them unless there are many
        few = sum(1 for b in drawn if op[b] == LEAF) <= max_nodes // 4
        order = sorted(drawn, key=lambda b: (not (few and op[b] == LEAF),
                                             dist.get(b, 1 << 60), -b))
        hidden = set(order[max(max_nodes - 1, 1):])

    root_boxes = {rep[loop.body_of(box_of(r)[0]) if loop else box_of(r)[0]] for r in roots}
    node_lines, body_lines = [], []
    for d in drawn:
        if d in hidden:
            continue
        nm = _esc(label_name[d])
        if tape.size[d] == 0 and op[d] != LEAF:  # a multi-output op: its slots
            k = 0
            while d + 1 + k < n and op[d + 1 + k] == OUTPUT and parents(d + 1 + k) == [d]:
                k += 1
            shp = f"{k} outputs"
        else:
            shp = _fmt_shape(shapes[d])
        if op[d] == LEAF:
            given = _esc(names.get(id(tape.leaves.get(d)), "leaf"))
            label = f"{given}\\n{shp}"
            attrs = ', fillcolor="#cfe2ff"'
        elif d in folded:
            label = f"{nm} × {folded[d]:,}\\n{shp}"
            attrs = ', style="rounded,filled,dashed", fillcolor="#fff3cd"'
        else:
            label = f"{nm}\\n{shp}"
            attrs = ""
        if d in root_boxes:
            attrs = ', fillcolor="#d1e7dd"'
        (body_lines if loop and loop.body(d) else node_lines).append(
            f'  r{d} [label="{label}"{attrs}];')
    lines += node_lines
    if body_lines:  # the loop's body, once, in a frame that says how often it ran
        lines.append(f'  subgraph cluster_loop {{ label="loop: {loop.trips:,} trips"; '
                     'style="rounded,dashed"; color="#6c757d"; fontname="Helvetica";')
        lines += ["  " + ln for ln in body_lines]
        lines.append("  }")
    if hidden:
        lines.append(f'  hidden [label="{len(hidden):,} more boxes: '
                     f'{_esc(_summary(label_name[h] for h in hidden))}", '
                     'style="rounded,filled,dashed", fillcolor="#fff3cd"];')
    seen = set()
    for s, d, slot in edges:
        s, d = rep[s], rep[d]
        if s == d:
            continue
        s = "hidden" if s in hidden else f"r{s}"
        d = "hidden" if d in hidden else f"r{d}"
        if s == d or (s, d, slot) in seen:
            continue
        seen.add((s, d, slot))
        if slot == _NEXT:  # a value one trip hands the next
            lab = ' [label="next trip", style=dashed, color="#6c757d", constraint=false]'
        else:
            lab = f' [label="{slot}"]' if slot is not None else ""
        lines.append(f"  {s} -> {d}{lab};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(output, filename, params=None, max_nodes=300, fold=True, roll=True):
    """Draw the graph that reaches ``output`` into ``filename``.

    The format follows the file's extension (``.svg``, ``.png``, ``.pdf``,
    ...).  Needs the ``graphviz`` Python package (the ``viz`` extra) and
    Graphviz's ``dot`` program; :func:`to_dot` does not.  Returns the path.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> tg.viz.render(tg.sin(x), "graph.svg")  # doctest: +SKIP
    'graph.svg'
    """
    try:
        import graphviz
    except ImportError:
        raise ImportError(_INSTALL) from None
    import os
    fmt = os.path.splitext(str(filename))[1].lstrip(".").lower() or "svg"
    src = graphviz.Source(to_dot(output, params, max_nodes, fold, roll))
    try:
        data = src.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise RuntimeError(_INSTALL) from None
    with open(filename, "wb") as f:
        f.write(data)
    return str(filename)
