"""HIPS autograd's own test suite, run against tapegrad through a thin shim.

    git clone https://github.com/HIPS/autograd /tmp/autograd
    python benchmarks/autograd_suite.py --tests /tmp/autograd/tests        # a summary
    python benchmarks/autograd_suite.py --tests /tmp/autograd/tests -v     # and every failure
    python benchmarks/autograd_suite.py --tests DIR --files test_linalg.py test_numpy.py

The tests are autograd's, unmodified, read from a checkout of autograd that
the user supplies (tapegrad ships none of them).
The shim replaces the ``autograd`` package in the test process:

* ``autograd.numpy`` *is* plain NumPy (``autograd.numpy.random`` is
  ``numpy.random``), plus the two helpers autograd's linalg tests call,
  ``np.linalg._dot`` and ``np.linalg.T``; ``autograd.tuple`` is ``tuple``;
* ``make_vjp`` (and so ``grad``, ``value_and_grad`` and ``check_grads``'s
  reverse mode) is ``tg.autograd.grad`` of ``Re <cotangent, output>`` over
  tapegrad leaves (``create_graph=True`` when nested, so ``check_grads``'s
  second order is tapegrad's reverse-over-reverse); ``make_jvp`` is
  ``tg.jvp``.  autograd's complex convention is the conjugate of PyTorch's
  (``grad = dL/dx - i dL/dy``), so complex gradients are conjugated;
* ``check_grads``, ``combo_check`` and the vector spaces are autograd's own
  code (its installed ``test_util`` and ``vspace``), so the checks are
  exactly autograd's.

That is why autograd must be installed (``pip install autograd``); without
it, or without ``--tests``, the script says so and exits 0.  The result is
counted per test (parametrised cases each), the failures grouped by cause.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ["test_numpy.py", "test_linalg.py", "test_scalar_ops.py", "test_binary_ops.py",
         "test_systematic.py", "test_complex.py"]


# -- the shim (installed by pytest_configure in the test process) -------------------------
def install_shim():
    import builtins
    import importlib.util
    import types

    import numpy as onp

    import autograd.core as real_core
    import autograd.numpy  # noqa: F401  (registers autograd's NumPy vector spaces)
    import autograd.test_util as real_test_util
    import autograd.wrap_util as real_wrap_util
    vspace = real_core.vspace
    unary_to_nary = real_wrap_util.unary_to_nary
    test_util_source = open(real_test_util.__file__).read()

    import tapegrad as tg
    for name in [m for m in sys.modules if m == "autograd" or m.startswith("autograd.")]:
        del sys.modules[name]

    def is_tensor(v):
        return isinstance(v, (tg.Tensor, tg.ComplexTensor))

    def flat(x):
        if isinstance(x, (builtins.tuple, list)):
            return [leaf for v in x for leaf in flat(v)]
        return [x]

    def unflat(like, leaves):
        it = iter(leaves)

        def build(x):
            if isinstance(x, (builtins.tuple, list)):
                return type(x)(build(v) for v in x)
            return next(it)
        return build(like)

    def is_complex(v):
        return isinstance(v, tg.ComplexTensor) or (not is_tensor(v) and onp.iscomplexobj(v))

    def arg(v):
        return v if is_tensor(v) else onp.asarray(
            v, onp.complex128 if onp.iscomplexobj(v) else onp.float64)

    def pairing(ys, gs):
        """Re sum(g * y) over the outputs: the real loss whose gradient, conjugated,
        is autograd's VJP (for a holomorphic f, g * f'(z), as autograd's rules)."""
        s = 0.0
        for yk, gk in zip(ys, gs):
            s = s + onp.sum(onp.real(yk) * onp.real(gk))
            if is_complex(yk) and is_complex(gk):
                s = s - onp.sum(onp.imag(yk) * onp.imag(gk))
        return s

    def make_vjp(fun, x):
        # every tensor the loss depends on is an argument of the function tg.grad
        # differentiates (tapegrad's transforms nest that way, not through closures)
        xs = [arg(v) for v in flat(x)]
        n = len(xs)
        y = fun(unflat(x, xs))

        def vjp(g):
            gs = [arg(v) for v in flat(g)]

            def loss(*a):
                return pairing(flat(fun(unflat(x, a[:n]))), a[n:])
            grads = tg.grad(loss, argnums=builtins.tuple(range(n)))(*xs, *gs)
            # autograd's convention for complex inputs: the conjugate of PyTorch's
            grads = [onp.conj(gk) if is_complex(xk) else gk for gk, xk in zip(grads, xs)]
            return unflat(x, grads)
        return vjp, y

    def jvp_by_two_vjps(fun, x, v):
        # J v = d/du <J^T u, v> at u = 0: differentiable again (reverse over reverse)
        xs, vs = [arg(u) for u in flat(x)], [arg(u) for u in flat(v)]
        n = len(xs)
        y = fun(unflat(x, xs))
        ys = flat(y)
        m = len(ys)
        u0 = [onp.zeros(onp.shape(yk)) for yk in ys]

        def outer(*a):
            u, xa, va = a[:m], a[m:m + n], a[m + n:]

            def inner(*b):
                return pairing(flat(fun(unflat(x, b[:n]))), b[n:])
            gx = tg.grad(inner, argnums=builtins.tuple(range(n)))(*xa, *u)
            return pairing(gx, va)
        jv = tg.grad(outer, argnums=builtins.tuple(range(m)))(*u0, *xs, *vs)
        return y, unflat(y, list(jv)) if isinstance(y, (builtins.tuple, list)) else jv[0]

    def make_jvp(fun, x):
        def jvp(v):
            if any(is_tensor(u) for u in flat(x) + flat(v)):
                # inside a differentiation (check_grads' second order): tg.jvp does
                # not nest, so the JVP is two reverse passes
                return jvp_by_two_vjps(fun, x, v)
            xs = builtins.tuple(arg(u) for u in flat(x))
            vs = builtins.tuple(arg(u) for u in flat(v))
            call = lambda *a: fun(unflat(x, a))  # noqa: E731
            y = call(*xs)
            if isinstance(y, (builtins.tuple, list)):
                pairs = [tg.jvp(lambda *a, k=k: flat(call(*a))[k], xs, vs)
                         for k in range(len(flat(y)))]
                return (unflat(y, [p[0] for p in pairs]), unflat(y, [p[1] for p in pairs]))
            return tg.jvp(call, xs, vs)
        return jvp

    def _grad(fun, x):
        vjp, ans = make_vjp(fun, x)
        if onp.size(ans) != 1:
            raise TypeError("Grad only applies to real scalar-output functions. "
                            "Try jacobian, elementwise_grad or holomorphic_grad.")
        return vjp(onp.ones(onp.shape(ans)))

    def _value_and_grad(fun, x):
        vjp, ans = make_vjp(fun, x)
        return ans, vjp(onp.ones(onp.shape(ans)))

    pkg = types.ModuleType("autograd")
    pkg.__path__ = []
    pkg.grad = unary_to_nary(_grad)
    pkg.value_and_grad = unary_to_nary(_value_and_grad)
    pkg.tuple = builtins.tuple
    pkg.list = builtins.list
    core = types.ModuleType("autograd.core")
    core.make_vjp, core.make_jvp, core.vspace = make_vjp, make_jvp, vspace

    anp = types.ModuleType("autograd.numpy")
    anp.__path__ = []
    anp.__getattr__ = lambda name: getattr(onp, name)
    linalg = types.ModuleType("autograd.numpy.linalg")
    linalg.__getattr__ = lambda name: getattr(onp.linalg, name)
    linalg._dot = lambda a, b: onp.einsum("...ij,...jk->...ik", a, b)
    linalg.T = lambda a: onp.swapaxes(a, -1, -2)
    anp.linalg, anp.random, anp.fft = linalg, onp.random, onp.fft

    sys.modules.update({"autograd": pkg, "autograd.core": core,
                        "autograd.wrap_util": real_wrap_util, "autograd.numpy": anp,
                        "autograd.numpy.linalg": linalg, "autograd.numpy.random": onp.random,
                        "autograd.numpy.fft": onp.fft})
    spec = importlib.util.spec_from_loader("autograd.test_util", loader=None)
    test_util = importlib.util.module_from_spec(spec)
    test_util.__package__ = "autograd"
    sys.modules["autograd.test_util"] = test_util
    exec(compile(test_util_source, real_test_util.__file__, "exec"), test_util.__dict__)
    if not NESTED_FORWARD:
        autograds_check_grads = test_util.check_grads

        @unary_to_nary
        def check_grads(f, x, modes=["fwd", "rev"], order=2):  # noqa: B006 (autograd's)
            """autograd's check_grads with its forward-mode checks at first order
            only (tapegrad's tg.jvp does not nest); the reverse-mode checks to
            autograd's order."""
            if "fwd" in modes:
                test_util.check_jvp(f, x)
            autograds_check_grads(f, 0, ["rev"], order)(x)
        check_grads.__module__ = "autograd.test_util"
        test_util.check_grads = check_grads
    pkg.core, pkg.numpy, pkg.test_util, pkg.wrap_util = core, anp, test_util, real_wrap_util


