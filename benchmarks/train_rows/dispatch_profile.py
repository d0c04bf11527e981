"""Where a training step's host time goes (issue 50: rmsnorm_gain's step is 0.149 ms of GPU time
and 0.708 ms with launches on the H200, torch.compile's 0.117 / 0.357): one forward + backward of
leantile's op for the named cases of `leantile bench --suite train`, as the suite builds it, timed
on the host (synchronised every step, and launched back to back), then under cProfile: the
functions that take the host time, by own time. On the CPU (no GPU) the op runs the reference
instead of kernels: use --stub to time the dispatch alone there.

    python benchmarks/train_rows/dispatch_profile.py --out DIR CASE [CASE ...]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("cases", nargs="+")
    args = ap.parse_args(argv)
    import torch

    import leantile.torch as lt
    from leantile.runtime import compile as compile_kernel
    from leantile.train_bench import cases, leaves, step_of
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in [c for c in cases() if c.name in args.cases]:
        k = compile_kernel(case.graph, device=device)
        op = lt.op(k)
        t = leaves(case, device, 0)
        cts = [torch.randn(k.output_specs[o][0]).to(k.output_specs[o][1]).to(device) for o in k.output_names]
        step = step_of(lambda: op(*[t[n] for n in k.input_names]), t, cts)
        for _ in range(10):
            step()
        sync()
        s = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        back_to_back = (time.perf_counter() - s) / args.steps * 1e3
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step()
        sync()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        row = {"case": case.name, "device": device, "ms_per_step_back_to_back": back_to_back, "profile": text.getvalue()}
        rows.append(row)
        print(f"{case.name}: {back_to_back:.3f} ms a step back to back\n{text.getvalue()}", flush=True)
        (out / "dispatch-profile.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
