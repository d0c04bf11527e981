"""`leantile check-lean`: proof status of every theorem the rule table cites."""
from __future__ import annotations


def cmd_check_lean(args) -> int:
    from ..lean import run_check_lean

    return run_check_lean(args)


def register(sub) -> None:
    s = sub.add_parser("check-lean", help="report each cited Lean theorem as checked, failed or unchecked")
    s.add_argument("--root", default=None, help="Lean project root (default: the one holding lakefile.lean)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--no-build", action="store_true", help="skip `lake build`")
    s.add_argument("--timeout", type=float, default=1800.0, help="seconds per Lean step")
    s.add_argument("--require-checked", action="store_true",
                   help="exit 1 unless every theorem is checked (no toolchain counts as failure)")
    s.add_argument("--write-axioms-file", metavar="PATH", default=None,
                   help="only write a Lean file with `#print axioms` for each theorem, then exit")
    s.set_defaults(fn=cmd_check_lean)
