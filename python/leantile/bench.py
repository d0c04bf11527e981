"""`leantile bench`: on a GPU, for each built-in at its published shape (or each given source: a built-in
name, an exports/*.json file or module.py:function, as `leantile kernels` takes them), derive the default candidate, emit
TileLang, compile, check against the float32 reference on fresh random inputs (outputs
NaN-poisoned first), and time it against torch eager, torch.compile and the vendor path in
the same process (triton do_bench with L2 flush, and do_bench_cudagraph).

    leantile bench [SOURCE ...] [--out DIR] [--untuned] [--size K=V ...] [--candidate C] [--tile K=V ...]

The kernel runs with the plan leantile.compile chooses: the tuned configuration for the
shape and GPU when the lookup (user's folder, then shipped) has one. Prints a table and writes DIR/bench-<gpu>.json, .md and a bar chart
.png. A check failure is reported, not hidden.
"""
from __future__ import annotations

import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch

from . import architectures, reference
from .plan import launches
from .sources import load_source

def baselines(g, t, source: str | None = None):
    """(torch eager, {vendor path: callable}) for g over inputs t. The hand-written ones come
    from the architecture's own module (`baselines(t)`: a built-in's, or the module of a
    module.py:function source, or an example's under examples/architectures/), and only when
    g IS that architecture (the same digest as the module's graph at g's sizes): a user graph
    named `geglu` that is another graph never gets GeGLU's. Any other graph is compared with
    its own reference (eager) and torch.compile of it."""
    mod = _architecture_module(g, source)
    if mod is not None and hasattr(mod, "baselines"):
        return mod.baselines(t)
    first = next(iter(g.outputs))
    return (lambda: reference.evaluate(g, t, check=False)[first]), {}


def prepared(g, inputs: dict, source: str | None = None) -> dict:
    """`inputs` as the architecture module that builds exactly g means them: its
    `prepare_inputs(t)` where it has one (document ids, ALiBi's slopes: a random draw would mean
    other data), else as they are."""
    mod = _architecture_module(g, source)
    prepare = getattr(mod, "prepare_inputs", None)
    return prepare(inputs) if prepare else inputs


def _architecture_module(g, source: str | None):
    """The module that builds exactly g at its sizes, or None."""
    from importlib.util import module_from_spec, spec_from_file_location

    from .report.bench import graph_digest

    if g.name in architectures.NAMES:
        mods = [architectures.module(g.name)]
    else:
        paths = [Path(source.rpartition(":")[0])] if source and ".py:" in source else []
        paths.append(Path(__file__).resolve().parents[2] / "examples" / "architectures" / f"{g.name}.py")
        mods = []
        for p in paths:
            if p.is_file():
                spec = spec_from_file_location(f"leantile_baselines_{p.stem}", p)
                m = module_from_spec(spec)
                # registered: torch.compile imports the module of a function it traces (a FlexAttention
                # score_mod defined there failed with "No module named 'leantile_baselines_...'")
                sys.modules[spec.name] = m
                spec.loader.exec_module(m)
                mods.append(m)
    want = graph_digest(g)
    for m in mods:
        build = getattr(m, "build", None)
        sizes = {a: g.axes[a] for a in getattr(m, "DEFAULT_SIZES", {}) if a in g.axes}
        try:
            same = build is not None and graph_digest(build(**sizes)) == want
        except Exception:  # a module that cannot build at these sizes is not this graph
            same = False
        if same:
            return m
    return None


def _dtype(g) -> str:
    return g.inputs()[0].dtype if g.inputs() else "f16"


def run_one(source, seed=0, tuned=True, sizes=None, candidate=None, tiles=None, eager=None, inputs=None,
            baselines_fn=None):
    """One benchmark row. `eager` (a function of the inputs dict) replaces the graph's own
    baselines; `baselines_fn` (a function of the inputs dict returning (eager, {vendor path:
    callable}), as an architecture module's `baselines`) replaces them with its vendor paths (the
    suite's bf16 graphs, which are no module's graph); `inputs` replaces the fresh random ones."""
    import triton.testing as tt

    from .report.bench import graph_digest
    from .runtime import compile as compile_kernel

    from . import ir
    g = source if isinstance(source, ir.Graph) else load_source(source, sizes)
    source = None if isinstance(source, ir.Graph) else source
    t0 = time.time()
    # the plan the product ships (tuned entry, else the default), or the one asked for
    k = compile_kernel(g, tuned=tuned, candidate=candidate, tiles=tiles or None)
    plan = k.plan
    # the digest and shape let reports attach this row to exactly this graph, never by name alone
    row = {"arch": g.name, "graph_digest": graph_digest(g), "shape": dict(g.axes), "candidate": plan.candidate,
           "tuned": k.how == "tuned", "tiles": dict(plan.tiles), "kernels": [x.name for x in launches(plan)],
           "compile_s": round(time.time() - t0, 1)}
    inputs = prepared(g, k.random_inputs(seed), source) if inputs is None else inputs
    v = k.verify(inputs)  # every output, NaN-poisoned, against the float32 reference
    row.update(finite=all(e != float("inf") for e in v["rel_err"].values()), rel_err=max(v["plain_rel_err"].values()),
               ok=v["ok"])

    def leantile_call():
        return k.run(inputs)

    if eager is not None:
        user = eager
        eager, vendor = (lambda: user(inputs)), {}
    elif baselines_fn is not None:
        eager, vendor = baselines_fn(inputs)
    else:
        eager, vendor = baselines(g, inputs, source)
    contenders = {"leantile": leantile_call, "eager": eager, **compiled_baselines(eager), **vendor}
    for f in contenders.values():  # warm up / compile
        f(); f()
    torch.cuda.synchronize()
    row["peak_mb"] = {name: peak_memory_mb(contenders[name]) for name in ("leantile", "eager", "compile")}
    times = {}
    for _ in range(2):  # interleaved: each contender once per round
        for name, f in contenders.items():
            ms = tt.do_bench(f, warmup=25, rep=100, return_mode="median")  # flushes L2 between reps
            try:
                gms = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
            except Exception:  # reduce-overhead already uses CUDA graphs: it cannot be captured again
                gms = float("nan")
            times.setdefault(name, []).append((ms, gms))
    row["ms"] = {name: min(v[0] for v in vals) for name, vals in times.items()}
    row["gpu_ms"] = {name: min(v[1] for v in vals) for name, vals in times.items()}
    row["tflops"] = _flops(g) / (row["gpu_ms"]["leantile"] * 1e-3) / 1e12
    return row


