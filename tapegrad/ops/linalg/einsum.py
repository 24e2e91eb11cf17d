"""Einstein summation (einsum) with its NumPy VJP and every transform's rule,
beside its registry row."""
import operator

import numpy as np

from ...kernels import codes as C
from ...core.registry import CONST, register
from ...core.tensor import Tensor
from ..host_records import _host
from ._common import _flat, _parents, _sum_terms, _tg


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum_parse(subscripts, shapes):
    """Subscripts with ``...`` written out as letters: ``(ins, out)``.

    The VJPs need one letter per axis: each ellipsis gets fresh letters,
    right-aligned across operands as NumPy broadcasts them.
    """
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    ins = ins.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(shapes)} operands")
    free = [c for c in _LETTERS if c not in spec]
    n_ell = [len(shp) - (len(s) - 3) if "..." in s else 0 for s, shp in zip(ins, shapes)]
    width = max(n_ell, default=0)
    ell, free = free[:width], free[width:]
    ins = [s.replace("...", "".join(ell[width - k:])) for s, k in zip(ins, n_ell)]
    if not arrow:  # implicit output: the ellipsis axes, then indices seen once, sorted
        seen = "".join(ins)
        out = "".join(ell) + "".join(sorted(c for c in set(seen)
                                            if seen.count(c) == 1 and c not in ell))
    else:
        out = out.replace("...", "".join(ell))
    return ins, out


#: below this many multiply-adds (the plain loop's count: the product of
#: every index's extent) ``np.einsum``'s own loop beats ``optimize=True``,
#: whose path search and BLAS calls cost 10-20 us and, on a busy machine,
#: start BLAS's thread pool (tens of ms): 2x2 to 32x32 products measured
#: 5.5 us against 18.9 us at 8x16x8, even at 32x32x32, 3.4x slower
#: without optimize at 64x64x64
EINSUM_LOOP_WORK = 1 << 15


def einsum_by_size(spec, *ops):
    """``np.einsum(spec, *ops)``, through BLAS (``optimize=True``) only where
    the contraction is large enough to pay for it (``EINSUM_LOOP_WORK``)."""
    terms = spec.split("->")[0].split(",")
    optimize = True  # an ellipsis, or a spec NumPy refuses: its path search says why
    if "." not in spec and all(len(t.strip()) == np.ndim(op) for t, op in zip(terms, ops)):
        extent = {}
        for term, op in zip(terms, ops):
            for c, n in zip(term.strip(), np.shape(op)):
                extent[c] = max(extent.get(c, 1), n)
        work = 1
        for n in extent.values():
            work *= n
        optimize = work >= EINSUM_LOOP_WORK
    return np.einsum(spec, *ops, optimize=optimize)


def _einsum_vjp(tape, adj, r):
    ins, out, *shapes, out_shape = tape.host[r]
    a0 = tape.arg0[r]
    parents = [tape.args[a0 + k] for k in range(len(ins))]
    values = [adj.value(tape, p, s) for p, s in zip(parents, shapes)]
    g = adj[r].reshape(out_shape)
    size = {}  # each index's extent after broadcasting (1 gives way, even to 0)
    for s, shp in zip(ins, shapes):
        for c, n in zip(s, shp):
            if size.get(c, 1) == 1:
                size[c] = n
    for k, p in enumerate(parents):
        if tape.op[p] == CONST:
            continue
        others = [ins[j] for j in range(len(ins)) if j != k]
        present = set(out).union(*others)
        uniq = "".join(dict.fromkeys(ins[k]))  # a repeated index (diagonal) once
        kept = "".join(c for c in uniq if c in present)
        spec = ",".join([out] + others) + "->" + kept
        gk = einsum_by_size(spec, g, *[values[j] for j in range(len(ins)) if j != k])
        own = dict(zip(ins[k], shapes[k]))
        # indices summed within operand k alone: its gradient is broadcast there
        for axis, c in enumerate(uniq):
            if c not in present:
                gk = np.expand_dims(gk, axis)
        gk = np.broadcast_to(gk, tuple(own[c] if c not in present else size[c] for c in uniq))
        # axes of operand k that broadcasting stretched: sum back to length 1
        stretched = tuple(i for i, c in enumerate(uniq) if own[c] == 1 and gk.shape[i] != 1)
        if stretched:
            gk = gk.sum(axis=stretched, keepdims=True)
        if len(uniq) == len(ins[k]):
            adj.add(p, np.ascontiguousarray(np.broadcast_to(gk, shapes[k])))
        else:  # a diagonal's gradient lands on the diagonal, zero elsewhere
            full = np.zeros(shapes[k])
            strides = {}
            for c, st in zip(ins[k], full.strides):
                strides[c] = strides.get(c, 0) + st
            diag = np.lib.stride_tricks.as_strided(
                full, tuple(own[c] for c in uniq), tuple(strides[c] for c in uniq),
                writeable=True)
            diag[...] = gk
            adj.add(p, full)


