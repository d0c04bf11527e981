"""`leantile search SOURCE [SOURCE ...] [--missing-only] [--budget N] [--islands K] [--gpus 0,1] [--db PATH]
[--policy momentum|random] [--seed S] [--fake] [--out DIR] [--plot DIR] [--size K=V ...]`

For each workload: search derivation candidates x tile parameters for the fastest kernel
that verifies against the reference, log every measurement to SQLite (rerunning the same
command resumes the search), and save the top-1 to DIR/<arch>.json (by default the user's
tuned folder, leantile.tuned.user_dir(), which the lookup reads before the shipped one).

`--fake` (a synthetic cost model, no GPU) keeps apart from real results: it writes
build/search/tuned and logs to build/search/search-fake.sqlite by default, refuses an --out
that is the shipped tuned folder, and its entries (gpu "fake") never replace a GPU's, nor do
its DB rows ever answer a GPU search (rows are keyed by measurer, leantile.search.db).

Checked before anything is measured, each a one-line error (exit 1): the arguments, that a
CUDA GPU is there (without --fake), every source, the --out folder, and the --db file (a
database, intact, writable, not locked). A DB write that fails mid-run stops the search after
the round, saves each workload's best point so far, then reports the DB (exit 1).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from .. import architectures, interrupts
from ..ir import GraphError
from ..sources import parse_sizes
from .options import add_size

FAKE_DB = "build/search/search-fake.sqlite"
GPU_DB = "build/search/search.sqlite"
FAKE_OUT = "build/search/tuned"


def cmd_search(args) -> int:
    from ..tuned import user_dir
    from ..search.db import DBError, SearchDB
    from ..search.driver import SearchRun, Workload, run_lockstep
    from ..search.space import NoSpace, Space

    names = list(architectures.NAMES) if args.arch == ["all"] else args.arch
    if args.budget < 1 or args.islands < 1:
        raise GraphError([f"--budget {args.budget} --islands {args.islands}: both must be positive"])
    if args.time_budget is not None and not (args.time_budget >= 0 and math.isfinite(args.time_budget)):
        raise GraphError([f"--time-budget {args.time_budget}: a number of seconds, 0 or more"])
    try:
        gpus = None if args.gpus == "all" else [int(x) for x in args.gpus.split(",") if x.strip()]
    except ValueError:
        raise GraphError([f"--gpus {args.gpus!r}: expected device numbers such as 0,1"]) from None
    if not args.fake:  # at once, not after the sources load or in a worker that waits forever
        gpus = _cuda_gpus(gpus, args.gpus)
    sizes = parse_sizes(args.size)
    # every source loads before anything runs: a bad name or file is one clear error
    workloads = []
    for n in names:
        wl = Workload.from_source(n, sizes)
        same = next((w for w in workloads if w.key == wl.key), None)
        if same is not None:  # e.g. `attention` and exports/attention.json: one search, one DB run
            print(f"{n}: the same workload as {same.spec} ({wl.key}); searched once", file=sys.stderr)
            continue
        workloads.append(wl)
    out = _check_out(Path(args.out) if args.out else (Path(FAKE_OUT) if args.fake else user_dir()), args.fake)
    if args.missing_only:
        workloads = _without_tuned_entry(workloads, gpus, args.fake, out)
        if not workloads:
            print("search: every workload already has a tuned entry for this GPU (--missing-only)")
            return 0
    db_path = args.db or (FAKE_DB if args.fake else GPU_DB)
    try:
        db = SearchDB(db_path)
    except DBError as e:
        raise GraphError([f"--db {e}"]) from None
    measurer = None
    status = 0
    try:
        spaces = {}
        for wl in workloads:  # a workload without a valid point is one line; the others go on
            try:
                spaces[wl] = Space(wl.graph(), include_unfused=args.all_candidates)
            except NoSpace as e:
                print(f"search: skipped {wl.arch}: {e}", file=sys.stderr)
                status = 1
        if not spaces:
            return status
        if args.fake:  # one synthetic landscape per workload
            from ..search.roofline import workload_cost
            from ..search.workers import FakeMeasurer, software_versions

            measurer = _PerWorkload({wl: FakeMeasurer(sp, floor_ms=workload_cost(wl.graph()).floor_ms, seed=args.seed)
                                     for wl, sp in spaces.items()}, software_versions())
        else:
            from ..search.workers import GpuMeasurer

            measurer = GpuMeasurer(gpus or [0], compile_workers=args.compile_workers)
        searches = []
        for wl, space in spaces.items():
            print(f"{wl.arch}: {len(space)} points over {len(space.candidates)} candidate(s), "
                  f"budget {args.budget}, policy {args.policy}, {args.islands} island(s)")
            searches.append(SearchRun(wl, args.policy, args.budget, args.islands, args.seed, db, space=space,
                                      gpu=measurer.gpu_name, log=print, versions=measurer.versions))
        # all workloads advance together: a round compiles every workload's batch at once
        failed = None
        try:  # SIGTERM (`timeout`, schedulers) arrives as a KeyboardInterrupt too (leantile.interrupts)
            results = run_lockstep(searches, measurer, args.time_budget, log=print, from_default=True)
        except KeyboardInterrupt as e:  # keep what was found; rerunning the command resumes from the DB
            results = [r.result() for r in searches]
            print("search: interrupted; saving the best verified point of each workload so far "
                  "(rerun the same command to continue)", file=sys.stderr)
            status = interrupts.exit_code(e)
        except DBError as e:  # the log failed mid-run: still save what was found
            results, failed = [r.result() for r in searches], e
        problems = []
        for res in results:  # every workload is saved even when another one cannot be
            try:
                if _report(res, measurer.gpu_name, out, args, db) is None:
                    status = status or 1
            except GraphError as e:
                problems += e.problems
        if failed is not None:
            problems.append(f"--db {failed}; the search stopped there, its best points so far are saved above")
        if problems:
            raise GraphError(problems)
    except DBError as e:  # reading the log (resume) failed after the checks at opening
        raise GraphError([f"--db {e}"]) from None
    finally:
        if measurer is not None:
            measurer.close()
        db.close()
    return status


def _cuda_gpus(gpus: list[int] | None, flag: str) -> list[int]:
    """The GPU ids to measure on (None: all), or a GraphError when there is no CUDA GPU or no such id."""
    try:
        import torch
    except ImportError:
        raise GraphError(["search: torch is not installed, so no GPU can be used; --fake runs the "
                          "synthetic search"]) from None
    if not torch.cuda.is_available():
        raise GraphError(["search: no CUDA GPU on this machine (torch.cuda.is_available() is false); "
                          "--fake runs the synthetic search"])
    n = torch.cuda.device_count()
    gpus = list(range(n)) if gpus is None else gpus
    bad = [g for g in gpus if not 0 <= g < n]
    if bad or not gpus:
        raise GraphError([f"--gpus {flag}: this machine has {n} GPU(s), numbered 0..{n - 1}"])
    return gpus


def _check_out(out: Path, fake: bool) -> Path:
    """--out: a folder (or one to create) that can hold tuned files; --fake never writes the shipped one."""
    from ..files import check_out_dir
    from ..tuned import shipped_dir, user_dir


    check_out_dir(out, "--out")  # NUL, a file, under a file, read-only: one line
    if fake:
        if out.resolve() in {user_dir().resolve(), shipped_dir().resolve()}:
            raise GraphError([f"--out {out}: a folder the tuned lookup reads; --fake results never go there "
                              f"(default {FAKE_OUT})"])
    return out


def _default_wins(res) -> bool:
    """Whether the plan leantile ships without an entry (driver.default_point: the shape's own
    tiles and schedule, which the search's domains lack, such as a few-row GEMM's swapped 16 x 128
    tiles) is still the best: run_lockstep measured it first, by the same measurer, and a searched
    point replaces it only when strictly faster. Then an entry would not make the product faster,
    and none is written (said in one line)."""
    from ..search.driver import default_point

    base = default_point(res.workload)
    if base != res.best:
        return False
    print(f"{res.workload.arch}: nothing searched beat the shipped default {base} ({res.best_ms:.4f} ms): "
          "no entry written (the default is what runs without one)")
    return True


def _report(res, gpu: str | None, out: Path, args, db):
    """Print one workload's outcome and save its top-1 unless the default plan or a stored entry
    is faster."""
    from ..search.db import DBError
    from ..search.driver import tuned_entry

    name, wl = res.workload.arch, res.workload
    print(f"{name}: best {res.best_ms:.4f} ms = {res.best} ({res.target_ms / res.best_ms:.0%} of the "
          f"roofline floor {res.target_ms:.4f} ms); {res.new} new, {res.replayed} replayed; "
          f"{sum(e.get('kind') == 'backtrack' for e in res.events)} backtracks, "
          f"{sum(e.get('kind') == 'crossover' for e in res.events)} crossovers"
          if res.best else f"{name}: no point verified")
    entry = tuned_entry(res, gpu)
    if entry is None:
        return None
    if not _default_wins(res):
        _save(entry, res, out, args.replace)
    if args.plot:
        try:
            from ..search.plot import plot_history

            print(f"wrote {plot_history(db, wl.key, Path(args.plot) / f'{name}.png', res.target_ms, gpu or None)}")
        except ImportError:
            print("plot: matplotlib is not installed", file=sys.stderr)
        except (DBError, OSError) as e:
            print(f"plot: {e}", file=sys.stderr)
    return entry


def _save(entry: dict, res, out: Path, replace: bool) -> None:
    """Save the search's top-1 unless a faster entry is stored (or `replace`), in one line."""
    from ..tuned import save_if_faster

    name = res.workload.arch
    try:
        written, kept = save_if_faster(entry, out, replace=replace)
    except OSError as e:
        raise GraphError([f"--out {out}: cannot write {name}.json ({e.strerror or e}); the best point was "
                          f"{res.best} at {res.best_ms:.4f} ms (logged in the DB)"]) from None
    print(f"wrote {written}" if written else
          f"{name}: kept the stored entry ({kept['candidate']} {kept['tiles']}, {kept['time_ms']:.4f} ms), "
          f"faster than this search's best; --replace overwrites it")


