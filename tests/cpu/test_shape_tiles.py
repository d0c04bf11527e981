"""The tiles a shape gets by default (derive.shape_tiles): for attention (flash_tiles) the
overlapped schedule, or wider key tiles for the plain loop, for unmasked 128-wide heads over long keys, 64-row query tiles where 128-row ones leave SMs
idle and heads are narrow, the plain flash tiles for masked and split attention; for GEMMs the
stages by shape and one wave of 64-row tiles where 128 x 128 ones leave SMs idle (wave_tiles). Each default must
also stay exact: the interpreter runs the plan at shapes whose axes do not divide those tiles."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from leantile import architectures, interp, reference
from leantile.cost import choose, output_tiles
from leantile.derive import candidates, derive
from leantile.derive.shape_tiles import (FLASH_OVERLAP_TILES, FLASH_SMALL_GRID_TILES, FLASH_WIDE_KEYS,
                                         FLASH_WIDE_TILES)
from leantile.plan.verify import DTYPE_BYTES, verify
from leantile.sources import load_source
from leantile.target import DEFAULT
from leantile.tolerance import output_tolerances, rel_err
from strategies import biased_attention
from profiles import examples  # noqa: E402

SMS = DEFAULT.sms  # the SMs the shipped plans are made for

SCALED = "examples/architectures/attention_scaled.py:build"


def _tiles(g):
    """The tiles of the plan leantile ships for g where no tuned entry exists."""
    return choose(g)[0].tiles


def _has(tiles, want):
    return {k: tiles[k] for k in want} == want


@pytest.mark.parametrize("arch", ["attention", "gqa_attention", SCALED])
def test_unmasked_wide_heads_over_long_keys_take_the_overlapped_schedule_or_256_key_tiles(arch):
    """16-bit attention with 128-wide heads over long keys: FlashAttention-3's schedule at 128 keys,
    compiled with -ftz=true (it beat the plain 256-key loop once exp2 lost its subnormal fix-up);
    the plain loop (f32 here: no FA3 cut) keeps 256 keys, without the flag."""
    sizes = {"t_q": 1024, "t_kv": FLASH_WIDE_KEYS, "d_h": 128}
    g = load_source(arch, sizes) if ":" in arch else architectures.build(arch, **sizes)
    plan = choose(g)[0]
    assert _has(plan.tiles, {**FLASH_OVERLAP_TILES, "block_n": 128, "stages": 1}), plan.tiles
    flash = [k for k in plan.kernels if k.stream]
    assert flash and all(k.overlap and k.flush_subnormals for k in flash)
    assert not verify(plan, g)  # fits the target (shared memory, threads)
    shorter = load_source(arch, {**sizes, "t_kv": FLASH_WIDE_KEYS - 1}) if ":" in arch else \
        architectures.build(arch, **{**sizes, "t_kv": FLASH_WIDE_KEYS - 1})
    assert _tiles(shorter)["block_n"] == 128


def test_the_plain_loop_over_long_keys_keeps_256_key_tiles_without_the_flag():
    g = biased_attention()
    plan = derive(g, "online_exp2")
    assert _has(plan.tiles, {**FLASH_WIDE_TILES, "stages": 1}), plan.tiles
    assert not any(k.overlap or k.flush_subnormals for k in plan.kernels)
    assert not verify(plan, g)
    assert derive(biased_attention(t_kv=FLASH_WIDE_KEYS - 1), "online_exp2").tiles["block_n"] == 128


@pytest.mark.parametrize("arch", ["causal_attention", "sliding_window_attention"])
def test_masked_attention_keeps_128_key_tiles(arch):
    g = architectures.build(arch, t_q=4096, t_kv=4096, d_h=128)
    t = _tiles(g)
    assert t["block_n"] == 128 and t["block_m"] == 128 and t["stages"] == 1


def test_narrow_heads_on_an_underfilled_grid_take_64_row_tiles():
    small = architectures.build("attention", h=12, t_q=512, t_kv=512, d_h=64)  # 48 CTAs of 128 rows
    assert _has(_tiles(small), FLASH_SMALL_GRID_TILES)
    full = architectures.build("attention", h=12, t_q=(SMS + 12) // 12 * 128, t_kv=512, d_h=64)
    assert _tiles(full)["block_m"] == 128  # a wave of 128-row tiles: 64-row ones lost at t2048
    wide = architectures.build("attention", h=12, t_q=512, t_kv=512, d_h=128)
    assert _tiles(wide)["block_m"] == 128  # 128-wide heads on 64 rows / 128 threads lost (t512: 0.0149 -> 0.0221)
    causal = architectures.build("causal_attention", h=12, t_q=1024, t_kv=1024, d_h=64)
    assert _tiles(causal)["block_m"] == 128  # causal gpt2 t1024 lost at 64 x 256


def test_decode_keeps_its_split_tiles():
    g = architectures.build("attention", h=32, t_q=1, t_kv=8192, d_h=128)
    p = choose(g)[0]
    assert p.candidate.endswith("split") and p.tiles["block_n"] == 128
    assert p.tiles["stages"] == 1 and not verify(p, g)  # 1 stage, as prefill (H200: 1-5% over 2)
    mlp = choose(architectures.build("swiglu", m=16, d=4096, n=14336))[0]
    assert mlp.tiles["stages"] == 4 and mlp.tiles["swap_operands"] == 1  # a few-row GEMM: the swapped tiles
    mlp = choose(architectures.build("swiglu", m=40, d=4096, n=14336))[0]
    assert mlp.tiles["stages"] == 2 and not mlp.tiles.get("swap_operands")  # a skinny one keeps its stages


def _check(g, plan, seed):
    inputs = reference.random_inputs(g, seed=seed)
    out = interp.run(plan, inputs)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)
    same = reference.evaluate(g, inputs, check=False)
    for o in g.outputs:
        err = rel_err(out[o].to(ref[o].dtype), ref[o], same[o])
        assert err <= output_tolerances(g)[o], (plan.candidate, plan.tiles, o, err)


@settings(max_examples=examples(4))
@given(t_q=st.integers(65, 300), extra=st.integers(0, 300), seed=st.integers(0, 2**16))
def test_wide_key_tiles_stay_exact_on_partial_tiles(t_q, extra, seed):
    """The wide default (the plain loop: a bias tile) at key lengths that leave a partial 256-key
    tile, one head (at most 64 query rows take SMALL_M_TILES)."""
    g = biased_attention(h=1, t_q=t_q, t_kv=FLASH_WIDE_KEYS + extra)
    plan = derive(g, "online_exp2")  # unsplit (the tiny grid may rank the split plan first)
    assert plan.tiles["block_n"] == 256
    _check(g, plan, seed)


@settings(max_examples=examples(4))
@given(h=st.integers(1, 3), t_q=st.integers(1, 200), t_kv=st.integers(1, 400), seed=st.integers(0, 2**16))
def test_small_grid_tiles_stay_exact_on_partial_tiles(h, t_q, t_kv, seed):
    g = load_source(SCALED, {"h": h, "t_q": t_q, "t_kv": t_kv, "d_h": 64})
    plan = derive(g, "online")  # unsplit
    if t_q > 64:  # at most 64 query rows: SMALL_M_TILES
        assert _has(plan.tiles, FLASH_SMALL_GRID_TILES), plan.tiles
    _check(g, plan, seed)


def test_small_grid_tiles_lower_for_sm90():
    pytest.importorskip("tilelang", reason="tilelang not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import hopper_features, lower_to_cuda

    small = architectures.build("attention", h=12, t_q=512, t_kv=500, d_h=64)
    wide = architectures.build("attention", h=2, t_q=256, t_kv=FLASH_WIDE_KEYS + 100, d_h=128)
    # the plain 256-key loop, as a plan without an FA3 cut gets it (the tiny wide grid ranks split first)
    for plan in (choose(small)[0], derive(wide, "online_exp2", {**FLASH_WIDE_TILES, "stages": 1, "overlap": 0})):
        assert plan.tiles["block_n"] == 256, plan.tiles
        mod = load_module(emit_module(plan), f"shape_tiles_{plan.tiles['block_m']}_{plan.tiles['block_n']}")
        for name, f in mod.build_kernel().items():
            assert hopper_features(lower_to_cuda(f, arch="sm_90"))["wgmma"], (name, plan.tiles)


@pytest.mark.parametrize("d_h", [17, 24, 40, 72])
def test_head_dimensions_no_mma_tile_covers_still_build_and_lower(d_h):
    """Head dimensions that are no whole number of MMA pieces (17: no warp partition; 24 and 40:
    a V tile TileLang cannot lay out for wgmma) run those GEMMs on the CUDA cores: the default
    plan builds, stays exact and lowers for sm_90 (before, choose raised or lowering failed)."""
    from leantile.plan import Gemm
    from leantile.plan.verify import mma_shaped

    g = architectures.build("attention", h=2, t_q=70, t_kv=130, d_h=d_h)
    plan = choose(g)[0]
    for k in plan.kernels:
        for s in k.statements():
            if isinstance(s, Gemm):
                assert s.mma == mma_shaped(plan, k, s)
    _check(g, plan, seed=d_h)
    pytest.importorskip("tilelang", reason="tilelang not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda

    mod = load_module(emit_module(plan), f"head_dim_{d_h}")
    for name, f in mod.build_kernel().items():
        assert f"{name}_kernel" in lower_to_cuda(f, arch="sm_90")


@pytest.mark.parametrize("arch,cand", [("rmsnorm", "stats_separate"), ("rmsnorm_mlp", "stats_separate"),
                                       ("layernorm_linear_gelu", "stats_separate+colsum_precomputed")])
@pytest.mark.parametrize("m,d", [(1024, 4096), (8192, 4096), (5, 1100), (128, 768), (2048, 16384)])
def test_row_statistics_kernels_fill_the_gpu(arch, cand, m, d):
    """The row statistics of a norm -> GEMM, as their own kernel, take tiles from the shape: about
    two CTAs per SM where there are rows for them (at least half as many CTAs as rows up to
    2 x SMS), the whole row in one step where two rows fit on chip, else blocks of 1024 and at
    most 8192 elements per tile, whatever the GEMM's tiles (block_r = 128 and 64-wide steps
    left 1024 rows on 8 CTAs)."""
    sizes = {"m": m, "d": d, "n": 256}
    g = architectures.build(arch, **sizes)
    for tiles in (None, {"block_m": 64, "block_k": 32, "block_r": 128}):
        (k,) = [k for k in derive(g, cand, tiles).kernels if k.name.startswith("row_stats")]
        (rows,) = [t for t in k.grid if t.block > 1] or [None]
        ctas = -(-m // rows.block) if rows else m
        assert ctas >= min(m // 2, 2 * SMS), (ctas, k.grid)
        row = 1 << (d - 1).bit_length()
        if 2 * row <= 16384:  # row_tiles.ON_CHIP
            assert k.stream.block == row and (rows.block if rows else 1) * row <= 16384, k.stream
        else:
            assert k.stream.block == 1024 and (rows.block if rows else 1) * 1024 <= 8192, k.stream


@pytest.mark.parametrize("arch,sizes,deep", [("swiglu", {"m": 2048, "n": 14336, "d": 4096}, True),
                                             ("swiglu", {"m": 2048, "n": 28672, "d": 8192}, True),
                                             ("rmsnorm_mlp", {"m": 2048, "n": 14336, "d": 4096}, True),
                                             ("swiglu", {"m": 1024, "n": 2048, "d": 2048}, False),
                                             ("swiglu", {"m": 128, "n": 14336, "d": 4096}, False)])
def test_a_dual_gemm_on_a_large_shape_streams_four_stages_deep(arch, sizes, deep):
    """A dual GEMM whose output fills the GPU with 128 x 256 tiles cannot take them (two
    accumulators): it keeps 128 x 128 and takes 4 stages (H200: swiglu 2048 x 4096 x 14336 0.8514
    -> 0.7894 ms). Smaller shapes take the medium GEMM's 3, and every plan fits the target."""
    plan, _ = choose(architectures.build(arch, **sizes))
    (gemm,) = [k for k in plan.kernels if k.name.startswith("gemm")]
    assert len([s for s in gemm.body if s.op == "gemm"]) == 2, plan.candidate  # dual
    assert plan.tiles["stages"] == (4 if deep else 3) and plan.tiles["block_n"] == 128, plan.tiles
    assert verify(plan, architectures.build(arch, **sizes)) == []


