"""How well the cost model (leantile.cost) ranks what the GPU measured: for every workload of
the search databases (benchmarks/results/search.sqlite and
benchmarks/search_compare/results/search-compare.sqlite: candidate x tiles, measured on an
H200), the Spearman rank correlation between the model's estimate and the measured time, and the
regret of the model's pick (measured time of the point it ranks first / the best measured);
then the same for the probes' rows (benchmarks/split_k_waves/results/issue16-*probe*.json: split_probe.py's
candidate x tiles per case, also on an H200). CPU only. Prints a table, writes JSON.

    python benchmarks/cost_model_check/cost_model_check.py [--out FILE.json] [--probes FILE.json ...] [DB ...]
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benchmarks" / "split_k_waves"))


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for q in range(i, j + 1):
            r[order[q]] = (i + j) / 2
        i = j + 1
    return r


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def graph_of(workload: str):
    """'arch:k=v,k=v:dtype' -> the graph (a built-in, or an example architecture)."""
    from leantile import architectures
    from leantile.sources import load_source
    arch, sizes, _dtype = workload.split(":")
    sizes = {k: int(v) for k, v in (kv.split("=") for kv in sizes.split(","))}
    if arch in architectures.NAMES:
        return architectures.build(arch, **sizes)
    return load_source(str(ROOT / "examples" / "architectures" / f"{arch}.py") + ":build", sizes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="*", default=[str(p) for p in [ROOT / "benchmarks" / "results" / "search.sqlite",
                                                *sorted((ROOT / "benchmarks" / "search_compare" / "results").glob("search*.sqlite"))]])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "cost_model_check" / "results" / "cost-model-check.json"))
    ap.add_argument("--probes", nargs="*", default=[str(p) for p in sorted((ROOT / "benchmarks" / "split_k_waves" / "results").glob("issue16-*probe*.json"))])
    args = ap.parse_args(argv)
    from leantile.cost import plan_seconds
    from leantile.derive import derive

    results = []
    for wl, db, points in _probe_points(args.probes):
        _judge(results, db, wl, graph_of(wl), points)
    for db in args.dbs:
        con = sqlite3.connect(db)
        rows = con.execute("select workload, candidate, tiles, time_ms from measurements "
                           "where verified_ok = 1 and time_ms is not null").fetchall()
        by_wl: dict[str, dict] = {}
        for wl, cand, tiles, ms in rows:  # the best time of each point (a point may be re-measured)
            key = (cand, tiles)
            by_wl.setdefault(wl, {})
            by_wl[wl][key] = min(ms, by_wl[wl].get(key, ms))
        for wl, points in sorted(by_wl.items()):
            _judge(results, Path(db).name, wl, graph_of(wl), points)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _probe_points(files):
    """(workload, file name, {(candidate, tiles json): best ms}) per case of the probe JSONs."""
    from split_probe import CASES
    by_case: dict[tuple, dict] = {}
    for f in files:
        for r in json.loads(Path(f).read_text()):
            if not r.get("ok") or "gpu_ms" not in r or r.get("candidate") == "unfused":
                continue
            arch, sizes = CASES[r["case"]]
            wl = f"{arch}:{','.join(f'{k}={v}' for k, v in sorted(sizes.items()))}:f16"
            pts = by_case.setdefault((wl, Path(f).name), {})
            key = (r["candidate"], json.dumps(r["tiles"], sort_keys=True))
            pts[key] = min(r["gpu_ms"]["leantile"], pts.get(key, float("inf")))
    return [(wl, name, pts) for (wl, name), pts in by_case.items()]


def _judge(results, db, wl, g, points) -> None:
    """The model against the measured times of one workload's points (one printed row)."""
    from leantile.cost import plan_seconds
    from leantile.derive import derive
    model, measured, names = [], [], []
    for (cand, tiles), ms in points.items():
        try:
            plan = derive(g, cand, json.loads(tiles))
        except Exception:
            continue
        model.append(plan_seconds(plan) * 1e3)
        measured.append(ms)
        names.append(f"{cand} {tiles}")
    if len(model) < 3:
        return
    pick = min(range(len(model)), key=model.__getitem__)
    results.append({"db": db, "workload": wl, "points": len(model),
                    "spearman": round(spearman(model, measured), 3),
                    "regret": round(measured[pick] / min(measured), 3),
                    "model_pick": names[pick], "model_pick_ms": measured[pick], "best_ms": min(measured)})
    r = results[-1]
    print(f"| {wl} | {r['points']} | {r['spearman']:.2f} | {r['regret']:.2f}x | {r['model_pick']} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
