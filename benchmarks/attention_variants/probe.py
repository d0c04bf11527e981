"""Where the attention variants' time goes (issue 51): for the named `--suite attention-variants`
cases, the shipped plan's kernels (torch profiler, mean per call) beside the whole call
(do_bench_cudagraph), with the suite's inputs, each plan checked first; `--no-mask-bounds` also
times the plan derived without rules.mask_bounds (document masking then skips only its causal
half), and each case's FlexAttention path is called once with its error printed where it fails
(the suite leaves a failing vendor path out silently).

    python benchmarks/attention_variants/probe.py --out DIR [--no-mask-bounds] CASE [CASE ...]   (on a GPU)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "norm_gemm"))


def _plan_row(g, inputs, label: str) -> dict:
    import triton.testing as tt

    from kernel_times_probe import kernel_times
    from leantile.plan import launches
    from leantile.runtime import compile as compile_kernel

    k = compile_kernel(g, tuned=False)
    v = k.verify(inputs)
    row = {"plan": label, "candidate": k.plan.candidate, "tiles": dict(k.plan.tiles),
           "kernels": [x.name for x in launches(k.plan)], "ok": v["ok"], "rel_err": max(v["plain_rel_err"].values())}
    row["gpu_ms"] = tt.do_bench_cudagraph(lambda: k.run(inputs), rep=100, return_mode="median")
    row["kernel_ms"] = kernel_times(lambda: k.run(inputs))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-mask-bounds", action="store_true")
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args(argv)
    import torch
    import triton.testing as tt

    from leantile import suite
    from leantile.architectures import variants
    from leantile.bench import prepared
    from leantile.reference import natural_scale, random_inputs
    from leantile.sources import load_source

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in suite.select(suite="attention-variants", tags=args.cases):
        g, base = suite.build(case)
        inputs = random_inputs(g, seed=0, device="cuda", scale=natural_scale(g))
        inputs = prepared(load_source(case.source, case.sizes), inputs, case.source)
        row = {"case": case.name, "plans": [_plan_row(g, inputs, "shipped")]}
        if args.no_mask_bounds:
            from leantile.derive.rules import flatten as flatten_module
            keep = flatten_module.bound_masks
            flatten_module.bound_masks = lambda h: (h, ())
            try:
                row["plans"].append(_plan_row(g, inputs, "no mask_bounds"))
            finally:
                flatten_module.bound_masks = keep
        variants.DROPPED.clear()
        try:
            _, vendor = base(inputs)
            row["vendor_ms"] = {n: tt.do_bench_cudagraph(f, rep=100, return_mode="median") for n, f in vendor.items()}
        except Exception as e:
            row["vendor_error"] = f"{type(e).__name__}: {e}"[:1000]
        row["vendor_dropped"] = dict(variants.DROPPED)  # why a path the suite would time is missing
        torch.cuda.synchronize()
        rows.append(row)
        print(json.dumps(row, indent=1)[:4000], flush=True)
    (out / "variants-probe.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(summary(rows)), flush=True)
    return 0


def summary(rows) -> list[str]:
    """A few lines per case: the vendor paths' times (and why any was left out), then each plan's
    time, check and kernels."""
    out = []
    for r in rows:
        out.append(f"{r['case']} {({k: round(v, 4) for k, v in r.get('vendor_ms', {}).items()})} "
                   f"{r.get('vendor_dropped') or ''} {r.get('vendor_error') or ''}")
        for p in r["plans"]:
            out.append(f"   {p['plan']} ok={p['ok']} {p['gpu_ms']:.4f} ms {({k: round(v, 4) for k, v in p['kernel_ms'].items()})}")
    return out


if __name__ == "__main__":
    sys.exit(main())
