"""Random search against the momentum policy at equal budget (points evaluated).

    python benchmarks/search_compare.py [--arch attention rmsnorm_mlp] [--budget 32] [--islands 4]
        [--seeds 0 1 2] [--gpus 0] [--db build/search/compare.sqlite] [--out benchmarks/results] [--fake]

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
import json
import statistics
import sys
from pathlib import Path

from leantile.search import SearchRun, Space, Workload, run_lockstep, workload_cost
from leantile.search.db import SearchDB
from leantile.search.memo import MeasureOnce


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", nargs="+", default=["attention", "rmsnorm_mlp"])
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--islands", type=int, default=4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--db", default="build/search/compare.sqlite")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--fake", action="store_true", help="synthetic cost model (no GPU): checks the script")
    ap.add_argument("--no-share", action="store_true", help="re-measure points in every run")
    a = ap.parse_args(argv)
    db = SearchDB(a.db)
    rows, gpu = [], None
    inner = None
    for arch in a.arch:
        wl = Workload.builtin(arch)
        space = Space(wl.graph())
        floor = workload_cost(wl.graph()).floor_ms
        if a.fake:
            from leantile.search.workers import FakeMeasurer
            inner = FakeMeasurer(space, floor_ms=floor, seed=0)
        elif inner is None:
            from leantile.search.workers import GpuMeasurer
            inner = GpuMeasurer([int(x) for x in a.gpus.split(",")])
        meas = inner if a.no_share else MeasureOnce(inner, db)
        gpu = meas.gpu_name
        keys = [(policy, seed) for policy in ("random", "momentum") for seed in a.seeds]
        search = [SearchRun(wl, policy, a.budget, a.islands, seed, db, space=space, gpu=gpu,
                            run=f"compare-{policy}-k{a.islands}-s{seed}-b{a.budget}",
                            log=lambda s: print(s, flush=True)) for policy, seed in keys]
        runs = dict(zip(keys, run_lockstep(search, meas)))
        overall = min(r.best_ms for r in runs.values())
        for policy in ("random", "momentum"):
            rs = [runs[(policy, s)] for s in a.seeds]
            reach = [next((h["step"] + 1 for h in r.history if h["best_ms"] <= 1.05 * overall), a.budget + 1)
                     for r in rs]
            best = statistics.median(r.best_ms for r in rs)
            rows.append({"arch": arch, "policy": policy, "budget": a.budget, "islands": a.islands,
                         "seeds": a.seeds, "best_ms": best, "best_ms_each": [r.best_ms for r in rs],
                         "floor_ms": floor, "over_floor": best / floor, "evals_to_5pct": statistics.median(reach),
                         "failed": statistics.median(sum(not h["ok"] for h in r.history) for r in rs),
                         "best_point": str(min(rs, key=lambda r: r.best_ms).best),
                         "space": len(space), "overall_best_ms": overall})
        if isinstance(meas, MeasureOnce):
            print(f"{arch}: {meas.measured} distinct points measured for {2 * len(a.seeds)} runs", flush=True)
    if inner is not None:
        inner.close()
    md = [f"GPU: {gpu}; budget {a.budget} evaluations per run, {a.islands} islands (random: batch {a.islands}), "
          f"seeds {a.seeds}", "",
          "| workload | policy | best ms (median) | / floor | evals to within 5% of best (median) | failed (median) | best point |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['arch']} ({r['space']} points) | {r['policy']} | {r['best_ms']:.4f} | {r['over_floor']:.2f}x "
                  f"| {r['evals_to_5pct']:g} | {r['failed']:g} | {r['best_point']} |")
    text = "\n".join(md) + "\n"
    print("\n" + text)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "search-compare-fake" if a.fake else "search-compare"
    (out / f"{stem}.json").write_text(json.dumps({"gpu": gpu, "args": vars(a), "rows": rows}, indent=1) + "\n")
    (out / f"{stem}.md").write_text(text)
    print(f"wrote {out / (stem + '.json')} and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
