"""The GPU differential campaign (issue 46): the soundness generators' graphs (tests/strategies.py's
families, tests/soundness_graphs.py's CLASSES, the losses of tests/loss_graphs.py, long reductions
into 0-d outputs) resized to GPU sizes and compiled with `leantile.compile`, every candidate and
the default plan, f16 / bf16 / f32 (and mixed), each run on fresh random inputs and judged
against a FLOAT64 reference (leantile.reference at compute_dtype float64, not the interpreter) by
leantile.tolerance, as `Kernel.verify` judges (`Kernel.judge`: rel_err beyond the unfused graph's
own rounding, output_tolerances, ill_conditioned).

Sizes cross every place a plan changes shape: one or two axes per graph (reduced and contracted
axes first) take a long length (powers of two up to 2^17, 2^k +- 1, primes, n * block +- 1 for
n in 1, 2, 31, 32, 33 and blocks 64 .. 1024), the others short ones (1 included); then axes
shrink until every tensor has at most --max-elements elements and every GEMM at most --max-flops.
Each graph runs at the natural input scale (reference.natural_scale) and, where the graph's value
stays finite and representable at every node it rounds (outputs, casts, GEMM operands), at a
large one (f16 8, bf16 / f32 32): a stored intermediate that overflows shows there; graphs of
bf16 / f32 inputs only also at a huge one (2^14: scores past 2^60, where a kernel's own rounding
of a shift can overflow its exponent).

Outcomes per plan: `ok`; `mismatch` (an output wrong where the inputs can judge it: not
ill-conditioned, at any of three draws); `crash` (any exception in derive, emit, compile or run
other than a clean refusal; a CUDA fault or a hang included); `refused` (DerivationError, or a
GraphError for tiles that do not fit the target: not failures); `unjudged` (every draw
ill-conditioned); `skipped` (out of memory: the campaign's sizes, not the kernel).

Processes: this one draws graphs and derives plans (no CUDA); a pool (--workers, the CPU cores
but a few) compiles every distinct kernel once into TileLang's disk cache, one kernel a job
(nvcc is the cost: 90% of the campaign's process seconds, ~19 s a plan with --skip-unfused
off on the H200's 16 cores, 2026-11-29; candidates of one graph share a third of their kernels,
compiled once); GPU worker processes (--gpu-workers, two per
GPU) compile again (a cache hit), run and judge, graph by graph. A worker that faults or hangs
is restarted and the graph goes on from its next plan; its output is in a log file named at
the start.

    python3 benchmarks/gpu_fuzz.py --budget-s 420                 # on the GPU, one 10-minute call
    python3 benchmarks/gpu_fuzz.py --budget-s 420 --resume        # the next call adds to the same file
    python3 benchmarks/gpu_fuzz.py --device cpu --max-graphs 5    # dry run: the interpreter, tiny sizes

Writes <out>/gpu-fuzz-<gpu>-<date>.json (atomically, after every graph): gpu, graphs, plans,
mismatch, crash, largest_axis, per-family counts, one record per failure (graph JSON, candidate,
tiles, dtype, sizes, outputs with rel err and tolerance, error text), the graphs run; prints a
line per graph and a table per family.

The parts live in benchmarks/gpu_fuzz_parts/ (sizes, families, plans, judge, worker, results);
this file is the command line and the main loop.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from collections import deque
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from gpu_fuzz_parts.families import families, graph_key, graph_stream  # noqa: E402
from gpu_fuzz_parts.plans import kernel_digests, parse_tiles, plans_of, precompile  # noqa: E402
from gpu_fuzz_parts.results import Results, code_fingerprint, slug, table  # noqa: E402
from gpu_fuzz_parts.sizes import DTYPES, Profile  # noqa: E402
from gpu_fuzz_parts.worker import Worker, init_compile_process, log_tail  # noqa: E402

# tests/cpu/test_gpu_fuzz.py reaches these through this module: kept importable from here
from gpu_fuzz_parts.sizes import long_lengths, resize  # noqa: E402, F401


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop drawing new graphs after this many seconds")
    ap.add_argument("--drain-s", type=float, default=90.0,
                    help="after the budget, finish graphs already drawn for at most this long, then write and stop")
    ap.add_argument("--seed", type=int, default=None, help="the graph sequence (default 0, or the resumed file's)")
    ap.add_argument("--max-graphs", type=int, default=0, help="draw at most this many graphs (0: the budget decides)")
    ap.add_argument("--dtypes", default="f16,bf16,f32,mixed", help=f"comma list of {', '.join(DTYPES)}")
    ap.add_argument("--families", default="", help="comma list (default: all); see --list-families")
    ap.add_argument("--list-families", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--tag", default="", help="appended to the file name")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run on the interpreter at tiny sizes (no compile pool)")
    ap.add_argument("--workers", type=int, default=0,
                    help="compile processes (default: CPU cores - 2 - GPU workers; none on cpu unless given: a dry run "
                         "of the compile pool's bookkeeping, its nvcc failing without a GPU)")
    ap.add_argument("--gpu-workers", type=int, default=0,
                    help="processes running and judging plans (default: 2 per GPU, spread over the GPUs; 1 on cpu)")
    ap.add_argument("--max-elements", type=int, default=0, help="per tensor (default 2^26; 2^11 on cpu)")
    ap.add_argument("--max-flops", type=float, default=0, help="per GEMM (default 2^37; 2^16 on cpu)")
    ap.add_argument("--max-candidates", type=int, default=0, help="per graph (0: every candidate)")
    ap.add_argument("--tiles", default="", help="tile parameters every plan is derived with, k=v joined by ',' "
                                                "(a switch not yet shipped: stage_loads=1)")
    ap.add_argument("--skip-unfused", action="store_true",
                    help="leave out the unfused fallback where a fused candidate exists (its many kernels are most of "
                         "the nvcc time; it ships only where nothing else derives)")
    ap.add_argument("--no-large", action="store_true", help="no large-magnitude draws")
    ap.add_argument("--plan-timeout-s", type=float, default=300.0,
                    help="a plan silent this long is a crash (hang); its worker is restarted")
    ap.add_argument("--new-code", action="store_true",
                    help="--resume a file written by other compiler code (its counts then mix two versions)")
    ap.add_argument("--resume", nargs="?", const="latest", default=None,
                    help="add to a results file (default: the latest gpu-fuzz-<gpu>-*.json in --out), skipping its graphs")
    a = ap.parse_args(argv)

    import multiprocessing as mp

    dtypes = [d for d in a.dtypes.split(",") if d]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        ap.error(f"--dtypes: {bad or 'none'}; choose from {', '.join(DTYPES)}")
    fams = families()
    if a.list_families:
        print("\n".join(sorted(fams)))
        return 0
    if a.families:
        want = [f for f in a.families.split(",") if f]
        unknown = [f for f in want if f not in fams]
        if unknown:
            ap.error(f"--families: unknown {unknown}; families: {', '.join(sorted(fams))}")
        fams = {f: fams[f] for f in want}
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("gpu_fuzz: no CUDA GPU here; --device cpu runs the dry run on the interpreter", file=sys.stderr)
            return 2
    cpu = a.device == "cpu"
    prof = Profile(a.device, a.max_elements or (2 ** 11 if cpu else 2 ** 26), a.max_flops or (2.0 ** 16 if cpu else 2.0 ** 37))
    ctx = mp.get_context("spawn")
    t_start = time.time()
    n_gpus = 1
    if not cpu:
        import torch
        n_gpus = max(1, torch.cuda.device_count())
    n_workers = a.gpu_workers or (1 if cpu else 2 * n_gpus)
    import tempfile
    logs = Path(tempfile.gettempdir()) / f"gpu_fuzz_logs_{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    workers = [Worker(ctx, a.device, i, str(logs / f"worker-{i}.log")) for i in range(n_workers)]
    for w in workers:
        w.wait_ready()
    gpu = workers[0].gpu
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    old, path = None, None
    if a.resume:
        if a.resume == "latest":
            found = list(out_dir.glob(f"gpu-fuzz-{slug(gpu)}-*.json"))
            path = max(found, key=lambda f: f.stat().st_mtime) if found else None
        else:
            path = Path(a.resume)
        if path is not None and path.exists():
            old = json.loads(path.read_text())
            print(f"resuming {path}: {old.get('graphs')} graphs, {old.get('plans')} plans done", flush=True)
    if path is None:
        path = out_dir / f"gpu-fuzz-{slug(gpu)}-{date.today().isoformat()}{'-' + a.tag if a.tag else ''}.json"
    code = code_fingerprint(ROOT / "python" / "leantile")
    if old is not None and old.get("code") != code and not a.new_code:
        print(f"gpu_fuzz: {path} was written by compiler code {old.get('code')}, this is {code}: its plans and "
              f"these would count as one version; start a new file (no --resume) or pass --new-code", file=sys.stderr)
        for w in workers:
            w.kill()
        return 2
    seed = a.seed if a.seed is not None else int((old or {}).get("seed", 0))
    versions = dict(workers[0].versions)
    try:
        from leantile import __version__
        versions["leantile"] = __version__
    except Exception:
        pass
    meta = {"gpu": gpu, "gpu_slug": slug(gpu), "code": code, "gpus": n_gpus, "device": a.device, "date": date.today().isoformat(),
            "seed": seed, "versions": versions, "options": {k: v for k, v in vars(a).items() if k not in ("resume",)},
            "families": sorted(fams), "dtypes": dtypes, "max_elements": prof.max_elements, "max_flops": prof.max_flops}
    res = Results(path, meta, old)
    n_compile = a.workers or max(1, (os.cpu_count() or 2) - 2 - n_workers)
    pool = None
    if not cpu or a.workers:
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(max_workers=n_compile, mp_context=ctx, initializer=init_compile_process, initargs=(n_gpus,))
    print(f"gpu_fuzz on {n_gpus} x {gpu}: seed {seed}, budget {a.budget_s:.0f} s (+{a.drain_s:.0f} s drain), "
          f"{n_compile if pool else 0} compile processes, {n_workers} GPU workers, families {', '.join(sorted(fams))}, "
          f"dtypes {', '.join(dtypes)}, <= {prof.max_elements} elements per tensor -> {path}; "
          f"GPU workers' output in {logs}", flush=True)

    stream = graph_stream(seed, fams, dtypes, prof)
    compiling: dict[int, dict] = {}  # gid -> job waiting on its compiles
    ready: deque = deque()
    drawn, gid_next, restarts, exhausted = 0, 0, 0, False
    seen_keys = set(res.done)
    compile_s = []
    # where the campaign's time goes (the next run's tuning: more compile processes, more GPU
    # workers, or a faster derive): seconds summed over plans, and GPU-worker seconds idle
    stages = {"derive_emit_s": 0.0, "digest_s": 0.0, "precompile_s": 0.0, "worker_compile_s": 0.0, "worker_run_s": 0.0,
              "gpu_workers_idle_s": 0.0}

    def elapsed():
        return time.time() - t_start

    kernel_jobs: dict = {}  # kernel digest -> its compile's future, shared by every plan with that kernel
    counted: set = set()  # futures whose seconds are in stages already

    def outstanding():
        return len({id(f) for j in compiling.values() for f in j["futures"].values() if not f.done()})

    def submit(job, p):
        try:
            digests = kernel_digests(p["source"])
        except Exception:  # a module that does not build: its kernels compiled apart (the worker says why)
            digests = {name: f"{p['key']}/{name}" for name in p["kernels"]}
        for name, d in digests.items():
            if d not in kernel_jobs:
                kernel_jobs[d] = pool.submit(precompile, p["source"], name)
            job["futures"][(p["key"], name)] = kernel_jobs[d]

    def draw_next():
        nonlocal drawn, gid_next, exhausted
        for fam, g, dtype, extra in stream:
            key = graph_key(g)
            if key in seen_keys:
                continue
            seen_keys.add(key)
            t0 = time.time()
            plans, refused, crashed = plans_of(g, a.max_candidates, a.skip_unfused, parse_tiles(a.tiles))
            stages["derive_emit_s"] += time.time() - t0
            job = {"gid": gid_next, "key": key, "family": fam, "name": g.name, "dtype": dtype, "sizes": dict(g.axes),
                   "graph": g.to_json(), "extra": extra, "seed": int(key[:8], 16),
                   "large": not a.no_large, "plans": plans, "refused": refused, "crashed": crashed, "statuses": {},
                   "futures": {}, "start": 0, "running": None, "reported": set(), "draws": {}}
            gid_next += 1
            drawn += 1
            if pool is not None:
                t0 = time.time()
                for p in plans:
                    submit(job, p)
                stages["digest_s"] += time.time() - t0
            compiling[job["gid"]] = job
            return True
        exhausted = True
        return False

    def send(w, job):
        msg = {k: job[k] for k in ("gid", "graph", "extra", "seed", "large", "start")}
        msg["tiles"] = parse_tiles(a.tiles)
        msg["plans"] = [{k: p[k] for k in ("candidate", "default", "key")} for p in job["plans"]]
        w.inq.put(msg)
        w.job, w.last = job, time.time()
        job["running"] = None

    def finish(job, info):
        fam = job["family"]
        for c in job["crashed"]:
            res.failure(job, {"candidate": c["candidate"]}, {"kind": "crash", **c})
        res.add_graph(job, job["statuses"], {**info, "draws": {**job["draws"], **info.get("draws", {})}})
        sts = list(job["statuses"].values())
        line = (f"[{len(res.runs):5d} {elapsed():7.1f}s] {fam:<22} {job['dtype']:<5} "
                f"{' '.join(f'{k}={v}' for k, v in job['sizes'].items())[:70]:<70} | {len(sts)} plans: "
                + ", ".join(f"{n} {s}" for s, n in sorted({s: sts.count(s) for s in set(sts)}.items()))
                + (f"; refused {len(job['refused'])}" if job["refused"] else "")
                + (f"; derive crash {len(job['crashed'])}" if job["crashed"] else "")
                + (f"; graph skipped: {info['error'][:120]}" if info.get("error") else ""))
        print(line, flush=True)
        res.write(elapsed())

    def on_plan(job, i, rec):
        job["reported"].add(i)
        job["draws"].update(rec.get("draws") or {})
        p = job["plans"][i]
        job["statuses"][p["candidate"] if p["candidate"] is not None else "(default)"] = rec["status"]
        plan = {**p, **{k: rec.get(k) for k in ("tiles", "plan_candidate")}}
        plan.pop("source", None)
        for f in rec.get("failures", []):
            if f["kind"] in ("mismatch", "crash"):
                res.failure(job, plan, f)
                what = (f"{f.get('output')} rel err {f['outputs'][f['output']]['rel_err']} > {f['outputs'][f['output']]['tolerance']}"
                        if f["kind"] == "mismatch" else f.get("error", "")[:200])
                print(f"    {f['kind'].upper()} {job['family']}/{job['name']} {job['dtype']} candidate "
                      f"{p['candidate'] or '(default)'} draw {f.get('draw', '-')}: {what}", flush=True)
        if rec["status"] == "crash" and not any(f["kind"] == "crash" for f in rec.get("failures", [])):
            res.failure(job, plan, {"kind": "crash", "stage": rec.get("stage"), "error": rec.get("error"),
                                    "trace": rec.get("trace")})
            print(f"    CRASH {job['family']}/{job['name']} {job['dtype']} candidate {p['candidate'] or '(default)'}: "
                  f"{(rec.get('error') or '')[:200]}", flush=True)
        if rec.get("compile_s") is not None:
            compile_s.append(rec["compile_s"])
            stages["worker_compile_s"] += rec["compile_s"]
        stages["worker_run_s"] += rec.get("run_s") or 0.0

    def restart(k: int, why: str):
        nonlocal restarts
        w = workers[k]
        job = w.job
        w.kill()
        restarts += 1
        i = job["running"]
        if i is not None and i not in job["reported"]:
            on_plan(job, i, {"status": "crash", "stage": "run", "error": why, "trace": log_tail(w.log)})
        print(f"    GPU worker {k} restarted ({why}); graph {job['name']} goes on from plan {(i or 0) + 1}", flush=True)
        workers[k] = Worker(ctx, a.device, w.index, w.log)
        workers[k].wait_ready()
        for other in workers:  # their words waited in their queues meanwhile: no hang of theirs
            other.last = max(other.last, time.time())
        if i is None:  # it died before any plan of this graph: the graph is skipped
            finish(job, {"error": f"GPU worker died before its first plan: {why}"})
            return
        job["start"] = i + 1
        if job["start"] < len(job["plans"]):
            send(workers[k], job)
        else:
            finish(job, {"error": None})

    hard_end = a.budget_s + a.drain_s
    tick = time.time()
    try:
        while restarts <= 20:
            now = time.time()
            stages["gpu_workers_idle_s"] += (now - tick) * sum(w.job is None for w in workers)
            tick = now
            drawing = elapsed() < a.budget_s and not exhausted and (not a.max_graphs or drawn < a.max_graphs)
            while drawing and (outstanding() < 2 * n_compile if pool else len(compiling) + len(ready) < 2 * n_workers):
                if not draw_next():
                    break
                drawing = not a.max_graphs or drawn < a.max_graphs
            for gid in [gid for gid, j in compiling.items() if all(f.done() for f in j["futures"].values())]:
                job = compiling.pop(gid)
                for p in job["plans"]:
                    done = [f.result() for (key, _), f in job["futures"].items() if key == p["key"]]
                    if done:
                        p["precompile_s"] = round(sum(secs for _, secs in done), 2)
                        p["precompile_error"] = next((err for err, _ in done if err), None)
                for f in job["futures"].values():
                    if id(f) not in counted:
                        counted.add(id(f))
                        stages["precompile_s"] += f.result()[1]
                job["futures"] = {}
                if job["plans"]:
                    ready.append(job)
                else:
                    finish(job, {"error": None})
            for w in workers:
                if w.job is None and ready:
                    send(w, ready.popleft())
            busy = [w for w in workers if w.job is not None]
            if not busy and not ready and not compiling and not drawing:
                break
            if elapsed() >= hard_end:
                print(f"drain over at {elapsed():.0f} s: {len(compiling)} graphs compiling, {len(ready)} ready and "
                      f"{len(busy)} at the GPU workers are left for a --resume run", flush=True)
                break
            heard = False
            for k, w in enumerate(workers):
                if w.job is None:
                    continue
                try:
                    msg = w.outq.get_nowait()
                except queue.Empty:
                    if not w.proc.is_alive():
                        restart(k, f"worker exited with code {w.proc.exitcode}")
                    elif time.time() - w.last > a.plan_timeout_s:
                        restart(k, f"no word for {a.plan_timeout_s:.0f} s (a hang)")
                    continue
                heard, w.last = True, time.time()
                if msg[0] == "start":
                    w.job["running"] = msg[2]
                elif msg[0] == "plan":
                    on_plan(w.job, msg[2], msg[3])
                elif msg[0] == "done":
                    job, w.job = w.job, None
                    finish(job, msg[2])
            if not heard:
                time.sleep(0.05)
        else:
            print("gpu_fuzz: more than 20 GPU worker restarts; stopping", flush=True)
    except KeyboardInterrupt:
        print("interrupted: writing what was judged", flush=True)
    finally:
        res.meta["stage_seconds"] = {k: round(v, 1) for k, v in stages.items()}
        res.write(elapsed(), final=True)
        if pool is not None:  # nvcc of graphs left over: ended now, workers first (process_pool.stop_now); a
            # shutdown before the kill left the executor's thread waiting on them, and the interpreter's
            # exit on that thread: campaigns s112 and s113 hung after their summary until their timeout
            from leantile.process_pool import stop_now
            stop_now(pool)
        for w in workers:
            try:
                w.inq.put(None)
                w.proc.join(timeout=5)
            finally:
                w.kill()
    print()
    print(table(res.counts))
    t = res.totals()
    print(f"\n{t['graphs']} graphs, {t['plans']} plans: {t['mismatch']} mismatch, {t['crash']} crash, "
          f"{t['unjudged']} unjudged, {t['refused']} refused; largest axis {res.largest}; "
          f"{t['graphs_axis_ge_65536']} graphs with an axis >= 65536; {t['large_draws']} large-magnitude and {t['huge_draws']} huge draws judged"
          + (f"; median compile (worker) {sorted(compile_s)[len(compile_s) // 2]:.2f} s" if compile_s else "")
          + f"\nseconds: {', '.join(f'{k} {v:.0f}' for k, v in stages.items())} "
          f"({n_compile if pool else 0} compile processes, {n_workers} GPU workers, {elapsed():.0f} s wall)"
          + f"\n-> {path}", flush=True)
    return 1 if t["mismatch"] or t["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
