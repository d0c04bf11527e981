"""Tile variants of the shipped plan of suite cases (issue 18: where a default loses): the default
plan's candidate at its own tiles and at each variant, each checked against the float32 reference
and timed (do_bench_cudagraph) beside torch.compile and the vendor paths in one process.

    TILE_VARIANTS='{"s3": {"stages": 3}, "bn192": {"block_n": 192}}' \\
        python benchmarks/default_tiles/tiles_probe.py CASE [CASE ...]   (on a GPU; writes $OUT/tiles-probe.json)

benchmarks/attention_tiles/attention_tiles_probe.py runs it over the attention cases with its own variants.
"""
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
import triton.testing as tt

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
from leantile.derive import candidates  # noqa: E402
from leantile.runtime import compile as compile_kernel  # noqa: E402


def compile_all(jobs, make) -> dict:
    """{job: make(job), or the exception it raised}, made in a thread pool (TileLang's compile is
    mostly nvcc): a job that does not derive, fit or compile is a row of the probe, not a crash."""
    def one(job):
        try:
            return job, make(job)
        except Exception as e:
            return job, e
    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, jobs))


def compile_candidates(built: dict) -> dict:
    """{(case name, candidate): kernel or exception} for every candidate but unfused of each
    case of `built` (suite.build's (graph, baselines) by case name), at its shape's tiles."""
    jobs = [(name, c.name) for name, (g, _) in built.items() for c in candidates(g) if c.name != "unfused"]
    return compile_all(jobs, lambda job: compile_kernel(built[job[0]][0], candidate=job[1]))


def probe(cases, variants: dict, out_name: str, with_compile: bool = True) -> list[dict]:
    """One row per case: {variant: {ms, ok, tiles, overlapped} or {error}}, torch.compile's and
    each vendor path's ms; printed as it goes and written to $OUT/out_name after each case."""
    variants = {"default": {}, **variants}
    built = {c.name: suite.build(c) for c in cases}

    def make(job):
        name, var = job
        base = compile_kernel(built[name][0], tuned=False)
        if not variants[var]:
            return base
        return compile_kernel(built[name][0], candidate=base.plan.candidate, tiles={**base.plan.tiles, **variants[var]})
    kernels = compile_all([(c.name, v) for c in cases for v in variants], make)
    rows = []
    for c in cases:
        k0 = kernels[(c.name, "default")]
        if isinstance(k0, Exception):
            print(c.name, "default ERR", str(k0)[:200], flush=True)
            continue
        inputs = k0.random_inputs(0)
        eager, vendor = built[c.name][1](inputs)
        row = {"case": c.name, "sizes": c.sizes, "dtype": c.dtype, "candidate": k0.plan.candidate}
        if with_compile:
            comp = torch.compile(eager)
            comp()
            vendor = {"compile": comp, **vendor}
        for vname, f in vendor.items():
            try:
                row[vname] = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
            except Exception as e:
                row[vname] = str(e)[:100]
        for v in variants:
            k = kernels[(c.name, v)]
            try:  # a variant that does not run (shared memory past the limit) is a row too
                if isinstance(k, Exception):
                    raise k
                row[v] = {"ms": k.benchmark(inputs), "ok": k.verify(inputs)["ok"], "tiles": dict(k.plan.tiles),
                          "overlapped": any(kk.overlap for kk in k.plan.kernels)}
            except Exception as e:
                row[v] = {"error": str(e)[:150]}
        times = {n: round(row[n], 4) for n in vendor if isinstance(row[n], float)}
        print(c.name, times, {v: (round(row[v]["ms"], 4), row[v]["ok"]) if "ms" in row[v] else row[v]["error"][:60]
                              for v in variants}, flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "variants": variants, "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), out_name), "w"), indent=1)
    return rows


if __name__ == "__main__":
    probe([c for c in suite.select() if c.name in sys.argv[1:]], json.loads(os.environ.get("TILE_VARIANTS", "{}")),
          "tiles-probe.json")
