"""How many emitted kernels TileLang 0.1.15 would miscompile without leantile.codegen_repair.

Lowers every candidate of every graph given (default: exports/*.json) to CUDA C for sm_90 twice,
without and with the repairs, and counts the kernels whose raw source reads a stale cached vector
load (codegen_repair.stale_ssa_uses) or releases a TMA pipeline stage with no proxy fence
(codegen_repair.unfenced_releases: a race wherever the consumer reads the stage with ordinary
loads; see benchmarks/stage_release_fence/), and the kernels whose repaired source still does
(must be 0). CPU only. Writes JSON (--out) and prints a table.

    PYTHONPATH=python python3 benchmarks/stale_ssa_repair/stale_ssa_survey.py [graph.json ...] [--out FILE]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

from leantile import codegen_repair, ir  # noqa: E402
from leantile.derive import DerivationError, derive  # noqa: E402
from leantile.derive.engine import candidates  # noqa: E402
from leantile.emit import emit_module  # noqa: E402
from leantile.lower import lower_to_cuda  # noqa: E402
from leantile.runtime import emitted_module  # noqa: E402


def survey(graphs: list[ir.Graph]) -> dict:
    rows = []
    for g in graphs:
        for c in candidates(g):
            try:
                plan = derive(g, c.name)
            except DerivationError:
                continue
            mod = emitted_module(emit_module(plan))
            for name, f in mod.build_kernel(pdl=True).items():
                cfg = mod.PASS_CONFIGS.get(name)
                try:
                    raw = lower_to_cuda(f, pass_configs=cfg, repair=False)
                    fixed = lower_to_cuda(f, pass_configs=cfg)
                except Exception as e:  # noqa: BLE001  (a lowering failure is reported, not fatal)
                    rows.append({"graph": g.name, "candidate": c.name, "kernel": name, "error": str(e)[-300:]})
                    continue
                rows.append({"graph": g.name, "candidate": c.name, "kernel": name,
                             "raw_stale": len(codegen_repair.stale_ssa_uses(raw)),
                             "repaired_stale": len(codegen_repair.stale_ssa_uses(fixed)),
                             "refreshes": fixed.count("leantile: refresh"),
                             "raw_unfenced": len(codegen_repair.unfenced_releases(raw)),
                             "repaired_unfenced": len(codegen_repair.unfenced_releases(fixed))})
                r = rows[-1]
                print(f"{g.name:28s} {c.name:34s} {name:14s} stale raw {r['raw_stale']:3d} repaired {r['repaired_stale']} "
                      f"refreshes {r['refreshes']}; unfenced releases raw {r['raw_unfenced']} repaired {r['repaired_unfenced']}", flush=True)
    ok = [r for r in rows if "error" not in r]
    return {"kernels": len(ok), "raw_stale_kernels": sum(r["raw_stale"] > 0 for r in ok),
            "repaired_stale_kernels": sum(r["repaired_stale"] > 0 for r in ok),
            "raw_unfenced_kernels": sum(r["raw_unfenced"] > 0 for r in ok),
            "repaired_unfenced_kernels": sum(r["repaired_unfenced"] > 0 for r in ok),
            "lowering_errors": len(rows) - len(ok), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    paths = a.graphs or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "exports", "*.json")))
    graphs = [ir.load(p) for p in paths]
    t0 = time.time()
    res = survey(graphs)
    res["seconds"] = round(time.time() - t0, 1)
    print(f"\n{res['kernels']} kernels lowered: {res['raw_stale_kernels']} read a stale cached load without "
          f"the repair, {res['repaired_stale_kernels']} with it; {res['raw_unfenced_kernels']} release a TMA stage "
          f"unfenced without it, {res['repaired_unfenced_kernels']} with it; {res['lowering_errors']} lowering errors")
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
