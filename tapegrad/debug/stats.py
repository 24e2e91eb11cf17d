"""``tg.tape_stats()``: what this thread's tape holds, as ADOL-C's tapestats."""
import gc

import numpy as np

from ..core.registry import REGISTRY
from ..core.tape import current


class TapeStats(dict):
    """A dict of tape statistics that prints as a table.

    Keys: ``records``, ``live`` (records some live tensor or ``grad_fn``
    still reaches), ``freed`` (records a backward freed), ``by_op`` (a dict
    of op name -> records, largest first), ``bytes`` (a dict: ``values_v1``,
    ``values_arena``, ``values_refs``, ``adjoints``, ``metadata``, ``total``),
    ``hooked`` (records with hooks or retain_grad), ``traced`` (records with
    a source line from anomaly mode).
    """

    def as_dict(self):
        """A plain dict (nested dicts copied)."""
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self.items()}

    def __repr__(self):
        rows = [("records", self["records"]), ("  live", self["live"]),
                ("  freed", self["freed"]), ("  hooked", self["hooked"]),
                ("  traced", self["traced"])]
        lines = ["tape statistics (this thread)"]
        lines += [f"  {k:<22}{v:>14,}" for k, v in rows]
        lines.append("  records per op")
        lines += [f"    {k:<20}{v:>14,}" for k, v in self["by_op"].items()]
        lines.append("  bytes")
        for k, v in self["bytes"].items():
            lines.append(f"    {k:<20}{v:>14,}")
        return "\n".join(lines)


def _by_op(tape, n):
    """Records per op name (a tg.Function by its class, user ops by theirs)."""
    codes, counts = np.unique(tape.op[:n], return_counts=True)
    out = {}
    for c, k in zip(codes.tolist(), counts.tolist()):
        d = REGISTRY.get(c)
        if d is not None and d.name != "Function":
            out[d.name] = out.get(d.name, 0) + k
            continue
        from ..engine.graph import Node  # names that live per record
        for r in np.flatnonzero(tape.op[:n] == c).tolist():
            name = Node(tape.tok, r).name()
            name = name[:-len("Backward")] if name.endswith("Backward") else name
            out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _live(tape, n):
    """Records that live tensors and nodes still reach (as ``compact`` finds them)."""
    from ..engine.graph import Node
    from ..kernels.sweep import live_records
    from ..core.tensor import Tensor
    if not n:
        return 0
    tok = tape.live_tok()
    holders = [h for h in (gc.get_referrers(tok) if tok is not None else ())
               if (type(h) is Tensor or type(h) is Node) and h._tok is tok]
    if not holders:
        return 0
    roots = np.array([h._rec for h in holders], dtype=np.int64)
    tape.arg0[n] = tape.na
    keep = live_records((tape.op, tape.arg0, tape.size, None, tape.args), n, roots)
    # leaves' records are reached from the graphs above; count them too
    return int(keep.sum())


def tape_stats():
    """Statistics of this thread's tape: records, per op, memory.

    Returns a :class:`TapeStats` (a dict that prints as a table): the
    number of records, those live tensors still reach and those a backward
    freed, records per op name, and bytes of recorded values (one-element
    slots, the small-value arena, large arrays referenced), of the adjoint
    scratch arena kept for the next backward, and of the record metadata
    (op codes, parents, sizes, parameters).  ``bytes`` counts what is in
    use, except ``adjoints``, which is the arena's allocation.

    Examples
    --------
    >>> import tapegrad as tg
    >>> x = tg.tensor([1.0, 2.0], requires_grad=True)
    >>> y = tg.sin(x * 2).sum()
    >>> s = tg.tape_stats()
    >>> s["records"] >= 4 and s["by_op"]["Sin"] >= 1
    True
    >>> sum(s["by_op"].values()) == s["records"]
    True
    """
    tape = current()
    n = tape.n
    refs = {id(a): a.nbytes for a in tape.refs if a is not None}
    rec_meta = sum(getattr(tape, k).itemsize for k in
                   ("op", "arg0", "size", "ip0", "fp", "rix", "freed"))
    b = {
        "values_v1": 8 * n,
        "values_arena": 8 * tape.nv,
        "values_refs": int(sum(refs.values())),
        "adjoints": sum(int(a.nbytes) for a in (tape.scratch, tape.scratch32) if a is not None),
        "metadata": rec_meta * n + 8 * tape.na + 8 * tape.ni,
    }
    b["total"] = sum(b.values())
    return TapeStats(
        records=n,
        live=_live(tape, n),
        freed=int(tape.freed[:n].sum()),
        by_op=_by_op(tape, n),
        bytes=b,
        hooked=sum(1 for h in tape.hooks.values() if h),
        traced=len(tape.where),
    )
