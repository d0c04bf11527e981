"""Attention's backward alone (issue 50): the vjp graph of each attention built-in at a training
shape, compiled by leantile (its default plan: flash_backward's kernels), checked against the
float32 reference on fresh inputs, timed (do_bench, L2 flushed; do_bench_cudagraph too) beside
the SDPA backward of the same attention (cuDNN, FlashAttention-2), with each kernel's share from
the torch profiler. Prints a line per case and writes JSON.

    python benchmarks/flash_backward/probe.py --out DIR [--size AXIS=N ...] [--merge-contractions]
        [--variants plain,async] [NAME ...]

--variants async: the same plan with its GEMMs issued asynchronously (async_gemms.py), a row each.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing as tt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "norm_gemm"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_times_probe import kernel_times  # noqa: E402  (each kernel's GPU time from the torch profiler)

SHAPES = {
    "attention": {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128},
    "causal_attention": {"h": 16, "t_q": 2048, "t_kv": 2048, "d_h": 128},
    "gqa_attention": {"h_kv": 4, "g": 4, "t_q": 2048, "t_kv": 2048, "d_h": 128},
    "sliding_window_attention": {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128},
}


def save_rows(path: Path, rows: list) -> None:
    """The rows so far, as JSON (temporary file, then rename: a call's time limit keeps what ran)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1, default=str))
    tmp.replace(path)


def sdpa_backward(q, k, v, do, causal: bool, backend, groups: int = 1):
    """SDPA's backward alone: the forward run once, its graph kept, the backward timed."""
    from torch.nn.attention import sdpa_kernel
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=groups > 1)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", nargs="*", default=[], metavar="AXIS=N",
                    help="axis sizes over the cases' own (each case takes the axes it has)")
    ap.add_argument("--merge-contractions", action="store_true",
                    help="rules.flatten.MERGE_CONTRACTIONS on (GQA's backward without its group sums)")
    ap.add_argument("--variants", default="plain", help="comma-separated: plain, async (async_gemms.py)")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args(argv)
    import leantile
    from leantile import architectures
    from leantile import reference
    from leantile.autodiff import forward_saving, vjp
    from leantile.derive.rules import flatten
    flatten.MERGE_CONTRACTIONS = args.merge_contractions
    sizes = {k: int(v) for k, v in (a.split("=", 1) for a in args.size)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.names or list(SHAPES):
        shape = {a: sizes.get(a, n) for a, n in SHAPES[name].items()}
        g = architectures.build(name, **shape)
        bw = vjp(g)
        row = {"case": name, "shape": shape, "merge_contractions": args.merge_contractions}
        try:
            k = leantile.compile(bw.graph)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:400]
            rows.append(row)
            print(name, "compile error", row["error"], flush=True)
            continue
        row["candidate"], row["kernels"] = k.plan.candidate, [x.name for x in k.plan.kernels]
        inputs = k.random_inputs(0)
        if bw.saved:  # the forward's saved values (its output, softmax max and sum) as the forward computes them
            fwd = reference.evaluate(forward_saving(g, bw), {n.name: inputs[n.name] for n in g.inputs()},
                                     compute_dtype=torch.float32, check=False)
            inputs.update({n: fwd[n].to(inputs[n].dtype).reshape(inputs[n].shape) for n in bw.saved})
        base = row
        for variant in args.variants.split(","):
            row = {**base, "variant": variant}
            kv = k if variant == "plain" else _variant(k, variant)
            _time_row(row, kv, inputs, name, shape)
            rows.append(row)
            save_rows(out / "flash-backward.json", rows)
    return 0


def _variant(k, variant: str):
    """A copy of compiled kernel k running its module patched by `variant` (async_gemms)."""
    import copy
    from leantile import runtime
    from async_gemms import patch_source
    if variant != "async":
        raise ValueError(f"unknown variant {variant!r}")
    kv = copy.copy(k)
    kv.source = patch_source(k.source)
    kv._c = runtime._compiled(kv.source, k.device)
    return kv


def _time_row(row: dict, k, inputs: dict, name: str, shape: dict) -> None:
    from torch.nn.attention import SDPBackend
    v = k.verify(inputs)
    row["ok"], row["rel_err"] = bool(v["ok"]), {o: float(e) for o, e in v.get("rel_err", {}).items()} \
        if isinstance(v.get("rel_err"), dict) else v.get("rel_err")
    row["leantile_ms"] = tt.do_bench(lambda: k.run(inputs), warmup=10, rep=100, return_mode="median")
    row["leantile_graph_ms"] = tt.do_bench_cudagraph(lambda: k.run(inputs), rep=100, return_mode="median")
    row["leantile_kernels"] = kernel_times(lambda: k.run(inputs))
    # the same attention in torch: [h, t, d] tensors (a GQA's K/V heads repeated for SDPA's enable_gqa)
    dev = "cuda"
    q = inputs["Q"].reshape(1, -1, shape["t_q"], shape["d_h"]).to(dev)
    kk = inputs["K"].reshape(1, -1, shape["t_kv"], shape["d_h"]).to(dev)
    vv = inputs["V"].reshape(1, -1, shape["t_kv"], shape["d_h"]).to(dev)
    do = inputs["d_out"].reshape(q.shape).to(dev)
    groups = q.shape[1] // kk.shape[1]
    causal = name == "causal_attention"
    row["vendor_ms"] = {}
    if name != "sliding_window_attention":
        for label, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            try:
                f = sdpa_backward(q, kk, vv, do, causal, backend, groups)
                f()
                # (do_bench: autograd.grad of a kept graph cannot be captured in a CUDA graph)
                row["vendor_ms"][label] = tt.do_bench(f, warmup=10, rep=100, return_mode="median")
            except Exception as e:
                row["vendor_ms"][label] = f"{type(e).__name__}: {str(e)[:120]}"
    best = min((x for x in row["vendor_ms"].values() if isinstance(x, float)), default=math.nan)
    row["vs_best_sdpa"] = best / row["leantile_ms"] if math.isfinite(best) else math.nan
    print(f"{name:26s} {row['variant']:6s} ok={row['ok']} leantile {row['leantile_ms']:.4f} ms  vendor {row['vendor_ms']}  "
          f"x{row['vs_best_sdpa']:.2f}  kernels {row['leantile_kernels']}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    sys.exit(main())
