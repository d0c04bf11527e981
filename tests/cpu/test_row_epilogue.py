"""fuse_row_epilogue (issue 49): a norm over a GEMM's column axis that one output tile holds
whole (GroupNorm after a projection: 128 channels a group) runs in the GEMM's kernel, the
reductions over the accumulator's rows, only what the graph needs stored. Every candidate of
generated normalised GEMMs computes what the graph computes (float64, through the interpreter)
at tiles that leave partial row tiles; the rule refuses, with a reason, what no column tile holds;
the kernels lower for sm_90."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from leantile import dag
from leantile.derive import candidates, derive
from plan_checks import check_every_candidate, refusal_reasons
from reduction_strategies import normed_gemm_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import reductions  # noqa: E402

RULE = "fuse_row_epilogue"


def _normed(c: int = 100, kind: str = "layer", product_out: bool = False, dtype: str = "f16", **sizes):
    def body(g):
        y = g.matmul(g.input("X", ["b", "k"], dtype), g.input("W", ["k", "g", "c"], dtype), "k", "k")
        g.output("y", g.layer_norm(y, "c") if kind == "layer" else g.softmax(y, "c"))
        if product_out:
            g.output("product", y)
    return dag.build_graph("normed", {"b": 100, "k": 72, "g": 3, "c": c, **sizes}, body)


def _refusals(g) -> list[str]:
    return refusal_reasons(g, RULE)


def test_the_suites_groupnorm_after_a_gemm_is_one_kernel_storing_only_the_output():
    g = reductions.graph("gemm_groupnorm")
    plan = derive(g)
    k, = plan.kernels
    first = candidates(g)[0]
    assert plan.candidate == first.name == "rows" and [s.rule for s in first.steps] == [RULE]
    assert {t.axis: t.block for t in k.grid}["cg"] == 128  # one column tile: the whole group
    stored = [b.name for b in plan.globals if b.node is not None and g.nodes[b.node].op != "input"]
    assert stored == [plan.outputs["out"]]  # neither the product nor a statistic is stored


def test_what_no_column_tile_holds_is_refused_with_its_reason():
    assert "rows" in [c.name for c in candidates(_normed(100))]
    for g, why in ((_normed(300), "one column tile holds 16..256"), (_normed(5), "one column tile holds 16..256")):
        assert "rows" not in [c.name for c in candidates(g)]
        assert any(why in r for r in _refusals(g)), _refusals(g)


def test_a_product_needed_elsewhere_is_stored_by_the_same_kernel():
    g = _normed(100, "softmax", product_out=True)
    plan = derive(g, "rows")
    k, = plan.kernels
    assert sorted(plan.outputs) == ["product", "y"]
    check_every_candidate(g, 5, (None,))


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(g=normed_gemm_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_a_normed_gemm_is_the_graph(g, seed):
    # 32-row tiles on 2 warps (whole rows per warp), 16-deep k: partial row tiles and k blocks
    check_every_candidate(g, seed, (None, {"block_m": 32, "block_k": 16, "threads": 64}))


def test_a_large_gemm_normed_over_its_narrow_columns_takes_256_row_tiles():
    """shape_tiles.ROW_EPILOGUE_TILES: the suite's GEMM + GroupNorm at a model's width (32 groups of
    128) runs 256 x 128 tiles; at 128 x 512 x 8 x 128 (32 CTAs), or a row of 256 columns, 128 rows."""
    big = derive(reductions.graph("gemm_groupnorm_large"))
    assert big.tiles["block_m"] == 256 and {t.axis: t.block for t in big.kernels[0].grid}["b"] == 256
    assert derive(reductions.graph("gemm_groupnorm")).tiles["block_m"] == 128
    wide = derive(_normed(256, b=8192, k=4096, g=16), "rows")
    assert wide.tiles["block_m"] == 128, wide.tiles


@pytest.mark.parametrize("kind", ["layer", "softmax"])
@pytest.mark.parametrize("sizes", [{"b": 300}, {"b": 1, "c": 17}, {"b": 257, "c": 128}])
def test_256_row_tiles_of_a_normed_gemm_are_the_graph(kind, sizes):
    """Partial 256-row tiles (300, 257 rows; one row), padded columns (100, 17 of 128 and 32)."""
    g = _normed(kind=kind, **{"c": 100, **sizes})
    check_every_candidate(g, 3, ({"block_m": 256, "block_k": 32},))


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_the_large_groupnorm_gemm_lowers_at_256_rows():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    plan = derive(reductions.graph("gemm_groupnorm_large"))
    for name, f in load_module(emit_module(plan), "groupnorm_256_rows").build_kernel().items():
        assert "__global__" in lower_to_cuda(f, arch="sm_90")


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("sizes", [{"c": 128}, {"c": 100, "b": 70}, {"c": 256, "b": 1}, {"c": 24, "g": 1}])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("kind", ["layer", "softmax"])
def test_normed_gemm_kernels_lower_for_sm_90(sizes, dtype, kind):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = _normed(kind=kind, dtype=dtype, **sizes)
    plan = derive(g, "rows")
    mod = load_module(emit_module(plan), f"normed_{dtype}_{kind}_{sizes['c']}_{sizes.get('b', 0)}")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90")
        assert "__global__" in cu and f"{name}_kernel" in cu
