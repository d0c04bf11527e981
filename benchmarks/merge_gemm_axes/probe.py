"""Does merge_gemm_axes (a plain GEMM's rows or columns over several axes as one GEMM over their
product) pay? Times each shape's shipped plan with the merge and without it (find_free_merge
switched off in this process only) against torch eager (cuBLAS: torch.matmul folds the leading
axes itself) and torch.compile, in one process (leantile.bench.run_one: do_bench_cudagraph).

    python benchmarks/merge_gemm_axes/probe.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (name, row axes, column axes, k): decode-like activations, a short batch of sequences, a
# per-head weight of 64-wide heads
SHAPES = [("decode_rows", {"b": 64, "t": 1}, {"n": 4096}, 4096),
          ("batch_rows", {"b": 4, "t": 100}, {"n": 4096}, 4096),
          ("head_cols", {"m": 4096}, {"h": 32, "d_h": 64}, 4096)]


def graph(name, rows, cols, k):
    from leantile.dag import DagM
    g = DagM(name, {**rows, **cols, "k": k})
    g.output("out", g.matmul(g.input("X", [*rows, "k"], "f16"), g.input("W", ["k", *cols], "f16"), "k", "k"))
    return g.graph()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/merge_gemm_axes/results")
    args = ap.parse_args(argv)
    import torch

    from leantile.bench import run_one
    from leantile.derive.rules import flatten

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_out = []
    on = flatten.find_free_merge
    for name, rows, cols, k in SHAPES:
        g = graph(name, rows, cols, k)
        eager = lambda t: torch.matmul(t["X"], t["W"].reshape(k, -1)).reshape(*t["X"].shape[:-1], *t["W"].shape[1:])  # noqa: E731
        for merged in (True, False):
            flatten.find_free_merge = on if merged else (lambda g: None)
            try:
                r = run_one(g, eager=eager)
            except Exception as e:  # noqa: BLE001 (a failing shape is reported, the others go on)
                rows_out.append({"case": name, "merged": merged, "error": f"{type(e).__name__}: {e}"[:300]})
                print(name, merged, "error", e, flush=True)
                continue
            finally:
                flatten.find_free_merge = on
            gm = r["gpu_ms"]
            rows_out.append({"case": name, "merged": merged, "ok": r["ok"], "tiles": r["tiles"], "candidate": r["candidate"],
                             "gpu_ms": gm})
            print(f"{name:12s} merged={merged!s:5s} ok {r['ok']} leantile {gm['leantile']:.4f} ms  cuBLAS/eager "
                  f"{gm['eager']:.4f}  compile {gm['compile']:.4f}  x{gm['compile'] / gm['leantile']:.2f} vs compile", flush=True)
        tmp = out / "merge-gemm-axes.json.tmp"
        tmp.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, indent=1, default=str))
        tmp.replace(out / "merge-gemm-axes.json")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "python"))
    sys.exit(main())