def _einsum_jvp(tape, tan, r):
    # linear in each operand: the sum over operands of the einsum with that
    # operand replaced by its tangents, which carry one more index for p
    ins, out, *shapes, out_shape = tape.host[r]
    parents = _parents(tape, r)
    values = [tan.value(tape, q, s) for q, s in zip(parents, shapes)]
    extra = next(c for c in _LETTERS if c not in "".join(ins) + out)
    terms = []
    for k, (q, s) in enumerate(zip(parents, shapes)):
        t = tan.lead(q, s)
        if t is None:
            continue
        spec = ",".join(extra + ins[j] if j == k else ins[j] for j in range(len(ins)))
        ops = [t if j == k else values[j] for j in range(len(ins))]
        terms.append(einsum_by_size(spec + "->" + extra + out, *ops))
    tan.put(r, np.broadcast_to(_sum_terms(*terms), (tan.p,) + tuple(out_shape)))


class _Probe:
    """A stand-in for the adjoints a host VJP writes: it reads one record's
    value as a given array, the output's adjoint as ``ybar``, and collects
    what the VJP adds to each record."""

    def __init__(self, P, r, swap, with_value):
        self.P, self.r, self.swap, self.with_value = P, r, swap, with_value
        self.got = {}

    def value(self, tape, q, shape):
        if q == self.swap:
            return self.with_value.reshape(shape)
        return self.P.adj.value(tape, q, shape)

    def __getitem__(self, q):
        assert q == self.r
        return self.P.ybar(q)

    def add(self, q, g):
        g = np.asarray(g, np.float64).reshape(-1)
        self.got[q] = self.got.get(q, 0.0) + g


def _einsum2(P, r):
    # multilinear: the term for operand i is its VJP with operand j's value
    # replaced by j's tangent, for every j != i, one direction at a time
    parents = P.parents(r)
    if len(set(parents)) != len(parents):
        raise NotImplementedError(
            "hessian: einsum with one tensor as several operands has no second-order "
            "rule yet")
    vjp = _einsum_vjp
    for j in parents:
        dj = P.dot(j)
        if dj is None:
            continue
        acc = {}
        for k in range(P.p):
            probe = _Probe(P, r, j, dj[k])
            vjp(P.tape, probe, r)
            for q, t in probe.got.items():
                if q != j:
                    acc.setdefault(q, np.zeros((P.p, t.size)))[k] += t
        for q, t in acc.items():
            P.add(q, t)


def _einsum_graph(W, r, u):
    tg = _tg()
    tape = W.tape
    ins, out, *shapes, out_shape = tape.host[r]
    parents = W.parents(r)
    values = [tg.reshape(W.x(p), s) for p, s in zip(parents, shapes)]
    g = tg.reshape(u, out_shape)
    size = {}
    for s, shp in zip(ins, shapes):
        for c, n in zip(s, shp):
            if size.get(c, 1) == 1:
                size[c] = n
    for k, p in enumerate(parents):
        if not W.dep[p]:
            continue
        others = [ins[j] for j in range(len(ins)) if j != k]
        present = set(out).union(*others)
        # an index repeated within the operand ("ii", "lli") reads its
        # diagonal: the gradient of the diagonal first, over the distinct
        # indices, then laid on the diagonal (below)
        uniq = "".join(dict.fromkeys(ins[k]))
        kept = "".join(c for c in uniq if c in present)
        spec = ",".join([out] + others) + "->" + kept
        gk = tg.einsum(spec, g, *[values[j] for j in range(len(ins)) if j != k])
        own = dict(zip(ins[k], shapes[k]))
        for axis, c in enumerate(uniq):
            if c not in present:
                gk = tg.expand_dims(gk, axis)
        gk = tg.broadcast_to(gk, tuple(own[c] if c not in present else size[c]
                                       for c in uniq))
        stretched = tuple(i for i, c in enumerate(uniq) if own[c] == 1 and gk.shape[i] != 1)
        if stretched:
            gk = tg.sum(gk, axis=stretched, keepdims=True)
        if len(uniq) != len(ins[k]):
            gk = _on_diagonal(tg, gk, uniq, ins[k], own, "".join(ins) + out)
        W.add(p, _flat(tg.broadcast_to(gk, shapes[k])))


