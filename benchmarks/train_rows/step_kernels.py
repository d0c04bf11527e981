"""Where a training step's GPU time goes (issue 50): for the named cases of `leantile bench --suite
train` (leantile.train_bench), one forward + backward step of leantile's op and of torch.compile,
as the suite builds them, each kernel's GPU time from the torch profiler (mean per step) beside
the step's do_bench_cudagraph time. Prints each step's kernels, writes JSON.

    python benchmarks/train_rows/step_kernels.py --out DIR CASE [CASE ...]   (on a GPU)

--in-place-share sets chunked.IN_PLACE_SHARE (the LM head's fused step: 512 tokens a chunk at 3, 1024 at 1.5).
--two-pass-bytes / --stream-block set rules.row_tiles.TWO_PASS_BYTES / STREAM_BLOCK for this
process (a two-pass row kernel's rows per CTA, a streamed row's block): one process per setting,
the settings of one GPU call compared.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "norm_gemm"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--two-pass-bytes", type=int)
    ap.add_argument("--stream-block", type=int)
    ap.add_argument("--in-place-share", type=float, help="chunked.IN_PLACE_SHARE (a fused step's chunk size)")
    ap.add_argument("--leantile-only", action="store_true", help="time leantile's step alone (torch.compile's once per call)")
    ap.add_argument("--tag", default="")
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args(argv)
    from leantile.derive.rules import row_tiles
    if args.two_pass_bytes:
        row_tiles.TWO_PASS_BYTES = args.two_pass_bytes
    from leantile import chunked
    if args.in_place_share:
        chunked.IN_PLACE_SHARE = args.in_place_share
    if args.stream_block:
        row_tiles.STREAM_BLOCK = args.stream_block
    import torch
    import triton.testing as tt

    import leantile.torch as lt
    from kernel_times_probe import kernel_times
    from leantile.runtime import compile as compile_kernel
    from leantile.train_bench import cases, leaves, step_of
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in [c for c in cases() if c.name in args.cases]:
        k = compile_kernel(case.graph, device="cuda")
        op = lt.op(k)
        t = leaves(case, "cuda", 0)
        gen = torch.Generator().manual_seed(1)
        cts = [torch.randn(k.output_specs[o][0], generator=gen).to(k.output_specs[o][1]).cuda() for o in k.output_names]
        eager, _ = case.eager(t)
        torch._dynamo.reset()
        forward = {"leantile": lambda: op(*[t[n] for n in k.input_names])}
        if not args.leantile_only:
            forward["compile"] = torch.compile(eager)
        row = {"case": case.name, "shape": dict(case.graph.axes), "two_pass_bytes": row_tiles.TWO_PASS_BYTES,
               "stream_block": row_tiles.STREAM_BLOCK, "in_place_share": chunked.IN_PLACE_SHARE}
        for name, f in forward.items():
            step = step_of(f, t, cts)
            step()
            row[name] = {"ms": tt.do_bench_cudagraph(step, rep=50, return_mode="median"), "kernels": kernel_times(step),
                         "memory_mb": memory_phases(f, t, cts)}
            print(f"{case.name} {name} {args.tag}: {row[name]['ms']:.4f} ms; memory MiB {row[name]['memory_mb']}",
                  flush=True)
            for kn, ms in sorted(row[name]["kernels"].items(), key=lambda kv: -kv[1]):
                print(f"    {ms:.4f}  {kn}", flush=True)
        rows.append(row)
        (out / f"step-kernels{'-' + args.tag if args.tag else ''}.json").write_text(json.dumps(rows, indent=1))
    return 0


def memory_phases(forward, t: dict, cts: list) -> dict:
    """Where a step's peak memory is (MiB beyond the inputs, the gradients cleared first): after
    the forward (what it keeps for the backward), its peak, and the backward's peak and what it
    leaves (the gradients): a step whose backward copies its gradients shows it here."""
    import torch

    from leantile.train_bench import _outputs
    mib = lambda b: round(b / 2 ** 20, 1)
    for v in t.values():
        if v.requires_grad:
            v.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    outs = _outputs(forward())
    torch.cuda.synchronize()
    got = {"forward_kept": mib(torch.cuda.memory_allocated() - base),
           "forward_peak": mib(torch.cuda.max_memory_allocated() - base)}
    torch.cuda.reset_peak_memory_stats()
    torch.autograd.backward(outs, cts[:len(outs)])
    del outs
    torch.cuda.synchronize()
    got["backward_peak"] = mib(torch.cuda.max_memory_allocated() - base)
    got["gradients"] = mib(torch.cuda.memory_allocated() - base)
    return got


if __name__ == "__main__":
    sys.exit(main())
