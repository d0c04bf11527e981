"""`kernels` and `report` publish their whole output folder in one rename, clean the stages of
killed runs, refuse a bad --out in one line with nothing written, and never place a file
outside --out (leantile.files: check_out_dir, make_stage, publish, clean_stale)."""
import json
import os
import subprocess
import sys

import pytest

from leantile import architectures, files
from leantile.cli import kernels as kernels_command
from leantile.cli import main
from leantile.files import UnsafePath, check_out_dir, clean_stale, make_stage, publish
from leantile.ir import GraphError

DEAD_PID = 2**22 + 12345  # above Linux's pid_max: no such process


@pytest.fixture
def emit_only(monkeypatch):
    """kernels without tilelang lowering: fast (the publishing is what is tested)."""
    monkeypatch.setattr(kernels_command, "_tilelang_available", lambda: False)


def tree(root):
    """Every path under root, relative (folders included)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def kernels(out, *sources):
    return main(["kernels", *(sources or ["matmul"]), "--out", str(out), "--size", "m=8", "d=8", "n=8"])


def report(out, *sources):
    return main(["report", *(sources or ["matmul"]), "--out", str(out), "--examples", "1",
                 "--size", "m=8", "d=8", "n=8"])


# -- stale stages ----------------------------------------------------------------------------

def _own_start():
    return files._proc_start(os.getpid()) or "0"


def test_stale_stages_of_dead_processes_are_removed(tmp_path, emit_only):
    out = tmp_path / "k"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live_tag = f"{sleeper.pid}-{files._proc_start(sleeper.pid) or 0}"
        stale = {  # a killed run's stage: its pid is gone, or reused by another process
            f".k.{DEAD_PID}-1.abc123.tmp",
            f".k.{os.getpid()}-{int(_own_start()) + 1}.abc123.tmp",
            f".k.{DEAD_PID}-7.zz.tmp",
        }
        kept = {f".k.{live_tag}.run1.tmp",  # a run still going
                ".k.v2.12-3.ab.tmp", ".kk.1-1.ab.tmp", "k.1-1.ab.tmp",  # other folders' names
                ".k.abcd1234.tmp"}  # an old-style stage (no owner), too young to be stale
        for name in stale | kept:
            (tmp_path / name / "arch").mkdir(parents=True)
            (tmp_path / name / "arch" / "x.py").write_text("# half written\n")
        legacy_old = tmp_path / ".k.efgh5678.tmp"  # an old-style stage older than STAGE_MAX_AGE_S
        legacy_old.mkdir()
        old = 1_000_000
        os.utime(legacy_old, (old, old))
        assert kernels(out) == 0
        left = {p.name for p in tmp_path.iterdir()}
        assert left == kept | {"k"}, left
        sleeper.kill()
        sleeper.wait()
        assert clean_stale(out) == [tmp_path / f".k.{live_tag}.run1.tmp"]
    finally:
        sleeper.kill()


def test_folder_set_aside_by_a_killed_publish_is_put_back(tmp_path):
    """A kill between the two renames of the fallback publish leaves the old folder aside:
    the next run puts it back when --out is missing, and removes it when --out is there."""
    out = tmp_path / "k"
    aside = tmp_path / f".k.{DEAD_PID}-1.abc.old.tmp"
    aside.mkdir()
    (aside / "index.json").write_text("{}")
    clean_stale(out)
    assert (out / "index.json").read_text() == "{}" and not aside.exists()
    aside.mkdir()
    clean_stale(out)
    assert not aside.exists() and (out / "index.json").exists()


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_publish_replaces_the_folder_whole(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    stage = make_stage(out)
    (stage / "new.txt").write_text("new")
    publish(stage, out)
    assert tree(out) == ["new.txt"] and tree(tmp_path) == ["out", "out/new.txt"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~_umask())  # not mkdtemp's 0700


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_kernels_replaces_its_old_output_and_leaves_no_stage(tmp_path, emit_only):
    out = tmp_path / "k"
    assert kernels(out, "matmul", "swiglu") == 0
    assert {e["arch"] for e in json.loads((out / "index.json").read_text())["candidates"]} == {"matmul", "swiglu"}
    assert kernels(out, "matmul") == 0  # one rename: swiglu's modules go with the old index
    assert not (out / "swiglu").exists() and (out / "matmul").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["k"]


def test_report_keeps_earlier_pages_and_leaves_no_stage(tmp_path):
    out = tmp_path / "r"
    assert report(out, "matmul") == 0
    (out / "stray.html").write_text("not listed in reports.json")
    (tmp_path / f".r.{DEAD_PID}-1.abc.tmp").mkdir()  # a killed report run's stage
    (tmp_path / f".r.{DEAD_PID}-1.abc.tmp" / "swiglu.html").write_text("half")
    assert main(["report", "rmsnorm", "--out", str(out), "--examples", "1", "--format", "md",
                 "--size", "m=8", "d=8", "n=8"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["r"]
    assert not (out / "stray.html").exists()  # only pages reports.json lists are carried over
    assert {"matmul.html", "matmul.md", "rmsnorm.md", "index.html", "index.md"} <= set(os.listdir(out))
    assert "rmsnorm.html" not in os.listdir(out)
    assert 'href="matmul.html"' in (out / "index.html").read_text()
    assert "](rmsnorm.md)" in (out / "index.md").read_text() and "](matmul.md)" in (out / "index.md").read_text()


def test_interrupted_run_leaves_out_as_it_was(tmp_path, monkeypatch, emit_only):
    out = tmp_path / "k"
    assert kernels(out) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(kernels_command, "_build_into", killed)
    with pytest.raises(KeyboardInterrupt):
        kernels_command.build_kernels(["swiglu"], out, log=lambda s: None)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["k"]


# -- bad --out -------------------------------------------------------------------------------

def _bad_outs(tmp_path):
    (tmp_path / "file").write_text("a file")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    users = tmp_path / "mine"
    users.mkdir()
    (users / "thesis.tex").write_text("not leantile's")
    site = tmp_path / "site"  # someone's index.json / reports.json: not the ones we write
    site.mkdir()
    (site / "index.json").write_text('{"pages": []}')
    (site / "reports.json").write_text("[1, 2]")
    return {
        "a file": (str(tmp_path / "file"), "exists and is not a folder"),
        "under a file": (str(tmp_path / "file" / "sub"), "which is not a folder"),
        "read-only folder": (str(ro), "read-only"),
        "under a read-only folder": (str(ro / "new" / "out"), "read-only"),
        "NUL": (str(tmp_path / "a\x00b"), "NUL"),
        "name too long": (str(tmp_path / ("x" * 300)), "too long"),
        "someone's folder": (str(users), "not written by leantile"),
        "someone's index": (str(site), "not written by leantile"),
        "root": ("/", "root folder"),
        "empty": ("", "empty path"),
    }


CASES = ["a file", "under a file", "read-only folder", "under a read-only folder", "NUL", "name too long",
         "someone's folder", "someone's index", "root", "empty"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["kernels", "report"])
def test_bad_out_is_one_line_and_writes_nothing(tmp_path, capsys, emit_only, command, case):
    out, why = _bad_outs(tmp_path)[case]
    before = tree(tmp_path)
    rc = main([command, "matmul", "--out", out, "--size", "m=8", "d=8", "n=8"]
              + (["--examples", "1"] if command == "report" else []))
    err = capsys.readouterr().err.strip().splitlines()
    try:
        assert rc == 1 and len(err) == 1, err
        assert err[0].startswith("error: --out ") and why in err[0], err
        assert tree(tmp_path) == before
    finally:
        (tmp_path / "ro").chmod(0o755)


def test_bad_out_from_a_subprocess(tmp_path):
    """The installed command, not only main(): one line, exit 1, no traceback."""
    (tmp_path / "f").write_text("x")
    r = subprocess.run([sys.executable, "-m", "leantile", "kernels", "matmul", "--out", str(tmp_path / "f" / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith("error: --out"), r.stderr
    assert tree(tmp_path) == ["f"]


def test_check_out_dir_resolves_and_creates_nothing(tmp_path):
    link = tmp_path / "link"
    (tmp_path / "real").mkdir()
    link.symlink_to(tmp_path / "real")
    assert check_out_dir(link) == (tmp_path / "real").resolve()
    assert check_out_dir(tmp_path / "a" / "b" / "c") == (tmp_path / "a" / "b" / "c").resolve()
    assert tree(tmp_path) == ["link", "real"]
    with pytest.raises(GraphError):
        check_out_dir(str(tmp_path / "x\x00"))


# -- names never leave --out -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["../escaped", "/tmp/abs", "a/b", "..", ""])
def test_a_graph_name_cannot_place_files_outside(tmp_path, monkeypatch, emit_only, name):
    """ir makes names identifiers; a graph renamed past validation (model_copy) is refused too."""
    from leantile.report import build

    g = architectures.build("matmul", m=8, d=8, n=8).model_copy(update={"name": name})
    monkeypatch.setattr(kernels_command, "load_source", lambda s, sizes=None: g)
    monkeypatch.setattr(build, "load_source", lambda s, sizes=None: g)
    (tmp_path / "out").mkdir()
    for run in (lambda: kernels_command.build_kernels(["x"], tmp_path / "out", log=lambda s: None),
                lambda: build.write_reports(["x"], tmp_path / "out", examples=1)):
        with pytest.raises((GraphError, UnsafePath)):
            run()
    assert tree(tmp_path) == ["out"]


def test_under_is_used_for_every_staged_path(tmp_path):
    stage = tmp_path / "s"
    stage.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (stage / "link").symlink_to(tmp_path / "elsewhere")
    for parts in (("..", "x"), ("/etc/passwd",), ("link", "x.py"), ("a\x00",)):
        with pytest.raises(UnsafePath):
            files.under(stage, *parts)


def test_two_sources_with_one_name_are_refused(tmp_path, capsys, emit_only):
    assert main(["kernels", "matmul", "matmul", "--out", str(tmp_path / "k")]) == 1
    assert "two sources build a graph named 'matmul'" in capsys.readouterr().err
    assert tree(tmp_path) == []
