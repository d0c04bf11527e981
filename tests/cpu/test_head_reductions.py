"""Reductions over a short axis before two kept ones (x[g, t, d] -> [t, d]: the GQA backward's
sums of dK and dV over a group's query heads). An on-chip row kernel tiled only the innermost kept
axis: 4 x 64 elements a CTA, 16384 CTAs for GQA's [4, 4, 2048, 128] float32 gradients, 0.089 ms on
an H200 for 34 MB (benchmarks/flash_backward/results/probe-h200-2026-11-29-saved-stats.json).
rules.row_tiles.outer_row_block tiles the kept axis before the innermost too. Every candidate of
generated head reductions equals the graph (float64, interpreter) at shapes that do not divide the
tiles; the kernels lower for sm_90."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from leantile import architectures
from leantile.autodiff import vjp
from leantile.dag import DagM
from leantile.derive import derive
from leantile.derive.rules.row_tiles import MIN_TILE
from plan_checks import check_every_candidate
from profiles import examples
from reduction_strategies import head_reduction_graphs


def _head_sum(g: int = 4, t: int = 2048, d: int = 128, dtype: str = "f32", lead: int = 4):
    m = DagM("head_sum", {"b": lead, "g": g, "t": t, "d": d})
    m.output("y", m.red("sum", m.input("X", ["b", "g", "t", "d"], dtype), "g"))
    return m.graph()


def _tile(k) -> int:
    n = 1
    for t in k.grid:
        n *= t.block
    return n


def test_a_sum_over_heads_tiles_the_rows_as_well_as_the_columns():
    plan = derive(_head_sum())
    k, = plan.kernels
    blocks = {t.axis: t.block for t in k.grid}
    assert blocks["g"] == 4 and blocks["t"] >= 2, blocks
    assert _tile(k) >= MIN_TILE, blocks
    assert k.threads == 256


def test_the_gqa_backwards_group_sums_hold_min_tile_elements_a_cta():
    g = architectures.build("gqa_attention", h_kv=4, g=4, t_q=2048, t_kv=2048, d_h=128)
    plan = derive(vjp(g).graph)
    sums = [k for k in plan.kernels if k.name.startswith("row") and {"g", "t_kv"} <= {t.axis for t in k.grid}]
    assert sums, [k.name for k in plan.kernels]
    for k in sums:
        assert _tile(k) >= MIN_TILE, (k.name, k.grid)


def test_a_small_grid_keeps_one_row_a_cta():
    """Tiling t as well would leave SMs idle: a [4, 3, 100] sum keeps t a batch axis."""
    k, = derive(_head_sum(t=3, d=100, lead=1)).kernels
    assert {t.axis: t.block for t in k.grid}["t"] == 1


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(g=head_reduction_graphs(rows=(1, 2000), cols=(1, 200)), seed=st.integers(0, 2 ** 16))
def test_every_candidate_of_a_head_reduction_is_the_graph(g, seed):
    check_every_candidate(g, seed, (None,))


def test_a_tiled_head_sum_at_partial_row_tiles_is_the_graph():
    """t = 1001 over tiles of 16 rows, d = 70 over 64 columns: both partial."""
    g = _head_sum(g=3, t=1001, d=70, dtype="f16", lead=2)
    k, = derive(g).kernels
    assert {t.axis: t.block for t in k.grid}["t"] > 1
    check_every_candidate(g, 3, (None,))


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("g, t, d, dtype", [(4, 2048, 128, "f32"), (3, 1001, 70, "f16"), (16, 333, 33, "bf16")])
def test_head_reduction_kernels_lower_for_sm_90(g, t, d, dtype):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    plan = derive(_head_sum(g, t, d, dtype, lead=2))
    mod = load_module(emit_module(plan), f"head_sum_{g}_{t}_{d}_{dtype}")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
        assert f"{name}_kernel" in cu