def _on_diagonal(tg, gk, uniq, spec, own, used):
    """``gk`` (indices ``uniq``) laid on the diagonal of an operand whose
    subscripts ``spec`` repeat some of them: each repeat gets a fresh index
    tied to the first by an identity matrix, a constant of the graph."""
    fresh = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                 if c not in used)
    seen, full, eyes, ties = set(), "", [], []
    for c in spec:
        if c in seen:
            f = next(fresh)
            full += f
            ties.append(c + f)
            eyes.append(np.eye(own[c]))
        else:
            seen.add(c)
            full += c
    return tg.einsum(",".join([uniq] + ties) + "->" + full, gk, *eyes)


_EINSUM = register("Einsum", C.K_HOST, C.EINSUM, np.einsum, host_vjp=_einsum_vjp, reads="x",
                   replay=lambda xs, h: np.einsum(",".join(h[0]) + "->" + h[1], *xs),
                   host_extra=2, file_arity="subscripts",
                   jvp=_einsum_jvp, second=_einsum2, graph_vjp=_einsum_graph)


def _einsum_sublists(args):
    """NumPy's interleaved form ``einsum(op0, sublist0, op1, sublist1, ...,
    [sublist_out])`` as ``(subscripts, operands)``: integers 0-25 become
    ``A``-``Z`` and 26-51 ``a``-``z`` (as NumPy maps them, so the implicit
    output keeps their order), ``Ellipsis`` becomes ``...``."""
    args = list(args)
    out = args.pop() if len(args) % 2 else None

    def letters(sub):
        try:
            items = list(sub)
        except TypeError:
            raise TypeError("einsum: in the interleaved form each operand is followed by a "
                            f"list of subscripts, got {type(sub).__name__}") from None
        s = []
        for v in items:
            if v is Ellipsis:
                s.append("...")
                continue
            try:
                k = operator.index(v)
            except TypeError:
                raise TypeError("einsum: subscripts in a sublist must be integers or "
                                f"Ellipsis, got {v!r}") from None
            if not 0 <= k < 52:
                raise ValueError(f"einsum: subscript {k} is not within the valid range [0, 52)")
            s.append(chr(ord("A") + k) if k < 26 else chr(ord("a") + k - 26))
        return "".join(s)

    spec = ",".join(letters(sub) for sub in args[1::2])
    if out is not None:
        spec += "->" + letters(out)
    return spec, tuple(args[0::2])


def einsum(subscripts, *operands):
    """``numpy.einsum`` with explicit or implicit output, differentiable in
    every operand: ``...`` broadcasting, and repeated indices within one
    operand (diagonals such as ``'ii->i'``, ``'ii'``, ``'iij->j'``), whose
    gradient lands on that diagonal.  Subscripts are a string, or NumPy's
    interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (integer
    sublists, ``Ellipsis`` for ``...``), which is translated to one.

    Examples
    --------
    >>> import numpy as np, tapegrad as tg
    >>> a = tg.tensor(np.ones((2, 3)), requires_grad=True)
    >>> tg.einsum("ij,j->i", a, np.arange(3.0))
    tensor([3.0, 3.0], grad_fn=<EinsumBackward>)
    >>> m = tg.tensor(np.ones((2, 2)), requires_grad=True)
    >>> tg.einsum("ii", m).backward()      # the trace: gradient on the diagonal
    >>> m.grad
    tensor([[1.0, 0.0],
            [0.0, 1.0]])
    >>> np.einsum(a, [0, 1], np.arange(3.0), [1], [0])   # the interleaved form
    tensor([3.0, 3.0], grad_fn=<EinsumBackward>)
    """
    if not isinstance(subscripts, str):
        subscripts, operands = _einsum_sublists((subscripts,) + operands)
    ins, out = _einsum_parse(subscripts, [np.shape(x._data if isinstance(x, Tensor) else x)
                                          for x in operands])
    return _host(_EINSUM, lambda *d: einsum_by_size(subscripts, *d),  # BLAS when large
                 operands, extra=(ins, out))
