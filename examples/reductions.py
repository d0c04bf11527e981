"""Issue 49's forms, written with the builder as a user would, at the sizes people run them:
norms over several axes, losses to a scalar, pooling over a split axis of a GEMM's output, row ops
with gains and two outputs, GEMM epilogues that read positions. Each case also has the PyTorch a
user writes for it (torch.compile of that is the baseline: benchmarks/fusion/fusion_suite.py
--cases reductions) and the kernel count the issue asks for (`max_kernels`).
tests/cpu/test_reduction_examples.py checks, at small sizes, that every candidate equals the
graph and that the PyTorch equals the graph too (so the baseline computes what is measured).

Each entry: name -> Case(body(g) returning the output node or None after g.output calls, axes at
the benchmark shape, torch(inputs dict) -> output tensor or tuple in output order, max_kernels).
"""
from __future__ import annotations

from collections import namedtuple
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

# body(g), axes at the benchmark shape, torch(inputs) -> output(s), the kernels the issue asks for
Case = namedtuple("Case", "body axes torch max_kernels")


def _sum_over(g, x, axes):
    for a in reversed(axes):
        x = g.red("sum", x, a)
    return x


def _count(g, axes):
    c = g.size_const(axes[0])
    for a in axes[1:]:
        c = g.mul(c, g.size_const(a))
    return c


def _normalise(g, x, axes, eps="1e-05"):
    """(x - mean) / sqrt(var + eps) over `axes` (nested sums, innermost axis first)."""
    n = _count(g, axes)
    xc = g.sub(x, g.div(_sum_over(g, x, axes), n))
    var = g.div(_sum_over(g, g.square(xc), axes), n)
    return g.mul(xc, g.rsqrt(g.add(var, g.const(eps))))


def gemm_groupnorm(g):
    """GroupNorm after a GEMM (KernelBench's Gemm + GroupNorm): y[b, g, cg] = x W, normalised
    over each group's cg channels, a gain and a bias per channel."""
    x, w = g.input("X", ["b", "k"]), g.input("W", ["k", "g", "cg"])
    y = _normalise(g, g.matmul(x, w, "k", "k"), ["cg"])
    return g.add(g.mul(y, g.input("gamma", ["g", "cg"])), g.input("beta", ["g", "cg"]))


def layernorm_chw(g):
    """LayerNorm over (c, h, w) of x[n, c, h, w], no affine (F.layer_norm(x, x.shape[1:]))."""
    return _normalise(g, g.input("X", ["n", "c", "h", "w"]), ["c", "h", "w"])


def groupnorm(g):
    """GroupNorm of x[n, g, cg, h, w] (channels c = g * cg): statistics over (cg, h, w)."""
    return _normalise(g, g.input("X", ["n", "g", "cg", "h", "w"]), ["cg", "h", "w"])


def batchnorm_train(g):
    """BatchNorm in training mode: statistics per channel over (n, h, w) of x[n, c, h, w]."""
    return _normalise(g, g.input("X", ["n", "c", "h", "w"]), ["n", "h", "w"])


def mse_loss(g):
    a, b = g.input("A", ["m", "d"]), g.input("B", ["m", "d"])
    return g.div(_sum_over(g, g.square(g.sub(a, b)), ["m", "d"]), _count(g, ["m", "d"]))


def huber_loss(g):
    """F.smooth_l1_loss (beta 1): 0.5 e^2 where |e| < 1, |e| - 0.5 elsewhere, the mean."""
    a, b = g.input("A", ["m", "d"]), g.input("B", ["m", "d"])
    e = g.abs(g.sub(a, b))
    v = g.select(g.lt(e, g.const("1")), g.mul(g.square(e), g.const("0.5")), g.sub(e, g.const("0.5")))
    return g.div(_sum_over(g, v, ["m", "d"]), _count(g, ["m", "d"]))


def hinge_loss(g):
    """mean(clamp(1 - pred * target, min=0)) (KernelBench's HingeLoss)."""
    p, t = g.input("P", ["m", "d"]), g.input("T", ["m", "d"])
    v = g.max(g.sub(g.const("1"), g.mul(p, t)), g.const("0"))
    return g.div(_sum_over(g, v, ["m", "d"]), _count(g, ["m", "d"]))


def gemm_maxpool(g):
    """max over a split axis of a GEMM's output: y[b, n, pool] = x W, then max over pool
    (KernelBench's Matmul + MaxPool1d, the kernel's window as the split axis)."""
    x, w = g.input("X", ["b", "k"]), g.input("W", ["k", "n", "pool"])
    return g.red("max", g.matmul(x, w, "k", "k"), "pool")


