"""Generators of issue 49's reductions (hypothesis strategies and graph bodies): a long axis into a
scalar or a few rows (split_reduction), norms over several axes (on chip in one kernel where the
group fits). tests/strategies.py holds the other generators."""
from __future__ import annotations

from hypothesis import strategies as st

from leantile.dag import DagM


@st.composite
def long_reduction_graphs(draw):
    """A reduction of a long axis into a scalar or a few rows (issue 49: split_reduction spreads
    it over CTAs): sums, maxima, a mean, a log-sum-exp (an online sum when streamed), each
    behind an elementwise prologue and before a row epilogue, sometimes two outputs; the axis
    past 7 blocks of 1024 (mostly no multiple of the block), or a row held on chip at a multiple of
    1024 that is no power of two (rules/regions.padded: 5120 on 256 threads did not lay out in
    bf16, GPU campaign s32); 0 to 2 row axes of 1 to 3; f32, f16 or bf16."""
    n = draw(st.one_of(st.integers(7 * 1024 + 1, 40000), st.sampled_from([3072, 5120, 6144, 7168])))
    rows = draw(st.sampled_from([(), ("r",), ("q", "r")]))
    g = DagM("long_reduction", {"n": n, **{a: draw(st.integers(1, 3)) for a in rows}})
    x = g.input("X", [*rows, "n"], draw(st.sampled_from(["f32", "f16", "bf16"])))
    pro = draw(st.sampled_from(["id", "square", "abs", "sigmoid"]))
    p = x if pro == "id" else getattr(g, pro)(x)
    kind = draw(st.sampled_from(["sum", "max", "mean", "lse", "sum_and_max"]))
    if kind == "lse" and pro == "id":  # the GPU campaign masks a prefix of each row of these (-inf)
        g.name = "long_reduction_lse"
    if kind == "lse":
        m = g.red("max", p, "n")
        out = g.add(m, g.log(g.red("sum", g.exp(g.sub(p, m)), "n")))
    elif kind == "mean":
        out = g.div(g.red("sum", p, "n"), g.size_const("n"))
    elif kind == "sum_and_max":
        out = g.sub(g.red("max", p, "n"), g.div(g.red("sum", p, "n"), g.size_const("n")))
    else:
        out = g.red(kind, p, "n")
    if draw(st.booleans()):  # a row epilogue after the reduction
        out = g.tanh(g.mul(out, g.const("0.001")))
    g.output("y", out)
    if draw(st.booleans()) and kind != "max":  # the reduction itself an output too
        g.output("s", g.red("sum", p, "n"))
    return g.graph()


def norm_over(axes: tuple[str, ...], shape: tuple[str, ...] = ("n", "c", "h", "w"), dtype: str = "f32"):
    """A body: the LayerNorm of x[shape] over `axes` (innermost reduced first), as nested sums:
    a LayerNorm over (c, h, w), a GroupNorm's (cg, h, w), an InstanceNorm's (h, w) (issue 49)."""
    def body(g):
        x = g.input("X", list(shape), dtype)

        def total(t):
            for a in reversed(axes):
                t = g.red("sum", t, a)
            return t
        count = g.size_const(axes[0])
        for a in axes[1:]:
            count = g.mul(count, g.size_const(a))
        xc = g.sub(x, g.div(total(x), count))
        var = g.div(total(g.square(xc)), count)
        return g.mul(xc, g.rsqrt(g.add(var, g.const("1e-05"))))
    return body


@st.composite
def axis_norm_graphs(draw):
    """A norm over several axes of x[n, c, h, w] or a GroupNorm's x[n, g, cg, h, w]: on chip in
    one kernel where the group fits, in more where it does not."""
    from leantile.dag import build_graph_with_output
    if draw(st.booleans()):
        shape, axes = ("n", "c", "h", "w"), draw(st.sampled_from([("c", "h", "w"), ("h", "w"), ("c", "h")]))
    else:
        shape, axes = ("n", "g", "cg", "h", "w"), ("cg", "h", "w")
    sizes = {a: draw(st.integers(1, 9)) for a in shape}
    return build_graph_with_output("axis_norm", sizes, norm_over(axes, shape, draw(st.sampled_from(["f32", "f16"]))))


