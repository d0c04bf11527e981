"""Search state under hostile or broken input (issue 12): DB rows keyed by measurer (a --fake
search and a GPU search never exchange rows), impossible times refused everywhere they are
read, tuned files validated on read and never overwritten when unparsable, a corrupted or
unusable --db reported in one line before anything is measured, no GPU said at once."""
import json
import math
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from leantile.search.driver import default_point

from leantile import architectures
from leantile.ir import GraphError
from leantile.search import Point, SearchRun, Space, Workload, run_search, workload_cost
from leantile.search import db as dbmod
from leantile.search.db import DBError, SearchDB
from leantile.search.driver import point_entry, tuned_entry
from leantile.search.memo import MeasureOnce
from leantile.search.workers import FakeMeasurer, Measurement
from leantile.tuned import load_tuned, save_if_faster, save_tuned

ROOT = Path(__file__).resolve().parents[2]
REAL_DB = ROOT / "benchmarks" / "results" / "search.sqlite"  # real H200 rows, legacy schema
H200 = "NVIDIA H200"
MATMUL = {"d": 4096, "m": 1024, "n": 4096}
GOOD = {"arch": "matmul", "shape": MATMUL, "dtype": "f16", "gpu": H200, "candidate": "direct",
        "tiles": {"block_m": 128, "block_n": 256, "block_k": 64, "stages": 4, "threads": 256}, "time_ms": 0.05}


@pytest.fixture(scope="module")
def mm():
    wl = Workload.builtin("matmul")
    return wl, Space(wl.graph())


def fake(wl, space, seed=0):
    return FakeMeasurer(space, floor_ms=workload_cost(wl.graph()).floor_ms, seed=seed)


class Gpu:
    """A stand-in GPU measurer: times unlike the fake's, so a row of the other is recognisable."""
    gpu_name, versions = H200, {"leantile": "test", "cuda": "12.4"}

    def __init__(self):
        self.calls = 0

    def measure(self, wl, points):
        self.calls += len(points)
        return [Measurement(True, True, 1000.0 + i) for i, _ in enumerate(points)]

    def close(self):
        pass


