"""The GPU campaign's compile half on the CPU (issue 46): the same graphs at the same GPU sizes
(benchmarks/gpu_fuzz.py's families, sizes and seeds), every candidate and the default derived and
emitted, and every kernel lowered by TileLang for sm_90 (leantile.lower.lower_to_cuda) and, with
--nvcc, compiled to a cubin. What it catches: the crash classes that need no GPU (TileLang finds no
layout, a lowering or nvcc error, a derive or emit crash), before device time is spent on them.
Campaign s32 lost a plan to one ("no available layout found" for two sums of a bf16 row held at
5120 on 256 threads), which lowers the same way here. It judges no value: the GPU campaign does.

Each graph is lowered in a pool process (--workers, default the CPU cores); a plan whose lowering
raises is a crash, a DerivationError or GraphError a refusal (as in the GPU campaign). Writes
<out>/lower-fuzz-cpu-<date>[-tag].json (atomically, after every graph): graphs, plans, crash,
refused, the code fingerprint, plans lowered per candidate name (which rules the draws reached), one record
per crash (graph JSON, candidate, kernel, error).

    python3 benchmarks/gpu_fuzz_lower.py --budget-s 600 [--seed N] [--families a,b] [--nvcc] [--tiles stage_loads=1]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "python", ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from gpu_fuzz_parts.families import families, graph_stream  # noqa: E402
from gpu_fuzz_parts.plans import error_text, parse_tiles, plans_of  # noqa: E402
from gpu_fuzz_parts.sizes import DTYPES, Profile  # noqa: E402


def lower_graph(graph_json: dict, nvcc: bool, max_candidates: int, tiles: dict | None = None) -> dict:
    """In a pool process: every plan of the graph emitted and each kernel lowered (and compiled
    with nvcc). {plans, candidates: [name of each plan], refused: [...], crashes: [...]}."""
    import traceback

    from leantile import ir
    from leantile.emit import load_module
    from leantile.lower import compile_cuda, lower_to_cuda

    g = ir.parse(graph_json)
    plans, refused, crashed = plans_of(g, max_candidates, tiles=tiles)
    for p in plans:
        stage, kernel = "build", None
        try:
            mod = load_module(p["source"], f"lower_{p['key']}")
            configs = getattr(mod, "PASS_CONFIGS", {})
            for kernel, f in mod.build_kernel().items():
                stage = "lower"
                cu = lower_to_cuda(f, arch="sm_90", pass_configs=configs.get(kernel))
                if nvcc:
                    stage = "nvcc"
                    compile_cuda(cu, flags=getattr(mod, "NVCC_FLAGS", {}).get(kernel))
        except Exception as e:
            crashed.append({"candidate": p["candidate"], "default": p["default"], "stage": stage,
                            "kernel": kernel, "error": error_text(e), "trace": traceback.format_exc()[-1500:]})
    return {"plans": len(plans), "candidates": [p["candidate"] or "(default)" for p in plans], "refused": refused,
            "crashes": crashed}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=600.0, help="stop drawing new graphs after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", default="", help="comma list (default: all)")
    ap.add_argument("--dtypes", default="f16,bf16,f32,mixed", help=f"comma list of {', '.join(DTYPES)}")
    ap.add_argument("--max-graphs", type=int, default=0)
    ap.add_argument("--max-candidates", type=int, default=0, help="per graph (0: every candidate)")
    ap.add_argument("--workers", type=int, default=0, help="lowering processes (default: the CPU cores)")
    ap.add_argument("--nvcc", action="store_true", help="also compile each kernel to a cubin (nvcc, sm_90a)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--tiles", default="", help="tile parameters every plan is derived with, k=v joined by ',' "
                                                "(a switch not yet shipped: stage_loads=1)")
    a = ap.parse_args(argv)
    from gpu_fuzz_parts.results import code_fingerprint
    from leantile.files import write_atomic

    fams = families()
    if a.families:
        fams = {k: v for k, v in fams.items() if k in a.families.split(",")}
    prof = Profile("cuda", 2 ** 26, 2.0 ** 37)  # the GPU campaign's sizes
    stream = graph_stream(a.seed, fams, a.dtypes.split(","), prof)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"lower-fuzz-cpu-{date.today()}{'-' + a.tag if a.tag else ''}.json"
    rec = {"device": "cpu (lowering for sm_90" + (", nvcc" if a.nvcc else "") + ")", "seed": a.seed, "tiles": parse_tiles(a.tiles),
           "code": code_fingerprint(ROOT / "python" / "leantile"), "families": sorted(fams), "graphs": 0, "plans": 0,
           "crash": 0, "refused": 0, "largest_axis": 0, "failures": [], "by_family": {}, "candidates": {}}
    t0, workers = time.time(), a.workers or os.cpu_count() or 2
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending, drawn = {}, 0

        def submit():
            nonlocal drawn
            fam, g, dtype, _ = next(stream)
            drawn += 1
            gj = g.model_dump(mode="json", by_alias=True)
            pending[pool.submit(lower_graph, gj, a.nvcc, a.max_candidates, parse_tiles(a.tiles))] = (fam, g, dtype, gj)
        while len(pending) < 2 * workers and time.time() - t0 < a.budget_s and (not a.max_graphs or drawn < a.max_graphs):
            submit()
        while pending:
            done = next(as_completed(pending))
            fam, g, dtype, gj = pending.pop(done)
            try:
                r = done.result()
            except Exception as e:  # the worker died: a crash of the whole graph
                r = {"plans": 0, "refused": [], "crashes": [{"candidate": None, "stage": "worker", "error": error_text(e)}]}
            fc = rec["by_family"].setdefault(fam, {"graphs": 0, "plans": 0, "crash": 0, "refused": 0})
            for d in (rec, fc):
                d["graphs"] += 1
                d["plans"] += r["plans"]
                d["crash"] += len(r["crashes"])
                d["refused"] += len(r["refused"])
            rec["largest_axis"] = max(rec["largest_axis"], *g.axes.values())
            for name in r.get("candidates", ()):  # plans lowered per candidate: which rules the draws reached
                rec["candidates"][name] = rec["candidates"].get(name, 0) + 1
            for c in r["crashes"]:
                rec["failures"].append({"family": fam, "dtype": dtype, "sizes": dict(g.axes), **c, "graph": gj})
            sizes = " ".join(f"{k}={v}" for k, v in g.axes.items())
            print(f"[{rec['graphs']:4d} {time.time() - t0:6.0f}s] {fam:22s} {dtype:5s} {sizes[:50]:50s} "
                  f"{r['plans']} plans, {len(r['crashes'])} crash", flush=True)
            rec["elapsed_s"] = round(time.time() - t0, 1)
            write_atomic(dest, json.dumps(rec, indent=1, default=str) + "\n")
            if time.time() - t0 < a.budget_s and (not a.max_graphs or drawn < a.max_graphs):
                submit()
    print(f"\n{rec['graphs']} graphs, {rec['plans']} plans lowered: {rec['crash']} crash, {rec['refused']} refused; "
          f"largest axis {rec['largest_axis']} ({rec['elapsed_s']} s, {workers} processes)\n-> {dest}")
    return 1 if rec["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
