"""asv benchmark suite for tapegrad (see ``bench_core`` and ``workloads``)."""
import os

# Warm hot paths: every kernel compiles on its first call, none runs in the
# interpreted tier (kernels/interpret.py) while it is being timed.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

# Fused runs sweep with their own compiled loops from the first sweep
# (tapegrad/engine/fused_codegen.py): the steady state of a long-running process.
os.environ.setdefault("TAPEGRAD_FUSE_LOOPS", "now")