def gemm_avgpool(g):
    x, w = g.input("X", ["b", "k"]), g.input("W", ["k", "n", "pool"])
    return g.div(g.red("sum", g.matmul(x, w, "k", "k"), "pool"), g.size_const("pool"))


def add_rmsnorm(g):
    """The residual stream: h = x + r (an output), then RMSNorm(h) with a gain (the other)."""
    h = g.add(g.input("X", ["m", "d"]), g.input("R", ["m", "d"]))
    g.output("h", h)
    g.output("y", g.mul(g.rms_norm(h, "d"), g.input("gamma", ["d"])))


def mish_mish_gemm(g):
    """Mish(Mish(x W)), Mish(v) = v tanh(softplus(v)), softplus(v) = log(1 + exp(v))."""
    def mish(v):
        return g.mul(v, g.tanh(g.log(g.add(g.const("1"), g.exp(v)))))
    x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
    return mish(mish(g.matmul(x, w, "k", "k")))


def triu_gemm(g):
    """triu(x W): the upper triangle of the product, positions from iota."""
    x, w = g.input("X", ["m", "k"]), g.input("W", ["k", "n"])
    return g.select(g.ge(g.iota("n"), g.iota("m")), g.matmul(x, w, "k", "k"), g.const("0"))


def bias_grad(g):
    """A bias's gradient in training: the output gradient summed over the tokens, dY[m, n].sum(0)
    (a column reduction: the reduced axis is the outer one, the kept one contiguous)."""
    return g.red("sum", g.input("dY", ["m", "n"]), "m")


def rmsnorm_gain_grad(g):
    """An RMSNorm gain's gradient: sum over the tokens of dY * X * rsqrt(mean(X^2) + eps), the row
    statistic per token, then a column sum."""
    x, dy = g.input("X", ["m", "d"]), g.input("dY", ["m", "d"])
    r = g.rsqrt(g.add(g.div(g.red("sum", g.square(x), "d"), g.size_const("d")), g.const("1e-05")))
    return g.red("sum", g.mul(g.mul(dy, x), r), "m")


def _fusion_examples():
    """examples/fusion.py, whose row forms (log-softmax, LayerNorm with gain and bias, RMSNorm with
    a gain into a GEMM) this suite runs at other sizes."""
    spec = spec_from_file_location("leantile_fusion_examples", Path(__file__).with_name("fusion.py"))
    m = module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


_F = _fusion_examples()
log_softmax, layernorm_affine, rmsnorm_gain_gemm = _F.log_softmax, _F.layernorm_affine, _F.rmsnorm_gain_gemm


def _torch():
    import torch
    import torch.nn.functional as F

    def last(t, name):
        return (t[name].shape[-1],)

    def gemm_gn(t):
        k, gg, cg = t["W"].shape
        y = t["X"] @ t["W"].reshape(k, gg * cg)
        return F.group_norm(y, gg, t["gamma"].reshape(-1), t["beta"].reshape(-1), eps=1e-5).reshape(-1, gg, cg)

    def gn(t):
        n, gg, cg, h, w = t["X"].shape
        return F.group_norm(t["X"].reshape(n, gg * cg, h, w), gg, eps=1e-5).reshape(n, gg, cg, h, w)

    def bn(t):
        return F.batch_norm(t["X"], None, None, training=True, eps=1e-5)

    def pool(kind):
        def f(t):
            k, n, p = t["W"].shape
            y = (t["X"] @ t["W"].reshape(k, n * p)).reshape(-1, n, p)
            return y.amax(-1) if kind == "max" else y.mean(-1)
        return f

    def mish2(t):
        return F.mish(F.mish(t["X"] @ t["W"]))

    def add_rms(t):
        h = t["X"] + t["R"]
        return h, F.rms_norm(h, last(t, "X"), t["gamma"], eps=1e-5)
    return {
        "gemm_groupnorm": gemm_gn,
        "gemm_groupnorm_large": gemm_gn,
        "layernorm_chw": lambda t: F.layer_norm(t["X"], t["X"].shape[1:], eps=1e-5),
        "groupnorm": gn,
        "batchnorm_train": bn,
        "mse_loss": lambda t: F.mse_loss(t["A"], t["B"]),
        "huber_loss": lambda t: F.smooth_l1_loss(t["A"], t["B"]),
        "hinge_loss": lambda t: torch.clamp(1 - t["P"] * t["T"], min=0).mean(),
        "gemm_maxpool": pool("max"),
        "gemm_avgpool": pool("avg"),
        "gemm_maxout": pool("max"),
        "log_softmax": lambda t: torch.log_softmax(t["X"], -1),
        "layernorm_affine": lambda t: F.layer_norm(t["X"], last(t, "X"), t["gamma"], t["beta"], eps=1e-5),
        "add_rmsnorm": add_rms,
        "mish_mish_gemm": mish2,
        "triu_gemm": lambda t: torch.triu(t["X"] @ t["W"]),
        "rmsnorm_gain_gemm": lambda t: F.rms_norm(t["X"], last(t, "X"), t["gamma"], eps=1e-5) @ t["W"],
        "bias_grad": lambda t: t["dY"].sum(0),
        "rmsnorm_gain_grad": lambda t: (t["dY"] * t["X"] * torch.rsqrt(
            t["X"].pow(2).mean(-1, keepdim=True) + 1e-5)).sum(0),
    }


