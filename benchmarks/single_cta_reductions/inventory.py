"""Which default plans reduce a long axis on too few CTAs? (issue 49: "no kernel reduces an axis
longer than 8192 on a single CTA"). CPU only: derive each case's default plan (cost.choose, the
plan leantile.compile runs without a tuned entry) and, per kernel that reduces (a Reduce
statement), how many CTAs it launches and how many elements of the reduced axis one CTA covers
(a streamed axis: its whole extent, or its slice where the stream is split over CTAs; an axis
held on chip: its tile's block, or the whole axis where the grid does not tile it).

Cases: the fusion cases of examples/fusion.py, the losses of tests/loss_graphs.py at the sizes
issue 46 found them at, issue 49's forms (examples/reductions.py) and, with --generated N, N graphs
of the GPU campaign's reduction families at its sizes. A kernel is flagged where one CTA reduces more than LONG elements and the
kernel launches fewer CTAs than the target has SMs (a reduction the GPU cannot spread).

    python3 benchmarks/single_cta_reductions/inventory.py [--out FILE] [--generated N]
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "tests", ROOT / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from leantile.cost import LONG_REDUCTION as LONG  # noqa: E402  (the issue's bound on the elements one CTA reduces)


def _flagged(r: dict, sms: int) -> bool:
    return r["per_cta"] > LONG and r["ctas"] < sms


def cases():
    """(name, graph) of every case."""
    import fusion
    import loss_graphs

    for name in fusion.CASES:
        yield name, fusion.graph(name)
    for loss, sizes in loss_graphs.FAILING:
        yield f"{loss} " + " ".join(f"{a}={v}" for a, v in sizes.items()), loss_graphs.build(loss, sizes)


def reduction_cases():
    """(name, graph) of issue 49's forms (examples/reductions.py) at their benchmark shapes and at
    the sizes the issue names (a norm over 112 x 64 x 512 x 512; a loss over 2^24 elements)."""
    import reductions

    for name in reductions.cases():
        yield f"reductions/{name}", reductions.graph(name)
    yield "reductions/layernorm_chw 112x64x512x512", reductions.graph("layernorm_chw", n=112, c=64, h=512, w=512)
    yield "reductions/groupnorm 112x8x8x512x512", reductions.graph("groupnorm", n=112, g=8, cg=8, h=512, w=512)
    yield "reductions/mse_loss 4096x4096", reductions.graph("mse_loss", **{a: 4096 for a in reductions.graph("mse_loss").axes})


def generated_cases(count: int, seed: int = 0):
    """(name, graph) of `count` graphs of the GPU campaign's reduction families (long reductions,
    norms over several axes, losses, reductions, softmax and norm -> GEMM users, row epilogues
    streamed twice, pooled GEMMs) at the campaign's
    GPU sizes (benchmarks/gpu_fuzz_parts: axes up to 2^17 + 1)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_fuzz_parts.families import families, graph_stream
    from gpu_fuzz_parts.sizes import Profile

    names = ("long_reductions", "axis_norms", "losses", "reductions", "user_softmax", "user_norm_gemm", "row_epilogues",
             "pooled_gemm")
    fams = {k: v for k, v in families().items() if k in names}
    stream = graph_stream(seed, fams, ["f16", "bf16", "f32"], Profile("cuda", 2 ** 26, 2.0 ** 37))
    for i in range(count):
        fam, g, dtype, _ = next(stream)
        yield f"{fam} {dtype} " + " ".join(f"{a}={v}" for a, v in g.axes.items()), g


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="write the rows here (JSON)")
    ap.add_argument("--generated", type=int, default=0,
                    help="also this many graphs of the GPU campaign's reduction families at its sizes")
    a = ap.parse_args(argv)
    from leantile.cost import choose, ctas, reductions_per_cta
    from leantile.target import DEFAULT

    rows = []
    print(f"{'case':40s} {'candidate':34s} {'kernels':>7s}  worst reducing kernel (CTAs, elements one CTA reduces)")
    every = itertools.chain(cases(), reduction_cases(), generated_cases(a.generated) if a.generated else ())
    for name, g in every:
        try:
            plan = choose(g)[0]
        except Exception as e:  # a graph no candidate serves: reported, not counted as flagged
            print(f"{name[:40]:40s} no plan: {type(e).__name__}: {str(e)[:120]}")
            rows.append({"case": name, "error": f"{type(e).__name__}: {e}"[:300], "flagged": False})
            continue
        worst, rank = None, None
        for k in plan.kernels:
            for axis, n in reductions_per_cta(plan, k):
                r = {"kernel": k.name, "axis": axis, "per_cta": n, "ctas": ctas(plan, k)}
                key = (_flagged(r, DEFAULT.sms), n, -r["ctas"])  # a flagged one first, then the longest
                if rank is None or key > rank:
                    worst, rank = r, key
        flagged = bool(worst and _flagged(worst, DEFAULT.sms))
        rows.append({"case": name, "candidate": plan.candidate, "kernels": len(plan.kernels), "worst": worst,
                     "flagged": flagged})
        w = f"{worst['kernel']} over {worst['axis']}: {worst['ctas']} CTAs x {worst['per_cta']}" if worst else "-"
        print(f"{name[:40]:40s} {plan.candidate[:34]:34s} {len(plan.kernels):7d}  {w}{'   <-- long, few CTAs' if flagged else ''}")
    print(f"\n{sum(r['flagged'] for r in rows)} of {len(rows)} cases reduce more than {LONG} elements on one CTA "
          f"in a kernel of fewer than {DEFAULT.sms} CTAs (target {DEFAULT.name})")
    if a.out:
        from leantile.files import write_atomic
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(a.out, json.dumps({"long": LONG, "target": DEFAULT.name, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
