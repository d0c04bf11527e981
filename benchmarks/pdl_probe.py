"""Probe behind issue 18's norm -> GEMM item: programmatic dependent launch (PDL) between the
kernels of a plan. Every kernel but the last calls T.pdl_trigger() at the start of its body
(its dependents may be scheduled at once), every kernel but the first T.pdl_sync() before its
first statement (it waits there for the kernel before it to finish and flush): the GEMM's
launch and prologue overlap the statistics kernel instead of following it. GPU time
(do_bench_cudagraph) of the plan as emitted and as patched, against the cuBLAS matmul alone.

    python benchmarks/pdl_probe.py      (on a GPU; writes $OUT/pdl-probe.json)
"""
import json
import os
import re
import sys

import torch

sys.path.insert(0, "python")
from leantile.derive import derive  # noqa: E402
from leantile.emit import emit_module, load_module  # noqa: E402
from leantile.sources import load_source  # noqa: E402
from leantile.reference import evaluate  # noqa: E402

CASES = [  # (source, sizes, candidate, the GEMM's inputs (A, B) for the matmul-alone baseline)
    ("layernorm_linear_gelu", {}, "prenorm", ("X", "W")),
    ("layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072}, "prenorm", ("X", "W")),
    ("rmsnorm", {}, "stats_separate", ("X", "W")),
    ("rmsnorm", {}, "prenorm", ("X", "W")),
]


def patch(src: str) -> str:
    """The module with PDL: trigger at the start of every kernel but the last, sync at the
    start of every kernel but the first (the first statement comment of each prim_func)."""
    names = [m.group(1) for m in re.finditer(r"^def (\w+)\(.*\*\*_unused\):", src, re.M)]
    lines, out, current = src.split("\n"), [], None
    done = set()
    for line in lines:
        m = re.match(r"^def (\w+)\(", line)
        if m and m.group(1) in names:
            current = m.group(1)
        s = line.strip()
        if current and current not in done and (s.startswith("# prologue") or s.startswith("# body")):
            ind = line[: len(line) - len(line.lstrip())]
            if current != names[0]:
                out.append(ind + "T.pdl_sync()")
            if current != names[-1]:
                out.append(ind + "T.pdl_trigger()")
            done.add(current)
        out.append(line)
    assert len(done) == len(names), (names, done)
    return "\n".join(out)


def timed(mod, inputs):
    import triton.testing as tt
    kernels = mod.compile_kernels()
    tensors = mod.allocate(inputs)
    mod.run(kernels, tensors)
    return tt.do_bench_cudagraph(lambda: mod.run(kernels, tensors), rep=100, return_mode="median"), \
        mod.run(kernels, tensors)


def main():
    import triton.testing as tt
    out = []
    for source, sizes, cand, (a, b) in CASES:
        g = load_source(source, sizes or None)
        plan = derive(g, cand)
        src = emit_module(plan)
        torch.manual_seed(0)
        inputs = {i.name: torch.randn(*[g.axes[x] for x in i.axes], device="cuda", dtype=torch.float16) * 0.5
                  for i in g.inputs()}
        row = {"case": source, "sizes": dict(g.axes), "candidate": cand}
        try:
            ref = evaluate(g, {k: v.double().cpu() for k, v in inputs.items()})
        except Exception as e:  # recorded: a timing without its check says so in the row
            ref, row["reference_error"] = None, str(e)[:300]
        for how, s in (("plain", src), ("pdl", patch(src))):
            try:
                t, res = timed(load_module(s), inputs)
                row[how] = t
                if ref is not None:
                    (name, y), = res.items()
                    r = list(ref.values())[0] if isinstance(ref, dict) else ref
                    row[how + "_rel_err"] = ((y.double().cpu() - r).abs().max() / r.abs().max()).item()
            except Exception as e:
                row[how + "_error"] = str(e)[:400]
        A, B = inputs[a], inputs[b]
        row["cublas_matmul_alone"] = tt.do_bench_cudagraph(lambda: A @ B, rep=100, return_mode="median")
        print(row, flush=True)
        out.append(row)
    path = os.path.join(os.environ.get("OUT", "."), "pdl-probe.json")
    json.dump({"gpu": torch.cuda.get_device_name(), "rows": out}, open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