@pytest.mark.parametrize("arch,sizes", [("matmul", {"m": 2048, "d": 3072, "n": 1000}),
                                        ("matmul", {"m": 1500, "d": 1000, "n": 1000}),
                                        ("swiglu", {"m": 128, "n": 14336, "d": 4096}),
                                        ("rmsnorm_mlp", {"m": 128, "n": 14336, "d": 4096}),
                                        ("layernorm_linear_gelu", {"m": 600, "d": 768, "n": 3072})])
def test_a_medium_gemm_streams_three_stages_deep(arch, sizes):
    """A GEMM on the plain 128 x 128 tiles (too small for 128 x 256, too many rows to be skinny,
    not split) streams k 3 stages deep: 2 left GPT-2's c_proj (2048 x 3072 x 768, now on one wave of
    64-row tiles) at 0.0236 ms against 0.0195 (H200).
    Whatever the candidate the cost model picks, it runs at those tiles and fits the target."""
    g = architectures.build(arch, **sizes)
    plan, _ = choose(g)
    gemms = [k for k in plan.kernels if any(s.op == "gemm" for s in k.body)]
    assert gemms and not any(k.stream.split for k in gemms), plan.candidate
    assert (plan.tiles["block_m"], plan.tiles["block_n"], plan.tiles["stages"]) == (128, 128, 3), plan.tiles
    assert verify(plan, g) == []


