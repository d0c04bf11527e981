"""gelu_tanh(layernorm(X) W + b): layernorm without affine, eps 1e-5."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "d": 1024, "n": 4096}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w = g.input("W", ["d", "n"])
    b = g.input("b", ["n"])
    y = g.matmul(g.layer_norm(x, "d", "1e-05"), w, "d", "d")
    return g.gelu_tanh(g.add(y, b))


def build(**sizes):
    return build_graph_with_output("layernorm_linear_gelu", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    import torch.nn.functional as F

    def f():
        z = F.layer_norm(t["X"], t["X"].shape[-1:], eps=1e-5) @ t["W"] + t["b"]
        return F.gelu(z, approximate="tanh")
    return f, {"cublas_matmul_alone": lambda: t["X"] @ t["W"]}
