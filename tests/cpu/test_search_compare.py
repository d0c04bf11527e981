"""benchmarks/search_compare/search_compare.py without a GPU: the synthetic path runs end to end, and
`--replay` of the committed H200 database reproduces the committed GPU comparison exactly
(the policies are deterministic given what they observe, so the DB alone replays them)."""
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "benchmarks" / "search_compare"
RESULTS = HERE / "results"


@pytest.fixture(scope="module")
def compare():
    spec = importlib.util.spec_from_file_location("search_compare", HERE / "search_compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fake_comparison_with_exhaustive_ranks(compare, tmp_path):
    assert compare.main(["--fake", "--exhaustive", "--arch", "attention", "--budget", "8", "88", "--seeds", "0", "1",
                         "--db", str(tmp_path / "c.sqlite"), "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "search-compare-fake.json").read_text())["rows"]
    assert {(r["budget"], r["policy"]) for r in rows} == {(b, p) for b in (8, 88) for p in ("random", "momentum")}
    for r in rows:
        assert r["best_ms"] >= r["optimum_ms"] and min(r["rank_each"]) >= 1
        if r["budget"] == 88:  # a budget the size of the space finds the optimum (never measures twice)
            assert r["rank_each"] == [1, 1] and r["within_5pct"] == 1.0


@pytest.mark.parametrize("arch", ["attention", "rmsnorm_mlp"])
def test_replay_reproduces_the_h200_comparison(compare, arch, tmp_path):
    live = json.loads((RESULTS / f"search-compare-{arch}.json").read_text())
    from leantile.search import Space, Workload
    space = Space(Workload.builtin(arch).graph())
    then = live["rows"][0]
    if then.get("space_sha", compare.space_sha(space)) != compare.space_sha(space) or then["space"] != len(space):
        pytest.skip(f"the search space of {arch} changed since the H200 comparison ({then['space']} -> {len(space)} "
                    "points): its runs cannot be replayed; re-run benchmarks/search_compare/search_compare.py on a GPU")
    db = tmp_path / "c.sqlite"
    shutil.copy(RESULTS / "search-compare.sqlite", db)
    args = live["args"]
    assert compare.main(["--replay", "--arch", arch, "--budget", str(args["budget"]), "--islands", str(args["islands"]),
                         "--seeds", *map(str, args["seeds"]), "--db", str(db), "--out", str(tmp_path)]) == 0
    again = json.loads((tmp_path / "search-compare-replay.json").read_text())["rows"]
    assert [(r["policy"], r["best_ms_each"]) for r in again] == [(r["policy"], r["best_ms_each"]) for r in live["rows"]]


def test_replay_refuses_a_point_it_has_not_measured(compare, tmp_path):
    db = tmp_path / "c.sqlite"
    shutil.copy(RESULTS / "search-compare.sqlite", db)
    with pytest.raises(SystemExit, match="not in the DB"):
        compare.main(["--replay", "--arch", "swiglu", "--budget", "4", "--seeds", "0", "--db", str(db),
                      "--out", str(tmp_path)])


def test_fake_comparison_never_uses_the_real_rows(compare, tmp_path):
    """The committed DB holds H200 rows of the very runs a --fake comparison names: the fake
    measures its own points (rows keyed by measurer), and --replay still picks the GPU's rows."""
    from leantile.search.db import SearchDB
    db = tmp_path / "c.sqlite"
    shutil.copy(RESULTS / "search-compare.sqlite", db)
    assert compare.main(["--fake", "--arch", "attention", "--budget", "24", "--seeds", "0", "--db", str(db),
                         "--out", str(tmp_path)]) == 0
    s = SearchDB(db)
    fake_rows = s.rows(measurer="fake")  # each run logs the 24 points it evaluated
    assert len(fake_rows) == 48 and {r["gpu"] for r in fake_rows} == {"fake"}
    assert {r["run"] for r in fake_rows} <= {r["run"] for r in s.rows(measurer="NVIDIA H200")}
    assert compare.FromDBOnly(s).gpu_name == "NVIDIA H200"
    rows = json.loads((tmp_path / "search-compare-fake.json").read_text())["rows"]
    h200 = {r["time_ms"] for r in s.rows(measurer="NVIDIA H200") if r["time_ms"]}
    assert all(b not in h200 for r in rows for b in r["best_ms_each"])