@pytest.mark.parametrize("arch,sizes,columns,block_k,stages", [
    # 128 CTAs (H100 0.0128 ms, split 0.0188); 128-deep k steps: H200 0.0129 -> 0.0111 (cuBLAS 0.0129)
    ("matmul", {"m": 128, "d": 4096, "n": 4096}, 64, 128, 4),
    # 64 x 64 would be 192 CTAs, 64 x 128 96: 64 x 96 fills the wave (128), H200 0.0201 -> 0.0192 ms
    ("rmsnorm", {"m": 128, "d": 4096, "n": 6144}, 96, 128, 4),
    ("layernorm_linear_gelu", {"m": 128, "d": 768, "n": 3072}, 64, 128, 4),
    ("layernorm_linear_gelu", {"m": 300, "d": 768, "n": 3072}, 128, 128, 4),  # 5 row tiles, the last partial
    ("matmul", {"m": 65, "d": 1000, "n": 8000}, 128, 128, 4),
    ("rmsnorm", {"m": 200, "d": 4096, "n": 6144}, 192, 128, 3),  # H100 0.0348 ms at 128 x 128 -> 0.0280
    # GPT-2 c_proj: H100 0.0222 -> 0.0188 (cuBLAS 0.0172); 128-deep: H200 0.0196 -> 0.0181 (cuBLAS 0.0167)
    ("matmul", {"m": 2048, "d": 3072, "n": 768}, 192, 128, 3),
    ("matmul", {"m": 128, "d": 384, "n": 4096}, 64, 64, 6),  # a short contraction keeps 64-deep steps
    ("layernorm_linear_gelu", {"m": 300, "d": 500, "n": 3072}, 128, 64, 6)])
