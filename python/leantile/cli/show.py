"""`leantile show SOURCE [--size K=V ...]`: a graph as readable text."""
from __future__ import annotations

from ..sources import load_source, parse_sizes
from .options import add_size


def cmd_show(args) -> int:
    from ..show import graph_text

    print(graph_text(load_source(args.source, parse_sizes(args.size))))
    return 0


def register(sub) -> None:
    s = sub.add_parser("show", help="print a graph as readable text")
    s.add_argument("source", help="built-in name, file.json, or module.py:function")
    add_size(s)
    s.set_defaults(fn=cmd_show)
