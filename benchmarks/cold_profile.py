"""Where a cold start's time goes: every Numba compilation a program triggers.

    python benchmarks/cold_profile.py examples/seeds.py
    python benchmarks/cold_profile.py -c "import tapegrad as tg; ..."

Runs the program with a fresh, empty ``NUMBA_CACHE_DIR`` (unless ``--warm``)
and prints, per compiled function and signature, the compile time including
and excluding the functions it compiled on the way (callees are compiled while
the caller is typed), slowest first, and the loads from the cache.
"""
import os
import subprocess
import sys
import tempfile

_CHILD = r'''
import atexit, runpy, sys, time
from numba.core import event as ev

stack, rows, loads = [], [], []

class L(ev.Listener):
    def on_start(self, e):
        stack.append([e.data["dispatcher"], e.data["args"], time.perf_counter(), 0.0])
    def on_end(self, e):
        d, args, t0, child = stack.pop()
        dt = time.perf_counter() - t0
        if stack:
            stack[-1][3] += dt
        rows.append((dt, dt - child, f"{d.py_func.__module__}.{d.py_func.__qualname__}", args, len(stack)))

ev.register("numba:compile", L())
t0 = time.perf_counter()

@atexit.register
def report():
    total = time.perf_counter() - t0
    excl = sum(r[1] for r in rows)
    print(f"\n--- {len(rows)} compilations, {excl:.1f} s of {total:.1f} s "
          f"(depth 0: {sum(r[0] for r in rows if r[4] == 0):.1f} s)", file=sys.stderr)
    print(f"{'incl s':>8} {'excl s':>8}  function (args)", file=sys.stderr)
    for incl, ex, name, args, depth in sorted(rows, key=lambda r: -r[1]):
        a = ", ".join(str(x) for x in args)
        print(f"{incl:8.2f} {ex:8.2f}  {'  ' * depth}{name} ({a[:90]})", file=sys.stderr)

if sys.argv[1] == "-c":
    sys.argv = ["-c"] + sys.argv[3:]
    exec(compile(sys.argv_code if False else __import__("sys").orig_code, "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
'''


def main(argv):
    warm = "--warm" in argv
    argv = [a for a in argv if a != "--warm"]
    env = dict(os.environ)
    tmp = None
    if not warm:
        tmp = tempfile.TemporaryDirectory()
        env["NUMBA_CACHE_DIR"] = tmp.name
    child = _CHILD
    if argv[0] == "-c":
        child = child.replace('__import__("sys").orig_code', repr(argv[1]))
    subprocess.run([sys.executable, "-c", child, *argv], env=env, check=False)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main(sys.argv[1:])
