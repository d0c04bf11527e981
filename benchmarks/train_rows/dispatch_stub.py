"""The host time of lt.op's dispatch alone (issue 50: a small training step's host time was five
times its GPU time on the H200, g42): one forward + backward step of the named cases of `leantile
bench --suite train` at tiny sizes on the CPU, every kernel's run replaced by empty outputs, so
what is timed is the op's Python and torch's autograd around it. Min over rounds, microseconds a
step; prints a table, writes JSON.

    python benchmarks/train_rows/dispatch_stub.py --out DIR [CASE ...]   (CPU)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("cases", nargs="*", default=["rmsnorm_gain", "layernorm_affine", "swiglu"])
    args = ap.parse_args(argv)
    import torch

    import leantile
    import leantile.torch as lt
    from leantile import runtime, train_bench
    from leantile.train_bench import leaves, step_of

    def stub_run(self, inputs, fill=None):
        return {o: torch.empty(s, dtype=d) for o, (s, d) in self.output_specs.items()}

    rows = []
    tiny = train_bench.cases(lambda n, s: {a: min(v, 8) for a, v in s.items()})
    for case in [c for c in tiny if c.name in args.cases]:
        k = leantile.compile(case.graph, device="cpu")
        op = lt.op(k)
        t = leaves(case, "cpu", 0)
        cts = [torch.randn(k.output_specs[o][0]).to(k.output_specs[o][1]) for o in k.output_names]
        step = step_of(lambda: op(*[t[n] for n in k.input_names]), t, cts)
        step()  # derives and compiles the backward
        real, runtime.Kernel.run = runtime.Kernel.run, stub_run
        try:
            best = float("inf")
            for _ in range(args.rounds):
                for _ in range(50):
                    step()
                s = time.perf_counter()
                for _ in range(args.steps):
                    step()
                best = min(best, (time.perf_counter() - s) / args.steps * 1e6)
        finally:
            runtime.Kernel.run = real
        rows.append({"case": case.name, "us_per_step": round(best, 1)})
        print(f"| {case.name} | {best:.0f} us |", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dispatch-stub-cpu.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
