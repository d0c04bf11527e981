"""`leantile bench [SOURCE ...] [--out DIR] [--untuned] [--size ...] [--candidate C] [--tile ...]`:
on a GPU, check and time each kernel against torch eager, torch.compile and the vendor
library (leantile.bench)."""
from __future__ import annotations

from .options import add_candidate, add_out, add_size, add_sources, add_tile, require_gpu


def cmd_bench(args) -> int:
    require_gpu("bench")
    from ..bench import run_bench

    return run_bench(args)


def register(sub) -> None:
    s = sub.add_parser("bench", help="check and time kernels against torch and vendor libraries (GPU)")
    add_sources(s)
    add_out(s, "benchmarks/results", "folder of the table, JSON and chart")
    add_size(s)
    add_candidate(s)
    add_tile(s)
    s.add_argument("--untuned", action="store_true", help="default tiles even where a tuned config exists")
    s.set_defaults(fn=cmd_bench)
