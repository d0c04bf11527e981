"""(rmsnorm(X) W_up) * (rmsnorm(X) W_gate), one shared rmsnorm."""
from ..dag import DagM, build_graph_with_output

DEFAULT_SIZES = {"m": 1024, "d": 1024, "n": 1024}


def body(g: DagM) -> int:
    x = g.input("X", ["m", "d"])
    w_up = g.input("W_up", ["d", "n"])
    w_gate = g.input("W_gate", ["d", "n"])
    xn = g.rms_norm(x, "d", "1e-05")
    return g.mul(g.matmul(xn, w_up, "d", "d"), g.matmul(xn, w_gate, "d", "d"))


def build(**sizes):
    return build_graph_with_output("rmsnorm_mlp", {**DEFAULT_SIZES, **sizes}, body)


def baselines(t: dict):
    """What leantile is timed against on this graph: (torch eager of the same math, {vendor
    path: callable}), over the input tensors `t` (leantile bench; torch.compile of the eager
    one is added there). torch is imported here, not at module import (`leantile list` stays
    torch-free)."""
    from .rmsnorm import rms

    def f():
        n = rms(t["X"])
        return (n @ t["W_up"]) * (n @ t["W_gate"])
    return f, {}
