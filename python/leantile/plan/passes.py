"""Named plan passes: the code-generation decisions a kernel's statements imply, recorded in
the plan so the emitter only spells them and the search reads them from the plan.

    run(plan) -> plan with every pass applied, in PASSES order

Each pass is a function Plan -> Plan that changes no value a kernel computes: it sets
code-generation fields (Kernel.warp_policy, Kernel.swizzle, Kernel.heavy_first, Kernel.overlap, Kernel.pingpong,
Kernel.swapped, Kernel.launch_next, Kernel.wait_previous, Kernel.flush_subnormals, Kernel.fast_math,
Store.staged, Reduce.deferred,
which interp ignores) or drops a statement whose effect is
already there (a repeated load), so that interp runs exactly the statements the emitter
prints. derive runs them before the plan verifier (engine._replay).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from .. import ir
from . import (FIXED, Fill, Gemm, Kernel, Load, Map, Plan, Reduce, Store, grid_folded, launches, on_chip_dims,
                   pooled_reduce, running_maxes, statement_effects)
from .last_arrival import last_arrival
from .overlap_parts import overlap_parts
from .verify import deferrable, mma_shaped, shared_bytes, smem_problem
from ..target import DEFAULT, Target
from ..tiles import schedule_of

PARTS = ("prologue", "body", "epilogue", "second_pass")


def _rewrite(k: Kernel, part_fn: Callable[[tuple], tuple]) -> dict:
    """{part: part_fn(statements)} for the parts part_fn changes (empty: none)."""
    parts = {p: part_fn(getattr(k, p)) for p in PARTS}
    return {p: v for p, v in parts.items() if v != getattr(k, p)}


def _gemms(k: Kernel) -> list[Gemm]:
    return [s for s in k.statements() if isinstance(s, Gemm)]


def _on_kernels(plan: Plan, decide: Callable[[Plan, Kernel], dict]) -> Plan:
    """Apply decide(plan, k) -> field updates (empty: none) to every kernel; kernels without
    updates stay the same objects, and a plan nothing changed in is returned as it is."""
    kernels, changed = list(plan.kernels), False
    for j, k in enumerate(kernels):
        update = decide(plan, k)
        if update:
            kernels[j] = k.model_copy(update=update)
            changed = True
    return plan.model_copy(update={"kernels": tuple(kernels)}) if changed else plan


def _on_gemm_kernels(plan: Plan, decide: Callable[[Plan, Kernel], dict]) -> Plan:
    """_on_kernels over the kernels with a GEMM (the others have no code-generation choice here)."""
    return _on_kernels(plan, lambda p, k: decide(p, k) if _gemms(k) else {})


STAGED_SUFFIX = "_staged"


def stage_loads(plan: Plan, target: Target = DEFAULT) -> Plan:
    """A streamed row kernel's (no GEMM) body loads of register tiles through shared memory: the
    load of a block into a shared tile, then a copy into the registers. TileLang pipelines a
    copy into shared memory (TMA or cp.async, `stages` blocks ahead, a producer warp) but not a
    load into registers, which each block issues and then waits for: cross-entropy over 8192 x 32000
    f16 (one pass, 8 rows a CTA, 127 registers, 2 CTAs an SM) streamed 1.6 TB/s on an H200 (0.3232
    ms, fusion suite 2026-11-30). The tile parameter `stage_loads` (0 or 1) asks; off unless asked:
    timed on an H200 it lost on every streamed row (cross-entropy 0.323 -> 0.469 ms, log-softmax
    0.110 -> 0.197 at 4 stages, BatchNorm statistics 0.135 -> 0.178:
    benchmarks/gemm_tiles/results/gemm-tiles-probe-h200-2026-11-30-stage-loads.log; the cost of
    those rows is their per-block cross-warp reductions, not the loads). Only where the global's rows are whole 16-byte granules (no window
    path), the stream is more than one block, and the staged tiles fit the target's shared memory."""
    if schedule_of(plan.tiles or {}).stage_loads != 1:
        return plan
    from . import Buffer, row_bytes
    from .shared import one_block_stream

    def decide(plan, k):
        if not k.stream or _gemms(k) or k.overlap or k.pingpong or one_block_stream(plan, k):
            return {}
        local = {b.name: b for b in k.buffers}
        bufs, parts = list(k.buffers), {}
        for part in ("body", "second_pass"):  # (a two-pass row reads its blocks again: plan.Kernel.second_pass)
            out = []
            for st in getattr(k, part):
                g = plan.global_buffer(st.src) if isinstance(st, Load) else None
                b = local.get(st.dst) if isinstance(st, Load) else None
                if g is None or b.scope != "fragment" or k.stream.axis not in b.axes or row_bytes(plan, g) % 16:
                    out.append(st)
                    continue
                sh = Buffer(name=f"{b.name}{'2' if part == 'second_pass' else ''}{STAGED_SUFFIX}", axes=b.axes,
                            scope="shared", dtype=g.dtype, node=b.node)
                bufs.append(sh)
                out += [st.model_copy(update={"dst": sh.name}), Map(dst=b.name, fn="copy", args=(sh.name,))]
            parts[part] = tuple(out)
        if len(bufs) == len(k.buffers):
            return {}
        update = {"buffers": tuple(bufs), **parts}
        fits = shared_bytes(plan, k.model_copy(update=update)) + REDUCE_SCRATCH <= target.smem_per_cta
        return update if fits else {}
    return _on_kernels(plan, decide)


