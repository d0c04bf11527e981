"""Masked attention on the GPU with and without skip_masked_tiles' unmasked interior: the shipped
plan, whose key blocks that every row of a CTA's tile keeps whole run without the mask (the
positions, comparisons and select run on boundary blocks only: Map.boundary_only), against the
same plan evaluating the mask on every block that runs (masks.UNMASK_INTERIOR off), and SDPA's
and FlexAttention's figures for the shape, in one process (leantile.bench.run_one:
do_bench_cudagraph medians).

    python benchmarks/mask_interior.py [--out DIR] [--only PREFIX ...]
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
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    from leantile import architectures
    from leantile.bench import run_one
    from leantile.derive.rules import masks
    rows = []
    for name, (arch, sizes) in CASES.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        graph = architectures.build(arch, **sizes)
        for interior in (True, False):
            masks.UNMASK_INTERIOR = interior
            try:  # the baselines once, with the shipped plan; the other row times leantile alone
                row = run_one(graph, eager=None if interior else (lambda t: t["Q"]))
            except Exception as e:
                row = {"error": f"{type(e).__name__}: {e}"[:300]}
            finally:
                masks.UNMASK_INTERIOR = True
            row.update(case=name, unmasked_interior=interior)
            rows.append(row)
            ms = row.get("gpu_ms", {})
            shown = {k: round(v, 4) for k, v in ms.items() if k != "eager" or interior}
            print(f"{name:22} interior {'unmasked' if interior else 'masked  '} {shown} "
                  f"{row.get('candidate')} tiles={row.get('tiles')} ok={row.get('ok')} {row.get('error', '')}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mask-interior.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
