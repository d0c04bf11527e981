"""Hypothesis profiles: `ci` is repeatable (derandomized, no deadline); `dev` digs deeper.
`slow` is the issue-13 soundness sweep. Select with HYPOTHESIS_PROFILE (make test uses ci)."""
import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, print_blob=True,
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


def pytest_collection_modifyitems(config, items):
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
