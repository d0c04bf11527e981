"""fuse_pool_epilogue (issue 49): max or average pooling over a split axis of a GEMM's output
(y = X W, W [k, n, p], reduced over p) runs in the GEMM's kernel: the weight's (n, p) one
column tile, the pool reduced in the epilogue, only the pooled result stored. Every candidate
of generated pooled graphs computes what the graph computes (float64, through the interpreter)
at tiles that split n into several partial tiles; the rule refuses, with a reason, what it
cannot pool; the kernels lower for sm_90."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from leantile import dag
from leantile.errors import GraphError
from leantile.derive import candidates, derive
from plan_checks import check_every_candidate, refusal_reasons
from reduction_strategies import pooled_gemm_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import reductions  # noqa: E402


def _pooled(p: int = 4, kind: str = "max", product_out: bool = False, dtype: str = "f16", linear: bool = False,
            **sizes):
    def body(g):  # linear: the weight in nn.Linear's layout [out, in] = [n, p, k]
        w = g.input("W", ["n", "p", "k"] if linear else ["k", "n", "p"], dtype)
        y = g.matmul(g.input("X", ["b", "k"], dtype), w, "k", "k")
        g.output("y", g.red(kind, y, "p"))
        if product_out:
            g.output("product", y)
    return dag.build_graph("pooled", {"b": 100, "k": 72, "n": 30, "p": p, **sizes}, body)


def _refusals(g) -> list[str]:
    return refusal_reasons(g, "fuse_pool_epilogue")


@pytest.mark.parametrize("name", ["gemm_maxpool", "gemm_avgpool"])
def test_the_suites_pooling_is_one_gemm_kernel_storing_only_the_pool(name):
    g = reductions.graph(name)
    plan = derive(g)
    assert plan.candidate == "pool"
    k, = plan.kernels
    assert k.packed == ("n", "pool")
    assert [b.name for b in plan.globals if b.node is not None and g.nodes[b.node].op != "input"] == \
        [plan.outputs["out"]]  # the product is never stored
    # the weight's column tile holds every pool position of block_n / pool positions of n
    tiles = {t.axis: t for t in k.grid}
    assert tiles["pool"].block == 2 and tiles["n"].block * 2 == plan.tiles["block_n"]


def test_what_the_rule_cannot_pool_is_refused_with_its_reason():
    assert "pool" in [c.name for c in candidates(_pooled(4))]
    for g, why in ((_pooled(3), "power of two"), (_pooled(64), "2..32"),
                   (_pooled(4, product_out=True), "needed outside the GEMM")):
        assert "pool" not in [c.name for c in candidates(g)]
        assert any(why in r for r in _refusals(g)), _refusals(g)


@settings(deadline=None)  # examples: the profile's (ci 40, dev 300, slow 1000)
@given(g=pooled_gemm_graphs(), seed=st.integers(0, 2**16))
def test_every_candidate_of_a_pooled_gemm_is_the_graph(g, seed):
    # 64-column tiles: n in tiles of 64 / p (partial where n is no multiple); 32 rows on 2 warps
    # (a norm's statistics fused in the GEMM need whole rows per warp), 16-deep k
    check_every_candidate(g, seed, (None, {"block_m": 32, "block_n": 64, "block_k": 16, "threads": 64}))


def test_tiles_that_cannot_hold_two_positions_of_n_are_a_clear_error():
    g = _pooled(32)
    with pytest.raises(GraphError, match="block_n=32 cannot hold two positions of n"):
        derive(g, "pool", {"block_n": 32})


def test_a_weight_in_linear_layout_pools_too_read_through_its_view():
    plan = derive(_pooled(linear=True))
    assert plan.candidate == "pool"
    k, = plan.kernels
    w = next(b for b in k.buffers if b.name == "W_shared")
    assert w.axes == ("n", "p", "k") and k.packed == ("n", "p")  # (n, p) one dimension, k the other


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
@pytest.mark.parametrize("sizes", [{"p": 2}, {"p": 8, "n": 33, "b": 70}, {"p": 32, "b": 1}, {"p": 4, "linear": True}])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_pooled_kernels_lower_for_sm_90(sizes, dtype):
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import lower_to_cuda
    g = _pooled(kind="sum", dtype=dtype, **sizes)
    plan = derive(g, "pool")
    mod = load_module(emit_module(plan), f"pooled_{dtype}_{sizes['p']}_{sizes.get('linear', False)}")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90")
        assert "__global__" in cu and f"{name}_kernel" in cu


@pytest.mark.parametrize("kind", ["max", "sum"])
@pytest.mark.parametrize("linear", [False, True])
def test_a_pool_of_two_over_tensor_cores_combines_each_threads_pair_in_registers(kind, linear):
    """A pool of 2 over a tensor-core accumulator reads its pairs in place (plan.pooled_in_registers):
    no shared copy of the accumulator is emitted or counted, where a pool of 4 keeps its copy, and
    the pooled plan still computes the graph."""
    from leantile.emit import emit_module
    from leantile.plan import Reduce, pooled_in_registers
    from leantile.plan.shared import temps

    def pooled_plan(p):
        plan = derive(_pooled(p=p, kind=kind, linear=linear, b=256, k=128, n=64), "pool")
        k, = plan.kernels
        red = next(s for s in k.epilogue if isinstance(s, Reduce))
        counted = [t.buffer for t in temps(plan, k) if t.role == "mirror"]  # what plan.verify.shared_bytes adds
        return pooled_in_registers(plan, k, red), f"{red.src}_smem" in emit_module(plan), counted, red.src

    regs2, emitted2, counted2, _ = pooled_plan(2)
    regs4, emitted4, counted4, acc4 = pooled_plan(4)
    assert regs2 and not emitted2 and counted2 == []
    assert not regs4 and emitted4 and counted4 == [acc4]
    check_every_candidate(_pooled(p=2, kind=kind, linear=linear, b=37, k=24, n=9), 3,
                           (None, {"block_m": 16, "block_n": 8, "block_k": 16}))


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering and nvcc are the slow part)
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("kind", ["max", "sum"])
def test_a_pool_of_two_in_registers_lowers_and_compiles(dtype, kind):
    """TileLang itself verifies that each thread holds its pair (it refuses the loop otherwise:
    "Cannot lower access to thread-distributed fragment"): partial tiles of n and rows, both
    weight layouts, compiled by nvcc for sm_90a where nvcc is here."""
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import compile_cuda, lower_to_cuda, nvcc_path
    for linear in (False, True):
        g = _pooled(p=2, kind=kind, dtype=dtype, linear=linear, b=70, k=72, n=33)
        plan = derive(g, "pool")
        mod = load_module(emit_module(plan), f"pool2_{dtype}_{kind}_{linear}")
        for name, f in mod.build_kernel().items():
            cu = lower_to_cuda(f, arch="sm_90a", pass_configs=mod.PASS_CONFIGS.get(name))
            assert "pool_p" in cu and "_smem" not in cu
            if nvcc_path():
                assert compile_cuda(cu, arch="sm_90a", flags=mod.NVCC_FLAGS.get(name))[:4] == b"\x7fELF"


@pytest.mark.parametrize("n, tma", [(128, True), (33, False)])
def test_a_pooled_weight_is_copied_through_its_merged_view_with_tma_where_its_rows_allow(n, tma):
    """W [k, n, 2] in f16 has rows of 4 bytes, but the kernel copies it through its [k, 2 n] view,
    whose rows are 4 n bytes: at n = 128 (512 bytes) TMA moves them and the kernel keeps TileLang's
    warp specialisation (it was turned off, as for a weight loaded without TMA: the 4096^3 x 2
    maxout ran a cp.async pipeline at 0.83x torch.compile); at n = 33 (132 bytes) TMA cannot."""
    from leantile.emit.common import _loaded_without_tma, copy_row_bytes, pass_configs
    plan = derive(_pooled(p=2, b=256, k=512, n=n), "pool")
    k, = plan.kernels
    w = plan.global_buffer("W")
    load = next(s for s in k.body if getattr(s, "src", None) == "W")
    shared = next(b for b in k.buffers if b.name == load.dst)
    assert copy_row_bytes(plan, k, w, shared.axes) == 4 * n
    assert (load.dst in _loaded_without_tma(plan, k)) != tma
    if tma:  # 128 x 256 tiles: without TMA, the accumulator would have turned warp specialisation off
        assert "tl.disable_warp_specialized" not in pass_configs(plan).get(k.name, {})


@pytest.mark.slow  # make test runs it; make test-fast does not (lowering is the slow part)
def test_a_pooled_gemm_of_tma_rows_lowers_warp_specialised_with_tma():
    pytest.importorskip("tilelang", reason="tilelang is not installed: lowering skipped")
    from leantile.emit import emit_module, load_module
    from leantile.lower import hopper_features, lower_to_cuda
    plan = derive(_pooled(p=2, b=256, k=512, n=128), "pool")
    mod = load_module(emit_module(plan), "pool2_tma")
    for name, f in mod.build_kernel().items():
        cu = lower_to_cuda(f, arch="sm_90", pass_configs=mod.PASS_CONFIGS.get(name))
        feats = hopper_features(cu)
        assert feats["warp_specialized"] and "tl::tma_load" in cu and not feats["cp_async"], feats
