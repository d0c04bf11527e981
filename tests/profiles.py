"""Example counts set by the hypothesis profile (tests/conftest.py registers the profiles): the
count a test names is what the `ci` profile (make test) runs; `fast` (make test-fast) runs a fifth
of it, at least 2; `dev` and `slow` run it too (their own max_examples apply to the tests that
name none)."""
import os

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
SCALE = {"fast": 0.2}


def examples(n: int) -> int:
    """A test's example count under the profile in use."""
    scale = SCALE.get(PROFILE)
    return n if scale is None else max(2, round(n * scale))
