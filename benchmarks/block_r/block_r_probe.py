"""How the row block of the standalone reduction kernels (block_r) changes the tuned kernel.

    python benchmarks/block_r/block_r_probe.py [--arch rmsnorm layernorm_linear_gelu] [--gpus 0]
        [--out benchmarks/block_r/results] [--save-tuned]

For each workload: its tuned point (leantile.tuned lookup, this GPU) with block_r in
{16, 32, 64, 128}, measured as the search measures (compiled on the CPU pool, verified
against the fp32 reference, then do_bench_cudagraph median). block_r=128 is the plan as
measured before block_r existed (for a column-sum kernel it was block_n). Prints a table,
writes OUT/block-r-probe.json and .md; --save-tuned stores the fastest point when it beats
the stored entry.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from leantile.search import Point, Workload
from leantile.search.driver import point_entry
from leantile.search.workers import GpuMeasurer
from leantile.tuned import shipped_dir, load_tuned, save_if_faster

BLOCK_R = (16, 32, 64, 128)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", nargs="+", default=["rmsnorm", "layernorm_linear_gelu"])
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--out", default="benchmarks/block_r/results")
    ap.add_argument("--save-tuned", action="store_true")
    a = ap.parse_args(argv)
    meas = GpuMeasurer([int(x) for x in a.gpus.split(",")])
    rows, lines = [], ["| workload | candidate | other tiles | " + " | ".join(f"block_r={r} ms" for r in BLOCK_R)
                       + " | best / block_r=128 |", "|---|---|---|" + "---|" * (len(BLOCK_R) + 1)]
    try:
        for arch in a.arch:
            wl = Workload.builtin(arch)
            tuned = load_tuned(arch, dict(wl.sizes), wl.dtype, meas.gpu_name)
            if tuned is None:
                print(f"{arch}: no tuned entry for {meas.gpu_name}; skipped", file=sys.stderr)
                continue
            cand, tiles = tuned
            tiles = {k: v for k, v in tiles.items() if k != "block_r"}
            pts = [Point.make(cand, {**tiles, "block_r": r}) for r in BLOCK_R]
            got = meas.measure(wl, pts)
            ms = [m.time_ms if m.ok else None for m in got]
            for p, m in zip(pts, got):
                rows.append({"arch": arch, "point": str(p), "tiles": p.tile_dict, "ok": m.ok, "time_ms": m.time_ms,
                             "error": m.error, "gpu": meas.gpu_name})
                print(json.dumps(rows[-1]), flush=True)
            ok = [(t, p) for t, p in zip(ms, pts) if t is not None]
            base = ms[BLOCK_R.index(128)]
            best_t, best_p = min(ok, key=lambda x: x[0]) if ok else (None, None)
            ratio = f"{best_t / base:.2f}x" if best_t and base else "n/a"
            lines.append(f"| {arch} | {cand} | {tiles} | " + " | ".join(f"{t:.4f}" if t else "fail" for t in ms)
                         + f" | {ratio} |")
            if a.save_tuned and best_p is not None:
                entry = point_entry(wl, best_p, best_t, meas.gpu_name, source="benchmarks/block_r/block_r_probe.py")
                written, kept = save_if_faster(entry, shipped_dir())  # a project tool: results ship
                print(f"wrote {written}" if written else f"{arch}: kept the faster stored entry ({kept['time_ms']} ms)")
    finally:
        meas.close()
    text = f"GPU: {meas.gpu_name}\n\n" + "\n".join(lines) + "\n"
    print("\n" + text)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "block-r-probe.json").write_text(json.dumps({"gpu": meas.gpu_name, "rows": rows}, indent=1) + "\n")
    (out / "block-r-probe.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
