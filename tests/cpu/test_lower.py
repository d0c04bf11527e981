"""TileLang kernels lower to CUDA and compile with nvcc for sm_90a, without a GPU.

Each case takes ~0.3-1.5 s to lower and ~2.5 s in nvcc on a 2-core machine.
"""

import pytest

tilelang = pytest.importorskip("tilelang", reason="tilelang is not installed (pip install tilelang)")

from leantile.lower import LoweringError, compile_cuda, hopper_features, lower_to_cuda, nvcc_path  # noqa: E402

import tilelang_samples as S  # noqa: E402  (tests/cpu is on sys.path under pytest's default import mode)

needs_nvcc = pytest.mark.skipif(nvcc_path() is None, reason="nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")

ELF_MAGIC = b"\x7fELF"


def _check_cubin(cubin: bytes) -> None:
    assert len(cubin) > 1000 and cubin[:4] == ELF_MAGIC


def _assert_hopper(src: str) -> None:
    f = hopper_features(src)
    assert f["tma"] and f["wgmma"], f
    assert "tl::tma_load" in src and "CUtensorMap" in src
    assert f["warp_specialized"] and f["mbarrier"], f  # T.Pipelined + TMA -> producer/consumer warpgroups
    assert not f["mma_sync"], f


@needs_nvcc
@pytest.mark.parametrize(
    "factory, kernel_markers",
    [
        (S.gemm, ["tl::wgmma_ss"]),
        # P (fp16 fragment) feeds the second GEMM from registers: wgmma_rs
        (S.flash_attention, ["tl::wgmma_ss", "tl::wgmma_rs", "exp2f"]),
        (S.dual_gemm_swiglu, ["tl::wgmma_ss"]),
    ],
    ids=["gemm", "flash_attention", "dual_gemm"],
)
def test_lower_and_compile_hopper(factory, kernel_markers):
    src = lower_to_cuda(factory(), arch="sm_90")
    _assert_hopper(src)
    for m in kernel_markers:
        assert m in src, m
    _check_cubin(compile_cuda(src, arch="sm_90a"))


@needs_nvcc
def test_partial_tiles_still_lower():
    # M=200 with block_M=128: TMA zero-fills out-of-bounds loads, the store is predicated.
    src = lower_to_cuda(S.gemm(M=200), arch="sm_90")
    _assert_hopper(src)
    assert "< 200" in src or "< 25" in src or "< 33" in src  # a bound check guards the C store
    _check_cubin(compile_cuda(src))


@needs_nvcc
def test_unaligned_rows_fall_back_to_cp_async():
    # K=100 fp16 -> 200-byte rows, not 16-byte aligned: no TMA descriptor is possible,
    # so TileLang uses predicated cp.async (still wgmma, no warp specialisation).
    src = lower_to_cuda(S.gemm(M=100, N=100, K=100), arch="sm_90")
    f = hopper_features(src)
    assert f["wgmma"] and f["cp_async"] and not f["tma"], f
    assert "cp_async_gs_conditional" in src
    _check_cubin(compile_cuda(src))


def test_sm80_path_uses_mma_sync():
    src = lower_to_cuda(S.gemm(), arch="sm_80")
    f = hopper_features(src)
    assert f["mma_sync"] and f["cp_async"] and not f["tma"] and not f["wgmma"], f


def test_pass_configs_reach_lowering():
    src = lower_to_cuda(S.gemm(), pass_configs={"tl.disable_warp_specialized": True})
    f = hopper_features(src)
    assert f["wgmma"] and not f["warp_specialized"], f


@needs_nvcc
def test_plain_sm90_rejects_warp_specialised_kernel():
    # setmaxnreg (tl::warpgroup_reg_alloc) needs sm_90a; nvcc errors on plain sm_90.
    src = lower_to_cuda(S.gemm(), arch="sm_90")
    with pytest.raises(LoweringError, match="sm_90a"):
        compile_cuda(src, arch="sm_90")


@needs_nvcc
def test_nvcc_error_is_reported():
    with pytest.raises(LoweringError, match="nvcc failed"):
        compile_cuda('extern "C" __global__ void k() { undefined_symbol(); }')


