"""Numerical robustness of the LayerNorm -> GEMM candidates (issue 13, "stable statistics").

X = mu + N(0, 1) with a large mean mu, the case real activations have in some channels.
Every layernorm_linear_gelu candidate runs through the float32 interpreter (every buffer
float32) and is compared with the float64 reference; the yardstick is torch's own float32
LayerNorm (Welford) followed by the same GEMM + bias + GELU in float32. Prints a table and
writes JSON:

    python benchmarks/layernorm_stability.py [--out benchmarks/results/layernorm-stability.json]

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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--mus", default="0,100,1000,3000")
    a = ap.parse_args(argv)
    g = architectures.build("layernorm_linear_gelu", **SIZES)
    rows = []
    for mu in (float(x) for x in a.mus.split(",")):
        inputs = {k: v.double() for k, v in reference.random_inputs(g, seed=0, dtype="f64").items()}
        inputs["X"] = inputs["X"] + mu
        ref = reference.evaluate(g, inputs, compute_dtype=torch.float64, check=False)[g_out(g)]
        f32 = {k: v.float() for k, v in inputs.items()}
        base = rel_err(torch_f32(g, f32), ref)
        row = {"mu": mu, "torch_f32_layernorm": base, "candidates": {}}
        for c in candidates(g):
            out = interp.run(derive(g, c.name), f32, dtype=torch.float32)[g_out(g)]
            row["candidates"][c.name] = rel_err(out, ref)
        rows.append(row)
    names = list(rows[0]["candidates"])
    print(f"| mu | torch f32 | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for r in rows:
        cells = [f"{r['candidates'][n]:.1e} ({r['candidates'][n] / r['torch_f32_layernorm']:.0f}x)"
                 if math.isfinite(r["candidates"][n]) else "NaN" for n in names]
        print(f"| {r['mu']:g} | {r['torch_f32_layernorm']:.1e} | " + " | ".join(cells) + " |")
    if a.out:
        Path(a.out).write_text(json.dumps({"sizes": SIZES, "rows": rows}, indent=1) + "\n")
    return 0


def g_out(g) -> str:
    return next(iter(g.outputs))


if __name__ == "__main__":
    raise SystemExit(main())
