"""X W."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "d": 4096, "n": 4096}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w = g.input("W", ["d", "n"])
    return g.matmul(x, w, "d", "d")


def build(**sizes):
    return build_graph_with_output("matmul", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import torch

    return (lambda: t["X"] @ t["W"]), {"cublas": lambda: torch.matmul(t["X"], t["W"])}
