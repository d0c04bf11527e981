"""X W."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "d": 4096, "n": 4096}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w = g.input("W", ["d", "n"])
    return g.matmul(x, w, "d", "d")


def build(**sizes):
    return build_graph_with_output("matmul", {**DEFAULT_SIZES, **sizes}, body)