def peak_memory_mb(f) -> float:
    """Device memory one call of f allocates at its peak beyond what was allocated before it
    (the inputs, the compiled graphs' own pools): its outputs, intermediates and workspaces, in
    MiB (issue 49: a plan's peak memory no more than torch.compile's)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = f()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return round(peak / 2 ** 20, 2)


def compiled_baselines(eager, backend: str = "inductor") -> dict:
    """{"compile": torch.compile(eager), "compile_ro": the same in mode reduce-overhead}, compiled
    afresh. Why afresh: the rows' baselines share one code object (run_one's lambda), and past
    torch._dynamo's recompile limit (8) torch.compile silently ran eager, so every row after the
    fourth of a suite was timed against eager (the reductions suite of 2026-11-29 on an H200). A
    limit hit now fails the row instead of timing eager."""
    torch._dynamo.reset()
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    modes = {"compile": {}} if backend != "inductor" else {"compile": {}, "compile_ro": {"mode": "reduce-overhead"}}
    return {name: torch.compile(eager, backend=backend, **kw) for name, kw in modes.items()}


def _flops(g) -> float:
    """2 * (product of all axis sizes involved) per matmul; elementwise work is negligible."""
    from . import ir
    total = 0.0
    for n in g.nodes:
        if isinstance(n, ir.Matmul):
            total += 2.0 * math.prod(g.axes[a] for a in n.axes) * g.axes[n.axis_a]
    return total


VENDOR_KEYS = ("leantile", "eager", "compile", "compile_ro")


def table(rows) -> list[str]:
    lines = ["| workload | candidate (tuned) | ok | rel. err | leantile ms | TFLOP/s | torch.compile ms | speedup vs compile "
             "| eager ms | vendor ms | leantile / vendor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['arch']} | ERROR: {r['error'][:80]} | | | | | | | | | |")
            continue
        g = r["gpu_ms"]
        vend = {k: v for k, v in g.items() if k not in VENDOR_KEYS}
        vs = ", ".join(f"{k} {v:.4f}" for k, v in vend.items()) or "-"
        ratio = ", ".join(f"{v / g['leantile']:.2f}x" for v in vend.values()) or "-"
        lines.append(f"| {r['arch']} | {r['candidate']} ({'yes' if r['tuned'] else 'no'}) | {r['ok']} | "
                     f"{r['rel_err']:.1e} | {g['leantile']:.4f} | {r['tflops']:.0f} | {g['compile']:.4f} | "
                     f"{g['compile'] / g['leantile']:.2f}x | {g['eager']:.4f} | {vs} | {ratio} |")
    return lines


def chart(rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if "gpu_ms" in r]
    keys = ["leantile", "compile", "eager"]
    fig, ax = plt.subplots(figsize=(10, 4))
    w = 0.25
    for j, k in enumerate(keys):
        ax.bar([i + (j - 1) * w for i in range(len(ok))], [r["gpu_ms"][k] for r in ok], w, label=k)
    ax.set_xticks(range(len(ok)), [r["arch"] for r in ok], rotation=20)
    ax.set_ylabel("GPU time (ms, lower is better)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_bench(sources: list[str] | None = None, *, out: str = "benchmarks/results", sizes: dict | None = None,
              candidate: str | None = None, tiles: dict | None = None, untuned: bool = False) -> int:
    """`leantile bench` over `sources` (default: every built-in): one row each, then the table,
    JSON and chart in `out`. sizes, tiles: as leantile.compile takes them (the CLI parses its
    --size / --tile pairs and checks for a GPU first)."""
    from .files import check_out_dir
    from .progress import progress

    check_out_dir(out, "--out")  # a bad --out is one line now, not after every benchmark ran
    rows = []
    for source in progress(sources or architectures.NAMES, "bench"):
        try:
            rows.append(run_one(source, tuned=not untuned, sizes=sizes or {}, candidate=candidate, tiles=tiles or {}))
        except Exception as e:
            rows.append({"arch": source, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "trace"}), flush=True)
    from .files import write_atomic
    gpu = torch.cuda.get_device_name().replace(" ", "-")
    out = Path(out)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": _now(), "rows": rows}
    write_atomic(out / f"bench-{gpu}.json", json.dumps(meta, indent=1) + "\n")
    lines = [f"# leantile bench on {meta['device']} (torch {meta['torch']}), {meta['date']}", "",
             "GPU time: `triton.testing.do_bench_cudagraph` medians, best of two interleaved rounds; "
             "launch-inclusive `do_bench` times are in the JSON.", "", *table(rows)]
    write_atomic(out / f"bench-{gpu}.md", "\n".join(lines) + "\n")
    chart(rows, out / f"bench-{gpu}.png")
    print("\n".join(table(rows)))
    return 0 if all(r.get("ok") for r in rows) else 1



def _now() -> str:
    """When the table was measured (UTC, to the minute): the file says how old it is."""
    from datetime import datetime, timezone
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
