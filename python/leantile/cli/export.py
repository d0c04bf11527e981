"""`leantile export [SOURCE ...] [--out exports] [--size K=V ...]`: <out>/<name>.json, the
graph with its default derivation (what the Lean exporter writes)."""
from __future__ import annotations

from pathlib import Path

from .. import architectures, ir
from ..files import check_out_dir, under, write_atomic
from ..sources import load_source, parse_sizes
from .options import add_out, add_size, add_sources


def exported_graph(source: str, sizes: dict | None = None) -> ir.Graph:
    """A graph with its default derivation attached, as `leantile export` writes it.
    `source`: a built-in name, file.json or module.py:function (see leantile.sources).
    A JSON file that already carries a derivation (a Lean export) keeps it."""
    from ..derive import default_steps

    g = load_source(source, sizes)
    return g if g.derivation else g.with_derivation(default_steps(g))


def cmd_export(args) -> int:
    sources = args.sources or list(architectures.NAMES)
    sizes = parse_sizes(args.size)
    # build (and derive) everything first: a failing source leaves nothing written
    graphs = [exported_graph(s, sizes) for s in sources]
    names = [g.name for g in graphs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ir.GraphError([f"export: two sources build a graph named {dup[0]!r}; "
                             "each writes <name>.json"])
    # every path is checked before anything is written (a name can never leave --out)
    out = check_out_dir(args.out, "--out")
    paths = [under(out, f"{g.name}.json") for g in graphs]
    for g, path in zip(graphs, paths):
        write_atomic(path, g.to_json(), root=out)
        print(f"wrote {Path(args.out) / path.name}")
    return 0


def register(sub) -> None:
    s = sub.add_parser("export", help="write <out>/<name>.json (graph + default derivation)")
    add_sources(s)
    add_out(s, "exports")
    add_size(s)
    s.set_defaults(fn=cmd_export)
