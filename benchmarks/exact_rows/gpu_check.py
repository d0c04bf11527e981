"""Rows held on chip at a multiple of 2048 rather than a power of two (rules/regions.padded: a
width that is a multiple of 1024; exact before 2026-11-29's crash fix) on the GPU: each form's
shipped default plan, compiled and verified
(leantile Kernel.verify: NaN-poisoned outputs against the float32 reference, the dtype's
tolerance) at widths 3072, 5120, 6144, 7168 and row counts that fill no block (1, 33) or many
(8192). Prints one line per plan and the count of bad ones; exit status 1 if any.

    python benchmarks/exact_rows/gpu_check.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "examples"):
    sys.path.insert(0, str(p))


def main() -> int:
    import reductions

    import leantile
    shapes = [("layernorm_affine", 33, 5120), ("layernorm_affine", 1, 3072), ("layernorm_affine", 8192, 6144),
              ("log_softmax", 33, 7168), ("log_softmax", 1000, 5120), ("add_rmsnorm", 33, 3072),
              ("add_rmsnorm", 4096, 5120), ("layernorm_affine", 7, 7168)]
    bad = 0
    for name, m, d in shapes:
        try:
            k = leantile.compile(reductions.graph(name, m=m, d=d))
            v = k.verify()
            blocks = sorted({t.block for kk in k.plan.kernels for t in kk.grid if t.axis == "d"})
            ok = v["ok"]
            line = f"{'ok ' if ok else 'BAD'} {name} m={m} d={d} {k.plan.candidate} d-blocks {blocks} rel_err {v['rel_err']}"
        except Exception as e:  # a crash is as bad as a wrong number
            ok, line = False, f"BAD {name} m={m} d={d} crashed: {type(e).__name__}: {str(e)[:300]}"
        bad += not ok
        print(line, flush=True)
    print(f"bad {bad} of {len(shapes)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
