"""How many waves of CTAs should a split streamed reduction fill? The suite's LayerNorm over (c, h, w)
of 16 x 64 x 256 x 256 (flatten_reduction, variance_expand: one split statistics pass) at
rules.split._splits' waves = 2 (shipped), 4, 8, timed by leantile.bench.run_one against
torch.compile in one process. Prints a line per variant, writes JSON.

    python benchmarks/split_reduction/waves_probe.py [--out DIR] [--waves 2,4,8] [--case layernorm_chw]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "split_reduction" / "results"))
    ap.add_argument("--waves", default="2,4,8")
    ap.add_argument("--case", default="layernorm_chw", help="comma list of examples/reductions.py cases")
    a = ap.parse_args(argv)
    from fusion_suite import workloads

    from leantile.bench import run_one
    from leantile.derive.rules import split
    real, cap = split._splits, split.MAX_REDUCTION_SPLITS
    rows = []
    for (name, g, fn, _), waves in [(w, v) for w in workloads("reductions") if w[0] in a.case.split(",")
                                    for v in map(int, a.waves.split(","))]:
        split._splits = lambda *args, waves=waves, **kw: real(*args, **{**kw, "waves": waves})
        split.MAX_REDUCTION_SPLITS = max(cap, 1024)
        try:
            r = run_one(g, eager=fn)
        finally:
            split._splits, split.MAX_REDUCTION_SPLITS = real, cap
        gm = r["gpu_ms"]
        rows.append({"case": name, "waves": waves, "kernels": r.get("kernels"), "gpu_ms": gm})
        print(f"{name} waves {waves}: leantile {gm['leantile']:.4f} ms  compile {gm['compile']:.4f} ms  "
              f"x{gm['compile'] / gm['leantile']:.2f}", flush=True)
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "waves.json.tmp"
        tmp.write_text(json.dumps(rows, indent=1, default=str))
        tmp.replace(out / "waves.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
