import os

# The suite tests the compiled kernels: each compiles on its first call rather
# than starting in the interpreted tier, whose own tests (test_interpret.py)
# run it against the compiled one.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

from hypothesis import HealthCheck, settings

# The default profile is deterministic: every run draws the same examples
# (derandomize: seeded by each test's own code) and no example database is
# read or written, so a failure that Hypothesis once found and stored in
# .hypothesis/ cannot make one checkout's run differ from a fresh one, and
# no test passes or fails by the luck of the draw.  Tests that set their own
# settings inherit both unless they say otherwise (the long fuzz runs do).
# TAPEGRAD_HYPOTHESIS_PROFILE=fuzz explores: random draws, 1,000 per test.
settings.register_profile(
    "ci", max_examples=20, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "fuzz", max_examples=1000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("TAPEGRAD_HYPOTHESIS_PROFILE", "ci"))


# TAPEGRAD_STRESS runs the suite with the tape's heuristics pushed to the
# paths they otherwise take only on large or long programs, so that every
# test checks those paths too (comma-separated modes):
#   search   every backward searches its root's graph (not only past
#            GRAPH_SEARCH_FROM records or after frees and stale writes)
#   fuse     every run of elementwise records above SMALL elements goes
#            through the fused reverse sweep (not only from FUSE_MIN)
#   compact  a compaction is tried at every op that fetches the tape: any
#            moment a compaction (which renumbers records) may happen, it
#            must change no result.  Slow (a gc scan per op); the tests that
#            count records or test the compaction trigger, and the memory
#            loops, are skipped.
STRESS = {m for m in os.environ.get("TAPEGRAD_STRESS", "").split(",") if m}
if STRESS - {"search", "fuse", "compact"}:
    raise ValueError(f"TAPEGRAD_STRESS: unknown modes {sorted(STRESS - {'search', 'fuse', 'compact'})}; "
                     "use search, fuse and compact, separated by commas")
if "search" in STRESS:
    from tapegrad.engine import backward as _autograd
    _autograd.GRAPH_SEARCH_FROM = 0
    _autograd.STALE_SEARCH_FROM = 0
if "fuse" in STRESS:
    from tapegrad.engine import fused as _fused
    from tapegrad.kernels._views import SMALL as _SMALL
    _fused.FUSE_MIN = _SMALL + 1
    _fused._Rent.hot = True
if "compact" in STRESS:
    from tapegrad.core import liveness as _liveness
    from tapegrad.core.tape import NO_COMPACTION as _NO_COMPACTION, Tape as _Tape
    _Tape.CHECK_RECORDS = 1
    _compact = _liveness._Liveness.compact

    def _compact_at_every_op(self):
        _compact(self)
        if self.check_at < _NO_COMPACTION:
            self.check_at = self.n + 1

    _liveness._Liveness.compact = _compact_at_every_op


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "compaction_trigger: counts the tape's records or tests when it "
        "compacts (skipped under TAPEGRAD_STRESS=compact, which compacts at every op)")


def pytest_collection_modifyitems(config, items):
    import pytest
    if "compact" not in STRESS:
        return
    skip = pytest.mark.skip(reason="TAPEGRAD_STRESS=compact compacts at every op")
    for item in items:
        if "compaction_trigger" in item.keywords or item.fspath.basename == "test_memory.py":
            item.add_marker(skip)
