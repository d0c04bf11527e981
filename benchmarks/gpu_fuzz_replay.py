"""Replay the failures of a GPU differential campaign (benchmarks/gpu_fuzz.py) at the current code:
each failing (graph, dtype, candidate) compiled again and judged on the same seeded draws, by the
campaign's own worker code (gpu_fuzz_parts.judge.run_graph), so a fix is confirmed on exactly the
cases that failed without drawing the whole campaign again.

    python3 benchmarks/gpu_fuzz_replay.py benchmarks/results/gpu-fuzz-<gpu>-<date>.json [--out FILE]

A pool compiles every plan first (nvcc into TileLang's disk cache); then one GPU worker process
per graph runs and judges (a fault that kills the CUDA context ends that process only). Prints a
line per replayed plan and a summary (was -> now); writes JSON with --out (atomically).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from gpu_fuzz_parts.plans import error_text, precompile_all  # noqa: E402
from gpu_fuzz_parts.worker import Worker, init_compile_process  # noqa: E402


def jobs_of(failures: list) -> list[dict]:
    """One job per failing graph (its JSON and the campaign's seed): the failing candidates."""
    from leantile import ir
    from leantile.cost import choose
    from leantile.derive import derive
    from leantile.emit import emit_module

    jobs: dict[str, dict] = {}
    for f in failures:
        gj = json.dumps(f["graph"], sort_keys=True)
        seed = f.get("seed", 0) - (1 if f.get("draw") == "large" and "seed" in f else 0)
        job = jobs.setdefault(gj, {"gid": len(jobs), "graph": f["graph"], "family": f["family"], "dtype": f["dtype"],
                                   "sizes": f["sizes"], "seed": seed, "extra": f.get("extra") or {}, "large": True, "start": 0,
                                   "plans": [], "was": {}, "sources": {}})
        cand = f.get("candidate")
        if any(p["candidate"] == cand for p in job["plans"]):
            continue
        job["was"][cand] = f"{f['kind']}" + (f" ({f.get('stage')})" if f.get("stage") else "")
        g = ir.parse(f["graph"])
        try:
            src = emit_module(choose(g)[0] if cand is None else derive(g, cand))
        except Exception as e:  # refused or crashing now: reported as such, nothing to run
            job["was"][cand] += f" -> now at derive: {error_text(e)[:200]}"
            continue
        key = hashlib.sha256(src.encode()).hexdigest()[:16]
        job["plans"].append({"candidate": cand, "default": cand is None, "key": key})
        job["sources"][key] = src
    return list(jobs.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--out", default=None)
    ap.add_argument("--workers", type=int, default=0, help="compile processes (default: CPU cores - 2)")
    ap.add_argument("--plan-timeout-s", type=float, default=240.0)
    a = ap.parse_args(argv)
    import multiprocessing as mp

    t0 = time.time()
    failures = json.load(open(a.results))["failures"]
    jobs = jobs_of(failures)
    sources = {k: s for j in jobs for k, s in j["sources"].items()}
    print(f"{len(failures)} failure records -> {len(jobs)} graphs, {len(sources)} distinct plans", flush=True)
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max(1, a.workers or (os.cpu_count() or 4) - 2), mp_context=ctx,
                             initializer=init_compile_process, initargs=(1,)) as pool:
        compiled = dict(zip(sources, pool.map(precompile_all, sources.values())))
    print(f"compiled in {time.time() - t0:.0f} s; {sum(1 for e, _ in compiled.values() if e)} failed to compile",
          flush=True)
    rows = []
    w, gpu = None, None

    def write():  # after every graph: a call cut short still leaves what it replayed
        if not a.out:
            return
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"gpu": gpu, "from": os.path.basename(a.results), "summary": Counter(r["now"] for r in rows),
                       "rows": rows}, f, indent=1)
        os.replace(tmp, a.out)

    for job in jobs:
        if w is None:
            w = Worker(ctx, "cuda", 0)
            w.wait_ready()
            gpu = w.gpu
        msg_job = {k: job[k] for k in ("gid", "graph", "extra", "seed", "large", "start", "plans")}
        w.inq.put(msg_job)
        got, deadline = {}, time.time() + a.plan_timeout_s * max(1, len(job["plans"]))
        while time.time() < deadline:
            try:
                msg = w.outq.get(timeout=5)
            except Exception:
                if not w.proc.is_alive():
                    break
                continue
            if msg[0] == "plan":
                got[msg[2]] = msg[3]
            elif msg[0] == "done":
                break
        if not w.proc.is_alive() or len(got) < len(job["plans"]):
            w.kill()
            w = None
        for i, p in enumerate(job["plans"]):
            rec = got.get(i, {"status": "crash", "error": "worker died or timed out"})
            fails = rec.get("failures") or []
            detail = "; ".join(f"{x.get('kind')} {x.get('draw', '')} {x.get('output', '')} "
                               f"{x.get('rel_err', '')} {x.get('error', '')[:120]}" for x in fails)
            row = {"family": job["family"], "dtype": job["dtype"], "sizes": job["sizes"], "candidate": p["candidate"],
                   "was": job["was"][p["candidate"]], "now": rec.get("status"), "detail": detail or rec.get("error", "")}
            rows.append(row)
            print(f"{row['family']:<22} {row['dtype']:<5} {str(row['candidate']):<30} was {row['was'][:40]:<40} "
                  f"now {row['now']}  {row['detail'][:160]}", flush=True)
        for cand, was in job["was"].items():
            if " -> now at derive" in was:
                rows.append({"family": job["family"], "dtype": job["dtype"], "sizes": job["sizes"],
                             "candidate": cand, "was": was.split(" -> ")[0], "now": "refused",
                             "detail": was.split(" -> now at derive: ")[1]})
        write()
    if w is not None:
        w.kill()
    write()
    print(f"\nreplayed {len(rows)} failing plans in {time.time() - t0:.0f} s: "
          f"{dict(Counter(r['now'] for r in rows))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
