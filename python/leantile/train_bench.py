"""`leantile bench --suite train`: a training step per case (issue 50): the forward and the backward
of each graph through its leantile op (leantile.torch.op: the backward is the graph's vjp, derived
and compiled as another op), against the same step in torch eager, torch.compile (inductor, the
backward by AOTAutograd) and the vendor paths of the architecture (SDPA's fused backends for
attention), in one process: GPU time per step (triton's do_bench, L2 flushed; do_bench_cudagraph
beside it where the step can be captured), the peak device memory of one step, and whether the
gradients leantile gives equal the float32 reference's (torch autograd through the graph's
reference) within the dtype's tolerance. Prints a table, writes JSON and markdown.

The cases are the built-in architectures and the row forms users train (RMSNorm / LayerNorm with
a gain, log-softmax, cross-entropy) at training shapes; `--limit` and `--tag` select.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import architectures, ir
from .files import write_atomic


@dataclass(frozen=True)
class TrainCase:
    name: str
    graph: ir.Graph
    eager: object  # t -> (eager step's forward, {vendor: forward}) over the input dict t
    labels: tuple[str, ...] = ()  # inputs that are class ids: no gradient, integers below the class count
    tags: tuple[str, ...] = field(default=())
    constants: tuple[str, ...] = ()  # inputs that take no gradient (document ids, ALiBi's slopes)
    prepare: object = None  # t -> t: the inputs the architecture means (architectures.variants' prepare_inputs)


def row_graphs():
    """({name: sizes -> graph} of the row forms users train, a function giving {name: t -> their
    PyTorch version})."""
    from .dag import build_graph_with_output

    def ln_affine(g):
        x = g.input("X", ["m", "d"])
        return g.add(g.mul(g.layer_norm(x, "d"), g.input("gamma", ["d"])), g.input("beta", ["d"]))

    def rms_gain(g):
        return g.mul(g.rms_norm(g.input("X", ["m", "d"]), "d"), g.input("gamma", ["d"]))

    def log_softmax(g):
        x = g.input("X", ["m", "d"])
        z = g.sub(x, g.red("max", x, "d"))
        return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))

    def cross_entropy(g):
        x, label = g.input("X", ["m", "d"]), g.input("label", ["m"], "f32")
        mx = g.red("max", x, "d")
        lse = g.add(g.log(g.red("sum", g.exp(g.sub(x, mx)), "d")), mx)
        picked = g.red("sum", g.mul(x, g.eq(g.iota("d"), label)), "d")
        return g.div(g.red("sum", g.sub(lse, picked), "m"), g.size_const("m"))

    def lm_head_ce(g):  # an LM head and its loss: the logits H W over the vocabulary d, then cross_entropy
        logits = g.matmul(g.input("H", ["m", "k"], "bf16"), g.input("W", ["k", "d"], "bf16"), "k", "k")
        x, label = logits, g.input("label", ["m"], "f32")
        mx = g.red("max", x, "d")
        lse = g.add(g.log(g.red("sum", g.exp(g.sub(x, mx)), "d")), mx)
        picked = g.red("sum", g.mul(x, g.eq(g.iota("d"), label)), "d")
        return g.div(g.red("sum", g.sub(lse, picked), "m"), g.size_const("m"))

    def torch_forms():
        import torch
        import torch.nn.functional as F

        from .architectures.rmsnorm import rms
        return {
            "layernorm_affine": lambda t: (lambda: F.layer_norm(t["X"], t["X"].shape[-1:], t["gamma"], t["beta"], 1e-5)),
            "rmsnorm_gain": lambda t: (lambda: rms(t["X"]) * t["gamma"]),
            "log_softmax": lambda t: (lambda: torch.log_softmax(t["X"].float(), -1).to(t["X"].dtype)),
            "cross_entropy": lambda t: (lambda: F.cross_entropy(t["X"].float(), t["label"].long())),
            "lm_head_ce": lambda t: (lambda: F.cross_entropy((t["H"] @ t["W"]).float(), t["label"].long())),
        }
    bodies = {"layernorm_affine": ln_affine, "rmsnorm_gain": rms_gain, "log_softmax": log_softmax,
              "cross_entropy": cross_entropy, "lm_head_ce": lm_head_ce}
    return {name: (lambda sizes, name=name: build_graph_with_output(name, sizes, bodies[name])) for name in bodies}, \
        torch_forms


# the training shapes: a 7-8B model's layer at 4096 tokens (2 x 2048), its vocabulary's loss at 8192
SHAPES = {
    "attention": {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128},
    "causal_attention": {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128},
    "sliding_window_attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128},
    "gqa_attention": {"h_kv": 4, "g": 4, "t_q": 2048, "t_kv": 2048, "d_h": 128},
    "matmul": {"m": 4096, "d": 4096, "n": 4096},
    "swiglu": {"m": 4096, "d": 4096, "n": 11008},
    "rmsnorm": {"m": 4096, "d": 4096, "n": 4096},
    "rmsnorm_mlp": {"m": 4096, "d": 4096, "n": 11008},
    "layernorm_linear_gelu": {"m": 4096, "d": 4096, "n": 16384},
    "layernorm_affine": {"m": 8192, "d": 4096},
    "rmsnorm_gain": {"m": 8192, "d": 4096},
    "log_softmax": {"m": 4096, "d": 32000},
    "cross_entropy": {"m": 8192, "d": 32000},
    # Llama 3's head: 8192 tokens of width 4096 over a vocabulary of 128256 (issue 50's memory
    # criterion: the fused head and loss at <= 1/4 of torch.compile's peak; today the logits exist)
    "lm_head_ce": {"m": 8192, "k": 4096, "d": 128256},
    # issue 51's variants at its shape (h 16, 4096 tokens, f16), forward and backward against FlexAttention's
    "softcap_attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128},
    "alibi_attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128},
    "document_attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128},
    "mla_attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_qk": 192, "d_v": 128},
}


def cases(sizes_of=None) -> list[TrainCase]:
    """Every case at its training shape, or at sizes_of(name, shape) (the tests' small ones)."""
    sizes_of = sizes_of or (lambda name, shape: shape)
    out = []
    for name in architectures.NAMES:
        mod = architectures.module(name)
        g = architectures.build(name, **sizes_of(name, SHAPES[name]))
        out.append(TrainCase(name, g, lambda t, mod=mod: mod.baselines(t),
                             tags=("attention",) if "attention" in name else ("gemm",)))
    rows, torch_forms = row_graphs()
    for name, build in rows.items():
        g = build(sizes_of(name, SHAPES[name]))
        out.append(TrainCase(name, g, lambda t, name=name: (torch_forms()[name](t), {}),
                             labels=("label",) if name in ("cross_entropy", "lm_head_ce") else (),
                             tags=("lm_head",) if name == "lm_head_ce" else ("rows",)))
    from .architectures import variants
    for name in variants.NAMES:
        mod = variants.module(name)
        g = mod.build(**sizes_of(name, SHAPES[name]))
        out.append(TrainCase(name, g, lambda t, mod=mod: mod.baselines(t), tags=("variants",),
                             constants=tuple(n.name for n in g.inputs() if n.name not in ("Q", "K", "V")),
                             prepare=getattr(mod, "prepare_inputs", None)))
    return out


def select(all_cases: list[TrainCase], limit: int | None = None, tags=None) -> list[TrainCase]:
    out = [c for c in all_cases if not tags or c.name in tags or set(tags) & set(c.tags)]
    return out[:limit] if limit is not None else out


# ------------------------------------------------------------------------ one case
def leaves(case: TrainCase, device, seed: int = 0) -> dict:
    """Fresh inputs of the graph (natural scale, never zeros) as leaves that need a gradient;
    class ids integers below the class count."""
    import torch

    from .reference import natural_scale, random_inputs
    g = case.graph
    t = random_inputs(g, seed=seed, device=device, scale=natural_scale(g))
    gen = torch.Generator().manual_seed(seed)
    for name in case.labels:
        t[name] = torch.randint(0, g.axes["d"], t[name].shape, generator=gen).float().to(device)
    if case.prepare is not None:
        t = case.prepare(t)
    fixed = set(case.labels) | set(case.constants)
    return {k: v.requires_grad_(k not in fixed) for k, v in t.items()}


def _outputs(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def step_of(forward, t: dict, cotangents: list):
    """A training step: the gradients of `t` cleared, forward, backward with the cotangents."""
    import torch

    wanted = [v for v in t.values() if v.requires_grad]

    def step():
        for v in wanted:
            v.grad = None
        outs = _outputs(forward())
        torch.autograd.backward(outs, cotangents[:len(outs)])
    return step


def reference_gradients(case: TrainCase, t: dict, cotangents: list) -> dict:
    """torch autograd through the graph's float32 reference (leantile.reference): what every
    contender's gradients are judged against."""
    import torch

    from .reference import evaluate
    xs = {k: v.detach().float().requires_grad_(v.requires_grad) for k, v in t.items()}
    outs = evaluate(case.graph, xs, compute_dtype=torch.float32, check=False)
    names = list(case.graph.outputs)
    grads = torch.autograd.grad([outs[o] for o in names], [v for v in xs.values() if v.requires_grad],
                                [c.float() for c in cotangents], allow_unused=True)
    return dict(zip([k for k, v in xs.items() if v.requires_grad], grads))


def run_case(case: TrainCase, device=None, seed: int = 0, timer=None) -> dict:
    """One row: each contender's step time and peak memory, and whether leantile's gradients equal
    the reference's. `timer(step) -> ms` (default: triton's do_bench on a GPU, wall time on the
    CPU)."""
    import torch

    import leantile.torch as lt
    from .runtime import compile as compile_kernel
    from .tolerance import TOLERANCE, rel_err
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    g = case.graph
    row = {"case": case.name, "shape": dict(g.axes), "tags": list(case.tags)}
    t0 = time.time()
    k = compile_kernel(g, device=device)
    op = lt.op(k)
    t = leaves(case, device, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    cts = [torch.randn(k.output_specs[o][0], generator=gen).to(k.output_specs[o][1]).to(device)
           for o in k.output_names]
    forward = {"leantile": lambda: op(*[t[n] for n in k.input_names])}
    eager, vendor = case.eager(t)
    forward["eager"] = eager
    if str(device).startswith("cuda"):  # (torch.compile's CPU backend is not a contender)
        torch._dynamo.reset()
        forward["compile"] = torch.compile(eager)
    forward.update(vendor)
    steps = {name: step_of(f, t, cts) for name, f in forward.items()}
    steps["leantile"]()  # derives and compiles the backward (once per op)
    row["compile_s"] = round(time.time() - t0, 1)
    row["candidate"] = k.plan.candidate
    chunks = getattr(k, "chunks", None)  # a chunked.ChunkedKernel (the LM head: its logits a chunk at a time)
    if chunks is not None:
        row["chunks"] = {"axis": chunks.axis, "size": chunks.size, "count": len(chunks.starts())}
    for sk in getattr(op, "step_kernels", {}).values():  # lt.StepOp: the loss's fused step (leantile.train_step)
        c = getattr(sk, "chunks", None)
        row["step"] = {"chunks": c and {"axis": c.axis, "size": c.size, "count": len(c.starts()),
                                        "in_place": sorted(c.into)}}
    want = reference_gradients(case, t, cts)
    errs = {n: rel_err(t[n].grad.double().cpu(), want[n].double().cpu()) if want[n] is not None else 0.0
            for n in want}
    row["grad_rel_err"] = {n: float(e) for n, e in errs.items()}
    row["ok"] = all(errs[n] <= TOLERANCE[t[n].dtype] for n in errs)
    timer = timer or _timer(device)
    row["ms"], row["gpu_ms"], row["errors"] = {}, {}, {}
    for name, step in steps.items():
        try:
            step()
            row["ms"][name] = timer(step)
        except Exception as e:  # a vendor path that cannot train this way: its row says why
            row["errors"][name] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
            continue
        if str(device).startswith("cuda"):  # GPU time alone, where the step can be captured
            import triton.testing as tt
            try:
                row["gpu_ms"][name] = tt.do_bench_cudagraph(step, rep=50, return_mode="median")
            except Exception as e:  # a step that cannot be captured in a CUDA graph: its do_bench time stands,
                row["gpu_ms"][name] = math.nan  # and the row says why (gqa_attention's capture failed on 2026-11-30)
                row.setdefault("capture_errors", {})[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    if str(device).startswith("cuda"):
        from .bench import peak_memory_mb
        row["peak_mb"] = {name: peak_memory_mb(steps[name]) for name in ("leantile", "eager", "compile")
                          if name in row["ms"]}
    return row


def _timer(device):
    if str(device).startswith("cuda"):
        import triton.testing as tt
        return lambda step: tt.do_bench(step, warmup=10, rep=50, return_mode="median")

    def wall(step, reps: int = 3) -> float:
        best = math.inf
        for _ in range(reps):
            s = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - s)
        return best * 1e3
    return wall


# ------------------------------------------------------------------------ the suite
def _ratio(row: dict, other: str, key: str = "gpu_ms") -> float:
    """other's time over leantile's: GPU time (do_bench_cudagraph, the project's measure) where the
    step could be captured, else (key "ms", or a CPU run) the launch-inclusive do_bench time."""
    ms = row.get(key, {})
    if key == "gpu_ms" and not all(math.isfinite(ms.get(n, math.nan)) for n in ("leantile", other)):
        return _ratio(row, other, "ms")
    return ms[other] / ms["leantile"] if other in ms and "leantile" in ms and ms["leantile"] > 0 else math.nan


def _geomean(xs) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def summary(rows: list[dict]) -> dict:
    """The geomean of GPU-time ratios (launch-inclusive beside it: the Python dispatch of each op)."""
    return {"cases": len(rows), "ok": sum(bool(r.get("ok")) for r in rows),
            "geomean_vs_compile": _geomean(_ratio(r, "compile") for r in rows),
            "geomean_vs_compile_with_launches": _geomean(_ratio(r, "compile", "ms") for r in rows),
            "below_0.8": [r["case"] for r in rows if _ratio(r, "compile") < 0.8]}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# leantile bench --suite train on {meta['device']} (torch {meta['torch']})", "",
             "GPU time of one forward + backward step (do_bench_cudagraph medians); `with launches`: the same",
             "step's do_bench time, the Python dispatch of each op included.", "",
             "| case | shape | grads ok | leantile ms | torch.compile ms | vs compile | eager ms | best vendor ms "
             "| with launches: leantile / compile ms | peak MiB leantile / compile |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms, wall = r.get("gpu_ms") or r.get("ms", {}), r.get("ms", {})
        vendors = {k: v for k, v in ms.items() if k not in ("leantile", "eager", "compile") and math.isfinite(v)}
        best = min(vendors.items(), key=lambda kv: kv[1]) if vendors else None
        peak = r.get("peak_mb", {})
        lines.append(f"| {r['case']} | {'x'.join(str(v) for v in r.get('shape', {}).values())} | {r.get('ok')} | "
                     f"{ms.get('leantile', math.nan):.3f} | {ms.get('compile', math.nan):.3f} | "
                     f"{_ratio(r, 'compile'):.2f}x | {ms.get('eager', math.nan):.3f} | "
                     f"{f'{best[1]:.3f} ({best[0]})' if best else '-'} | "
                     f"{wall.get('leantile', math.nan):.3f} / {wall.get('compile', math.nan):.3f} | "
                     f"{peak.get('leantile', '-')} / {peak.get('compile', '-')} |")
    s = summary(rows)
    lines += ["", f"geomean vs torch.compile {s['geomean_vs_compile']:.2f}x GPU time over {s['cases']} cases "
              f"({s['geomean_vs_compile_with_launches']:.2f}x with launches); gradients ok "
              f"{s['ok']}/{s['cases']}; below 0.8x: {', '.join(s['below_0.8']) or 'none'}"]
    return "\n".join(lines) + "\n"


def run_train_suite(out: str = "benchmarks/results", limit: int | None = None, tags=None,
                    sizes_of=None, device=None, time_budget: float | None = None) -> int:
    """Every selected case (a case that fails is a row saying why), the JSON and markdown written
    after each row; time_budget (seconds): no case starts after it, each left a row saying so (a
    GPU call's limit keeps the rows that ran)."""
    import datetime
    import time

    import torch
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if str(device).startswith("cuda") else "cpu"
    meta = {"device": name, "torch": torch.__version__, "date": str(datetime.date.today())}
    path = Path(out) / f"train-suite-{name.split()[-1].lower()}-{meta['date']}"
    Path(out).mkdir(parents=True, exist_ok=True)
    rows = []
    chosen = select(cases(sizes_of), limit, tags)
    if str(device).startswith("cuda"):  # every forward and backward compiled ahead, in parallel
        from .precompile import precompile_graphs, training_graphs
        precompile_graphs([t for c in chosen for t in training_graphs(
            c.graph, [n.name for n in c.graph.inputs() if n.name not in c.labels])], name)
    t0 = time.time()
    for case in chosen:
        if rows and time_budget is not None and time.time() - t0 > time_budget:  # (the first always runs)
            row = {"case": case.name, "shape": dict(case.graph.axes),
                   "error": f"not run: --time-budget {time_budget:g} s reached"}
        else:
            try:
                row = run_case(case, device)
            except Exception as e:
                row = {"case": case.name, "shape": dict(case.graph.axes),
                       "error": f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"}
        rows.append(row)
        ms = row.get("ms", {})
        print(f"{case.name:<26} ok {row.get('ok')}  leantile {ms.get('leantile', math.nan):.3f} ms  "
              f"compile {ms.get('compile', math.nan):.3f} ms  x{_ratio(row, 'compile'):.2f}"
              + (f"  {row['error']}" if "error" in row else ""), flush=True)
        write_atomic(path.with_suffix(".json"), json.dumps({**meta, "rows": rows, "summary": summary(rows)},
                                                           indent=1).encode())
        write_atomic(path.with_suffix(".md"), markdown(rows, meta).encode())
    print(markdown(rows, meta).splitlines()[-1])
    return 0
