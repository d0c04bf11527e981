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
