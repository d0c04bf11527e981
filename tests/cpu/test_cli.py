"""The CLI: list, show, export (byte-stable, atomic), validate (one line per problem, exit 1)."""
import json
import subprocess
import sys

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
