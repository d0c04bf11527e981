"""Graphs nobody wrote a pattern for: the standalone norms, activations and losses the fusion
issue names, written with the builder as a user would. benchmarks/fusion/fusion_suite.py times them
on the GPU (kernel counts and ratios against torch.compile); tests/cpu/test_regions.py checks
that each derives to at most two kernels and equals the reference.

Each entry: name -> (body(g) returning the output node, axes at the benchmark shape).
"""
from __future__ import annotations

import math

ROWS, FEATURES, CLASSES = 8192, 8192, 32000


def layernorm_affine(g):
    x = g.input("X", ["m", "d"])
    gain, bias = g.input("gamma", ["d"]), g.input("beta", ["d"])
    return g.add(g.mul(g.layer_norm(x, "d"), gain), bias)


def rmsnorm_gain(g):
    x = g.input("X", ["m", "d"])
    return g.mul(g.rms_norm(x, "d"), g.input("gamma", ["d"]))


def softmax(g):
    return g.softmax(g.input("X", ["m", "d"]), "d")


def log_softmax(g):
    x = g.input("X", ["m", "d"])
    z = g.sub(x, g.red("max", x, "d"))
    return g.sub(z, g.log(g.red("sum", g.exp(z), "d")))


def cross_entropy(g):
    """mean over rows of logsumexp(x) - x[label]; labels are float32 class indices (exact to 2^24)."""
    x = g.input("X", ["m", "c"])
    label = g.input("label", ["m"], "f32")
    mx = g.red("max", x, "c")
    lse = g.add(mx, g.log(g.red("sum", g.exp(g.sub(x, mx)), "c")))
    picked = g.red("sum", g.mul(x, g.eq(g.iota("c"), label)), "c")
    return g.div(g.red("sum", g.sub(lse, picked), "m"), g.size_const("m"))


def gelu_erf(g):
    x = g.input("X", ["m", "d"])
    return g.mul(g.mul(x, g.const(0.5)), g.add(g.const(1.0), g.erf(g.mul(x, g.const(1 / math.sqrt(2.0))))))


def gelu_tanh(g):
    x = g.input("X", ["m", "d"])
    inner = g.mul(g.const(math.sqrt(2 / math.pi)), g.add(x, g.mul(g.const(0.044715), g.mul(x, g.square(x)))))
    return g.mul(g.mul(g.const(0.5), x), g.add(g.const(1.0), g.tanh(inner)))


def silu(g):
    x = g.input("X", ["m", "d"])
    return g.mul(x, g.sigmoid(x))


def sigmoid(g):
    """written as a user might, 1 / (1 + exp(-x)): four ops, one kernel"""
    x = g.input("X", ["m", "d"])
    return g.recip(g.add(g.const(1.0), g.exp(g.neg(x))))


def mse_loss(g):
    a, b = g.input("A", ["m", "d"]), g.input("B", ["m", "d"])
    total = g.red("sum", g.red("sum", g.square(g.sub(a, b)), "d"), "m")
    return g.div(total, g.mul(g.size_const("m"), g.size_const("d")))


def gemm_epilogue(g):
    """min(X W * s, c) - neg(0.5) with a 0-d input s and a bias: six epilogue ops"""
    x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
    s, b = g.input("s", []), g.input("bias", ["n"])
    y = g.mul(g.matmul(x, w, "k", "k"), s)
    y = g.min(g.add(y, b), g.neg(g.const(-2.0)))
    return g.sigmoid(g.sub(y, g.neg(g.const(0.5))))


def instance_norm(g):
    """statistics over two axes (h, w) of x[n, c, h, w], normalised, a gain per channel"""
    x = g.input("X", ["n", "c", "h", "w"])
    hw = g.mul(g.size_const("h"), g.size_const("w"))
    mean = g.div(g.red("sum", g.red("sum", x, "w"), "h"), hw)
    xc = g.sub(x, mean)
    var = g.div(g.red("sum", g.red("sum", g.square(xc), "w"), "h"), hw)
    return g.mul(g.mul(xc, g.rsqrt(g.add(var, g.const("1e-05")))), g.input("gamma", ["c"]))


