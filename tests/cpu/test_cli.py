"""The CLI: list, show, export (byte-stable, atomic), validate (one line per problem, exit 1)."""
import json
import subprocess
import sys

import pytest

from leantile import architectures, ir
from leantile.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "leantile", *args], capture_output=True, text=True)


def test_list_names_every_builtin(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(n in out for n in architectures.NAMES)


def test_show_with_size_override(capsys):
    assert main(["show", "rmsnorm", "--size", "m=3", "d=5"]) == 0
    out = capsys.readouterr().out
    assert "m=3, d=5, n=4096" in out and "rsqrt" in out


def test_show_bad_size_is_one_line():
    r = run("show", "rmsnorm", "--size", "q=3")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "'q'" in r.stderr


def test_export_writes_six_stable_files(tmp_path):
    assert main(["export", "--out", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == sorted(f"{n}.json" for n in architectures.NAMES)
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["export", "--out", str(tmp_path)]) == 0
    assert first == {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    for name, data in first.items():
        assert ir.parse(data).name == name[:-5]


def test_export_unknown_arch_writes_nothing(tmp_path):
    r = run("export", "matmul", "nope", "--out", str(tmp_path))
    assert r.returncode == 1 and "'nope'" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_validate_ok_and_bad(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(architectures.build("matmul").to_json())
    d = json.loads(good.read_text())
    d["nodes"][2]["axis_a"] = "n"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    r = run("validate", str(good))
    assert r.returncode == 0
    r = run("validate", str(good), str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith(str(bad))]
    assert len(lines) == 1 and "node 2 (matmul)" in lines[0] and "axis_a" in lines[0]


def test_validate_missing_file_and_garbage(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2")
    r = run("validate", str(tmp_path / "none.json"), str(junk))
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    assert "cannot read" in r.stdout and "not JSON" in r.stdout


def test_version(capsys):
    import leantile
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"leantile {leantile.__version__}"


# ------------------------------------------------------------------ issue 14: the CLI package
def _boom(args):
    raise RuntimeError("deliberate")


def test_internal_error_is_one_line_exit_2_and_a_traceback_log(monkeypatch, tmp_path, capsys):
    from leantile.cli import listing

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LEANTILE_DEBUG", raising=False)
    monkeypatch.setattr(listing, "cmd_list", _boom)
    assert main(["list"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("internal error (a bug in leantile")
    log = tmp_path / "state" / "leantile" / "last-internal-error.log"
    assert f"traceback in {log}" in err[0] and "--debug" in err[0]
    text = log.read_text()
    assert text.startswith("leantile list") and "Traceback" in text and "RuntimeError: deliberate" in text
    assert main(["--debug", "list"]) == 2  # --debug: the traceback on stderr, no log line
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: deliberate" in err and "traceback in" not in err


@pytest.mark.parametrize("cmd", ["show", "export", "derive", "kernels", "report", "search", "bench", "tune"])
def test_every_command_that_takes_a_source_takes_size(cmd, capsys):
    from leantile.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd").choices[cmd]
    opts = {o for a in sub._actions for o in a.option_strings}
    assert "--size" in opts
    if cmd in ("derive", "bench"):
        assert {"--candidate", "--tile"} <= opts
    if cmd in ("export", "kernels", "report", "bench", "search"):
        assert "--out" in opts


@pytest.mark.parametrize("cmd", ["bench", "tune", "search"])
def test_gpu_commands_say_so_at_once_without_one(cmd, capsys):
    import time

    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    t0 = time.time()
    assert main([cmd, "attention"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GPU" in err[0] and time.time() - t0 < 10


@pytest.mark.parametrize("tile", ["block_q=64", "block_m=0", "stages=true", "threads=100000000"])
def test_bad_tile_is_one_line(tile, capsys):
    assert main(["derive", "matmul", "--tile", tile]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --tile")


def test_schedule_switches_say_what_they_do_and_old_names_still_read(capsys, tmp_path):
    """The schedule switches are tiles.Schedule (swap_operands, dependent_launch,
    flush_subnormals, overlap, pingpong); their old names (swap_ab, pdl, ftz) are read wherever
    tiles come from a user or a file, and become the new ones; both names at once is one line."""
    import leantile
    from leantile.derive import derive
    from leantile.tiles import RENAMED, Schedule, check_tiles, schedule_of
    from leantile.tuned import entry_problem

    assert set(RENAMED.values()) <= set(Schedule.model_fields)
    assert check_tiles({"block_m": 16, "swap_ab": 1, "pdl": 0, "ftz": 0}) == \
        {"block_m": 16, "swap_operands": 1, "dependent_launch": 0, "flush_subnormals": 0}
    assert schedule_of({"block_m": 64, "pdl": 0}) == Schedule(dependent_launch=0)
    g = architectures.build("matmul", m=4, d=4096, n=6144)
    old, new = derive(g, None, {"swap_ab": 1, "pdl": 0}), derive(g, None, {"swap_operands": 1, "dependent_launch": 0})
    assert old.tiles == new.tiles and old == new
    k = leantile.compile(g, tiles={"swap_ab": 1}, device="cpu", interpret=True)
    assert k.plan.tiles["swap_operands"] == 1 and "swap_ab" not in k.plan.tiles
    entry = {"arch": "matmul", "shape": {"m": 4, "d": 4096, "n": 6144}, "dtype": "f32", "gpu": "G",
             "candidate": "direct", "tiles": {"block_m": 64, "ftz": 0}, "time_ms": 1.0}
    assert entry_problem(entry) is None  # a tuned file written before the rename still reads
    from leantile.search.space import Point
    row = json.dumps({"candidate": "direct", "tiles": {"block_m": 16, "swap_ab": 1}})  # a search database's row
    assert Point.from_key(row) == Point.make("direct", {"block_m": 16, "swap_operands": 1})
    assert main(["derive", "matmul", "--tile", "pdl=0", "dependent_launch=1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "given twice" in err[0] and "dependent_launch" in err[0]