#: ``--nested-forward``: autograd's check_grads unchanged, its second-order
#: forward checks (jvp of jvp, vjp of jvp) included, which need tg.jvp to nest
NESTED_FORWARD = os.environ.get("AUTOGRAD_SUITE_NESTED_FORWARD") == "1"


def pytest_configure(config):
    install_shim()


# -- the runner --------------------------------------------------------------------------
CATEGORIES = [
    ("complex forward mode / nested complex differentiation",
     r"complex.*(jvp|forward|nest)|(jvp|forward|nest).*complex"),
    ("complex numbers elsewhere", r"complex"),
    ("a list or tuple of tensors converted by NumPy (np.array([t, ...]), np.mean([x, y]))",
     r"list of tensors|tg\.stack|converted to a NumPy array|was converted"),
    ("a NumPy function or ufunc tapegrad cannot differentiate",
     r"cannot differentiate|not supported on tensors|keyword\(s\)"),
    ("forward mode (jvp) not available for an op", r"jvp|forward-mode|forward mode"),
    ("second or higher order not available for an op",
     r"create_graph|second-order|no second|further order|hessian"),
    ("float32 results (tapegrad computes in float64)", r"float32"),
    ("a derivative check failed (different numbers)", r"check of .* failed|Value mismatch"),
    ("a function's output was cut off the graph", r"outside the graph|cut it off"),
]


