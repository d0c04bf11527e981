"""Graphs with a max or a min on every path of the emitter, and NaN-sprinkled inputs (leantile.codegen_nan:
max and min propagate NaN as torch's do; tests/cpu/test_codegen_nan.py, tests/gpu/test_nan_gpu.py)."""
from __future__ import annotations

import torch

from leantile import dag, reference


def max_graphs():
    """A graph per max path of the emitter, small enough to lower quickly."""
    def col_max(g):
        x = g.input("X", ["m", "d"], "f16")
        return g.red("max", g.mul(x, g.rsqrt(g.add(g.input("r", ["m"], "f16"), g.const("1.5")))), "m")

    def row_max(g):
        return g.red("max", g.input("X", ["m", "d"], "f16"), "d")

    def scalar_max(g):
        return g.red("max", g.abs(g.input("X", ["m", "d"], "bf16")), "m")

    def relu_min(g):
        return g.min(g.max(g.input("X", ["m", "d"], "f32"), g.const("0")), g.const("6"))

    def pooled(g):
        y = g.matmul(g.input("X", ["b", "k"], "f16"), g.input("W", ["k", "n", "p"], "f16"), "k", "k")
        return g.red("max", y, "p")

    def gemm_softmax(g):
        y = g.matmul(g.input("X", ["b", "k"], "f16"), g.input("W", ["k", "c"], "f16"), "k", "k")
        return g.softmax(y, "c")
    return [dag.build_graph_with_output("col_max", {"m": 9001, "d": 70}, col_max),
            dag.build_graph_with_output("row_max", {"m": 33, "d": 40000}, row_max),
            dag.build_graph_with_output("scalar_max", {"m": 2, "d": 70000},
                                        lambda g: g.red("max", scalar_max(g), "d")),
            dag.build_graph_with_output("relu6", {"m": 33, "d": 129}, relu_min),
            dag.build_graph_with_output("pooled", {"b": 70, "k": 96, "n": 45, "p": 2}, pooled),
            dag.build_graph_with_output("gemm_softmax", {"b": 70, "k": 96, "c": 100}, gemm_softmax)]


def extremum_inputs(g) -> set[str]:
    """The inputs a max or a min of g reads (through any path): where a NaN must reach the output
    if torch's does. Not the others: a NaN that reaches an output only through a product with an
    exact 0 (attention's V at a key the mask drops, in a key block the kernel skips) is no real
    number, and the derivations are proved over the reals (LeanTile.fold_skip_masked): FlashAttention
    skips that block too."""
    from leantile import ir
    seen: set[int] = set()
    stack = [n.id for n in g.nodes if n.op in ("max", "min") or (n.op == "reduce" and n.kind in ("max", "min"))]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack += list(g.nodes[i].args())
    return {g.nodes[i].name for i in seen if isinstance(g.nodes[i], ir.Input)}


def with_nans(g, seed: int, every: float = 0.02, device="cpu") -> dict:
    """Fresh normal inputs, about `every` of the elements of each input a max or min reads NaN (at
    least one: extremum_inputs)."""
    gen = torch.Generator().manual_seed(seed)
    inputs = reference.random_inputs(g, seed=seed)
    reach = extremum_inputs(g)
    for name, t in inputs.items():
        if name not in reach:
            inputs[name] = t.to(device)
            continue
        hit = torch.rand(t.shape, generator=gen) < every
        hit.view(-1)[int(torch.randint(0, t.numel(), (1,), generator=gen))] = True
        inputs[name] = t.masked_fill(hit, float("nan")).to(device)
    return inputs
