"""Causal attention with Gemma 2's logit soft-capping: softmax(mask(CAP tanh(Q K^T / (sqrt(d_h)
CAP)))) V per head, CAP = 50 (the scaled score capped to (-50, 50) smoothly)."""
from leantile.dag import DagM, build_graph_with_output
from leantile.architectures.variants import flex_paths, working

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}
CAP = 50.0


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))   # [h, t_q, t_kv]
    capped = g.mul(g.tanh(g.div(s, g.const(CAP))), g.const(CAP))
    q_pos, k_pos = g.iota("t_q"), g.iota("t_kv")
    masked = g.select(g.le(k_pos, q_pos), capped, g.const("-inf"))
    return g.matmul(g.softmax(masked, "t_kv"), v, "t_kv", "t_kv")           # [h, t_q, d_h]


def build(**sizes):
    return build_graph_with_output("softcap_attention", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    import math

    import torch

    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
    keep = torch.ones(tq, tkv, dtype=torch.bool, device=t["Q"].device).tril()

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float() / math.sqrt(t["Q"].shape[-1])
        s = (CAP * torch.tanh(s / CAP)).masked_fill(~keep, float("-inf"))
        return torch.softmax(s, -1).to(t["V"].dtype) @ t["V"]

    def softcap(score, b, h, q_idx, kv_idx):
        return CAP * torch.tanh(score / CAP)
    return eager, working(flex_paths(t, softcap, lambda b, h, q, kv: kv <= q))
