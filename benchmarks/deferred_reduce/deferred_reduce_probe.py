"""Probe behind plan.passes.defer_reductions (issue 18, norm -> GEMM): a norm's statistics fused
into the GEMM's stream (stats_fused) with the body's accumulations deferred (each block added
elementwise into a tile of partials, one reduction after the stream) against the same plan with
a cross-thread T.reduce_sum every block, and against the shipped default plan (prenorm), the
cuBLAS matmul alone and torch.compile, in one process (do_bench_cudagraph, every plan checked).

    python benchmarks/deferred_reduce/deferred_reduce_probe.py [CASE ...]   (on a GPU; writes $OUT/deferred-reduce.json)

Variants of each fused candidate: `deferred` (the pass's choice), `none` (every Reduce.deferred
off), `rows_only` (only reductions into per-row vectors deferred: a column sum's tile of partials
is block_k x block_n registers).
"""
import json
import os
import sys

import torch
import triton.testing as tt

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
from leantile.plan import Reduce  # noqa: E402
from leantile.runtime import Kernel, compile as compile_kernel  # noqa: E402

CASES = ["rmsnorm_published", "layernorm_linear_gelu_published", "layernorm_linear_gelu_gpt2_m2048",
         "rmsnorm_llama3_8b_qkv_m2048", "layernorm_linear_gelu_4096x4096x16384"]
FUSED = ("stats_fused", "stats_fused+colsum_streamed", "stats_fused+colsum_precomputed")


def without_deferral(plan, keep=lambda k, s: False):
    """The plan with Reduce.deferred off wherever keep(kernel, reduce) is false."""
    kernels = []
    for k in plan.kernels:
        body = tuple(s.model_copy(update={"deferred": False}) if isinstance(s, Reduce) and s.deferred
                     and not keep(k, s) else s for s in k.body)
        kernels.append(k.model_copy(update={"body": body}))
    return plan.model_copy(update={"kernels": tuple(kernels)})


def rows_only(k, s):
    return k.buffer(s.dst).axes == k.buffer(s.src).axes[:1]


def main(names):
    rows = []
    for name in names:
        case = next(c for c in suite.select() if c.name == name)
        g, baselines = suite.build(case)
        shipped = compile_kernel(g, tuned=False)
        inputs = shipped.random_inputs(0)
        eager, vendor = baselines(inputs)
        comp = torch.compile(eager)
        comp()
        row = {"case": name, "sizes": case.sizes, "shipped_candidate": shipped.plan.candidate}
        for vname, f in {"compile": comp, **vendor}.items():
            row[vname] = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
        kernels = {"shipped": shipped}
        for cand in FUSED:
            try:
                base = compile_kernel(g, candidate=cand, tuned=False)
            except Exception as e:
                if "candidate" not in str(e):
                    row[cand] = {"error": str(e)[:200]}
                continue
            kernels[f"{cand}/deferred"] = base
            for vname, keep in (("none", lambda k, s: False), ("rows_only", rows_only)):
                p = without_deferral(base.plan, keep)
                if p != base.plan and not any(p == kk.plan for kk in kernels.values()):
                    try:
                        kernels[f"{cand}/{vname}"] = Kernel(g, p, "probe", shipped.device)
                    except Exception as e:
                        row[f"{cand}/{vname}"] = {"error": str(e)[:200]}
        for v, k in kernels.items():
            try:
                row[v] = {"ms": k.benchmark(inputs), "ok": k.verify(inputs)["ok"], "tiles": dict(k.plan.tiles),
                          "deferred": [s.dst for kk in k.plan.kernels for s in kk.body
                                       if isinstance(s, Reduce) and s.deferred]}
            except Exception as e:
                row[v] = {"error": str(e)[:200]}
        print(name, {v: (round(r["ms"], 4), r["ok"]) if isinstance(r, dict) and "ms" in r else
                     (round(r, 4) if isinstance(r, float) else r) for v, r in row.items()
                     if v not in ("case", "sizes")}, flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), "deferred-reduce.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:] or CASES)
