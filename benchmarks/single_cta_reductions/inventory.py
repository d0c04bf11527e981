"""Which default plans reduce a long axis on too few CTAs? (issue 49: "no kernel reduces an axis
longer than 8192 on a single CTA"). CPU only: derive each case's default plan (cost.choose, the
plan leantile.compile runs without a tuned entry) and, per kernel that reduces (a Reduce
statement), how many CTAs it launches and how many elements of the reduced axis one CTA covers
(a streamed axis: its whole extent, or its slice where the stream is split over CTAs; an axis
held on chip: its tile's block, or the whole axis where the grid does not tile it).

Cases: the fusion cases of examples/fusion.py and the losses of tests/loss_graphs.py at the sizes
issue 46 found them at. A kernel is flagged where one CTA reduces more than LONG elements and the
kernel launches fewer CTAs than the target has SMs (a reduction the GPU cannot spread).

    python3 benchmarks/single_cta_reductions/inventory.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "tests", ROOT / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

LONG = 8192  # the bound on the elements one CTA reduces


def _statements(k):
    return [*k.prologue, *k.body, *k.epilogue]


def reductions_per_cta(plan, k) -> list[tuple[str, int]]:
    """(axis, elements one CTA reduces) for each Reduce statement of kernel k."""
    from leantile.plan import Reduce

    tiled = {t.axis: t.block for t in k.grid}
    out = []
    for s in _statements(k):
        if not isinstance(s, Reduce):
            continue
        extent = plan.axes[s.axis]
        st = k.stream
        if st is not None and (s.axis == st.axis or s.axis in st.aliases):
            if st.split:  # a slice of ceil(blocks / splits) blocks per CTA
                blocks = math.ceil(extent / st.block)
                extent = min(extent, math.ceil(blocks / plan.axes[st.split]) * st.block)
        elif s.axis in tiled:
            extent = min(extent, tiled[s.axis])
        out.append((s.axis, extent))
    return out


def _flagged(r: dict, sms: int) -> bool:
    return r["per_cta"] > LONG and r["ctas"] < sms


def ctas(plan, k) -> int:
    return math.prod(math.ceil(plan.axes[t.axis] / t.block) for t in k.grid)


def cases():
    """(name, graph) of every case."""
    import fusion
    import loss_graphs

    for name in fusion.CASES:
        yield name, fusion.graph(name)
    for loss, sizes in loss_graphs.FAILING:
        yield f"{loss} " + " ".join(f"{a}={v}" for a, v in sizes.items()), loss_graphs.build(loss, sizes)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="write the rows here (JSON)")
    a = ap.parse_args(argv)
    from leantile.cost import choose
    from leantile.target import DEFAULT

    rows = []
    print(f"{'case':40s} {'candidate':34s} {'kernels':>7s}  worst reducing kernel (CTAs, elements one CTA reduces)")
    for name, g in cases():
        plan = choose(g)[0]
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
        print(f"{name:40s} {plan.candidate[:34]:34s} {len(plan.kernels):7d}  {w}{'   <-- long, few CTAs' if flagged else ''}")
    print(f"\n{sum(r['flagged'] for r in rows)} of {len(rows)} cases reduce more than {LONG} elements on one CTA "
          f"in a kernel of fewer than {DEFAULT.sms} CTAs (target {DEFAULT.name})")
    if a.out:
        from leantile.files import write_atomic
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(a.out, json.dumps({"long": LONG, "target": DEFAULT.name, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
