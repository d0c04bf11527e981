"""softmax(Q K^T / sqrt(d_h)) V per head: attention with the usual scale.

A user architecture (not built in): the scale is written as the graph says it,
`div(scores, sqrt(sizeConst d_h))`; the derivation folds the constant 1/sqrt(d_h) into the
exp2 multiplier (exp(s/c - m) = exp2(s * (log2 e / c) - m')), so the kernel has no division.
Lean source: lean/LeanTile/Architectures/AttentionScaled.lean.
"""
from leantile.dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    scores = g.matmul(q, k, "d_h", "d_h")                 # [h, t_q, t_kv]
    scale = g.sqrt(g.size_const("d_h"))                   # sqrt(d_h), a scalar
    p = g.softmax(g.div(scores, scale), "t_kv")
    return g.matmul(p, v, "t_kv", "t_kv")                 # [h, t_q, d_h]


def build(**sizes):
    return build_graph_with_output("attention_scaled", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import math

    import torch

    from leantile.architectures.attention import sdpa_paths

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float() / math.sqrt(t["Q"].shape[-1])
        return torch.softmax(s, -1).to(t["V"].dtype) @ t["V"]
    return eager, sdpa_paths(t, scale=None)
