"""The cost model (leantile.cost): its estimates move the way the GPU does on the effects it
models (work, padding, filling the SMs, register spills), and `choose` (the shipped default where
no tuned entry exists) takes the split plans on skinny shapes and a derivable fused plan
elsewhere. Its agreement with measured times is benchmarks/cost_model_check/cost_model_check.py's (GPU data)."""
from __future__ import annotations

import pytest

from leantile import architectures
from leantile.cost import choose, kernel_cost, plan_seconds
from leantile.derive import candidates, derive


def _ms(g, name=None, tiles=None):
    return plan_seconds(derive(g, name, tiles)) * 1e3


def test_more_work_costs_more():
    a = _ms(architectures.build("matmul", m=2048, d=2048, n=2048))
    b = _ms(architectures.build("matmul", m=2048, d=8192, n=2048))
    c = _ms(architectures.build("matmul", m=8192, d=8192, n=8192))
    assert 0 < a < b < c
    assert 2.0 < c / b < 32.0  # 16x the FLOPs, bounded by the tensor cores at both sizes


def test_padding_a_one_row_gemm_to_128_rows_costs_more_than_to_64():
    g = architectures.build("matmul", m=1, d=4096, n=14336)
    big = _ms(g, None, {"block_m": 128, "threads": 256})  # one GEMM kernel, unsplit (112+ CTAs)
    small = _ms(g, None, {"block_m": 64, "threads": 128})
    assert small < big


def test_splitting_a_grid_that_leaves_sms_idle_is_cheaper():
    g = architectures.build("matmul", m=16, d=4096, n=4096)
    assert _ms(g, "split_k") < _ms(g, "unfused")
    dec = architectures.build("attention", h=32, t_q=1, t_kv=8192, d_h=128)
    assert _ms(dec, "online_exp2_split") < _ms(dec, "online_exp2")
    k19 = architectures.build("matmul", m=256, d=524288, n=256)
    assert _ms(k19, "split_k") * 4 < _ms(k19, "unfused")


def test_a_tile_that_spills_registers_costs_more():
    g = architectures.build("matmul", m=4096, d=4096, n=4096)
    plan = derive(g, None, {"block_n": 256, "threads": 256, "stages": 3})
    spills = kernel_cost(plan, plan.kernels[0], {**plan.tiles, "threads": 128}).seconds
    fits = kernel_cost(plan, plan.kernels[0], dict(plan.tiles)).seconds
    assert spills > fits


@pytest.mark.parametrize("arch,sizes,want", [
    ("matmul", {"m": 16, "d": 4096, "n": 4096}, "split_k"),
    ("attention", {"h": 32, "t_q": 1, "t_kv": 8192, "d_h": 128}, "_split"),
])
def test_choose_takes_the_split_plan_on_skinny_shapes(arch, sizes, want):
    plan, seconds = choose(architectures.build(arch, **sizes))
    assert want in plan.candidate and seconds > 0


@pytest.mark.parametrize("arch", architectures.NAMES)
def test_choose_never_ships_the_unfused_reference_where_a_fused_plan_derives(arch):
    g = architectures.build(arch)
    names = [c.name for c in candidates(g)]
    plan, _ = choose(g)
    assert plan.candidate in names
    if len(names) > 1:
        assert plan.candidate not in ("unfused",)


