"""Issue 17: attention under masks and biases. The flash rule takes the elementwise score
function between Q K^T and the softmax (causal at any offset, sliding windows, lengths, keep
masks, additive biases) into its kernel, and every candidate still equals the independent
float64 evaluator, wholly masked rows (NaN in the graph, 0 / 0) included."""
import math

import pytest
import torch
from hypothesis import event, given, strategies as st

import evaluator as ev
from leantile import interp, reference
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.derive.engine import refusals
from leantile.tolerance import TOLERANCE
from strategies import masked_attention_graphs

TOL = TOLERANCE[torch.float64]
TILES = st.fixed_dictionaries({"block_m": st.sampled_from([1, 2, 3, 8]), "block_n": st.sampled_from([1, 2, 3, 5])})


def attention(mask, tq=5, tkv=7, d=3, h=2, outputs=()):
    """softmax(mask(Q K^T / sqrt d)) V with mask(g, s, q_pos, kv_pos) -> scores."""
    g = DagM("masked", {"h": h, "t_q": tq, "t_kv": tkv, "d_h": d})
    q, k, v = (g.input(n, ["h", t, "d_h"], "f32") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
    z = mask(g, s, g.iota("t_q"), g.iota("t_kv"))
    g.output("out", g.matmul(g.softmax(z, "t_kv"), v, "t_kv", "t_kv"))
    for name in outputs:
        g.output(name, z)
    return g.graph()


def causal(off):
    return lambda g, s, i, j: g.select(g.le(j, g.add(i, g.const(str(off)))), s, g.const("-inf"))


def check(g, tiles=(None, {"block_m": 2, "block_n": 3}, {"block_m": 1, "block_n": 1}), seed=0):
    inputs = ev.random_inputs(g, seed)
    ref = ev.evaluate(g, inputs)
    for c in candidates(g):
        for t in tiles:
            out = interp.run(derive(g, c.name, t), inputs, dtype=torch.float64)
            for name, r in ref.items():
                err = ev.rel_err(out[name], r)
                assert err <= TOL, f"{c.name} {t}: {name} relative error {err:.3g}"
    return ref


def flash_kernels(g, name=None):
    """The flash kernels of candidate `name` (default: every candidate's)."""
    names = [name] if name else [c.name for c in candidates(g)]
    return [k for n in names for k in derive(g, n).kernels if k.name.startswith("flash")]


def test_causal_is_one_flash_kernel():
    """The mask is computed in the flash kernel's registers: one kernel, no [t_q, t_kv] tensor."""
    g = attention(causal(0), tq=9, tkv=9)
    plan = derive(g, "online_exp2")
    assert [k.name for k in plan.kernels] == [flash_kernels(g, "online_exp2")[0].name]
    assert {b.name for b in plan.globals} == {"Q", "K", "V", plan.outputs["out"]}
    check(g)


def test_causal_at_any_offset_with_wholly_masked_rows():
    """t_q > t_kv with a negative offset: the first rows keep no key (NaN, as in the graph)."""
    for tq, tkv, off in ((7, 4, -3), (4, 9, 5), (3, 3, -1), (1, 6, 0), (6, 1, 0)):
        g = attention(causal(off), tq=tq, tkv=tkv)
        assert flash_kernels(g)
        ref = check(g)
        if off < 0:  # query 0 keeps no key
            assert torch.isnan(ref["out"][:, 0]).all()


def test_bias_and_keep_inputs_are_loaded_per_block():
    def bias(g, s, i, j):
        keep = g.gt(g.input("M", ["t_q", "t_kv"], "f32"), g.const("0"))
        return g.select(keep, g.add(s, g.input("B", ["h", "t_q", "t_kv"], "f32")), g.const("-inf"))
    g = attention(bias)
    k = flash_kernels(g, "online_exp2")[0]
    loads = {s.src for s in k.body if s.op == "load"}
    assert {"M", "B"} <= loads
    check(g)


def test_finite_fill_keeps_masked_keys_counting():
    """select(keep, s, -30000): a wholly masked row averages every value, as the graph says."""
    g = attention(lambda g, s, i, j: g.select(g.le(j, g.sub(i, g.const("2"))), s, g.const("-30000")), tq=4, tkv=6)
    ref = check(g)
    assert torch.isfinite(ref["out"]).all()


def test_masked_scores_as_an_output_are_written_whole():
    """The masked scores are also an output: flash still runs the attention, and the scores are
    computed and stored in full by kernels of their own (check: every value equals the graph's)."""
    g = attention(causal(0), outputs=("masked_scores",))
    plan = derive(g, "online_exp2")
    assert flash_kernels(g) and plan.outputs["masked_scores"] not in {b.name for b in plan.globals if b.node is None}
    check(g)


def test_score_function_reading_the_scores_elsewhere_is_refused():
    """A bias computed from the scores themselves and also read by another output: the scores
    would have to exist outside the flash kernel; refused with the node named."""
    def leak(g, s, i, j):
        t = g.exp(g.neg(s))
        g.output("side", g.mul(t, g.const("2")))  # t has a reader outside the score function
        return g.add(s, t)
    g = attention(leak)
    assert not flash_kernels(g)
    assert any("flash attention: node" in line and "also read outside" in line for line in refusals(g))
    check(g)


@given(masked_attention_graphs(), TILES, st.integers(0, 2**31 - 1))
def test_masked_attention_graphs_equal_evaluator(gc, tiles, seed):
    """Random masks, fills, offsets, decode or not, computed operands: every candidate, default
    and random tiles (blocks of 1, blocks that do not divide the axes)."""
    g, _ = gc
    event(f"flash kernel: {bool(flash_kernels(g))}")
    check(g, (None, tiles), seed)


MASKS_ON_GPU = {  # (t_q, t_kv): partial tiles; offsets that mask whole rows and whole key blocks
    "causal_offset": ((200, 136), causal(-100)),
    "causal_chunk": ((40, 328), causal(288)),
    "window": ((200, 328), lambda g, s, i, j: g.select(g.mul(g.gt(j, g.sub(i, g.const("64"))), g.le(j, i)), s,
                                                       g.const("-inf"))),
    "padding": ((136, 328), lambda g, s, i, j: g.select(g.lt(j, g.mul(g.input("L", ["h"]), g.const("100"))), s,
                                                        g.const("-inf"))),
    "bias_keep": ((136, 200), lambda g, s, i, j: g.select(g.gt(g.input("M", ["t_q", "t_kv"]), g.const("0")),
                                                          g.add(s, g.input("B", ["h", "t_q", "t_kv"])), g.const("-inf"))),
}


@pytest.mark.gpu
@pytest.mark.parametrize("mask", sorted(MASKS_ON_GPU))
def test_masked_flash_kernels_on_gpu(mask):
    """The emitted kernels (mask in registers, skipped key blocks) against the reference, NaN
    rows included (verify NaN-fills the outputs first: an unwritten element fails)."""
    import leantile
    (tq, tkv), fn = MASKS_ON_GPU[mask]
    g = attention(fn, tq=tq, tkv=tkv, d=64)
    g = g.model_copy(update={"nodes": tuple(n.model_copy(update={"dtype": "f16"}) if n.op == "input" else n
                                            for n in g.nodes)})
    for c in candidates(g):
        if c.name != "unfused":
            v = leantile.compile(g, candidate=c.name).verify(seed=3)
            assert v["ok"], (c.name, v)


@st.composite
def position_masks(draw):
    """1-2 comparisons a * key + b * query + c (op) 0 of positions, as users spell them (products,
    differences, constants on either side), joined by a product or by nested selects."""
    terms = draw(st.lists(st.tuples(st.sampled_from([1, -1, 2]), st.sampled_from([1, -1, 0, 2]),
                                    st.sampled_from(["0", "3", "-2", "1.5", "-0.5"]), st.booleans(),
                                    st.sampled_from(["lt", "le", "gt", "ge"])), min_size=1, max_size=2))
    nested = draw(st.booleans())

    def side(g, i, j, a, b, c, summed):
        x = g.mul(g.const(str(a)), j) if a != 1 else j
        y = (g.mul(g.const(str(b)), i) if b != 1 else i) if b else g.const("0")
        return g.add(x, g.add(y, g.const(c))) if summed else g.sub(g.add(x, g.const(c)), g.neg(y))

    def mask(g, s, i, j):
        cs = [getattr(g, op)(side(g, i, j, a, b, c, summed), g.const("0")) for a, b, c, summed, op in terms]
        if nested:
            for c in cs:
                s = g.select(c, s, g.const("-inf"))
            return s
        keep = cs[0] if len(cs) == 1 else g.mul(cs[0], cs[1])
        return g.select(keep, s, g.const("-inf"))
    return mask


@given(position_masks(), st.integers(1, 12), st.integers(1, 12), st.sampled_from([1, 2, 3, 5]),
       st.sampled_from([1, 2, 3, 5]))
def test_skipped_key_blocks_hold_no_kept_key(mask, tq, tkv, bm, bn):
    """skip_masked_tiles' soundness, exactly: every key block a CTA skips is masked for every
    row of its tile (the keep condition, evaluated by the independent evaluator, is 0 there);
    and the plan equals the evaluator."""
    g = attention(mask, tq=tq, tkv=tkv)
    plan = derive(g, "online_exp2", {"block_m": bm, "block_n": bn})
    (k,) = [k for k in plan.kernels if k.name.startswith("flash")]
    event(f"bounds read: {len(k.stream.skip)}")
    if not k.stream.skip:
        return
    sel = max(i for i in range(len(g.nodes)) if g.node(i).op == "select")
    probe = g.model_copy(update={"outputs": {"z": sel}})
    inputs = ev.random_inputs(g, 0)
    z = ev.evaluate(probe, inputs)["z"]  # [h, t_q, t_kv]: -inf where masked
    blocks = -(-tkv // bn)
    from leantile.plan import key_block_range
    for r0 in range(0, tq, bm):
        first, stop = key_block_range(k.stream.skip, r0, bm, bn, blocks)
        for b in [*range(0, first), *range(stop, blocks)]:
            tile = z[:, r0:r0 + bm, b * bn:(b + 1) * bn]
            assert torch.isneginf(tile).all(), (r0, b, k.stream.skip)
    check(g, (None, {"block_m": bm, "block_n": bn}))


@given(position_masks(), st.integers(1, 12), st.integers(1, 12), st.sampled_from([1, 2, 3, 5]),
       st.sampled_from([1, 2, 3, 5]))
def test_interior_key_blocks_keep_every_key(mask, tq, tkv, bm, bn):
    """skip_masked_tiles' unmasked interior, exactly: on every key block a CTA runs without a
    select (plan.key_block_interior), that select's keep condition, evaluated by the
    independent evaluator, is 1 for every row of the tile and every key of the block."""
    from leantile.plan import key_block_interior, key_block_range
    g = attention(mask, tq=tq, tkv=tkv)
    plan = derive(g, "online_exp2", {"block_m": bm, "block_n": bn})
    (k,) = [k for k in plan.kernels if k.name.startswith("flash")]
    selects = [s for s in k.body if s.op == "map" and s.fn == "select" and s.boundary_only]
    event(f"selects run on boundary blocks only: {len(selects)}")
    inputs = ev.random_inputs(g, 0)
    blocks, interior = -(-tkv // bn), 0
    for s in selects:
        cond = k.buffer(s.args[0]).node  # the keep condition's node
        keep = ev.evaluate(g.model_copy(update={"outputs": {"keep": cond}}), inputs)["keep"]
        keep = reference.align(keep, g.node(cond).axes, ("h", "t_q", "t_kv"))
        for r0 in range(0, tq, bm):
            first, stop = key_block_interior(k.stream.skip, r0, bm, bn)
            lo, hi = key_block_range(k.stream.skip, r0, bm, bn, blocks)
            for b in range(max(first, lo), min(stop, hi)):
                interior += 1
                tile = keep.expand(2, tq, tkv)[:, r0:r0 + bm, b * bn:(b + 1) * bn]
                assert (tile == 1).all(), (r0, b, k.stream.skip)
    event(f"interior blocks: {'some' if interior else 'none'}")


def test_causal_interior_blocks_run_unmasked():
    """Causal with square tiles: the tile of query rows [r bm, (r + 1) bm) keeps key blocks
    0..r - 1 whole and runs its mask on the diagonal block alone; the positions, the comparison
    and the select all wait for that block, and the emitted kernel branches on it."""
    from leantile.emit import emit_module
    from leantile.plan import key_block_interior, key_block_range
    g = attention(causal(0), tq=64, tkv=64)
    plan = derive(g, "online_exp2", {"block_m": 16, "block_n": 16})
    (k,) = flash_kernels(g, "online_exp2")
    masked = [s for s in k.body if s.op in ("iota", "map") and s.boundary_only]
    assert sorted(s.op for s in masked) == ["iota", "iota", "map", "map", "map"]  # positions, +0, le, select
    for r in range(4):
        assert key_block_interior(k.stream.skip, 16 * r, 16, 16) == (0, r)
        assert key_block_range(k.stream.skip, 16 * r, 16, 16, 4) == (0, r + 1)
    assert "# a boundary block: some row may drop a key" in emit_module(plan)
    # exact at tiles that do and do not divide, square and not (24 x 24: 6 query tiles, the same
    # interior and diagonal blocks at a ninth of the 64 x 64 graph's interpreter steps)
    small = attention(causal(0), tq=24, tkv=24)
    check(small, (None, {"block_m": 4, "block_n": 4}, {"block_m": 4, "block_n": 3}, {"block_m": 3, "block_n": 4}))


def test_causal_query_tiles_launch_longest_first():
    """Under key <= row + c the last query tiles stream the most key blocks: the causal kernel
    launches them first (plan.passes.heavy_first) and indexes every access by the reversed tile;
    a bound key <= -row + c makes the first tiles the longest, and nothing is reversed."""
    from leantile.emit import emit_module
    g = attention(causal(0), tq=64, tkv=64)
    plan = derive(g, "online_exp2", {"block_m": 16, "block_n": 16})
    (k,) = [k for k in plan.kernels if k.name.startswith("flash")]
    assert k.heavy_first == "t_q"
    src = emit_module(plan)
    assert "bx_heavy_first = T.ceildiv(size_t_q, block_m) - 1 - bx" in src
    assert "bx * block_m" not in src  # no access indexes the launch order itself
    anti = attention(lambda g, s, i, j: g.select(g.le(g.add(j, i), g.const("70")), s, g.const("-inf")), tq=64, tkv=64)
    (k,) = [k for k in derive(anti, "online_exp2", {"block_m": 16, "block_n": 16}).kernels if k.name.startswith("flash")]
    assert k.stream.skip and k.heavy_first is None
    check(anti, (None, {"block_m": 4, "block_n": 3}))


def padded(tq=9, tkv=23, b=4):
    """Attention over a batch padded to t_kv keys, lengths[b] valid: key < lengths."""
    g = DagM("padded", {"b": b, "h": 2, "t_q": tq, "t_kv": tkv, "d_h": 3})
    q, k, v = (g.input(n, ["b", "h", t, "d_h"], "f32") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    s = g.div(g.matmul(q, k, "d_h", "d_h"), g.sqrt(g.size_const("d_h")))
    s = g.select(g.lt(g.iota("t_kv"), g.input("lengths", ["b"], "f32")), s, g.const("-inf"))
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    return g.graph()


@given(st.lists(st.one_of(st.floats(-30, 30, allow_nan=False), st.sampled_from([float("nan"), float("inf"),
                                                                                  -float("inf"), 0.0, 23.0, 24.0])),
                min_size=4, max_size=4),
       st.sampled_from([1, 2, 5]), st.sampled_from([1, 3, 4, 8]), st.integers(0, 2 ** 16))
def test_padding_lengths_skip_key_blocks_at_run_time(lengths, bm, bn, seed):
    """Padding from a lengths input: the bound is read per CTA (KeyBound.leaf), the blocks past
    a batch's length are not streamed (counted: the interpreter's stream ranges), and the plan
    equals the evaluator for any length: fractional, negative (a row of NaN: 0 / 0, as the
    graph says), past the end, infinite or NaN (every comparison with NaN masks)."""
    from leantile.plan import key_block_range
    g = padded()
    tiles = {"block_m": bm, "block_n": bn}
    plan = derive(g, "online_exp2", tiles)
    (k,) = [k for k in plan.kernels if k.name.startswith("flash")]
    (b,) = k.stream.skip
    assert b.leaf == "lengths" and b.side == "hi"
    assert not any(s.boundary_only for s in k.body if s.op in ("map", "iota"))  # masked on every block
    blocks = -(-23 // bn)
    for length in lengths:
        first, stop = key_block_range(k.stream.skip, 0, bm, bn, blocks, {0: length})
        if length == length and length < 23 - bn - 1:  # a whole block past the length (the margin: one key)
            assert stop < blocks, (length, stop)
        if length == length and length > 0:  # every kept key streams
            assert stop * bn >= math.ceil(min(23.0, length)), (length, stop)
    inputs = ev.random_inputs(g, seed)
    inputs["lengths"] = torch.tensor(lengths, dtype=inputs["lengths"].dtype)
    ref = ev.evaluate(g, inputs)["out"]
    out = interp.run(plan, inputs, dtype=torch.float64)["out"]
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert ev.rel_err(out.nan_to_num(), ref.nan_to_num()) <= TOL


def test_a_factor_that_may_be_infinite_bounds_nothing():
    """keep = causal * w[key], w an input: where w is infinite past the diagonal, 0 * inf is NaN,
    which select keeps (c != 0). The causal comparison is then no bound of keep: no key block is
    skipped, and every candidate equals the evaluator with those keys kept."""
    g = DagM("inf_factor", {"h": 2, "t_q": 9, "t_kv": 11, "d_h": 4})
    q, k, v = (g.input(n, ["h", t, "d_h"], "f32") for n, t in (("Q", "t_q"), ("K", "t_kv"), ("V", "t_kv")))
    keep = g.mul(g.le(g.iota("t_kv"), g.iota("t_q")), g.input("w", ["t_kv"], "f32"))
    s = g.select(keep, g.matmul(q, k, "d_h", "d_h"), g.const("-inf"))
    g.output("out", g.matmul(g.softmax(s, "t_kv"), v, "t_kv", "t_kv"))
    g = g.graph()
    inputs = {n: t.double() for n, t in reference.random_inputs(g, seed=2).items()}
    inputs["w"] = torch.ones(11, dtype=torch.float64)
    inputs["w"][9] = math.inf  # past every query's diagonal: kept by NaN
    ref = ev.evaluate(g, inputs)["out"]
    for c in candidates(g):
        for tiles in (None, {"block_m": 2, "block_n": 2}):
            plan = derive(g, c.name, tiles)
            assert not any(k.stream and k.stream.skip for k in plan.kernels), (c.name, tiles)
            out = interp.run(plan, inputs, dtype=torch.float64)["out"]
            assert ev.rel_err(out, ref) <= TOLERANCE[torch.float64], (c.name, tiles)
