"""Tiles of GEMMs with a fused epilogue (a GroupNorm, a pool, a norm's pulled-out scale), probed on whole
plans: for each case (a reductions-suite or fusion-suite graph) the plan's GPU time (Kernel.benchmark:
do_bench_cudagraph median) at the shipped tiles and at each setting, each verified first (Kernel.verify: a
wrong setting is reported, not timed), and torch.compile of the PyTorch version, in one process. Prints a
table, writes JSON after each row.

    python benchmarks/gemm_tiles/probe.py --out DIR [--settings block_m=256,block_m=256+stages=3,...] [CASE ...]

A setting is tile parameters joined by '+' (`block_m=256+stages=3`), optionally with `cand=<candidate>` (a
plan other than the default: `cand=stats_fused+gain_operand` reads as one item, everything after `cand=`); a
case `red:<name>` or `fus:<name>`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))

CASES = ["red:gemm_groupnorm_large", "red:rmsnorm_gain_gemm", "red:gemm_maxout", "red:triu_gemm",
         "red:mish_mish_gemm", "fus:gemm_epilogue"]
SETTINGS = ["block_m=256", "block_m=256+stages=3", "stages=3", "block_n=128"]


def workload(case: str):
    import fusion_suite
    kind, name = case.split(":")
    return next((g, fn) for n, g, fn, _ in fusion_suite.workloads("reductions" if kind == "red" else "fusion")
                if n == name)


def parse(setting: str) -> tuple[str | None, dict | None]:
    """(candidate, tiles) of a setting: `cand=` takes the rest of the setting as the candidate's name."""
    if setting == "shipped":
        return None, None
    head, _, cand = setting.partition("cand=")
    tiles = {k: int(v) for k, v in (x.split("=") for x in head.strip("+").split("+") if x)}
    return cand or None, tiles or None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--budget", type=float, default=480.0, help="seconds; later rows are skipped")
    ap.add_argument("cases", nargs="*", default=CASES)
    args = ap.parse_args(argv)
    settings = ["shipped", *[x for x in args.settings.split(",") if x]]
    import torch
    import triton.testing as tt

    from leantile.derive.engine import derive
    from leantile.plan import launches
    from leantile.runtime import Kernel
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.time()
    for case in args.cases:
        if time.time() - t0 > args.budget:
            break
        g, fn = workload(case)
        row = {"case": case, "shape": dict(g.axes), "ms": {}, "tiles": {}, "ok": {}}
        inputs = None
        for setting in settings:
            if time.time() - t0 > args.budget:
                break
            try:
                plan = derive(g, *parse(setting))
                k = Kernel(g, plan, "probe", torch.device("cuda", 0))
                inputs = inputs or k.random_inputs()
                row["ok"][setting] = bool(k.verify(inputs)["ok"])  # a setting is timed only where it is right
                row["ms"][setting] = k.benchmark(inputs) if row["ok"][setting] else "wrong"
                row["tiles"][setting] = [(x.name, [(t.axis, t.block) for t in x.grid], x.threads) for x in launches(plan)]
            except Exception as e:  # a setting that does not compile is reported, the others go on
                row["ms"][setting] = f"{type(e).__name__}: {e}"[:200]
            print(case, setting, row["ms"][setting], flush=True)
        if inputs is not None:
            try:
                c = torch.compile(lambda: fn(inputs))
                c(), c()
                row["ms"]["compile"] = tt.do_bench_cudagraph(c, rep=100, return_mode="median")
            except Exception as e:
                row["ms"]["compile"] = f"{type(e).__name__}: {e}"[:200]
            print(case, "compile", row["ms"]["compile"], flush=True)
        rows.append(row)
        tmp = out / "gemm-tiles-probe.json.tmp"
        tmp.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
        tmp.replace(out / "gemm-tiles-probe.json")
    cols = [*settings, "compile"]
    print("| case | " + " | ".join(cols) + " |")
    for r in rows:
        cells = [f"{v:.4f}" if isinstance(v, float) else "err" for v in (r["ms"].get(s, "-") for s in cols)]
        print(f"| {r['case']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
