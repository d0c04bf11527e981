"""Hand-built graphs of the soundness classes of issue 13 and of issue 46's derive crashes (one
small graph each), shared by tests/cpu/test_soundness.py and the hypothesis strategies."""
from __future__ import annotations

from leantile.dag import DagM


def layer_norm_weight_twice():
    """1: layer_norm(X) W used by two GEMMs with the same W."""
    g = DagM("ln_same_w", {"m": 5, "d": 7, "n": 3})
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W", ["d", "n"], "f32")
    h = g.layer_norm(x, "d")
    a, b = g.matmul(h, w, "d", "d"), g.matmul(h, w, "d", "d")
    g.output("out", g.mul(g.silu(a), b))
    return g.graph()


def scaled_softmax_stats_out():
    """2: softmax of z = x * c whose max, shifted scores and exponentials are also outputs."""
    g = DagM("softmax_stats_out", {"m": 4, "t": 9})
    x = g.input("X", ["m", "t"], "f32")
    z = g.mul(x, g.const("0.5"))
    m = g.red("max", z, "t")
    sh = g.sub(z, m)
    e = g.exp(sh)
    g.output("out", g.div(e, g.red("sum", e, "t")))
    g.output("mx", m)
    g.output("shifted", sh)
    g.output("e", e)
    return g.graph()


def softmax_of_gemm_scaled_out():
    """3: softmax(X W * 0.5) with the scaled scores also an output (two kernels named gemm_i)."""
    g = DagM("softmax_gemm", {"m": 4, "k": 5, "t": 6})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "t"], "f32")
    z = g.mul(g.matmul(x, w, "k", "k"), g.const("0.5"))
    g.output("out", g.softmax(z, "t"))
    g.output("scores", z)
    return g.graph()


def clashing_axis_names():
    """4: matmul(X[m,k], W[j,k], "k", "j"): B's free axis is named like A's contracted axis."""
    g = DagM("clash", {"m": 4, "k": 5, "j": 5})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["j", "k"], "f32")
    g.output("out", g.matmul(x, w, "k", "j"))
    return g.graph()


def attention_computed_q():
    """5: flash attention whose Q is a projection Q = X Wq."""
    g = DagM("attn_proj", {"h": 2, "t_q": 3, "t_kv": 7, "d": 4, "d_h": 3})
    x = g.input("X", ["h", "t_q", "d"], "f32")
    wq = g.input("Wq", ["d", "d_h"], "f32")
    k, v = g.input("K", ["h", "t_kv", "d_h"], "f32"), g.input("V", ["h", "t_kv", "d_h"], "f32")
    q = g.matmul(x, wq, "d", "d")
    s = g.matmul(q, k, "d_h", "d_h")
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def decode_attention():
    """6: one query per head, Q[h, d_h] (decode)."""
    g = DagM("decode", {"h": 2, "t_kv": 7, "d_h": 3})
    q = g.input("Q", ["h", "d_h"], "f32")
    k, v = g.input("K", ["h", "t_kv", "d_h"], "f32"), g.input("V", ["h", "t_kv", "d_h"], "f32")
    s = g.matmul(q, k, "d_h", "d_h")
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


def norm_centred_on_const():
    """7: a norm centred on a constant, sum((x - c)^2), under a pulled-out scale, into a GEMM."""
    g = DagM("norm_const", {"m": 4, "d": 6, "n": 3})
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W", ["d", "n"], "f32")
    c = g.sub(x, g.const("0.25"))
    var = g.mean_along(g.square(c), "d")
    r = g.rsqrt(g.add(var, g.const("1e-05")))
    g.output("out", g.matmul(g.mul(x, r), w, "d", "d"))
    return g.graph()


def cast_in_epilogue():
    """8: cast (f32 target) in a fused GEMM epilogue."""
    g = DagM("cast_epi", {"m": 4, "k": 5, "n": 3})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "n"], "f32")
    g.output("out", g.silu(g.cast(g.matmul(x, w, "k", "k"), "f32")))
    return g.graph()


def dependent_dual_gemm():
    """9: a dual GEMM whose second weight depends on the first product."""
    g = DagM("dep_dual", {"m": 4, "k": 4, "n": 4})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "n"], "f32")
    a = g.matmul(x, w, "k", "k")  # [m, n]; m and k have one size, so a can be a weight over k
    u = g.matmul(x, g.add(w, a), "k", "k")
    g.output("out", g.mul(a, u))
    return g.graph()


def const_output():
    """10: a const node as a graph output."""
    g = DagM("const_out", {"m": 3, "k": 4})
    x = g.input("X", ["m", "k"], "f32")
    c = g.const("0.5")
    g.output("out", g.mul(x, c))
    g.output("c", c)
    return g.graph()


