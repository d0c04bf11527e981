"""Grouped-query attention (Llama 3, Mistral): softmax(Q K^T / sqrt(d_h)) V where the g query
heads of a group share one K and V, Q[h_kv, g, t_q, d_h] against K, V[h_kv, t_kv, d_h]. The
group axis g is on Q alone, so pack_query_group puts a group's heads in one CTA: each K and V
block is loaded once for the group (g = h: multi-query attention; g = 1: plain multi-head)."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"h_kv": 8, "g": 4, "t_q": 4096, "t_kv": 4096, "d_h": 128}


def body(g: DagM) -> int:
    q = g.input("Q", ["h_kv", "g", "t_q", "d_h"])
    k = g.input("K", ["h_kv", "t_kv", "d_h"])
    v = g.input("V", ["h_kv", "t_kv", "d_h"])
    scores = g.matmul(q, k, "d_h", "d_h")          # [h_kv, g, t_q, t_kv]
    s = g.div(scores, g.sqrt(g.size_const("d_h")))
    p = g.softmax(s, "t_kv")
    return g.matmul(p, v, "t_kv", "t_kv")          # [h_kv, g, t_q, d_h]


def build(**sizes):
    return build_graph_with_output("gqa_attention", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """torch eager of the same math (K and V broadcast over the group) and SDPA's fused
    backends. SDPA sees the h_kv * g query heads as [1, h_q, t_q, d_h] (query head h_kv * g + i
    reads KV head h_kv, as enable_gqa maps them) with K and V repeated per query head before
    the timing: the vendor kernels then run plain multi-head attention, their fastest path (the
    anchors' GQA figures are that, twice the 16-head time)."""
    import math

    import torch

    def eager():
        s = (t["Q"] @ t["K"][:, None].transpose(-1, -2)).float() / math.sqrt(t["Q"].shape[-1])
        return torch.softmax(s, -1).to(t["V"].dtype) @ t["V"][:, None]
    return eager, sdpa_gqa_paths(t)


def sdpa_gqa_paths(t: dict) -> dict:
    import torch
    import torch.nn.functional as F

    hkv, g, tq, d = t["Q"].shape
    # K and V repeated once, as leaves of their own: a repeat (or a view of Q) made here from inputs
    # that need a gradient would keep its autograd graph, and with it the inputs' gradient
    # accumulators, alive from this call on; a training step's CUDA-graph capture then failed for
    # every contender (the accumulators' stream is not the capture's: the train suite's gqa row, NaN)
    k, v = (t[n].detach().repeat_interleave(g, dim=0)[None].requires_grad_(t[n].requires_grad)
            for n in ("K", "V"))  # [1, h_q, t_kv, d]

    def sdpa(backend):
        def f():
            k.grad = v.grad = None  # (a training step clears the inputs' gradients; these are the vendor's)
            with torch.nn.attention.sdpa_kernel(backend):
                q = t["Q"].reshape(1, hkv * g, tq, d)
                return F.scaled_dot_product_attention(q, k, v).reshape(hkv, g, tq, d)
        return f
    b = torch.nn.attention.SDPBackend
    return {"sdpa_cudnn": sdpa(b.CUDNN_ATTENTION), "sdpa_flash": sdpa(b.FLASH_ATTENTION)}
