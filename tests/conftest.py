import os

# The suite tests the compiled kernels: each compiles on its first call rather
# than starting in the interpreted tier, whose own tests (test_interpret.py)
# run it against the compiled one.
os.environ.setdefault("TAPEGRAD_INTERPRET", "0")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "fuzz", max_examples=1000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("TAPEGRAD_HYPOTHESIS_PROFILE", "ci"))
