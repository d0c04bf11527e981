"""`leantile check-lean`: proof status of every theorem the rule table cites."""
from __future__ import annotations


def cmd_check_lean(args) -> int:
    from ..lean import options_of, run_check_lean

    return run_check_lean(**options_of(args))


def register(sub) -> None:
    from ..lean import add_arguments

    s = sub.add_parser("check-lean", help="report each cited Lean theorem as checked, failed or unchecked")
    add_arguments(s)
    s.set_defaults(fn=cmd_check_lean)
