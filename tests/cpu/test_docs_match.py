"""Docs and messages that match the package (issue 47): `leantile --help` opens with what the
command is for (it opened with a note for developers), and nothing in the repository cites
files that live outside it (comments cited the maintainers' anchors-h200.md)."""
from __future__ import annotations

import re
from pathlib import Path

from leantile.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"anchors-h200\.md|\.\./shared/|LEAN_NOTES\.md|DESIGN\.md")


def test_help_opens_with_what_leantile_is_for():
    text = build_parser().format_help()
    first = text.split("\n\n")[1]
    assert first.startswith("Fused GPU kernels") and "module per command" not in text, first
    assert "leantile derive SOURCE" in text


def test_nothing_cites_a_file_outside_the_repository():
    found = []
    for folder, pattern in (("python", "*.py"), ("tests", "*.py"), ("benchmarks", "*.py"), ("docs", "*.md")):
        for p in sorted((ROOT / folder).rglob(pattern)):
            if p.resolve() == Path(__file__).resolve():
                continue
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    for p in (ROOT / "README.md", ROOT / "Makefile"):
        found += [f"{p.name}: {m.group(0)}" for m in OUTSIDE.finditer(p.read_text())]
    assert not found, "\n".join(found)


def test_readme_table_lists_every_built_in_at_its_default_sizes():
    """The README's built-in table is `leantile list`: every name, in order, with its default
    sizes (it listed 6 of 9)."""
    from leantile import architectures

    text = (ROOT / "README.md").read_text()
    table = text.split("## Built-in architectures", 1)[1].split("\n\n")[1]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines()[2:] if ln.startswith("|")]
    want = [(n, " ".join(f"{k}={v}" for k, v in architectures.module(n).DEFAULT_SIZES.items()))
            for n in architectures.NAMES]
    assert [(r[0], r[2]) for r in rows] == want


BENCH_PATH = re.compile(r"(?<![\w/.$:-])benchmarks/[\w./{},*<>-]*")
LOCAL_RESULTS = re.compile(r"(?<![\w/.$:-])results/[\w./{},*<>-]+")


def _cited_files():
    """The maintained text that cites benchmark files: python/, tests/ and benchmarks/ (*.py, *.md),
    docs/*.md, the tuned configurations' provenance, README.md and the Makefile. Files under a
    `results/` folder are records written by a run (they cite paths as they were then): skipped,
    as is this file (its broken paths are on purpose)."""
    for folder, pattern in (("python", "*.py"), ("python", "*.json"), ("tests", "*.py"), ("benchmarks", "*.py"),
                            ("benchmarks", "*.md"), ("benchmarks", "*.sh"), ("docs", "*.md")):
        for p in sorted((ROOT / folder).rglob(pattern)):
            if "results" not in p.relative_to(ROOT).parts and "__pycache__" not in p.parts \
                    and p.resolve() != Path(__file__).resolve():
                yield p
    yield ROOT / "README.md"
    yield ROOT / "Makefile"


def _expand(path: str) -> list[str]:
    """`{a,b}` alternatives expanded (one level, as the docs write them)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in _expand(path[:m.start()] + alt + path[m.end():])]


def _exists(path: str) -> bool:
    """A cited path exists; `<placeholder>` segments and `*` are globs that must match something."""
    pattern = re.sub(r"<[^<>/]*>", "*", path)
    if "*" in pattern:
        return any(ROOT.glob(pattern.rstrip("/")))
    return (ROOT / pattern).exists()


def missing_benchmark_paths(files) -> list[str]:
    """Every `benchmarks/...` path cited in `files` that does not exist, and every bare `results/...`
    written in a file under benchmarks/ (relative to that file's folder: a question folder's
    VERDICT.md and probes, benchmarks/README.md for benchmarks/results/). Trailing punctuation is
    not part of a path; a path right after `<rev>:` names a file in a commit (`git show
    dab7026:benchmarks/...`) and one with `$` is written at run time (`$OUT/...`): both skipped, as
    is `results/` in python/, tests/ and docs/ (relative to a folder the text only implies)."""
    bad = []
    for p in files:
        rel = p.relative_to(ROOT)
        text = p.read_text(errors="replace")
        cited = [m.group(0) for m in BENCH_PATH.finditer(text)]
        if rel.parts[0] == "benchmarks":
            here = p.parent.relative_to(ROOT).as_posix()
            cited += [f"{here}/{m.group(0)}" for m in LOCAL_RESULTS.finditer(text)]
        for path in cited:
            path = path.rstrip(".,;:)'`\"")
            if path.endswith("-"):  # a name wrapped at a hyphen onto the next line: its folder must exist
                path = path.rsplit("/", 1)[0] + "/"
            bad += [f"{rel}: {q}" for q in _expand(path) if not _exists(q)]
    return bad


def test_every_cited_benchmark_path_exists():
    """Each `benchmarks/...` path the docs, comments, docstrings and provenance strings cite names a
    file or folder of the repository (issue 48: results moved into one folder per question; a
    stale path pointed at nothing). Globs and `<placeholders>` must match at least one file."""
    bad = missing_benchmark_paths(list(_cited_files()))
    assert not bad, "\n".join(bad)


def test_a_broken_path_is_caught(tmp_path):
    """The check above can fail: a cited path that is not there, in either form."""
    doc = ROOT / "benchmarks" / "suite" / "VERDICT.md"
    assert not missing_benchmark_paths([doc])
    fake = doc.read_text() + "\nsee benchmarks/suite/results/no-such-run.json and results/nor-this.md\n"
    assert [b.split(": ", 1)[1] for b in _missing_in(fake, doc)] == [
        "benchmarks/suite/results/no-such-run.json", "benchmarks/suite/results/nor-this.md"]


def _missing_in(text: str, where: Path) -> list[str]:
    """missing_benchmark_paths of `text` as if it were the file `where`."""
    class Doc(type(where)):
        def read_text(self, *a, **k):
            return text
    return missing_benchmark_paths([Doc(where)])
