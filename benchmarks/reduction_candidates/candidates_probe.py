"""Every candidate of some of issue 49's cases (examples/reductions.py), each timed against
torch.compile of the case's PyTorch in the same process (leantile.bench.run_one: GPU time,
do_bench_cudagraph medians), to see whether the default (what the cost model picks) is the
fastest; prints a table and writes JSON.

    python benchmarks/reduction_candidates/candidates_probe.py --out DIR rmsnorm_gain_gemm log_softmax
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args(argv)
    from fusion_suite import workloads

    from leantile.bench import run_one
    from leantile.derive import candidates, derive
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []

    def save():  # after every row (temporary file, then rename): a call's time limit keeps what ran
        tmp = out / "candidates.json.tmp"
        tmp.write_text(json.dumps(rows, indent=1))
        tmp.replace(out / "candidates.json")
    for name, g, torch_fn, _ in workloads("reductions"):
        if name not in args.names:
            continue
        default = derive(g).candidate
        for c in candidates(g):
            try:
                r = run_one(g, eager=torch_fn, tuned=False, candidate=c.name)
            except Exception as e:  # a candidate that fails is reported, the others go on
                rows.append({"case": name, "candidate": c.name, "error": f"{type(e).__name__}: {e}"[:300]})
                print(name, c.name, "error", rows[-1]["error"], flush=True)
                save()
                continue
            gm = r["gpu_ms"]
            rows.append({"case": name, "candidate": c.name, "default": c.name == default, "ok": r["ok"],
                         "kernels": len(r["kernels"]), "leantile_ms": gm["leantile"], "compile_ms": gm["compile"],
                         "vs_compile": gm["compile"] / gm["leantile"]})
            print(f"{name:20s} {c.name:24s}{' (default)' if c.name == default else '':10s} kernels {len(r['kernels'])} "
                  f"ok {r['ok']} {gm['leantile']:.4f} ms  compile {gm['compile']:.4f}  "
                  f"x{gm['compile'] / gm['leantile']:.2f}", flush=True)
            save()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    sys.exit(main())
