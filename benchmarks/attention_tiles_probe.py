"""Probe behind the attention default tiles (issue 18): every prefill attention case of the suite
(t_q >= 512) at the shipped default tiles and at wider K/V tiles, GPU time (do_bench_cudagraph)
against cuDNN SDPA in one process, each plan checked against the float32 reference first.

    python benchmarks/attention_tiles_probe.py [case ...]   (on a GPU; writes $OUT/attention-tiles.json)
    ATTN_VARIANTS=default,bn256,overlap_bn192 python benchmarks/attention_tiles_probe.py ...
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
import triton.testing as tt

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
from leantile.runtime import compile as compile_kernel  # noqa: E402

OVERLAP = {"block_m": 128, "block_n": 128, "threads": 256, "overlap": 1}  # plan_passes.overlap (FA3)
VARIANTS = {"default": {}, "plain": {"overlap": 0}, "bn256": {"block_n": 256, "overlap": 0},
            "overlap": OVERLAP, "overlap_s2": {**OVERLAP, "stages": 2},
            # FA3's d128 tile: 176 keys (64 query rows per consumer: S 88 + P 44 + O 64 registers)
            "overlap_bn160": {**OVERLAP, "block_n": 160}, "overlap_bn176": {**OVERLAP, "block_n": 176},
            "overlap_bn192": {**OVERLAP, "block_n": 192}}
if os.environ.get("ATTN_VARIANTS"):  # a comma-separated subset, e.g. default,bn256,overlap_bn192
    VARIANTS = {v: VARIANTS[v] for v in os.environ["ATTN_VARIANTS"].split(",")}


def main():
    only = sys.argv[1:]
    cases = [c for c in suite.select() if "attention" in c.arch and c.sizes["t_q"] >= 512 and "large" not in c.tags
             and (not only or c.name in only)]
    built = {c.name: suite.build(c) for c in cases}

    def make(job):
        name, var = job
        g = built[name][0]
        try:
            base = compile_kernel(g, tuned=False)
            if not VARIANTS[var]:
                return job, base
            return job, compile_kernel(g, candidate=base.plan.candidate, tiles={**base.plan.tiles, **VARIANTS[var]})
        except Exception as e:  # a variant that does not compile is a row, not a crash
            return job, e
    jobs = [(c.name, v) for c in cases for v in VARIANTS]
    with ThreadPoolExecutor(8) as pool:
        kernels = dict(pool.map(make, jobs))
    rows = []
    for c in cases:
        g, base_fn = built[c.name]
        k0 = kernels[(c.name, "default")]
        if isinstance(k0, Exception):
            print(c.name, "default ERR", str(k0)[:200], flush=True)
            continue
        inputs = k0.random_inputs(0)
        _, vendor = base_fn(inputs)
        row = {"case": c.name, "sizes": c.sizes, "dtype": c.dtype, "candidate": k0.plan.candidate}
        for vname, f in vendor.items():
            try:
                row[vname] = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
            except Exception as e:
                row[vname] = str(e)[:100]
        for v in VARIANTS:
            k = kernels[(c.name, v)]
            if isinstance(k, Exception):
                row[v] = "ERR " + str(k)[:150]
                continue
            try:  # a variant that does not run (shared memory past the limit) is a row too
                ok = k.verify(inputs)["ok"]
                row[v] = {"ms": k.benchmark(inputs), "ok": ok, "tiles": dict(k.plan.tiles),
                          "overlapped": any(kk.overlap for kk in k.plan.kernels)}
            except Exception as e:
                row[v] = "ERR " + str(e)[:150]
        cud = row.get("sdpa_cudnn")
        print(c.name, {v: (round(row[v]["ms"], 4), row[v]["ok"], round(cud / row[v]["ms"], 3) if isinstance(cud, float) else None)
                       if isinstance(row[v], dict) else row[v][:60] for v in VARIANTS},
              "cudnn", cud if not isinstance(cud, float) else round(cud, 4), flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), "attention-tiles.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
