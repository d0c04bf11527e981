"""Where a plan's time goes (issue 18): every candidate of the named suite cases (all but
unfused), each kernel's GPU time from the torch profiler (mean over the runs) beside the whole
plan's do_bench_cudagraph time; the difference is what the launches between kernels cost.
Each plan is checked against the float32 reference first.

    python benchmarks/norm_gemm/kernel_times_probe.py CASE [CASE ...]   (on a GPU; writes $OUT/kernel-times.json)
"""
import json
import os
import sys

import torch
import triton.testing as tt
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "default_tiles"))
from tiles_probe import compile_candidates  # noqa: E402

RUNS = 50


def kernel_times(fn) -> dict[str, float]:
    """{kernel name: mean GPU ms per call of fn} from the profiler's device activity."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(RUNS):
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if us:
            out[e.key[:60]] = us / RUNS / 1e3
    return out


def main():
    cases = [c for c in suite.select() if c.name in sys.argv[1:]]
    built = {c.name: suite.build(c) for c in cases}

    kernels = compile_candidates(built)
    rows = []
    for c in cases:
        g, base_fn = built[c.name]
        ks = {cand: k for (n, cand), k in kernels.items() if n == c.name}
        first = next(k for k in ks.values() if not isinstance(k, Exception))
        inputs = first.random_inputs(0)
        _, vendor = base_fn(inputs)
        row = {"case": c.name, "sizes": c.sizes, "vendor": {}, "plans": {}}
        for vname, f in vendor.items():
            row["vendor"][vname] = {"ms": tt.do_bench_cudagraph(f, rep=100, return_mode="median"),
                                    "kernels": kernel_times(f)}
        for cand, k in ks.items():
            if isinstance(k, Exception):
                row["plans"][cand] = {"error": str(k)[:200]}
                continue
            row["plans"][cand] = {"ms": k.benchmark(inputs), "ok": k.verify(inputs)["ok"], "tiles": dict(k.plan.tiles),
                                  "kernels": kernel_times(lambda: k.run(inputs))}
        for name, r in [*row["vendor"].items(), *row["plans"].items()]:
            if "ms" in r:
                ks_ = r["kernels"]
                print(f"{c.name:40s} {name:34s} {r['ms']:.4f} ms (kernels {sum(ks_.values()):.4f}: "
                      + ", ".join(f"{n} {t:.4f}" for n, t in ks_.items()) + f") ok={r.get('ok', '-')}", flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), "kernel-times.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
