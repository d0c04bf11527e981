"""Does one kernel that streams each row twice (plan.Kernel.second_pass: statistics, then the
row's own epilogue) beat the two kernels it replaces (a row-statistics kernel, then a map kernel
reading the rows again from DRAM), and how many rows should a CTA hold so that the second read
hits L2, with how wide a block of the row per step and how many threads? Log-softmax over long
rows: the default plan without the second pass (two kernels, variant "two") and with it at
variants rR[bB][tT][f] (R rows a CTA, B columns a stream step, T threads; unset: the shipped
choice; f: the second pass first block first, where the shipped order is last block first,
plan.SECOND_PASS_REVERSED), each timed by leantile.bench.run_one (do_bench_cudagraph) against torch.compile of
torch.log_softmax in one process. Prints a table, writes JSON (after every row).

    python benchmarks/second_pass/second_pass_probe.py [--out DIR] [--quick] [--variants two,r2,r4b2048t512]
    python benchmarks/second_pass/second_pass_probe.py --graph cross_entropy --variants r8,r4,r2,r4t128
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
VARIANTS = "two,r2,r4,r8"  # measured 2026-11-29 (results/); next: widths and threads, e.g. r2b2048,r4b2048,r2b4096,r4t512


def _variant(v: str) -> dict:
    """'r4b2048t512' -> {'r': 4, 'b': 2048, 't': 512}; 'r4f' -> {'r': 4, 'f': 1}; 'two' -> {}."""
    import re
    return {} if v == "two" else {**{k: int(n) for k, n in re.findall(r"([rbt])(\d+)", v)},
                                  **({"f": 1} if v.endswith("f") else {})}


def _graph(m: int, d: int, dtype: str):
    from leantile import dag

    def body(g):
        x = g.input("X", ["m", "d"], dtype)
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))
    return dag.build_graph_with_output(f"log_softmax_{m}x{d}", {"m": m, "d": d}, body)


def _cross_entropy(torch):
    """(graph, dtype, torch function, inputs) of the fusion suite's cross-entropy (class ids drawn)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))
    from fusion_suite import workloads

    from leantile.reference import random_inputs
    name, g, fn, _ = next(w for w in workloads("fusion") if w[0] == "cross_entropy")
    inputs = random_inputs(g, device="cuda")
    inputs["label"] = torch.randint(0, g.axes["c"], (g.axes["m"],), device="cuda").float()
    return g, "f16", fn, inputs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "second_pass" / "results"))
    ap.add_argument("--quick", action="store_true", help="the first shape only")
    ap.add_argument("--variants", default=VARIANTS, help="comma list: two, rR[bB][tT]")
    ap.add_argument("--graph", choices=("log_softmax", "cross_entropy"), default="log_softmax",
                    help="cross_entropy: the fusion suite's (examples/fusion.py) at 8192 x 32000, one pass over "
                         "each row (rR sets the rows a CTA of that pass: 8 shipped, 127 registers at sm_90a)")
    a = ap.parse_args(argv)
    import torch

    from leantile import plan as plan_module
    from leantile.bench import run_one
    from leantile.derive import region_kernels
    from leantile.derive.rules import regions
    gpu = torch.cuda.get_device_name()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    saved = (region_kernels.two_pass_rows, region_kernels.streamed_rows, regions.RegionAnalysis._fills_gpu)
    cases = [(_graph(m, d, dt), dt, lambda t: torch.log_softmax(t["X"], -1), None)
             for m, d, dt in (SHAPES[:1] if a.quick else SHAPES)] if a.graph == "log_softmax" else [_cross_entropy(torch)]
    for g, dt, eager, inputs in cases:
        for variant in a.variants.split(","):
            v = _variant(variant)
            if variant == "two":
                regions.RegionAnalysis._fills_gpu = lambda self, src, axis: False
            if "r" in v:  # the rows a CTA of a two-pass kernel and of a one-pass stream
                region_kernels.two_pass_rows = lambda cx, rws, axis, r=v["r"]: r
            plan_module.SECOND_PASS_REVERSED = "f" not in v
            if "r" in v or "b" in v:  # the stream's (rows, block) for this kernel (streamed_rows)
                region_kernels.streamed_rows = lambda cx, rws, axis, tile=8192, r=v.get("r"), b=v.get("b"): (
                    r or saved[1](cx, rws, axis, tile)[0], b or saved[1](cx, rws, axis, tile)[1])
            try:
                row = run_one(g, tuned=False, tiles={"threads": v["t"]} if "t" in v else None, eager=eager,
                              inputs=inputs)
            except Exception as e:  # a variant that does not build: recorded, not fatal
                row = {"arch": g.name, "error": f"{type(e).__name__}: {e}"[:300]}
            finally:
                region_kernels.two_pass_rows, region_kernels.streamed_rows, regions.RegionAnalysis._fills_gpu = saved
                plan_module.SECOND_PASS_REVERSED = True
            row.update(variant=variant, dtype=dt)
            rows.append(row)
            if "error" in row:
                print(f"{g.name:<24} {variant:<12} {row['error']}", flush=True)
                continue
            gm = row["gpu_ms"]
            print(f"{g.name:<24} {dt:<5} {variant:<12} kernels {len(row['kernels'])} ok {row['ok']} "
                  f"leantile {gm['leantile']:.4f} ms  compile {gm['compile']:.4f} ms  "
                  f"x{gm['compile'] / gm['leantile']:.2f} vs compile", flush=True)
            path = out / f"second-pass-{gpu.split()[-1].lower()}-{date.today()}{'' if a.graph == 'log_softmax' else '-' + a.graph}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
            tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
