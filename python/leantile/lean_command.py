"""`leantile check-lean`: proof status of every theorem the rule table cites."""
from __future__ import annotations


def _run(argv) -> int:
    from .lean import check_lean_main

    return check_lean_main(argv)


def register(sub):
    from .cli import add_passthrough

    add_passthrough(sub, "check-lean", "report each cited Lean theorem as checked, failed or unchecked", _run)
