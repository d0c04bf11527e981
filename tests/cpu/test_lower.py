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
