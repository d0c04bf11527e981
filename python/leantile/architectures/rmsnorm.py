"""rmsnorm(X) W: eps 1e-5, no gain."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "d": 4096, "n": 4096}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w = g.input("W", ["d", "n"])
    return g.matmul(g.rms_norm(x, "d", "1e-05"), w, "d", "d")


def build(**sizes):
    return build_graph_with_output("rmsnorm", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    return (lambda: rms(t["X"]) @ t["W"]), {"cublas_matmul_alone": lambda: t["X"] @ t["W"]}


def rms(x):
    """x / sqrt(mean(x^2) + 1e-5) over the last axis, in float32, back in x's dtype."""
    import torch

    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-5).to(x.dtype)
