"""silu(X W_gate) * (X W_up)."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "n": 2048, "d": 2048}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w_gate = g.input("W_gate", ["d", "n"])
    w_up = g.input("W_up", ["d", "n"])
    gate = g.silu(g.matmul(x, w_gate, "d", "d"))
    return g.mul(gate, g.matmul(x, w_up, "d", "d"))


def build(**sizes):
    return build_graph_with_output("swiglu", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import torch.nn.functional as F

    return (lambda: F.silu(t["X"] @ t["W_gate"]) * (t["X"] @ t["W_up"])), {}
