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
