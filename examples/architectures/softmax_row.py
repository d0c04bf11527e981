"""softmax over a long row alone: X [rows, cols] -> softmax along cols.

A user architecture (not built in). A 65536-wide row does not fit on chip, so the
derivation streams `cols` with the online rule (running max and rescaled sum), then
normalises in a second pass. Lean source: lean/LeanTile/Architectures/SoftmaxRow.lean.
"""
from leantile.dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"rows": 4096, "cols": 65536}


def body(g: DagM) -> int:
    x = g.input("X", ["rows", "cols"])
    return g.softmax(x, "cols")


def build(**sizes):
    return build_graph_with_output("softmax_row", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import torch

    return (lambda: torch.softmax(t["X"], -1)), {}
