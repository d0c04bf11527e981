"""On a GPU: for each built-in at its published shape (or each given source: a built-in
name, an exports/*.json file or module.py:function, as `leantile kernels` takes them), derive the default candidate, emit
TileLang, compile, check against the float32 reference on fresh random inputs (outputs
NaN-poisoned first), and time it against torch eager, torch.compile and the vendor path in
the same process (triton do_bench with L2 flush, and do_bench_cudagraph).

    python benchmarks/gpu_check_and_time.py [SOURCE ...] [--out DIR]

Prints a table and writes DIR/gpu_results.json. A check failure is reported, not hidden.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from leantile import architectures, reference
from leantile.sources import load_source
from leantile.derive import derive
from leantile.emit import emit_module

TOL = {"float16": 2e-2, "bfloat16": 4e-2}


def load_emitted(plan, out_dir=Path("build/kernels")):
    """Write the module to a file and import it: TileLang's parser reads function source."""
    import importlib.util
    path = out_dir / plan.graph / f"{plan.candidate}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(emit_module(plan))
    spec = importlib.util.spec_from_file_location(f"emitted_{plan.graph}_{plan.candidate}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def baselines(name, t):
    """torch eager implementations of each workload (the same math as the graph)."""
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
    if name not in architectures.NAMES:  # any other user graph: the unfused reference in f16 on the GPU
        return (lambda: reference.evaluate(g_of[name], t, check=False)["out"]), {}
    if name == "layernorm_linear_gelu":
        return (lambda: F.gelu(F.layer_norm(t["X"], t["X"].shape[-1:], eps=1e-5) @ t["W"] + t["b"],
                               approximate="tanh")), {"cublas_matmul_alone": lambda: t["X"] @ t["W"]}
    raise KeyError(name)


g_of: dict = {}  # graph name -> graph, for the generic baseline


def run_one(source, seed=0):
    import triton.testing as tt
    g = load_source(source)
    name = g.name
    g_of[name] = g
    plan = derive(g)
    row = {"arch": name, "candidate": plan.candidate, "kernels": [k.name for k in plan.kernels]}
    t0 = time.time()
    mod = load_emitted(plan)
    kernels = mod.compile_kernels(target="cuda")
    row["compile_s"] = round(time.time() - t0, 1)
    inputs = {k: v.cuda() for k, v in reference.random_inputs(g, seed=seed).items()}

    def leantile_call():
        bufs = mod.allocate(inputs)
        for spec in mod.KERNELS:
            kernels[spec["name"]](*[bufs[p] for p in spec["params"]])
        return bufs[mod.OUTPUTS["out"]]

    out = leantile_call()
    torch.cuda.synchronize()
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)["out"]
    finite = bool(torch.isfinite(out).all())
    err = ((out.float() - ref).norm() / ref.norm()).item()
    row.update(finite=finite, rel_err=err, ok=finite and err < TOL["float16"])

    # Preallocated buffers for timing (allocation is not part of the kernel)
    bufs = mod.allocate(inputs)
    def leantile_timed():
        for spec in mod.KERNELS:
            kernels[spec["name"]](*[bufs[p] for p in spec["params"]])
    eager, vendor = baselines(name, inputs)
    contenders = {"leantile": leantile_timed, "eager": eager, "compile": torch.compile(eager),
                  "compile_ro": torch.compile(eager, mode="reduce-overhead"), **vendor}
    for f in contenders.values():  # warm up / compile
        f(); f()
    torch.cuda.synchronize()
    times = {}
    for rep in range(2):  # interleaved: each contender once per round
        for k, f in contenders.items():
            ms = tt.do_bench(f, warmup=25, rep=100, return_mode="median")
            try:
                gms = tt.do_bench_cudagraph(f, rep=100, return_mode="median")
            except Exception:
                gms = float("nan")
            times.setdefault(k, []).append((ms, gms))
    row["ms"] = {k: min(v[0] for v in vals) for k, vals in times.items()}
    row["gpu_ms"] = {k: min(v[1] for v in vals) for k, vals in times.items()}
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("arch", nargs="*")
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args(argv)
    rows = []
    for name in a.arch or architectures.NAMES:
        try:
            rows.append(run_one(name))
        except Exception as e:
            rows.append({"arch": name, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "trace"}), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_results.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                      "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"\n{'arch':<24}{'ok':<5}{'rel_err':>9}{'leantile':>10}{'compile':>10}{'eager':>9}  vendor (GPU ms, cudagraph)")
    for r in rows:
        if "error" in r:
            print(f"{r['arch']:<24}ERROR {r['error'][:100]}")
            continue
        gm = r["gpu_ms"]
        vend = " ".join(f"{k}={v:.4f}" for k, v in gm.items() if k not in ("leantile", "eager", "compile", "compile_ro"))
        print(f"{r['arch']:<24}{str(r['ok']):<5}{r['rel_err']:>9.2e}{gm['leantile']:>10.4f}{gm['compile']:>10.4f}"
              f"{gm['eager']:>9.4f}  {vend}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
