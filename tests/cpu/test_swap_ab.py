"""The swapped GEMM (plan.passes.swap_operands, tile parameter swap_operands, once swap_ab): which kernels take it,
the tiles a few-row GEMM gets by default (derive/shape_tiles.py), and what the emitter spells:
acc^T = b^T a^T on the tensor cores, every fragment of the accumulator's axes laid out (column,
row), the store transposed through a shared tile. Values are the GPU's to check
(tests/gpu/test_swap_ab_gpu.py: the interpreter keeps the logical layout); here the structure,
and that every kernel lowers and compiles for sm_90a."""
from __future__ import annotations

import pytest

from leantile import architectures
from leantile.derive import candidates, derive
from leantile.derive.shape_tiles import SWAP_AB_ROWS, SWAP_AB_TILES, SWAP_NARROW_TILES
from leantile.emit import emit_module, load_module
from leantile.plan import Gemm, Reduce, on_chip_dims

GEMMS = ("matmul", "swiglu", "rmsnorm", "rmsnorm_mlp", "layernorm_linear_gelu")
ASK = {"block_m": 16, "block_n": 128, "stages": 4, "threads": 128, "swap_operands": 1}


def _gemm_kernels(plan):
    return [k for k in plan.kernels if any(isinstance(s, Gemm) and s.mma for s in k.statements())]


@pytest.mark.parametrize("name", GEMMS)
def test_a_kernel_swaps_exactly_where_its_accumulator_stays_out_of_reductions(name):
    g = architectures.build(name, m=5, d=200, n=136)
    for c in candidates(g):
        plan = derive(g, c.name, ASK)
        for k in _gemm_kernels(plan):
            reduces = any(isinstance(s, Reduce) for s in k.statements())
            assert bool(k.swapped) == (not reduces), (c.name, k.name)
            if k.swapped:  # the accumulator's (row, column) axes, kept (column, row) on chip
                acc = k.buffer(next(s.acc for s in k.statements() if isinstance(s, Gemm)))
                assert k.swapped == acc.axes
                assert on_chip_dims(k, acc.axes) == ((acc.axes[1],), (acc.axes[0],))
        unasked = derive(g, c.name, {**ASK, "swap_operands": 0})
        assert not any(k.swapped for k in unasked.kernels)


def test_attention_never_swaps():
    g = architectures.build("attention", h=2, t_q=70, t_kv=90, d_h=64)
    plan = derive(g, None, {"block_m": 64, "block_n": 64, "threads": 128, "swap_operands": 1})
    assert not any(k.swapped for k in plan.kernels)


@pytest.mark.parametrize("m", [1, 3, SWAP_AB_ROWS])
def test_a_few_row_gemm_takes_the_swapped_tiles_by_default(m):
    """Every GEMM kernel of the candidates that can swap takes the swapped 16-row tiles; one
    that cannot (statistics reduced in the GEMM kernel) keeps 64-row tiles, never a 16-row
    tile it would spell unswapped."""
    for name in GEMMS:
        g = architectures.build(name, m=m, d=4096, n=6144)
        for c in candidates(g):
            plan = derive(g, c.name)
            gemms = _gemm_kernels(plan)
            if not gemms:
                continue
            if all(k.swapped for k in gemms):
                want = {**SWAP_AB_TILES, **({} if plan.tiles["block_n"] == 128 else SWAP_NARROW_TILES)}
                assert {p: plan.tiles[p] for p in SWAP_AB_TILES} == want, (name, c.name)
            else:
                assert plan.tiles["block_m"] == 64 and not plan.tiles.get("swap_operands"), (name, c.name, plan.tiles)


def test_more_rows_keep_the_unswapped_tiles():
    for m in (SWAP_AB_ROWS + 1, 64, 300):
        plan = derive(architectures.build("matmul", m=m, d=4096, n=6144))
        assert not plan.tiles.get("swap_operands") and not any(k.swapped for k in plan.kernels)