def categorise(message):
    for name, pattern in CATEGORIES:
        if re.search(pattern, message, re.IGNORECASE | re.DOTALL):
            return name
    first = message.strip().splitlines()[0] if message.strip() else "?"
    return "other: " + first[:90]


def run(tests, files, verbose=False, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "report.xml")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([HERE, tests] + (
            [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "nc_autograd"))
        cmd = [sys.executable, "-m", "pytest", "-p", "autograd_suite", "-p",
               "no:cacheprovider", "-c", os.devnull, "--rootdir", tests, "-q",
               "-W", "ignore", f"--junitxml={xml}", *extra,
               *[os.path.join(tests, f) for f in files]]
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
        if not os.path.exists(xml):
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            raise SystemExit("autograd_suite: pytest produced no report")
        root = ET.parse(xml).getroot()
    per_file = collections.OrderedDict((f, [0, 0]) for f in files)
    cats = collections.Counter()
    examples = {}
    failures = []
    for case in root.iter("testcase"):
        mod = (case.get("classname") or "").split(".")[-1] + ".py"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped") is not None
        if skipped:
            continue
        per_file.setdefault(mod, [0, 0])
        per_file[mod][1] += 1
        if bad is None:
            per_file[mod][0] += 1
            continue
        msg = (bad.get("message") or "") + "\n" + (bad.text or "")[-1500:]
        cat = categorise(msg)
        cats[cat] += 1
        examples.setdefault(cat, f"{mod}::{case.get('name')}")
        failures.append((f"{mod}::{case.get('name')}", (bad.get("message") or "")[:300]))
    return per_file, cats, examples, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", default=None,
                    help="autograd's tests/ folder, from a checkout of HIPS/autograd")
    ap.add_argument("--files", nargs="*", default=FILES, help="test files to run")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every failure")
    ap.add_argument("-k", default=None, help="pytest -k expression")
    ap.add_argument("--nested-forward", action="store_true",
                    help="autograd's check_grads unchanged: second-order forward checks too")
    args = ap.parse_args(argv)
    try:
        import autograd  # noqa: F401
    except ImportError:
        print("autograd_suite: HIPS autograd is not installed (pip install autograd); "
              "its check_grads and vector spaces are needed, skipping")
        return 0
    if not args.tests or not os.path.isfile(os.path.join(args.tests, "test_numpy.py")):
        print("autograd_suite: pass --tests DIR, the tests/ folder of a checkout of "
              "HIPS/autograd (it holds test_numpy.py); skipping")
        return 0
    if args.nested_forward:
        os.environ["AUTOGRAD_SUITE_NESTED_FORWARD"] = "1"
    per_file, cats, examples, failures = run(args.tests, args.files, args.verbose,
                                             ["-k", args.k] if args.k else [])
    passed = sum(p for p, _ in per_file.values())
    total = sum(t for _, t in per_file.values())
    print(f"HIPS autograd's tests against tapegrad: {passed} / {total} pass")
    for f, (p, t) in per_file.items():
        print(f"  {f:22s} {p:4d} / {t:4d}")
    if cats:
        print("failures by cause:")
        for cat, n in cats.most_common():
            print(f"  {n:4d}  {cat}   (e.g. {examples[cat]})")
    if args.verbose:
        for name, msg in failures:
            print(f"FAIL {name}: {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
