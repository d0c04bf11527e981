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
