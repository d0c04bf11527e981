"""The rewrite rules, one executable unit each (base.Rule), grouped by the sites they share:

    softmax.py  softmax_shift, online_softmax, exp_to_exp2   (softmax rows, attention; exp_to_exp2
                also a row kernel's exp(s - max s): regions.shifted_exps)
    pullout.py  scale_pullout, mean_pullout, gain_fold       (a GEMM's normalised LHS, a norm's gain)
    stats.py    variance_expand, stream_stats                (the row sums the pullouts need)
    gemm.py     dual_gemm, fuse_elementwise                  (GEMM sites and their options)
    pool.py     fuse_pool_epilogue                           (pooling over a GEMM weight's last axis)
    row_epilogue.py fuse_row_epilogue                        (a norm over a GEMM's whole column tile)
    regions.py  fuse_reduction, online_sum (fuse_elementwise) (whatever no pattern claims)
    split.py    split_k, split_kv, split_row, split_reduction (a grid too small for the GPU)
    masks.py    skip_masked_tiles                        (attention under a position mask)
    mask_bounds.py mask_bounds                           (a mask reading run-time ids: its key bounds computed)
    group.py    pack_query_group                         (grouped-query attention: heads share K, V)
    flatten.py  flatten_reduction, merge_gemm_axes       (nested reductions over adjacent axes: one;
                a plain GEMM's rows or columns over several axes: one)
    flash_backward.py flash_backward                     (attention's backward: three kernels, no score matrix stored)

Every table about rules is derived from RULES: rule -> theorem (cited in every step, checked
by `leantile check-lean`), -> Lean file, -> parameter meanings, -> formula and sympy check.
"""
from __future__ import annotations

from .base import Option, Rule  # noqa: F401
from .flash_backward import FLASH_BWD
from .flatten import FLATTEN, MERGE_AXES
from .gemm import DUAL, EPILOGUE
from .group import PACK
from .mask_bounds import MASK_BOUNDS
from .masks import SKIP
from .pool import POOL
from .pullout import GAIN, MEAN, SCALE
from .regions import FUSE_REDUCTION, ONLINE_SUM
from .row_epilogue import ROWS
from .softmax import EXP2, ONLINE, SHIFT
from .split import SPLIT_K, SPLIT_KV, SPLIT_REDUCTION, SPLIT_ROW
from .stats import STATS, VARIANCE

RULES: tuple[Rule, ...] = (EPILOGUE, SHIFT, ONLINE, EXP2, SCALE, MEAN, VARIANCE, STATS, DUAL, FUSE_REDUCTION, ONLINE_SUM,
                          SPLIT_K, SPLIT_KV, SPLIT_ROW, SPLIT_REDUCTION, SKIP, PACK, POOL,
                          GAIN, FLATTEN, ROWS, FLASH_BWD, MERGE_AXES, MASK_BOUNDS)

BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
THEOREMS: dict[str, str] = {r.name: r.theorem for r in RULES}
THEOREM_FILES: dict[str, str] = {r.theorem: r.lean_file for r in RULES}
# The end-to-end lemma the attention derivation also rests on (cited by reports).
END_TO_END = {"attention": "LeanTile.tiled_attention_eq_softmax"}


def sympy_checks() -> dict:
    """Rule name -> its sympy check (leantile.ir.symbolic), for every rule."""
    return {r.name: r.check for r in RULES}


def run_sympy_checks(rules) -> list[tuple[str, bool | None, str]]:
    """(rule, holds, description) for each rule name, in the given order; None: no such rule."""
    rows = []
    for name in dict.fromkeys(rules):
        r = BY_NAME.get(name)
        rows.append((name, bool(r.check()) if r else None,
                    r.check_description() if r else "no sympy check for this rule"))
    return rows


def rule(name: str) -> Rule:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r} (rules: {', '.join(BY_NAME)})") from None
