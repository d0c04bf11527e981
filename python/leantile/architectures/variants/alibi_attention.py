"""Causal attention with ALiBi (Press et al.): softmax(mask(Q K^T / sqrt(d_h) - slope[h] |i - j|)) V,
the positions from iota and the slopes an input (the usual 2^(-8 (h + 1) / heads) in
prepare_inputs; any positive values are the same graph)."""
from leantile.dag import DagM, build_graph_with_output
from leantile.architectures.variants import flex_paths, working

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    slope = g.input("slope", ["h"], "f32")
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
    q_pos, k_pos = g.iota("t_q"), g.iota("t_kv")
    biased = g.sub(s, g.mul(slope, g.abs(g.sub(q_pos, k_pos))))
    masked = g.select(g.le(k_pos, q_pos), biased, g.const("-inf"))
    return g.matmul(g.softmax(masked, "t_kv"), v, "t_kv", "t_kv")


def build(**sizes):
    return build_graph_with_output("alibi_attention", {**DEFAULT_SIZES, **sizes}, body)


def prepare_inputs(t: dict) -> dict:
    """ALiBi's slopes 2^(-8 (i + 1) / heads) (the random draw would make some negative)."""
    import torch
    h = t["slope"].shape[0]
    slope = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=t["slope"].dtype)
    return {**t, "slope": slope.to(t["slope"].device)}


def baselines(t: dict):
    import math

    import torch
    import torch.nn.functional as F

    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
    dev = t["Q"].device
    dist = (torch.arange(tq, device=dev)[:, None] - torch.arange(tkv, device=dev)[None, :]).abs().float()
    keep = torch.ones(tq, tkv, dtype=torch.bool, device=dev).tril()
    bias = (-t["slope"].float()[:, None, None] * dist).masked_fill(~keep, float("-inf"))  # [h, t_q, t_kv]

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float() / math.sqrt(t["Q"].shape[-1]) + bias
        return torch.softmax(s, -1).to(t["V"].dtype) @ t["V"]

    slope = t["slope"]

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slope[h] * (q_idx - kv_idx).abs()
    # SDPA with the bias materialised once ([h, t_q, t_kv] in the inputs' dtype; the efficient backend)
    half_bias = bias.to(t["Q"].dtype)[None]
    paths = {"sdpa_bias": lambda: F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None],
                                                                 attn_mask=half_bias)[0]}
    return eager, working({**flex_paths(t, alibi, lambda b, h, q, kv: kv <= q), **paths})
