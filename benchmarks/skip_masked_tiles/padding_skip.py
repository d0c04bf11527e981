"""Padded attention on the GPU: a batch of sequences padded to t_kv keys, lengths[b] valid
(select(key < lengths, s, -inf)), whose flash kernel reads its batch's length at run time and
streams only the key blocks below it (skip_masked_tiles, plan.KeyBound.leaf). Times the shipped
plan at full lengths and at shorter ones against torch eager and torch.compile of the graph, in
one process (leantile.bench.run_one: do_bench_cudagraph medians).

    python benchmarks/skip_masked_tiles/padding_skip.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SIZES = {"b": 4, "h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}
LENGTHS = {"full": [4096] * 4, "mixed": [4096, 2048, 1024, 512], "quarter": [1024] * 4}


def padded_attention(sizes: dict):
    from leantile.dag import build_graph_with_output

    def body(m):
        q, k, v = (m.input(n, ["b", "h", t, "d_h"], "f16") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
        s = m.div(m.matmul(q, k, "d_h", "d_h"), m.sqrt(m.size_const("d_h")))
        s = m.select(m.lt(m.iota("t_kv"), m.input("lengths", ["b"], "f32")), s, m.const("-inf"))
        return m.matmul(m.softmax(s, "t_kv"), v, "t_kv", "t_kv")
    return build_graph_with_output("padded_attention", sizes, body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/skip_masked_tiles/results")
    args = ap.parse_args(argv)
    import torch

    from leantile.bench import run_one
    from leantile.runtime import compile as compile_kernel
    g = padded_attention(SIZES)
    rows = []
    for name, lengths in LENGTHS.items():
        inputs = compile_kernel(g).random_inputs(0)
        inputs["lengths"] = torch.tensor(lengths, dtype=inputs["lengths"].dtype, device=inputs["lengths"].device)
        try:
            row = run_one(g, inputs=inputs)
        except Exception as e:
            row = {"error": f"{type(e).__name__}: {e}"[:300]}
        row.update(case=name, lengths=lengths)
        rows.append(row)
        ms = {k: round(v, 4) for k, v in row.get("gpu_ms", {}).items()}
        print(f"{name:8} {lengths} {ms} {row.get('candidate')} ok={row.get('ok')} {row.get('error', '')}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "padding-skip.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
