"""Emitted FA3 schedule (plan.passes.overlap) against the hand-written probe kernel
(benchmarks/fa3_overlap/fa3_probe.py) and the plain loop, per candidate (exp or exp2), on an H200:

    python benchmarks/fa3_overlap/overlap_compare.py      (writes $OUT/overlap-compare.json)
"""
import json
import os
import sys

import torch
import triton.testing as tt
import tilelang

sys.path[:0] = ["python", os.path.dirname(os.path.abspath(__file__))]
from fa3_probe import fa3_attention  # noqa: E402
from leantile.runtime import compile as compile_kernel  # noqa: E402

SHAPES = [("gpt2_h12_t2048_d64", 12, 2048, 64), ("h32_t1000_d128", 32, 1000, 128), ("llama3_h32_t512_d128", 32, 512, 128)]
OVERLAP = {"block_m": 128, "block_n": 128, "threads": 256, "stages": 1, "block_k": 64, "block_r": 128, "swizzle": 10}


def main():
    rows = []
    for name, h, t, d in SHAPES:
        sizes = {"h": h, "t_q": t, "t_kv": t, "d_h": d}
        row = {"case": name}
        inputs = None
        for cand in ("online_exp2", "online"):
            for ov in (0, 1):
                k = compile_kernel("attention", sizes=sizes, candidate=cand, tiles={**OVERLAP, "overlap": ov})
                inputs = inputs or k.random_inputs(0)
                row[f"{cand}_{'overlap' if ov else 'plain'}"] = (round(k.benchmark(inputs), 4), k.verify(inputs)["ok"])
        q, kk, v = inputs["Q"], inputs["K"], inputs["V"]
        kern = tilelang.compile(fa3_attention(h, t, t, d, block_n=128, stages=2, pingpong=True), target="cuda")
        o = torch.empty_like(q)
        row["probe_pp_ring2"] = round(tt.do_bench_cudagraph(lambda: kern(q, kk, v, o), rep=100, return_mode="median"), 4)
        print(json.dumps(row), flush=True)
        rows.append(row)
    json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
              open(os.path.join(os.environ.get("OUT", "."), "overlap-compare.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
