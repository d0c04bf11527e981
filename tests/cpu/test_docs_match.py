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