def rmsnorm_gain_gemm(g):
    x, w = g.input("X", ["m", "d"]), g.input("W", ["d", "n"])
    return g.matmul(g.mul(g.rms_norm(x, "d"), g.input("gamma", ["d"])), w, "d", "d")


_ROW = {"m": ROWS, "d": FEATURES}
CASES = {
    "layernorm_affine": (layernorm_affine, _ROW),
    "rmsnorm_gain": (rmsnorm_gain, _ROW),
    "softmax": (softmax, _ROW),
    "log_softmax": (log_softmax, _ROW),
    "cross_entropy": (cross_entropy, {"m": ROWS, "c": CLASSES}),
    "gelu_erf": (gelu_erf, _ROW),
    "gelu_tanh": (gelu_tanh, _ROW),
    "silu": (silu, _ROW),
    "sigmoid": (sigmoid, _ROW),
    "mse_loss": (mse_loss, _ROW),
    "instance_norm": (instance_norm, {"n": 32, "c": 128, "h": 64, "w": 64}),
    "gemm_epilogue": (gemm_epilogue, {"m": 4096, "k": 4096, "n": 4096}),
    "rmsnorm_gain_gemm": (rmsnorm_gain_gemm, {"m": 4096, "d": 4096, "n": 4096}),
}
MAX_KERNELS = {name: 1 if name == "gemm_epilogue" else 2 for name in CASES}


def torch_versions():
    """Each case as a PyTorch user writes it (inputs by name): the baseline torch.compile is
    measured on. (The unfused graph itself, run by leantile.reference, is not that baseline: it
    computes in float32 wherever a constant meets an f16 tensor.)"""
    import torch
    import torch.nn.functional as F

    def shape(t, name):
        return (t[name].shape[-1],)
    return {
        "layernorm_affine": lambda t: F.layer_norm(t["X"], shape(t, "X"), t["gamma"], t["beta"], eps=1e-5),
        "rmsnorm_gain": lambda t: F.rms_norm(t["X"], shape(t, "X"), t["gamma"], eps=1e-5),
        "softmax": lambda t: torch.softmax(t["X"], -1),
        "log_softmax": lambda t: torch.log_softmax(t["X"], -1),
        "cross_entropy": lambda t: F.cross_entropy(t["X"], t["label"].long()),
        "gelu_erf": lambda t: F.gelu(t["X"]),
        "gelu_tanh": lambda t: F.gelu(t["X"], approximate="tanh"),
        "silu": lambda t: F.silu(t["X"]),
        "sigmoid": lambda t: torch.sigmoid(t["X"]),
        "mse_loss": lambda t: F.mse_loss(t["A"], t["B"]),
        "instance_norm": lambda t: F.instance_norm(t["X"], weight=t["gamma"], eps=1e-5),
        "gemm_epilogue": lambda t: torch.sigmoid(torch.clamp_max(t["X"] @ t["W"] * t["s"] + t["bias"], 2.0) + 0.5),
        "rmsnorm_gain_gemm": lambda t: F.rms_norm(t["X"], shape(t, "X"), t["gamma"], eps=1e-5) @ t["W"],
    }


def graph(name: str, **sizes):
    """The graph of case `name`, at its benchmark shape with `sizes` overriding axes."""
    from leantile.dag import build_graph_with_output
    body, axes = CASES[name]
    return build_graph_with_output(name, {**axes, **{a: v for a, v in sizes.items() if a in axes}}, body)


def _graph_function(name):
    def build(**sizes):
        return graph(name, **sizes)
    build.__doc__ = f"{name} as a graph: `leantile bench examples/fusion.py:{name}_graph`"
    return build


for _name in CASES:  # layernorm_affine_graph(**sizes), ...: sources for every leantile command
    globals()[f"{_name}_graph"] = _graph_function(_name)