# shared memory TileLang adds for reductions across warps (T.reduce_*'s scratch, a thread's value
# each), which plan.verify.shared_bytes leaves out: cross-entropy's streamed row kernel (three
# reductions, 256 threads) allocates 4 KiB of it. stage_loads keeps this much free beside its rings.
REDUCE_SCRATCH = 8 * 1024


def gemm_engine(plan: Plan) -> Plan:
    """Tensor cores (T.gemm) for every contraction of an MMA shape; a SIMT loop for the rest (a
    tiny head dimension, a size-1 axis, f64)."""
    def decide(plan, k):
        return _rewrite(k, lambda stmts: tuple(s.model_copy(update={"mma": True}) if isinstance(s, Gemm)
                                               and not s.mma and mma_shaped(plan, k, s) else s for s in stmts))
    return _on_gemm_kernels(plan, decide)


def warp_policy(plan: Plan) -> Plan:
    """FullRow where a GEMM accumulator feeds a row reduction (online softmax, row statistics)
    or a fragment is the A operand of a second GEMM (P V in attention): those need whole rows
    of the tile in one warp."""
    def decide(plan, k):
        # a pooled reduce reads a shared copy or its own pairs (fuse_pool_epilogue): no whole rows per warp for it
        rows = any(isinstance(s, Reduce) and not pooled_reduce(plan, k, s) for s in k.statements())
        frag_a = any(b.scope == "fragment" for s in _gemms(k) for b in k.buffers if b.name == s.a)
        return {"warp_policy": "full_row"} if rows or frag_a else {}
    return _on_gemm_kernels(plan, decide)


def store_staging(plan: Plan, target: Target = DEFAULT) -> Plan:
    """Stage the 2-D fragment stores of GEMM kernels through shared memory: one coalesced
    (TMA) store instead of scattered per-thread writes (measured 0.056 -> 0.050 ms on a
    1024x4096x4096 GEMM on the H200), where the staged tile still fits the target's shared
    memory (a float32 128 x 256 tile beside two stages of its operands did not: a GroupNorm in a
    GEMM's epilogue that also stores the product, fuse_row_epilogue). An accumulating store (the
    dK/dV kernel adding dQ's block: flash_backward's atomic dQ) becomes one TMA reduce-add of the
    staged tile (FlashAttention-3's dQ, cp.reduce.async.bulk) where TMA can take its rows: whole
    16-byte granules of f32, f16 or bf16 (elsewhere it stays the threads' own atomics)."""
    from . import row_bytes

    def tma_add(s) -> bool:
        g = plan.global_buffer(s.dst)
        return g.dtype in ("acc", "f32", "f16", "bf16") and row_bytes(plan, g) % 16 == 0

    def decide(plan, k):
        frag2 = {b.name for b in k.buffers if b.scope == "fragment" and len(on_chip_dims(k, b.axes)) == 2}
        staged = _rewrite(k, lambda stmts: tuple(s.model_copy(update={"staged": True})
                                                 if isinstance(s, Store) and s.src in frag2 and not s.staged
                                                 and (not s.accumulate or tma_add(s))
                                                 else s for s in stmts))
        fits = smem_problem(plan, k.model_copy(update=staged), target) is None if staged else True
        return staged if fits or smem_problem(plan, k, target) is not None else {}
    return _on_gemm_kernels(plan, decide)


