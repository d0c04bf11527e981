"""The oracle agrees with torch written by hand for every built-in, and rejects bad inputs
with one error naming the input."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, strategies as st

from leantile import architectures, ir, reference

SMALL = {
    "attention": dict(h=2, t_q=5, t_kv=7, d_h=4),
    "swiglu": dict(m=3, n=5, d=4),
    "matmul": dict(m=3, d=4, n=5),
    "rmsnorm": dict(m=3, d=4, n=5),
    "rmsnorm_mlp": dict(m=3, d=4, n=5),
    "layernorm_linear_gelu": dict(m=3, d=4, n=5),
    "causal_attention": dict(h=2, t_q=5, t_kv=7, d_h=4),
    "sliding_window_attention": dict(h=1, t_q=3, t_kv=1100, d_h=4),  # the last query keeps 1024 keys
    "gqa_attention": dict(h_kv=2, g=3, t_q=5, t_kv=7, d_h=4),
}


def by_hand(name, t):
    def rms(x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5)
    if name == "attention":
        return torch.softmax(t["Q"] @ t["K"].transpose(-1, -2), -1) @ t["V"]
    if name == "swiglu":
        return F.silu(t["X"] @ t["W_gate"]) * (t["X"] @ t["W_up"])
    if name == "matmul":
        return t["X"] @ t["W"]
    if name == "rmsnorm":
        return rms(t["X"]) @ t["W"]
    if name == "rmsnorm_mlp":
        n = rms(t["X"])
        return (n @ t["W_up"]) * (n @ t["W_gate"])
    if name in ("causal_attention", "sliding_window_attention"):  # keys j <= i + (t_kv - t_q)
        tq, tkv = t["Q"].shape[-2], t["K"].shape[-2]
        keep = torch.ones(tq, tkv, dtype=torch.bool).tril(tkv - tq)
        if name == "sliding_window_attention":  # and j > i + (t_kv - t_q) - 1024
            keep &= ~torch.ones(tq, tkv, dtype=torch.bool).tril(tkv - tq - 1024)
        s = (t["Q"] @ t["K"].transpose(-1, -2)).masked_fill(~keep, float("-inf")) / math.sqrt(t["Q"].shape[-1])
        return torch.softmax(s, -1) @ t["V"]
    if name == "gqa_attention":  # query head (kv, i) against the KV head kv, by SDPA's GQA mapping
        hkv, g, tq, d = t["Q"].shape
        q = t["Q"].reshape(hkv * g, tq, d)
        k, v = (t[n].repeat_interleave(g, dim=0) for n in ("K", "V"))
        return F.scaled_dot_product_attention(q, k, v).reshape(hkv, g, tq, d)
    if name == "layernorm_linear_gelu":
        ln = F.layer_norm(t["X"], t["X"].shape[-1:], eps=1e-5)
        return F.gelu(ln @ t["W"] + t["b"], approximate="tanh")


@pytest.mark.parametrize("name", architectures.NAMES)
@given(seed=st.integers(0, 2**31 - 1))
def test_reference_matches_torch(name, seed):
    g = architectures.build(name, **SMALL[name])
    t = reference.random_inputs(g, seed=seed, dtype="f64")
    g64 = g.model_copy(update={"nodes": tuple(
        n.model_copy(update={"dtype": "f64"}) if isinstance(n, ir.Input) else n for n in g.nodes)})
    out = reference.evaluate(g64, t)["out"]
    torch.testing.assert_close(out, by_hand(name, t), rtol=1e-10, atol=1e-10)


def test_gelu_tanh_formula():
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    c = math.sqrt(2 / math.pi)
    torch.testing.assert_close(reference.gelu_tanh(x), 0.5 * x * (1 + torch.tanh(c * (x + 0.044715 * x**3))))


def test_missing_input_named():
    g = architectures.build("matmul", **SMALL["matmul"])
    t = reference.random_inputs(g)
    del t["W"]
    with pytest.raises(ir.GraphError, match="input 'W': missing"):
        reference.evaluate(g, t)


def test_wrong_shape_named():
    g = architectures.build("matmul", **SMALL["matmul"])
    t = reference.random_inputs(g)
    t["X"] = t["X"][:2]
    with pytest.raises(ir.GraphError, match=r"input 'X': shape \[2, 4\], expected \[3, 4\]"):
        reference.evaluate(g, t)


def test_wrong_dtype_named():
    g = architectures.build("matmul", **SMALL["matmul"])
    t = reference.random_inputs(g)
    t["W"] = t["W"].float()
    with pytest.raises(ir.GraphError, match="input 'W': dtype torch.float32"):
        reference.evaluate(g, t)


def test_not_a_tensor_named():
    g = architectures.build("matmul", **SMALL["matmul"])
    t = reference.random_inputs(g)
    t["X"] = [[1.0]]
    with pytest.raises(ir.GraphError, match="input 'X': expected a torch.Tensor"):
        reference.evaluate(g, t)


def test_wrong_device_named():
    g = architectures.build("matmul", **SMALL["matmul"])
    t = reference.random_inputs(g)
    t["X"] = t["X"].to("meta")
    with pytest.raises(ir.GraphError, match="several devices"):
        reference.evaluate(g, t)
