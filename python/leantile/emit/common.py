"""What the TileLang emitter's parts share: its error, dtype spellings, tunable names, the
identifiers generated code reserves, and small spelling helpers (leantile.emit.tilelang
writes modules, leantile.emit.kernel writes one kernel's prim_func)."""
from __future__ import annotations

import keyword
import math
import re

from .. import ir
from ..ir import ops
from ..plan import FIXED, Buffer, Gemm, Kernel, Load, Map, Pivot, Plan, Reduce, Store, on_chip_dims, row_bytes
from ..plan.verify import extent

class EmitError(ValueError):
    """The plan uses something the TileLang emitter cannot express."""


TL_DTYPES = dict(ir.DTYPE_NAMES)  # TileLang names a dtype as torch does
TUNABLE = ("block_m", "block_n", "block_k", "block_r", "stages", "threads", "swizzle", "overlap", "pingpong", "swap_operands",
           "dependent_launch", "flush_subnormals", "fast_math", "last_arrival", "stage_loads")
# names the generated code uses itself; buffer names that collide are renamed
RESERVED = {"T", "tilelang", "bx", "by", "bz", "k", "k2", "kk", "ks", "i", "j", "l", "i0", "i1", "i2", "i3",
            "main", "dtype", "accum_dtype", "threads", "stages", "block_m", "block_n",
            "block_k", "block_r", "AXES", "GLOBALS", "KERNELS", "OUTPUTS", "TILE_PARAMS", "DTYPE",
            "ACCUM_DTYPE", "GRAPH", "CANDIDATE", "math"}
LOOP_VARS = ("i", "j", "l", "i3", "i4", "i5")
GRID_VARS = ("bx", "by", "bz")

# TileLang spellings of every map function, from the op registry (leantile.ir.ops)
SPELLING = ops.TILELANG


