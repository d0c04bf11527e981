"""Probe behind plan.passes.dependent_launch (issue 18): programmatic dependent launch between
the kernels of a plan. The shipped default plan of every named suite case with more than one
kernel (norm -> GEMM, split-KV decode and its merge, a split softmax row), as derived (every
kernel but the first waits for the one before as its first act, every kernel but the last lets
the next launch early) and with Kernel.wait_previous / launch_next off, each checked against
the float32 reference and timed (do_bench_cudagraph, ROUNDS interleaved rounds (default 2), the median of each).

    python benchmarks/pdl/pdl_probe.py [CASE ...]   (on a GPU; writes $OUT/pdl-probe.json)

With no case: every suite case whose shipped plan has several kernels. (The trigger after the first
kernel's stream instead of at its start, compared at commit c8a34d2 in
results/pdl-probe-h100-2026-11-26.json, was slower on 7 of 9 plans and is no longer emitted.)
"""
import json
import os
import sys

import torch

sys.path.insert(0, "python")
from leantile import suite  # noqa: E402
from leantile.runtime import Kernel, compile as compile_kernel  # noqa: E402


def without_dependent_launch(plan):
    return plan.model_copy(update={"kernels": tuple(k.model_copy(update={"wait_previous": False, "launch_next": False})
                                                    for k in plan.kernels)})


def main(names):
    rows = []
    for case in suite.select():
        if names and case.name not in names:
            continue
        g, _ = suite.build(case)
        try:
            pdl = compile_kernel(g, tuned=False)
        except Exception as e:
            print(case.name, "ERR", str(e)[:200], flush=True)
            continue
        if len(pdl.plan.kernels) < 2:
            continue
        row = {"case": case.name, "sizes": case.sizes, "candidate": pdl.plan.candidate,
               "kernels": [k.name for k in pdl.plan.kernels]}
        try:
            plain = Kernel(g, without_dependent_launch(pdl.plan), "probe", pdl.device)
            variants = {"plain": plain, "pdl": pdl}
            inputs = pdl.random_inputs(0)
            row["ok"] = {how: k.verify(inputs)["ok"] for how, k in variants.items()}
            times = {how: [] for how in variants}
            for _ in range(int(os.environ.get("ROUNDS", "2"))):
                for how, k in variants.items():
                    times[how].append(k.benchmark(inputs))
            row.update({how: sorted(t)[len(t) // 2] for how, t in times.items()})  # the median round
            row["speedup"] = row["plain"] / row["pdl"]
        except Exception as e:
            row["error"] = str(e)[:300]
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "sizes"}, flush=True)
        rows.append(row)
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
                  open(os.path.join(os.environ.get("OUT", "."), "pdl-probe.json"), "w"), indent=1)


if __name__ == "__main__":
    main(set(sys.argv[1:]))
