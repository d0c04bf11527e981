"""Example counts set by the hypothesis profile (tests/conftest.py registers the profiles): the
count a test names is what the `ci` profile (make test) runs; `fast` (make test-fast) runs a fifth
of it, at least 2; `dev` and `slow` run it too (their own max_examples apply to the tests that
name none), or, with deep=True, their own count where it is larger: a test whose examples are
cheap in number but each slow names a small ci count and still digs deep under dev and slow."""
import os

from hypothesis import settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
SCALE = {"fast": 0.2}
DEEP = ("dev", "slow")


def examples(n: int, deep: bool = False) -> int:
    """A test's example count under the profile in use."""
    scale = SCALE.get(PROFILE)
    if scale is not None:
        return max(2, round(n * scale))
    if deep and PROFILE in DEEP:
        return max(n, settings.get_profile(PROFILE).max_examples)
    return n
