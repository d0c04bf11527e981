"""softmax(Q K^T) V per head, no 1/sqrt(d_h) scale (as published)."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    scores = g.matmul(q, k, "d_h", "d_h")          # [h, t_q, t_kv]
    p = g.softmax(scores, "t_kv")
    return g.matmul(p, v, "t_kv", "t_kv")          # [h, t_q, d_h]


def build(**sizes):
    return build_graph_with_output("attention", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import torch

    def eager():
        return torch.softmax((t["Q"] @ t["K"].transpose(-1, -2)).float(), -1).to(t["V"].dtype) @ t["V"]
    return eager, sdpa_paths(t, scale=1.0)


def sdpa_paths(t: dict, scale: float | None) -> dict:
    """PyTorch's fused attention, per backend (cuDNN, FlashAttention-2), at softmax scale `scale`
    (None: 1/sqrt(d_h))."""
    import torch
    import torch.nn.functional as F

    def sdpa(backend):
        def f():
            with torch.nn.attention.sdpa_kernel(backend):
                return F.scaled_dot_product_attention(t["Q"][None], t["K"][None], t["V"][None], scale=scale)[0]
        return f
    b = torch.nn.attention.SDPBackend
    return {"sdpa_cudnn": sdpa(b.CUDNN_ATTENTION), "sdpa_flash": sdpa(b.FLASH_ATTENTION)}
