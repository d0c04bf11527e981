"""Grouped-query attention on the GPU: the packed plan (pack_query_group: a group's heads in one
CTA, each K and V block loaded once per group) against the same math with the group axis where
it cannot be packed (Q[g, h_kv, t_q, d]: one query head per CTA, K and V read once per head), and
SDPA's flash and cuDNN backends (K and V repeated per query head before the timing), in one
process (leantile.bench.run_one: do_bench_cudagraph medians).

    python benchmarks/gqa_packing/gqa_packing.py [--out DIR] [--tiles k=v,k=v ...]

Each --tiles entry (empty: the shipped plan) times both layouts at those tiles.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

CASES = {  # name: (h_kv, g, t_q, t_kv, d_h)
    "prefill_32q8kv_t4096": (8, 4, 4096, 4096, 128),
    "prefill_32q8kv_t2048": (8, 4, 2048, 2048, 128),
    "decode_32q8kv_t8192": (8, 4, 1, 8192, 128),
    "decode_64q8kv_t32768": (8, 8, 1, 32768, 128),
    "chunk16_32q8kv_t8192": (8, 4, 16, 8192, 128),
}


def per_head(h_kv: int, g: int, t_q: int, t_kv: int, d_h: int):
    """gqa_attention with Q[g, h_kv, t_q, d_h]: the group axis not next to the query axis."""
    from leantile.dag import build_graph_with_output

    def body(m):
        q = m.input("Q", ["g", "h_kv", "t_q", "d_h"])
        k, v = (m.input(n, ["h_kv", "t_kv", "d_h"]) for n in ("K", "V"))
        s = m.div(m.matmul(q, k, "d_h", "d_h"), m.sqrt(m.size_const("d_h")))
        return m.matmul(m.softmax(s, "t_kv"), v, "t_kv", "t_kv")
    return build_graph_with_output("gqa_per_head", {"h_kv": h_kv, "g": g, "t_q": t_q, "t_kv": t_kv, "d_h": d_h}, body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/gqa_packing/results")
    ap.add_argument("--tiles", nargs="*", default=[""])
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    from leantile import architectures
    from leantile.architectures.gqa_attention import baselines
    from leantile.bench import run_one
    rows = []
    for name, (h_kv, g, t_q, t_kv, d_h) in CASES.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        sizes = {"h_kv": h_kv, "g": g, "t_q": t_q, "t_kv": t_kv, "d_h": d_h}
        for cfg in args.tiles:
            tiles = dict((k, int(v)) for k, v in (kv.split("=") for kv in cfg.split(",") if kv)) or None
            for layout, graph in (("packed", architectures.build("gqa_attention", **sizes)),
                                  ("per_head", per_head(**sizes))):
                try:
                    # the per-head layout is timed for leantile alone (its baselines are the packed row's)
                    row = run_one(graph, tiles=tiles, baselines_fn=baselines if layout == "packed" else None,
                                  eager=None if layout == "packed" else (lambda t: t["Q"]))
                except Exception as e:  # a tile choice the plan refuses: say so, go on
                    row = {"error": f"{type(e).__name__}: {e}"[:300]}
                row.update(case=name, layout=layout, asked_tiles=cfg)
                rows.append(row)
                ms = row.get("gpu_ms", {})
                shown = {k: round(v, 4) for k, v in ms.items() if k in ("leantile", "sdpa_flash", "sdpa_cudnn", "compile")}
                print(f"{name:24} {layout:9} {cfg or 'shipped':28} {shown} tiles={row.get('tiles')} "
                      f"ok={row.get('ok')} {row.get('error', '')}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gqa-packing.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
