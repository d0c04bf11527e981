"""Column reductions (issues 49 and 50): a reduction over the outer axis of x[m, d] with the
contiguous d kept (a norm's gain and bias gradients: sums over rows). Held whole on chip, a CTA
took 2 columns of every row (4 bytes a row of f16); rules.regions now streams m over 128 columns a
CTA (coalesced rows of 256 bytes), split over CTAs by split_reduction to fill the GPU. Every
candidate of generated column reductions equals the graph (float64, interpreter) at default and
small tiles; the kernels lower for sm_90."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from leantile import interp, reference
from leantile.dag import DagM
from leantile.derive import candidates, derive
from leantile.derive.rules.row_tiles import COLUMN_ROWS
from plan_checks import rel_err
from profiles import examples
from reduction_strategies import column_reduction_graphs


def _gain_gradient(m: int = 8192, d: int = 4096, dtype: str = "f16"):
    g = DagM("gain_gradient", {"m": m, "d": d})
    x, dy = g.input("X", ["m", "d"], dtype), g.input("dY", ["m", "d"], dtype)
    r = g.input("r", ["m"], "f32")
    g.output("d_gamma", g.red("sum", g.mul(dy, g.mul(x, r)), "m"))
    return g.graph()


def test_a_gain_gradient_streams_its_rows_over_coalesced_column_tiles_split_over_ctas():
    plan = derive(_gain_gradient())
    stream = [k for k in plan.kernels if k.stream is not None]
    assert stream, [k.role for k in plan.kernels]
    k = stream[0]
    assert k.stream.axis == "m"
    assert {t.axis: t.block for t in k.grid}.get("d") == COLUMN_ROWS
    assert k.stream.split, "split over CTAs: 32 column tiles alone leave most of an H200's 132 SMs idle"


@settings(max_examples=examples(15), deadline=None,  # 25 took 59 s of make test (the 3 x 5 tiles interpreted)
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(g=column_reduction_graphs(rows=(1, 3000), cols=(1, 300)), seed=st.integers(0, 2 ** 16))
def test_every_candidate_of_a_column_reduction_is_the_graph(g, seed):
    inputs = reference.random_inputs(g, seed=seed)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)
    for c in candidates(g):
        for tiles in (None, {"block_m": 3, "block_n": 5, "block_k": 2, "block_r": 4}):
            out = interp.run(derive(g, c.name, tiles), inputs, dtype=torch.float64)
            for o in g.outputs:
                assert rel_err(out[o].double(), ref[o]) < 1e-9, (c.name, tiles, o)


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("m, d, dtype", [(8192, 4096, "f16"), (3001, 129, "bf16"), (70000, 33, "f32")])
def test_column_reduction_kernels_lower_for_sm_90(m, d, dtype):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    plan = derive(_gain_gradient(m, d, dtype))
    mod = load_module(emit_module(plan), f"column_{m}_{d}_{dtype}")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
        assert f"{name}_kernel" in cu


def _row_and_column(n=33, c=100, h=2048):
    """max over h then c of X [h, n, c] (c contiguous) plus sum over h then c of Y [c, n, h]: after
    the first reductions, [n, c] and [c, n] both reduced over c (lowering campaign s63)."""
    g = DagM("row_and_column", {"n": n, "c": c, "h": h})
    x, y = g.input("X", ["h", "n", "c"], "f32"), g.input("Y", ["c", "n", "h"], "f32")
    g.output("y", g.add(g.red("max", g.red("max", x, "h"), "c"), g.red("sum", g.red("sum", y, "h"), "c")))
    return g.graph()


def test_a_row_and_a_column_reduction_never_share_a_kernel():
    """A row [n, c] and a column [c, n] reduced over c in one on-chip kernel had no TileLang layout
    ("no available layout found"): a kernel's reductions read their sources in one layout."""
    from leantile.derive.rules.row_tiles import column_layout
    g = _row_and_column()
    plan = derive(g)
    for k in plan.kernels:
        layouts = {column_layout(_source_axes(plan, k, r), r.axis) for r in k.statements()
                   if r.op == "reduce" and _source_axes(plan, k, r)}
        assert len(layouts) <= 1, k.name
    inputs = reference.random_inputs(g, seed=3)
    ref = reference.evaluate(g, inputs, compute_dtype=torch.float64)["y"]
    for c in candidates(g):
        assert rel_err(interp.run(derive(g, c.name), inputs, dtype=torch.float64)["y"], ref) < 1e-9


def _source_axes(plan, k, r):
    """The axes of the global tensor a kernel's reduction r reads (through the load into its source), or None."""
    for s in k.statements():
        if s.op == "load" and s.dst == r.src:
            return plan.global_buffer(s.src).axes
    return None


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_a_row_and_a_column_reduction_lower_for_sm_90():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    plan = derive(_row_and_column())
    mod = load_module(emit_module(plan), "row_and_column")
    for name, f in mod.build_kernel().items():
        assert f"{name}_kernel" in lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("size", [1, 3, 33])
def test_an_unfused_reduction_over_a_short_outer_axis_of_a_large_tensor_lowers(size):
    """max over c of X [c, w, n, h] with c = 1 and 8192 x 8192 behind it: a window of block_k = 64
    along c reached 2^31 elements past X's start, a literal TileLang refuses (GPU campaign s64);
    an axis shorter than block_k streams in one block of its padded size."""
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = DagM("short_outer", {"c": size, "w": 8192 // size, "n": 1, "h": 8192})
    g.output("y", g.red("max", g.input("X", ["c", "w", "n", "h"], "f16"), "c"))
    plan = derive(g.graph(), "unfused")
    mod = load_module(emit_module(plan), f"short_outer_{size}")
    for name, f in mod.build_kernel().items():
        assert f"{name}_kernel" in lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
