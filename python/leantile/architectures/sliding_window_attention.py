"""Sliding-window attention (Mistral): softmax(mask(Q K^T) / sqrt(d_h)) V per head, query i
keeping the `window` keys i + off - window < j <= i + off, off = t_kv - t_q (aligned at the last
key, as causal_attention). The window is a constant of the graph (WINDOW); the key blocks outside
it are skipped (skip_masked_tiles reads both bounds off the mask)."""
from ..dag import DagM, build_graph_with_output
from .causal_attention import eager_masked, flex_path, masked_attention

DEFAULT_SIZES = {"h": 16, "t_q": 8192, "t_kv": 8192, "d_h": 128}
WINDOW = 1024


def _keep(g: DagM, j: int, last: int) -> int:
    newest = g.le(j, last)                                    # no key after the query
    recent = g.gt(j, g.sub(last, g.const(str(WINDOW))))       # and none older than the window
    return g.mul(newest, recent)


def body(g: DagM) -> int:
    return masked_attention(g, _keep)


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
    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
    return eager_masked(t, keep_mask(tq, tkv, t["Q"].device)), {"flex_attention": _flex(t, tq, tkv)}


def _flex(t: dict, tq: int, tkv: int):
    off = tkv - tq

    def window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + off) & (kv_idx > q_idx + off - WINDOW)
    return flex_path(t, window)
