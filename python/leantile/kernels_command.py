"""`leantile kernels [SOURCE ...] [--out build/kernels] [--size k=v ...] [--nvcc]`: for each
built-in (or the given sources: a built-in name, file.json, module.py:function), derive
every candidate, emit <out>/<arch>/<candidate>.py (TileLang), lower each kernel to CUDA C
for sm_90 (<candidate>.cu next to it), and write <out>/index.json describing all of them.

Nothing half-written: everything is built in a hidden staging folder next to <out> and
moved into place only when every source has derived and emitted; an error before that
leaves <out> as it was.

Runs without a GPU. Without tilelang the TileLang modules are still written and the index
says the lowering was skipped. A candidate that fails to lower is recorded in the index with
its error, and the command exits with status 1 after writing everything else.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import architectures
from .files import write_atomic
from .sources import load_source, parse_sizes


def _tilelang_available() -> bool:
    try:
        import tilelang  # noqa: F401
    except Exception:
        return False
    return True


def build_kernels(sources: list[str], out: Path, sizes: dict | None = None, nvcc: bool = False,
                  arch: str = "sm_90", log=print) -> dict:
    """Do the work of `leantile kernels`; return the index (also written to out/index.json)."""
    graphs = [load_source(s, sizes) for s in sources]  # every source parses before anything is written
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        index = _build_into(graphs, stage, nvcc, arch, log)
        _publish(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    log(f"wrote {out / 'index.json'} ({len(index['candidates'])} candidates)")
    return index


def _publish(stage: Path, out: Path) -> None:
    """Move every staged file into out (index.json last), each by an atomic rename."""
    files = sorted((f for f in stage.rglob("*") if f.is_file()), key=lambda f: f.name == "index.json")
    for f in files:
        dst = out / f.relative_to(stage)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, dst)


def _build_into(graphs, out: Path, nvcc: bool, arch: str, log) -> dict:
    from .derive import candidates, derive, replay
    from .emit import emit_module, emit_plan_to_dir, load_module

    can_lower = _tilelang_available()
    if not can_lower:
        log("kernels: tilelang is not installed: writing TileLang modules only (no lowering)")
    from .tuned import load_tuned

    entries = []
    for g in graphs:
        if g.derivation:  # an export carries its derivation (Lean's): it must replay
            replay(g, g.derivation)
        # the best (candidate, tiles) measured for this shape on a real GPU, if any
        best = load_tuned(g.name, g.axes, g.inputs()[0].dtype if g.inputs() else "f16")
        for c in candidates(g):
            tuned = best is not None and best[0] == c.name
            plan = derive(g, c.name, best[1] if tuned else None)
            t0 = time.perf_counter()
            path = emit_plan_to_dir(plan, out / g.name)
            entry = {
                "arch": g.name, "candidate": c.name, "summary": c.summary,
                "steps": [s.model_dump(mode="json") for s in c.steps],
                "axes": dict(plan.axes), "tiles": dict(plan.tiles),
                "module": str(path.relative_to(out)),
                "kernels": [{"name": k.name, "role": k.role} for k in plan.kernels],
                "exported": bool(g.derivation) and tuple(c.steps) == tuple(g.derivation),
                "tuned": tuned,  # tiles from benchmarks/tuned/: the configuration that ships
                "lowered": None, "cuda": None, "error": None,
            }
            if can_lower:
                entry.update(_lower(plan, emit_module(plan), load_module, path, arch, nvcc))
            entry["seconds"] = round(time.perf_counter() - t0, 2)
            status = {True: "ok", False: "FAILED", None: "emitted"}[entry["lowered"]]
            log(f"{g.name}/{c.name}: {len(plan.kernels)} kernel(s) {status}"
                + (f": {entry['error']}" if entry["error"] else ""))
            entries.append(entry)
    index = {"target": {"kind": "cuda", "arch": arch}, "tilelang": can_lower, "candidates": entries}
    write_atomic(out / "index.json", json.dumps(index, indent=1) + "\n")
    return index


def _lower(plan, source: str, load_module, path: Path, arch: str, nvcc: bool) -> dict:
    from .lower import compile_cuda, hopper_features, lower_to_cuda

    res: dict = {"lowered": False}
    try:
        mod = load_module(source, f"{plan.graph}_{plan.candidate}".replace("+", "_"))
        funcs = mod.build_kernel()
        parts, feats = [], {}
        for k in plan.kernels:
            cu = lower_to_cuda(funcs[k.name], arch=arch)
            f = hopper_features(cu)
            f.pop("markers", None)
            feats[k.name] = f
            parts.append(f"// ---- kernel {k.name}: {k.role}\n{cu}")
            if nvcc:
                compile_cuda(cu, arch="sm_90a" if arch.startswith("sm_90") else arch)
        cu_path = path.with_suffix(".cu")
        write_atomic(cu_path, f"// {plan.graph} / {plan.candidate}: CUDA C from TileLang for {arch}\n\n"
                     + "\n\n".join(parts))
        res.update(lowered=True, cuda=cu_path.name, hopper=feats, nvcc="ok" if nvcc else None)
    except Exception as e:  # recorded (LoweringError or an emitter error), not fatal: the other candidates still build
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[-1] if msg else ''}"
    return res


def cmd_kernels(args) -> int:
    sources = args.sources or list(architectures.NAMES)
    sources = [str(f) for s in sources for f in (sorted(Path(s).glob("*.json")) if Path(s).is_dir() else [s])]
    index = build_kernels(sources, Path(args.out), parse_sizes(args.size), nvcc=args.nvcc)
    failed = [e for e in index["candidates"] if e["lowered"] is False]
    for e in failed:
        print(f"error: {e['arch']}/{e['candidate']}: {e['error']}", file=sys.stderr)
    return 1 if failed else 0


def register(sub) -> None:
    s = sub.add_parser("kernels", help="emit TileLang for every candidate and lower it to CUDA C (no GPU needed)")
    s.add_argument("sources", nargs="*", metavar="SOURCE",
                   help="built-in name, file.json, module.py:function, or a folder of .json exports "
                        "(default: every built-in)")
    s.add_argument("--out", default="build/kernels", help="output folder (default build/kernels)")
    s.add_argument("--size", nargs="*", metavar="K=V", help="override axis sizes")
    s.add_argument("--nvcc", action="store_true", help="also compile each kernel with nvcc for sm_90a")
    s.set_defaults(fn=cmd_kernels)
