"""The host linear-algebra ops, one module per op or small family, each with
its public function, NumPy VJP and every transform's rule beside its
registry row.

A module holds, for its op: the public function, the NumPy VJP (and the
batched one where there is one), and the rules its ``register(...)`` row
gives the transforms, all written against the context object the
transform passes and NumPy:

* ``jvp=`` -- forward mode, ``(tape, tan, r)``: reads the parents' tangents
  as ``(p,) + shape`` arrays (``tan.lead``; None where a parent does not
  depend on the inputs) and writes the outputs' (``tan.put``);
* ``second=`` -- second order, ``(P, r)``: the tangent of the VJP with the
  outputs' gradients held fixed, for p directions at once, reading the
  outputs' tangents that the forward sweep computed (so both share one
  derivative convention);
* ``graph_vjp=`` -- ``create_graph``, ``(W, r, u)``: the VJP written in
  tapegrad's own ops; a decomposition's factors are its output records, so a
  further order differentiates through the same formula again.

Every rule shares its VJP's conventions and limits: symmetric gradients for
the records of cholesky, eigh and hermitian svd / pinv (their input is the
symmetric matrix of the triangle NumPy reads, recorded before them),
distinct eigen- and singular values where vectors are used, constant rank
for pinv and lstsq.  ``ops/matrix.py`` holds matmul the same way and is the
namespace that gathers them all; ``_common.py`` has the helpers they share.
"""