def swizzle(plan: Plan) -> Plan:
    """Rasterise GEMM grids with two tiled axes in panels, so neighbouring CTAs share operand
    tiles in L2; the panel size is the tile parameter `swizzle` (0 turns it off)."""
    if "swizzle" not in (plan.tiles or {}):
        return plan
    # a FIXED block is a constant tile, a whole axis (a packed group's heads): no grid dimension;
    # a grid folded into blockIdx.x (plan.grid_folded: y or z past CUDA's 65535) has no 2-D raster
    return _on_gemm_kernels(plan, lambda plan, k: {"swizzle": True}
                            if sum(t.block > 1 and t.param != FIXED for t in k.grid) == 2
                            and not grid_folded(plan, k) else {})


def _without_repeated_loads(stmts: tuple) -> tuple:
    holds: dict[str, str] = {}  # on-chip buffer -> the global whose tile it holds unchanged
    out = []
    for s in stmts:
        if isinstance(s, Load) and holds.get(s.dst) == s.src:
            continue
        for written in statement_effects(s)[1]:
            holds.pop(written, None)
        if isinstance(s, Load):
            holds[s.dst] = s.src
        out.append(s)
    return tuple(out)


def drop_repeated_loads(plan: Plan) -> Plan:
    """A load of the tile a buffer already holds unchanged (x . x loads X twice into one
    shared buffer, in the same part of the kernel) is dropped: the kernel loads it once."""
    def decide(plan, k):
        loads = [s.dst for s in k.statements() if isinstance(s, Load)]
        if len(set(loads)) == len(loads):
            return {}  # the common case (10^5 unfused kernels): nothing to look at
        return _rewrite(k, _without_repeated_loads)
    return _on_kernels(plan, decide)


def heavy_first(plan: Plan) -> Plan:
    """Kernel.heavy_first: a stream that skips masked key blocks under a bound key <= row + c
    (causal) runs more blocks the later its query tile; those tiles launch first. Measured on
    an H200: benchmarks/mask_interior/mask_interior.py."""
    def decide(plan, k):
        rows = {b.row for b in (k.stream.skip if k.stream else ()) if b.side == "hi" and b.coef == 1}
        tiled = [t.axis for t in k.grid if t.axis in rows and t.block > 1 and t.param != FIXED]
        return {"heavy_first": tiled[0]} if tiled and k.heavy_first != tiled[0] else {}
    return _on_kernels(plan, decide)


# operand dtypes a swapped GEMM takes: wgmma reads 16-bit operands from shared memory in either
# major order; tf32 (an f32 graph) only K-major, which the swap would turn the weight from
SWAP_DTYPES = ir.HALF_DTYPES


def swap_operands(plan: Plan) -> Plan:
    """Kernel.swapped where the tile parameter `swap_operands` is 1 and a GEMM kernel can keep its
    accumulator transposed: every contraction a tensor-core one of shared operands into the same
    (row, column) fragment axes, and every other statement on a buffer of those axes a fill, a
    map or a store (no load, mask or reduction, which would need the logical layout; no
    attention, whose rows a softmax reduces), the operands 16-bit (SWAP_DTYPES). The emitter
    then spells acc^T = b^T a^T and stores through a transposing shared tile; the values are the
    same (interp ignores the field)."""
    if not schedule_of(plan.tiles or {}).swap_operands:
        return plan

    def decide(plan, k):
        if k.overlap or k.packed or k.warp_policy != "auto" or any(isinstance(s, Reduce) for s in k.statements()):
            return {}
        local = {b.name: b for b in k.buffers}
        pairs = set()
        for s in _gemms(k):
            a, b, c = local[s.a], local[s.b], local[s.acc]
            if not s.mma or a.scope != "shared" or b.scope != "shared" or c.scope != "fragment" or len(c.axes) != 2:
                return {}
            if not {a.dtype, b.dtype} <= SWAP_DTYPES:
                return {}
            if (c.axes[0] not in a.axes or s.axis_a not in a.axes or c.axes[1] not in b.axes
                    or s.axis_b not in b.axes or len(a.axes) != 2 or len(b.axes) != 2):
                return {}
            pairs.add(tuple(c.axes))
        if len(pairs) != 1:
            return {}
        pair = pairs.pop()
        touched = {n for n, b in local.items() if tuple(b.axes) == pair}
        for s in k.statements():
            reads, writes = statement_effects(s)
            if set(reads + writes) & touched and not isinstance(s, (Gemm, Fill, Map, Store)):
                return {}
        return {"swapped": pair}
    return _on_gemm_kernels(plan, decide)