def renamed_contraction():
    """11: a matmul whose two contraction axes have different names."""
    g = DagM("renamed", {"m": 4, "k": 5, "kk": 5, "n": 3})
    x, w = g.input("X", ["m", "k"], "f32"), g.input("W", ["kk", "n"], "f32")
    g.output("out", g.matmul(x, w, "k", "kk"))
    return g.graph()


def split_softmax_row_stats_out():
    """12: a scaled softmax over a few long rows (split_row), its max also an output, a size-1
    batch axis; and a second softmax of the same scores (two sites share the input)."""
    g = DagM("split_row_stats", {"b": 1, "m": 2, "t": 1100})
    x = g.input("X", ["b", "m", "t"], "f32")
    z = g.mul(x, g.const("0.75"))
    mx = g.red("max", z, "t")
    e = g.exp(g.sub(z, mx))
    g.output("out", g.div(e, g.red("sum", e, "t")))
    g.output("mx", mx)
    g.output("plain", g.softmax(x, "t"))
    return g.graph()


def skinny_norm_gemm_rows_out():
    """13: RMSNorm into a skinny GEMM with a long contraction (pulled out, or prenorm_split_k),
    the normalised rows also an output, the weight reused by a second GEMM of the raw rows (two
    plain split_k sites: their candidate names must still differ)."""
    g = DagM("skinny_norm_gemm", {"m": 3, "d": 1100, "n": 5})
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W", ["d", "n"], "f32")
    h = g.rms_norm(x, "d")
    g.output("out", g.add(g.matmul(h, w, "d", "d"), g.matmul(x, w, "d", "d")))
    g.output("rows", h)
    return g.graph()


def split_gemm_two_waves_out():
    """14: a GEMM of more than 64 rows split over a long contraction (split_k: one wave of
    slices, split_k_x2: two), its raw product also an output beside the biased GELU epilogue,
    slices that do not divide the contraction."""
    g = DagM("split_gemm_two_waves", {"m": 130, "d": 8200, "n": 600})
    x, w = g.input("X", ["m", "d"], "f32"), g.input("W", ["d", "n"], "f32")
    y = g.matmul(x, w, "d", "d")
    g.output("out", g.gelu_tanh(g.add(y, g.input("b", ["n"], "f32"))))
    g.output("y", y)
    return g.graph()


def scaled_gemm_into_gemm(scale: str = "const", scaled_out: bool = False, used: bool = True):
    """17 (issue 46): X W scaled by a constant or by a per-row vector r[m] (or centred on one),
    into a second GEMM, which pulls the scale out and reads X W itself; the scaled product also
    an output, or the chain unused (the output reads X W alone). Derive built the first GEMM's
    kernel and an unfused kernel of the same matmul: "two kernels named 'gemm_3'"."""
    g = DagM(f"scaled_chain_{scale}", {"m": 5, "k": 7, "n": 3, "p": 1})
    x, w, u = g.input("X", ["m", "k"], "f32"), g.input("W", ["k", "n"], "f32"), g.input("U", ["n", "p"], "f32")
    y = g.matmul(x, w, "k", "k")
    s = g.mul(y, g.const("0.5")) if scale == "const" else \
        getattr(g, "mul" if scale == "row" else "sub")(y, g.input("r", ["m"], "f32"))
    z = g.matmul(s, u, "n", "n")
    g.output("out", z if used else g.silu(y))
    if scaled_out:
        g.output("scaled", s)
    return g.graph()


def norm_rows_two_weights(dtype: str = "f32"):
    """18 (issue 46): RMSNorm rows into two GEMMs of different weights and columns (W[d, n],
    V[d, p]): two GEMM sites needing the same row statistics. stats_separate+stats_separate
    gave each its own statistics kernel: "rsqrt stored by 2 kernels"."""
    g = DagM("norm_two_weights", {"m": 5, "d": 7, "n": 3, "p": 1})
    x = g.input("X", ["m", "d"], dtype)
    h = g.rms_norm(x, "d")
    g.output("a", g.gelu_tanh(g.matmul(h, g.input("W", ["d", "n"], dtype), "d", "d")))
    g.output("b", g.matmul(h, g.input("V", ["d", "p"], dtype), "d", "d"))
    return g.graph()