def _maybe_normalised(draw, g, x, dt: str):
    """x, or its RMSNorm or its LayerNorm with a gain over k (a GEMM's LHS: the pullouts and
    gain_fold then share the GEMM's epilogue with whatever else fuses there)."""
    norm = draw(st.sampled_from(["none", "none", "rms", "layer_gain"]))
    if norm == "rms":
        return g.rms_norm(x, "k")
    if norm == "layer_gain":
        return g.mul(g.layer_norm(x, "k"), g.input("G", ["k"], dt))
    return x


@st.composite
def pooled_gemm_graphs(draw):
    """Pooling over a split axis of a GEMM's output (issue 49; rules/pool.py fuses it into the
    GEMM's epilogue): y[(h,) b, n, p] = X W with W [k, n, p], maybe an elementwise step (an
    activation, a bias over (n, p)) before a max, a sum or a mean over p, maybe a step after (a
    bias over n, a tanh); p mostly a power of two the rule takes (2..32), sometimes 1, 3 or 64,
    or the product or its activation an output too (refused, pooled by a kernel of its own);
    sizes that do not divide the tiles, size-1 axes; the weight [k, n, p] or nn.Linear's [n, p, k];
    X maybe normalised first (RMSNorm, LayerNorm with a gain: pullouts and gain_fold with the pool);
    f32, f16 or bf16."""
    p = draw(st.sampled_from([2, 2, 4, 4, 8, 16, 32, 1, 3, 64]))
    batch = draw(st.booleans())
    sizes = {"b": draw(st.integers(1, 70)), "k": draw(st.integers(1, 40)), "n": draw(st.integers(1, 20)), "p": p,
             **({"h": draw(st.integers(1, 2))} if batch else {})}
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    g = DagM("pooled_gemm", sizes)
    x = _maybe_normalised(draw, g, g.input("X", [*(["h"] if batch else []), "b", "k"], dt), dt)
    layout = draw(st.sampled_from([["k", "n", "p"], ["n", "p", "k"]]))  # nn.Linear's weight: [out, in]
    y = g.matmul(x, g.input("W", layout, dt), "k", "k")
    pre = draw(st.sampled_from(["none", "relu", "silu", "bias"]))
    z = y if pre == "none" else g.max(y, g.const("0")) if pre == "relu" else g.silu(y) if pre == "silu" else \
        g.add(y, g.input("B", ["n", "p"], dt))
    kind = draw(st.sampled_from(["max", "sum", "mean"]))
    r = g.div(g.red("sum", z, "p"), g.size_const("p")) if kind == "mean" else g.red(kind, z, "p")
    post = draw(st.sampled_from(["none", "bias", "tanh"]))
    out = r if post == "none" else g.add(r, g.input("C", ["n"], dt)) if post == "bias" else g.tanh(r)
    g.output("y", out)
    extra = draw(st.sampled_from(["none", "none", "pooled", "product"]))
    if extra == "pooled" and post != "none":
        g.output("pooled", r)
    elif extra == "product":
        g.output("product", z)
    return g.graph()


