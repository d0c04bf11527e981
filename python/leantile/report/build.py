"""Write build/reports/<arch>.html / .md, the index pages and the vendored KaTeX."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..files import write_atomic
from ..lean import find_root, theorem_status
from ..sources import load_source
from . import html, md
from .collect import collect

ASSETS = Path(__file__).parent / "assets" / "katex"
FORMATS = ("html", "md")


def _summary(r) -> tuple:
    counts: dict[str, int] = {}
    for p in r.proofs:
        counts[p.words] = counts.get(p.words, 0) + 1
    proofs = ", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "no theorem cited"
    return r.name, r.chosen, len(r.steps), proofs, all(e.ok for e in r.evidence)


def _remember(out: Path, entries: list[tuple]) -> list[tuple]:
    """Merge this run's index entries into out/reports.json, the summaries of every page ever
    written there, so the index lists all reports in the folder, not only this run's."""
    path = out / "reports.json"
    try:
        known = {e[0]: tuple(e) for e in json.loads(path.read_text())["entries"]}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        known = {}
    known.update({e[0]: tuple(e) for e in entries})
    every = sorted(known.values())
    write_atomic(path, json.dumps({"schema": "leantile-reports-index/v1", "entries": every}, indent=1) + "\n")
    os.chmod(path, 0o644)
    return every


def _with_page(entries: list[tuple], out: Path, fmt: str) -> list[tuple]:
    """The entries whose page in this format is still in the folder."""
    return [e for e in entries if (out / f"{e[0]}.{fmt}").exists()]


def copy_katex(out: Path) -> None:
    dest = out / html.KATEX
    for src in sorted(ASSETS.rglob("*")):
        if src.is_file():
            target = dest / src.relative_to(ASSETS)
            if not target.exists() or target.read_bytes() != src.read_bytes():
                os.chmod(write_atomic(target, src.read_bytes()), 0o644)


def write_reports(sources, out="build/reports", formats=FORMATS, examples: int = 20, seed: int = 0,
                  results_dir=None, statuses=None, sizes=None) -> list[Path]:
    """Render every source; returns the files written. Graphs are loaded before anything is written."""
    root = find_root()
    out = Path(out)
    results_dir = Path(results_dir) if results_dir else root / "benchmarks" / "results"
    graphs = [(s, load_source(s, sizes)) for s in sources]
    statuses = theorem_status(root) if statuses is None else statuses
    written, entries = [], []
    for spec, g in graphs:
        r = collect(spec, g, statuses, root, results_dir, examples=examples, seed=seed)
        entries.append(_summary(r))
        chart = html.chart_for(r)
        if "html" in formats:
            written.append(write_atomic(out / f"{r.name}.html", html.render(r, chart)))
        if "md" in formats:
            graph_file = f"{r.name}.graph.svg"
            written.append(write_atomic(out / graph_file, r.graph_svg))
            chart_file = None
            if chart:
                chart_file = f"{r.name}.bench.png"
                written.append(write_atomic(out / chart_file, chart))
            written.append(write_atomic(out / f"{r.name}.md", md.render(r, graph_file, chart_file)))
    every = _remember(out, entries)
    if "html" in formats:
        copy_katex(out)
        written.append(write_atomic(out / "index.html", html.index(_with_page(every, out, "html"))))
    if "md" in formats:
        written.append(write_atomic(out / "index.md", md.index(_with_page(every, out, "md"))))
    for p in written:  # mkstemp makes 0600 files; reports are for reading
        os.chmod(p, 0o644)
    return written
