"""Does a kernel that re-reads what the kernel before it streamed (a norm's normalise pass after its
statistics pass) run faster when its tiles launch in reverse along one grid axis, so that the part
of the input still in L2 (the last the statistics pass read) is read first? Each case's shipped
plan, then the same plan with Kernel.heavy_first set on one grid axis of one re-reading kernel
(the emitter's reversed tile order; values unchanged), GPU time (Kernel.benchmark:
do_bench_cudagraph median) beside torch.compile in one process. Prints a table, writes JSON.

    python benchmarks/l2_reuse/reverse_probe.py --out DIR [CASE ...]      (red:<name> or fus:<name>)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gemm_tiles"))

CASES = ["red:layernorm_chw", "red:groupnorm", "red:batchnorm_train", "fus:cross_entropy", "red:log_softmax"]


def variants(plan):
    """[(label, plan)]: the shipped plan, then one reversed grid axis of one kernel that loads a
    global an earlier kernel loaded too."""
    from leantile.plan import Load, launches
    out = [("shipped", plan)]
    seen: set[str] = set()
    for k in launches(plan):
        loads = {s.src for s in k.statements() if isinstance(s, Load)}
        if loads & seen:
            for t in k.grid:
                if t.block > 1 and -(-plan.axes[t.axis] // t.block) > 1 and k.heavy_first is None:
                    kernels = tuple(x.model_copy(update={"heavy_first": t.axis}) if x.name == k.name else x
                                    for x in plan.kernels)
                    out.append((f"{k.name}:rev_{t.axis}", plan.model_copy(update={"kernels": kernels})))
        seen |= loads
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=400.0, help="seconds; later rows are skipped")
    ap.add_argument("cases", nargs="*", default=CASES)
    args = ap.parse_args(argv)
    import torch
    import triton.testing as tt

    from leantile.derive.engine import derive
    from leantile.runtime import Kernel
    from probe import workload
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.time()
    for case in args.cases:
        if time.time() - t0 > args.budget:
            break
        g, fn = workload(case)
        row = {"case": case, "shape": dict(g.axes), "ms": {}}
        inputs = None
        for label, plan in variants(derive(g)):
            try:
                k = Kernel(g, plan, "probe", torch.device("cuda", 0))
                inputs = inputs or k.random_inputs()
                ok = k.verify(inputs)["ok"] if label != "shipped" else True
                row["ms"][label] = k.benchmark(inputs) if ok else "wrong"
            except Exception as e:
                row["ms"][label] = f"{type(e).__name__}: {e}"[:200]
            print(case, label, row["ms"][label], flush=True)
        if inputs is not None:
            c = torch.compile(lambda: fn(inputs))
            c(), c()
            row["ms"]["compile"] = tt.do_bench_cudagraph(c, rep=100, return_mode="median")
        rows.append(row)
        tmp = out / "l2-reuse-probe.json.tmp"
        tmp.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
        tmp.replace(out / "l2-reuse-probe.json")
    for r in rows:
        print(f"| {r['case']} | " + " | ".join(f"{s} {v:.4f}" if isinstance(v, float) else f"{s} {v}"
                                              for s, v in r["ms"].items()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
