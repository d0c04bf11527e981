"""`leantile validate FILE ...`: everything `derive` and `kernels` would refuse is refused
here: the JSON Schema's rules (strict types, identifier names), the graph's semantics, and the
derivation it carries (each step's rule, theorem, sites and params replayed against the graph)."""
from __future__ import annotations

from .. import ir
from ..sources import load_json


def _one_line(msg) -> str:
    return " ".join(str(msg).split())


def cmd_validate(args) -> int:
    status = 0
    for f in args.files:
        try:
            g = load_json(f)
            print(f"{f}: ok ({g.name}, {len(g.nodes)} nodes"
                  + (f", derivation of {len(g.derivation)} steps" if g.derivation else "") + ")")
        except ir.GraphError as e:
            status = 1
            for p in e.problems:
                p = _one_line(p)
                print(p if p.startswith(str(f)) else f"{f}: {p}")
    return status


def register(sub) -> None:
    s = sub.add_parser("validate", help="validate graph JSON files")
    s.add_argument("files", nargs="+")
    s.set_defaults(fn=cmd_validate)
