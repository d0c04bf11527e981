"""Issue 18: the ping-pong GEMM schedule (plan.passes.pingpong, emit.pingpong) against the plain
pipelined kernel of the same plan, on built-ins at shapes that do not divide its 128 x 128 tiles
(partial tiles on every axis, one tile, fewer tiles than CTAs, batch axes), every output checked
against the float32 reference (Kernel.verify), both timed (do_bench_cudagraph).

    python benchmarks/pingpong/pingpong_check.py   (on a GPU; writes $OUT/pingpong-check.json)
"""
import json
import os
import sys

sys.path.insert(0, "python")
from leantile.runtime import compile as compile_kernel  # noqa: E402

PINGPONG = {"block_m": 128, "block_n": 128, "stages": 4, "threads": 256, "pingpong": 1}
CASES = [  # (built-in, sizes)
    ("layernorm_linear_gelu", {"m": 1000, "d": 776, "n": 1000}),
    ("layernorm_linear_gelu", {"m": 1, "d": 64, "n": 8}),
    ("layernorm_linear_gelu", {"m": 130, "d": 200, "n": 136}),
    ("matmul", {"m": 2000, "d": 1032, "n": 3080}),
    ("matmul", {"m": 129, "d": 8, "n": 4096}),
    ("rmsnorm", {"m": 1500, "d": 1024, "n": 1528}),
    ("swiglu", {"m": 300, "n": 600, "d": 512}),
    ("rmsnorm_mlp", {"m": 300, "d": 512, "n": 600}),
]


def main():
    out = os.environ.get("OUT", ".")
    rows = []
    for name, sizes in CASES:
        row = {"graph": name, "sizes": sizes}
        try:
            base = compile_kernel(name, sizes=sizes, tuned=False)
            row["candidate"] = base.plan.candidate
            pp = compile_kernel(name, sizes=sizes, candidate=base.plan.candidate, tiles={**base.plan.tiles, **PINGPONG})
            row["pingpong_kernels"] = [k.name for k in pp.plan.kernels if k.pingpong]
            for label, k in (("default", base), ("pingpong", pp)):
                seeds = [k.verify(seed=s) for s in (0, 1)]
                row[label] = {"ok": all(v["ok"] for v in seeds), "rel_err": [v["plain_rel_err"] for v in seeds],
                              "ms": k.benchmark(k.random_inputs(0)), "tiles": dict(k.plan.tiles)}
        except Exception as e:  # a row, not a stop
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
        json.dump(rows, open(os.path.join(out, "pingpong-check.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
