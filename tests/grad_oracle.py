"""An independent oracle of a graph's gradients: torch's own autograd through the float64
reference of the forward graph (leantile.reference.evaluate, one torch op per node), against the
backward graph leantile.autodiff.vjp writes, evaluated by the same reference in float64. The two
share the forward's reference semantics and nothing else: the VJPs under test are the registry's
column and autodiff's structural rules; the oracle's are torch's derivatives.yaml."""
from __future__ import annotations

import torch

from leantile import ir, reference
from leantile.autodiff import forward_saving, vjp

# float64 on both sides: only the order of the sums differs. A cast to a narrower dtype inside the
# graph rounds torch's gradient there too (autograd casts the gradient back through .to), where
# the backward graph carries it in float64: the tolerance is then that dtype's
RTOL = {"f64": 1e-9, "f32": 2e-5, "f16": 3e-2, "bf16": 1e-1}
WIDTH = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}


def tolerance(g: ir.Graph) -> float:
    """RTOL of the narrowest dtype a cast in g rounds to (f64 where there is none)."""
    narrow = min((n.dtype for n in g.nodes if isinstance(n, ir.Cast)), key=lambda d: (WIDTH[d], d != "bf16"),
                 default="f64")
    return RTOL[narrow]


def random_values(g: ir.Graph, seed: int) -> tuple[dict, dict]:
    """Fresh N(0, 1) float64 inputs (natural_scale where contractions would overflow) and output
    cotangents, never zeros."""
    gen = torch.Generator().manual_seed(seed)
    scale = reference.natural_scale(g)
    inputs = {n.name: torch.randn(g.shape(n.id), generator=gen, dtype=torch.float64) * scale for n in g.inputs()}
    dtypes = ir.value_dtypes(g)  # a cotangent of an output's own dtype, as autograd hands it over
    cts = {o: torch.randn(g.shape(i), generator=gen, dtype=torch.float64).to(reference.TORCH_DTYPES[dtypes[i]])
           .double() for o, i in g.outputs.items()}
    return inputs, cts


def oracle(g: ir.Graph, inputs: dict, cts: dict) -> dict:
    """{input name: d(sum over outputs of <cotangent, output>)/d input} by torch autograd (None
    where no output depends on it)."""
    xs = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    outs = reference.evaluate(g, xs, compute_dtype=torch.float64, check=False)
    live = [o for o in g.outputs if outs[o].requires_grad]
    if not live:
        return {k: None for k in xs}
    grads = torch.autograd.grad([outs[o] for o in live], list(xs.values()), [cts[o] for o in live],
                                allow_unused=True)
    return dict(zip(xs, grads))


def leantile_grads(g: ir.Graph, inputs: dict, cts: dict, wrt=None) -> dict:
    """{input name: gradient} from the backward graph, each as a tensor of its input's shape."""
    bw = vjp(g, wrt=wrt)  # the default save policy: the forward's saved values come from forward_saving
    if bw.graph is None:
        return {}
    feed = dict(inputs)
    if bw.saved:
        fwd = reference.evaluate(forward_saving(g, bw), inputs, compute_dtype=torch.float64, check=False)
        feed.update({name: fwd[name] for name in bw.saved})
    for o, name in bw.cotangents.items():
        feed[name] = cts[o]
    got = reference.evaluate(bw.graph, {n.name: feed[n.name] for n in bw.graph.inputs()},
                             compute_dtype=torch.float64, check=False)
    axes = {n.name: n.axes for n in g.inputs()}
    return {name: gr.like_input(got[gr.output], axes[name], g.axes) for name, gr in bw.grads.items()}


def problems(g: ir.Graph, seed: int = 0, wrt=None) -> list[str]:
    """Where leantile's gradients differ from the oracle's (empty: they agree), at finite oracle
    values: |got - want| <= tolerance(g) (1 + max |want|) elementwise."""
    inputs, cts = random_values(g, seed)
    want = oracle(g, inputs, cts)
    got = leantile_grads(g, inputs, cts, wrt)
    out = []
    for name, w in want.items():
        if wrt is not None and name not in wrt:
            continue
        mine = got.get(name)
        if w is None or (not w.abs().gt(0).any() and mine is None):
            if mine is not None and mine.abs().max() > 0:
                out.append(f"{g.name}: d{name} should be 0, max |got| {mine.abs().max().item():.3g}")
            continue
        if mine is None:
            out.append(f"{g.name}: d{name} missing (oracle max |{w.abs().max().item():.3g}|)")
            continue
        finite = torch.isfinite(w)
        scale = 1.0 + w[finite].abs().max().item() if finite.any() else 1.0
        err = (mine - w).abs()[finite]
        if err.numel() and not (err.max().item() <= tolerance(g) * scale):
            out.append(f"{g.name}: d{name} max err {err.max().item():.3g} at scale {scale:.3g}")
    return out
