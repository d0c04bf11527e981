"""Every candidate of the shapes issue's workloads on the GPU: the skinny ones the split rules
are for (a GEMM with m <= 16, a GEMM with K = 2^19, one-query attention) and the norms before a
GEMM the prenorm family is for (layernorm_linear_gelu, rmsnorm, rmsnorm_mlp), so the plans derive
offers are timed in the same process against torch eager, torch.compile and the vendor path
(leantile.bench.run_one: do_bench_cudagraph medians, best of two interleaved rounds).

    python benchmarks/split_k_waves/split_probe.py [--out DIR] [--only NAME ...] [--configs k=v,k=v ...]
                                     [--split-only] [--candidates NAME ...] [--tag TAG]
                                     [--max-splits N ...]

--only keeps the cases whose name starts with one of the NAMEs; --candidates the candidates
named (all where not given). Each --configs entry is one tile configuration (empty: the plan's
defaults); every case runs with each. The JSON is split-probe[-TAG].json in --out.
"""
from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

CASES = {
    "gemm_m1_llama8b_mlp": ("matmul", {"m": 1, "d": 4096, "n": 14336}),
    "gemm_m16_4096": ("matmul", {"m": 16, "d": 4096, "n": 4096}),
    "gemm_m1_llama8b_qkv": ("matmul", {"m": 1, "d": 4096, "n": 6144}),
    "gemm_m16_llama70b_down": ("matmul", {"m": 16, "d": 28672, "n": 8192}),
    "gemm_k2^19": ("matmul", {"m": 256, "d": 524288, "n": 256}),
    "decode_h32_t8192_d128": ("attention", {"h": 32, "t_q": 1, "t_kv": 8192, "d_h": 128}),
    "decode_h32_t32768_d128": ("attention", {"h": 32, "t_q": 1, "t_kv": 32768, "d_h": 128}),
    "decode_h12_t2048_d64": ("attention", {"h": 12, "t_q": 1, "t_kv": 2048, "d_h": 64}),
    "decode_h32_t2048_d128": ("attention", {"h": 32, "t_q": 1, "t_kv": 2048, "d_h": 128}),
    "decode_h64_t8192_d128": ("attention", {"h": 64, "t_q": 1, "t_kv": 8192, "d_h": 128}),
    "lnlg_4096x4096x16384": ("layernorm_linear_gelu", {"m": 4096, "d": 4096, "n": 16384}),
    "lnlg_gpt2_m1": ("layernorm_linear_gelu", {"m": 1, "d": 768, "n": 3072}),
    "lnlg_gpt2_m2048": ("layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072}),
    "rmsnorm_qkv_m16": ("rmsnorm", {"m": 16, "d": 4096, "n": 6144}),
    "rmsnorm_qkv_m2048": ("rmsnorm", {"m": 2048, "d": 4096, "n": 6144}),
    "rmsnorm_1024x4096x4096": ("rmsnorm", {"m": 1024, "d": 4096, "n": 4096}),
    "rmsnorm_mlp_m2048": ("rmsnorm_mlp", {"m": 2048, "d": 4096, "n": 14336}),
    "gemm_1024x4096x4096": ("matmul", {"m": 1024, "d": 4096, "n": 4096}),
    # grids of well under a wave at the default tiles (GPT-2's projections, m = 128 prompts)
    "gemm_gpt2_c_attn_m128": ("matmul", {"m": 128, "d": 768, "n": 2304}),
    "gemm_gpt2_c_proj_m2048": ("matmul", {"m": 2048, "d": 3072, "n": 768}),
    "lnlg_gpt2_m128": ("layernorm_linear_gelu", {"m": 128, "d": 768, "n": 3072}),
    "rmsnorm_qkv_m128": ("rmsnorm", {"m": 128, "d": 4096, "n": 6144}),
    "gemm_m128_4096": ("matmul", {"m": 128, "d": 4096, "n": 4096}),
    # one wave of 64-row tiles (shape_tiles.wave_tiles) at other row counts
    "gemm_m256_4096": ("matmul", {"m": 256, "d": 4096, "n": 4096}),
    "gemm_m65_8000": ("matmul", {"m": 65, "d": 1000, "n": 8000}),
    "lnlg_gpt2_m300": ("layernorm_linear_gelu", {"m": 300, "d": 768, "n": 3072}),
    "rmsnorm_qkv_m200": ("rmsnorm", {"m": 200, "d": 4096, "n": 6144}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/split_k_waves/results")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--configs", nargs="*", default=[""], help="tile configurations, each k=v,k=v ('' = defaults)")
    ap.add_argument("--split-only", action="store_true", help="only the split candidates (and a lone matmul's)")
    ap.add_argument("--candidates", nargs="*", help="only these candidates")
    ap.add_argument("--tag", default="", help="the JSON file's suffix")
    ap.add_argument("--max-splits", nargs="*", type=int, default=[None],
                    help="run every case again with at most each of these slices (split rules' MAX_SPLITS)")
    args = ap.parse_args(argv)
    from leantile.derive.rules import split as split_rules
    if args.max_splits != [None]:
        default = split_rules.MAX_SPLITS
        for cap in args.max_splits:
            split_rules.MAX_SPLITS = cap or default
            _run(args, configs_of(args), f"{args.tag}-max{cap}")
        return 0
    return _run(args, configs_of(args), args.tag)


def configs_of(args) -> list[dict]:
    return [{k: int(v) for k, v in (t.split("=") for t in c.split(",") if t)} for c in args.configs]


def _run(args, configs, tag) -> int:
    from leantile import architectures
    from leantile.bench import run_one
    from leantile.derive import candidates
    from leantile.derive.rules import split as split_rules

    rows = []
    for name, (arch, sizes) in CASES.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        g = architectures.build(arch, **sizes)
        base = None  # the case's baselines, timed with its first run
        for c, tiles in [(c, t) for c in candidates(g) for t in configs]:
            if c.name == "unfused" and arch == "attention" or args.split_only and "split" not in c.name \
                    or args.candidates and c.name not in args.candidates:
                continue
            try:
                if base is None:
                    row = run_one(g, tuned=False, candidate=c.name, tiles=tiles or None, inputs=_inputs(g))
                    base = {k: v for k, v in row["gpu_ms"].items() if k != "leantile"}
                else:
                    row = _leantile_only(g, c.name, tiles)
                    row["gpu_ms"].update(base)
            except Exception as e:
                row = {"arch": arch, "candidate": c.name, "error": f"{type(e).__name__}: {e}",
                       "trace": traceback.format_exc()[-2000:]}
            row["case"], row["config"] = name, tiles
            row["max_splits"] = split_rules.MAX_SPLITS
            rows.append(row)
            out = Path(args.out)  # after every row: a run cut off at its time limit keeps what it measured
            out.mkdir(parents=True, exist_ok=True)
            (out / f"split-probe{'-' + tag if tag else ''}.json").write_text(json.dumps(rows, indent=1) + "\n")
            _line(row)
    return 0


def _line(r) -> None:
    """One table row, printed as soon as it is measured."""
    if "gpu_ms" not in r:
        print(f"| {r['case']} | {r['candidate']} | {r['config']} | ERROR {r['error'][:60]} | | | | | |", flush=True)
        return
    g = r["gpu_ms"]
    vend = {k: v for k, v in g.items() if k not in ("leantile", "eager", "compile", "compile_ro")}
    best = min(vend.values()) if vend else float("nan")
    cmp_ = g.get("compile", float("nan"))
    print(f"| {r['case']} | {r['candidate']} | {r['config']} | {r['ok']} | {g['leantile']:.4f} | {best:.4f} | {cmp_:.4f} | "
          f"{cmp_ / g['leantile']:.2f}x | {best / g['leantile']:.2f}x |", flush=True)


def _inputs(g):
    """Fresh random inputs scaled as the shape suite scales them (K^-1/4: N(0, 1) inputs at LLaMA
    widths overflow f16 in a gated MLP, and the check would judge the overflow)."""
    import torch

    from leantile.reference import natural_scale, random_inputs
    return random_inputs(g, seed=0, device=torch.device("cuda"), scale=natural_scale(g))


def _leantile_only(g, candidate, tiles):
    """The row of one more configuration of a case whose baselines were timed already."""
    import triton.testing as tt

    from leantile.runtime import compile as compile_kernel
    k = compile_kernel(g, candidate=candidate, tiles=tiles or None)
    inputs = _inputs(g)
    v = k.verify(inputs)
    k.run(inputs)
    ms = min(tt.do_bench_cudagraph(lambda: k.run(inputs), rep=100, return_mode="median") for _ in range(2))
    return {"arch": g.name, "candidate": k.plan.candidate, "tiles": dict(k.plan.tiles), "ok": v["ok"],
            "rel_err": max(v["plain_rel_err"].values()), "gpu_ms": {"leantile": ms}}


if __name__ == "__main__":
    raise SystemExit(main())
