"""Why does the pooled GEMM (fuse_pool_epilogue) of a maxout layer, 4096 x 4096 x 4096 x 2,
trail torch.compile (0.81x on the H200 at 128 x 256 tiles), and which tiles close it? The
pooled kernel at several tiles, the same GEMM unpooled (the plain matmul 4096 x 4096 x 8192 at
its shipped plan: the mainloop's ceiling without the pooled epilogue), cuBLAS's mm alone and
torch.compile of the PyTorch maxout, in one process (do_bench_cudagraph). Prints, writes JSON.

    python benchmarks/pool_tiles/pool_tiles_probe.py [--out DIR]
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

TILES = [{}, {"block_n": 128, "stages": 3}, {"block_n": 128, "stages": 4}, {"block_n": 256, "stages": 3},
         {"block_m": 64, "block_n": 256, "stages": 4, "threads": 128}]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "pool_tiles" / "results"))
    a = ap.parse_args(argv)
    import torch
    import triton.testing as tt

    import reductions
    from leantile import architectures
    from leantile.runtime import compile as compile_kernel
    g = reductions.graph("gemm_maxout")
    fn = reductions.cases()["gemm_maxout"].torch
    rows, inputs = [], None

    def timed(name, f):
        f(); f()
        torch.cuda.synchronize()
        ms = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
        rows.append({"variant": name, "ms": ms})
        print(f"{name:<48} {ms:.4f} ms", flush=True)

    for tiles in TILES:
        try:
            k = compile_kernel(g, tuned=False, tiles=tiles or None)
            inputs = inputs or k.random_inputs(0)
            v = k.verify(inputs)
            timed(f"pooled {k.plan.candidate} {dict(sorted(k.plan.tiles.items()))} ok={v['ok']}", lambda k=k: k.run(inputs))
        except Exception as e:  # a tile that does not build: recorded
            rows.append({"variant": f"pooled {tiles}", "error": f"{type(e).__name__}: {e}"[:300]})
            print(f"pooled {tiles} ERR {str(e)[:200]}", flush=True)
    mm = compile_kernel(architectures.build("matmul", m=4096, d=4096, n=8192))
    mm_in = mm.random_inputs(0)
    timed(f"plain matmul 4096x4096x8192 {mm.how} {mm.plan.candidate}", lambda: mm.run(mm_in))
    # the same GEMM at the cost model's default (no tuned entry: the plain T.Pipelined loop at the
    # pooled kernel's own 128 x 256 x 4 stages): what the mainloop costs without the pooled epilogue
    loop = compile_kernel(architectures.build("matmul", m=4096, d=4096, n=8192), tuned=False)
    timed(f"plain matmul 4096x4096x8192 untuned {dict(sorted(loop.plan.tiles.items()))}", lambda: loop.run(mm_in))
    x, w = inputs["X"], inputs["W"]
    w2 = w.reshape(w.shape[0], -1)
    timed("cuBLAS mm 4096x4096x8192", lambda: x @ w2)
    c = torch.compile(fn)
    timed("torch.compile maxout", lambda: c(inputs))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pool-tiles-{torch.cuda.get_device_name().split()[-1].lower()}-{date.today()}.json"
    path.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
