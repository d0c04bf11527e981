"""Tile probes behind the fixed tiles of map and row kernels (derive/region_kernels.py): SiLU
over 8192 x 8192 at several map tiles and thread counts, and the GEMM with an epilogue at its
default and its tuned-matmul tiles, each against torch.compile of the same computation.

    python benchmarks/fusion/fusion_tiles_probe.py      (on a GPU; writes $OUT/probe2.json)
"""
import sys, json, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import triton.testing as tt
from fusion_suite import cases
from leantile import dag
from leantile.derive import derive
from leantile.runtime import Kernel
m = cases()
fns = m.torch_versions()
out = {}
def bench(name, tiles_list):
    body, axes = m.CASES[name]
    g = dag.build_graph_with_output(name, axes, body)
    inp = None
    for tiles in tiles_list:
        try:
            plan = derive(g, None, tiles)
            k = Kernel(g, plan, "probe", torch.device("cuda", 0))
            inp = inp or k.random_inputs()
            ms = k.benchmark(inp)
        except Exception as e:
            print(name, tiles, "ERR", str(e)[:200], flush=True); continue
        out[f"{name}/{tiles}"] = ms
        print(name, tiles, round(ms, 4), flush=True)
    c = torch.compile(lambda: fns[name](inp)); c(); c()
    print(name, "compile", round(tt.do_bench_cudagraph(c, rep=100, return_mode="median"), 4), flush=True)
bench("silu", [{"block_m": bm, "block_n": bn, "threads": th} for bm, bn in ((128, 128), (64, 256), (32, 512), (16, 1024), (8, 1024), (32, 256)) for th in (128, 256)])
bench("gemm_epilogue", [{}, {"block_n": 256, "stages": 4}, {"block_n": 256, "stages": 3}, {"stages": 3}, {"stages": 4}])
bench("rmsnorm_gain_gemm", [{}, {"block_n": 256, "stages": 4}])
json.dump(out, open(os.environ.get("OUT", ".") + "/probe2.json", "w"))
