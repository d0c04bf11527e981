"""Hypothesis profiles: `ci` is repeatable (derandomized, no deadline); `fast` is ci at a fifth
of the examples (make test-fast; tests/profiles.examples scales the counts tests name); `dev`
digs deeper; `slow` is the issue-13 soundness sweep. Select with HYPOTHESIS_PROFILE (make test
uses ci)."""
import os
import tempfile

# One torch thread per xdist worker: make test runs two workers on two cores, and each torch's
# default of a thread per core had four threads spin for two cores whenever both workers
# interpreted plans at once (user time 2168 s against 1887 s in the same suite, 2026-11-28).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

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


# The longest files go first, longest first (measured with --durations=0 on 2 cores:
# benchmarks/test_logs/results/pytest-durations-cpu-2026-11-28-a42239d.txt): under xdist (--dist loadfile
# --no-loadscope-reorder, as make test runs it) files are handed out in this order, so the long
# ones run beside each other and the short ones fill the end; a long file handed out last left one
# core idle for minutes. Every file's tests run in any order (no test reads what another left).
FIRST = ("test_lower_generated.py", "test_lower_generated_half.py", "test_emit.py", "test_lower_generated_mixed.py",
         "test_equivalence.py", "test_byo.py", "test_interrupts.py", "test_masks.py", "test_swap_ab.py",
         "test_lower_sizes.py", "test_overlap.py", "test_split.py", "test_lower.py", "test_gpu_fuzz.py",
         "test_soundness.py", "test_attention_variants.py", "test_column_reductions.py")


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # in case a plugin imported torch before the variables above
        import torch
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest keep their order
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