def defer_reductions(plan: Plan) -> Plan:
    """Reduce.deferred for a stream body's accumulation (accumulate over the streamed axis into
    a buffer no other body statement touches: its total is read after the stream) of a
    two-axis tile, in a stream of more than one block: the body adds each block into a tile of
    partials, one reduction follows the stream. A T.reduce_sum in the body is a cross-thread
    reduction (shuffles, and a barrier where a row spans warps) every block, beside the
    pipelined GEMM of a norm's statistics fused into it (benchmarks/deferred_reduce/deferred_reduce_probe.py)."""
    def decide(plan, k):
        body = tuple(s.model_copy(update={"deferred": True}) if isinstance(s, Reduce) and not s.deferred
                     and deferrable(plan, k, s) else s for s in k.body)
        return {"body": body} if body != k.body else {}
    return _on_kernels(plan, decide)


def _split_attention(k: Kernel) -> bool:
    """A split-KV attention kernel: a GEMM stream split over CTAs with an online-softmax max."""
    return bool(k.stream and k.stream.split and running_maxes(k) and _gemms(k))


def dependent_launch(plan: Plan) -> Plan:
    """Kernel.launch_next on every kernel but the last, Kernel.wait_previous on every kernel but
    the first: each kernel's launch and prologue overlap the tail of the one before. The tile
    parameter `dependent_launch` (0 or 1) decides where given; by default it is on, but for a split-KV
    attention and its merge. Measured on an H100 (benchmarks/pdl/pdl_probe.py, medians of 5 rounds,
    benchmarks/pdl/results/pdl-probe-h100-2026-11-26.json): norm -> GEMM 0.998x..1.035x, split-K after a norm
    1.061x, a split softmax row 1.069x; split-KV decode 0.98x, 1.10x and 0.88x (GQA, 8 KV heads
    of 4 queries). The wait is the kernel's first statement, so no kernel reads or writes a
    buffer before the kernels before it have finished."""
    choice = schedule_of(plan.tiles or {}).dependent_launch
    order = [k.name for k in launches(plan)]  # a tail (Kernel.tail_of) runs inside the launch before it
    if len(order) < 2 or choice == 0 or (choice is None and any(map(_split_attention, plan.kernels))):
        return plan
    at = {n: j for j, n in enumerate(order)}
    kernels = tuple(k.model_copy(update={"launch_next": at[k.name] < len(order) - 1, "wait_previous": at[k.name] > 0})
                    if k.name in at else k for k in plan.kernels)
    return plan.model_copy(update={"kernels": kernels})


OVERLAP_THREADS, OVERLAP_BLOCK_M = 256, 128  # two consumer warpgroups of 64 rows each


def overlap(plan: Plan) -> Plan:
    """Kernel.overlap where the tile parameter `overlap` is 1 and the kernel has the FA3 cut
    (overlap_parts) at 128 query rows on 256 consumer threads; elsewhere the plain pipelined
    loop (the parameter asks, the shape decides). Measured on an H200: benchmarks/fa3_overlap/fa3_probe.py."""
    if not schedule_of(plan.tiles or {}).overlap:
        return plan
    def decide(plan, k):
        rows = [t for t in k.grid if t.param == "block_m"]
        return {"overlap": True} if (k.threads == OVERLAP_THREADS and len(rows) == 1
                                     and rows[0].block == OVERLAP_BLOCK_M and k.warp_policy == "full_row"
                                     and overlap_parts(k) is not None) else {}
    return _on_kernels(plan, decide)


