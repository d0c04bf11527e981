"""`leantile bench`: on a GPU, for each built-in at its published shape (or each given source: a built-in
name, an exports/*.json file or module.py:function, as `leantile kernels` takes them), derive the default candidate, emit
TileLang, compile, check against the float32 reference on fresh random inputs (outputs
NaN-poisoned first), and time it against torch eager, torch.compile and the vendor path in
the same process (triton do_bench with L2 flush, and do_bench_cudagraph).

    leantile bench [SOURCE ...] [--out DIR] [--untuned]

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
import torch.nn.functional as F

from . import architectures, reference
from .sources import load_source

def baselines(g, t):
    """torch eager implementations of each workload (the same math as the graph), and the
    vendor paths where one exists. Hand-written baselines only for a graph that IS the
    architecture of its name (same digest as the built-in or committed export at its sizes);
    any other graph, whatever its name, is compared with its own reference (eager) and
    torch.compile of it."""
    from .report.bench import is_reference

    name = g.name
    if not is_reference(g, Path(__file__).resolve().parents[2], any_sizes=True):
        first = next(iter(g.outputs))
        return (lambda: reference.evaluate(g, t, check=False)[first]), {}
    def rms(x):
        return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-5).to(x.dtype)
    if name == "attention":
        eager = lambda: torch.softmax((t["Q"] @ t["K"].transpose(-1, -2)).float(), -1).half() @ t["V"]
        vendor = {"sdpa_cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
                  "sdpa_flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION}
        def sdpa(backend):
            def f():
                with torch.nn.attention.sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None], scale=1.0)[0]
            return f
        return eager, {k: sdpa(b) for k, b in vendor.items()}
    if name == "swiglu":
        return (lambda: F.silu(t["X"] @ t["W_gate"]) * (t["X"] @ t["W_up"])), {}
    if name == "matmul":
        return (lambda: t["X"] @ t["W"]), {"cublas": lambda: torch.matmul(t["X"], t["W"])}
    if name == "rmsnorm":
        return (lambda: rms(t["X"]) @ t["W"]), {"cublas_matmul_alone": lambda: t["X"] @ t["W"]}
    if name == "rmsnorm_mlp":
        def f():
            n = rms(t["X"])
            return (n @ t["W_up"]) * (n @ t["W_gate"])
        return f, {}
    if name == "geglu":
        return (lambda: F.gelu(t["X"] @ t["W_gate"], approximate="tanh") * (t["X"] @ t["W_up"])), {}
    if name == "attention_scaled":
        d_h = t["Q"].shape[-1]
        eager = lambda: torch.softmax((t["Q"] @ t["K"].transpose(-1, -2)).float() / math.sqrt(d_h), -1).half() @ t["V"]
        def sdpa(backend):
            def f():
                with torch.nn.attention.sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None])[0]
            return f
        return eager, {"sdpa_cudnn": sdpa(torch.nn.attention.SDPBackend.CUDNN_ATTENTION),
                       "sdpa_flash": sdpa(torch.nn.attention.SDPBackend.FLASH_ATTENTION)}
    if name == "softmax_row":
        return (lambda: torch.softmax(t["X"], -1)), {}
    if name == "layernorm_linear_gelu":
        return (lambda: F.gelu(F.layer_norm(t["X"], t["X"].shape[-1:], eps=1e-5) @ t["W"] + t["b"],
                               approximate="tanh")), {"cublas_matmul_alone": lambda: t["X"] @ t["W"]}
    raise KeyError(name)




def _dtype(g) -> str:
    return g.inputs()[0].dtype if g.inputs() else "f16"


def run_one(source, seed=0, tuned=True):
    import triton.testing as tt

    from .report.bench import graph_digest
    from .runtime import compile as compile_kernel

    g = load_source(source)
    t0 = time.time()
    k = compile_kernel(g, tuned=tuned)  # the plan the product ships: tuned entry, else the default
    plan = k.plan
    # the digest and shape let reports attach this row to exactly this graph, never by name alone
    row = {"arch": g.name, "graph_digest": graph_digest(g), "shape": dict(g.axes), "candidate": plan.candidate,
           "tuned": k.how == "tuned", "tiles": dict(plan.tiles), "kernels": [x.name for x in plan.kernels],
           "compile_s": round(time.time() - t0, 1)}
    inputs = k.random_inputs(seed)
    v = k.verify(inputs)  # every output, NaN-poisoned, against the float32 reference
    row.update(finite=all(e != float("inf") for e in v["rel_err"].values()), rel_err=max(v["rel_err"].values()),
               ok=v["ok"])

    def leantile_call():
        return k.run(inputs)

    eager, vendor = baselines(g, inputs)
    contenders = {"leantile": leantile_call, "eager": eager, "compile": torch.compile(eager),
                  "compile_ro": torch.compile(eager, mode="reduce-overhead"), **vendor}
    for f in contenders.values():  # warm up / compile
        f(); f()
    torch.cuda.synchronize()
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


def main(argv=None) -> int:
    from .cli import ArgumentParser

    ap = ArgumentParser(prog="leantile bench")
    ap.add_argument("sources", nargs="*", help="built-ins, exports/*.json or module.py:function (default: built-ins)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--untuned", action="store_true", help="default tiles even where a tuned config exists")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench: no CUDA GPU here; run on a GPU machine", file=sys.stderr)
        return 1
    from .files import check_out_dir

    check_out_dir(a.out, "--out")  # a bad --out is one line now, not after every benchmark ran
    rows = []
    for source in a.sources or architectures.NAMES:
        try:
            rows.append(run_one(source, tuned=not a.untuned))
        except Exception as e:
            rows.append({"arch": source, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "trace"}), flush=True)
    from .files import write_atomic
    gpu = torch.cuda.get_device_name().replace(" ", "-")
    out = Path(a.out)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    write_atomic(out / f"bench-{gpu}.json", json.dumps(meta, indent=1) + "\n")
    lines = [f"# leantile bench on {meta['device']} (torch {meta['torch']})", "",
             "GPU time: `triton.testing.do_bench_cudagraph` medians, best of two interleaved rounds; "
             "launch-inclusive `do_bench` times are in the JSON.", "", *table(rows)]
    write_atomic(out / f"bench-{gpu}.md", "\n".join(lines) + "\n")
    chart(rows, out / f"bench-{gpu}.png")
    print("\n".join(table(rows)))
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
