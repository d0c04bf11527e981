"""Hypothesis strategies for GEMMs over several axes and sums of GEMM products (the GPU campaign's
multi_axis_gemm and gemm_sums families; tests/cpu/test_merge_gemm_axes.py, test_gemm_sums.py)."""
from __future__ import annotations

from hypothesis import strategies as st

from leantile.dag import DagM


@st.composite
def multi_axis_gemm_graphs(draw, hi: int = 9):
    """A GEMM whose rows or columns span several axes, as users write activations and per-head
    weights: X[b, t, k] (or [t, k], [b, t, s, k]) times W[k, n] (or [k, h, d]), with what may
    keep the axes apart (rules.flatten.merge_gemm_axes views them as one only where nothing does):
    a bias over the last column axis, a norm over it (a reduction over a part), a position along
    a row axis (iota), a second product batched over b; and what must merge alike: a computed
    LHS (scaled per row, or activated), the weight's contraction axis renamed, the same weight
    read by a second GEMM, the product also an output, a cast, a constant; an activation; f32,
    f16 or bf16; size-1 axes."""
    rows = draw(st.sampled_from([("t",), ("b", "t"), ("b", "t", "s")]))
    cols = draw(st.sampled_from([("n",), ("h", "d")]))
    kw = draw(st.sampled_from(["k", "kk"]))  # the weight's own name for the contraction
    k = draw(st.integers(1, hi))
    g = DagM("multi_axis_gemm", {**{a: draw(st.integers(1, hi)) for a in (*rows, *cols)}, "k": k,
                                 **({"kk": k} if kw == "kk" else {})})
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    x = g.input("X", [*rows, "k"], dt)
    lhs = draw(st.sampled_from(["input", "row_scaled", "activated"]))
    if lhs == "row_scaled":
        x = g.mul(x, g.input("r", list(rows), dt))
    elif lhs == "activated":
        x = g.gelu_tanh(x)
    w = g.input("W", [kw, *cols], dt)
    y = g.matmul(x, w, "k", kw)
    blocker = draw(st.sampled_from(["none", "none", "bias", "norm", "iota", "batched", "reused"]))
    if blocker == "bias":  # over the last column axis only: broadcast over the others
        y = g.add(y, g.input("bias", [cols[-1]], dt))
    elif blocker == "norm":
        y = g.layer_norm(y, cols[-1])
    elif blocker == "iota":
        y = g.mul(y, g.iota(rows[-1]))
    elif blocker == "batched" and len(rows) > 1:  # a second product batched over b: b stays apart
        y = g.add(y, g.matmul(g.input("Z", [rows[0], *rows[1:], "k"], dt), g.input("V", [rows[0], "k", *cols], dt), "k", "k"))
    elif blocker == "reused":  # the same weight read by a second GEMM of other rows
        g.output("other", g.matmul(g.input("U", [*rows, "k"], dt), w, "k", kw))
    if draw(st.booleans()):
        g.output("product", y)
    if draw(st.booleans()):
        y = g.silu(y)
    if draw(st.booleans()):
        y = g.cast(g.mul(y, g.const("0.5")), "f32")
    g.output("out", y)
    return g.graph()


@st.composite
def gemm_sum_graphs(draw, hi: int = 9):
    """A sum of GEMM products over one output, as recurrent cells (W x + U h), residual branches and
    gradients write it (dX = dG W_g^T + dU W_u^T: an input two GEMMs read): two or three products,
    over contractions of their own sizes, a weight read transposed, a computed LHS (activated, or
    another product: a GEMM after a GEMM), a product that is also an output, summed in any order,
    with a bias or a scale between, then maybe an activation or a norm over the columns; f32, f16
    or bf16; size-1 axes. The later product's epilogue adds the earlier ones (earlier_product)."""
    n_terms = draw(st.integers(2, 3))
    sizes = {"m": draw(st.integers(1, hi)), "n": draw(st.integers(1, hi)),
             **{f"k{i}": draw(st.integers(1, hi)) for i in range(n_terms)}}
    g = DagM("gemm_sum", sizes)
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    terms = []
    for i in range(n_terms):
        k = f"k{i}"
        x = g.input(f"X{i}", ["m", k], dt)
        lhs = draw(st.sampled_from(["input", "input", "activated", "product"]))
        if lhs == "activated":
            x = g.tanh(x)
        elif lhs == "product" and i:  # the first term's LHS times a square weight: a GEMM feeding a GEMM
            x = g.matmul(g.input(f"P{i}", ["m", "n"], dt), g.input(f"Q{i}", ["n", k], dt), "n", "n")
        if draw(st.booleans()):  # the weight stored [n, k]: read transposed
            y = g.matmul(x, g.input(f"W{i}", ["n", k], dt), k, k)
        else:
            y = g.matmul(x, g.input(f"W{i}", [k, "n"], dt), k, k)
        if draw(st.booleans()) and i == 0:
            g.output("first", y)
        terms.append(y)
    order = draw(st.permutations(range(n_terms)))
    acc = terms[order[0]]
    for j in order[1:]:
        between = draw(st.sampled_from(["none", "none", "bias", "scale"]))
        t = terms[j]
        if between == "bias":
            t = g.add(t, g.input(f"b{j}", ["n"], dt))
        elif between == "scale":
            t = g.mul(t, g.const("0.5"))
        acc = g.add(acc, t) if draw(st.booleans()) else g.add(t, acc)
    after = draw(st.sampled_from(["none", "silu", "norm"]))
    if after == "silu":
        acc = g.silu(acc)
    elif after == "norm":
        acc = g.layer_norm(acc, "n")
    g.output("out", acc)
    return g.graph()
