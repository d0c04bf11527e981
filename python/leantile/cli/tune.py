"""`leantile tune [SOURCE ...] [--budget-s S] [--tuned-dir DIR] [--log FILE] [--size ...] [--all-candidates]`:
on a GPU, store the fastest verified plan of each workload. One tuning space: this is
`leantile search` (leantile.search.space, its measurements logged to its SQLite database and
resumed from it) with the options a sweep of the built-ins wants: every built-in by default,
`--budget-s` seconds per workload (the search's time budget, all workloads together), the
results in the user's tuned folder (or `--tuned-dir`, as `make tune` does for the shipped
configurations), and every measurement of these workloads written to `--log` as JSON."""
from __future__ import annotations

import json
import math

from .options import add_size, add_sources, require_gpu

# points per workload: many more than a sweep of --budget-s seconds reaches, so the time decides
POINTS = 4096


def cmd_tune(args) -> int:
    require_gpu("tune")
    from ..ir import GraphError
    from .search import GPU_DB, cmd_search, search_args

    if not (args.budget_s > 0 and math.isfinite(args.budget_s)):
        raise GraphError([f"--budget-s {args.budget_s}: a number of seconds, more than 0"])
    sources = args.sources or ["all"]
    if args.log:  # before anything runs: a log that cannot be written is one line, not a lost sweep
        from pathlib import Path

        from ..files import check_out_dir
        check_out_dir(Path(args.log).parent, "--log")
    search = search_args(sources, size=args.size, budget=POINTS, time_budget=args.budget_s * len(_names(sources)),
                         out=args.tuned_dir, all_candidates=args.all_candidates, db=GPU_DB)
    status = cmd_search(search)
    if args.log:
        _write_log(args.log, sources, args.size, search.db)
    return status


def _names(sources: list[str]) -> list[str]:
    """The sources the search takes ("all": every built-in)."""
    from .. import architectures
    return list(architectures.NAMES) if sources == ["all"] else sources


def _write_log(log: str, sources: list[str], size, db_path: str) -> None:
    """Every measurement the search database holds for these workloads (this run's and the
    earlier ones it resumed from), as {"log": [row, ...]}, written atomically."""
    from ..files import write_atomic
    from ..search.db import SearchDB
    from ..search.driver import Workload
    from ..sources import parse_sizes

    db = SearchDB(db_path)
    try:
        rows = [r for n in _names(sources) for r in db.rows(workload=Workload.from_source(n, parse_sizes(size)).key)]
    finally:
        db.close()
    write_atomic(log, json.dumps({"log": rows}, indent=1, default=str) + "\n")


def register(sub) -> None:
    s = sub.add_parser("tune", help="on a GPU, search each workload for a time and store the best (the user's tuned folder)")
    add_sources(s)
    add_size(s)
    s.add_argument("--budget-s", type=float, default=120.0, help="seconds per workload (default 120)")
    s.add_argument("--tuned-dir", default=None,
                   help="where <arch>.json go (default: the user's tuned folder, leantile.tuned.user_dir())")
    s.add_argument("--log", default=None, help="write every measurement of these workloads here (JSON)")
    s.add_argument("--all-candidates", action="store_true", help="include the unfused fallback")
    s.set_defaults(fn=cmd_tune)
