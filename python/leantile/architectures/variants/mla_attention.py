"""Causal attention with MLA-style head dims (DeepSeek-V2): q.k over d_qk = 192 (128 + a 64-wide
rotary part), values of d_v = 128, scaled by 1 / sqrt(d_qk)."""
from leantile.dag import DagM, build_graph_with_output
from leantile.architectures.variants import flex_paths, working

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_qk": 192, "d_v": 128}


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_qk"])
    k = g.input("K", ["h", "t_kv", "d_qk"])
    v = g.input("V", ["h", "t_kv", "d_v"])
    s = g.div(g.matmul(q, k, "d_qk", "d_qk"), g.sqrt(g.size_const("d_qk")))
    q_pos, k_pos = g.iota("t_q"), g.iota("t_kv")
    masked = g.select(g.le(k_pos, q_pos), s, g.const("-inf"))
    return g.matmul(g.softmax(masked, "t_kv"), v, "t_kv", "t_kv")           # [h, t_q, d_v]


def build(**sizes):
    return build_graph_with_output("mla_attention", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    import math

    import torch
    import torch.nn.functional as F

    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
    keep = torch.ones(tq, tkv, dtype=torch.bool, device=t["Q"].device).tril()

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float().masked_fill(~keep, float("-inf"))
        return torch.softmax(s / math.sqrt(t["Q"].shape[-1]), -1).to(t["V"].dtype) @ t["V"]

    def sdpa(backend):
        def f():
            with torch.nn.attention.sdpa_kernel(backend):
                return F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None], is_causal=True)[0]
        return f
    b = torch.nn.attention.SDPBackend
    return eager, working({**flex_paths(t, None, lambda b_, h, q, kv: kv <= q),
                           "sdpa_cudnn": sdpa(b.CUDNN_ATTENTION), "sdpa_flash": sdpa(b.FLASH_ATTENTION)})
