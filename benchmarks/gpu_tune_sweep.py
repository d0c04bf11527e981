"""On a GPU: sweep every candidate x get_configs() of each built-in at the published shape,
check each kernel against the fp32 reference (NaN-poisoned outputs), time the correct ones
with do_bench_cudagraph, and write the best per workload to DIR/tuned.json.

    python benchmarks/gpu_tune_sweep.py [ARCH ...] [--out DIR] [--budget-s S]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_and_time import TOL, load_emitted  # noqa: E402

from leantile import architectures, reference  # noqa: E402
from leantile.derive import candidates, derive  # noqa: E402


def measure(g, plan, inputs, ref, tiles):
    import triton.testing as tt
    mod = load_emitted(plan, Path("build/kernels/sweep"))
    kernels = mod.compile_kernels(target="cuda", **tiles)
    bufs = mod.allocate(inputs)

    def call():
        for spec in mod.KERNELS:
            kernels[spec["name"]](*[bufs[p] for p in spec["params"]])
    call()
    torch.cuda.synchronize()
    out = bufs[mod.OUTPUTS["out"]].float()
    err = ((out - ref).norm() / ref.norm()).item()
    if not (torch.isfinite(out).all() and err < TOL["float16"]):
        return {"ok": False, "rel_err": err}
    return {"ok": True, "rel_err": err, "gpu_ms": tt.do_bench_cudagraph(call, rep=100, return_mode="median")}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("arch", nargs="*")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--budget-s", type=float, default=80.0, help="seconds per workload")
    a = ap.parse_args(argv)
    best, log = {}, []
    for name in a.arch or architectures.NAMES:
        g = architectures.build(name)
        inputs = {k: v.cuda() for k, v in reference.random_inputs(g, seed=1).items()}
        ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)["out"]
        t0 = time.time()
        for c in candidates(g):
            if c.name == "unfused" or time.time() - t0 > a.budget_s:
                continue
            plan = derive(g, c.name)
            mod = load_emitted(plan, Path("build/kernels/sweep"))
            for tiles in mod.get_configs():
                if time.time() - t0 > a.budget_s:
                    break
                try:
                    r = measure(g, plan, inputs, ref, tiles)
                except Exception as e:
                    r = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
                row = {"arch": name, "candidate": c.name, "tiles": tiles, **r}
                log.append(row)
                print(json.dumps(row), flush=True)
                if r.get("ok") and r["gpu_ms"] < best.get(name, {}).get("gpu_ms", 1e9):
                    best[name] = row
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuned.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "best": best,
                                                "log": log}, indent=1))
    print("\nbest per workload (GPU ms):")
    for name, r in best.items():
        print(f"  {name:<24} {r['gpu_ms']:.4f}  {r['candidate']}  {r['tiles']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
