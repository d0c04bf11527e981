"""Causal attention within documents (packed sequences): query i keeps key j <= i of its own
document, the document ids per position read at run time (doc_q along the queries, doc_kv along
the keys: the same ids twice for self-attention). prepare_inputs packs DOCUMENTS documents of
random lengths."""
from leantile.dag import DagM, build_graph_with_output
from leantile.architectures.variants import flex_paths, working

DEFAULT_SIZES = {"h": 16, "t_q": 4096, "t_kv": 4096, "d_h": 128}
DOCUMENTS = 5


def body(g: DagM) -> int:
    q = g.input("Q", ["h", "t_q", "d_h"])
    k = g.input("K", ["h", "t_kv", "d_h"])
    v = g.input("V", ["h", "t_kv", "d_h"])
    doc_q = g.input("doc_q", ["t_q"], "f32")
    doc_kv = g.input("doc_kv", ["t_kv"], "f32")
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
    q_pos, k_pos = g.iota("t_q"), g.iota("t_kv")
    keep = g.mul(g.le(k_pos, q_pos), g.eq(doc_q, doc_kv))
    masked = g.select(keep, s, g.const("-inf"))
    return g.matmul(g.softmax(masked, "t_kv"), v, "t_kv", "t_kv")


def build(**sizes):
    return build_graph_with_output("document_attention", {**DEFAULT_SIZES, **sizes}, body)


def document_ids(n: int, documents: int = DOCUMENTS, seed: int = 0):
    """Ids 0..documents-1 in order over n positions, documents of random lengths (each >= 1 where n allows)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    cuts = torch.randperm(max(n - 1, 1), generator=gen)[:min(documents, n) - 1].sort().values + 1
    ids = torch.zeros(n)
    for c in cuts.tolist():
        ids[c:] += 1
    return ids


def prepare_inputs(t: dict) -> dict:
    """The same documents along the queries and the keys (self-attention over a packed batch;
    queries aligned with the keys' first positions)."""
    tq, tkv = t["doc_q"].shape[0], t["doc_kv"].shape[0]
    ids = document_ids(tkv).to(t["doc_kv"].dtype).to(t["doc_kv"].device)
    return {**t, "doc_kv": ids, "doc_q": ids[:tq].clone()}


def baselines(t: dict):
    import math

    import torch

    tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
    dq, dk = t["doc_q"], t["doc_kv"]
    keep = torch.ones(tq, tkv, dtype=torch.bool, device=dq.device).tril() & (dq[:, None] == dk[None, :])

    def eager():
        s = (t["Q"] @ t["K"].transpose(-1, -2)).float().masked_fill(~keep, float("-inf"))
        return torch.softmax(s / math.sqrt(t["Q"].shape[-1]), -1).to(t["V"].dtype) @ t["V"]

    def same_document(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (dq[q_idx] == dk[kv_idx])
    return eager, working(flex_paths(t, None, same_document, with_build=True))