@st.composite
def row_epilogue_graphs(draw, rows=(140, 260), width=(1025, 3000)):
    """A reduction over long rows whose epilogue runs over the row itself (issue 49: one kernel
    streams the rows twice, plan.Kernel.second_pass): log-softmax (scaled or not), x centred on
    its mean, x over its largest magnitude, x minus its log-sum-exp times a gain over d; behind a
    prologue, maybe a batch axis, the statistic an output too; rows enough to fill the GPU at
    the given sizes (a test that shrinks rules.row_tiles.ON_CHIP streams widths past 1024). f32,
    f16, bf16."""
    sizes = {"r": draw(st.integers(*rows)), "d": draw(st.integers(*width))}
    batch = draw(st.booleans())
    if batch:
        sizes = {"h": 2, **sizes, "r": sizes["r"] // 2}
    g = DagM("row_epilogue", sizes)
    x = g.input("X", [*(["h"] if batch else []), "r", "d"], draw(st.sampled_from(["f32", "f16", "bf16"])))
    pro = draw(st.sampled_from(["id", "scale", "tanh"]))
    p = x if pro == "id" else g.mul(x, g.const("0.125")) if pro == "scale" else g.tanh(x)
    kind = draw(st.sampled_from(["log_softmax", "centred", "max_abs", "lse_gain"]))
    if kind in ("log_softmax", "lse_gain"):
        z = g.sub(p, g.red("max", p, "d"))
        stat = g.log(g.red("sum", g.exp(z), "d"))
        out = g.sub(z, stat)
        if kind == "lse_gain":
            out = g.mul(out, g.input("gain", ["d"], "f32"))
    elif kind == "centred":
        stat = g.div(g.red("sum", p, "d"), g.size_const("d"))
        out = g.sub(p, stat)
    else:
        stat = g.red("max", g.abs(p), "d")
        out = g.div(p, g.add(stat, g.const("1e-3")))
    g.output("y", out)
    if draw(st.booleans()):
        g.output("stat", stat)
    return g.graph()


@st.composite
def column_reduction_graphs(draw, rows=(1, 9000), cols=(1, 700)):
    """A reduction over the outer axis of x[m, d] (d contiguous, kept): a norm's gain and bias
    gradients (sum over rows of dy * x_hat, of dy), column means, maxima, sums of squares, behind
    a prologue that may read a per-row vector, with an epilogue over the columns; 0 or 1 leading
    batch axis. rules.regions streams m over 128 columns a CTA (column_layout) where a whole
    column on chip would hold a few bytes of every row; split_reduction spreads m over CTAs."""
    lead = draw(st.sampled_from([(), ("b",)]))
    m, d = draw(st.integers(*rows)), draw(st.integers(*cols))
    g = DagM("column_reduction", {"m": m, "d": d, **{a: draw(st.integers(1, 3)) for a in lead}})
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    x = g.input("X", [*lead, "m", "d"], dt)
    pro = draw(st.sampled_from(["id", "times_dy", "row_scaled", "square"]))
    if pro == "times_dy":
        p = g.mul(g.input("dY", [*lead, "m", "d"], dt), x)
    elif pro == "row_scaled":  # x * r[m]: a norm's x_hat, its 1/rms a per-row vector
        p = g.mul(x, g.rsqrt(g.add(g.input("r", [*lead, "m"], "f32"), g.const("1.5"))))
    else:
        p = x if pro == "id" else g.square(x)
    kind = draw(st.sampled_from(["sum", "max", "mean", "two_sums"]))
    if kind == "mean":
        out = g.div(g.red("sum", p, "m"), g.size_const("m"))
    elif kind == "two_sums":  # dgamma and dbeta of one pass
        out = g.add(g.red("sum", p, "m"), g.red("sum", x, "m"))
    else:
        out = g.red(kind, p, "m")
    if draw(st.booleans()):
        out = g.mul(out, g.input("gamma", ["d"], dt))
    g.output("y", out)
    return g.graph()


@st.composite
def head_reduction_graphs(draw, heads=(1, 16), rows=(1, 3000), cols=(1, 300)):
    """A reduction over a short axis before two kept ones, x[(b,) g, t, d] -> [(b,) t, d]: the GQA
    backward's sums of dK and dV over a group's query heads, a sum over experts or ensemble
    members. rules.regions holds g whole on chip; where a CTA's tile of g x d would hold few
    elements it tiles t too (outer_row_block: 4 x 64 float32 tiles, 16384 CTAs, ran at a tenth of
    the bandwidth). One or two reductions (dK and dV: one kernel), a prologue, an epilogue."""
    lead = draw(st.sampled_from([(), ("b",)]))
    sizes = {"g": draw(st.integers(*heads)), "t": draw(st.integers(*rows)), "d": draw(st.integers(*cols)),
             **{a: draw(st.integers(1, 3)) for a in lead}}
    g = DagM("head_reduction", sizes)
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    x = g.input("X", [*lead, "g", "t", "d"], dt)
    if draw(st.booleans()):
        x = g.mul(x, g.input("s", [*lead, "g", "t"], "f32"))  # a per-row scale, as a softmax's 1/l
    kind = draw(st.sampled_from(["sum", "max", "mean"]))
    out = g.red("max" if kind == "max" else "sum", x, "g")
    if kind == "mean":
        out = g.div(out, g.size_const("g"))
    if draw(st.booleans()):
        out = g.mul(out, g.input("gamma", ["d"], dt))
    g.output("y", out)
    if draw(st.booleans()):  # a second sum of the same shape, as dV beside dK
        g.output("y2", g.red("sum", g.input("Y", [*lead, "g", "t", "d"], dt), "g"))
    return g.graph()


@st.composite
def nested_reduction_graphs(draw):
    """Nested reductions over several axes, as users write them (flatten_reduction, issue 49):
    x over 3 or 4 axes in a drawn layout; a run of sums or maxima over a drawn subset of them in a
    drawn order (adjacent in the layout or not: BatchNorm's (n, h, w) keeps c between), a mean, a
    LayerNorm-like second run over x minus the first's result, or a max-shifted log-sum-exp; and
    what keeps axes apart: an inner result read elsewhere or an output, an iota along a part, a
    second input over the same axes in another order, a GEMM over one of them. Sizes 1 to 9."""
    names = ["n", "c", "h", "w"][:draw(st.integers(3, 4))]
    layout = draw(st.permutations(names))
    sizes = {a: draw(st.integers(1, 9)) for a in names}
    reduced = draw(st.lists(st.sampled_from(names), min_size=2, max_size=len(names) - 1, unique=True))
    blocker = draw(st.sampled_from(["none", "none", "none", "inner_read", "inner_output", "iota", "other_order",
                                    "gemm"]))
    g = DagM("nested_reduction", {**sizes, **({"o": 3} if blocker == "gemm" else {})})
    dt = draw(st.sampled_from(["f32", "f16"]))
    x = g.input("X", list(layout), dt)

    def run(t, kind):
        inner = []
        for a in reduced:
            t = g.red(kind, t, a)
            inner.append(t)
        return t, inner
    form = draw(st.sampled_from(["sum", "max", "mean", "norm", "shifted_sum"]))
    if form in ("norm", "mean"):
        count = g.size_const(reduced[0])
        for a in reduced[1:]:
            count = g.mul(count, g.size_const(a))
        total, inner = run(x, "sum")
        out = g.div(total, count)
        if form == "norm":
            xc = g.sub(x, out)
            var = g.div(run(g.square(xc), "sum")[0], count)
            out = g.mul(xc, g.rsqrt(g.add(var, g.const("1e-05"))))
    elif form == "shifted_sum":
        m, inner = run(x, "max")
        out = g.add(m, g.log(run(g.exp(g.sub(x, m)), "sum")[0]))
    else:
        out, inner = run(x, form)
    if blocker == "inner_read":  # the first inner result reduced on its own too
        out = g.add(out, g.red("sum", inner[0], draw(st.sampled_from([a for a in layout if a != reduced[0]]))))
    elif blocker == "inner_output":
        g.output("inner", inner[0])
    elif blocker == "iota":
        out = g.add(out, g.red("sum", g.mul(g.iota(reduced[-1]), g.const("0.01")), reduced[-1]))
    elif blocker == "other_order":
        out = g.add(out, run(g.input("Y", list(reversed(layout)), "f32"), "sum")[0])
    elif blocker == "gemm":
        k = reduced[0]
        out = g.add(out, g.red("sum", g.matmul(x, g.input("W", [k, "o"], dt), k, k), "o"))
    g.output("y", out)
    return g.graph()


@st.composite
def long_norm_graphs(draw):
    """Norms over a row too long for the chip (variance_expand in a streamed row region, issue 49):
    a LayerNorm (mean, then the variance of x - mean) over a long axis (past 7 blocks of 1024,
    mostly no multiple of the block) or over (c, w) merged into one (flatten_reduction), with
    1 to 3 rows (split over CTAs) or none; maybe a gain and a bias; f32, f16 or bf16. The GPU campaign
    draws large-magnitude inputs (|mean| >> deviation), where an unshifted variance cancels."""
    merged = draw(st.booleans())
    rows = draw(st.sampled_from([(), ("r",), ("q", "r")]))
    if merged:
        sizes = {"c": draw(st.integers(2, 9)), "w": draw(st.integers(1025, 5000)), **{a: draw(st.integers(1, 3)) for a in rows}}
        shape, axes = (*rows, "c", "w"), ("c", "w")
    else:
        sizes = {"n": draw(st.integers(7 * 1024 + 1, 40000)), **{a: draw(st.integers(1, 3)) for a in rows}}
        shape, axes = (*rows, "n"), ("n",)
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    g = DagM("long_norm", sizes)
    body = norm_over(axes, shape, dt)
    out = body(g)
    if draw(st.booleans()):  # a gain and a bias over the last axis
        last = shape[-1]
        out = g.add(g.mul(out, g.input("gamma", [last], dt)), g.input("beta", [last], dt))
    g.output("y", out)
    return g.graph()


@st.composite
def normed_gemm_graphs(draw):
    """A norm over the columns of a GEMM's output (issue 49; rules/row_epilogue.py fuses it into
    the GEMM's epilogue where one column tile holds the axis): y[(h,) b, (g,) c] = X W with
    W [k, (g,) c] (a GroupNorm's groups of c channels; X maybe normalised first: RMSNorm, LayerNorm
    with a gain, whose pullouts undo in the same epilogue), maybe a bias, an activation or a cast
    first, then a LayerNorm, an RMSNorm, a softmax (maybe under a mask of positions), a log-softmax
    or x - max over c, maybe a gain and a bias
    over (g, c) after; c mostly 16..256 positions (no multiple of the tile: 24, 100, 129, 200),
    sometimes 1..15 or past 256 (refused: a row kernel of its own); maybe the product or a row
    statistic an output too (stored by the GEMM); sizes that do not divide the tiles, size-1
    axes; f32, f16 or bf16."""
    c = draw(st.one_of(st.integers(9, 256), st.sampled_from([16, 24, 100, 128, 129, 200, 256, 3, 300])))
    groups = draw(st.booleans())
    batch = draw(st.booleans())
    sizes = {"b": draw(st.integers(1, 70)), "k": draw(st.integers(1, 40)), "c": c,
             **({"g": draw(st.integers(1, 3))} if groups else {}), **({"h": draw(st.integers(1, 2))} if batch else {})}
    dt = draw(st.sampled_from(["f32", "f16", "bf16"]))
    g = DagM("normed_gemm", sizes)
    cols = [*(["g"] if groups else []), "c"]
    x = _maybe_normalised(draw, g, g.input("X", [*(["h"] if batch else []), "b", "k"], dt), dt)
    y = g.matmul(x, g.input("W", ["k", *cols], dt), "k", "k")
    pre = draw(st.sampled_from(["none", "bias", "relu", "cast"]))
    z = y if pre == "none" else g.add(y, g.input("B", cols, dt)) if pre == "bias" else \
        g.max(y, g.const("0")) if pre == "relu" else g.cast(y, "f32" if dt != "f32" else "bf16")
    kind = draw(st.sampled_from(["layer", "rms", "softmax", "log_softmax", "centre_max", "masked_softmax"]))
    stat = None
    if kind == "masked_softmax":  # positions c > b masked (row 0 keeps c = 0): a coordinate mask in the epilogue
        out = g.softmax(g.select(g.le(g.iota("c"), g.iota("b")), z, g.const("-inf")), "c")
    elif kind == "layer":
        out = g.layer_norm(z, "c")
    elif kind == "rms":
        out = g.rms_norm(z, "c")
    elif kind == "softmax":
        out = g.softmax(z, "c")
    elif kind == "log_softmax":
        s = g.sub(z, g.red("max", z, "c"))
        stat = g.log(g.red("sum", g.exp(s), "c"))
        out = g.sub(s, stat)
    else:
        stat = g.red("max", z, "c")
        out = g.sub(z, stat)
    if kind in ("layer", "rms") and draw(st.booleans()):  # an affine norm
        out = g.add(g.mul(out, g.input("gamma", cols, dt)), g.input("beta", cols, dt))
    g.output("y", out)
    extra = draw(st.sampled_from(["none", "none", "product", "stat"]))
    if extra == "product":
        g.output("product", z)
    elif extra == "stat" and stat is not None:
        g.output("stat", stat)
    return g.graph()
