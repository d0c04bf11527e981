"""The cases tests/gpu/test_sanitizer_gpu.py runs under compute-sanitizer (tests/emitter_paths.py):
each plan still takes the emitter path it is named for, and every path is there once."""
import pytest

from emitter_paths import PATHS


@pytest.mark.parametrize("case", PATHS, ids=lambda c: c.path)
def test_each_case_takes_its_emitter_path(case):
    assert case.takes(case.plan()), case.path


def test_paths_are_named_once():
    names = [c.path for c in PATHS]
    assert len(set(names)) == len(names) >= 15


def test_path_names_can_be_listed_in_the_sanitizer_variable():
    """LEANTILE_SANITIZER_PATHS is a comma-separated list: a path name with a comma cannot be named
    there (the GPU call of 2026-11-29 asked for one and ran none)."""
    assert all("," not in c.path for c in PATHS)
