"""The GPU measuring path of `leantile search` (marker gpu; skipped without CUDA): the CPU
pool compiles into TileLang's cache, a worker per GPU verifies each kernel against the
reference before timing it, a point whose kernel is wrong is reported unverified with no
time, and the momentum search over a small workload ends on a verified point."""
import pytest
import torch

from leantile.search import Space, Workload, run_search
from leantile.search.db import SearchDB
from leantile.search.workers import GpuMeasurer

pytestmark = pytest.mark.gpu
SIZES = {"m": 512, "d": 512, "n": 512}


@pytest.fixture(scope="module")
def measurer():
    gpus = list(range(torch.cuda.device_count()))
    m = GpuMeasurer(gpus, compile_workers=8)
    yield m
    m.close()


def test_gpu_measurer_verifies_then_times(measurer, tmp_path):
    wl = Workload.builtin("matmul", SIZES)
    space = Space(wl.graph())
    pts = space.all[:: max(1, len(space) // 6)][:6]
    got = measurer.measure(wl, pts)
    assert measurer.gpu_name == torch.cuda.get_device_name(0)
    ok = [m for m in got if m.ok]
    assert ok, [m.error for m in got]
    for m in ok:  # 2*512^3 FLOP cannot take less than ~0.3 us or more than 5 ms on any GPU here
        assert 3e-4 < m.time_ms < 5.0


def test_gpu_measurer_rejects_what_does_not_verify():
    """With a negative tolerance nothing verifies (the error of a correct kernel is >= 0, and 0
    where it is within the forgiven rounding, leantile.tolerance): the point must come back
    unverified with no time, which shows the check runs before the timing."""
    wl = Workload.builtin("matmul", {"m": 256, "d": 256, "n": 256})
    p = Space(wl.graph()).all[0]
    bad = GpuMeasurer([0], compile_workers=2, tol=-1.0)
    try:
        (m,) = bad.measure(wl, [p])
    finally:
        bad.close()
    assert m.compile_ok and not m.verified_ok and m.time_ms is None and "rel err" in m.error


def test_search_on_gpu_ends_verified(measurer, tmp_path):
    wl = Workload.builtin("matmul", SIZES)
    db = SearchDB(tmp_path / "s.sqlite")
    res = run_search(wl, measurer, "momentum", budget=8, islands=4, seed=0, db=db)
    assert res.best is not None and res.best_ms < float("inf")
    rows = db.rows(wl.key)
    assert len(rows) == 8 and all(r["gpu"] == measurer.gpu_name for r in rows)
    best_row = min((r for r in rows if r["verified_ok"]), key=lambda r: r["time_ms"])
    assert best_row["time_ms"] == pytest.approx(res.best_ms)
