"""`leantile kernels [SOURCE ...] [--out build/kernels] [--size k=v ...] [--nvcc]`: for each
built-in (or the given sources: a built-in name, file.json, module.py:function), derive
every candidate, emit <out>/<arch>/<candidate>.py (TileLang), lower each kernel to CUDA C
for sm_90 (<candidate>.cu next to it), and write <out>/index.json describing all of them.

One output folder, published whole: --out is checked first (a file, a path under a file, a
read-only folder or NUL are one line of bad input), the complete new folder is built in a
hidden stage beside it (`.<out>.<pid>-<start>.<random>.tmp`, see leantile.files) and replaces
--out in one rename. So a kill at any moment leaves the old folder or the new one, never new
modules beside an old index.json; the stage a killed run leaves is removed by the next run.
The new folder REPLACES the old one wholesale (modules of sources not given this time are
gone, as index.json only ever lists this run's). An --out that has files but no index.json
of this command's (a JSON object with "candidates") was not written by it: it is refused,
never deleted. Every path is built with leantile.files.under, so no graph or candidate name
can place a file outside the stage.

Runs without a GPU. Without tilelang the TileLang modules are still written and the index
says the lowering was skipped. A candidate that fails to lower is recorded in the index with
its error, and the command exits with status 1 after writing everything else.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .. import architectures, ir
from ..files import UnsafePath, check_out_dir, check_replaceable, discard, make_stage, publish, under, write_atomic
from ..sources import load_source, parse_sizes
from ..plan import launches
from ..target import DEFAULT
from ..progress import progress
from .options import add_out, add_size, add_sources


def _tilelang_available() -> bool:
    try:
        import tilelang  # noqa: F401
    except Exception:
        return False
    return True


MARKER = ("index.json", "candidates")  # a folder this command wrote (and may replace): its index


def build_kernels(sources: list[str], out: Path, sizes: dict | None = None, nvcc: bool = False,
                  arch: str = DEFAULT.arch, log=print, flag: str = "--out") -> dict:
    """Do the work of `leantile kernels`; return the index (also written to out/index.json)."""
    out_path = check_out_dir(out, flag)
    graphs = [load_source(s, sizes) for s in sources]  # every source parses before anything is written
    names = [g.name for g in graphs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ir.GraphError([f"kernels: two sources build a graph named {dup[0]!r}; each writes <out>/<name>/"])
    for s, g in zip(sources, graphs):  # ir makes names identifiers; a name that is not is refused here too
        try:
            under(out_path, g.name)
        except UnsafePath:
            raise ir.GraphError([f"{s}: graph name {g.name!r} cannot be a folder name inside {flag}"]) from None
    stage = make_stage(out_path, flag)
    try:
        index = _build_into(graphs, stage, nvcc, arch, log)
        check_replaceable(out_path, *MARKER, flag, "kernels")
        publish(stage, out_path)
    finally:
        discard(stage)
    log(f"wrote {Path(out) / 'index.json'} ({len(index['candidates'])} candidates)")
    return index


def _build_into(graphs, out: Path, nvcc: bool, arch: str, log) -> dict:
    from ..derive import candidates, derive, replay
    from ..emit import emit_plan_to_dir

    can_lower = _tilelang_available()
    if not can_lower:
        log("kernels: tilelang is not installed: writing TileLang modules only (no lowering)")
    from ..tuned import load_tuned, shipped_plan

    jobs = []  # (index entry, plan, module path): emitted here, lowered below
    for g in progress(graphs, "kernels"):
        if g.derivation:  # an export carries its derivation (Lean's): it must replay
            replay(g, g.derivation)
        # the best (candidate, tiles) measured for this shape on a real GPU, if any
        best = load_tuned(g.name, g.axes, g.inputs()[0].dtype if g.inputs() else "f16")
        default = shipped_plan(g, tuned=False)[0].candidate  # what compile runs without a tuned entry
        for c in candidates(g):
            tuned = best is not None and best[0] == c.name
            plan = derive(g, c.name, best[1] if tuned else None)
            t0 = time.perf_counter()
            path = emit_plan_to_dir(plan, under(out, g.name))
            entry = {
                "arch": g.name, "candidate": c.name, "summary": c.summary,
                "steps": [s.model_dump(mode="json") for s in c.steps],
                "axes": dict(plan.axes), "tiles": dict(plan.tiles),
                "module": str(path.relative_to(out)),
                "kernels": [{"name": k.name, "role": k.role, **({"tail_of": k.tail_of} if k.tail_of else {})} for k in plan.kernels],
                "exported": bool(g.derivation) and tuple(c.steps) == tuple(g.derivation),
                "tuned": tuned,  # tiles of the tuned lookup (user folder, then shipped): what compile() runs
                "default": c.name == default,  # tuned.shipped_plan's pick: compile() where no entry is tuned
                "lowered": None, "cuda": None, "error": None, "seconds": time.perf_counter() - t0,
            }
            jobs.append((entry, plan, path))
    entries = []

    def record(i: int, res: dict) -> None:
        entry, plan, _ = jobs[i]
        entry.update(res, seconds=round(entry["seconds"] + res.get("seconds", 0.0), 2))
        status = {True: "ok", False: "FAILED", None: "emitted"}[entry["lowered"]]
        log(f"{plan.graph}/{plan.candidate}: {len(launches(plan))} kernel(s) {status}"
            + (f": {entry['error']}" if entry["error"] else ""))
        entries.append(entry)
    if can_lower:
        _lower_all([(plan, path, arch, nvcc, out) for _, plan, path in jobs], record)
    else:
        for i in range(len(jobs)):
            record(i, {})
    index = {"target": {"kind": "cuda", "arch": arch}, "tilelang": can_lower, "candidates": entries}
    write_atomic(under(out, "index.json"), json.dumps(index, indent=1) + "\n", root=out)
    return index


def _lower_all(jobs: list, record) -> None:
    """record(i, _lower's result) for each job in order, as it is ready: lowered in spawned
    processes, one per core (TileLang lowers one kernel on one core: the 39 candidates of the
    built-ins took ~2.5 minutes of `make kernels` on the GPU machine's 16 cores, one after
    another), or here for a single job or a single core."""
    import os
    from concurrent.futures.process import BrokenProcessPool

    from ..process_pool import memory_for_workers, spawn_pool, stop_now

    workers = min(len(jobs), os.cpu_count() or 1, memory_for_workers())
    pool = spawn_pool(workers) if workers >= 2 else None  # None: no processes here (a sandbox)
    if pool is None:
        for i, job in progress(list(enumerate(jobs)), "lowering"):
            record(i, _lower_job(*job))
        return
    try:
        futures = [pool.submit(_lower_job, *job) for job in jobs]
        for i, f in progress(list(enumerate(futures)), "lowering"):
            try:
                res = f.result()
            except BrokenProcessPool:  # a worker died (killed for memory, or TileLang crashed)
                res = {"lowered": False, "error": f"LoweringError: {WORKER_DIED}"}
            record(i, res)
    except BaseException:  # Ctrl-C, SIGTERM or an error here: the workers stop now, mid-kernel
        stop_now(pool)
        raise
    pool.shutdown(wait=True)


# recorded for every candidate not lowered when a worker dies: the pool is broken from then on
WORKER_DIED = "a lowering worker process died (killed for memory, or TileLang crashed): not lowered"


def _lower_job(plan, path: Path, arch: str, nvcc: bool, root: Path) -> dict:
    """_lower for one emitted module (a worker process's task: it imports what it needs)."""
    from ..emit import load_module

    t0 = time.perf_counter()
    res = _lower(plan, path.read_text(), load_module, path, arch, nvcc, root)  # the module just written
    return {**res, "seconds": time.perf_counter() - t0}


def _lower(plan, source: str, load_module, path: Path, arch: str, nvcc: bool, root: Path) -> dict:
    from ..lower import compile_cuda, hopper_features, lower_to_cuda

    res: dict = {"lowered": False}
    try:
        mod = load_module(source, f"{plan.graph}_{plan.candidate}".replace("+", "_"))
        funcs = mod.build_kernel()
        parts, feats = [], {}
        for k in launches(plan):  # a tail (Kernel.tail_of) is lowered inside its launch
            cu = lower_to_cuda(funcs[k.name], arch=arch, pass_configs=mod.PASS_CONFIGS.get(k.name))
            f = hopper_features(cu)
            f.pop("markers", None)
            feats[k.name] = f
            parts.append(f"// ---- kernel {k.name}: {k.role}\n{cu}")
            if nvcc:
                compile_cuda(cu, arch=DEFAULT.arch_features if arch == DEFAULT.arch else arch,
                             flags=getattr(mod, "NVCC_FLAGS", {}).get(k.name))
        cu_path = under(root, *path.with_suffix(".cu").relative_to(root).parts)
        write_atomic(cu_path, f"// {plan.graph} / {plan.candidate}: CUDA C from TileLang for {arch}\n\n"
                     + "\n\n".join(parts), root=root)
        res.update(lowered=True, cuda=cu_path.name, hopper=feats, nvcc="ok" if nvcc else None)
    except Exception as e:  # recorded (LoweringError or an emitter error), not fatal: the other candidates still build
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[-1] if msg else ''}"
    return res


def cmd_kernels(args) -> int:
    sources = args.sources or list(architectures.NAMES)
    sources = [str(f) for s in sources for f in (sorted(Path(s).glob("*.json")) if Path(s).is_dir() else [s])]
    sizes = parse_sizes(args.size)
    out = check_out_dir(args.out, "--out")
    check_replaceable(out, *MARKER, "--out", "kernels")  # refused before the work; checked again at publish
    index = build_kernels(sources, Path(args.out), sizes, nvcc=args.nvcc)
    failed = [e for e in index["candidates"] if e["lowered"] is False]
    for e in failed:
        print(f"error: {e['arch']}/{e['candidate']}: {e['error']}", file=sys.stderr)
    return 1 if failed else 0


def register(sub) -> None:
    s = sub.add_parser("kernels", help="emit TileLang for every candidate and lower it to CUDA C (no GPU needed)")
    add_sources(s, default="every built-in; a folder: its .json exports")
    add_out(s, "build/kernels")
    add_size(s)
    s.add_argument("--nvcc", action="store_true", help="also compile each kernel with nvcc for sm_90a")
    s.set_defaults(fn=cmd_kernels)
