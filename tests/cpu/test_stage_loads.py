"""plan.passes.stage_loads (tile parameter `stage_loads=1`, issue 49): a streamed row kernel's body
loads of register tiles go through a shared tile, which TileLang pipelines (a TMA or cp.async
producer `stages` blocks ahead) where a load into registers waits every block. Checked: which
loads are staged (streamed register tiles of 16-byte rows; not a GEMM's, not a one-block row, not
an unaligned row, not without the switch), that every candidate still computes the graph (float64
through the interpreter, generated long reductions too), and that staged kernels lower for sm_90
with a producer, no spill, and the shared memory the verifier counts."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

from leantile.derive import candidates, derive
from leantile.plan import Load, Map
from leantile.plan.passes import STAGED_SUFFIX
from plan_checks import check_every_candidate
from reduction_strategies import long_reduction_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
fusion = importlib.import_module("fusion")
reductions = importlib.import_module("reductions")

ON = {"stage_loads": 1}


def _staged(plan) -> dict[str, list[str]]:
    """{kernel: [global loaded through a staged shared tile]}"""
    out = {}
    for k in plan.kernels:
        shared = {b.name for b in k.buffers if b.scope == "shared" and b.name.endswith(STAGED_SUFFIX)}
        stmts = (*k.body, *k.second_pass)
        names = [s.src for s in stmts if isinstance(s, Load) and s.dst in shared]
        if names:
            out[k.name] = names
            copies = [s for s in stmts if isinstance(s, Map) and s.fn == "copy" and s.args[0] in shared]
            assert len(copies) == len(names)  # each staged tile copied into its registers once a block
    return out


def test_a_streamed_cross_entropy_stages_its_rows_only_when_asked():
    g = fusion.graph("cross_entropy")
    assert not _staged(derive(g))
    plan = derive(g, None, ON)
    assert _staged(plan) == {"row_2": ["X"]}, _staged(plan)
    # a two-pass row (log-softmax over 32000 f16: 64 KB rows) stages both passes' loads
    assert _staged(derive(reductions.graph("log_softmax"), None, ON)) == {"row_1": ["X", "X"]}
    # a GEMM kernel's operands are shared tiles already; a row held on chip has no stream to pipeline
    assert not _staged(derive(reductions.graph("triu_gemm"), None, ON))
    assert not _staged(derive(fusion.graph("rmsnorm_gain"), None, ON))
    # rows of 20001 halves are no whole 16-byte granules: the window path, not staged
    assert not _staged(derive(fusion.graph("cross_entropy", m=8, c=20001), None, ON))


@pytest.mark.parametrize("case,sizes", [("cross_entropy", dict(m=5, c=20008)), ("log_softmax", dict(m=3, d=24000))])
def test_staged_fusion_rows_compute_the_graph(case, sizes):
    g = fusion.graph(case, **sizes)
    assert any(_staged(derive(g, c.name, ON)) for c in candidates(g))
    check_every_candidate(g, 4, [ON])


@pytest.mark.parametrize("case,sizes", [("layernorm_chw", dict(n=2, c=4, h=33, w=64)), ("mse_loss", dict(m=7, d=2400)),
                                        ("bias_grad", dict(m=9000, d=16))])
def test_staged_reductions_compute_the_graph(case, sizes):
    check_every_candidate(reductions.graph(case, **sizes), 5, [ON])


@settings(max_examples=15, deadline=None)
@given(long_reduction_graphs())
def test_generated_long_reductions_staged_equal_their_reference(g):
    check_every_candidate(g, 2, [ON, {**ON, "stages": 3}])


@pytest.mark.parametrize("case,src,tiles", [
    ("cross_entropy", "fusion", ON), ("log_softmax", "reductions", ON), ("mse_loss", "reductions", {**ON, "stages": 3})])
def test_staged_kernels_lower_with_a_producer_and_no_spill(case, src, tiles):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    from leantile.plan.passes import REDUCE_SCRATCH
    from leantile.plan.verify import shared_bytes
    from leantile.target import DEFAULT
    g = (fusion if src == "fusion" else reductions).graph(case)
    plan = derive(g, None, tiles)
    staged = _staged(plan)
    assert staged, (case, [k.name for k in plan.kernels])
    mod = load_module(emit_module(plan), f"staged_{case}")
    kernels = mod.build_kernel()
    for name in staged:
        info: dict = {}
        cu = lower_to_cuda(kernels[name], arch="sm_90", info=info, pass_configs=mod.PASS_CONFIGS.get(name))
        assert "tma_load" in cu or "cp_async" in cu, name  # the pipeline's producer
        # at most the rings the verifier counts (fewer where the emitter caps a run-time trip count's
        # stages: emit.streams.dynamic_stage_cap) and REDUCE_SCRATCH of reductions' scratch beside them
        counted = shared_bytes(plan, next(k for k in plan.kernels if k.name == name))
        assert info["shared_bytes"] <= counted + REDUCE_SCRATCH <= DEFAULT.smem_per_cta, (name, counted, info)
        if nvcc_path():
            report: list = []
            compile_cuda(cu, report=report)
            assert any("0 bytes spill stores" in line for line in report), report