def test_lowering_error_is_wrapped():
    # Default (Square) warp policy in flash attention: S and P fragment layouts conflict.
    with pytest.raises(LoweringError, match="Layout infer conflict"):
        lower_to_cuda(S.flash_attention(full_row=False))


def test_shared_memory_estimate_matches_tilelang():
    """plan.verify.shared_bytes (stages copies of each pipelined tile; stages + 1 and the output's
    staging tile under FA3's schedule) against TileLang's own allocation, read from the lowered
    module: equal for a GEMM at two pipelines and for flash attention, plain and overlapped (the
    layernorm GEMM adds ~1 KiB of row-vector mirrors the plan does not model)."""
    from leantile import architectures, ir
    from leantile.derive import derive
    from leantile.emit import emit_module, load_module
    from leantile.plan.verify import shared_bytes
    cases = [("matmul", "direct", None), ("matmul", "direct", {"block_n": 256, "stages": 3}),
             ("attention", "online_exp2", {"block_n": 256, "stages": 1, "overlap": 0}),
             ("attention", "online_exp2", None),  # FA3's schedule: a ring of stages + 1 blocks
             ("causal_attention", "online_exp2", None)]
    for name, cand, tiles in cases:
        plan = derive(architectures.build(name), cand, tiles)
        mod = load_module(emit_module(plan), f"smem_{name}_{bool(tiles)}")
        [(kname, func)] = mod.build_kernel().items()
        info: dict = {}
        lower_to_cuda(func, arch="sm_90", info=info)
        assert shared_bytes(plan, plan.kernels[0]) == info["shared_bytes"], (name, tiles, kname)
    # so the verifier refuses what TileLang could not launch: FA3's ring of 3 blocks of 128
    # keys at 128-wide heads (256 KiB; on the H200 such tiles failed at launch, 2026-11-26)
    with pytest.raises(ir.GraphError, match="shared memory"):
        derive(architectures.build("attention"), "online_exp2", {"stages": 2, "overlap": 1})
    assert derive(architectures.build("attention", d_h=64), "online_exp2", {"stages": 2, "overlap": 1}).kernels[0].overlap


@pytest.mark.parametrize("dtype,cols", [("f16", 50257), ("f32", 1001)])
def test_unaligned_rows_of_a_row_kernel_move_as_vectors(dtype, cols):
    """Rows of 50257 halves (100514 bytes) or 1001 floats start off the 16-byte grid; T.copy
    would read and write them element by element. The softmax's normalize kernel (no stream)
    goes through emit.unaligned's windows instead: 16-byte vector loads of its input and vector
    stores of its output, and the shared-memory estimate counts the window."""
    import re
    from leantile.derive import candidates, derive
    from leantile.emit import emit_module, load_module
    from leantile.plan.verify import shared_bytes
    from leantile.sources import load_source
    from strategies import inputs_in
    def graph(n):
        g = load_source("examples/architectures/softmax_row.py:build", {"rows": 70, "cols": n})
        return inputs_in(g, dtype, only="f32") if dtype != "f32" else g
    g = graph(cols)
    cand = next(c.name for c in candidates(g) if c.name.endswith("_split"))
    # the same kernels over aligned rows first: the estimate must not answer from what it
    # remembered of them (its cache once keyed kernels by statements alone: no window counted)
    aligned = derive(graph(cols + 8 - cols % 8), cand)
    [shared_bytes(aligned, k) for k in aligned.kernels]
    plan = derive(g, cand)
    k = next(k for k in plan.kernels if not k.stream and any(s.op == "store" for s in k.statements())
             and len(plan.global_buffer(next(s.dst for s in k.statements() if s.op == "store")).axes) == 2)
    func = load_module(emit_module(plan), f"unaligned_{dtype}").build_kernel()[k.name]
    info: dict = {}
    src = lower_to_cuda(func, arch="sm_90", info=info)
    vec = re.findall(r"\*\((?:uint4|float4)\*\)\((\w+_flat) \+", src)
    assert len(set(vec)) == 2, vec  # the input read and the output written as 16-byte vectors
    assert shared_bytes(plan, k) == info["shared_bytes"], (shared_bytes(plan, k), info["shared_bytes"])
