"""Hypothesis profiles: `ci` is repeatable (derandomized, no deadline); `fast` is ci at a fifth
of the examples (make test-fast; tests/profiles.examples scales the counts tests name); `dev`
digs deeper; `slow` is the issue-13 soundness sweep. Select with HYPOTHESIS_PROFILE (make test
uses ci)."""
import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "fast", derandomize=True, deadline=None, max_examples=8, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev", deadline=None, max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(  # issue 13's soundness sweep: >= 1000 graphs x every candidate
    "slow", deadline=None, max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# No test reads or writes the user's own tuned folder (~/.local/share/leantile/tuned): the
# lookup sees the shipped configurations and whatever a test saves in a folder of its own.
os.environ["LEANTILE_TUNED_DIR"] = tempfile.mkdtemp(prefix="leantile-tuned-")


# Files that take most of `make test` (13 of its ~36 CPU minutes: every generated graph's kernels
# lowered) go first: under xdist (--dist loadfile --no-loadscope-reorder, as make test runs it)
# the first file is the first one handed out, so the longest runs beside the others instead of
# after them (last in, it left one core idle for 10 minutes). The order within a file is kept
# (its coverage check runs after its sweeps).
FIRST = ("test_lower_generated.py",)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in FIRST)  # stable: the rest keep their order
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
