"""The three losses issue 46 found miscompiled on the GPU, as a user writes them (one shared
definition for tests/gpu/test_losses_gpu.py at the failing sizes, tests/cpu/test_loss_graphs.py
through the interpreter at small ones, and benchmarks/gpu_fuzz.py's `losses` family). Each is a
long axis reduced into a 0-d output: the class of the miscompile.

    cross_entropy(b, c)   mean_b( max_c P + log sum_c exp(P - max) - sum_c select(iota(c) == T, P, 0) )
    kl_batchmean(b, c)    sum_b sum_c p (log p - log q) / b,  log p, log q log-softmaxes of P, Q over c
    triplet_margin(b, d)  mean_b max(0, ||A - P||_2 - ||A - N||_2 + margin), norms over d

`loss_inputs` draws inputs as the losses take them (class ids T as integers in [0, c), in
float32); `torch_loss` is the same loss from torch.nn.functional in float64, written without
leantile: the check that each graph is the loss it says it is.
"""
from __future__ import annotations

import torch

from leantile import ir
from leantile.dag import DagM
from leantile.reference import TORCH_DTYPES

# (loss, sizes) where the default plan gave a wrong number on the H100 (issue 46), and around them
FAILING = [
    ("cross_entropy", {"b": 32768, "c": 64}),
    ("cross_entropy", {"b": 32768, "c": 4096}),
    ("cross_entropy", {"b": 20000, "c": 64}),
    ("cross_entropy", {"b": 65537, "c": 64}),
    ("kl_batchmean", {"b": 16384, "c": 16384}),
    ("triplet_margin", {"b": 32768, "d": 8192}),
]


def _log_softmax(g: DagM, x: int, axis: str) -> int:
    z = g.sub(x, g.red("max", x, axis))
    return g.sub(z, g.log(g.red("sum", g.exp(z), axis)))


def cross_entropy(b: int, c: int, dtype: str = "f16") -> ir.Graph:
    """torch.nn.functional.cross_entropy(P, T) over logits P[b, c], class ids T[b] (float32)."""
    g = DagM("cross_entropy", {"b": b, "c": c})
    p, t = g.input("P", ["b", "c"], dtype), g.input("T", ["b"], "f32")
    mx = g.red("max", p, "c")
    lse = g.add(mx, g.log(g.red("sum", g.exp(g.sub(p, mx)), "c")))
    picked = g.red("sum", g.select(g.eq(g.iota("c"), t), p, g.const("0")), "c")
    g.output("loss", g.mean_along(g.sub(lse, picked), "b"))
    return g.graph()


def kl_batchmean(b: int, c: int, dtype: str = "f16") -> ir.Graph:
    """KL(p || q) with reduction="batchmean": p = softmax(P), q = softmax(Q) over c."""
    g = DagM("kl_batchmean", {"b": b, "c": c})
    p, q = g.input("P", ["b", "c"], dtype), g.input("Q", ["b", "c"], dtype)
    lp, lq = _log_softmax(g, p, "c"), _log_softmax(g, q, "c")
    s = g.red("sum", g.red("sum", g.mul(g.exp(lp), g.sub(lp, lq)), "c"), "b")
    g.output("loss", g.div(s, g.size_const("b")))
    return g.graph()


def triplet_margin(b: int, d: int, dtype: str = "f16", margin: str = "1.0") -> ir.Graph:
    """torch.nn.functional.triplet_margin_loss(A, P, N, margin) (its eps = 1e-6 inside the norm
    left out: the graph is the loss a user writes)."""
    g = DagM("triplet_margin", {"b": b, "d": d})
    a, p, n = (g.input(x, ["b", "d"], dtype) for x in "APN")
    dap = g.sqrt(g.red("sum", g.square(g.sub(a, p)), "d"))
    dan = g.sqrt(g.red("sum", g.square(g.sub(a, n)), "d"))
    g.output("loss", g.mean_along(g.max(g.add(g.sub(dap, dan), g.const(margin)), g.const("0")), "b"))
    return g.graph()


LOSSES = {"cross_entropy": cross_entropy, "kl_batchmean": kl_batchmean, "triplet_margin": triplet_margin}


def build(name: str, sizes: dict, dtype: str = "f16") -> ir.Graph:
    return LOSSES[name](**sizes, dtype=dtype)


def loss_inputs(g: ir.Graph, seed: int = 0, device="cpu", scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Normal inputs of standard deviation `scale` in each input's dtype, drawn on `device`;
    cross-entropy's T holds class ids 0 .. c - 1 (as float32, the graph compares positions)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for n in g.inputs():
        shape = [g.axes[a] for a in n.axes]
        if g.name == "cross_entropy" and n.name == "T":
            out[n.name] = torch.randint(0, g.axes["c"], shape, generator=gen, device=device).to(torch.float32)
        else:
            x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale
            out[n.name] = x.to(TORCH_DTYPES[n.dtype])
    return out


def torch_loss(name: str, inputs: dict, margin: float = 1.0) -> torch.Tensor:
    """The loss from torch.nn.functional in float64 (0-d), independent of leantile."""
    F = torch.nn.functional
    d = {k: v.double() for k, v in inputs.items()}
    if name == "cross_entropy":
        return F.cross_entropy(d["P"], d["T"].long())
    if name == "kl_batchmean":
        lp, lq = F.log_softmax(d["P"], -1), F.log_softmax(d["Q"], -1)
        return F.kl_div(lq, lp, reduction="batchmean", log_target=True)  # sum p (log p - log q) / b
    if name == "triplet_margin":
        a, p, n = d["A"], d["P"], d["N"]
        return torch.clamp((a - p).norm(dim=1) - (a - n).norm(dim=1) + margin, min=0).mean()
    raise KeyError(name)
