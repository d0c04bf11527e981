"""Tile variants of the shipped plan of named suite cases (issue 18: where a default is slower
than torch.compile): the default plan's candidate at its own tiles and at each variant, each
checked against the float32 reference and timed (do_bench_cudagraph) beside torch.compile of the
same computation in one process.

    TILE_VARIANTS='{"s3": {"stages": 3}, "bn192": {"block_n": 192}}' \
        python benchmarks/tiles_probe.py CASE [CASE ...]   (on a GPU; writes $OUT/tiles-probe.json)
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

VARIANTS = {"default": {}, **json.loads(os.environ.get("TILE_VARIANTS", "{}"))}


def main():
    cases = [c for c in suite.select() if c.name in sys.argv[1:]]
    built = {c.name: suite.build(c) for c in cases}
    base = {c.name: compile_kernel(built[c.name][0], tuned=False) for c in cases}

    def make(job):
        name, var = job
        if not VARIANTS[var]:
            return job, base[name]
        try:
            b = base[name]
            return job, compile_kernel(built[name][0], candidate=b.plan.candidate, tiles={**b.plan.tiles, **VARIANTS[var]})
        except Exception as e:  # a variant that does not compile is a row, not a crash
            return job, e
    with ThreadPoolExecutor(8) as pool:
        kernels = dict(pool.map(make, [(c.name, v) for c in cases for v in VARIANTS]))
    rows = []
    for c in cases:
        g, base_fn = built[c.name]
        inputs = base[c.name].random_inputs(0)
        eager, _ = base_fn(inputs)
        comp = torch.compile(eager)
        comp()
        row = {"case": c.name, "sizes": c.sizes, "candidate": base[c.name].plan.candidate,
               "compile": tt.do_bench_cudagraph(comp, rep=100, return_mode="median")}
        for v in VARIANTS:
            k = kernels[(c.name, v)]
            try:
                if isinstance(k, Exception):
                    raise k
                row[v] = {"ms": k.benchmark(inputs), "ok": k.verify(inputs)["ok"], "tiles": dict(k.plan.tiles)}
            except Exception as e:  # shared memory past the limit, a lowering error: a row too
                row[v] = {"error": str(e)[:150]}
        print(c.name, "compile", round(row["compile"], 4),
              {v: (round(row[v]["ms"], 4), row[v]["ok"], round(row["compile"] / row[v]["ms"], 3))
               if "ms" in row[v] else row[v]["error"][:60] for v in VARIANTS}, flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "variants": VARIANTS, "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), "tiles-probe.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
