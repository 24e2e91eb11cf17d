"""The two questions tapegrad exists to answer, answered by running it.

1. What are the numbers passed to ``backward(gradient)``?  They weight the
   outputs: ``y.backward(v)`` leaves ``v^T dy/dx`` (a vector-Jacobian
   product) in each leaf's ``.grad``, and gradients accumulate across calls.
2. What is the second element of each pair in ``grad_fn.next_functions``?
   The output slot: which output of a multi-output op (here ``unbind``) the
   input was.
"""
import numpy as np

import tapegrad as tg

print("Example 1: y = 3a + 2b^2 + log(c), seeded with [0.1, 1.0, 0.0001]")
a = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
b = tg.tensor([3.0, 4.0, 5.0], requires_grad=True)
c = tg.tensor([6.0, 7.0, 8.0], requires_grad=True)
y = 3 * a + 2 * b * b + np.log(c)          # plain NumPy calls record too
y.backward(np.array([0.1, 1.0, 0.0001]), retain_graph=True)
print("  a.grad =", a.grad)                 # 0.1*3, 1.0*3, 0.0001*3
print("  b.grad =", b.grad)                 # v * 4b
print("  c.grad =", c.grad)                 # v / c

print("Example 2: scalars, implicit seed 1")
a = tg.tensor(0.1, requires_grad=True)
b = tg.tensor(1.0, requires_grad=True)
c = tg.tensor(0.1, requires_grad=True)
y = 3 * a + 2 * b * b + tg.log(c)
y.backward()
print("  a.grad =", a.grad, " b.grad =", b.grad, " c.grad =", c.grad)

print("Example 4: retain_graph, then a second backward accumulates")
a = tg.tensor(1.0, requires_grad=True)
b = tg.tensor(1.0, requires_grad=True)
c = tg.tensor(1.0, requires_grad=True)
y = 3 * a + 2 * b * b + tg.log(c)
y.backward(retain_graph=True)
y.backward()
print("  a.grad =", a.grad, " b.grad =", b.grad, " c.grad =", c.grad)
try:
    y.backward()
except RuntimeError as e:
    print("  a third backward:", str(e).split(".")[0] + ".")

print("next_functions: (node, output slot) pairs")
a, b = tg.tensor(np.random.default_rng(0).standard_normal(2), requires_grad=True).unbind()
c = a + b
print("  c.grad_fn.next_functions =", c.grad_fn.next_functions)
(na, sa), (nb, sb) = c.grad_fn.next_functions
print("  same UnbindBackward node:", na == nb, "| slots:", sa, sb)