# The sizes: KernelBench's (level 1 and 2) where the figure came from, else a model's.
_KB = {"m": 128, "d": 4096}
_BODIES = {
    "gemm_groupnorm": (gemm_groupnorm, {"b": 128, "k": 512, "g": 8, "cg": 128}, 1),
    # the same at a model's width: 8192 tokens through a 4096 x 4096 projection, 32 groups of 128
    # (fuse_row_epilogue's 128-column tile against a GEMM of its own beside a row kernel)
    "gemm_groupnorm_large": (gemm_groupnorm, {"b": 8192, "k": 4096, "g": 32, "cg": 128}, 1),
    "layernorm_chw": (layernorm_chw, {"n": 16, "c": 64, "h": 256, "w": 256}, 2),
    "groupnorm": (groupnorm, {"n": 16, "g": 8, "cg": 8, "h": 256, "w": 256}, 2),
    "batchnorm_train": (batchnorm_train, {"n": 16, "c": 64, "h": 256, "w": 256}, 2),
    "mse_loss": (mse_loss, _KB, 2),
    "huber_loss": (huber_loss, _KB, 2),
    "hinge_loss": (hinge_loss, _KB, 2),
    "gemm_maxpool": (gemm_maxpool, {"b": 128, "k": 512, "n": 128, "pool": 2}, 1),
    "gemm_avgpool": (gemm_avgpool, {"b": 128, "k": 512, "n": 128, "pool": 2}, 1),
    # a maxout layer at a transformer's width: the max of 2 pieces of an 8192-wide projection
    "gemm_maxout": (gemm_maxpool, {"b": 4096, "k": 4096, "n": 4096, "pool": 2}, 1),
    "log_softmax": (log_softmax, {"m": 2048, "d": 32000}, 1),
    "layernorm_affine": (layernorm_affine, {"m": 8192, "d": 5120}, 1),
    "add_rmsnorm": (add_rmsnorm, {"m": 4096, "d": 4096}, 1),
    "mish_mish_gemm": (mish_mish_gemm, {"m": 4096, "k": 4096, "n": 4096}, 1),
    "triu_gemm": (triu_gemm, {"m": 4096, "k": 4096, "n": 4096}, 1),
    "rmsnorm_gain_gemm": (rmsnorm_gain_gemm, {"m": 4096, "d": 4096, "n": 4096}, 1),
    # training's column reductions at a batch of 16384 tokens / 8192 tokens of a 4096-wide model
    # (a split over the tokens and a short combine: 2 kernels; the gain's row statistic first: 3)
    "bias_grad": (bias_grad, {"m": 16384, "n": 4096}, 2),
    "rmsnorm_gain_grad": (rmsnorm_gain_grad, {"m": 8192, "d": 4096}, 3),
}


def cases() -> dict[str, Case]:
    fns = _torch()
    return {name: Case(body, axes, fns[name], k) for name, (body, axes, k) in _BODIES.items()}


def graph(name: str, **sizes):
    """The graph of case `name` at its benchmark shape, `sizes` overriding axes."""
    from leantile.dag import build_graph, build_graph_with_output
    body, axes, _ = _BODIES[name]
    axes = {**axes, **{a: v for a, v in sizes.items() if a in axes}}
    if name == "add_rmsnorm":  # two outputs, named in the body
        return build_graph(name, axes, body)
    return build_graph_with_output(name, axes, body)
