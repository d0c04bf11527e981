"""`leantile tune [SOURCE ...] [--budget-s S] [--tuned-dir DIR] [--log FILE] [--size ...]`: on a
GPU, sweep each candidate's emitted tile configs and store the best (leantile.tune)."""
from __future__ import annotations

from .options import add_size, add_sources, require_gpu


def cmd_tune(args) -> int:
    require_gpu("tune")
    from ..sources import parse_sizes
    from ..tune import run_tune

    return run_tune(args.sources, sizes=parse_sizes(args.size), budget_s=args.budget_s, tuned_dir=args.tuned_dir,
                    log=args.log, all_candidates=args.all_candidates)


def register(sub) -> None:
    s = sub.add_parser("tune", help="sweep tile configs on a GPU and store the best (the user's tuned folder)")
    add_sources(s)
    add_size(s)
    s.add_argument("--budget-s", type=float, default=120.0, help="seconds per workload (default 120)")
    s.add_argument("--tuned-dir", default=None,
                   help="where <arch>.json go (default: the user's tuned folder, leantile.tuned.user_dir())")
    s.add_argument("--log", default=None, help="write every measurement here (JSON)")
    s.add_argument("--all-candidates", action="store_true", help="include the unfused fallback")
    s.set_defaults(fn=cmd_tune)