def cli(args, capsys):
    from leantile.cli import main
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_error(err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ------------------------------------------------------------------------ rows keyed by measurer
def test_fake_and_gpu_rows_never_mix(tmp_path, mm):
    wl, space = mm
    db = SearchDB(tmp_path / "s.sqlite")
    f = run_search(wl, fake(wl, space), "random", budget=8, islands=4, seed=0, db=db)
    assert f.new == 8
    rows = db.rows()
    assert {r["measurer"] for r in rows} == {"fake"} and {r["gpu"] for r in rows} == {"fake"}
    assert json.loads(rows[0]["versions"])["leantile"]
    g = Gpu()  # the same run name on the same DB, another measurer: nothing is replayed
    r = run_search(wl, g, "random", budget=8, islands=4, seed=0, db=db)
    assert r.replayed == 0 and r.new == 8 and g.calls == 8 and r.best_ms >= 1000.0
    assert json.loads(db.rows(measurer=H200)[0]["versions"]) == Gpu.versions
    fm = fake(wl, space)  # and the fake resumes only its own rows
    again = run_search(wl, fm, "random", budget=8, islands=4, seed=0, db=db)
    assert again.replayed == 8 and fm.calls == 0 and again.best_ms == f.best_ms
    assert set(MeasureOnce(Gpu(), db).cache.values()) == {m for m in db.measured(H200).values()}
    assert all(m.time_ms >= 1000.0 for m in MeasureOnce(Gpu(), db).cache.values())
    assert all(m.time_ms is None or m.time_ms < 1000.0 for m in MeasureOnce(fake(wl, space), db).cache.values())
    assert db.measured(None) == {} and db.results(wl.key, "random-k4-s0", None) == {}  # unknown: never resumed


def test_a_legacy_db_is_migrated_in_place(tmp_path):
    path = tmp_path / "legacy.sqlite"
    shutil.copy(REAL_DB, path)
    con = sqlite3.connect(path)
    assert "measurer" not in {r[1] for r in con.execute("PRAGMA table_info(measurements)")}
    n_rows = con.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    n_events = con.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    p = '{"candidate": "direct", "tiles": {"block_m": 64}}'
    for gpu in (None, "fake"):  # old rows of unknown or fake origin, in a real run
        con.execute("INSERT INTO measurements (workload, run, point, candidate, tiles, compile_ok, verified_ok,"
                    " time_ms, gpu, timestamp) VALUES ('w', 'r', ?, 'direct', '{}', 1, 1, 0.001, ?, 0)", (p, gpu))
    con.commit()
    con.close()
    db = SearchDB(path)
    assert sum(n for _, n in db.measurers()) == n_rows + 2 and len(db.events()) == n_events
    assert dict(db.measurers())[H200] == n_rows and dict(db.measurers())["fake"] == 1
    wl, run = db.runs()[0]
    real = db.results(wl, run, H200)
    assert real and all(m.time_ms is None or m.time_ms > 0 for m in real.values())
    assert db.results(wl, run, "fake") == {}  # real rows are never a fake search's
    assert list(db.results("w", "r", "fake")) == [Point.from_key(p)]  # nor fake rows a GPU's
    assert db.results("w", "r", H200) == {}
    db.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == dbmod.VERSION
    assert len(SearchDB(path).rows()) == n_rows + 2  # reopening is a no-op


def test_cli_fake_search_does_not_resume_real_rows(tmp_path, capsys):
    path = tmp_path / "real.sqlite"
    shutil.copy(REAL_DB, path)
    rc, out, _ = cli(["search", "matmul", "--fake", "--budget", "4", "--db", str(path),
                      "--out", str(tmp_path / "t")], capsys)
    assert rc == 0 and "4 new, 0 replayed" in out  # the file holds 48 H200 rows of this very run
    e = json.loads((tmp_path / "t" / "matmul.json").read_text())["entries"]
    assert [x["gpu"] for x in e] == ["fake"] and e[0]["time_ms"] != 0


# ------------------------------------------------------------------------ impossible times
@pytest.mark.parametrize("t", [-5.0, 0.0, -0.0, math.nan, math.inf, -math.inf, "0.1", True, None])
def test_impossible_times_are_failed_points(t):
    for m in (Measurement(True, True, t), Measurement.checked(True, True, t)):
        assert not m.ok and m.score == math.inf
    c = Measurement.checked(True, True, t)
    assert not c.verified_ok and c.time_ms is None


def test_impossible_times_never_become_the_best(tmp_path, mm):
    wl, space = mm
    bad = [-5.0, 0.0, math.nan, math.inf, -1e-9]

    class Liar:
        gpu_name = H200

        def measure(self, wl, points):
            return [Measurement(True, True, bad[i] if i < len(bad) else 2.0 + i) for i, _ in enumerate(points)]

    db = SearchDB(tmp_path / "s.sqlite")
    res = run_search(wl, Liar(), "random", budget=8, islands=8, seed=0, db=db)
    assert res.best_ms == 7.0 and tuned_entry(res, H200)["time_ms"] == 7.0
    db.append(wl.key, "random-k8-s0", space.all[-1], Measurement(True, True, -5.0), gpu=H200)  # stored raw
    replayed = db.results(wl.key, "random-k8-s0", H200)
    assert sum(m.ok for m in replayed.values()) == 3 and all(m.ok == (m.time_ms is not None) for m in replayed.values())
    res.best_ms = -1.0
    assert tuned_entry(res, H200) is None
    for t in bad:
        with pytest.raises(ValueError, match="time"):
            point_entry(wl, space.all[0], t, H200)


def test_a_stored_negative_entry_does_not_block_a_search(tmp_path, capsys):
    (tmp_path / "matmul.json").write_text(json.dumps(
        {"schema": "leantile-tuned/v1", "arch": "matmul", "entries": [{**GOOD, "time_ms": -1}]}))
    assert load_tuned("matmul", MATMUL, root=tmp_path) is None
    written, kept = save_if_faster({**GOOD, "time_ms": 0.07}, tmp_path)
    assert written == tmp_path / "matmul.json" and kept is None
    assert [e["time_ms"] for e in json.loads(written.read_text())["entries"]] == [0.07]
    for t in (-1, 0, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="time_ms"):
            save_tuned({**GOOD, "time_ms": t}, tmp_path)


# ------------------------------------------------------------------------ tuned files
UNPARSABLE = {
    "bad_json": b'{"schema": "leantile-tuned/v1", "entries": [',
    "not_utf8": '{"schema": "leantile-tuned/v1", "arch": "matmul", "entries": [], "x": "\xe9"}'.encode("latin-1"),
    "utf16": json.dumps({"schema": "leantile-tuned/v1", "entries": []}).encode("utf-16"),
    "wrong_schema": json.dumps({"schema": "leantile-tuned/v2", "entries": []}).encode(),
    "no_schema": json.dumps({"entries": [GOOD]}).encode(),
    "entries_not_list": json.dumps({"schema": "leantile-tuned/v1", "entries": {"0": GOOD}}).encode(),
    "a_list": json.dumps([GOOD]).encode(),
    "other_arch": json.dumps({"schema": "leantile-tuned/v1", "arch": "attention", "entries": []}).encode(),
    "deep": b"[" * 3000 + b"]" * 3000,
    "huge_int": b'{"schema": "leantile-tuned/v1", "entries": [], "n": ' + b"9" * 5000 + b"}",
    "empty": b"",
}


def _truncated_real() -> bytes:
    return (ROOT / "python" / "leantile" / "tuned_configs" / "matmul.json").read_bytes()[:200]


@pytest.mark.parametrize("kind", [*UNPARSABLE, "truncated_real"])
def test_an_unparsable_tuned_file_is_never_overwritten(kind, tmp_path, capsys):
    data = _truncated_real() if kind == "truncated_real" else UNPARSABLE[kind]
    main = tmp_path / "matmul.json"
    main.write_bytes(data)
    assert load_tuned("matmul", MATMUL, root=tmp_path) is None
    written = save_tuned(GOOD, tmp_path)
    assert written == tmp_path / "matmul.new.json" and main.read_bytes() == data
    warn = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and str(main) in warn[0] and "matmul.new.json" in warn[0]
    assert load_tuned("matmul", MATMUL, gpu="H200", root=tmp_path) == ("direct", GOOD["tiles"])
    assert save_if_faster({**GOOD, "time_ms": 0.04, "candidate": "other"}, tmp_path)[0] == written
    assert load_tuned("matmul", MATMUL, root=tmp_path)[0] == "other" and main.read_bytes() == data
    assert len(json.loads(written.read_text())["entries"]) == 1
    main.unlink()  # fixed by hand: the next save merges the stand-in back and removes it
    assert save_tuned({**GOOD, "gpu": "fake"}, tmp_path) == main and not written.exists()
    assert {e["gpu"] for e in json.loads(main.read_text())["entries"]} == {H200, "fake"}
    assert capsys.readouterr().err == ""


def test_a_tuned_folder_and_two_unparsable_files(tmp_path, capsys):
    (tmp_path / "matmul.json").mkdir()
    assert save_tuned(GOOD, tmp_path) == tmp_path / "matmul.new.json"
    (tmp_path / "matmul.new.json").write_text("{")
    with pytest.raises(GraphError, match="matmul.json: cannot be parsed .* matmul.new.json"):
        save_tuned(GOOD, tmp_path)
    assert (tmp_path / "matmul.new.json").read_text() == "{"


def _tiles(**kw):
    return {**GOOD["tiles"], **kw}


BAD_ENTRIES = {
    "block_mm": {**GOOD, "tiles": {**GOOD["tiles"], "block_mm": 64}},
    "block_m_huge": {**GOOD, "tiles": _tiles(block_m=1000000)},
    "block_m_true": {**GOOD, "tiles": _tiles(block_m=True)},
    "block_m_zero": {**GOOD, "tiles": _tiles(block_m=0)},
    "block_m_str": {**GOOD, "tiles": _tiles(block_m="64")},
    "block_m_float": {**GOOD, "tiles": _tiles(block_m=64.0)},
    "stages_9": {**GOOD, "tiles": _tiles(stages=9)},
    "threads_100": {**GOOD, "tiles": _tiles(threads=100)},
    "threads_2048": {**GOOD, "tiles": _tiles(threads=2048)},
    "swizzle_65": {**GOOD, "tiles": _tiles(swizzle=65)},
    "tiles_list": {**GOOD, "tiles": [128, 128]},
    "time_negative": {**GOOD, "time_ms": -1},
    "time_zero": {**GOOD, "time_ms": 0},
    "time_str": {**GOOD, "time_ms": "0.05"},
    "time_true": {**GOOD, "time_ms": True},
    "time_nan": {**GOOD, "time_ms": math.nan},
    "time_inf": {**GOOD, "time_ms": math.inf},
    "shape_true": {**GOOD, "shape": {**MATMUL, "m": True}},
    "shape_zero": {**GOOD, "shape": {**MATMUL, "m": 0}},
    "shape_str": {**GOOD, "shape": {**MATMUL, "m": "1024"}},
    "dtype": {**GOOD, "dtype": "f8"},
    "gpu_empty": {**GOOD, "gpu": ""},
    "arch_other": {**GOOD, "arch": "attention"},
    "not_object": [1, 2],
    **{f"no_{k}": {x: v for x, v in GOOD.items() if x != k} for k in GOOD},
}


@pytest.mark.parametrize("kind", list(BAD_ENTRIES))
def test_a_bad_tuned_entry_is_ignored_with_one_warning(kind, tmp_path, capsys):
    bad = BAD_ENTRIES[kind]
    path = tmp_path / "matmul.json"
    path.write_text(json.dumps({"schema": "leantile-tuned/v1", "arch": "matmul", "entries": [bad]}))
    for _ in range(3):  # read again and again: one warning
        assert load_tuned("matmul", MATMUL, root=tmp_path) is None
    err = capsys.readouterr().err
    line = one_warning(err, str(path), "entry 0")
    if kind in ("block_mm", "block_m_huge", "block_m_true"):
        assert {"block_mm": "block_mm: unknown tile", "block_m_huge": "less than or equal to 1024",
                "block_m_true": "block_m"}[kind] in line
    ok = {**GOOD, "gpu": "NVIDIA H100"}  # a good entry beside it is used, the bad one kept on disk
    save_tuned(ok, tmp_path)
    assert load_tuned("matmul", MATMUL, root=tmp_path) == ("direct", GOOD["tiles"])
    assert json.dumps(bad, sort_keys=True) in [json.dumps(e, sort_keys=True) for e in json.loads(path.read_text())["entries"]]


def one_warning(err: str, *words: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_point_entry_refuses_what_load_would_ignore(mm):
    wl, space = mm
    with pytest.raises(ValueError, match="tiles"):
        point_entry(wl, Point("direct", (("block_m", 100000),)), 0.1, H200)
    e = point_entry(wl, space.all[0], 1e-9, H200)
    assert e["time_ms"] == 1e-9  # never rounded to 0


# ------------------------------------------------------------------------ the CLI
def fake_args(tmp_path, *extra, budget=4):
    return ["search", "matmul", "--fake", "--budget", str(budget), "--islands", "4", *extra]


@pytest.fixture
def no_measuring(monkeypatch):
    def boom(self, wl, points):
        raise AssertionError("measured although the DB is unusable")
    monkeypatch.setattr(FakeMeasurer, "measure", boom)


def _locked(path, how="EXCLUSIVE"):
    """Another connection holding a lock: EXCLUSIVE (no reads either) or IMMEDIATE (a writer
    mid-transaction: reads still work, only the write lock is taken)."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE IF NOT EXISTS t (x)")
    con.execute(f"BEGIN {how}")
    return con


DB_CASES = ["random_bytes", "truncated_4k", "truncated_20k", "truncated_header", "folder", "under_a_file",
            "nul", "unwritable_place", "read_only_file", "read_only_folder", "locked", "write_locked"]


@pytest.mark.parametrize("case", DB_CASES)
def test_cli_unusable_db_is_one_line_before_measuring(case, tmp_path, capsys, monkeypatch, no_measuring):
    monkeypatch.setattr(dbmod, "LOCK_TIMEOUT_S", 0.05)
    db = tmp_path / "d.sqlite"
    keep = None
    if case == "random_bytes":
        db.write_bytes(os.urandom(5000))
    elif case.startswith("truncated"):
        n = {"truncated_4k": 4096, "truncated_20k": 20000, "truncated_header": 50}[case]
        db.write_bytes(REAL_DB.read_bytes()[:n])
    elif case == "folder":
        db.mkdir()
    elif case == "under_a_file":
        (tmp_path / "f").write_text("x")
        db = tmp_path / "f" / "d.sqlite"
    elif case == "nul":
        db = Path(str(tmp_path / "a\x00b.sqlite"))
    elif case == "unwritable_place":  # even root cannot create a file in /proc
        db = Path("/proc/leantile-test.sqlite")
    elif case == "read_only_file":
        shutil.copy(REAL_DB, db)
        db.chmod(0o444)
    elif case == "read_only_folder":
        (tmp_path / "ro").mkdir()
        db = tmp_path / "ro" / "d.sqlite"
        shutil.copy(REAL_DB, db)
        (tmp_path / "ro").chmod(0o555)
    elif case.endswith("locked"):
        shutil.copy(REAL_DB, db)
        SearchDB(db).close()  # migrated already: only the write-lock probe at opening can tell
        keep = _locked(db, "EXCLUSIVE" if case == "locked" else "IMMEDIATE")
    try:
        rc, out, err = cli(fake_args(tmp_path, "--db", str(db), "--out", str(tmp_path / "t")), capsys)
    finally:
        if keep is not None:
            keep.close()
        (tmp_path / "ro").exists() and (tmp_path / "ro").chmod(0o755)
    assert rc == 1 and not (tmp_path / "t").exists() and "points over" not in out
    one_error(err, "--db", repr(str(db))[1:-1])
    if case.startswith("read_only") or case.endswith("locked"):
        assert ("locked" if case.endswith("locked") else "read-only") in err


def test_a_damaged_db_is_refused_when_opened(tmp_path):
    """Pages in the middle overwritten: the schema still loads and nothing fails until those rows
    are read, so opening checks the whole file."""
    path = tmp_path / "d.sqlite"
    shutil.copy(REAL_DB, path)
    SearchDB(path).close()
    data = bytearray(path.read_bytes())
    data[len(data) // 2: len(data) // 2 + 8192] = bytes(8192)
    path.write_bytes(bytes(data))
    with pytest.raises(DBError, match="d.sqlite: .*damaged"):
        SearchDB(path)


def test_db_opened_read_only_by_sqlite_is_reported(tmp_path, monkeypatch):
    """The file modes aside (root ignores them): sqlite's own read-only error becomes a DBError."""
    path = tmp_path / "d.sqlite"
    shutil.copy(REAL_DB, path)
    real = sqlite3.connect
    monkeypatch.setattr(dbmod.sqlite3, "connect",
                        lambda p, timeout=5.0: real(f"file:{p}?mode=ro", uri=True, timeout=timeout))
    with pytest.raises(DBError, match="d.sqlite: read-only"):
        SearchDB(path)


def test_cli_db_write_failing_mid_run_keeps_the_best(tmp_path, capsys, monkeypatch):
    """The DB is locked by another process during the second batch: the search stops after that
    round, saves the best point it observed (both batches), reports the DB in one line, exit 1.
    (The shipped default plan, measured first, is not a batch.)"""
    monkeypatch.setattr(dbmod, "LOCK_TIMEOUT_S", 0.05)
    db, seen, lock, calls = tmp_path / "d.sqlite", [], [], []
    real = FakeMeasurer.measure

    def measure(self, wl, points):
        got = real(self, wl, points)
        calls.append(points)
        if len(calls) > 1 and points != [default_point(wl)]:
            seen.extend(m.time_ms for m in got if m.ok)
        if len(seen) >= 4 and not lock:
            lock.append(_locked(db))
        return got

    monkeypatch.setattr(FakeMeasurer, "measure", measure)
    try:
        rc, out, err = cli(fake_args(tmp_path, "--db", str(db), "--out", str(tmp_path / "t"), budget=40), capsys)
    finally:
        lock and lock[0].close()
    assert rc == 1 and len(seen) <= 8
    one_error(err, "--db", "locked", "saved")
    saved = json.loads((tmp_path / "t" / "matmul.json").read_text())["entries"][0]
    assert saved["time_ms"] == pytest.approx(min(seen), rel=1e-5)
    assert len(SearchDB(db).rows()) == 4  # the first batch was logged, then nothing


def test_cli_without_a_gpu_says_so_at_once(tmp_path, capsys, monkeypatch):
    import sys
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = ["search", "matmul", "--db", str(tmp_path / "d.sqlite"), "--out", str(tmp_path / "t")]
    rc, out, err = cli(args, capsys)
    assert rc == 1 and out == "" and not (tmp_path / "d.sqlite").exists()
    one_error(err, "no CUDA GPU", "--fake")
    monkeypatch.setitem(sys.modules, "torch", None)  # torch not installed
    rc, out, err = cli(args, capsys)
    assert rc == 1
    one_error(err, "torch is not installed")


def test_a_gpu_worker_that_cannot_start_is_an_error_not_a_hang():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the worker would start")
    from leantile.search.workers import GpuMeasurer
    with pytest.raises(RuntimeError, match="GPU worker for device 0 exited"):
        GpuMeasurer([0], compile_workers=1)


def test_cli_fake_keeps_real_entries_and_unparsable_files(tmp_path, capsys):
    out = tmp_path / "t"
    out.mkdir()
    (out / "matmul.json").write_text(json.dumps({"schema": "leantile-tuned/v1", "arch": "matmul",
                                                 "entries": [GOOD]}))
    rc, o, err = cli(fake_args(tmp_path, "--db", str(tmp_path / "d.sqlite"), "--out", str(out)), capsys)
    assert rc == 0 and err == ""
    entries = json.loads((out / "matmul.json").read_text())["entries"]
    assert GOOD in entries and {e["gpu"] for e in entries} == {H200, "fake"}
    assert load_tuned("matmul", MATMUL, root=out) == ("direct", GOOD["tiles"])
    broken = b'{"schema": "leantile-tuned/v1", "arch": "matmul", "entries": [{"arch": "mat'
    (out / "matmul.json").write_bytes(broken)
    rc, o, err = cli(fake_args(tmp_path, "--db", str(tmp_path / "d2.sqlite"), "--out", str(out)), capsys)
    assert rc == 0 and (out / "matmul.json").read_bytes() == broken
    assert f"wrote {out / 'matmul.new.json'}" in o
    assert one_warning(err, str(out / "matmul.json"), "matmul.new.json")


def test_cli_fake_never_writes_the_shipped_tuned_folder(tmp_path, capsys, monkeypatch):
    shipped = tmp_path / "shipped"
    monkeypatch.setenv("LEANTILE_TUNED_DIR", str(shipped))
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(fake_args(tmp_path, "--out", str(shipped)), capsys)
    assert rc == 1 and not shipped.exists()
    one_error(err, "--out", "--fake")
    rc, out, err = cli(fake_args(tmp_path), capsys)  # the defaults: build/search/, never the shipped folder
    assert rc == 0 and not shipped.exists()
    assert (tmp_path / "build/search/tuned/matmul.json").exists()
    assert (tmp_path / "build/search/search-fake.sqlite").exists()
    assert not (tmp_path / "build/search/search.sqlite").exists()
    (tmp_path / "a_file").write_text("x")
    rc, out, err = cli(fake_args(tmp_path, "--out", str(tmp_path / "a_file" / "t")), capsys)
    assert rc == 1
    one_error(err, "--out", "a_file, which is not a folder")
