"""GPU check (issue 49) of GEMM epilogues with coordinate masks (triu, band; plain, swapped and
split, ping-pong, dual, two sites sharing one mask) and of norms over three axes (LayerNorm over
(c, h, w), a GroupNorm) and of the residual add + RMSNorm row kernel storing h, every candidate at GPU sizes, verified (Kernel.verify) at two seeds; one
line per plan, "bad N of M" last.

    python benchmarks/epilogue_masks/gpu_check.py        (on the device, from the repository root)
"""
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests"), str(ROOT / "tests" / "cpu")]
import leantile
from leantile import dag
from leantile.derive import candidates
from leantile.derive.shape_tiles import PINGPONG_TILES
from reduction_strategies import norm_over
from test_coordinate_epilogue import _masked_gemms, mask_shared
from test_regions import _residual_norm

cases = [(_masked_gemms({"m": 1000, "k": 512, "n": 1030}), None),
         (_masked_gemms({"m": 8, "k": 4096, "n": 256}), None),
         (_masked_gemms({"m": 16, "k": 256, "n": 4096}), None),  # swapped, not split: the mask in its epilogue
         (_masked_gemms({"m": 2048, "k": 1024, "n": 2048}, True, "other_lhs"), None),
         (_masked_gemms({"m": 256, "k": 512, "n": 256}), PINGPONG_TILES),
         (_masked_gemms({"m": 512, "k": 256, "n": 512}, False, "shared_lhs"), None),
         (dag.build_graph_with_output("ln_chw", {"n": 64, "c": 8, "h": 16, "w": 16}, norm_over(("c", "h", "w"), dtype="f16")), None),
         (dag.build_graph_with_output("gn", {"n": 16, "g": 32, "cg": 4, "h": 16, "w": 16}, norm_over(("cg", "h", "w"), ("n", "g", "cg", "h", "w"), "f16")), None),
         (dag.build_graph_with_output("ln_odd", {"n": 5, "c": 5, "h": 7, "w": 9}, norm_over(("c", "h", "w"))), None),
         (dag.build_graph("residual_norm", {"m": 4096, "d": 4096}, _residual_norm), None),  # h stored by the row kernel
         (dag.build_graph("residual_norm", {"m": 33, "d": 1030}, _residual_norm), None),
         (mask_shared({"m": 1000, "k": 512, "n": 1030}, "f16"), None)]  # the mask in the GEMM and a row kernel
jobs = [(g, c.name, t) for g, t in cases for c in candidates(g)]


def make(job):
    g, cand, tiles = job
    try:
        return job, leantile.compile(g, candidate=cand, tiles=tiles, tuned=False)
    except Exception as e:
        return job, e


bad = 0
with ThreadPoolExecutor(12) as pool:
    for (g, cand, tiles), k in pool.map(make, jobs):
        if isinstance(k, Exception):
            bad += 1
            print("CRASH", g.name, g.axes, cand, type(k).__name__, str(k)[:300], flush=True)
            continue
        for seed in (0, 1):
            v = k.verify(seed=seed)
            bad += not v["ok"]
            print("ok  " if v["ok"] else "BAD ", g.name, g.axes, cand, [x.name for x in k.plan.kernels],
                  {o: f"{e:.2e}" for o, e in v["plain_rel_err"].items()}, flush=True)
print("bad", bad, "of", 2 * len(jobs))
