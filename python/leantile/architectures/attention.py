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
