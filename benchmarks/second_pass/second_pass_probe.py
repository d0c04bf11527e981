"""Does one kernel that streams each row twice (plan.Kernel.second_pass: statistics, then the
row's own epilogue) beat the two kernels it replaces (a row-statistics kernel, then a map kernel
reading the rows again from DRAM), and how many rows should a CTA hold so that the second read
hits L2? Log-softmax over long rows, the default plan with the second pass at 1 (a batch of rows
per CTA held fixed), 2, 4 and 8 rows per CTA, and without it (two kernels), each timed by
leantile.bench.run_one (do_bench_cudagraph) against torch.compile of torch.log_softmax in one
process. Prints a table, writes JSON.

    python benchmarks/second_pass/second_pass_probe.py [--out DIR] [--quick]
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

SHAPES = [(2048, 32000, "f16"), (4096, 50257, "bf16"), (8192, 16384, "f16")]
ROWS = (2, 4, 8)


def _graph(m: int, d: int, dtype: str):
    from leantile import dag

    def body(g):
        x = g.input("X", ["m", "d"], dtype)
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    return dag.build_graph_with_output(f"log_softmax_{m}x{d}", {"m": m, "d": d}, body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "second_pass" / "results"))
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    a = ap.parse_args(argv)
    import torch

    from leantile.bench import run_one
    from leantile.derive import region_kernels
    from leantile.derive.rules import regions
    gpu = torch.cuda.get_device_name()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, two_pass_rows, fills = [], region_kernels.two_pass_rows, regions.RegionAnalysis._fills_gpu
    for m, d, dt in SHAPES[:1] if a.quick else SHAPES:
        g = _graph(m, d, dt)
        for variant in ("two kernels", *(f"{r} rows" for r in ROWS)):
            if variant == "two kernels":
                regions.RegionAnalysis._fills_gpu = lambda self, src, axis: False
            else:
                r = int(variant.split()[0])
                regions.RegionAnalysis._fills_gpu = fills
                region_kernels.two_pass_rows = lambda cx, rws, axis, r=r: r
            try:
                row = run_one(g, tuned=False, eager=lambda t: torch.log_softmax(t["X"], -1))
            except Exception as e:  # a variant that does not build: recorded, not fatal
                row = {"arch": g.name, "error": f"{type(e).__name__}: {e}"[:300]}
            finally:
                regions.RegionAnalysis._fills_gpu, region_kernels.two_pass_rows = fills, two_pass_rows
            row.update(variant=variant, dtype=dt)
            rows.append(row)
            if "error" in row:
                print(f"{g.name:<24} {variant:<12} {row['error']}", flush=True)
                continue
            gm = row["gpu_ms"]
            print(f"{g.name:<24} {dt:<5} {variant:<12} kernels {len(row['kernels'])} ok {row['ok']} "
                  f"leantile {gm['leantile']:.4f} ms  compile {gm['compile']:.4f} ms  "
                  f"x{gm['compile'] / gm['leantile']:.2f} vs compile", flush=True)
            path = out / f"second-pass-{gpu.split()[-1].lower()}-{date.today()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
            tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
