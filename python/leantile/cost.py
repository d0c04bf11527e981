"""The cost model: the GPU time of a plan at its tiles, estimated without a GPU, to rank
(candidate x tiles) where no tuned entry exists (`choose`, read by leantile.runtime) and to
judge the search's seeds.

Per kernel, from the plan's statements (what the emitter prints, so the model sees what runs):
  - CTAs: the product of the grid (tiles of tiled axes, every index of a batch axis);
    waves of CTAs on the SMs, as many per SM as shared memory and threads allow;
  - bytes: every load and store of every CTA (a tile the stream body loads, once per block of
    the stream, or of its slice when the stream is split). The repeated loads of neighbouring
    CTAs are served by L2: DRAM moves each global once (at least), L2 the total;
  - FLOPs: every tensor-core GEMM statement at its padded tile (a 128-row tile of an m = 1
    GEMM costs 128 rows), elementwise maps and reductions on the CUDA cores;
  - one CTA cannot stream faster than its pipeline lets it: `stages` tiles in flight per memory
    latency; a kernel's time is at least its CTA's time times its waves;
  - a launch costs LAUNCH_S (CUDA-graph replay, back to back).
The figures below are the H200's (anchors-h200.md); the model ranks, it does not predict to the
microsecond: `benchmarks/cost_model_check.py` measures its rank correlation with the search
database (per workload, Spearman) and the note of the shapes issue quotes it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .plan import Gemm, Kernel, Load, Map, Plan, Reduce, Store
from .plan_verify import DTYPE_BYTES, extent, shared_bytes

SMS = 132
DRAM_BPS = 4.2e12  # device copy, read + write counted
L2_BPS = 10e12  # what L2 serves to repeated loads (several times DRAM on Hopper)
MMA_FLOPS = 660e12  # dense fp16 tensor cores, as cuBLAS reaches them
SIMT_FLOPS = 60e12  # fp32 CUDA-core element operations
LATENCY_S = 1.2e-6  # a global load's round trip, what a pipeline stage hides
LAUNCH_S = 2.0e-6
SMEM_PER_SM = 228 * 1024
MAX_RANKED = 12  # candidates `choose` derives and ranks (derive lists the likeliest first)
THREADS_PER_SM = 2048
REGS_PER_SM = 65536
MAX_REGS = 200  # fp32 registers a thread keeps for fragments before it spills (255 in all)


@dataclass(frozen=True)
class KernelCost:
    name: str
    ctas: int
    waves: int
    dram_bytes: float
    l2_bytes: float
    mma_flops: float
    simt_flops: float
    seconds: float


def _elems(plan: Plan, k: Kernel, axes, tiles) -> int:
    return math.prod(extent(plan, k, a, tiles) for a in axes)


def _stream_steps(plan: Plan, k: Kernel, tiles) -> int:
    """Stream blocks one CTA runs (of its slice, for a split stream)."""
    if not k.stream:
        return 1
    blocks = math.ceil(plan.axes[k.stream.axis] / extent(plan, k, k.stream.axis, tiles))
    return math.ceil(blocks / plan.axes[k.stream.split]) if k.stream.split else blocks


def kernel_cost(plan: Plan, k: Kernel, tiles: dict | None = None) -> KernelCost:
    tiles = tiles if tiles is not None else dict(plan.tiles)
    ctas = math.prod(math.ceil(plan.axes[t.axis] / extent(plan, k, t.axis, tiles)) for t in k.grid)
    steps = _stream_steps(plan, k, tiles)
    local = {b.name: b for b in k.buffers if b.scope != "global"}
    globals_ = {b.name: b for b in plan.globals}
    per_cta = per_step = 0.0
    mma = simt = 0.0
    touched: set[str] = set()
    for part, stmts in (("prologue", k.prologue), ("body", k.body), ("epilogue", k.epilogue)):
        times = steps if part == "body" else 1
        for s in stmts:
            if isinstance(s, (Load, Store)):
                on_chip = local[s.dst if isinstance(s, Load) else s.src]
                g = globals_[s.src if isinstance(s, Load) else s.dst]
                nbytes = _elems(plan, k, on_chip.axes, tiles) * DTYPE_BYTES.get(g.dtype, 4)
                per_cta += nbytes * times
                per_step += nbytes if part == "body" else 0
                touched.add(g.name)
            elif isinstance(s, Gemm):
                acc = local[s.acc]
                flops = 2.0 * _elems(plan, k, acc.axes, tiles) * extent(plan, k, s.axis_a, tiles) * times
                if s.mma:
                    mma += flops
                else:
                    simt += flops
            elif isinstance(s, (Map, Reduce)):
                src = local[s.src] if isinstance(s, Reduce) else local[s.dst]
                simt += _elems(plan, k, src.axes, tiles) * times
    unique = sum(math.prod(plan.axes[a] for a in globals_[n].axes) * DTYPE_BYTES.get(globals_[n].dtype, 4)
                 for n in touched)
    total = per_cta * ctas
    dram = min(total, max(unique, total / 8))  # neighbours share what they load through L2
    threads = k.threads if not tiles.get("threads") or any(t.param == "fixed" for t in k.grid) else tiles["threads"]
    smem = shared_bytes(plan, k, tiles) or 1
    # registers: every fragment lives in the threads' registers (fp32 accumulators: 4 bytes an
    # element); past what a thread may hold, the kernel spills to local memory
    regs = sum(_elems(plan, k, b.axes, tiles) for b in local.values() if b.scope == "fragment") / max(threads, 32) + 40
    spill = max(1.0, regs / MAX_REGS) ** 2
    per_sm = max(1, min(SMEM_PER_SM // smem, THREADS_PER_SM // max(threads, 32), 32,
                        REGS_PER_SM // int(max(threads, 32) * min(regs, MAX_REGS))))
    slots = SMS * per_sm
    waves = math.ceil(ctas / slots)
    mma_total, simt_total = mma * ctas, simt * ctas
    ideal = max(dram / DRAM_BPS, total / L2_BPS, mma_total / MMA_FLOPS, simt_total / SIMT_FLOPS)
    # one CTA: its pipeline keeps `stages` stream tiles in flight per memory round trip, and it
    # has an SM's share of the tensor cores (fewer CTAs than SMs leave the rest idle)
    stages = k.stream.stages if k.stream else 1
    if k.stream and tiles.get("stages") and k.stream.param:
        stages = tiles["stages"]
    cta_bw = min(DRAM_BPS / SMS * 2, max(per_step, 1.0) * stages / LATENCY_S)
    cta_time = max(per_cta / cta_bw, mma / (MMA_FLOPS / SMS), simt / (SIMT_FLOPS / SMS)) * spill
    ideal *= spill
    seconds = max(ideal, cta_time * waves / per_sm if ctas >= slots else cta_time) + LAUNCH_S
    return KernelCost(k.name, ctas, waves, dram, total, mma_total, simt_total, seconds)


def plan_seconds(plan: Plan, tiles: dict | None = None) -> float:
    """The estimated GPU time of the whole plan, kernels back to back."""
    return sum(kernel_cost(plan, k, tiles).seconds for k in plan.kernels)


def choose(g, candidates=None) -> tuple[object, float]:
    """(plan, estimated seconds): the cheapest candidate derive offers for g at its default
    tiles for the shape, by the model. The unfused fallback competes only when nothing else
    derives (it is the reference, never the product's pick where a fused plan exists)."""
    from .derive import candidates as all_candidates
    from .derive import derive
    from .ir import GraphError

    cands = list(candidates or all_candidates(g))
    best = None
    for c in cands[:MAX_RANKED]:
        if c.name == "unfused" and len(cands) > 1:
            continue
        try:
            plan = derive(g, c.name)
        except GraphError:  # does not fit the target at the default tiles
            continue
        t = plan_seconds(plan)
        if best is None or t < best[1]:
            best = (plan, t)
    if best is None:
        plan = derive(g)
        best = (plan, plan_seconds(plan))
    return best
