"""Hypothesis strategies shared by the test suite: random valid graphs built through
leantile.dag, covering elementwise chains, reductions, matmuls and the subdags."""
from __future__ import annotations

from hypothesis import strategies as st

from leantile.dag import DagM

AXES = ("i", "j", "k", "l")
SAFE_UNARY = ("exp", "neg", "square", "silu", "gelu_tanh")
BINARY = ("add", "sub", "mul", "max")


@st.composite
def sizes(draw, names=AXES, lo=1, hi=9):
    return {a: draw(st.integers(lo, hi)) for a in names}


@st.composite
def random_graphs(draw, max_ops=8):
    """A random graph over axes i, j, k, l. Values stay bounded: exp only follows a
    normalising step (softmax, rms_norm, layer_norm), division only by safe positives."""
    axes = draw(sizes())
    g = DagM("random", axes)
    x = g.input("X", ["i", "k"], "f32")
    w = g.input("W", ["k", "j"], "f32")
    pool = [x, w]
    growth = 0  # products that can grow magnitudes; capped so float64 never overflows
    for _ in range(draw(st.integers(1, max_ops))):
        choice = draw(st.sampled_from(
            ["unary", "binary", "reduce", "matmul", "softmax", "rms_norm", "layer_norm", "mean", "const"]))
        a = draw(st.sampled_from(pool))
        ax = g.nodes[a].axes
        if choice == "unary":
            op = draw(st.sampled_from(SAFE_UNARY))
            if op == "exp":
                if not ax:
                    continue
                a = g.softmax(a, ax[-1])  # exp of a probability: bounded
            elif op == "square":
                if growth >= 2:
                    continue
                growth += 1
            pool.append(getattr(g, op)(a))
        elif choice == "binary":
            b = draw(st.sampled_from(pool))
            op = draw(st.sampled_from(BINARY))
            if op == "mul":
                if growth >= 2:
                    continue
                growth += 1
            pool.append(getattr(g, op)(a, b))
        elif choice == "reduce" and ax:
            pool.append(g.red(draw(st.sampled_from(["sum", "max"])), a, draw(st.sampled_from(ax))))
        elif choice == "matmul" and ax and growth < 2:
            growth += 1
            other = [p for p in pool if any(g.axes[q] == g.axes[c] for q in g.nodes[p].axes for c in ax)]
            b = draw(st.sampled_from(other))
            pairs = [(c, q) for c in ax for q in g.nodes[b].axes
                     if g.axes[c] == g.axes[q] and (c == q or q not in ax)]
            if pairs:
                ca, cb = draw(st.sampled_from(pairs))
                pool.append(g.matmul(a, b, ca, cb))
        elif choice in ("softmax", "rms_norm", "layer_norm", "mean") and ax:
            axis = draw(st.sampled_from(ax))
            if choice == "mean":
                pool.append(g.mean_along(a, axis))
            else:
                pool.append(getattr(g, choice)(a, axis))
        elif choice == "const":
            c = g.const(draw(st.sampled_from(["0.5", "2.0", "1e-05", "-3.25"])))
            pool.append(g.add(a, c))
    g.output("out", pool[-1])
    return g.graph()


@st.composite
def structured_graphs(draw):
    """The fused patterns with the operands users build around them: attention whose Q, K, V
    are projections (computed operands, not inputs), scaled scores; a norm feeding two GEMMs
    of one (possibly the same) weight, with an intermediate also returned as an output;
    size-1 axes."""
    kind = draw(st.sampled_from(["attention", "norm_dual"]))
    if kind == "attention":
        axes = {"h": draw(st.integers(1, 2)), "t_q": draw(st.integers(1, 6)), "t_kv": draw(st.integers(1, 9)),
                "d": draw(st.integers(1, 5)), "d_h": draw(st.integers(1, 5))}
        g = DagM("attention_proj", axes)
        x = g.input("X", ["h", "t_q", "d"], "f32")
        kv = g.input("KV", ["h", "t_kv", "d"], "f32")
        proj = {n: g.input(f"W{n}", ["d", "d_h"], "f32") for n in "QKV"}
        q = g.matmul(x, proj["Q"], "d", "d") if draw(st.booleans()) else g.input("Q", ["h", "t_q", "d_h"], "f32")
        k = g.matmul(kv, proj["K"], "d", "d")
        v = g.matmul(kv, proj["V"], "d", "d") if draw(st.booleans()) else g.input("V", ["h", "t_kv", "d_h"], "f32")
        s = g.matmul(q, k, "d_h", "d_h")
        if draw(st.booleans()):
            s = g.div(s, g.sqrt(g.size_const("d_h")))
        g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
        return g.graph()
    axes = {"m": draw(st.integers(1, 6)), "d": draw(st.integers(1, 9)), "n": draw(st.integers(1, 6))}
    g = DagM("norm_dual", axes)
    x = g.input("X", ["m", "d"], "f32")
    w = g.input("W", ["d", "n"], "f32")
    u = w if draw(st.booleans()) else g.input("U", ["d", "n"], "f32")
    h = getattr(g, draw(st.sampled_from(["layer_norm", "rms_norm"])))(x, "d")
    a, b = g.matmul(h, w, "d", "d"), g.matmul(h, u, "d", "d")
    g.output("out", g.mul(g.silu(a), b))
    if draw(st.booleans()):
        g.output("gate", a)  # an intermediate of the fused region is also an output
    return g.graph()