# (arch, sizes, tiles choose must pick): the fastest of the probed tiles on an H200
# (benchmarks/split_k_waves/results/issue16-grid-probe-2026-11-25.json, issue16-k2-19-probe-2026-11-25.json)
MEASURED_BEST = [
    # 64 x 64 (0.0039 vs 0.0078 ms); now the shape's own tiles (shape_tiles.wave_tiles), 6 stages
    # deep, which ran level with 4 on an H100 (0.0040 / 0.0039 ms; layernorm -> GEMM -> gelu 0.0067 /
    # 0.0066: benchmarks/one_wave_tiles/results/tiles-probe-wave-stages-h100-2026-11-26.json)
    ("matmul", {"m": 128, "d": 768, "n": 2304}, {"block_m": 64, "block_n": 64}),
    ("layernorm_linear_gelu", {"m": 128, "d": 768, "n": 3072}, {"block_m": 64, "block_n": 64}),
    # at m <= 16 the swapped tiles (plan.passes.swap_operands), 64 columns for this 24-tile grid:
    # H100 0.0054 ms against torch.compile's 0.0063 (benchmarks/swap_ab/results/suite-skinny-swap-h100-2026-11-26.md)
    ("layernorm_linear_gelu", {"m": 1, "d": 768, "n": 3072}, {"block_m": 16, "block_n": 64, "stages": 4, "swap_operands": 1}),
    ("matmul", {"m": 256, "d": 524288, "n": 256}, {"block_m": 128, "block_n": 256, "stages": 3}),  # 0.153 vs 0.206
    # 128 x 4096 x 4096: 4 slices at 128 x 128 x 4 stages 0.0141 ms; 8 at 128 x 256 0.0193 (H200:
    # benchmarks/split_k_waves/results/issue16-m128-max4-probe-2026-11-25.json); unsplit at one wave of 64 x 64
    # tiles, 6 stages, on an H100 0.0128 against 0.0188 split (split-probe-m128-h100-2026-11-26.json);
    # 128-deep k steps 4 stages deep 0.0129 -> 0.0111 on the H200 (tiles-probe-wave-deep-k-h200-2026-11-27.json)
    ("matmul", {"m": 128, "d": 4096, "n": 4096}, {"block_m": 64, "block_n": 64, "block_k": 128, "stages": 4}),
    # rmsnorm -> 128 x 4096 x 6144: 64 x 128 x 6 stages 0.0236 ms, split at 128 x 128 0.0288 (H100);
    # 128-deep k steps 0.0210 -> 0.0197 (H200); 64 x 96 (a full wave of 128 CTAs) 0.0201 -> 0.0192
    ("rmsnorm", {"m": 128, "d": 4096, "n": 6144}, {"block_m": 64, "block_n": 96, "block_k": 128, "stages": 4}),
    # where a split is offered, unsplit candidates keep their tiles: rmsnorm 1 x 4096 x 6144 ran
    # 0.016 ms split at 64 x 256 and 0.028 unsplit at 64 x 64 (suite-split-serial-combine-2026-11-25.md);
    # swapped 16 x 128 (H100, same process): m = 16 0.0259 -> 0.0229 (tiles-probe-swap-h100-2026-11-26.json)
    ("rmsnorm", {"m": 1, "d": 4096, "n": 6144}, {"block_m": 16, "block_n": 128, "stages": 4, "swap_operands": 1}),
    # GPT-2's c_proj (96 CTAs of 128 x 128: 3 stages 0.0195 ms, 2 0.0236, 64 x 256 0.0217 on the H200,
    # benchmarks/default_tiles/results/tiles-probe-gemm-cproj-h200-2026-11-26.json) takes one wave of 64 x 192 tiles (H100 0.0222
    # -> 0.0188 at 6 stages, 0.0182 at 4: split-probe-cproj-h100-2026-11-26-192.json); a wave or more of
    # output tiles keeps the shape's tiles: GPT-2's MLP at m = 2048 (192 CTAs of 128 x 256: 0.032 ms, 128 x 64
    # 0.042 on the H200), where 128 x 128 x 3 stages fill their 2.9 waves better (H100 0.0300 -> 0.0281 ms:
    # benchmarks/large_gemm_wave_fill/results/tiles-probe-lnlg-h100-2026-11-26.json, shape_tiles._large_gemm); there, over k = 768, the
    # ping-pong schedule on 128 x 128 x 4 stages beat them (H200 0.0267 -> 0.0216 ms:
    # benchmarks/pingpong/results/tiles-probe-pingpong-default-h200-2026-11-27.json, shape_tiles.PINGPONG_TILES)
    ("matmul", {"m": 2048, "d": 3072, "n": 768}, {"block_m": 64, "block_n": 192}),
    ("layernorm_linear_gelu", {"m": 2048, "d": 768, "n": 3072},
     {"block_m": 128, "block_n": 128, "stages": 4, "pingpong": 1}),
]


@pytest.mark.parametrize("arch,sizes,want", MEASURED_BEST)
def test_choose_ranks_other_tiles_where_the_shape_tiles_leave_sms_idle(arch, sizes, want):
    plan, _ = choose(architectures.build(arch, **sizes))
    assert {k: plan.tiles[k] for k in want} == want, (plan.candidate, plan.tiles)


def test_a_reduction_between_k_steps_costs_the_fused_statistics_their_measured_lead():
    """layernorm -> GEMM at GPT-2 m = 1: a row kernel before the GEMM (prenorm) ran 0.0126 ms,
    the statistics fused into the GEMM (three block-wide reductions a k step) 0.028; so at the
    64 x 64 tiles choose ranks for this shape too."""
    g = architectures.build("layernorm_linear_gelu", m=1, d=768, n=3072)
    for tiles in (None, {"block_m": 64, "threads": 128, "block_n": 64, "stages": 4}):
        assert _ms(g, "prenorm", tiles) < _ms(g, "stats_fused+colsum_streamed", tiles), tiles


