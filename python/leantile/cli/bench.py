"""`leantile bench [SOURCE ...] [--out DIR] [--untuned] [--size ...] [--candidate C] [--tile ...]`:
on a GPU, check and time each kernel against torch eager, torch.compile and the vendor
library (leantile.bench).

`leantile bench --suite quick|rest|full [--shard i/n] [--limit N] [--tag T ...] [--time-budget S]
[--out DIR]`: the shape suite (leantile.suite): model shapes, f16 and bf16, every architecture.
`--suite attention-variants`: soft-capping, ALiBi, document masking, MLA dims and heads of 256
against FlexAttention (leantile.architectures.variants).

`leantile bench --suite train [--limit N] [--tag T ...] [--out DIR]`: a training step (forward and
backward) per case against torch eager, torch.compile and the vendor paths (leantile.train_bench)."""
from __future__ import annotations

from ..ir import GraphError
from .options import add_candidate, add_out, add_size, add_sources, add_tile, require_gpu

SUITES = ("quick", "rest", "full", "attention-variants", "train")


def _check_suite_args(a) -> None:
    """Arguments that do not go together: one line each, before anything is loaded."""
    problems = []
    if a.suite is None:
        for flag, given in (("--shard", a.shard), ("--limit", a.limit), ("--tag", a.tag),
                            ("--time-budget", a.time_budget), ("--no-precompile", a.no_precompile)):
            if given not in (None, False):
                problems.append(f"bench: {flag} applies to --suite only")
    else:
        if a.sources:
            problems.append(f"bench: --suite {a.suite} runs its own cases; give SOURCE arguments or --suite, not both")
        for flag, given in (("--size", a.size), ("--candidate", a.candidate), ("--tile", a.tile),
                            ("--untuned", a.untuned)):
            if given not in (None, False):
                problems.append(f"bench: {flag} does not apply to --suite (each case has its shape; "
                                "the shipped default and the tuned entry are both reported)")
        if a.shard is not None:
            from ..suite import parse_shard
            try:
                parse_shard(a.shard)
            except GraphError as e:
                problems += e.problems
        if a.limit is not None and a.limit < 0:
            problems.append(f"bench: --limit {a.limit}: expected a number >= 0")
        if a.time_budget is not None and not a.time_budget > 0:
            problems.append(f"bench: --time-budget {a.time_budget}: expected seconds > 0")
    if problems:
        raise GraphError(problems)


def cmd_bench(args) -> int:
    _check_suite_args(args)
    require_gpu("bench")
    if args.suite == "train":
        if args.shard is not None or args.no_precompile:
            raise GraphError(["bench: --suite train takes --limit, --tag, --time-budget and --out only"])
        from ..train_bench import run_train_suite

        return run_train_suite(out=args.out, limit=args.limit, tags=args.tag, time_budget=args.time_budget)
    if args.suite is not None:
        from ..suite import run_suite

        return run_suite(args.suite, out=args.out, shard=args.shard, limit=args.limit, tags=args.tag,
                         time_budget=args.time_budget, precompile=not args.no_precompile)
    from ..bench import run_bench
    from ..sources import parse_sizes
    from ..tiles import parse_tiles

    return run_bench(args.sources, out=args.out, sizes=parse_sizes(args.size), candidate=args.candidate,
                     tiles=parse_tiles(args.tile), untuned=args.untuned)


def register(sub) -> None:
    s = sub.add_parser("bench", help="check and time kernels against torch and vendor libraries (GPU)")
    add_sources(s)
    add_out(s, "benchmarks/results", "folder of the table, JSON and chart")
    add_size(s)
    add_candidate(s)
    add_tile(s)
    s.add_argument("--untuned", action="store_true", help="default tiles even where a tuned config exists")
    s.add_argument("--suite", choices=SUITES, default=None,
                   help="the shape suite instead of SOURCEs: quick (the cases tagged quick: one 10-minute GPU call), "
                        "rest (the others), full (all); see leantile.suite; attention-variants (issue 51's, against "
                        "FlexAttention); or train: forward + backward "
                        "steps (leantile.train_bench)")
    s.add_argument("--shard", default=None, metavar="I/N", help="--suite: every N-th case from the I-th (1-based)")
    s.add_argument("--limit", type=int, default=None, metavar="N", help="--suite: the first N cases of the selection")
    s.add_argument("--tag", nargs="*", default=None, metavar="TAG",
                   help="--suite: only cases with one of these tags (decode skinny large published quick ...) or names")
    s.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="--suite: start no case after S seconds (the rest are listed as not run)")
    s.add_argument("--no-precompile", action="store_true",
                   help="--suite: compile each kernel when its case runs, not ahead in a process pool")
    s.set_defaults(fn=cmd_bench)
