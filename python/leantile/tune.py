"""`leantile tune`: on a GPU, sweep every candidate x its emitted get_configs() for each
workload, verify each kernel against the fp32 reference (NaN-poisoned outputs) before
timing it with do_bench_cudagraph, and store the best per (arch, shape, dtype, GPU) in
<arch>.json of the user's tuned folder (leantile.tuned.user_dir(); `--tuned-dir` elsewhere, as
`make tune` does for the shipped configurations), which the tuned lookup of `leantile.compile`,
`kernels` and `bench` then reads first. (`leantile search` explores the larger space with a momentum policy.)

    leantile tune [SOURCE ...] [--budget-s S] [--tuned-dir DIR] [--log FILE]
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from . import architectures, reference
from .derive import candidates, derive
from .sources import load_source
from .tiles import schedule_of


def measure(g, plan, inputs) -> dict:
    """Compile, verify (every output, NaN-poisoned, the runtime's one tolerance table) and, if
    right, time one plan on the given inputs."""
    import torch

    from .runtime import Kernel

    k = Kernel(g, plan, "asked", torch.device("cuda", torch.cuda.current_device()))
    v = k.verify(inputs)
    err = max(v["rel_err"].values())
    if not v["ok"]:
        return {"ok": False, "rel_err": err}
    return {"ok": True, "rel_err": err, "gpu_ms": k.benchmark(inputs)}


def tune_points(g, all_candidates: bool = False) -> list[tuple[str, dict]]:
    """(candidate, tiles) to measure: each candidate's module's get_configs(), the first its
    shape's own tiles, each with the schedule of the candidate's plan at those tiles (a swapped
    GEMM, FlashAttention-3's overlap: tiles.SCHEDULE), which the configs, block sizes only, omit."""
    from .emit import emit_module, load_module

    points = []
    for c in candidates(g):
        if c.name == "unfused" and not all_candidates:
            continue
        plan = derive(g, c.name)
        cfgs = load_module(emit_module(plan), f"tune_{g.name}_{c.name}").get_configs()
        points += [(c.name, {**schedule_of(plan.tiles), **t}) for t in cfgs]
    return points


def tune_one(g, budget_s: float, progress=None, all_candidates: bool = False) -> tuple[dict | None, list]:
    """Best verified row for graph g, and the log of every point tried."""
    inputs = reference.random_inputs(g, seed=1, device="cuda", scale=reference.natural_scale(g))
    points = tune_points(g, all_candidates)
    best, log, t0 = None, [], time.time()
    task = progress.add_task(g.name, total=len(points)) if progress else None
    for cand, tiles in points:
        if time.time() - t0 > budget_s:
            break
        try:
            r = measure(g, derive(g, cand, tiles), inputs)
        except Exception as e:  # a config that does not compile is a data point, not a crash
            r = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        row = {"arch": g.name, "candidate": cand, "tiles": tiles, **r}
        log.append(row)
        if r.get("ok") and r["gpu_ms"] < (best or {}).get("gpu_ms", float("inf")):
            best = row
        if progress:
            progress.advance(task)
    return best, log


def run_tune(sources: list[str] | None = None, *, sizes: dict | None = None, budget_s: float = 120.0,
             tuned_dir: str | None = None, log: str | None = None, all_candidates: bool = False) -> int:
    """`leantile tune` over `sources` (default: every built-in) at `sizes`: the best verified point
    of each stored in `tuned_dir` (default: the user's tuned folder), every point tried written to
    `log` (leantile.cli.tune parses the arguments and checks for a GPU)."""
    import torch

    from .files import check_out_dir

    if tuned_dir:
        check_out_dir(tuned_dir, "--tuned-dir")
    if log:
        check_out_dir(Path(log).parent, "--log")
    from rich.progress import Progress

    from .tuned import save_tuned
    gpu = torch.cuda.get_device_name()
    logs = []
    with Progress() as progress:
        for source in sources or architectures.NAMES:
            g = load_source(source, sizes or {})
            best, tried = tune_one(g, budget_s, progress, all_candidates)
            logs += tried
            if best is None:
                progress.console.print(f"{g.name}: no configuration passed the check")
                continue
            save_tuned({"arch": g.name, "shape": dict(g.axes), "dtype": g.inputs()[0].dtype, "gpu": gpu,
                        "candidate": best["candidate"], "tiles": best["tiles"], "time_ms": best["gpu_ms"],
                        "rel_err": best["rel_err"], "source": "leantile tune"}, tuned_dir)
            progress.console.print(f"{g.name}: {best['gpu_ms']:.4f} ms  {best['candidate']}  {best['tiles']}")
    if log:
        from .files import write_atomic
        write_atomic(log, json.dumps({"device": gpu, "log": logs}, indent=1) + "\n")
    return 0