def _without_tuned_entry(workloads: list, gpus: list[int] | None, fake: bool, out: Path) -> list:
    """The workloads with no tuned entry for this GPU (by name) in `out` or in the folders the
    lookup reads, so that `make kernels` on a GPU searches only what has never been searched there."""
    from ..tuned import tuned_entries

    gpu = "fake"
    if not fake:  # _cuda_gpus has checked that there is one
        import torch

        gpu = torch.cuda.get_device_name(gpus[0] if gpus else 0)
    keep = []
    for wl in workloads:
        found = (tuned_entries(wl.arch, dict(wl.sizes), wl.dtype, gpu, root=out)
                 or ([] if fake else tuned_entries(wl.arch, dict(wl.sizes), wl.dtype, gpu)))
        if found:
            print(f"{wl.arch}: tuned for {gpu} already ({found[0][1] / (wl.arch + '.json')}); skipped")
        else:
            keep.append(wl)
    return keep


class _PerWorkload:
    """Route each workload to its own measurer (the synthetic landscapes of --fake)."""
    gpu_name = "fake"

    def __init__(self, by_workload: dict, versions: dict | None = None):
        self.by_workload, self.versions = by_workload, versions

    def measure(self, wl, points):
        return self.by_workload[wl].measure(wl, points)

    def close(self):
        pass


