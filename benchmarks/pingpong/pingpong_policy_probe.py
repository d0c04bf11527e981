"""Issue 18: a default-tiles policy change, measured: each row is one built-in at one shape and
dtype under named (candidate, tiles) variants (the shipped default before and after the change,
and the alternatives), every plan checked against the float32 reference (Kernel.verify), all
timed (Kernel.benchmark: do_bench_cudagraph) in one process, twice interleaved (best kept).
First asked for the ping-pong schedule (shape_tiles.pingpong_fits): CASES below.

    python benchmarks/pingpong/pingpong_policy_probe.py   (on a GPU; writes $OUT/pingpong-policy.json)
    POLICY_CASES='[["softmax_row", {"rows": 2048, "cols": 50257}, "f16",
                    {"old": ["online_row_exp2", {"block_m": 4}]}], ...]' python benchmarks/pingpong/pingpong_policy_probe.py
"""
import json
import os
import sys

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
from leantile.runtime import compile as compile_kernel  # noqa: E402

PP = {"block_m": 128, "block_n": 128, "stages": 4, "threads": 256, "pingpong": 1}
WIDE = {"block_m": 128, "block_n": 256, "stages": 4, "threads": 256}
PLAIN3 = {"block_m": 128, "block_n": 128, "stages": 3, "threads": 256}
CASES = [  # (built-in, sizes, {label: (candidate, tiles)}), f16
    ("rmsnorm", {"m": 2048, "d": 768, "n": 3072},
     {"stats_separate_plain": ("stats_separate", PLAIN3), "stats_separate_pingpong": ("stats_separate", PP),
      "prenorm_plain": ("prenorm", PLAIN3)}),
    ("rmsnorm", {"m": 4096, "d": 1024, "n": 4096},
     {"stats_separate_wide": ("stats_separate", WIDE), "prenorm_wide": ("prenorm", WIDE),
      "stats_separate_pingpong": ("stats_separate", PP)}),
    ("rmsnorm", {"m": 1500, "d": 1024, "n": 1528},
     {"stats_separate_plain": ("stats_separate", PLAIN3), "stats_separate_pingpong": ("stats_separate", PP)}),
    ("layernorm_linear_gelu", {"m": 1024, "d": 1024, "n": 4096},
     {"prenorm_wide": ("prenorm", WIDE), "prenorm_pingpong": ("prenorm", PP)}),
]


def main():
    out = os.environ.get("OUT", ".")
    rows = []
    cases = json.loads(os.environ["POLICY_CASES"]) if os.environ.get("POLICY_CASES") else \
        [(name, sizes, "f16", variants) for name, sizes, variants in CASES]
    for name, sizes, dtype, variants in cases:
        row = {"graph": name, "sizes": sizes, "dtype": dtype}
        g = suite.build(suite.Case("policy", name, sizes, dtype, "issue"))[0]
        kernels = {}
        for label, (cand, tiles) in variants.items():
            try:
                k = compile_kernel(g, candidate=cand, tiles=tiles)
                v = k.verify(seed=3)
                kernels[label] = k
                row[label] = {"ok": v["ok"], "rel_err": v["plain_rel_err"], "pingpong": [kk.pingpong for kk in k.plan.kernels],
                              "ms": []}
            except Exception as e:  # a row, not a stop
                row[label] = f"{type(e).__name__}: {str(e)[:300]}"
        for _ in range(2):
            for label, k in kernels.items():
                row[label]["ms"].append(k.benchmark(k.random_inputs(0)))
        print(json.dumps(row), flush=True)
        rows.append(row)
        json.dump(rows, open(os.path.join(out, "pingpong-policy.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
