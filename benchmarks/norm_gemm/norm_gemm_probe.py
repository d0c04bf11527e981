"""Probe behind the norm -> GEMM default (issue 18): every candidate of every rmsnorm,
rmsnorm_mlp and layernorm_linear_gelu suite case with at least 128 rows, at the tiles derive
gives its shape, checked against the float32 reference and timed (do_bench_cudagraph) against
torch.compile and the cuBLAS matmul alone in one process. Which candidate the cost model picks
(cost.choose) is recorded beside each.

    python benchmarks/norm_gemm/norm_gemm_probe.py [case ...]   (on a GPU; writes $OUT/norm-gemm.json)
"""
import json
import os
import sys

import torch
import triton.testing as tt

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
from leantile.cost import choose  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "default_tiles"))
from tiles_probe import compile_candidates  # noqa: E402

ARCHS = ("rmsnorm", "layernorm_linear_gelu", "rmsnorm_mlp")


def main():
    only = sys.argv[1:]
    cases = [c for c in suite.select() if c.arch in ARCHS and c.sizes["m"] >= 128
             and (c.name in only or not only and "large" not in c.tags)]
    built = {c.name: suite.build(c) for c in cases}
    picked = {c.name: choose(built[c.name][0])[0].candidate for c in cases}

    kernels = compile_candidates(built)
    rows = []
    for c in cases:
        g, base_fn = built[c.name]
        ks = {cand: k for (n, cand), k in kernels.items() if n == c.name}
        first = next((k for k in ks.values() if not isinstance(k, Exception)), None)
        if first is None:
            print(c.name, "nothing compiled", flush=True)
            continue
        inputs = first.random_inputs(0)
        eager, vendor = base_fn(inputs)
        comp = torch.compile(eager)
        comp()
        row = {"case": c.name, "sizes": c.sizes, "dtype": c.dtype, "cost_model_pick": picked[c.name],
               "compile_ms": tt.do_bench_cudagraph(comp, rep=100, return_mode="median")}
        for vname, f in vendor.items():
            row[vname + "_ms"] = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
        row["plans"] = {}
        for cand, k in ks.items():
            if isinstance(k, Exception):
                row["plans"][cand] = {"error": str(k)[:200]}
                continue
            row["plans"][cand] = {"ms": k.benchmark(inputs), "ok": k.verify(inputs)["ok"], "tiles": dict(k.plan.tiles)}
        best = min((p["ms"], n) for n, p in row["plans"].items() if "ms" in p)
        print(c.name, "compile", round(row["compile_ms"], 4), "matmul alone",
              round(row.get("cublas_matmul_alone_ms", float("nan")), 4), "| pick", picked[c.name],
              {n: (round(p["ms"], 4), p["ok"]) if "ms" in p else "ERR" for n, p in row["plans"].items()},
              "| best", best[1], flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), "norm-gemm.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
