"""The methods of :class:`~tapegrad.tracing.function.TracedFunction` that push
tangents through a replay: ``jvp`` (the compiled tangent sweep of
``forward``), ``hvp``, ``hessian`` and ``sparse_hessian`` (the
forward-over-reverse passes of ``second``), with the checks of their
tangent arguments.

They are a base class of ``TracedFunction`` (``_TangentMethods``), kept
apart from the traced function's cache, replay and reverse methods because
they are the plumbing between a replay and the forward-mode and
second-order transforms; each takes the traces' lock (``_LOCK``) and a
replay from ``self._run`` as the reverse methods do.
"""
import math
import types

import numpy as np

from .replay import _LOCK
from .tape import _signature


class _TangentMethods:
    """``jvp``, ``hvp``, ``hessian``, ``sparse_hessian`` of a traced function
    (a class that defines ``_run(args, full)``, as ``TracedFunction``)."""

    @staticmethod
    def _split(args_and_t, who):
        """``(args, tangents)`` of a jvp/hvp call: ``(*args, tangents)``, or
        ``tg.jvp`` / ``tg.hvp``'s ``(primals, tangents)``, two tuples (a
        traced function's arguments are never tuples of arrays, so the forms
        are told apart); there the tangents may also come one per primal,
        those of the non-array (static) arguments ignored."""
        if len(args_and_t) == 2 and all(isinstance(a, (tuple, list)) for a in args_and_t):
            args, ts = tuple(args_and_t[0]), tuple(args_and_t[1])
            pos = _signature(args)[1]
            if len(ts) == len(args) != len(pos):
                ts = tuple(ts[i] for i in pos)
            return args, ts
        if not args_and_t:
            raise TypeError(f"{who}: give the arguments and then the tangents, or the two "
                            "tuples (primals, tangents)")
        return tuple(args_and_t[:-1]), args_and_t[-1]

    def _tangents(self, rep, ts, who, batched=None):
        """The tangent argument of jvp/hvp checked against the inputs, as
        ``([(p, size) float64 per input], p, batched)``."""
        from ..transforms.forward import sweep as FW
        if not isinstance(ts, (tuple, list)) and len(rep.in_shapes) == 1:
            ts = (ts,)  # one input: its tangent may come bare
        ts = FW._as_tuple(ts, "tangents")
        if len(ts) != len(rep.in_shapes):
            raise ValueError(f"{who}: {len(rep.in_shapes)} traced inputs but {len(ts)} "
                             "tangents; give one tangent per float-array argument")
        like = [types.SimpleNamespace(shape=s, dtype=d)
                for s, d in zip(rep.in_shapes, rep.in_dtypes)]
        ts, p, batch = FW._check_tangents(like, ts, batched)
        return [t.reshape(p, -1) for t in ts], p, batch

    def jvp(self, *args_and_tangents, batched=None):
        """``(f(*args), J t)`` by the compiled tangent sweep of ``tg.jvp`` over
        the replayed tape; ``tangents`` (the last argument) has one entry per
        float-array argument (a bare array when there is one), each of that
        argument's shape, or with one more leading axis p for a batch of p
        directions (``J t`` then has shape ``(p,) + out.shape``).
        ``tg.jvp``'s form ``ft.jvp(primals, tangents)`` (two tuples) and its
        ``batched`` give the same results.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: np.sin(x) * 2, np.zeros(2))
        >>> ft.jvp(np.array([0.0, np.pi]), np.array([1.0, 1.0]))[1]
        array([ 2., -2.])
        >>> ft.jvp(np.zeros(2), np.eye(2))[1]       # a batch: the Jacobian's rows
        array([[2., 0.],
               [0., 2.]])
        """
        from ..transforms.forward import sweep as FW
        from ..transforms.base import _root_span
        args, ts = self._split(args_and_tangents, "jvp")
        with _LOCK:
            rep, _ = self._run(args, full=True)
            try:
                flat, p, batch = self._tangents(rep, ts, "jvp", batched)
                value = rep.value()
                outs = []
                for root, shape, dt in rep.outputs():
                    t = np.zeros((p, int(np.prod(shape))))
                    if root is not None:
                        upto = _root_span(rep, root)
                        recs = [r for r in rep.leaf_rec if r < upto]
                        tan = FW._Tangents(rep, upto, np.array(recs or [root], np.int64), root)
                        if recs and tan.reached[root]:
                            per = max(int(tan.total), 1) * 8
                            chunk = int(max(1, min(p, FW.JACFWD_BYTES // per)))
                            for lo in range(0, p, chunk):
                                hi = min(p, lo + chunk)
                                tan.alloc(hi - lo)
                                for k, r in enumerate(rep.leaf_rec):
                                    if r < upto:
                                        tan.block(r)[...] = flat[k][lo:hi].T
                                FW._sweep(rep, tan, rep.arrays(tan) + (tan.reached,))
                                t[lo:hi] = tan.block(root).T
                    t = t.reshape((p,) + shape).astype(dt, copy=False)
                    outs.append(t if batch else t[0])
            finally:
                rep.release()
        value = value[()] if not rep.multi and value.ndim == 0 else value
        return value, (tuple(outs) if rep.multi else outs[0])

    def hvp(self, *args_and_v, batched=None):
        """``(grad, hvp)`` of a function with one output element, as
        ``tg.hvp(f, args, v)`` returns them (tuples with one array per
        float-array argument), by the forward-over-reverse pass of
        ``tg.hvp`` over the replayed tape.  ``v`` (the last argument) is as
        the tangents of :meth:`jvp`: a batch of p directions gives each
        ``hvp[i]`` the shape ``(p,) + x_i.shape``.  ``tg.hvp``'s form
        ``ft.hvp(primals, tangents)`` (two tuples) and its ``batched`` give
        the same results.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x ** 3).sum(), np.zeros(2))
        >>> g, hv = ft.hvp(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> g[0], hv[0]
        (array([ 3., 12.]), array([6., 0.]))
        >>> g, hv = ft.hvp((np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))   # as tg.hvp
        >>> hv[0]
        array([6., 0.])
        """
        from ..transforms.second import passes as second
        from ..transforms.base import _root_span
        args, ts = self._split(args_and_v, "hvp")
        with _LOCK:
            rep, _ = self._run(args, full=True)
            try:
                if rep.multi or int(np.prod(rep.out_shape)) != 1:
                    raise TypeError(
                        f"hvp: the function must return one number (a scalar); this one "
                        f"returned {'a tuple' if rep.multi else f'shape {rep.out_shape}'}")
                flat, p, batch = self._tangents(rep, ts, "hvp", batched)
                sizes = [int(np.prod(s)) for s in rep.in_shapes]
                if rep.root is None or rep.root in rep.leaf_rec:
                    # constant, or the output is an input: f is linear, H = 0
                    # (as tg.hvp's driver does, without a pass)
                    res = [(np.full(n, 1.0 if r == rep.root else 0.0), np.zeros((p, n)))
                           for n, r in zip(sizes, rep.leaf_rec)]
                else:
                    out = types.SimpleNamespace(_rec=rep.root)
                    leaves = [types.SimpleNamespace(size=n) for n in sizes]
                    upto = _root_span(rep, rep.root)
                    recs = [r if r < upto else None for r in rep.leaf_rec]
                    res, _ = second._hvp_pass(rep, out, leaves, recs, lambda k: flat[k], p)
            finally:
                rep.release()
        gs, hs = [], []
        for (g, hv), shape, dt in zip(res, rep.in_shapes, rep.in_dtypes):
            gs.append(np.array(g, dtype=dt).reshape(shape))
            hv = np.array(hv, dtype=dt).reshape((p,) + shape)
            hs.append(hv if batch else hv[0])
        return tuple(gs), tuple(hs)

    def hessian(self, *args):
        """The Hessian of a function with one output element at ``args``, as
        ``tg.hessian(f, argnums=...)`` over every float-array argument gives
        it: shape ``x.shape + x.shape`` for one such argument, else a tuple of
        tuples ``H[i][j]`` of shape ``x_i.shape + x_j.shape``.

        Forward-over-reverse over the replayed tape with all n unit
        directions in one pass.  The pass's layout, arenas and directions
        are kept with the trace, so a call replays the values and runs the
        two compiled sweeps -- the traced counterpart of
        ``jax.jit(jax.hessian(f))``.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x[0] ** 2) * x[1], np.zeros(2))
        >>> ft.hessian(np.array([1.0, 3.0]))
        array([[6., 2.],
               [2., 0.]])
        """
        from ..transforms.second.passes import split_blocks
        H, shapes, dtypes = self._hessian(args, False)
        rows = split_blocks(H, shapes, dtypes)
        return rows[0][0] if len(rows) == 1 else rows

    def sparse_hessian(self, *args):
        """The Hessian at ``args`` as its nonzeros, a ``tg.SparseHessian``
        over all float-array arguments' elements in order -- what
        ``tg.sparse_hessian(f, argnums=...)`` returns, with the structural
        pattern and its colouring found once, with the trace's plan.

        Examples
        --------
        >>> import numpy as np, tapegrad as tg
        >>> ft = tg.trace(lambda x: (x[:-1] * x[1:] ** 2).sum(), np.ones(4))
        >>> h = ft.sparse_hessian(np.arange(4.0))
        >>> h.rows, h.cols, h.colors
        (array([0, 1, 1, 1, 2, 2, 2, 3, 3]), array([1, 0, 1, 2, 1, 2, 3, 2, 3]), 3)
        """
        return self._hessian(args, True)[0]

    def _hessian(self, args, coo):
        """``(H or SparseHessian, input shapes, input dtypes)``."""
        from ..transforms.second import passes as second
        with _LOCK:
            rep, _ = self._run(args, full=True)
            try:
                if rep.multi or math.prod(rep.out_shape) != 1:
                    raise TypeError(
                        f"hessian: the function must return one number (a scalar); this one "
                        f"returned {'a tuple' if rep.multi else f'shape {rep.out_shape}'}")
                if rep.root in rep.leaf_rec:  # the output is an input: f is linear
                    n = sum(math.prod(s) for s in rep.in_shapes)
                    H = second.SparseHessian.zero(n) if coo else np.zeros((n, n))
                else:
                    H = second.replay_hessian(rep, coo)
                return H, list(rep.in_shapes), list(rep.in_dtypes)
            finally:
                rep.release()
