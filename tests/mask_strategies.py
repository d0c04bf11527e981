"""Masks and biases over attention scores as users write them (strategies.py's attention
generators draw them): positions, windows, padding lengths, dense masks, biases, documents read
at run time, ALiBi, soft-capping, a threshold on the scores themselves, and masks added (s + (1 - keep) c)."""
from __future__ import annotations

from hypothesis import strategies as st

from leantile.dag import DagM

MASKS = ("causal", "causal_sized", "window", "lengths", "keep_input", "weighted", "bias", "bias_and_causal",
         "documents", "segments", "alibi", "softcap", "score_threshold", "additive")


@st.composite
def masked_scores(draw, g: DagM, s: int, decode: bool = False, kinds=MASKS):
    """The scores s[h, t_q, t_kv] under a mask or bias as users write them: keep = a comparison of
    positions (iota) or of an input, then select(keep, s, fill) with fill -inf (or a finite
    -30000 or -1e9: masked keys then still count, the graph says so), or s + bias. A causal offset or a
    window may mask whole rows."""
    kind = draw(st.sampled_from([k for k in kinds if not (decode and ("causal" in k or k in ("documents", "segments",
                                                                                             "alibi", "softcap"))
                                                          and k != "bias_and_causal")]))
    fill = g.const(draw(st.sampled_from(["-inf", "-inf", "-30000", "-1e9"])))  # bf16 holds neither finite one
    kv = g.iota("t_kv")
    q = g.iota("t_q") if not decode else None

    def causal(off: int):
        return g.le(kv, g.add(q, g.const(str(off)))) if off else g.le(kv, q)
    if kind == "causal":
        keep = causal(draw(st.integers(-3, 4)))
    elif kind == "causal_sized":  # bottom-right aligned: key j <= query i + (t_kv - t_q)
        keep = g.le(kv, g.add(q, g.sub(g.size_const("t_kv"), g.size_const("t_q"))))
    elif kind == "window":  # i - w < j <= i, written as a product of two comparisons or nested
        w = g.const(str(draw(st.integers(1, 4))))
        lo = g.gt(kv, g.sub(q if q is not None else g.const("2"), w))
        hi = causal(0) if q is not None else g.le(kv, g.const("5"))
        if draw(st.booleans()):
            keep = g.mul(lo, hi)
        else:
            return g.select(lo, g.select(hi, s, fill), fill)
    elif kind == "lengths":  # per-head valid key count (padding), an input
        keep = g.lt(kv, g.mul(g.input("L", ["h"], "f32"), g.size_const("t_kv")))  # L ~ N(0, 1): some heads have none
    elif kind == "keep_input":
        keep = g.gt(g.input("M", ["t_q", "t_kv"] if not decode else ["t_kv"], "f32"), g.const("0.3"))
    elif kind == "weighted":  # a comparison times a value (w may be 0, inf or NaN: 0 * inf keeps the key)
        keep = g.mul(causal(0) if q is not None else g.le(kv, g.const("5")), g.input("W", ["t_kv"], "f32"))
    elif kind == "bias":
        return g.add(s, g.input("B", ["h", "t_q", "t_kv"] if not decode else ["h", "t_kv"], "f32"))
    elif kind == "documents":  # causal within documents read at run time (here: an input's sign per position)
        same = g.eq(g.gt(g.input("Dq", ["t_q"], "f32"), g.const("0")), g.gt(g.input("Dk", ["t_kv"], "f32"), g.const("0")))
        keep = g.mul(causal(draw(st.integers(0, 2))), same) if draw(st.booleans()) else g.mul(same, causal(0))
    elif kind == "segments":  # documents that are runs of positions (packed sequences), ids computed from data:
        # id(p) = [p + c D[p] > a t_kv] + [p + c D[p] > b t_kv]; c = 0.01 never moves a position past a
        # boundary (every row an interval: mask_bounds' unmasked interior), 1.5 does near one
        c = g.const(draw(st.sampled_from(["0.01", "1.5"])))
        cuts = [g.mul(g.size_const("t_kv"), g.const(draw(st.sampled_from(["0.2", "0.37", "0.6", "0.85"]))))
                for _ in range(2)]

        def ids(pos, name, axis):
            moved = g.add(pos, g.mul(c, g.input(name, [axis], "f32")))
            return g.add(g.gt(moved, cuts[0]), g.gt(moved, cuts[1]))
        same = g.eq(ids(q, "Sq", "t_q"), ids(kv, "Sk", "t_kv"))
        keep = g.mul(causal(draw(st.integers(0, 2))), same) if draw(st.booleans()) else g.mul(same, causal(0))
    elif kind == "softcap":  # Gemma 2's logit soft-capping c tanh(s / c), then causal
        cap = g.const(draw(st.sampled_from(["2.5", "30", "50"])))
        s = g.mul(g.tanh(g.div(s, cap)), cap)
        keep = causal(0)
    elif kind == "score_threshold":  # the scores' own quotient compared (sparsity by threshold), causal: a
        # comparison reads s / c, which must stay a division (derive.score_maps: x * (1 / c) may flip it)
        s = g.div(s, g.const(draw(st.sampled_from(["3", "0.7", "11.313708498984761"]))))
        keep = g.mul(g.ge(s, g.const(draw(st.sampled_from(["-0.5", "0", "1"])))),
                     causal(0) if q is not None else g.le(kv, g.const("5")))
    elif kind == "additive":  # the mask added, as Hugging Face writes it: s + (1 - keep) c, c finite (0 * -inf is
        # NaN); -1e9 and -30000 are no bf16 value: the masked scores must stay float32 (Ctx.carries_unheld_constant)
        keep = causal(draw(st.integers(-3, 2))) if q is not None else g.le(kv, g.const("5"))
        return g.add(s, g.mul(g.sub(g.const("1"), keep), g.const(draw(st.sampled_from(["-1e9", "-30000", "-10000"])))))
    elif kind == "alibi":  # ALiBi: -slope[h] |i - j| from an input per head (read once per CTA), causal
        s = g.sub(s, g.mul(g.input("slope", ["h"], "f32"), g.abs(g.sub(q, kv))))
        keep = causal(0)
    else:  # an ALiBi-like bias -slope * (i - j) and a causal mask
        s = g.sub(s, g.mul(g.const("0.5"), g.sub(q if q is not None else g.const("4"), kv)))
        keep = causal(0) if q is not None else g.le(kv, g.const("4"))
    return g.select(keep, s, fill)
