"""The GPU a plan is made for, described once (floor 1: imports nothing of leantile).

Every hardware number the compiler uses is a field of a `Target`: derive's wave rules (SMs),
the verifier's shared-memory budget, the cost model's bandwidths and occupancy limits, the
architecture TileLang lowers for and nvcc compiles for. `DEFAULT` is the machine the shipped
plans and tuned entries were made on (an H200 SXM: its figures are the maintainers' measurements,
2026-11); `current()` describes the GPU this process sees, for callers that
plan for it. A number measured elsewhere says so where it is set, with its evidence.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Target:
    name: str
    arch: str  # what TileLang lowers for (sm_90: Hopper)
    arch_features: str  # what nvcc compiles for: sm_90a, whose wgmma and setmaxnreg the warp-specialised kernels use
    sms: int
    smem_per_cta: int  # bytes of shared memory one CTA may use (the opt-in maximum)
    smem_per_sm: int  # bytes per SM, shared by the CTAs resident on it
    threads_per_sm: int
    regs_per_sm: int  # 32-bit registers
    dram_bps: float  # device copy, read + write counted
    l2_bps: float  # what L2 serves to the SMs in all
    mma_flops: float  # dense fp16 tensor cores, as cuBLAS reaches them (the cost model's rate)
    peak_flops: float  # above every GEMM time measured: the search's roofline floor stays below them all
    simt_flops: float  # fp32 CUDA-core element operations
    latency_s: float  # a global load's round trip: what a pipeline stage hides
    launch_s: float  # one kernel launch, CUDA-graph replay, back to back


# H200 SXM: copy 4.2 TB/s and cuBLAS fp16 669 TFLOP/s (the maintainers' measurements); L2 5.5 TB/s from
# 256 x 524288 x 256 split over 256 CTAs (1.07 GB through L2 in 0.206 ms,
# benchmarks/split_k_waves/results/issue16-k2-19-probe-2026-11-25.json); 660 TFLOP/s what the cost model ranks
# with; 790 the roofline peak, above the 691 TFLOP/s seen on 1024 x 4096 x 4096.
H200 = Target(name="H200", arch="sm_90", arch_features="sm_90a", sms=132, smem_per_cta=227 * 1024,
              smem_per_sm=228 * 1024, threads_per_sm=2048, regs_per_sm=65536, dram_bps=4.2e12, l2_bps=5.5e12,
              mma_flops=660e12, peak_flops=790e12, simt_flops=60e12, latency_s=1.2e-6, launch_s=2.0e-6)
# H100 SXM: the same SMs and memory per SM; HBM3 at 3.35 TB/s (the data sheet, not measured here:
# the cost model ranks with it, it predicts no time)
H100 = replace(H200, name="H100", dram_bps=3.35e12)
DEFAULT = H200
KNOWN = {t.name: t for t in (H100, H200)}


def current() -> Target:
    """The GPU this process sees (its SM count as the driver reports it), else DEFAULT: a
    process without CUDA plans for the machine the shipped plans were made on."""
    try:
        import torch
        if not torch.cuda.is_available():
            return DEFAULT
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
    except Exception:  # no driver, a broken install: plan for the default
        return DEFAULT
    base = next((t for name, t in KNOWN.items() if name in props.name), DEFAULT)
    return replace(base, sms=props.multi_processor_count)