def test_a_lone_gemm_under_a_wave_takes_one_wave_of_64_row_tiles(arch, sizes, columns, block_k, stages):
    """A graph's one GEMM of more than 64 rows whose 128 x 128 grid leaves SMs idle takes 64-row
    tiles on one warpgroup, unsplit, their grid more than half a wave and at most one
    (shape_tiles.wave_tiles), whichever candidate the cost model picks: 64-deep k steps 6 stages
    deep, or over a contraction of 512 or more 128-deep ones, as many stages as fit 192 KiB (at
    most 4); every such plan fits the target."""
    g = architectures.build(arch, **sizes)
    plan, _ = choose(g)
    (gemm,) = [k for k in plan.kernels if any(s.op == "gemm" for s in k.body)]
    assert not gemm.stream.split, plan.candidate
    assert (plan.tiles["block_m"], plan.tiles["threads"], plan.tiles["block_n"], plan.tiles["block_k"],
            plan.tiles["stages"]) == (64, 128, columns, block_k, stages), plan.tiles
    assert SMS < 2 * output_tiles(plan, gemm) <= 2 * SMS
    assert verify(plan, g) == []


@pytest.mark.parametrize("arch,sizes,block_n,stages", [
    # 192 wide CTAs: 1.45 waves; 384 of 128 x 128 over k = 768: the ping-pong tiles (PINGPONG_TILES)
    ("layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072}, 128, 4),
    ("layernorm_linear_gelu", {"m": 1024, "d": 1024, "n": 4096}, 256, 4),  # 128: one full wave
    ("matmul", {"m": 2048, "d": 4096, "n": 6144}, 256, 4),  # 384: 2.9 waves
    ("matmul", {"m": 2048, "d": 768, "n": 2304}, 256, 4)])  # 144 (1.09 waves), 128 x 128 no better (2.2)
def test_large_gemm_tiles_unless_their_last_wave_idles_the_gpu(arch, sizes, block_n, stages):
    """128 x 256 tiles for a GEMM that fills a wave with them, unless their last wave idles a
    quarter of the SMs where 128 x 128 tiles fill theirs (shape_tiles._large_gemm: GPT-2's MLP at
    m = 2048, H100 0.0300 -> 0.0281 ms)."""
    g = architectures.build(arch, **sizes)
    plan, _ = choose(g)
    assert (plan.tiles["block_m"], plan.tiles["block_n"], plan.tiles["stages"]) == (128, block_n, stages), plan.tiles
    assert verify(plan, g) == []


def test_float32_gemms_keep_their_split_under_a_wave():
    """The one-wave tiles are for 16-bit operands: float32 (tf32) tiles 6 stages deep do not fit
    shared memory, so a float32 GEMM keeps the split over k that fills the GPU."""
    from leantile import ir
    g = architectures.build("matmul", m=128, d=4096, n=4096)
    g = g.model_copy(update={"nodes": tuple(n.model_copy(update={"dtype": "f32"}) if isinstance(n, ir.Input) else n
                                            for n in g.nodes)})
    assert [c.name for c in candidates(g)][0] == "split_k"
    assert derive(g, "split_k").tiles["block_m"] == 128


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(["matmul", "rmsnorm", "swiglu"]), st.integers(65, 1100), st.integers(1, 9000),
       st.integers(16, 5000))
