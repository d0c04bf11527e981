"""Every command over the hostile corpus (tests/hostile/): one line, the right exit status,
no traceback, no file outside the output folder, no code executed.

The corpus: tests/hostile/graphs/*.json (made by tests/hostile/make_corpus.py; `bad-*`
must be refused by validate, `ok-*` must pass every command) and tests/hostile/sources/*.py
(Python sources that misbehave). Every payload in it would create `hostile-marker` in the
working directory; the sandbox checks for it after every command.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from leantile import ir
from leantile.cli import main

HOSTILE = Path(__file__).parents[1] / "hostile"
GRAPHS = sorted((HOSTILE / "graphs").glob("*.json"))
BAD = [f for f in GRAPHS if f.name.startswith("bad-")]
OK = [f for f in GRAPHS if f.name.startswith("ok-")]
ESCAPES = ("/tmp/leantile-evil", "/tmp/leantile-evil.json")  # absolute names the corpus uses


class Sandbox:
    """A working directory for one test: commands run in `work`; anything they create must
    lie under the output folders they were given."""

    def __init__(self, root: Path, capsys):
        self.root, self.capsys = root, capsys
        self.work = root / "work"
        self.work.mkdir()

    def files(self) -> set[Path]:
        return {p for p in self.root.rglob("*")}

    def run(self, *argv, outs=(), expect=(0, 1)) -> tuple[int, str, str]:
        before = self.files()
        self.capsys.readouterr()
        code = main([str(a) for a in argv])
        out, err = self.capsys.readouterr()
        what = f"leantile {' '.join(map(str, argv))[:200]}: exit {code}\nstdout: {out[-800:]}\nstderr: {err[-800:]}"
        assert code in expect, what
        assert "Traceback" not in out + err, what
        assert "internal error" not in err, what
        assert not (self.work / "hostile-marker").exists(), "code from the corpus ran: " + what
        assert not any(os.path.exists(p) for p in ESCAPES), "wrote outside the sandbox: " + what
        allowed = [self.work / o for o in outs]
        new = {p for p in self.files() - before if p.is_file()}
        stray = [p for p in new if not any(a == p or a in p.parents for a in allowed)
                 and p.name not in ("search.sqlite",) and ".hypothesis" not in p.parts]
        assert not stray, f"wrote outside its output folders: {sorted(stray)[:5]}\n{what}"
        if code == 1:  # validate reports on stdout (its output is the report), the others on stderr
            lines = [x for x in (out if argv and argv[0] == "validate" else err).splitlines() if x.strip()]
            assert lines and all(x.startswith(("error:", "warning:")) or ": " in x for x in lines), what
        return code, out, err


@pytest.fixture
def box(tmp_path, capsys, monkeypatch):
    sb = Sandbox(tmp_path, capsys)
    monkeypatch.chdir(sb.work)
    monkeypatch.setenv("LEANTILE_TUNED_DIR", str(sb.work / "tuned"))  # never the shipped configs
    return sb


def test_corpus_is_present_and_labelled():
    assert len(BAD) >= 60 and len(OK) >= 5
    assert all(f.name.startswith(("bad-", "ok-")) for f in GRAPHS)


@pytest.mark.parametrize("f", BAD, ids=lambda f: f.stem)
def test_bad_file_refused_by_every_command(f, box):
    code, out, err = box.run("validate", f, expect=(1,))
    lines = [x for x in out.splitlines() if x.strip()]
    assert lines and all(x.startswith(str(f)) for x in lines), out
    assert all("\n" not in x and len(x) < 400 for x in lines)
    # a graph that validate refuses is refused by every command that reads it
    for argv, outs in ((("show", f), ()), (("derive", f), ()), (("derive", f, "--json"), ()),
                       (("export", f, "--out", "ex"), ("ex",)), (("kernels", f, "--out", "kn"), ("kn",)),
                       (("report", f, "--out", "rp", "--examples", "1"), ("rp",)),
                       (("search", f, "--fake", "--budget", "2", "--db", "s.sqlite", "--out", "tn"), ("tn", "s.sqlite"))):
        if f.stem.startswith("bad-deriv") and argv[0] == "show":
            continue  # show prints the graph; it does not replay the derivation
        code, out, err = box.run(*argv, outs=outs, expect=(1,))
        assert str(f) in err or f.name in err, (argv, err)
        assert not any((box.work / o).exists() and any((box.work / o).rglob("*.py")) for o in outs)


@pytest.mark.parametrize("f", OK, ids=lambda f: f.stem)
def test_ok_file_goes_through_every_command(f, box):
    box.run("validate", f, expect=(0,))
    box.run("show", f, expect=(0,))
    box.run("derive", f, expect=(0,))
    code, out, _ = box.run("derive", f, "--json", expect=(0,))
    box.run("export", f, "--out", "ex", outs=("ex",), expect=(0,))
    g = ir.load(f)
    assert ir.load(box.work / "ex" / f"{g.name}.json").nodes == g.nodes
    box.run("kernels", f, "--out", "kn", outs=("kn",), expect=(0,))
    index = json.loads((box.work / "kn" / "index.json").read_text())
    assert index["candidates"] and all(e["error"] is None for e in index["candidates"])
    for py in (box.work / "kn").rglob("*.py"):  # the generated modules are Python, names and all
        compile(py.read_text(), str(py), "exec")


SOURCES = [(HOSTILE / "sources" / "renamed_after_build.py", fn) for fn in
           ("name_dotdot", "name_absolute", "output_injection", "input_injection", "constructed_garbage",
            "constructed_object", "dangling_output")] + \
          [(HOSTILE / "sources" / "misbehaving.py", fn) for fn in
           ("exits", "exits_text", "returns_dict", "returns_none", "recurses", "raises", "keyboard",
            "not_callable", "missing", "unprintable", "generator_exit", "empty_graph_error")] + \
          [(HOSTILE / "sources" / "broken_syntax.py", "build"), (HOSTILE / "sources" / "exits_on_import.py", "build"),
           (HOSTILE / "sources" / "no_such_file.py", "build")]


@pytest.mark.parametrize("path,fn", SOURCES, ids=lambda x: getattr(x, "stem", x))
def test_misbehaving_python_source_is_one_line(path, fn, box):
    spec = f"{path}:{fn}"
    for argv, outs in ((("show", spec), ()), (("export", spec, "--out", "ex"), ("ex",)),
                       (("kernels", spec, "--out", "kn"), ("kn",))):
        code, out, err = box.run(*argv, outs=outs, expect=(1,))
        assert len([x for x in err.splitlines() if x.strip()]) <= 3, err
    assert not (box.root / "evil.json").exists() and not (box.root / "evil").exists()


CLI_CASES = [
    ("derive", "matmul", "--tile", "block_m=0"),
    ("derive", "matmul", "--tile", "block_m=-64"),
    ("derive", "matmul", "--tile", "block_m=abc"),
    ("derive", "matmul", "--tile", "block_m=" + "9" * 5000),
    ("derive", "matmul", "--tile", "block_m=true"),
    ("derive", "matmul", "--tile", "block_q=64"),
    ("derive", "matmul", "--candidate", "no_such_candidate"),
    ("derive", "matmul", "--candidate", "x\n__import__('os')"),
    ("show", "matmul", "--size", "m=2147483649"),
    ("show", "matmul", "--size", "m=0"),
    ("show", "matmul", "--size", "m=-3"),
    ("show", "matmul", "--size", "=3"),
    ("show", "matmul", "--size", "m\n=3"),
    ("show", "matmul", "--size", "m=" + "9" * 5000),
    ("show", "matmul", "--size", "nosuchaxis=3"),
    ("show", "no_such_builtin"),
    ("show", "x.py"),
    ("show", "x.py:"),
    ("show", ":build"),
    ("validate", "no_such_file.json"),
    ("validate", "."),
    ("validate", "/dev/null"),
    ("validate", "a\x00b.json"),
    ("nosuchcommand",),
    (),
    ("search", "matmul", "--fake", "--budget", "0", "--db", "s.sqlite"),
    ("search", "matmul", "--fake", "--gpus", "abc", "--db", "s.sqlite"),
    ("search", "matmul", "--fake", "--budget", "-1", "--db", "s.sqlite"),
    ("kernels", "matmul", "--size", "m=0"),
    ("show", "matmul", "--size", "m=64", "m=128"),
    ("derive", "matmul", "--tile", "block_m=64", "block_m=128"),
    ("derive", "matmul", "--tile", "block_n=3"),
    ("derive", "matmul", "--tile", "block_k=48"),
    ("derive", "matmul", "--size", "m=64", "d=64", "n=64", "--tile", "block_m=100"),
]


@pytest.mark.parametrize("argv", CLI_CASES, ids=lambda a: " ".join(a)[:60].replace("\n", "\\n").replace("\x00", "NUL"))
def test_bad_arguments_are_one_line(argv, box):
    code, out, err = box.run(*argv, expect=(1,))
    lines = [x for x in (out if argv and argv[0] == "validate" else err).splitlines() if x.strip()]
    assert 1 <= len(lines) <= 2, err


@pytest.mark.parametrize("make_out", ["file", "under_file", "nul"])
@pytest.mark.parametrize("command", ["export", "kernels", "report"])
def test_bad_out_folder_is_one_line_and_writes_nothing(command, make_out, box):
    (box.work / "afile").write_text("keep me")
    out = {"file": "afile", "under_file": "afile/sub", "nul": "bad\x00dir"}[make_out]
    extra = ("--examples", "1") if command == "report" else ()
    code, _, err = box.run(command, "matmul", "--size", "m=8", "d=16", "n=8", "--out", out, *extra, expect=(1,))
    assert "--out" in err or "afile" in err, err
    assert (box.work / "afile").read_text() == "keep me"


# -- tile values the kernels cannot use: refused where they are parsed (tiles.UserTiles) ----------

@pytest.mark.parametrize("pair", ["block_n=3", "block_m=100", "block_k=48", "block_r=5", "block_n=1000"])
def test_a_block_the_kernels_cannot_use_is_one_line_naming_it(pair, box):
    """`--tile block_n=3` derived a plan whose GEMM has no fragment layout (TileLang: "no
    available layout found" when lowered): refused at parse time, one line naming the
    parameter, the value and what is allowed."""
    name, value = pair.split("=")
    code, _, err = box.run("derive", "matmul", "--tile", pair, expect=(1,))
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: --tile {name}: {value} is not a block"), err
    assert "power of two" in lines[0] and "multiple of 32" in lines[0] and "nearest" in lines[0], err


def test_the_block_rule_allows_every_block_the_shipped_code_uses():
    """The rule refuses 3 or 48 and keeps every block leantile itself asks for: the search's
    domains, the tuned configs, DEFAULT_TILES, the shapes' defaults (2 x 1024 softmax rows, 16
    swapped rows, 96 and 192 one-wave columns, f64's halved tiles) and get_configs' options."""
    from leantile.derive import shape_tiles
    from leantile.derive.kernels import DEFAULT_TILES
    from leantile.search.space import DOMAINS
    from leantile.tiles import BLOCKS, UserTiles, block_allowed, tile_problems

    used = {(p, v) for p, vs in DOMAINS.items() if p in BLOCKS for v in vs}
    for f in (Path(__file__).parents[2] / "python" / "leantile" / "tuned_configs").glob("*.json"):
        for e in json.loads(f.read_text())["entries"]:
            used |= {(p, v) for p, v in e["tiles"].items() if p in BLOCKS}
            UserTiles.model_validate(e["tiles"])
    consts = [DEFAULT_TILES] + [v for v in vars(shape_tiles).values() if isinstance(v, dict)]
    used |= {(p, v) for d in consts for p, v in d.items() if p in BLOCKS}
    used |= {("block_n", c) for c in shape_tiles.WAVE_COLUMNS}
    used |= {(p, v // 2) for p, v in DEFAULT_TILES.items() if p in ("block_m", "block_k")}  # f64's
    assert {("block_m", 2), ("block_n", 1024), ("block_m", 16), ("block_n", 96), ("block_n", 192)} <= used
    assert [x for x in used if not block_allowed(x[1])] == []
    assert [v for v in (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256, 512, 1024) if not block_allowed(v)] == []
    assert [v for v in (0, 3, 5, 6, 12, 24, 48, 80, 100, 112, 1000, 1025, 2048) if block_allowed(v)] == []
    assert tile_problems({"block_n": 3}, user=False) == []  # derive's own check: any block (the interpreter's)


def test_compile_refuses_a_block_the_kernels_cannot_use():
    import leantile

    with pytest.raises(ir.GraphError) as e:
        leantile.compile("matmul", device="cpu", tiles={"block_n": 3})
    assert str(e.value).count("\n") == 0 and "tiles= block_n: 3 is not a block" in str(e.value)


def test_a_tuned_entry_with_a_block_the_kernels_cannot_use_is_ignored(tmp_path, capsys):
    from leantile import tuned

    shape = {"m": 64, "d": 64, "n": 64}
    good = {"arch": "matmul", "shape": shape, "dtype": "f16", "gpu": "NVIDIA H100 80GB HBM3", "candidate": "direct",
            "tiles": {"block_m": 64, "block_n": 96}, "time_ms": 0.01}
    bad = {**good, "tiles": {"block_m": 64, "block_n": 3}, "time_ms": 0.005}
    (tmp_path / "matmul.json").write_text(json.dumps({"schema": tuned.SCHEMA, "arch": "matmul", "entries": [bad, good]}))
    found = tuned.tuned_entries("matmul", shape, root=tmp_path)
    assert [e["tiles"] for e, _ in found] == [good["tiles"]]
    err = capsys.readouterr().err
    assert "entry 0: tiles.block_n: 3 is not a block the kernels can use" in err, err
    with pytest.raises(ValueError, match="block_n: 3 is not a block"):
        tuned.check_entry(bad)


# -- an --out that is a symlink loop: one line, nothing written, the link untouched ---------------

OUT_COMMANDS = {"export": (), "kernels": (), "report": ("--examples", "1"),
                "search": ("--fake", "--budget", "1", "--db", "s.sqlite")}


@pytest.mark.parametrize("loop", ["self", "pair", "under"])
@pytest.mark.parametrize("command", sorted(OUT_COMMANDS))
def test_out_that_is_a_symlink_loop_is_one_line(command, loop, box):
    """`ln -s loop loop; leantile kernels --out loop` was an internal error, and `report` swapped
    the link away for its folder and left a stage behind."""
    os.symlink("loop", box.work / "loop")
    os.symlink("b", box.work / "a")
    os.symlink("a", box.work / "b")
    out = {"self": "loop", "pair": "a", "under": "loop/sub"}[loop]
    code, _, err = box.run(command, "matmul", "--size", "m=8", "d=16", "n=8", "--out", out, *OUT_COMMANDS[command],
                           expect=(1,))
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == [f"error: --out {out}: is {'under ' if loop == 'under' else ''}a symlink loop, not a folder"], err
    assert sorted(p.name for p in box.work.iterdir()) == ["a", "b", "loop"]  # no stage, no database
    assert (os.readlink(box.work / "loop"), os.readlink(box.work / "a")) == ("loop", "b")


def test_without_torch_help_list_validate_show_work(tmp_path):
    """A user who only wants to validate graphs need not install torch."""
    script = ("import sys; sys.modules['torch'] = None; sys.modules['tilelang'] = None\n"
              "from leantile.cli import main; sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "python")}
    good = str(HOSTILE / "graphs" / "ok-softmax-with-derivation.json")
    for argv, code in ((["--help"], 0), (["list"], 0), (["validate", good], 0), (["show", good], 0),
                       (["validate", str(BAD[0])], 1), (["derive", "--help"], 0), (["search", "--help"], 0)):
        r = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
        assert r.returncode == code and "Traceback" not in r.stderr, (argv, r.stdout[-500:], r.stderr[-1500:])


def test_internal_error_is_one_line_with_status_2(box, monkeypatch):
    """A bug is reported as a bug (exit 2), not blamed on the user's input."""
    import leantile.show

    def broken(g):
        raise KeyError("some_internal_table_entry")

    monkeypatch.setattr(leantile.show, "graph_text", broken)
    box.capsys.readouterr()
    assert main(["show", "matmul"]) == 2
    err = box.capsys.readouterr().err
    assert "internal error" in err and "bug" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_subprocess_injection_file_runs_nothing(tmp_path):
    """The two injection files of the issue, end to end in a real process (as make kernels runs)."""
    for name in ("bad-inject-input-name.json", "bad-inject-output-name.json"):
        for argv in (["validate", str(HOSTILE / "graphs" / name)],
                     ["kernels", str(HOSTILE / "graphs" / name), "--out", "kn"]):
            r = subprocess.run([sys.executable, "-m", "leantile", *argv], capture_output=True, text=True,
                               cwd=tmp_path, timeout=300)
            assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr, r.stderr
            assert not (tmp_path / "hostile-marker").exists()
            assert not (tmp_path / "kn").exists() or not any((tmp_path / "kn").rglob("*.py"))


@pytest.mark.parametrize("f", GRAPHS, ids=lambda f: f.stem)
def test_json_schema_and_validator_agree(f):
    """Where the published JSON Schema rejects a document, leantile rejects it too, and the
    pydantic models accept exactly what the schema accepts (semantic checks come on top)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[2] / "schemas" / "leantile-v1.schema.json").read_text())
    try:
        doc = ir.decode_json(f.read_bytes())
    except ir.GraphError:
        return  # not a JSON document at all (encoding, depth, duplicate keys): nothing to compare
    schema_ok = jsonschema.Draft202012Validator(schema).is_valid(doc)
    try:
        ir.Graph.model_validate(doc) if isinstance(doc, dict) and doc.get("schema") == ir.SCHEMA_ID else 1 / 0
        model_ok = True
    except Exception:
        model_ok = False
    assert schema_ok == model_ok, (f.name, schema_ok, model_ok)
    if not schema_ok:
        with pytest.raises(ir.GraphError):
            ir.load(f)


def test_stdout_on_a_full_device_is_one_line_and_status_1(tmp_path):
    """`leantile list > /dev/full`: the write fails with ENOSPC, no file named: the machine's
    problem, one line and exit 1, not an internal error."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "leantile", "list"], stdout=full, stderr=subprocess.PIPE, text=True,
                           cwd=tmp_path, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "python")})
    assert r.returncode == 1, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "No space" in lines[0], r.stderr
