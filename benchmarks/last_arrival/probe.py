"""A split reduction's combine as the tail of the slices' launch (plan.passes.last_arrival,
emit.tail) against the same plan with the combine launched apart (tile parameter
last_arrival=0), beside torch.compile of the module a user writes (examples/reductions.py), in
one process: do_bench_cudagraph medians, the best of 3 interleaved rounds. Checks each output
bit for bit between the two plans first. Prints a table, writes JSON.

    python benchmarks/last_arrival/probe.py --out DIR [NAME[,axis=N...] ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

DEFAULT = ["mse_loss", "huber_loss", "hinge_loss", "layernorm_chw", "groupnorm", "bias_grad", "rmsnorm_gain_grad",
           "mse_loss,m=4096,d=4096", "bias_grad,m=4096,n=1024"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args(argv)
    import torch
    import triton.testing as tt

    import leantile
    import reductions
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fns = {n: c.torch for n, c in reductions.cases().items()}
    rows = []
    for spec in args.cases or DEFAULT:
        name, *kv = spec.split(",")
        sizes = {a: int(v) for a, v in (x.split("=") for x in kv)}
        g = reductions.graph(name, **sizes)
        tail = leantile.compile(g, tuned=False)
        apart = leantile.compile(g, tuned=False, tiles={**tail.plan.tiles, "last_arrival": 0})
        inputs = tail.random_inputs(seed=0)
        a, b = tail.run(inputs), apart.run(inputs)
        same = all(torch.equal(a[o], b[o]) for o in a)
        ok = tail.judge(inputs, a)["ok"]
        compiled = torch.compile(fns[name])
        fs = {"tail": lambda: tail.run(inputs, fill=None), "apart": lambda: apart.run(inputs, fill=None),
              "compile": lambda: compiled(inputs)}
        best = {n: float("inf") for n in fs}
        for _ in range(3):
            for n, f in fs.items():
                best[n] = min(best[n], tt.do_bench_cudagraph(f, rep=100, return_mode="median"))
        r = {"case": name, "shape": dict(g.axes), "same_bits": same, "ok": ok,
             "launches": {"tail": len([k for k in tail.plan.kernels if not k.tail_of]), "apart": len(apart.plan.kernels)},
             "ms": best}
        rows.append(r)
        print(f"{spec:28s} same {same} ok {ok} launches {r['launches']['tail']}/{r['launches']['apart']}  "
              f"tail {best['tail']:.4f}  apart {best['apart']:.4f}  compile {best['compile']:.4f}  "
              f"tail/apart x{best['apart'] / best['tail']:.3f}  vs compile x{best['compile'] / best['tail']:.2f}", flush=True)
        (out / "last-arrival.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
