"""Random search against the momentum policy at equal budget (points evaluated).

    python benchmarks/search_compare/search_compare.py [--arch attention rmsnorm_mlp] [--budget 32] [--islands 4]
        [--seeds 0 1 2] [--gpus 0] [--db build/search/compare.sqlite] [--out benchmarks/search_compare/results] [--fake]

--fake logs to build/search/compare-fake.sqlite by default; in any case the DB's rows are keyed
by measurer (leantile.search.db), so fake and GPU times never answer each other's points.

Each (arch, policy, seed) is its own search run in the DB; the runs of one workload advance
in lockstep (leantile.search.run_lockstep), so a round compiles and measures the union of
their proposals as one batch. A point is measured once per workload and its result reused by
every run that proposes it (leantile.search.memo.MeasureOnce, seeded from the DB, so a
stopped comparison resumes without re-measuring; `--no-share` to re-measure): the runs
still differ only in which points they choose, each budget counts every point it evaluates,
and the GPU time shrinks to the union of the points chosen. Prints a Markdown table and
writes OUT/search-compare.json and .md. Columns:
  best ms       median over seeds of the best verified time
  / floor       that time over the roofline floor (leantile.search.roofline)
  evals to 5%   median evaluations until a run was within 5% of the best any run found
                (budget+1 when it never was)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path

from leantile.search import SearchRun, Space, Workload, run_lockstep, workload_cost
from leantile.search.driver import point_entry
from leantile.files import write_atomic
from leantile.search.db import DBError, SearchDB
from leantile.search.memo import MeasureOnce
from leantile.tuned import shipped_dir, save_if_faster


class FromDBOnly:
    """The measurer of --replay: a point the DB does not hold is an error, never a guess."""

    def __init__(self, db: SearchDB):
        # the measurer with most rows, a GPU before "fake"; rows of an unknown measurer never replay
        known = [m for m, _ in db.measurers() if m is not None]
        self.gpu_name = next((m for m in known if m != "fake"), known[0] if known else None)
        self.versions = None

    def measure(self, wl, points):
        raise SystemExit(f"--replay: {len(points)} point(s) of {wl.arch} are not in the DB, e.g. {points[0]}; "
                         "measure them first (--exhaustive on the GPU)")

    def close(self):
        pass


def exhaustive(db, wl, space, meas, gpu, arch):
    """Measure every point not yet in the DB's 'exhaustive' run; return {point: measurement}."""
    done = db.results(wl.key, "exhaustive", gpu)
    todo = [p for p in space.all if p not in done]
    for i in range(0, len(todo), 64):  # in chunks, each logged: a killed call keeps what it measured
        chunk = todo[i:i + 64]
        for p, m in zip(chunk, meas.measure(wl, chunk)):
            db.append(wl.key, "exhaustive", p, m, gpu=gpu, versions=getattr(meas, "versions", None))
        print(f"{arch}: exhaustive {min(i + 64, len(todo))}/{len(todo)} new points", flush=True)
    return db.results(wl.key, "exhaustive", gpu)


def space_sha(space) -> str:
    """Which space the runs searched: a replay reproduces a comparison only over the same points."""
    return hashlib.sha256("\n".join(sorted(p.key() for p in space.all)).encode()).hexdigest()[:16]


def summarise(arch, policy, budget, a, rs, floor, overall, scores, space) -> dict:
    """One table row: the runs of one policy at one budget, over the seeds."""
    optimum = scores[0] if scores else None
    reach = [next((h["step"] + 1 for h in r.history if h["best_ms"] <= 1.05 * overall), budget + 1) for r in rs]
    best = statistics.median(r.best_ms for r in rs)
    return {"arch": arch, "policy": policy, "budget": budget, "islands": a.islands, "seeds": a.seeds,
            "best_ms": best, "best_ms_each": [r.best_ms for r in rs], "floor_ms": floor, "over_floor": best / floor,
            "evals_to_5pct": statistics.median(reach),
            "within_5pct": sum(r.best_ms <= 1.05 * overall for r in rs) / len(rs),
            "failed": statistics.median(sum(not h["ok"] for h in r.history) for r in rs),
            "best_point": str(min(rs, key=lambda r: r.best_ms).best), "space": len(space),
            "space_sha": space_sha(space),
            "overall_best_ms": overall, "optimum_ms": optimum,
            "rank_each": [sum(x < r.best_ms for x in scores) + 1 for r in rs] if scores else None}


