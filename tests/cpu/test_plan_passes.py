"""Issue 13: the emitter's code-generation decisions are plan fields set by named passes
(leantile.plan_passes); the emitter spells them, the search reads them, the verifier checks
that they fit the kernel."""
from leantile import architectures
from leantile.derive import derive
from leantile.emit import emit_module
from leantile.plan import Gemm, Store
from leantile.plan_verify import verify


def _edit(plan, j, **fields):
    ks = list(plan.kernels)
    ks[j] = ks[j].model_copy(update=fields)
    return plan.model_copy(update={"kernels": tuple(ks)})


def test_passes_decide_what_the_emitter_spells():
    att = derive(architectures.build("attention", h=2, t_q=64, t_kv=64, d_h=64))
    [flash] = att.kernels
    assert flash.warp_policy == "full_row"  # P V reads a fragment: whole rows per warp
    src = emit_module(att)
    assert "GemmWarpPolicy.FullRow" in src
    mm = derive(architectures.build("matmul", m=256, d=128, n=256))
    [gemm] = mm.kernels
    assert gemm.warp_policy == "auto" and gemm.swizzle
    assert [s.staged for s in gemm.epilogue if isinstance(s, Store)] == [True]
    src = emit_module(mm)
    assert "T.use_swizzle" in src and "_out_shared" in src and "FullRow" not in src
    # the emitter follows the fields, not its own reading of the statements
    plain = _edit(mm, 0, swizzle=False, epilogue=tuple(s.model_copy(update={"staged": False})
                                                        if isinstance(s, Store) else s for s in gemm.epilogue))
    src = emit_module(plain)
    assert "T.use_swizzle" not in src and "_out_shared" not in src


def test_kernels_without_a_gemm_get_no_gemm_decisions():
    plan = derive(architectures.build("rmsnorm", m=16, d=32, n=16), "unfused")
    assert any(not any(isinstance(s, Gemm) for s in k.statements()) for k in plan.kernels)
    for k in plan.kernels:
        if not any(isinstance(s, Gemm) for s in k.statements()):
            assert k.warp_policy == "auto" and not k.swizzle


def test_verify_rejects_misplaced_codegen_fields():
    g = architectures.build("rmsnorm", m=16, d=32, n=16)
    plan = derive(g, "unfused")
    j = next(j for j, k in enumerate(plan.kernels) if k.name.startswith("reduce_"))  # stores a 1-D row vector
    k = plan.kernels[j]
    assert any("without a GEMM" in p for p in verify(_edit(plan, j, warp_policy="full_row"), g))
    assert any("swizzle needs a GEMM" in p for p in verify(_edit(plan, j, swizzle=True), g))
    epi = tuple(s.model_copy(update={"staged": True}) if isinstance(s, Store) else s for s in k.epilogue)
    assert any("is no 2-D fragment" in p for p in verify(_edit(plan, j, epilogue=epi), g))


def test_repeated_load_is_dropped_from_the_plan_interp_runs():
    """x . x (a matmul of a tensor with itself) loads X's tile into one shared buffer: the plan
    holds one load per stream block, so interp runs exactly what the emitter prints (the emitter
    used to skip the second load on its own)."""
    import torch

    from leantile import interp, reference
    from leantile.dag import build_graph_with_output
    from leantile.plan import Load
    from leantile.plan_passes import drop_repeated_loads
    def body(d):
        x = d.input("X", ["m", "k"], "f32")
        return d.matmul(x, x, "k", "k")  # sum_k x[m, k] x[m, k]: m is a batch axis of the product
    self_dot = build_graph_with_output("xx", {"m": 5, "k": 7}, body)
    plan = derive(self_dot, None, {"block_k": 3})
    [k] = plan.kernels
    assert [s.src for s in k.body if isinstance(s, Load)] == ["X"]
    x = reference.random_inputs(self_dot, seed=1)["X"].double()
    got = interp.run(plan, {"X": x}, dtype=torch.float64)["out"]
    assert torch.allclose(got, (x * x).sum(1))
    emit_module(plan)  # the emitter refuses a repeated load, so it was really dropped
    # the pass itself: a second load of the same tile with nothing in between goes
    doubled = _edit(plan, 0, body=(k.body[0], *k.body))
    assert drop_repeated_loads(doubled).kernels[0].body == k.body


def test_gemm_engine_and_fullrow_warps_are_plan_decisions():
    """Tensor cores or a SIMT loop is the plan's choice (Gemm.mma, plan_passes.gemm_engine), and
    a FullRow kernel whose warps cannot share the 16-row slices of its tile is refused as a tile
    choice (flash at block_m 64 with 256 threads failed TileLang's layout inference)."""
    import pytest

    from leantile import ir
    mm = derive(architectures.build("matmul", m=256, d=128, n=256))
    assert [s.mma for s in mm.kernels[0].body if isinstance(s, Gemm)] == [True]
    tiny = derive(architectures.build("matmul", m=8, d=4, n=8), None, {"block_k": 8})  # a k tile of 8 < 16
    assert [s.mma for s in tiny.kernels[0].body if isinstance(s, Gemm)] == [False]
    assert "T.gemm(" not in emit_module(tiny) and "T.gemm(" in emit_module(mm)
    att = architectures.build("attention", h=2, t_q=128, t_kv=128, d_h=64)
    with pytest.raises(ir.GraphError, match="warps: kernel flash_9: 256 threads .8 warps. cannot share its 64 x 128"):
        derive(att, "online_exp2", {"block_m": 64, "threads": 256})
    assert derive(att, "online_exp2", {"block_m": 64, "threads": 128}).kernels[0].threads == 128
    # a plain GEMM partitions its warps over rows and columns: 64 x 128 over 8 warps lowers
    ln = architectures.build("layernorm_linear_gelu", m=256, d=128, n=256)
    derive(ln, "stats_fused+colsum_streamed", {"block_m": 64})
    with pytest.raises(ir.GraphError, match="warps: kernel gemm_15: 256 threads .8 warps. cannot share its 16 x 32"):
        derive(ln, "stats_fused+colsum_streamed", {"block_m": 16, "block_n": 32, "block_k": 16})
    # the verifier catches a GEMM marked for tensor cores that is no MMA shape
    k = tiny.kernels[0]
    marked = tuple(s.model_copy(update={"mma": True}) if isinstance(s, Gemm) else s for s in k.body)
    assert any("marked for tensor cores" in p for p in verify(_edit(tiny, 0, body=marked),
                                                              architectures.build("matmul", m=8, d=4, n=8)))