def _ident(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit():
        s = "_" + s
    if keyword.iskeyword(s):
        s += "_"
    return s


def _atomic(expr: str) -> bool:
    """A buffer element, a plain number or one call of those: needs no parentheses."""
    simple = r"[\w\[\], .']+"
    return bool(re.fullmatch(simple, expr) or re.fullmatch(rf"T\.\w+\({simple}\)", expr))


def _size(axis: str) -> str:
    return f"size_{_ident(axis)}"


def _graph_dtype(plan: Plan) -> str:
    """The graph's input dtype (fp16 for the built-ins): DTYPE in the module, for the reader;
    each global, outputs included, carries its own dtype in GLOBALS."""
    written = {s.dst for k in plan.kernels for s in k.statements() if isinstance(s, Store)}
    ins = [b.dtype for b in plan.globals if b.name not in written and b.dtype != "acc"]
    return TL_DTYPES.get(ins[0], "float16") if ins else "float16"


def _global_dtype(plan: Plan, b: Buffer) -> str:
    """Python expression for a global buffer's dtype in the generated module."""
    if b.dtype == "acc":  # a split's partial sums, a row statistic: float32
        return "ACCUM_DTYPE"
    return repr(TL_DTYPES[b.dtype])


def _global_kinds(plan: Plan) -> dict[str, str]:
    """Every global buffer's kind (output, intermediate, input), in one pass over the plan
    (per buffer, it was quadratic in the kernel count: 8 s on a 1000-kernel chain)."""
    written = {s.dst for k in plan.kernels for s in k.statements() if isinstance(s, Store)}
    outs = set(plan.outputs.values())
    return {b.name: "output" if b.name in outs else "intermediate" if b.name in written else "input"
            for b in plan.globals}


def tile_param_of(plan: Plan, k: Kernel) -> dict[str, str]:
    """Which tile parameter each tiled / streamed axis of kernel k was built with.

    The plan records block sizes, not their names; this recovers them the way
    derive.kernels assigns them: the streamed axis uses block_k (block_n for a flash
    kernel, whose stream is the key axis), the tiled grid axes use block_m then block_n
    in grid order (block_n alone for a single tiled axis whose size matches only block_n).
    A block that matches none of the parameters becomes a constant.
    """
    recorded = {g.axis: g.param for g in k.grid if g.param}
    if k.stream and k.stream.param:
        recorded[k.stream.axis] = k.stream.param
    if recorded:  # plans record their parameters; the guess below serves older plan JSON
        return {a: p for a, p in recorded.items() if p != FIXED}  # FIXED: a constant block
    t = plan.tiles or {}
    out: dict[str, str] = {}
    if k.stream:
        order = ("block_k", "block_n", "block_m")
        if k.stream.block != t.get("block_k") or any(isinstance(s, Gemm) and s.clear for s in k.body):
            order = ("block_n", "block_k", "block_m")
        for name in order:
            if t.get(name) == k.stream.block:
                out[k.stream.axis] = name
                break
    tiled = [g for g in k.grid if g.block > 1]
    if len(tiled) >= 2:
        for g, name in zip(tiled[-2:], ("block_m", "block_n")):
            if t.get(name) == g.block:
                out[g.axis] = name
    for g in tiled:
        if g.axis in out:
            continue
        for name in ("block_m", "block_n", "block_k"):
            if t.get(name) == g.block:
                out[g.axis] = name
                break
    return out


def pass_configs(plan: Plan) -> dict[str, dict[str, bool]]:
    """{kernel name: TileLang pass options}: async copies (cp.async) off in a kernel that copies a
    global tile into shared memory from rows whose length in bytes is no multiple of 4 (an odd
    number of 16-bit elements). cp.async moves 4, 8 or 16 bytes; TileLang 0.1.15 should fall back
    to plain loads for such a copy but at times emits a 2-byte cp.async and then fails its own
    check (IsValidCPAsyncTransferBytes: a GEMM of one row over an odd contraction, whose other
    operand's rows are no multiple of 16 bytes either). Those copies load element by element in
    any case; the kernel's aligned copies still go through TMA. Also warp specialisation off where
    a tile so loaded is read twice in a stream (`shared_reread_without_tma`). The emitted module
    compiles with these options, and every lowering of its kernels (`leantile kernels`, the search)
    passes them."""
    out = {}
    for k in plan.kernels:
        shared = {b.name for b in k.buffers if b.scope == "shared"}
        for s in k.statements():
            if isinstance(s, Load) and s.dst in shared:
                g = plan.global_buffer(s.src)
                if g.axes and row_bytes(plan, g) % 4:
                    out[k.name] = {"tirx.use_async_copy": False}
                    break
        if shared_reread_without_tma(plan, k) or producer_starves_registers(plan, k):
            out[k.name] = {**out.get(k.name, {}), "tl.disable_warp_specialized": True}
    return out


# accumulator elements per consumer thread past which a doubled launch (see below) cannot hold
# the GEMM: 65536 registers / (2 x threads) is 128 at 256 threads, and a 128 x 256 float32
# accumulator is 128 of them in one wgmma
WS_ACC_PER_THREAD = 64


def producer_starves_registers(plan: Plan, k: Kernel) -> bool:
    """Whether TileLang 0.1.15's warp specialisation would launch k with too few registers: where
    a stream tile is loaded without TMA (rows no multiple of 16 bytes) its producer takes as many
    threads as the consumers (__launch_bounds__(2 x threads)), halving each thread's registers,
    and a GEMM whose accumulator is WS_ACC_PER_THREAD or more per thread then fails in ptxas
    ("Insufficient registers (128)": gpu-fuzz 2026-11-28, a bf16 norm into a 7-column GEMM at
    128 x 256 tiles). Lowered without it, the kernel keeps 255 registers a thread."""
    if k.stream is None or k.overlap or k.pingpong or not _loaded_without_tma(plan, k):
        return False
    bufs = {b.name: b for b in k.buffers}
    return any(math.prod(extent(plan, k, a) for a in bufs[s.acc].axes) >= WS_ACC_PER_THREAD * k.threads
               for s in k.statements() if isinstance(s, Gemm))


def _reads(s) -> tuple[str, ...]:
    """The on-chip buffers a plan statement reads."""
    if isinstance(s, Gemm):
        return (s.a, s.b)
    if isinstance(s, Map):
        return s.args
    if isinstance(s, (Reduce, Pivot, Store)):
        return (s.src,)
    return ()


def shared_reread_without_tma(plan: Plan, k: Kernel) -> bool:
    """Whether k's stream fills a shared tile without TMA (its global rows are no multiple of 16
    bytes: f32 rows of a length no multiple of 4, 16-bit rows no multiple of 8) and more than one
    statement of the stream's body reads that tile. TileLang 0.1.15's automatic warp specialisation
    then frees the tile's stage for the producer's plain stores after the FIRST statement that reads
    it (the TMA case waits for the last): in a dual GEMM, `X W` done, the producer overwrites X's
    stage while `X U` (and a fused norm's sum of squares) still reads it. Found at d = 65537 f32 and
    d = 4223 f16 on the H100 (rel err 0.5-1.3 on the second GEMM; the first one right). Such a kernel
    is lowered without warp specialisation (`tl.disable_warp_specialized`: TileLang's cp.async
    software pipeline, which waits for a stage's every reader); the hand-written producers
    (overlap, ping-pong) are not TileLang's and keep theirs."""
    if k.stream is None or k.overlap or k.pingpong:
        return False
    return any(sum(b in _reads(s) for s in k.body) > 1 for b in _loaded_without_tma(plan, k))


def merged_axes(plan: Plan, k: Kernel, g: Buffer, local_axes: tuple[str, ...]) -> tuple[str, ...] | None:
    """The packed axes of k that a copy between global g and an on-chip buffer over `local_axes`
    moves as ONE axis of a view of g (KernelWriter.merged_slice writes that view): consecutive in
    g, every one but the first whole on chip, the first a grid axis of two or more. None elsewhere
    (fuse_pool_epilogue's (n, p): a tile of n with every p is one rectangle of the [k, n p] view)."""
    packed = next((d for d in on_chip_dims(k, tuple(local_axes)) if len(d) > 1), None)
    if packed is None:
        return None
    grid = {t.axis: t.block for t in k.grid}
    block = {**grid, **({a: k.stream.block for a in (k.stream.axis, *k.stream.aliases)} if k.stream else {})}
    n = len(packed)
    at = next((i for i in range(len(g.axes) - n + 1) if tuple(g.axes[i:i + n]) == packed), None)
    if at is None or any(block.get(a) != plan.axes[a] for a in packed[1:]) or packed[0] not in grid \
            or grid[packed[0]] < 2:
        return None
    return packed


def copy_row_bytes(plan: Plan, k: Kernel, g: Buffer, local_axes: tuple[str, ...]) -> int:
    """Bytes of one contiguous row of the global region a copy between g and an on-chip buffer
    over `local_axes` moves: g's row, or where the copy goes through the merged view (merged_axes)
    and the merged axes end g, that view's row (a pooled GEMM's weight [k, n, 2] of f16 has rows of
    4 bytes, its [k, 2 n] view rows of 4 n: TMA's)."""
    merged = merged_axes(plan, k, g, local_axes)
    if merged and tuple(g.axes[-len(merged):]) == merged:
        return math.prod(plan.axes[a] for a in merged) * (row_bytes(plan, g) // max(1, plan.axes[g.axes[-1]]))
    return row_bytes(plan, g)


def _loaded_without_tma(plan: Plan, k: Kernel) -> set[str]:
    """The shared tiles k's stream body fills from global rows no multiple of 16 bytes (no TMA:
    TileLang's producer stores them by plain or cp.async copies)."""
    bufs = {b.name: b for b in k.buffers if b.scope == "shared"}
    return {s.dst for s in k.body if isinstance(s, Load) and s.dst in bufs and plan.global_buffer(s.src).axes
            and copy_row_bytes(plan, k, plan.global_buffer(s.src), bufs[s.dst].axes) % 16}


def nvcc_flags(plan: Plan) -> dict[str, list[str]]:
    """{kernel name: nvcc flags beyond TileLang's own}: -ftz=true where plan.passes.flush_subnormals
    set it, FAST_MATH_FLAGS where plan.passes.fast_math did. The emitted module compiles with
    them, and `leantile kernels` lowers with them.

    Not -fmad=false: nvcc contracts a multiply and a following add into one FMA wherever it likes
    (the product then unrounded), which is harmless except where a plan relies on a product being
    ONE rounded value in two places; those products are the plan op mul_rn (T.ieee_mul, never
    contracted) and fused multiply-adds are the plan op fma (T.ieee_fmaf). -fmad=false on every
    kernel was measured (H100, one call, tuned gqa_attention 8 x 4 heads 4096 x 4096, flush_subnormals=0):
    0.4701 -> 0.5367 ms, while attention, softmax_row, layernorm_linear_gelu and rmsnorm_mlp did
    not move (benchmarks/fma_contraction/results/fmad-probe-h100-2026-11-28.json)."""
    return {k.name: (list(FAST_MATH_FLAGS) if k.fast_math else ["-ftz=true"])  # (fast math flushes too)
            for k in plan.kernels if k.flush_subnormals or k.fast_math}


# plan.passes.fast_math's flags: the transcendentals as MUFU instructions (expf, logf, tanhf ->
# ex2/lg2/tanh.approx), but division and square root kept correctly rounded: --use_fast_math alone
# makes x / y div.approx, which returns 0 for |y| in [2^126, 2^128] (1e38 / 1e38 = 0) and NaN for
# inf / y; with --prec-div=true the PTX has div.rn.ftz.f32 (nvcc 13, checked on the CPU:
# tests/cpu/test_fast_math.py)
FAST_MATH_FLAGS = ("--use_fast_math", "--prec-div=true", "--prec-sqrt=true")

