"""GeGLU MLP: gelu_tanh(X W_gate) * (X W_up).

A user architecture (not built in): `leantile kernels examples/architectures/geglu.py:build`.
Lean source: lean/LeanTile/Architectures/Geglu.lean (the same nodes in the same order).
Sizes: the SwiGLU built-in's shape (m=1024 tokens, d=2048 model, n=2048 hidden), so the
two gated MLPs can be compared kernel for kernel.
"""
from leantile.dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "n": 2048, "d": 2048}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w_gate = g.input("W_gate", ["d", "n"])
    w_up = g.input("W_up", ["d", "n"])
    gate = g.gelu_tanh(g.matmul(x, w_gate, "d", "d"))
    return g.mul(gate, g.matmul(x, w_up, "d", "d"))


def build(**sizes):
    return build_graph_with_output("geglu", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import torch.nn.functional as F

    return (lambda: F.gelu(t["X"] @ t["W_gate"], approximate="tanh") * (t["X"] @ t["W_up"])), {}