PINGPONG_BLOCK_M, PINGPONG_THREADS = 128, 256  # two consumer warpgroups, a 128-row tile each
PINGPONG_MAX_TILE = 128 * 128  # a consumer's accumulator: 128 float32 registers per thread
PINGPONG_DTYPES = ir.HALF_DTYPES


class PingPongParts(NamedTuple):
    load_a: Load
    load_b: Load
    gemm: Gemm
    rows: str  # the accumulator's row axis (A's rows) and column axis: the tiled grid axes
    cols: str


def pingpong_parts(plan: Plan, k: Kernel) -> PingPongParts | None:
    """The cut emit.pingpong needs, or None: a stream whose body is the two operand loads and
    one tensor-core GEMM of 16-bit operands into a fragment tiled by the grid's two axes, no
    batch axis (block_m = 128 rows on 256 threads, a tile of at most 128 x 128), a prologue of fills, an
    epilogue without GEMMs, reductions or pivots (elementwise: each consumer finishes its tile
    alone), no split or skipped blocks, and every global it touches in rows of whole 16-byte
    granules (the operands by TMA; no unaligned window in the epilogue)."""
    from . import row_bytes
    st = k.stream
    if (st is None or st.split or st.skip or k.overlap or k.swapped or k.packed or k.heavy_first
            or k.warp_policy != "auto" or k.threads != PINGPONG_THREADS or len(k.body) != 3):
        return None
    load_a, load_b, gemm = k.body
    if not (isinstance(load_a, Load) and isinstance(load_b, Load) and isinstance(gemm, Gemm) and gemm.mma
            and {gemm.a, gemm.b} == {load_a.dst, load_b.dst} and gemm.a != gemm.b):
        return None
    if gemm.a != load_a.dst:
        load_a, load_b = load_b, load_a
    local = {b.name: b for b in k.buffers if b.scope != "global"}
    acc = local.get(gemm.acc)
    if (acc is None or acc.scope != "fragment" or len(acc.axes) != 2
            or any(local[n].scope != "shared" or local[n].dtype not in PINGPONG_DTYPES for n in (gemm.a, gemm.b))):
        return None
    tiled = {t.axis: t for t in k.grid if t.block > 1}
    rows, cols = acc.axes
    # the grid is the two tiled axes only: a batched GEMM's walk over batch indices has run on
    # no GPU yet, so it keeps the plain loop
    if (len(k.grid) != 2 or set(tiled) != {rows, cols} or tiled[rows].block != PINGPONG_BLOCK_M or tiled[rows].divisor != 1
            or tiled[rows].block * tiled[cols].block > PINGPONG_MAX_TILE):
        return None
    if not all(isinstance(s, Fill) for s in k.prologue):
        return None
    if any(isinstance(s, (Gemm, Reduce)) or s.op == "pivot" for s in k.epilogue):
        return None
    touched = {s.src for s in k.statements() if isinstance(s, Load)} | \
              {s.dst for s in k.statements() if isinstance(s, Store)}
    if any(row_bytes(plan, plan.global_buffer(n)) % 16 for n in touched):
        return None
    return PingPongParts(load_a, load_b, gemm, rows, cols)


def pingpong(plan: Plan, target: Target = DEFAULT) -> Plan:
    """Kernel.pingpong where the tile parameter `pingpong` is 1, the kernel has the cut
    (pingpong_parts) and its shared memory fits; elsewhere the plain pipelined loop (the
    parameter asks, the kernel decides). Measured on an H200: benchmarks/pingpong/pingpong_gemm_probe.py,
    benchmarks/pingpong/pingpong_check.py."""
    if not schedule_of(plan.tiles or {}).pingpong:
        return plan
    from .verify import smem_problem
    def decide(plan, k):
        if pingpong_parts(plan, k) is None:
            return {}
        # each consumer stages its own epilogue tiles beside the ring (plan.verify.shared_bytes):
        # a kernel with several GEMM outputs may not fit where the plain loop, reusing the
        # pipelined buffers for them, does; it stays plain
        fits = smem_problem(plan, k.model_copy(update={"pingpong": True}), target) is None
        return {"pingpong": True} if fits else {}
    return _on_kernels(plan, decide)


