"""The shapes issue's named cases with the plan leantile.compile ships for them (tuned entry if
one matches, else the cost model's pick at the shape's default tiles), each checked and timed
against torch eager, torch.compile and the vendor path in one process (leantile.bench.run_one).
One line per case as it is measured; JSON after every case.

    python benchmarks/shipped_defaults/shipped_defaults.py [--out DIR] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

CASES = {
    "gemm_m1_llama8b_up": ("matmul", {"m": 1, "d": 4096, "n": 14336}),
    "gemm_m16_4096": ("matmul", {"m": 16, "d": 4096, "n": 4096}),
    "gemm_k2^19": ("matmul", {"m": 256, "d": 524288, "n": 256}),
    "gemm_1000x4000x3000": ("matmul", {"m": 1000, "d": 3000, "n": 4000}),
    "gemm_4096x11008x4096": ("matmul", {"m": 4096, "d": 4096, "n": 11008}),
    "decode_h32_t8192_d128": ("attention", {"h": 32, "t_q": 1, "t_kv": 8192, "d_h": 128}),
    "rmsnorm_gemm_m8": ("rmsnorm", {"m": 8, "d": 4096, "n": 4096}),
    "rmsnorm_gemm_m4096": ("rmsnorm", {"m": 4096, "d": 4096, "n": 4096}),
    "layernorm_linear_gelu_4096x4096x16384": ("layernorm_linear_gelu", {"m": 4096, "d": 4096, "n": 16384}),
    "swiglu_m16_llama8b": ("swiglu", {"m": 16, "d": 4096, "n": 14336}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/shipped_defaults/results")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    from leantile import architectures
    from leantile.bench import run_one

    rows = []
    print("| case | candidate | tiles | ok | leantile ms | compile ms | vs compile | vendor | vs vendor |", flush=True)
    for name, (arch, sizes) in CASES.items():
        if args.only and name not in args.only:
            continue
        try:
            row = run_one(architectures.build(arch, **sizes))
        except Exception as e:
            row = {"arch": arch, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        row["case"] = name
        rows.append(row)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "shipped-defaults.json").write_text(json.dumps(rows, indent=1) + "\n")
        if "gpu_ms" not in row:
            print(f"| {name} | ERROR {row['error'][:80]} | | | | | | | |", flush=True)
            continue
        g = row["gpu_ms"]
        vend = {k: v for k, v in g.items() if k not in ("leantile", "eager", "compile", "compile_ro")}
        vs = ", ".join(f"{k} {v:.4f}" for k, v in vend.items()) or "-"
        ratio = ", ".join(f"{v / g['leantile']:.2f}x" for v in vend.values()) or "-"
        tiles = {k: v for k, v in row["tiles"].items() if k in ("block_m", "block_n", "block_k", "stages", "threads")}
        print(f"| {name} | {row['candidate']} | {tiles} | {row['ok']} | {g['leantile']:.4f} | {g['compile']:.4f} | "
              f"{g['compile'] / g['leantile']:.2f}x | {vs} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