def test_a_short_unsplit_gemm_on_few_columns_takes_64_column_tiles():
    """GPT-2's layernorm -> GEMM at m = 1: 24 tiles of 128 columns, k too short to split."""
    plan = derive(architectures.build("layernorm_linear_gelu", m=1, d=768, n=3072), "prenorm")
    assert plan.tiles["block_n"] == SWAP_NARROW_TILES["block_n"] and plan.tiles["swap_operands"] == 1
    wide = derive(architectures.build("matmul", m=1, d=4096, n=14336))  # 112 tiles: 128 columns
    assert wide.tiles["block_n"] == SWAP_AB_TILES["block_n"]


def test_the_emitter_spells_the_swapped_gemm_and_its_transposed_store():
    g = architectures.build("swiglu", m=3, d=200, n=136)
    plan = derive(g, "fused", ASK)
    src = emit_module(plan)
    # both accumulators (column, row), B^T A^T into each, the epilogue over (n, m), one transposed store
    assert src.count("alloc_fragment((block_n, block_m), accum_dtype)") >= 3
    assert "T.gemm(W_gate_shared, X_shared, matmul_3, transpose_A=True, transpose_B=True)" in src
    assert "T.gemm(W_up_shared, X_shared, matmul_5, transpose_A=True, transpose_B=True)" in src
    assert "for i, j in T.Parallel(block_n, block_m):" in src
    assert "for i, j in T.Parallel(block_m, block_n):  # mul_6 is kept transposed (swap_operands)" in src
    assert "_out_shared[i, j] = T.cast(mul_6_frag[j, i]" in src


@pytest.mark.slow  # make test runs it; make test-fast does not (the longest CPU tests)
@pytest.mark.parametrize("name", GEMMS)
def test_every_swapped_kernel_lowers_and_compiles(name):
    lower = pytest.importorskip("leantile.lower")
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    if lower.nvcc_path() is None:
        pytest.skip("nvcc not found")
    g = architectures.build(name, m=7, d=136, n=200)
    seen = set()
    for c in candidates(g):
        plan = derive(g, c.name, ASK)
        swapped = {k.name for k in plan.kernels if k.swapped}
        kernels = load_module(emit_module(plan), f"swap_{name}_{c.name}".replace("+", "_")).build_kernel()
        for kname, f in kernels.items():
            if kname not in swapped or f.script() in seen:
                continue
            seen.add(f.script())
            cu = lower.lower_to_cuda(f)
            assert "wgmma" in cu, (c.name, kname)  # the swapped tile is a Hopper MMA, not a SIMT loop
            lower.compile_cuda(cu)
    assert seen, name


def test_leantile_derive_says_which_accumulator_is_kept_transposed():
    from leantile.cli.derive import plan_text

    text = plan_text(derive(architectures.build("matmul", m=4, d=4096, n=6144)))
    assert "swap_operands=1" in text and "accumulator [m, n] kept transposed (swap_operands)" in text
    assert "kept transposed" not in plan_text(derive(architectures.build("matmul", m=40, d=4096, n=6144)))


def test_the_verifier_refuses_a_swap_where_no_gemm_accumulates_or_a_row_is_reduced():
    from leantile.plan.verify import verify

    g = architectures.build("swiglu", m=3, d=200, n=136)
    plan = derive(g, "fused", ASK)
    assert not verify(plan, g)
    attn = architectures.build("attention", h=2, t_q=70, t_kv=90, d_h=64)
    flash = derive(attn)
    k = flash.kernels[0]
    acc = next(s.acc for s in k.statements() if isinstance(s, Gemm))
    forced = flash.model_copy(update={"kernels": (k.model_copy(update={"swapped": k.buffer(acc).axes}),
                                                  *flash.kernels[1:])})
    assert any("kept swapped" in p for p in verify(forced, attn))  # online softmax reduces its rows
    odd = plan.model_copy(update={"kernels": (plan.kernels[0].model_copy(update={"swapped": ("n", "d")}),)})
    assert any("kept swapped" in p for p in verify(odd, g))  # no accumulator over (n, d)
