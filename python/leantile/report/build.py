"""Write build/reports/<arch>.html / .md, the index pages and the vendored KaTeX.

The folder is published whole, in one rename (leantile.files): --out is checked first (a
file, a path under a file, a read-only folder or NUL are one line of bad input), every page of
the run is rendered, then the complete new folder is built in a hidden stage beside --out:
this run's pages, the pages of earlier runs that reports.json lists and that are still in the
folder (copied over, so the index keeps listing them), reports.json, the indexes and KaTeX.
The stage then replaces --out in one rename. A kill at any moment leaves the old folder or the
new one (never pages without their index); the stage a killed run leaves is removed by the next
run. Files in --out that reports.json does not list are not carried over; an --out that has
files but no reports.json of its own was not written by `report`: refused, never deleted.
Every path is built with leantile.files.under, so no graph name can place a file elsewhere.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from .. import ir
from ..files import (MAX_MARKER_BYTES, UnsafePath, check_out_dir, check_replaceable, discard, load_json, make_stage, publish,
                     read_capped, under, write_atomic)
from ..lean import find_root, theorem_status
from ..sources import load_source
from . import html, md
from .collect import collect

ASSETS = Path(__file__).parent / "assets" / "katex"
FORMATS = ("html", "md")
MARKER = ("reports.json", "entries")  # a folder `report` wrote (and may replace): its list of pages
INDEX_SCHEMA = "leantile-reports-index/v1"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a graph name (ir's identifier rule)


def _summary(r) -> tuple:
    counts: dict[str, int] = {}
    for p in r.proofs:
        counts[p.words] = counts.get(p.words, 0) + 1
    proofs = ", ".join(f"{n} {w}" for w, n in sorted(counts.items())) or "no theorem cited"
    return r.name, r.chosen, len(r.steps), proofs, all(e.ok for e in r.evidence)


def _files_of(name: str) -> list[str]:
    """The files one report may have in the folder."""
    stem = md.page_stem(name)
    return [f"{stem}.html", f"{stem}.md", f"{stem}.graph.svg", f"{stem}.bench.png"]


def _entry(e) -> tuple | None:
    """An entry of reports.json, checked (the file may have been edited): None if malformed."""
    if not isinstance(e, list) or len(e) != 5:
        return None
    name, chosen, steps, proofs, ok = e
    if not (isinstance(name, str) and NAME.fullmatch(name) and isinstance(chosen, str)
            and type(steps) is int and isinstance(proofs, str) and isinstance(ok, bool)):
        return None
    return name, chosen, steps, proofs, ok


def _earlier(out: Path) -> list[tuple]:
    try:  # the folder's own list, but a user may have edited it (or put a FIFO there)
        entries = load_json(read_capped(out / MARKER[0], MAX_MARKER_BYTES, "marker file"))[MARKER[1]]
    except (ValueError, KeyError, TypeError, IndexError):  # NotReadable is a ValueError
        return []
    return [e for e in map(_entry, entries if isinstance(entries, list) else []) if e is not None]


def _carry_over(out: Path, stage: Path, skip: set[str]) -> list[tuple]:
    """Copy the pages of earlier runs (listed in out/reports.json, still in out, not redone
    now) into the stage; return their entries."""
    kept = []
    for e in _earlier(out):
        if e[0] in skip:
            continue
        copied = False
        for f in _files_of(e[0]):
            try:
                src = under(out, f)
            except UnsafePath:  # a symlink out of the folder: not ours to copy
                continue
            if src.is_file() and not src.is_symlink():
                shutil.copyfile(src, under(stage, f))
                under(stage, f).chmod(0o644)
                copied = True
        if copied:
            kept.append(e)
    return kept


def _with_page(entries: list[tuple], out: Path, fmt: str) -> list[tuple]:
    """The entries whose page in this format is in the folder."""
    return [e for e in entries if under(out, f"{md.page_stem(e[0])}.{fmt}").is_file()]


def copy_katex(out: Path) -> None:
    for src in sorted(ASSETS.rglob("*")):
        if src.is_file():
            target = under(out, html.KATEX, *src.relative_to(ASSETS).parts)
            if not target.exists() or target.read_bytes() != src.read_bytes():
                write_atomic(target, src.read_bytes(), root=out).chmod(0o644)


def _write(stage: Path, name: str, data) -> Path:
    p = write_atomic(under(stage, name), data, root=stage)
    p.chmod(0o644)  # mkstemp makes 0600 files; reports are for reading
    return p


def write_reports(sources, out="build/reports", formats=FORMATS, examples: int = 20, seed: int = 0,
                  results_dir=None, statuses=None, sizes=None, flag: str = "--out") -> list[Path]:
    """Render every source and publish the folder; returns the files of this run (under out).
    Bad --out and bad sources are refused before anything is written."""
    out_path = check_out_dir(out, flag)
    check_replaceable(out_path, *MARKER, flag, "report")  # refused before the work; again at publish
    root = find_root()
    results_dir = Path(results_dir) if results_dir else root / "benchmarks" / "results"
    graphs = [(s, load_source(s, sizes)) for s in sources]
    names = [g.name for _, g in graphs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ir.GraphError([f"report: two sources build a graph named {dup[0]!r}; each writes <out>/{dup[0]}.*"])
    for s, g in graphs:  # ir makes names identifiers; a name that is not is refused here too
        if not NAME.fullmatch(g.name):
            raise ir.GraphError([f"{s}: graph name {g.name!r} cannot name a page in {flag} (not an identifier)"])
    statuses = theorem_status(root) if statuses is None else statuses
    from ..progress import progress

    reports = [collect(spec, g, statuses, root, results_dir, examples=examples, seed=seed)
               for spec, g in progress(graphs, "report")]

    stage = make_stage(out_path, flag)
    try:
        written = []
        earlier = _carry_over(out_path, stage, set(names))
        for r in reports:
            chart = html.chart_for(r)
            if "html" in formats:
                written.append(_write(stage, f"{md.page_stem(r.name)}.html", html.render(r, chart)))
            if "md" in formats:
                graph_file = f"{md.page_stem(r.name)}.graph.svg"
                written.append(_write(stage, graph_file, r.graph_svg))
                chart_file = None
                if chart:
                    chart_file = f"{md.page_stem(r.name)}.bench.png"
                    written.append(_write(stage, chart_file, chart))
                written.append(_write(stage, f"{md.page_stem(r.name)}.md", md.render(r, graph_file, chart_file)))
        every = sorted(earlier + [_summary(r) for r in reports])
        _write(stage, "reports.json", json.dumps({"schema": INDEX_SCHEMA, "entries": every}, indent=1) + "\n")
        html_pages, md_pages = _with_page(every, stage, "html"), _with_page(every, stage, "md")
        if "html" in formats or html_pages:
            copy_katex(stage)
            written.append(_write(stage, "index.html", html.index(html_pages)))
        if "md" in formats or md_pages:
            written.append(_write(stage, "index.md", md.index(md_pages)))
        check_replaceable(out_path, *MARKER, flag, "report")
        publish(stage, out_path)
    finally:
        discard(stage)
    return [Path(out) / p.relative_to(stage) for p in written]
