"""split_reduction on the GPU (issue 49: "no kernel reduces an axis longer than 8192 on a single
CTA"): reductions of a long axis into a scalar or a few rows, timed as the shipped default
(split over CTAs) against the unsplit fused candidate (one CTA streams the axis), torch eager and
torch.compile of what a PyTorch user writes, in one process (leantile.bench.run_one:
do_bench_cudagraph medians). Each leantile row is verified against the float32 reference first.
Prints a table, writes JSON.

    python benchmarks/split_reduction/split_reduction_bench.py [--out DIR] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "tests"):
    sys.path.insert(0, str(p))


def _cases():
    import torch
    import torch.nn.functional as F

    import loss_graphs as LG
    from leantile import dag

    def sum_sq(n):
        def body(g):
            return g.red("sum", g.square(g.input("X", ["n"], "f32")), "n")
        return dag.build_graph_with_output("sum_sq", {"n": n}, body)

    def lse_rows(r, n):
        def body(g):
            x = g.input("X", ["r", "n"], "f16")
            m = g.red("max", x, "n")
            return g.add(m, g.log(g.red("sum", g.exp(g.sub(x, m)), "n")))
        return dag.build_graph_with_output("lse_rows", {"r": r, "n": n}, body)

    def ce(t):
        return F.cross_entropy(t["P"], t["T"].long())

    def kl(t):
        return F.kl_div(F.log_softmax(t["Q"], -1), F.log_softmax(t["P"], -1), reduction="batchmean", log_target=True)

    def triplet(t):
        a, p, n = t["A"], t["P"], t["N"]
        return torch.clamp((a - p).norm(dim=1) - (a - n).norm(dim=1) + 1.0, min=0).mean()
    return {
        "cross_entropy_32768x64": (LG.build("cross_entropy", {"b": 32768, "c": 64}), ce, True),
        "cross_entropy_65537x64": (LG.build("cross_entropy", {"b": 65537, "c": 64}), ce, True),
        "cross_entropy_32768x4096": (LG.build("cross_entropy", {"b": 32768, "c": 4096}), ce, True),
        "kl_batchmean_16384x16384": (LG.build("kl_batchmean", {"b": 16384, "c": 16384}), kl, True),
        "triplet_margin_32768x8192": (LG.build("triplet_margin", {"b": 32768, "d": 8192}), triplet, True),
        "cross_entropy_8x128256": (LG.build("cross_entropy", {"b": 8, "c": 128256}), ce, True),
        "sum_sq_2^24": (sum_sq(1 << 24), lambda t: (t["X"] * t["X"]).sum(), False),
        "lse_rows_4x262144": (lse_rows(4, 262144), lambda t: torch.logsumexp(t["X"].float(), -1), False),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "split_reduction" / "results"))
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args(argv)
    import torch

    import loss_graphs as LG
    from leantile.bench import run_one
    from leantile.derive import candidates

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    f = out / f"split-reduction-{gpu.split()[-1].lower()}-{date.today().isoformat()}.json"

    def save(rows):  # after every row (temporary file, then rename): a call's time limit keeps what ran
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps({"gpu": gpu, "torch": torch.__version__, "rows": rows}, indent=1, default=str))
        tmp.replace(f)
    rows = []
    for name, (g, user, loss) in _cases().items():
        if a.only and name not in a.only:
            continue
        names = [c.name for c in candidates(g)]
        inputs = LG.loss_inputs(g, seed=0, device="cuda") if loss else None
        for cand in (None, "fused"):
            if cand and cand not in names:
                continue
            try:
                r = run_one(g, tuned=False, candidate=cand, eager=user, inputs=inputs)
            except Exception as e:  # a row that fails is reported, not fatal
                traceback.print_exc()
                r = {"arch": g.name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            r.update(case=name, asked=cand or "default")
            rows.append(r)
            save(rows)
            ms = r.get("gpu_ms", {})
            print(f"{name:28s} {r['asked']:8s} {r.get('candidate', '-'):8s} ok={r.get('ok')} "
                  f"kernels={len(r.get('kernels', []))} leantile {ms.get('leantile', float('nan')):.4f} ms "
                  f"eager {ms.get('eager', float('nan')):.4f} compile {ms.get('compile', float('nan')):.4f} "
                  f"-> {ms.get('compile', float('nan')) / ms.get('leantile', float('nan')):.2f}x compile", flush=True)
    save(rows)
    print("->", f)
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
