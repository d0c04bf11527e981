"""GPU check of generated mixed-dtype graphs (tests/gpu/test_generated_half_gpu.py's draws), with
each failure printed in full: which graph, candidate, inputs' dtypes, and what failed.

    python benchmarks/archive/mixed_dtype_failures/mixed_dtype_probe.py [OUT.json]   (on the device; PYTHONPATH has python/ and tests/)
"""
import json
import logging
import sys

sys.path.insert(0, "tests/gpu")
logging.disable(logging.INFO)

import test_generated_half_gpu as t  # noqa: E402
from gpu_checks import verify_all  # noqa: E402
from leantile.derive import candidates  # noqa: E402

graphs = [g.model_copy(update={"name": f"{g.name}_{i}"}) for i, g in enumerate(t._drawn(t.mixed_graphs))]
jobs = [(g, c.name) for g in graphs for c in candidates(g)]
bad = verify_all(jobs)
by_name = {g.name: g for g in graphs}
rows = [{"graph": name, "candidate": cand, "what": str(what)} for name, cand, what in bad]
print(f"{len(graphs)} graphs, {len(jobs)} plans, {len(bad)} failures")
for r in rows:
    print(r)
if len(sys.argv) > 1:
    json.dump({"graphs": len(graphs), "plans": len(jobs), "failures": rows,
               "failed_graphs": [by_name[r["graph"]].model_dump(mode="json", by_alias=True) for r in rows
                                 if r["graph"] in by_name]}, open(sys.argv[1], "w"), indent=1)