def test_one_wave_tiles_only_where_the_plain_grid_leaves_sms_idle(arch, m, n, d):
    """Wherever the default plan takes the one-wave tiles, its GEMM is the graph's only one, has
    more than 64 rows, its 128 x 128 grid is under a wave and its own grid fills more than half
    a wave and at most one, unsplit; where the 128 x 128 grid fills a wave they are never taken."""
    g = architectures.build(arch, m=m, n=n, d=d)
    for name in [c.name for c in candidates(g) if c.name != "unfused"]:
        plan = derive(g, name)
        gemm = next(k for k in plan.kernels if any(s.op == "gemm" for s in k.body))
        plain = -(-m // 128) * -(-n // 128)
        if plan.tiles["block_m"] == 64:  # the one-wave tiles (m > 64: no small-m tiles here)
            assert arch != "swiglu" and plain < SMS, (name, plan.tiles)
            assert SMS < 2 * output_tiles(plan, gemm) <= 2 * SMS and not gemm.stream.split, (name, plan.tiles)
            # over a contraction of 512 or more 128-deep k steps, 3 or 4 stages (as many as fit),
            # else 64-deep 6 stages deep; either way the plan fits the target
            if d >= 512:
                assert plan.tiles["block_k"] == 128 and plan.tiles["stages"] in (3, 4), (name, plan.tiles)
            else:
                assert (plan.tiles["block_k"], plan.tiles["stages"]) == (64, 6), (name, plan.tiles)
            assert verify(plan, g) == [], (name, plan.tiles)
        if plain >= SMS:
            assert plan.tiles["block_m"] == 128, (name, plan.tiles)


@pytest.mark.parametrize("rows,cols", [(4096, 65536), (2048, 50257), (16, 128256), (3, 70001), (70, 17000)])
def test_a_streamed_softmax_row_takes_64_row_tiles(rows, cols):
    """A softmax whose rows are streamed (a vocabulary) runs its statistics and normalising
    kernels on 64-row tiles (H200, 4096 x 65536: 0.4593 ms at 128 rows, 0.3890 at 64), at any
    row count; rows no multiple of 16 bytes long on 2 x 1024 tiles of 128 threads (H200, 2048 x
    50257: 64 x 128 0.2910, 4 x 1024 0.2652, 2 x 1024 with the statistics split over the row
    0.2212 ms); every such plan fits the target; where the interpreter is quick enough, the plan
    is exact on row and column counts no tile divides."""
    g = load_source("examples/architectures/softmax_row.py:build", {"rows": rows, "cols": cols})
    plan, _ = choose(g)
    streamed = [k for k in plan.kernels if k.stream and k.stream.axis == "cols"]
    assert streamed, [k.name for k in plan.kernels]  # the row does not fit on chip
    x = plan.global_buffer("X")
    if cols * DTYPE_BYTES[x.dtype] % 16:
        assert (plan.tiles["block_m"], plan.tiles["block_n"], plan.tiles["threads"]) == (2, 1024, 128), plan.tiles
        if rows == 2048:  # the statistics split over the row (16 slices): 0.2317 ms unsplit
            assert plan.candidate == "online_row_exp2_split", plan.candidate
    else:
        assert plan.tiles["block_m"] == 64, plan.tiles
    assert verify(plan, g) == []
    if rows * cols < 2_000_000:
        _check(g, plan, seed=rows)


# (rows, columns) whose one GEMM takes one wave of 64-row tiles: 72 and 80 CTAs of 64 columns,
# 128 of 96 (rows 136, 100 and 200 leave a partial row tile)
WAVE_SHAPES = [(136, 1500), (100, 2500), (200, 3000)]


# up to ~15 s an example (every fused candidate interpreted at up to 200 x 3000 x 600): 4 in ci
# (both families, the three shapes, k = 600 among them, derandomized), the
# profile's own count under dev and slow
@settings(max_examples=examples(4, deep=True), deadline=None)
@given(st.sampled_from(["norm_gemm", "gemm"]), st.sampled_from(WAVE_SHAPES), st.sampled_from([24, 40, 600]),
       st.sampled_from(["f16", "bf16"]), st.data())
def test_generated_gemms_at_one_wave_tiles_stay_exact(family, shape, k, dtype, data):
    """Users' GEMMs (strategies: a norm into one or two GEMMs, a reused weight, an intermediate as
    an output, casts; renamed or clashing contraction axes, a scaled LHS, a bias, a constant
    output) on 16-bit operands at shapes where the lone GEMM takes one wave of 64-row tiles, with
    partial row, column and k tiles: every fused candidate, interpreted at those tiles, against
    the float32 reference as runtime.verify judges (the unfused graph's own rounding in the
    graph's dtypes forgiven; each output at the tolerance of its least precise value)."""
    from leantile import ir
    from strategies import ALL_CLASSES, _user_gemm, _user_norm_gemm, inputs_in
    rows, cols = shape
    if family == "norm_gemm":
        g = data.draw(_user_norm_gemm(ALL_CLASSES))[0]
        sizes = {**g.axes, "m": rows, "d": k, "n": cols}  # a second GEMM's other columns (p) as drawn
    else:  # k, kk and j are one size there (a clashing axis contracts W's j): the columns
        g = data.draw(_user_gemm(ALL_CLASSES - {9}))[0]  # 9: a second, dependent GEMM
        sizes = {"m": rows, "k": cols, "kk": cols, "j": cols}
    g = inputs_in(g.model_copy(update={"axes": sizes}), dtype, only="f32")
    waved = 0
    inputs = reference.random_inputs(g, seed=k)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float32)
    same = reference.evaluate(g, inputs)  # the unfused graph in its own dtypes
    for name in [c.name for c in candidates(g) if c.name != "unfused"]:
        plan = derive(g, name)
        waved += plan.tiles["block_m"] == 64  # 128-deep k steps at k = 600 (the last one partial)
        out = interp.run(plan, inputs)
        for o in g.outputs:
            assert out[o].dtype == same[o].dtype, (name, o)  # the output's value dtype
            err = rel_err(out[o], ref[o], same[o])
            assert err <= output_tolerances(g)[o], (name, plan.tiles, o, err)
    mms = [n for n in g.nodes if isinstance(n, ir.Matmul)]
    # a dual GEMM keeps 128 x 128 (measured so); a weight vector (a GEMV) has no columns to tile
    if len(mms) == 1 and len(g.nodes[mms[0].b].axes) > 1:
        assert waved, dict(g.axes)
