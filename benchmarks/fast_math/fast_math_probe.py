"""Does nvcc --use_fast_math on a transcendental epilogue that stores 16-bit floats
(plan.passes.fast_math) pay, and what does it cost in accuracy? Each graph's default plan at the
default tiles (no tuned entry), with the pass (fast_math on) and without (tile fast_math=0), in one
process: verified against the float32 reference (rel err), timed by leantile.bench.run_one
(do_bench_cudagraph) against torch.compile of the same PyTorch function. Prints a table, writes JSON.

    python benchmarks/fast_math/fast_math_probe.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "examples"):
    sys.path.insert(0, str(p))


def _cases():
    import reductions
    cs = reductions.cases()
    mish = cs["mish_mish_gemm"]
    return [("mish_mish_gemm 4096^3", reductions.graph("mish_mish_gemm"), mish.torch, None),
            ("mish_mish_gemm 8192x4096x8192", reductions.graph("mish_mish_gemm", m=8192, n=8192), mish.torch, None),
            ("swiglu (export)", None, None, str(ROOT / "exports" / "swiglu.json")),
            ("geglu (export)", None, None, str(ROOT / "exports" / "geglu.json"))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "fast_math" / "results"))
    a = ap.parse_args(argv)
    import torch

    from leantile.bench import run_one
    gpu = torch.cuda.get_device_name()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"fast-math-{gpu.split()[-1].lower()}-{date.today()}.json"
    rows = []
    for name, g, fn, path in _cases():
        for tiles in ({}, {"fast_math": 0}):
            try:
                r = run_one(g if g is not None else path, tuned=False, tiles=tiles, eager=fn)
            except Exception as e:  # one failing row is reported, the others go on
                rows.append({"case": name, "tiles": tiles, "error": f"{type(e).__name__}: {e}"[:300]})
                print(name, tiles, "ERROR", rows[-1]["error"], flush=True)
                continue
            gm = r["gpu_ms"]
            comp = gm.get("compile")
            r.update(case=name, fast_math=not tiles)
            rows.append(r)
            print(f"{name:30s} fast_math={int(not tiles)} ok={r['ok']} rel_err={r['rel_err']:.2e} "
                  f"leantile {gm['leantile']:.4f} ms  torch.compile {comp} ms  "
                  f"-> {comp / gm['leantile'] if comp else float('nan'):.2f}x", flush=True)
            tmp = dest.with_suffix(".tmp")
            tmp.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1, default=str))
            tmp.replace(dest)
    print("->", dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
