"""Causal attention: softmax(mask(Q K^T) / sqrt(d_h)) V per head, query i keeping keys
j <= i + (t_kv - t_q) (aligned at the last key, as a KV cache has it: with t_q = t_kv the usual
j <= i; with t_q < t_kv the queries are the last t_q positions). Masked with -inf before the
scale (-inf / c = -inf), so the scale still folds into the exponent. `masked_attention` and
`eager_masked` are shared with sliding_window_attention (another keep condition)."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}


def masked_attention(g: DagM, keep_of) -> int:
    """Attention whose scores keep(key position, the query's last kept key) selects, else -inf;
    keep_of(g, k_pos, last) builds that condition."""
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    scores = g.matmul(q, k, "d_h", "d_h")          # [h, t_q, t_kv]
    q_pos = g.iota("t_q")
    k_pos = g.iota("t_kv")
    last = g.add(q_pos, g.sub(g.size_const("t_kv"), g.size_const("t_q")))  # query i's own position
    masked = g.select(keep_of(g, k_pos, last), scores, g.const("-inf"))
    s = g.div(masked, g.sqrt(g.size_const("d_h")))
    p = g.softmax(s, "t_kv")
    return g.matmul(p, v, "t_kv", "t_kv")          # [h, t_q, d_h]


def body(g: DagM) -> int:
    return masked_attention(g, lambda g, j, last: g.le(j, last))  # key j <= query i + (t_kv - t_q)


def build(**sizes):
    return build_graph_with_output("causal_attention", {**DEFAULT_SIZES, **sizes}, body)


def eager_masked(t: dict, keep):
    """torch eager of masked_attention with the boolean [t_q, t_kv] mask `keep`."""
    import math

    import torch

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float().masked_fill(~keep, float("-inf")) / math.sqrt(t["Q"].shape[-1])
        return torch.softmax(s, -1).to(t["V"].dtype) @ t["V"]
    return eager


def baselines(t: dict):
    """torch eager of the same math, SDPA's fused backends with the same (bottom-right) causal
    mask (is_causal where t_q = t_kv: the two alignments agree, else torch's causal_lower_right),
    and FlexAttention with the causal block mask (issue 51 measures attention variants against it)."""
    import torch

    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
    keep = torch.ones(tq, tkv, dtype=torch.bool, device=t["Q"].device).tril(tkv - tq)
    off = tkv - tq
    return eager_masked(t, keep), {**sdpa_causal_paths(t),
                                   "flex_attention": flex_path(t, lambda b, h, q, kv: kv <= q + off)}


def flex_path(t: dict, mask_mod=None, score_mod=None, build_each_call: bool = False):
    """FlexAttention (compiled) over Q, K, V [h, t, d] with `score_mod` and the block mask of
    `mask_mod` (FlexAttention's (b, h, q_idx, kv_idx) -> keep): the blocks it masks wholly are
    skipped. The mask is built once, ahead of the timing, as a model builds it once for all its
    layers; `build_each_call` builds it (compiled) in every call instead."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    tq, tkv, dev = t["Q"].shape[-2], t["K"].shape[-2], t["Q"].device
    compiled = torch.compile(flex_attention)
    build = torch.compile(create_block_mask) if build_each_call else create_block_mask
    ahead = None if mask_mod is None or build_each_call else build(mask_mod, None, None, tq, tkv, device=dev)

    def f():
        mask = build(mask_mod, None, None, tq, tkv, device=dev) if build_each_call and mask_mod else ahead
        return compiled(t["Q"][None], t["K"][None], t["V"][None], score_mod=score_mod, block_mask=mask)[0]
    return f


def sdpa_causal_paths(t: dict) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]

    def sdpa(backend):
        def f():
            with torch.nn.attention.sdpa_kernel(backend):
                q, k, v = t["Q"][None], t["K"][None], t["V"][None]
                if tq == tkv:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)[0]
                return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(tq, tkv))[0]
        return f
    b = torch.nn.attention.SDPBackend
    return {"sdpa_cudnn": sdpa(b.CUDNN_ATTENTION), "sdpa_flash": sdpa(b.FLASH_ATTENTION)}
