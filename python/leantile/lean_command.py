"""`leantile check-lean`: proof status of every theorem the rule table cites."""
from __future__ import annotations


def _run(args) -> int:
    from .lean import check_lean_main

    return check_lean_main(args.rest)


def register(sub):
    s = sub.add_parser("check-lean", add_help=False,
                       help="report each cited Lean theorem as checked, failed or unchecked")
    s.add_argument("rest", nargs="*", help="options of check-lean (see `leantile check-lean --help`)")
    s.set_defaults(fn=_run)
