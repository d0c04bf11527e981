"""The rewrite rules, as data: one row per rule with the Lean theorem that justifies it.

This table is the single source of rule -> theorem names: the derivation engine cites it
in every step it records, `leantile check-lean` checks exactly these theorems, and the
reports print the statements below.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    theorem: str  # Lean name, in lean/LeanTile/Rules/
    pattern: str  # what the rule matches in the graph (node ops, by role)
    rewrite: str  # what the plan does instead
    statement: str  # the lemma in plain words (over the reals)


RULES: tuple[Rule, ...] = (
    Rule("fuse_elementwise", "LeanTile.fuse_elementwise_eval",
         "elementwise nodes whose inputs are already in registers",
         "evaluate them in the producing kernel's epilogue, no global intermediate",
         "evaluating a composition of elementwise maps pointwise equals composing the evaluated maps"),
    Rule("softmax_shift", "LeanTile.softmax_shift_invariant",
         "exp(s - max s) / sum exp(s - max s)",
         "any running shift m may replace max s",
         "softmax(s - c) = softmax(s) for every constant c"),
    Rule("online_softmax", "LeanTile.online_softmax_ratio",
         "matmul(Q,K) -> softmax over t -> matmul(P,V) over t",
         "stream t in blocks with state (m, l, o), rescaling l and o by exp(m_old - m_new)",
         "folding (m, l, o) over any list of tiles from any m0 ends with o / l = sum exp(s) v / sum exp(s), "
         "the softmax-weighted sum of v (online_softmax_fold gives l and o themselves)"),
    Rule("exp_to_exp2", "LeanTile.exp_eq_exp2_mul_log2e",
         "exp(x) inside a fused kernel",
         "exp2(x * log2 e), folding log2 e into the multiply-add before it",
         "exp x = 2 ^ (x * log2 e)"),
    Rule("scale_pullout", "LeanTile.scale_pullout_right",
         "matmul(mul(X, s), W) with s constant along the contraction axis",
         "s * matmul(X, W): the per-row scale moves to the GEMM epilogue",
         "sum_k (x_k s) w_k = s sum_k x_k w_k (the graph's mul(X, s) has the scale second)"),
    Rule("mean_pullout", "LeanTile.mean_pullout",
         "matmul(sub(X, mu), W) with mu constant along the contraction axis",
         "matmul(X, W) - mu * colsum(W)",
         "sum_k (x_k - mu) w_k = sum_k x_k w_k - mu sum_k w_k"),
    Rule("variance_expand", "LeanTile.sum_sq_sub_pivot",
         "sum_k square(x_k - mu) with mu constant along k",
         "sums of x - p and (x - p)^2, p the row's first element, stream with the GEMM; "
         "then sum (x-p)^2 - 2 (mu-p) sum (x-p) + n (mu-p)^2 (shifted: no cancellation when |mu| >> sigma)",
         "sum_k (x_k - mu)^2 = sum_k (x_k - p)^2 - 2 (mu - p) sum_k (x_k - p) + n (mu - p)^2 for every p"),
    Rule("stream_stats", "LeanTile.sum_split_range",
         "row sums over the contraction axis of elementwise functions of X",
         "accumulate them block by block while the GEMM streams the axis (or in their own kernel)",
         "a sum over a range split into consecutive tiles is the sum of the tile sums"),
    Rule("dual_gemm", "LeanTile.dual_gemm_shared_lhs",
         "two matmuls of the same LHS over the same axis",
         "one loop loads the LHS tile once and feeds both products",
         "the fused loop over k computes both contractions at once"),
)

BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}
THEOREMS: dict[str, str] = {r.name: r.theorem for r in RULES}
# The end-to-end lemma the attention derivation also rests on (cited by reports).
END_TO_END = {"attention": "LeanTile.tiled_attention_eq_softmax"}


def rule(name: str) -> Rule:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r} (rules: {', '.join(BY_NAME)})") from None
