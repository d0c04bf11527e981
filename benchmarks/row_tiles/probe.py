"""Rows per CTA and threads of on-chip row kernels (rules.row_tiles.row_block / row_threads), probed
on whole plans: for each case (forward or backward of a train-suite graph, or a reductions-suite
graph) the plan's GPU time (Kernel.benchmark: do_bench_cudagraph median) at the shipped rows and
threads and at each setting `ROWSxTHREADS` (every on-chip row kernel of the plan capped at ROWS rows
per CTA and run on THREADS threads), in one process. Prints a table, writes JSON after each row.

    python benchmarks/row_tiles/probe.py --out DIR [--settings 2x256,threads=128+two_pass=131072,...] [CASE ...]

A setting: `RxT` (on-chip row kernels at R rows a CTA on T threads), `threads=N`, `stages=N`,
`stage_loads=1` (tile parameters: a streamed row kernel's threads, its stream's stages, its loads
staged through shared memory), `two_pass=B`, `stream_block=N` (rules.row_tiles'
TWO_PASS_BYTES, STREAM_BLOCK), joined by '+'.

A case is `train:<name>:fwd`, `train:<name>:bwd`, `red:<name>` (examples/reductions.py) or
`fus:<name>` (examples/fusion.py), optionally followed by sizes that
replace the case's own (`train:rmsnorm_gain:bwd:d=8192:m=4096`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "fusion"))

CASES = ["train:rmsnorm_gain:fwd", "train:rmsnorm_gain:bwd", "train:layernorm_affine:fwd",
         "train:layernorm_affine:bwd", "train:rmsnorm:bwd", "red:layernorm_affine", "red:add_rmsnorm"]
SETTINGS = ["2x256", "2x128", "2x512", "4x512"]


def graph_of(case: str):
    kind, name, *rest = case.split(":")
    sizes = dict((k, int(v)) for k, v in (x.split("=") for x in rest if "=" in x))
    side = [x for x in rest if "=" not in x]
    if kind in ("red", "fus"):
        import fusion_suite
        which = "reductions" if kind == "red" else "fusion"
        g = next(g for n, g, _, _ in fusion_suite.workloads(which) if n == name)
        return g.model_copy(update={"axes": {**g.axes, **sizes}}) if sizes else g
    from leantile import autodiff
    from leantile.train_bench import cases
    g = next(c for c in cases(lambda n, shape: {**shape, **sizes} if n == name else shape) if c.name == name).graph
    if side == ["bwd"]:
        return autodiff.vjp(g).graph
    fwd, _ = autodiff.training_forward(g)
    return fwd or g


def apply(setting: str, shipped: dict) -> dict | None:
    """Set what `setting` names (the shipped values first; items joined by '+'): `RxT` caps every
    on-chip row kernel at R rows a CTA on T threads; `threads=N` is the tile parameter (a streamed
    row kernel's threads); `two_pass=B` rules.row_tiles.TWO_PASS_BYTES; `stream_block=N` its
    STREAM_BLOCK; `map_tile=N`, `map_threads=N` region_kernels.MAP_TILE, MAP_THREADS (map kernels'
    elements and threads a CTA). Returns the tiles to derive with (None: the shape's)."""
    from leantile.derive import region_kernels
    from leantile.derive.rules import row_tiles
    region_kernels.row_block, region_kernels.row_threads = shipped["row_block"], shipped["row_threads"]
    row_tiles.TWO_PASS_BYTES, row_tiles.STREAM_BLOCK = shipped["TWO_PASS_BYTES"], shipped["STREAM_BLOCK"]
    region_kernels.MAP_TILE, region_kernels.MAP_THREADS = shipped["MAP_TILE"], shipped["MAP_THREADS"]
    tiles = None
    for item in ([] if setting == "shipped" else setting.split("+")):
        key, _, value = item.partition("=")
        if key in ("threads", "stages", "stage_loads"):  # tile parameters (leantile.tiles.TUNABLE)
            tiles = {**(tiles or {}), key: int(value)}
        elif key == "two_pass":
            row_tiles.TWO_PASS_BYTES = int(value)
        elif key == "stream_block":
            row_tiles.STREAM_BLOCK = int(value)
        elif key == "map_tile":
            region_kernels.MAP_TILE = int(value)
        elif key == "map_threads":
            region_kernels.MAP_THREADS = int(value)
        else:
            cap, threads = (int(x) for x in item.split("x"))
            block = shipped["row_block"]
            region_kernels.row_block = lambda cx, axes, reduced, cap=cap, block=block: (
                None if block(cx, axes, reduced) is None else min(cap, block(cx, axes, reduced)))
            region_kernels.row_threads = lambda cx, axes, reduced, threads=threads: threads
    return tiles


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma list of ROWSxTHREADS")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds; later rows are skipped")
    ap.add_argument("cases", nargs="*", default=CASES)
    args = ap.parse_args(argv)
    args.settings = [x for x in args.settings.split(",") if x]
    import torch

    from leantile.derive import region_kernels
    from leantile.derive.rules import row_tiles
    from leantile.derive.engine import derive
    from leantile.plan import launches
    from leantile.runtime import Kernel
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shipped = {"row_block": region_kernels.row_block, "row_threads": region_kernels.row_threads,
               "TWO_PASS_BYTES": row_tiles.TWO_PASS_BYTES, "STREAM_BLOCK": row_tiles.STREAM_BLOCK,
               "MAP_TILE": region_kernels.MAP_TILE, "MAP_THREADS": region_kernels.MAP_THREADS}
    rows, t0 = [], time.time()
    for case in args.cases:
        g = graph_of(case)
        row = {"case": case, "shape": dict(g.axes), "ms": {}}
        inputs = None
        for setting in ["shipped", *args.settings]:
            if time.time() - t0 > args.budget:
                break
            tiles = apply(setting, shipped)
            try:
                plan = derive(g, None, tiles)
                k = Kernel(g, plan, "probe", torch.device("cuda", 0))
                inputs = inputs or k.random_inputs()
                v = k.verify(inputs)
                if not v["ok"]:  # a setting that computes something else is no candidate
                    raise AssertionError(f"wrong: {v['rel_err']}")
                row["ms"][setting] = k.benchmark(inputs)
                row.setdefault("kernels", [x.name for x in launches(plan)])
                row.setdefault("rows_threads", {})[setting] = [
                    (x.name, x.grid[0].block if x.grid else None, x.threads) for x in launches(plan)]
            except Exception as e:  # a setting that does not compile is reported, the others go on
                row["ms"][setting] = f"{type(e).__name__}: {e}"[:200]
            print(case, setting, row["ms"][setting], flush=True)
        apply("shipped", shipped)
        rows.append(row)
        tmp = out / "row-tiles-probe.json.tmp"
        tmp.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
        tmp.replace(out / "row-tiles-probe.json")
    print("| case | " + " | ".join(["shipped", *args.settings]) + " |")
    for r in rows:
        cells = [f"{v:.4f}" if isinstance(v, float) else "err" for v in (r["ms"].get(s, "-") for s in
                                                                            ["shipped", *args.settings])]
        print(f"| {r['case']} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
