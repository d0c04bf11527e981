"""Training on the device (marker gpu, issue 50): every built-in and the row examples as leantile
ops, forward and backward on the GPU in their own dtypes, against torch's float64 autograd of the
same graph (tests/grad_oracle.py), each gradient within its dtype's tolerance (rel_err, Frobenius);
and one op trained under torch.compile(fullgraph=True) with inductor equals eager."""
from __future__ import annotations

import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest
import torch

import leantile
import leantile.torch as lt
from leantile import architectures, ir, reference
from leantile.runtime import TOLERANCE, rel_err

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import grad_oracle  # noqa: E402

SIZES = {
    "attention": {"h": 4, "t_q": 384, "t_kv": 520, "d_h": 64},
    "causal_attention": {"h": 4, "t_q": 400, "t_kv": 400, "d_h": 64},
    "sliding_window_attention": {"h": 2, "t_q": 640, "t_kv": 640, "d_h": 64},
    "gqa_attention": {"h_kv": 2, "g": 2, "t_q": 300, "t_kv": 300, "d_h": 64},
    "swiglu": {"m": 200, "d": 512, "n": 384},
    "matmul": {"m": 200, "d": 384, "n": 520},
    "rmsnorm": {"m": 200, "d": 512, "n": 384},
    "rmsnorm_mlp": {"m": 200, "d": 512, "n": 384},
    "layernorm_linear_gelu": {"m": 200, "d": 512, "n": 384},
}


def _example_graphs():
    spec = spec_from_file_location("leantile_fusion_examples_gpu_ad", REPO / "examples" / "fusion.py")
    m = module_from_spec(spec)
    spec.loader.exec_module(m)
    small = {"m": 300, "d": 1000, "c": 1000, "n": 384, "k": 512}
    return [m.graph(n, **{a: small.get(a, 64) for a in m.CASES[n][1]}) for n in m.CASES]


def _window_attention(t: int, window: int, d: int, heads: int, dtype: str) -> ir.Graph:
    """Attention under a window narrower than flash_backward's tiles: both key bounds bite, in the
    dK/dV kernel's stream of queries too, and blocks every row keeps run unmasked."""
    from leantile.dag import DagM
    g = DagM("window_attention", {"h": heads, "t_q": t, "t_kv": t, "d_h": d})
    q, k, v = (g.input(n, ["h", s, "d_h"], dtype) for n, s in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    i, j = g.iota("t_q"), g.iota("t_kv")
    keep = g.mul(g.le(j, i), g.gt(j, g.sub(i, g.const(str(window)))))
    s = g.div(g.select(keep, g.matmul(q, k, "d_h", "d_h"), g.const("-inf")), g.sqrt(g.size_const("d_h")))
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def _graphs():
    out = []
    for name in architectures.NAMES:
        sizes = {k: v for k, v in SIZES.get(name, {}).items() if k in architectures.module(name).DEFAULT_SIZES}
        out.append(architectures.build(name, **sizes))
    # flash_backward (issue 50) with a window of 100 over 600 positions, f16 and bf16
    out += [_window_attention(600, 100, 64, 2, dt) for dt in ("f16", "bf16")]
    return out + _example_graphs()


def _check_gradients(g: ir.Graph, seed: int = 0, device: str = "cuda"):
    dts = {n.name: reference.TORCH_DTYPES[n.dtype] for n in g.inputs()}
    labels = {n.name for n in g.inputs() if n.name in ("label", "T", "target", "labels")}
    inputs, cts = grad_oracle.random_values(g, seed)
    gen = torch.Generator().manual_seed(seed)
    for name in labels:  # class ids: integers below the class count (the axis the label is compared with)
        inputs[name] = torch.randint(0, min(g.axes.values()), inputs[name].shape, generator=gen).double()
    inputs = {k: v.to(dts[k]).double() for k, v in inputs.items()}  # the values the GPU gets
    want = grad_oracle.oracle(g, inputs, cts)
    f = lt.op(leantile.compile(g, device=device))
    xs = {k: v.to(dts[k]).to(device).requires_grad_(k not in labels) for k, v in inputs.items()}
    outs = f(*[xs[n.name] for n in g.inputs()])
    outs = outs if isinstance(outs, tuple) else (outs,)
    live = [(o, t) for o, t in zip(g.outputs, outs)]
    torch.autograd.backward([t for _, t in live], [cts[o].to(t.dtype).to(device) for o, t in live])
    bad = []
    for name, x in xs.items():
        if name in labels or want[name] is None:
            continue
        err = rel_err(x.grad.double().cpu(), want[name])
        if not err <= TOLERANCE[dts[name]]:
            bad.append(f"{g.name}: d{name} rel err {err:.3g} > {TOLERANCE[dts[name]]}")
    return bad


@pytest.fixture(scope="module", autouse=True)
def _compiled_ahead():
    """Every forward and backward graph compiled in parallel processes first (TileLang's disk cache):
    compiled one after another they took the 170 s the first GPU run gave this file for 6 cases."""
    from leantile.precompile import precompile_graphs, training_graphs
    labels = ("label", "T", "target", "labels")
    precompile_graphs([t for g in _graphs() for t in training_graphs(
        g, [n.name for n in g.inputs() if n.name not in labels])], torch.cuda.get_device_name())


@pytest.mark.parametrize("g", _graphs(), ids=lambda g: g.name)
def test_gradients_on_the_gpu_match_float64_autograd(g):
    bad = _check_gradients(g)
    assert not bad, bad


def test_a_training_step_under_torch_compile_inductor_equals_eager():
    k = leantile.compile("rmsnorm_mlp", sizes=SIZES["rmsnorm_mlp"])
    f = lt.op(k)
    gen = torch.Generator().manual_seed(3)
    ts = [(torch.randn(k.graph.shape(n.id), generator=gen) * 0.3).half().cuda() for n in k.graph.inputs()]

    def step(*a):
        return f(*a).float().square().mean()

    eager = [t.clone().requires_grad_() for t in ts]
    step(*eager).backward()
    compiled = [t.clone().requires_grad_() for t in ts]
    torch.compile(step, fullgraph=True)(*compiled).backward()
    for a, b in zip(compiled, eager):
        assert torch.equal(a.grad, b.grad)