def search_args(sources: list[str], **given):
    """The arguments `leantile search SOURCE ...` parses, its defaults where not `given` (what
    `leantile tune`, its front, passes to cmd_search)."""
    import argparse

    sub = argparse.ArgumentParser(prog="leantile").add_subparsers(dest="cmd")
    register(sub)
    args = sub.choices["search"].parse_args(["--", *sources])
    unknown = set(given) - set(vars(args))
    if unknown:
        raise TypeError(f"search_args: no search option {sorted(unknown)}")
    for k, v in given.items():
        setattr(args, k, v)
    return args


def register(sub) -> None:
    s = sub.add_parser("search", help="search candidates x tile parameters for the fastest verified kernel")
    s.add_argument("arch", nargs="+", metavar="SOURCE",
                   help="built-in name(s) or 'all', exports/*.json files, or module.py:function")
    s.add_argument("--replace", action="store_true",
                   help="save the search's best even where a faster entry is stored")
    s.add_argument("--missing-only", action="store_true",
                   help="skip workloads that already have a tuned entry for this GPU")
    s.add_argument("--budget", type=int, default=64, help="points evaluated per workload (default 64)")
    s.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="no round of compiles and timings starts past this many seconds (all workloads "
                        "together; the shipped default plans are measured first)")
    s.add_argument("--islands", type=int, default=4, help="islands (momentum) / batch size (random)")
    s.add_argument("--gpus", default="0", help="GPU ids, one measuring process each, or 'all' (default 0)")
    s.add_argument("--db", default=None,
                   help=f"SQLite log, resumed by rerunning (default {GPU_DB}; with --fake {FAKE_DB})")
    s.add_argument("--policy", choices=("momentum", "random"), default="momentum")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--fake", action="store_true", help="synthetic cost model instead of a GPU (tests, demos)")
    s.add_argument("--out", default=None,
                   help=f"tuned-config folder (default: the user's, leantile.tuned.user_dir(); with --fake {FAKE_OUT})")
    s.add_argument("--plot", default=None, metavar="DIR", help="write DIR/<arch>.png of the history")
    add_size(s)
    s.add_argument("--compile-workers", type=int, default=None, help="CPU compile processes (default: all cores)")
    s.add_argument("--all-candidates", action="store_true", help="include the unfused fallback candidate")
    s.set_defaults(fn=cmd_search)
