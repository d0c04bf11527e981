"""A loss and its gradients as one graph (issue 50): the training step of a graph whose one output
is a scalar loss, computed in one forward.

Why: an LM head with its cross-entropy (logits H W over a vocabulary of 128256) trained as a
forward and a backward graph makes four GEMM passes over [tokens, vocabulary] (the logits for the
loss; again in the backward, which cannot keep them; then dH and dW), where torch.compile, holding
the logits whole, makes three. In one graph the logits, their row statistics and their gradient
are computed once; run in chunks of tokens (leantile.chunking: dW is a sum over the tokens,
accumulated into its own buffer chunk by chunk) the [tokens, vocabulary] values exist a chunk at a
time and the GEMM passes are three.

The loss's cotangent is 1 in the graph: the backward scales the gradients by the one it is handed
(a scalar), as FlashAttention's and Liger's fused losses do.
"""
from __future__ import annotations

import json

from . import ir
from .autodiff import Gradient, vjp


def loss_output(g: ir.Graph) -> str | None:
    """g's one output, where it is a scalar (a loss); None otherwise."""
    if len(g.outputs) != 1:
        return None
    (name, i), = g.outputs.items()
    return name if not g.nodes[i].axes else None


def step_graph(g: ir.Graph, wrt=None) -> tuple[ir.Graph, dict[str, Gradient]] | None:
    """(g with the gradients of its loss as outputs beside it, {input: its gradient}), or None where
    g has no scalar loss or no gradient flows. The backward is vjp(g, save=()) (it recomputes what
    it reads of the forward), its cotangent input the constant 1; the two graphs' nodes are merged,
    a computation both make (the logits, their max and sum) once."""
    loss = loss_output(g)
    if loss is None:
        return None
    bw = vjp(g, wrt, save=frozenset())
    if bw.graph is None or not bw.grads:
        return None
    nodes: list[ir.Node] = []
    seen: dict[str, int] = {}

    def add(n) -> int:
        key = json.dumps(n.model_dump(exclude={"id"}), sort_keys=True)
        if key not in seen:
            nodes.append(n.model_copy(update={"id": len(nodes)}))
            seen[key] = len(nodes) - 1
        return seen[key]

    fwd: dict[int, int] = {}
    for n in g.nodes:
        fwd[n.id] = add(ir.with_args(n, fwd))
    ones = set(bw.cotangents.values())
    back: dict[int, int] = {}
    for n in bw.graph.nodes:
        if isinstance(n, ir.Input) and n.name in ones:  # the loss's cotangent: 1, in its dtype
            one = add(ir.Const(id=0, op="const", value="1", axes=()))
            back[n.id] = add(ir.Cast(id=0, op="cast", x=one, dtype=n.dtype, axes=()))
        else:  # a primal input (same name, same node) or a computation
            back[n.id] = add(ir.with_args(n, back))
    outputs = {loss: fwd[g.outputs[loss]]}
    grads = {}
    for name in (n.name for n in g.inputs() if n.name in bw.grads):  # in the graph's input order
        gr = bw.grads[name]
        outputs[gr.output] = back[bw.graph.outputs[gr.output]]
        grads[name] = gr
    step = g.model_copy(update={"name": f"{g.name}_step", "nodes": tuple(nodes), "outputs": outputs,
                                "derivation": ()})
    problems = ir.check(step)
    if problems:  # a merge that broke the graph is this module's fault, not the user's
        raise AssertionError(f"step graph of {g.name}: {problems[:3]}")
    return step, grads