def table(rows, gpu, a) -> str:
    md = [f"GPU: {gpu}; {a.islands} islands (random: batch {a.islands}), seeds {a.seeds}", "",
          "| workload | budget | policy | best ms (median) | / floor | / optimum | rank in space (median) "
          "| runs within 5% of optimum | evals to within 5% (median) | failed (median) | best point |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        opt = f"{r['best_ms'] / r['optimum_ms']:.3f}x" if r["optimum_ms"] else "n/a"
        rank = f"{statistics.median(r['rank_each']):g}" if r["rank_each"] else "n/a"
        md.append(f"| {r['arch']} ({r['space']} points) | {r['budget']} | {r['policy']} | {r['best_ms']:.4f} "
                  f"| {r['over_floor']:.2f}x | {opt} | {rank} | {r['within_5pct']:.0%} | {r['evals_to_5pct']:g} "
                  f"| {r['failed']:g} | {r['best_point']} |")
    return "\n".join(md) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", nargs="+", default=["attention", "rmsnorm_mlp"])
    ap.add_argument("--budget", type=int, nargs="+", default=[32], help="one or more budgets")
    ap.add_argument("--islands", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--db", default=None, help="default build/search/compare.sqlite (--fake: compare-fake.sqlite)")
    ap.add_argument("--out", default="benchmarks/search_compare/results")
    ap.add_argument("--fake", action="store_true", help="synthetic cost model (no GPU): checks the script")
    ap.add_argument("--no-share", action="store_true", help="re-measure points in every run")
    ap.add_argument("--replay", action="store_true",
                    help="no GPU: answer every point from the DB (after an --exhaustive run), so more seeds cost nothing")
    ap.add_argument("--exhaustive", action="store_true",
                    help="also measure every point of the space (run 'exhaustive' in the DB): the true optimum")
    ap.add_argument("--save-tuned", action="store_true",
                    help="with --exhaustive: save the optimum to the shipped tuned configurations (as `leantile search` saves its top-1)")
    a = ap.parse_args(argv)
    if not (a.fake or a.replay):  # say so now, not in a GPU worker that never starts
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("search_compare: no CUDA GPU here; --fake (synthetic) or --replay (from the DB)")
    a.db = a.db or ("build/search/compare-fake.sqlite" if a.fake else "build/search/compare.sqlite")
    try:
        db = SearchDB(a.db)
    except DBError as e:
        raise SystemExit(f"search_compare: --db {e}") from None
    rows, gpu = [], None
    inner = None
    for arch in a.arch:
        wl = Workload.builtin(arch)
        space = Space(wl.graph())
        floor = workload_cost(wl.graph()).floor_ms
        if a.fake:
            from leantile.search.workers import FakeMeasurer
            inner = FakeMeasurer(space, floor_ms=floor, seed=0)
        elif a.replay:
            inner = FromDBOnly(db)
        elif inner is None:
            from leantile.search.workers import GpuMeasurer
            inner = GpuMeasurer([int(x) for x in a.gpus.split(",")])
        meas = inner if a.no_share else MeasureOnce(inner, db)
        gpu = meas.gpu_name
        keys = [(b, policy, seed) for b in a.budget for policy in ("random", "momentum") for seed in a.seeds]
        search = [SearchRun(wl, policy, b, a.islands, seed, db, space=space, gpu=gpu,
                            run=f"compare-{policy}-k{a.islands}-s{seed}-b{b}",
                            log=lambda s: print(s, flush=True), versions=getattr(meas, "versions", None))
                  for b, policy, seed in keys]
        runs = dict(zip(keys, run_lockstep(search, meas)))
        overall, scores = min(r.best_ms for r in runs.values()), []
        if a.exhaustive:  # every point, each once (shared with the runs): where the runs' bests rank
            every = exhaustive(db, wl, space, meas, gpu, arch)
            scores = sorted(m.score for m in every.values())
            best_pt = min(every, key=lambda p: every[p].score)
            print(f"{arch}: exhaustive over {len(scores)} points: optimum {scores[0]:.4f} ms at {best_pt}; "
                  f"{sum(x == math.inf for x in scores)} fail", flush=True)
            overall = min(overall, scores[0])
            if a.save_tuned and math.isfinite(scores[0]) and not a.fake:
                entry = point_entry(wl, best_pt, scores[0], gpu, roofline_ms=round(floor, 6),
                                    search={"run": "exhaustive", "evaluated": len(scores)})
                written, kept = save_if_faster(entry, shipped_dir())  # a project tool: results ship
                print(f"wrote {written}" if written else f"{arch}: kept the faster stored entry ({kept['time_ms']} ms)")
        for b in a.budget:
            for policy in ("random", "momentum"):
                rs = [runs[(b, policy, s)] for s in a.seeds]
                rows.append(summarise(arch, policy, b, a, rs, floor, overall, scores, space))
        if isinstance(meas, MeasureOnce):
            print(f"{arch}: {meas.measured} distinct points measured for {len(keys)} runs", flush=True)
    if inner is not None:
        inner.close()
    text = table(rows, gpu, a)
    print("\n" + text)
    out = Path(a.out)
    stem = "search-compare-fake" if a.fake else "search-compare"
    if a.replay:
        stem += "-replay"
    write_atomic(out / f"{stem}.json", json.dumps({"gpu": gpu, "args": vars(a), "rows": rows}, indent=1) + "\n")
    write_atomic(out / f"{stem}.md", text)
    print(f"wrote {out / (stem + '.json')} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
