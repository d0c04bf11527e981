"""Is a campaign mismatch of an attention graph a wrong kernel or a near tie? At large scores the
softmax is a hard max: each output row is the value row of the top-scoring key. Where two keys'
scores differ by less than the float32 / TF32 rounding of the scores, any right kernel may pick
either, and the row is off by a whole value row (one row of 289 off: rel err ~0.08).

For each failure record of one graph (benchmarks/gpu_fuzz.py's JSON), on the GPU: the campaign's
own draw (gpu_fuzz_parts.judge._inputs, same seed and scale), the float64 reference, every
candidate of the graph run and judged as the campaign judges (Kernel.judge), and per output row
that a plan gets wrong: the float64 scores' gap between the top two keys, relative to the scores'
size, against how far TF32 rounding (cuBLAS, as every float32 GEMM on the GPU) moves the scores.
Also which of several ill-conditioning probe directions (Kernel.ill_conditioned seeds) flag it.

    python3 benchmarks/near_ties/near_tie_probe.py benchmarks/results/gpu-fuzz-h200-2026-11-28-s29.json \
        --failure 0 --out $OUT/near-tie.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def scores_of(g, inputs, dtype, tf32: bool):
    """The graph's scores node (the first matmul whose two operands are both matmuls) at `dtype`
    (None: the graph's own dtypes); with tf32 (and dtype None), every float32 contraction's operands
    rounded to TF32 as the tensor cores take them."""
    from leantile import ir, reference
    qk = next(n for n in g.nodes if isinstance(n, ir.Matmul) and isinstance(g.nodes[n.a], ir.Matmul)
              and isinstance(g.nodes[n.b], ir.Matmul))
    sub = g.model_copy(update={"outputs": {"s": qk.id}})
    return reference.evaluate(sub, inputs, compute_dtype=dtype, check=False, tf32=tf32)["s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--failure", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the probe (the interpreter) on a shrunk graph")
    ap.add_argument("--sizes", default="", help="axis=size,... to override (with --device cpu)")
    a = ap.parse_args(argv)
    import torch

    import leantile
    from leantile import ir
    from leantile.derive import candidates
    from gpu_fuzz_parts.judge import _inputs

    f = json.load(open(a.results))["failures"][a.failure]
    g = ir.parse(json.dumps(f["graph"]))
    if a.sizes:
        g = g.model_copy(update={"axes": {**g.axes, **{k: int(v) for k, v in (x.split("=") for x in a.sizes.split(","))}}})
    dev = torch.device(a.device)
    inputs = _inputs(g, f["seed"], f["scale"], dev, torch)
    out_name = f["output"]
    s64 = scores_of(g, inputs, torch.float64, False)
    s_tf32 = scores_of(g, inputs, None, True).double()
    s_f32 = scores_of(g, inputs, None, False).double()
    rows = s64.reshape(-1, s64.shape[-1])
    top2 = rows.topk(2, dim=-1).values
    gap = (top2[:, 0] - top2[:, 1]) / rows.abs().amax(dim=-1)
    moved_tf32 = ((s_tf32 - s64).reshape(rows.shape).abs().amax(dim=-1) / rows.abs().amax(dim=-1))
    moved_f32 = ((s_f32 - s64).reshape(rows.shape).abs().amax(dim=-1) / rows.abs().amax(dim=-1))
    flips_tf32 = (s_tf32.reshape(rows.shape).argmax(-1) != rows.argmax(-1)).nonzero().flatten().tolist()
    report = {"failure": {k: f[k] for k in ("family", "graph_name", "dtype", "sizes", "candidate", "draw", "scale", "seed")},
              "rows": rows.shape[0], "keys": rows.shape[1],
              "gap_quantiles": [float(x) for x in gap.quantile(torch.tensor([0.0, 0.01, 0.5], device=gap.device,
                                                                               dtype=gap.dtype))],
              "tf32_moves_scores_by_median": float(moved_tf32.median()),
              "f32_moves_scores_by_median": float(moved_f32.median()),
              "rows_whose_argmax_tf32_flips": flips_tf32, "plans": {}}
    print(f"{rows.shape[0]} rows x {rows.shape[1]} keys; top-2 gap / max|score|: min {report['gap_quantiles'][0]:.3g}, "
          f"1% {report['gap_quantiles'][1]:.3g}, median {report['gap_quantiles'][2]:.3g}; TF32 moves the scores by "
          f"{report['tf32_moves_scores_by_median']:.3g} (median row), float32 by {report['f32_moves_scores_by_median']:.3g}; "
          f"rows whose argmax TF32 flips: {flips_tf32}", flush=True)
    refs = None
    for c in candidates(g):
        k = leantile.compile(g, candidate=c.name, device=dev, tuned=False, interpret=dev.type != "cuda")
        if refs is None:
            refs = k.references(inputs, torch.float64)
        outs = k.run(inputs, fill=float("nan"))
        v = k.judge(inputs, outs, refs=refs)
        ref = refs[0][out_name].double()
        o = outs[out_name].double()
        diff = (o - ref).reshape(-1, ref.shape[-1]).norm(dim=-1) / ref.reshape(-1, ref.shape[-1]).norm(dim=-1)
        bad = (diff > 1e-3).nonzero().flatten().tolist()
        probes = {seed: out_name in k.ill_conditioned(inputs, [out_name], *refs, seed=seed) for seed in range(6)}
        report["plans"][c.name] = {"ok": v["ok"], "rel_err": v["rel_err"][out_name], "plain_rel_err": v["plain_rel_err"][out_name],
                                   "rows_off": {r: {"row_err": float(diff[r]), "gap": float(gap[r]),
                                                    "tf32_moves": float(moved_tf32[r])} for r in bad},
                                   "ill_conditioned_by_probe_seed": probes}
        print(f"{c.name:28s} ok={v['ok']!s:5s} rel_err {v['rel_err'][out_name]:.3g} rows off {bad} "
              f"gaps {[round(float(gap[r]), 8) for r in bad]} probes flag: {[s for s, x in probes.items() if x]}", flush=True)
        del outs, k
    same = refs[1][out_name].double()
    ref = refs[0][out_name].double()
    diff = (same - ref).reshape(-1, ref.shape[-1]).norm(dim=-1) / ref.reshape(-1, ref.shape[-1]).norm(dim=-1)
    report["unfused_own_dtypes_rows_off"] = (diff > 1e-3).nonzero().flatten().tolist()
    print("the unfused graph in its own dtypes (the judge's `same`): rows off", report["unfused_own_dtypes_rows_off"])
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