# The best candidate of a norm -> GEMM, every candidate at its shape's tiles, checked and timed in
# one process; where two ran within 2% of each other either is right. On the H100
# (benchmarks/norm_gemm/results/norm-gemm-h100-2026-11-25.md) the normalised rows from a row kernel before
# the GEMM (prenorm) beat the statistics fused into the GEMM's k loop (rmsnorm 2048 x 4096 x 6144:
# 0.168 ms against 0.196) and those from a kernel before it, whose row statistics then ran on 8
# CTAs. With those statistics on whole rows (H200, benchmarks/norm_gemm/results/kernel-times-norm-gemm-
# h200-2026-11-26-row-stats*.json): rmsnorm 1024 x 4096 x 4096 stats_separate 0.0557 ms, prenorm
# 0.0580; 2048 x 4096 x 6144 0.1725 against 0.1728 (statistics still pipelined); rmsnorm_mlp
# 1024^3 0.0156 against 0.0157, 128 x 4096 x 14336 0.0746 against 0.0760.
EITHER = {"stats_separate", "prenorm"}
MEASURED_BEST_CANDIDATE = [
    ("rmsnorm", {"m": 2048, "d": 4096, "n": 6144}, EITHER),
    ("rmsnorm", {"m": 1024, "d": 4096, "n": 4096}, {"stats_separate"}),
    ("rmsnorm_mlp", {"m": 1024, "d": 1024, "n": 1024}, EITHER),
    ("rmsnorm_mlp", {"m": 128, "d": 4096, "n": 14336}, EITHER),
    ("rmsnorm_mlp", {"m": 2048, "d": 4096, "n": 14336}, {"prenorm"}),
    ("layernorm_linear_gelu", {"m": 1024, "d": 1024, "n": 4096}, {"prenorm"}),
    ("layernorm_linear_gelu", {"m": 8192, "d": 768, "n": 3072}, {"prenorm"}),
]


@pytest.mark.parametrize("arch,sizes,want", MEASURED_BEST_CANDIDATE)
def test_choose_takes_the_norm_gemm_candidate_that_ran_fastest(arch, sizes, want):
    plan, _ = choose(architectures.build(arch, **sizes))
    assert plan.candidate in want, plan.candidate


def test_fused_statistics_cost_their_barriers_on_top_of_the_gemm():
    """A block-wide reduction each k step stalls the warps that issue the MMAs: the fused GEMM
    costs the plain one's time plus at least one barrier a step (never hidden behind it)."""
    from leantile.cost import REDUCE_SYNC_S

    g = architectures.build("rmsnorm", m=2048, d=4096, n=6144)
    fused, plain = derive(g, "stats_fused"), derive(g, "prenorm")
    gemm = [k for k in fused.kernels if "gemm" in k.name][-1]
    steps = 4096 // fused.tiles["block_k"]
    assert kernel_cost(fused, gemm).seconds >= kernel_cost(plain, plain.kernels[-1]).seconds + steps * REDUCE_SYNC_S


@pytest.mark.parametrize("arch,sizes,want", [
    # H200, exp against exp2 (benchmarks/fa3_overlap/results/overlap-compare-h200-2026-11-26.json): the model
    # put them within 0.3%; exp2 ran 0.0509 against 0.0589 ms, 0.0130 against 0.0152
    ("attention", {"h": 12, "t_q": 2048, "t_kv": 2048, "d_h": 64}, "online_exp2"),
    ("attention", {"h": 32, "t_q": 512, "t_kv": 512, "d_h": 128}, "online_exp2"),
    ("attention", {"h": 32, "t_q": 1, "t_kv": 8192, "d_h": 128}, "online_exp2_split"),
    # the tie-break is between twins only: a different plan shape within 2% keeps its rank
    ("rmsnorm", {"m": 8192, "d": 4096, "n": 6144}, "stats_separate"),
    ("attention", {"h": 64, "t_q": 1, "t_kv": 8192, "d_h": 128}, "online_exp2_split"),
])
def test_choose_breaks_a_model_tie_between_twins_by_cuda_core_work(arch, sizes, want):
    assert choose(architectures.build(arch, **sizes))[0].candidate == want