def _has_exp2(k: Kernel) -> bool:
    return any(isinstance(s, Map) and s.fn == "exp2" for s in k.statements())


def flush_subnormals(plan: Plan) -> Plan:
    """Kernel.flush_subnormals (nvcc -ftz=true) on every kernel with an exp2; the tile parameter
    `flush_subnormals` (0 or 1) decides where given. Measured on an H200 (benchmarks/ftz/ftz_probe.py, best of 4
    interleaved rounds, benchmarks/ftz/results/ftz-probe-attention-h200-2026-11-26.json): the overlapped
    attention kernels 1.053x..1.058x (published, scaled, llama3-8b t2048, gqa), causal 1.024x,
    decode 1.028x, rows 1.00x; the plain loop at 256 keys 0.97x (ptxas spills 48 bytes where it
    spilled 24: shape_tiles.FLASH_WIDE_TILES asks flush_subnormals=0 for it). exp2 is the only function whose
    code the flag shortens here: no other kernel gets it."""
    if schedule_of(plan.tiles or {}).flush_subnormals == 0:
        return plan
    return _on_kernels(plan, lambda p, k: {"flush_subnormals": True} if _has_exp2(k) and not k.flush_subnormals else {})


# the ops whose precise CUDA code --use_fast_math replaces by a few MUFU instructions (expf, logf,
# tanhf; sigmoid, silu and gelu_tanh through them); erf has no fast form and is left out
FAST_MATH_OPS = frozenset({"exp", "log", "tanh", "sigmoid", "silu", "gelu_tanh"})
FAST_MATH_STORES = frozenset({"f16", "bf16"})


def fast_math(plan: Plan) -> Plan:
    """Kernel.fast_math (nvcc --use_fast_math) on every kernel that maps a transcendental
    (FAST_MATH_OPS), reduces nothing and stores only 16-bit floats; the tile parameter `fast_math`
    (0 or 1) decides where given. Why: a GEMM epilogue of Mish(Mish(x W)) (expf, logf, tanhf twice
    per element, fully unrolled over a 128 x 256 accumulator) compiled to a 216 KB cubin against
    22 KB for a GEMM with a mask epilogue; with --use_fast_math 44 KB (nvcc 13, sm_90a), and the
    kernel ran 0.5078 -> 0.2356 ms on an H200 (benchmarks/fast_math/; whether the instruction cache
    or the issue rate bound the precise code was not profiled). What it costs: __expf,
    __logf and tanh.approx err by at most 2^-11 relative (tanh.approx; __logf 2^-21.4 absolute near
    1), under half an ulp of the 16-bit value the kernel stores; float32 subnormals flush to 0 (an
    exp below e^-87 is 0, as flush_subnormals does); division and square root stay correctly
    rounded (emit.common.FAST_MATH_FLAGS). Kernels that reduce (a log of a sum, a norm's
    rsqrt) or store float32 keep the precise functions."""
    if schedule_of(plan.tiles or {}).fast_math == 0:
        return plan

    def decide(p: Plan, k: Kernel) -> dict:
        body = k.statements()
        if not any(isinstance(s, Map) and s.fn in FAST_MATH_OPS for s in body):
            return {}
        if any(isinstance(s, Reduce) for s in body):
            return {}
        stores = [p.global_buffer(s.dst).dtype for s in body if isinstance(s, Store)]
        return {"fast_math": True} if stores and all(d in FAST_MATH_STORES for d in stores) else {}
    return _on_kernels(plan, decide)


PASSES: tuple[Callable[[Plan], Plan], ...] = (drop_repeated_loads, stage_loads, gemm_engine, warp_policy, store_staging, swizzle,
                                              swap_operands, heavy_first, overlap, pingpong, defer_reductions,
                                              last_arrival, dependent_launch, flush_subnormals, fast_math)


# the passes that decide by the target's limits: called with it
ON_TARGET = frozenset({pingpong, store_staging, stage_loads})


def run(plan: Plan, target: Target = DEFAULT) -> Plan:
    for p in PASSES:
        plan = p(plan, target) if p in ON_TARGET else p(plan)
    return plan
