"""Probe behind the attention default tiles (issue 18): every prefill attention case of the suite
(t_q >= 512) at the shipped default tiles and at wider K/V tiles or the FA3 schedule, GPU time
(do_bench_cudagraph) against cuDNN SDPA in one process, each plan checked against the float32
reference first (benchmarks/default_tiles/tiles_probe.py does the work).

    python benchmarks/attention_tiles/attention_tiles_probe.py [case ...]   (on a GPU; writes $OUT/attention-tiles.json)
    ATTN_VARIANTS=bn256,overlap_bn192 python benchmarks/attention_tiles/attention_tiles_probe.py ...
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "default_tiles"))
from tiles_probe import probe, suite  # noqa: E402

OVERLAP = {"block_m": 128, "block_n": 128, "threads": 256, "overlap": 1}  # plan.passes.overlap (FA3)
VARIANTS = {"plain": {"overlap": 0}, "bn256": {"block_n": 256, "overlap": 0},
            "overlap": OVERLAP, "overlap_s2": {**OVERLAP, "stages": 2},
            # FA3's d128 tile: 176 keys (64 query rows per consumer: S 88 + P 44 + O 64 registers)
            "overlap_bn160": {**OVERLAP, "block_n": 160}, "overlap_bn176": {**OVERLAP, "block_n": 176},
            "overlap_bn192": {**OVERLAP, "block_n": 192}}
if os.environ.get("ATTN_VARIANTS"):  # a comma-separated subset (the default tiles always run)
    VARIANTS = {v: VARIANTS[v] for v in os.environ["ATTN_VARIANTS"].split(",") if v != "default"}


if __name__ == "__main__":
    only = sys.argv[1:]
    probe([c for c in suite.select() if "attention" in c.arch and c.sizes["t_q"] >= 512 and "large" not in c.tags
           and (not only or c.name in only)], VARIANTS, "attention-tiles.json", with_compile=False)