def gemm_two_stores(dtype: str = "f64"):
    """19 (issue 46): a GEMM with a bias and GELU whose raw product is an output too (two stores,
    rows of whole 16-byte granules: both staged through shared memory) and a normalised second
    GEMM of its weight. In f64 at DEFAULT_TILES the GEMM's operand tiles alone took 256 KiB: every
    f64 graph with a GEMM was refused at its default tiles (and with 32-deep k steps alone, its
    two staged 128 x 128 f64 stores still took 256 KiB)."""
    g = DagM(f"gemm_two_stores_{dtype}", {"m": 5, "k": 7, "n": 6})
    x, w = g.input("X", ["m", "k"], dtype), g.input("W", ["k", "n"], dtype)
    y = g.matmul(x, w, "k", "k")
    g.output("out", g.gelu_tanh(g.add(y, g.input("b", ["n"], dtype))))
    g.output("y", y)
    g.output("again", g.matmul(g.rms_norm(x, "k"), w, "k", "k"))
    return g.graph()


def region_reads_its_own_producer(dtype: str = "f32"):
    """20 (issue 50, found on a backward graph): the centred rows c = X - 0.25 feed a norm's 1/rms r
    (a map kernel) and the row region that reads r; with the statistics fused into the GEMM, the
    region took c as a member, so r's kernel waited on the region and the region on r: "the kernels
    of a plan depend on each other in a cycle"."""
    g = DagM("region_own_producer", {"m": 5, "d": 7, "n": 3})
    x, w, z = g.input("X", ["m", "d"], dtype), g.input("W", ["d", "n"], dtype), g.input("Z", ["m", "n"], dtype)
    c = g.sub(x, g.const("0.25"))
    r = g.rsqrt(g.add(g.mean_along(g.square(c), "d"), g.const("1e-5")))
    back = g.matmul(g.mul(g.matmul(g.mul(x, r), w, "d", "d"), z), w, "n", "n")  # [m, d]
    s = g.red("sum", g.mul(back, x), "d")
    g.output("out", g.add(g.mul(back, r), g.mul(g.mul(s, r), g.mul(c, g.const("2.0")))))
    return g.graph()


def three_regions_in_a_cycle(dtype: str = "f32"):
    """21 (issue 50, the slow profile over backward graphs): region A sums over i (x - 1/2)^2 and,
    merged into its pass, d p, where p is region B's softmax over k; region C sums A's first result
    over k; region B's second reduction reads C's scalar. Each region alone waits on no member of
    its own, but A waits on B, B on C and C on A: the cycle is between kernels."""
    g = DagM("three_regions", {"i": 6, "k": 5})
    x, d = g.input("X", ["i", "k"], dtype), g.input("D", ["i", "k"], dtype)
    a = g.red("sum", g.square(g.sub(x, g.const("0.5"))), "i")    # A, over i
    c = g.red("sum", a, "k")                                       # C
    m = g.red("max", x, "k")                                       # B, over k
    e = g.exp(g.sub(x, m))
    p = g.div(e, g.red("sum", e, "k"))
    a2 = g.red("sum", g.mul(d, p), "i")                            # merged into A: reads B's sum
    b2 = g.red("sum", g.mul(g.mul(d, c), p), "k")                  # joins B: reads C
    g.output("out", g.add(g.mul(b2, g.const("2.0")), g.red("sum", a2, "k")))
    return g.graph()


def rows_and_columns_over_one_axis(dtype: str = "f32"):
    """22 (issue 49, GPU campaign s64 and the CPU lowering campaign s63): X [h, n, c] reduced over h
    (c contiguous) and Y [c, n, h] over h, both results then reduced over c: a loaded row [n, c] and
    a loaded column [c, n] in one on-chip kernel, which TileLang cannot lay out."""
    g = DagM("rows_and_columns", {"n": 3, "c": 5, "h": 7})
    x, y = g.input("X", ["h", "n", "c"], dtype), g.input("Y", ["c", "n", "h"], dtype)
    g.output("out", g.add(g.red("max", g.red("max", x, "h"), "c"), g.red("sum", g.red("sum", y, "h"), "c")))
    return g.graph()


CLASSES = {1: layer_norm_weight_twice, 2: scaled_softmax_stats_out, 3: softmax_of_gemm_scaled_out,
           4: clashing_axis_names, 5: attention_computed_q, 6: decode_attention, 7: norm_centred_on_const,
           8: cast_in_epilogue, 9: dependent_dual_gemm, 10: const_output, 11: renamed_contraction,
           12: split_softmax_row_stats_out, 13: skinny_norm_gemm_rows_out, 14: split_gemm_two_waves_out,
           17: scaled_gemm_into_gemm, 18: norm_rows_two_weights, 19: gemm_two_stores,
           20: region_reads_its_own_producer, 21: three_regions_in_a_cycle, 22: rows_and_columns_over_one_axis}
