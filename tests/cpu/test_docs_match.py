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
