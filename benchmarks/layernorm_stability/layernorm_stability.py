"""Numerical robustness of the LayerNorm -> GEMM candidates (issue 13, "stable statistics").

X = mu + N(0, 1) with a large mean mu, the case real activations have in some channels.
Every layernorm_linear_gelu candidate runs through the float32 interpreter (every buffer
float32) and is compared with the float64 reference; the yardstick is torch's own float32
LayerNorm (Welford) followed by the same GEMM + bias + GELU in float32. Prints a table and
writes JSON:

    python benchmarks/layernorm_stability/layernorm_stability.py [--out benchmarks/layernorm_stability/results/layernorm-stability.json]

Acceptance (issue 13): every candidate within 10x torch's error, no NaN, for mu in
{0, 100, 1000, 3000}.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from leantile import architectures, interp, reference
from leantile.derive import candidates, derive

SIZES = {"m": 64, "d": 256, "n": 128}


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    if not torch.isfinite(x).all():
        return math.nan
    return ((x - ref).norm() / ref.norm()).item()


def torch_f32(g, inputs) -> torch.Tensor:
    """torch's float32 LayerNorm (no affine, eps 1e-5) then the graph's GEMM, bias and GELU."""
    x = inputs["X"].float()
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5)
    z = y @ inputs["W"].float() + inputs["b"].float()
    return torch.nn.functional.gelu(z, approximate="tanh")


def torch_f16(g, inputs) -> torch.Tensor:
    """torch in float16 (LayerNorm accumulates in float32 internally, as on the GPU)."""
    x = inputs["X"].half()
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5)
    z = y @ inputs["W"].half() + inputs["b"].half()
    return torch.nn.functional.gelu(z.float(), approximate="tanh")


def measure(g, mu: float, dtype: str) -> dict:
    inputs = {k: v.double() for k, v in reference.random_inputs(g, seed=0, dtype="f64").items()}
    inputs["X"] = inputs["X"] + mu
    low = torch.float32 if dtype == "f32" else torch.float16
    rounded = {k: v.to(low) for k, v in inputs.items()}
    ref = reference.evaluate(g, {k: v.double() for k, v in rounded.items()}, compute_dtype=torch.float64,
                             check=False)[g_out(g)]
    base = rel_err((torch_f32 if dtype == "f32" else torch_f16)(g, rounded), ref)
    row = {"mu": mu, "dtype": dtype, "torch": base, "candidates": {}}
    for c in candidates(g):
        plan = derive(g, c.name)
        out = interp.run(plan, rounded, dtype=torch.float32 if dtype == "f32" else None)[g_out(g)]
        row["candidates"][c.name] = rel_err(out, ref)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--mus", default="0,100,1000,3000")
    ap.add_argument("--dtypes", default="f32,f16")
    a = ap.parse_args(argv)
    g = architectures.build("layernorm_linear_gelu", **SIZES)
    rows = [measure(g, float(mu), dt) for dt in a.dtypes.split(",") for mu in a.mus.split(",")]
    names = list(rows[0]["candidates"])
    print("| dtype | mu | torch | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for r in rows:
        cells = [f"{r['candidates'][n]:.1e} ({r['candidates'][n] / r['torch']:.0f}x)"
                 if math.isfinite(r["candidates"][n]) else "NaN" for n in names]
        print(f"| {r['dtype']} | {r['mu']:g} | {r['torch']:.1e} | " + " | ".join(cells) + " |")
    worst = max((r["candidates"][n] / r["torch"] if math.isfinite(r["candidates"][n]) else math.inf)
                for r in rows for n in names)
    print(f"worst candidate / torch: {worst:.1f}x (acceptance: <= 10x, no NaN)")
    if a.out:
        Path(a.out).write_text(json.dumps({"sizes": SIZES, "worst_ratio": worst, "rows": rows}, indent=1) + "\n")
    return 0


def g_out(g) -> str:
    return next(iter(g.outputs))


if __name__ == "__main__":
    raise SystemExit(main())
