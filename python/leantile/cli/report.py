"""`leantile report [SOURCE ...] [--format html|md] [--out build/reports]`."""
from __future__ import annotations

from .. import architectures, ir
from ..sources import parse_sizes
from .options import add_out, add_size, add_sources


def cmd_report(args) -> int:
    from ..report.build import FORMATS, write_reports

    if args.examples < 1:
        raise ir.GraphError([f"--examples {args.examples}: must be at least 1 (random examples per candidate)"])
    formats = tuple(args.format) if args.format else FORMATS
    for p in write_reports(args.sources or list(architectures.NAMES), args.out, formats,
                           examples=args.examples, seed=args.seed, sizes=parse_sizes(args.size)):
        if p.suffix in (".html", ".md"):
            print(f"wrote {p}")
    return 0


def register(sub):
    s = sub.add_parser("report", help="write proof-checked derivation reports (HTML and Markdown)")
    add_sources(s)
    s.add_argument("--format", action="append", choices=("html", "md"),
                   help="html or md (repeatable; default: both)")
    add_out(s, "build/reports")
    s.add_argument("--examples", type=int, default=20, help="random examples per candidate and dtype (default 20)")
    s.add_argument("--seed", type=int, default=0, help="seed of the numeric check (default 0)")
    add_size(s)
    s.set_defaults(fn=cmd_report)
