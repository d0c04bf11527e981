"""Files a command reads that are not ordinary files (issue 47): a FIFO, a folder or a device given
as the graph, the Python source, the tuned file or the search database is refused with one line
naming it, at once (a FIFO blocked `validate` forever); a file past its cap (an 8 GiB sparse
tuned file was read whole by every command) is refused before it is read. Commands that could
block run in a subprocess with a timeout, so that a regression fails instead of hanging."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leantile import ir, tuned
from leantile.files import NotReadable, read_capped, regular_file

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")


def _leantile(*argv, cwd, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leantile", *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT / "python"), **(env or {})})


def _one_line(r: subprocess.CompletedProcess, *names: str) -> str:
    text = r.stdout + r.stderr
    assert r.returncode == 1, text
    assert "Traceback" not in text and "internal error" not in text, text
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == 1, text
    assert all(n in lines[0] for n in names), text
    return lines[0]


@pytest.mark.parametrize("command", ["validate", "show", "derive"])
def test_a_fifo_as_the_graph_file_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "graph.json"
    os.mkfifo(fifo)
    line = _one_line(_leantile(command, fifo, cwd=tmp_path), str(fifo), "FIFO")
    assert "graph file" in line


def test_a_folder_and_a_device_as_the_graph_file_are_refused(tmp_path):
    folder = tmp_path / "g.json"
    folder.mkdir()
    with pytest.raises(ir.GraphError, match="a folder, not a graph file"):
        ir.load(folder)
    if os.path.exists("/dev/zero"):  # endless: read whole it would never end
        with pytest.raises(ir.GraphError, match="a device, not a graph file"):
            ir.load("/dev/zero")


def test_a_fifo_as_the_python_source_is_refused_at_once(tmp_path):
    fifo = tmp_path / "model.py"
    os.mkfifo(fifo)
    _one_line(_leantile("show", f"{fifo}:build", cwd=tmp_path), str(fifo), "FIFO", "Python source")


def test_a_huge_python_source_is_refused_before_it_is_compiled(tmp_path):
    big = tmp_path / "model.py"
    with open(big, "wb") as f:
        f.truncate(64 << 20)  # sparse: no disk
    _one_line(_leantile("show", f"{big}:build", cwd=tmp_path), str(big), "Python source")


@pytest.mark.parametrize("kind", ["fifo", "sparse"])
def test_a_tuned_file_that_is_a_fifo_or_huge_is_skipped_with_one_warning(tmp_path, kind):
    """Every command that looks up tuned entries reads <arch>.json in the user's folder: it is
    skipped with a warning naming it (the shipped entries still apply), never waited on."""
    folder = tmp_path / "tuned"
    folder.mkdir()
    path = folder / "matmul.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            f.truncate(8 << 30)
    code = ("import leantile.tuned as t; "
            "print('FOUND', len(t.tuned_entries('matmul', {'m': 64, 'd': 64, 'n': 64}, root=%r)))" % str(folder))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert r.returncode == 0 and "FOUND 0" in r.stdout, r.stdout + r.stderr
    assert str(path) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert ("FIFO" if kind == "fifo" else "more than a tuned file may have") in r.stderr, r.stderr


def test_a_fifo_as_the_search_database_is_refused(tmp_path):
    from leantile.search.db import DBError, SearchDB

    fifo = tmp_path / "search.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(DBError, match="FIFO, not a search database"):
        SearchDB(str(fifo))


def test_read_capped_reads_a_regular_file_whole_and_refuses_one_byte_more(tmp_path):
    p = tmp_path / "f.bin"
    data = os.urandom(1000)
    p.write_bytes(data)
    assert read_capped(p, 1000) == data
    assert regular_file(p, 1000) == 1000
    with pytest.raises(NotReadable, match="1000 bytes, more than a thing may have"):
        read_capped(p, 999, "thing")
    with pytest.raises(NotReadable, match="cannot read the thing"):
        read_capped(tmp_path / "missing", 10, "thing")
    with pytest.raises(NotReadable, match="cannot read"):
        read_capped("a\x00b", 10)



@pytest.mark.parametrize("flag,pairs", [("--size", ["m=64", "m=128"]), ("--tile", ["block_m=64", "block_m=128"])])
def test_a_key_given_twice_is_refused(flag, pairs):
    from leantile.sources import parse_sizes
    from leantile.tiles import parse_tiles

    parse = parse_sizes if flag == "--size" else parse_tiles
    with pytest.raises(ir.GraphError, match="given twice") as e:
        parse(pairs)
    assert f"{flag} '{pairs[1]}'" in str(e.value) and "=64 before" in str(e.value)
    assert parse(pairs[:1]) == {pairs[0].split("=")[0]: 64}


def test_strings_from_a_tuned_file_never_reach_the_terminal_raw(tmp_path):
    """A tuned entry's gpu and candidate are printed (derive lists the tuned entries): one with
    an escape code or a newline carrying a forged 'error:' line is ignored, and its warning shows
    the string escaped."""
    import json

    folder = tmp_path / "tuned"
    folder.mkdir()
    shape = {"m": 64, "d": 64, "n": 64}
    good = {"arch": "matmul", "shape": shape, "dtype": "f16", "gpu": "NVIDIA H100 80GB HBM3", "candidate": "direct",
            "tiles": {"block_m": 64}, "time_ms": 0.01}
    entries = [{**good, "gpu": "\x1b[31mNVIDIA H100\x1b[0m"}, {**good, "candidate": "direct\nerror: forged"}, good]
    (folder / "matmul.json").write_text(json.dumps({"schema": tuned.SCHEMA, "arch": "matmul", "entries": entries}))
    r = _leantile("derive", "matmul", "--size", "m=64", "d=64", "n=64", cwd=tmp_path,
                  env={"LEANTILE_TUNED_DIR": str(folder)})
    text = r.stdout + r.stderr
    assert r.returncode == 0, text
    assert "\x1b" not in text and not any(x.startswith("error: forged") for x in text.splitlines()), text
    assert "NVIDIA H100 80GB HBM3: direct" in r.stdout  # the good entry is still listed
    assert text.count("warning:") >= 2 and "\\x1b" in text, text


# -- JSON nested past the stack (files.load_json): never an internal error ----------------------

DEEP = "[" * 50_000 + "]" * 50_000


def test_load_json_turns_nesting_past_the_stack_into_a_value_error():
    from leantile.files import load_json

    assert load_json('{"a": [1, [2]]}') == {"a": [1, [2]]}
    for text in (DEEP, DEEP.encode(), '{"a": ' * 50_000):
        with pytest.raises(ValueError):
            load_json(text)


def _deep_rows(path, workload: str, run: str):
    """A point and an event nested 50,000 deep, as a hand edit (or a hostile file) would leave them."""
    import sqlite3
    import time

    con = sqlite3.connect(path)
    con.execute("INSERT INTO measurements (workload, run, point, candidate, tiles, compile_ok, verified_ok, time_ms,"
                " timestamp, measurer, gpu) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (workload, run, DEEP, "direct", DEEP, 1, 1, 0.1, time.time(), "fake", "fake"))
    con.execute("INSERT INTO events (workload, run, seq, kind, detail, timestamp, measurer) VALUES (?,?,?,?,?,?,?)",
                (workload, run, 99, "crossover", DEEP, time.time(), "fake"))
    con.commit()
    con.close()


def test_a_search_database_row_nested_50000_deep_is_skipped(tmp_path):
    """A row whose point is JSON nested 50,000 deep was a RecursionError (an internal error of
    `leantile search`); it is skipped like any row that is not a point, its event likewise."""
    from leantile.search.db import SearchDB
    from leantile.search.space import Point
    from leantile.search.workers import Measurement

    path = tmp_path / "s.sqlite"
    db = SearchDB(path)
    p = Point.make("direct", {"block_m": 64})
    db.append("w", "r", p, Measurement.checked(True, True, 0.5, None), gpu="fake")
    db.add_events("w", "r", [{"kind": "backtrack", "island": 0}], "fake")
    db.close()
    _deep_rows(path, "w", "r")
    db = SearchDB(path)
    assert list(db.results("w", "r", "fake")) == [p]
    assert [e["kind"] for e in db.events("w", "r", "fake")] == ["backtrack"]
    with pytest.raises(ValueError):
        Point.from_key(DEEP)


def test_search_resumes_over_a_row_nested_50000_deep(tmp_path):
    """End to end: `leantile search --fake` over a database holding such rows of its own run."""
    db = tmp_path / "s.sqlite"
    first = _leantile("search", "matmul", "--fake", "--budget", "1", "--db", db, "--out", "tn", cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr
    import sqlite3

    workload, run = sqlite3.connect(db).execute("SELECT workload, run FROM measurements").fetchone()
    _deep_rows(db, workload, run)
    r = _leantile("search", "matmul", "--fake", "--budget", "2", "--db", db, "--out", "tn", cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_tuned_file_nested_50000_deep_is_skipped_with_one_warning(tmp_path, capsys):
    folder = tmp_path / "tuned"
    folder.mkdir()
    (folder / "matmul.json").write_text(DEEP)
    assert tuned.tuned_entries("matmul", {"m": 64, "d": 64, "n": 64}, root=folder) == []
    err = capsys.readouterr().err
    assert str(folder / "matmul.json") in err and "nested too deep" in err, err


@pytest.mark.parametrize("marker", ["fifo", "deep"])
def test_an_out_folder_whose_index_is_a_fifo_or_too_deep_is_refused_at_once(tmp_path, marker):
    """kernels may replace a folder it wrote (its index.json): a FIFO put there as the index
    blocked the check forever; one nested past the stack is not an index either."""
    out = tmp_path / "kn"
    out.mkdir()
    if marker == "fifo":
        os.mkfifo(out / "index.json")
    else:
        (out / "index.json").write_text('{"candidates": ' + DEEP + "}")
    r = _leantile("kernels", "matmul", "--size", "m=8", "d=16", "n=8", "--out", out, cwd=tmp_path)
    line = _one_line(r, str(out), "--out")
    assert "not written by leantile kernels" in line
    assert sorted(p.name for p in out.iterdir()) == ["index.json"]
