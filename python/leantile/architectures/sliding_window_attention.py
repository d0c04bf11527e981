"""Sliding-window attention (Mistral): softmax(mask(Q K^T) / sqrt(d_h)) V per head, query i
keeping the `window` keys i + off - window < j <= i + off, off = t_kv - t_q (aligned at the last
key, as causal_attention). The window is a constant of the graph (WINDOW); the key blocks outside
it are skipped (skip_masked_tiles reads both bounds off the mask)."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"h": 16, "t_q": 8192, "t_kv": 8192, "d_h": 128}
WINDOW = 1024


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    scores = g.matmul(q, k, "d_h", "d_h")          # [h, t_q, t_kv]
    q_pos = g.iota("t_q")
    k_pos = g.iota("t_kv")
    last = g.add(q_pos, g.sub(g.size_const("t_kv"), g.size_const("t_q")))
    newest = g.le(k_pos, last)                     # no key after the query
    recent = g.gt(k_pos, g.sub(last, g.const(str(WINDOW))))  # and none older than the window
    keep = g.mul(newest, recent)
    masked = g.select(keep, scores, g.const("-inf"))
    s = g.div(masked, g.sqrt(g.size_const("d_h")))
    p = g.softmax(s, "t_kv")
    return g.matmul(p, v, "t_kv", "t_kv")          # [h, t_q, d_h]


def build(**sizes):
    return build_graph_with_output("sliding_window_attention", {**DEFAULT_SIZES, **sizes}, body)


def keep_mask(tq: int, tkv: int, device=None):
    import torch
    i = torch.arange(tq, device=device)[:, None] + (tkv - tq)
    j = torch.arange(tkv, device=device)[None, :]
    return (j <= i) & (j > i - WINDOW)


def baselines(t: dict):
    """torch eager of the same math and FlexAttention (compiled, with the window's block mask):
    the path PyTorch offers for a sliding window (SDPA's flash and cuDNN backends take no mask)."""
    import math

    import torch

    tq, tkv, dh = t["Q"].shape[-2], t["K"].shape[-2], t["Q"].shape[-1]
    keep = keep_mask(tq, tkv, t["Q"].device)

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float().masked_fill(~keep, float("-inf")) / math.sqrt(dh)
        return torch.softmax(s, -1).to(t["V"].dtype) @ t["V"]
    return eager, {"flex_attention": _flex(t, tq, tkv)}


def _flex(t: dict, tq: int, tkv: int):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    off = tkv - tq

    def window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + off) & (kv_idx > q_idx + off - WINDOW)
    block_mask = create_block_mask(window, B=None, H=None, Q_LEN=tq, KV_LEN=tkv, device=t["Q"].device)
    compiled = torch.compile(flex_attention)

    def f():
        return compiled(t["Q"][None], t["K"][None], t["V"][None], block_mask=block_mask)[0]
    return f
