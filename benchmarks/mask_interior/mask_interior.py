"""Masked attention on the GPU: the shipped plan, whose key blocks that every row of a CTA's
tile keeps whole run without the mask (the positions, comparisons and select run on boundary
blocks only: Map.boundary_only) and whose causal query tiles launch longest first
(plan.passes.heavy_first), against the same plan launched in order, and against that one also
evaluating the mask on every block that runs (masks.UNMASK_INTERIOR off); with SDPA's and
FlexAttention's figures for the shape, in one process (leantile.bench.run_one:
do_bench_cudagraph medians).

    python benchmarks/mask_interior/mask_interior.py [--out DIR] [--only PREFIX ...]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

CASES = {  # name: (architecture, sizes)
    "causal_h16_t4096": ("causal_attention", {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}),
    "causal_h32_t8192": ("causal_attention", {"h": 32, "t_q": 8192, "t_kv": 8192, "d_h": 128}),
    "causal_h32_t2048": ("causal_attention", {"h": 32, "t_q": 2048, "t_kv": 2048, "d_h": 128}),
    "window1024_h16_t8192": ("sliding_window_attention", {}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/mask_interior/results")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    from leantile import architectures
    from leantile.plan import passes as plan_passes
    from leantile.bench import run_one
    from leantile.derive.rules import masks
    rows, shipped_passes = [], plan_passes.PASSES
    for name, (arch, sizes) in CASES.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        graph = architectures.build(arch, **sizes)
        for variant, interior, heavy in (("shipped", True, True), ("in order", True, False),
                                         ("in order, masked interior", False, False)):
            masks.UNMASK_INTERIOR = interior
            plan_passes.PASSES = shipped_passes if heavy else tuple(p for p in shipped_passes
                                                                    if p is not plan_passes.heavy_first)
            try:  # the baselines once, with the shipped plan; the other rows time leantile alone
                row = run_one(graph, eager=None if variant == "shipped" else (lambda t: t["Q"]))
            except Exception as e:
                row = {"error": f"{type(e).__name__}: {e}"[:300]}
            finally:
                masks.UNMASK_INTERIOR, plan_passes.PASSES = True, shipped_passes
            row.update(case=name, variant=variant)
            rows.append(row)
            ms = row.get("gpu_ms", {})
            shown = {k: round(v, 4) for k, v in ms.items() if variant == "shipped" or k == "leantile"}
            print(f"{name:22} {variant:26} {shown} {row.get('candidate')} tiles={row.get('tiles')} "
                  f"ok={row.get('ok')} {row.get('error', '')}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mask-interior.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
