"""Does a GEMM that normalises its output rows in its epilogue (fuse_row_epilogue: candidate
`rows`, one kernel) beat the GEMM storing its product and a row kernel normalising it
(candidate `rows_apart`, torch.compile's plan), and where? Times both candidates of GroupNorm
after a GEMM (examples/reductions.py gemm_groupnorm) at several shapes against torch.compile of
the PyTorch a user writes, in one process (leantile.bench.run_one: do_bench_cudagraph), and
prints which the cost model ships.

    python benchmarks/rows_apart/rows_apart_probe.py [--out DIR]

The `rows_apart` family was measured slower and not kept (VERDICT.md): without it each rows_apart
row reports "no candidate"; the rows rows still run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (b, k, g, cg): the suite's two shapes, then more rows, longer and shorter contractions
SHAPES = [(128, 512, 8, 128), (8192, 4096, 32, 128), (2048, 1024, 32, 64), (4096, 4096, 16, 128),
          (8192, 1024, 32, 128), (1024, 4096, 8, 256), (16384, 512, 16, 128)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/rows_apart/results")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))
    import fusion_suite
    import torch

    from leantile.bench import run_one
    from leantile.runtime import choose_plan

    m = fusion_suite.cases("reductions")
    torch_fn = m.cases()["gemm_groupnorm"].torch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for b, k, grp, cg in SHAPES:
        g = m.graph("gemm_groupnorm", b=b, k=k, g=grp, cg=cg)
        shipped = choose_plan(g, None, None, torch.cuda.get_device_name(), True)[0].candidate
        for cand in ("rows", "rows_apart"):
            try:
                r = run_one(g, candidate=cand, eager=torch_fn)
            except Exception as e:  # noqa: BLE001 (one failing shape is reported, the others go on)
                rows.append({"shape": [b, k, grp, cg], "candidate": cand, "error": f"{type(e).__name__}: {e}"[:300]})
                print(b, k, grp, cg, cand, "error", e, flush=True)
                continue
            gm = r["gpu_ms"]
            rows.append({"shape": [b, k, grp, cg], "candidate": cand, "shipped": shipped, "ok": r["ok"],
                         "tiles": r["tiles"], "kernels": r["kernels"], "gpu_ms": gm})
            print(f"{b}x{k}x{grp}x{cg} {cand:11s} ok {r['ok']} leantile {gm['leantile']:.4f} ms compile "
                  f"{gm['compile']:.4f} x{gm['compile'] / gm['leantile']:.2f} shipped {shipped}", flush=True)
        tmp = out / "rows-apart.json.tmp"
        tmp.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1, default=str))
        tmp.replace(out / "rows-apart.json")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    sys.exit(main())
