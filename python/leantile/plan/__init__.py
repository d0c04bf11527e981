"""The tile program: what a fused kernel does, tile by tile.

A Plan is a list of kernels run in order. Each kernel has
  - a grid over output tiles: `grid` axes, each with a block size (block 1 = a batch axis,
    indexed by the grid and absent from on-chip buffers);
  - optionally one streamed axis (`stream`): the body runs once per block of it;
  - buffers by scope: global (whole tensors: graph inputs, outputs, intermediates),
    shared and fragment (one tile, named axes, extents = block sizes or the full axis);
  - statements: prologue (once per tile), body (once per stream block), epilogue, and
    optionally a second pass over the stream (once per block again, after the epilogue).

On-chip buffers have the full block shape; loads zero-fill past an axis's end (as TileLang's
boundary-checked copies do), reductions ignore those positions, `mask` sets them, and stores
write only the valid part. The CPU interpreter (leantile.interp) and the TileLang emitter
(leantile.emit) both read exactly this."""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .. import ir

Scope = Literal["global", "shared", "fragment"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Buffer(_M):
    name: str
    axes: tuple[str, ...]
    scope: Scope
    dtype: str  # "f16" .. "f64", or "acc" = the accumulator type (f32 on the GPU)
    node: Optional[int] = None  # graph node whose value it holds, when there is one
    # a global intermediate wider than the graph's dtype says why ("acc": float32 statistics)
    why: Optional[str] = None


# Tile.param of a block derive chose from the shape (the row tile of an on-chip row kernel): a
# constant of the kernel, not a tile parameter the search varies.
FIXED = "fixed"
# bytes per element of a plan dtype: the graph's (ir.DTYPE_BYTES) and the accumulator's, float32
DTYPE_BYTES = {**ir.DTYPE_BYTES, "acc": 4}


class Tile(_M):
    axis: str
    block: int = Field(ge=1)
    param: Optional[str] = None  # the tile parameter the block came from (block_m, ...)
    # the block is the parameter's value divided by this: a packed row tile (Kernel.packed) of
    # block_m rows holds `divisor` query heads times block_m / divisor query positions
    divisor: int = Field(1, ge=1)


class KeyBound(_M):
    """A bound a mask puts on the keys a query row keeps (derive.rules.masks): side "hi", key <=
    coef * row + offset; side "lo", key >= coef * row + offset, with row the query's position
    along `row` (coef 0: the same bound for every row). A block of keys that no row of the
    CTA's tile may keep holds only masked (-inf) scores: skipping it leaves the online-softmax
    state unchanged (LeanTile.fold_skip_masked)."""
    side: Literal["lo", "hi"]
    row: str
    coef: Literal[-1, 0, 1]
    offset: int
    # a bound read at run time (padding: key < lengths[b]): the offset also has the term
    # floor (hi) or ceil (lo) of shift + scale * leaf, leaf a global the kernel reads at its
    # batch position, clamped to [-2, extent + 2] first (NaN: no bound). offset then holds a
    # margin of one key outwards, so that a rounding of the kernel's float arithmetic never
    # skips a kept key (none where scale is +-1 and shift whole: one monotone rounding,
    # derive.rules.masks._bound): the mask itself is still evaluated on every block that runs
    leaf: Optional[str] = None
    shift: float = 0.0
    scale: float = 0.0
    # the leaf is read per query row as well (mask_bounds' first / last kept key, along `row`):
    # a tile's bound is the loosest of its rows' (coef 0), see tile_leaf_value
    per_row: bool = False
    # no bound but a condition for the unmasked interior (mask_bounds' count of kept keys): a
    # row keeps every key between its per-row bounds pair = (lo, hi) (indices into the same
    # bounds) where leaf = hi - lo + 1, both whole (row_whole); a block is interior only where
    # every row of the tile is. Ranges ignore it (key_block_range); side, coef and offset are
    # unused (lo, 0, 0)
    flag: bool = False
    pair: tuple[int, int] = (-1, -1)


WHOLE_LIMIT = float(2 ** 24)  # float32 holds every integer up to it: hi - lo + 1 then rounds nowhere


def row_whole(count: float, lo: float, hi: float) -> bool:
    """A flag's row (KeyBound.flag): its per-row bounds' unrounded values (shift + scale * leaf)
    whole, below WHOLE_LIMIT in magnitude, and count = hi - lo + 1: the graph's
    eq(count, hi - lo + 1) then holds in any float arithmetic (the kernel spells the same)."""
    return (all(math.isfinite(v) and v == math.floor(v) and abs(v) < WHOLE_LIMIT for v in (lo, hi))
            and count == hi - lo + 1)


def runtime_offset(kb: KeyBound, value: float, extent: int, interior: bool = False) -> int:
    """The run-time part of a bound's offset for the leaf's value (plan.KeyBound.leaf). A NaN
    leaf masks every key: for the range that is no bound, for the interior (`interior`) none."""
    if math.isnan(value):
        return (extent + 2 if kb.side == "hi" else -2) if not interior else (-2 if kb.side == "hi" else extent + 2)
    x = min(max(kb.shift + kb.scale * value, -2.0), extent + 2.0)
    return math.floor(x) if kb.side == "hi" else math.ceil(x)


def tile_leaf_value(kb: KeyBound, values, extent: int, tightest: bool = False) -> float:
    """The one leaf value that gives a tile the loosest of its rows' bounds (KeyBound.per_row):
    the value whose run-time offset is largest (hi) or smallest (lo); NaN where a row's is NaN
    (no bound). `tightest`: the tile's interior, every row's bound at once (NaN: no row keeps
    anything)."""
    values = [float(v) for v in values]
    if any(math.isnan(v) for v in values):
        return math.nan
    pick = max if (kb.side == "hi") != tightest else min
    return pick(values, key=lambda v: runtime_offset(kb, v, extent))


def key_block_range(b: tuple[KeyBound, ...], row_start: int, row_block: int, key_block: int,
                    blocks: int, leaves: dict[int, float] | None = None) -> tuple[int, int]:
    """[first, stop) of the key blocks a tile of rows [row_start, row_start + row_block) may
    keep under bounds b (the interpreter's arithmetic; the emitter spells the same). A bound
    read at run time needs its leaf's value in `leaves`, by its index in b (one leaf may bound
    both sides, each row's loosest value differing); without it (the cost model) it bounds
    nothing."""
    first, stop = 0, blocks
    for i, kb in enumerate(b):
        if kb.flag:  # a condition for the interior, no bound
            continue
        lo_row, hi_row = row_start, row_start + row_block - 1
        extra = 0
        if kb.leaf is not None:
            if leaves is None:
                continue
            extra = runtime_offset(kb, leaves[i], blocks * key_block)
        if kb.side == "hi":  # the largest key any row keeps
            key = extra + kb.offset + (hi_row if kb.coef == 1 else -lo_row if kb.coef == -1 else 0)
            stop = min(stop, (max(key + 1, 0) + key_block - 1) // key_block)
        else:  # the smallest
            key = extra + kb.offset + (lo_row if kb.coef == 1 else -hi_row if kb.coef == -1 else 0)
            first = max(first, max(key, 0) // key_block)
    return first, max(stop, first)


def key_block_interior(b: tuple[KeyBound, ...], row_start: int, row_block: int, key_block: int,
                       leaves: dict[int, float] | None = None, keys: int = 0) -> tuple[int, int]:
    """[first, stop) of the key blocks that every row of the tile [row_start, row_start +
    row_block) keeps whole under bounds b: there the mask is true everywhere and the kernel
    runs without it (Map.boundary_only). Rows and keys past an axis end count as if they
    existed: that only narrows the range. Empty where first >= stop. A bound read at run time
    needs its leaf's value in `leaves`, by its index in b (per row: the tightest of the tile's
    rows, tile_leaf_value; a flag 1 where every row is whole, row_whole) and `keys` (the key
    blocks' whole extent); without them (the cost model) it is left out."""
    first, stop = 0, None
    for i, kb in enumerate(b):
        extra = 0
        if kb.leaf is not None:
            if leaves is None:
                continue
            if kb.flag:
                if leaves[i] != 1.0:
                    return 0, 0
                continue
            extra = runtime_offset(kb, leaves[i], keys, interior=True)
        lo_row, hi_row = row_start, row_start + row_block - 1
        if kb.side == "hi":  # every key of block j at most the smallest bound: (j + 1) kb - 1 <= key
            key = extra + kb.offset + (lo_row if kb.coef == 1 else -hi_row if kb.coef == -1 else 0)
            s = max(key + 1, 0) // key_block
            stop = s if stop is None else min(stop, s)
        else:  # every key at least the largest bound: j kb >= key
            key = extra + kb.offset + (hi_row if kb.coef == 1 else -lo_row if kb.coef == -1 else 0)
            first = max(first, (max(key, 0) + key_block - 1) // key_block)
    return first, (stop if stop is not None else 1 << 62)


class Stream(_M):
    axis: str
    block: int = Field(ge=1)
    stages: int = Field(2, ge=1)
    aliases: tuple[str, ...] = ()  # other names of the same axis (B's side of a contraction)
    param: Optional[str] = None  # the tile parameter the block came from
    # split over CTAs (split_k, split_kv): a batch axis of the grid (block 1) whose index s picks
    # the slice of the stream this CTA runs: blocks [s * per, (s + 1) * per) with
    # per = ceil(ceil(extent / block) / splits), splits = that axis's extent. per is computed
    # from the block the kernel runs with, so any block covers the axis once; a slice past the
    # end is empty (its body never runs).
    split: Optional[str] = None
    # skip_masked_tiles: the body runs only for the blocks some row of the CTA's tile may keep
    # (key_block_range); the others' scores are all masked. With a split, the slice's blocks
    # among those.
    skip: tuple[KeyBound, ...] = ()


class State(_M):
    """A loop-carried buffer and the law that combines its per-block values."""
    buffer: str
    init: str  # "0" or "-inf"
    combine: Literal["sum", "max", "rescaled_sum"]


class Load(_M):
    op: Literal["load"] = "load"
    src: str  # global buffer
    dst: str
    # skip_masked_tiles: a register tile (a fragment) that only boundary-only statements read
    # (document ids along the keys): loaded on boundary blocks alone, as Map.boundary_only
    boundary_only: bool = False


class Store(_M):
    op: Literal["store"] = "store"
    src: str
    dst: str  # global buffer
    # through shared memory: one coalesced (TMA) copy instead of per-thread writes of a GEMM
    # fragment (set by plan.passes.store_staging)
    staged: bool = False
    # add src into the global (TileLang's atomic add: other CTAs add into the same positions, in
    # no fixed order); an earlier kernel of the plan stores every element of it first (zeros)
    accumulate: bool = False


class Fill(_M):
    op: Literal["fill"] = "fill"
    dst: str
    value: str  # decimal or "-inf"


class Gemm(_M):
    """acc += a . b, contracting axis `axis_a` of a with `axis_b` of b."""
    op: Literal["gemm"] = "gemm"
    a: str
    b: str
    acc: str
    axis_a: str
    axis_b: str
    clear: bool = False  # acc = a . b instead of +=
    # tensor cores (T.gemm) rather than a SIMT loop over the contracted axis: set by
    # plan.passes.gemm_engine where the tile is a 2-D MMA shape (code generation only)
    mma: bool = False


class Map(_M):
    """dst = fn(args...), elementwise, broadcasting by axis name. An arg is a buffer name
    or a literal '#<decimal>'."""
    op: Literal["map"] = "map"
    dst: str
    fn: str  # a unary/binary op of the IR, "cast", or a plan-only one of ops.ROWS ("copy", "fma", "mul_rn")
    args: tuple[str, ...]
    # for fn "cast": the IR's target dtype, rounded to before the value lands in dst; None
    # (what derive writes today) = a conversion to dst's own dtype, as a store would do
    dtype: Optional[str] = None
    # skip_masked_tiles: run only on a boundary block of the stream, where some row of the tile
    # may drop a key of the block. On an interior block (plan.key_block_interior) the mask is
    # true everywhere: a select (fn "select", its keep exactly the stream's bounds) passes
    # args[1] through (dst := args[1]), and any other boundary-only value is read by nothing
    # else (plan.verify checks both)
    boundary_only: bool = False


class Reduce(_M):
    """dst (op)= reduce_kind(src over axis), ignoring positions past the axis end."""
    op: Literal["reduce"] = "reduce"
    dst: str
    src: str
    kind: Literal["sum", "max"]
    axis: str
    accumulate: bool = False
    # plan.passes.defer_reductions (code generation, interp ignores it): a stream body's
    # accumulation whose total only the epilogue reads adds each block elementwise into a tile
    # of partial sums (or maxima) and reduces that tile once after the stream, so the loop body
    # has no cross-thread reduction
    deferred: bool = False


class Pivot(_M):
    """On the first block the CTA streams (a split stream's slice: its first) only: dst = src at
    position 0 of the streamed `axis` (src a tile of it, dst its axes less `axis`); later blocks
    keep dst: the pivot p of shifted statistics (derive.kernels._row_program), from the tile the
    body loads anyway (a load of its own cost 4% of a LayerNorm -> GEMM kernel on an H100)."""
    op: Literal["pivot"] = "pivot"
    dst: str
    src: str
    axis: str


class Iota(_M):
    """dst = the global position along `axis` (tile start + local position), broadcast over
    dst's other axes: the IR's iota, computed in registers, never loaded."""
    op: Literal["iota"] = "iota"
    dst: str
    axis: str
    boundary_only: bool = False  # as Map.boundary_only: a mask's position, unneeded inside


class Mask(_M):
    """Set positions of dst past the end of `axis` to `value` (-inf before a max/exp)."""
    op: Literal["mask"] = "mask"
    dst: str
    axis: str
    value: str = "-inf"


Stmt = Annotated[Union[Load, Store, Fill, Gemm, Map, Reduce, Mask, Pivot, Iota], Field(discriminator="op")]


# Kernel.second_pass visits the stream's blocks last first: those the first pass read last are
# the ones L2 still holds (benchmarks/second_pass/VERDICT.md). No value changes (verify refuses
# reductions there); the interpreter runs the order the emitter prints.
SECOND_PASS_REVERSED = True


class Kernel(_M):
    name: str
    role: str  # one line: what this kernel computes, for reports and generated comments
    grid: tuple[Tile, ...]
    stream: Optional[Stream] = None
    buffers: tuple[Buffer, ...]
    states: tuple[State, ...] = ()
    prologue: tuple[Stmt, ...] = ()
    body: tuple[Stmt, ...] = ()
    epilogue: tuple[Stmt, ...] = ()
    # once per block of the stream again, after the epilogue (a plain stream only): a row
    # kernel's elementwise epilogue over the row itself (log-softmax's x - m - log l), which
    # needs the finished row statistics; its second read of the row is meant to hit L2 (rows per
    # CTA: rules.row_tiles.TWO_PASS_BYTES), in the order SECOND_PASS_REVERSED says
    second_pass: tuple[Stmt, ...] = ()
    threads: int = 256
    # Code-generation decisions, set by the named passes of leantile.plan.passes (the emitter
    # spells them, the search reads them; interp ignores them: they do not change values):
    # "full_row": every warp owns whole rows of the GEMM accumulator (a row reduction or a
    # second GEMM reads it), which caps threads at 2 * block_m
    warp_policy: Literal["auto", "full_row"] = "auto"
    swizzle: bool = False  # rasterise the 2-D grid in panels (T.use_swizzle, tile parameter swizzle)
    # grid axes, outermost first, whose tiles form ONE row dimension of the on-chip buffers that
    # have them all, consecutively (pack_query_group: the query heads of a KV group and the
    # query positions share a GEMM's M rows, so one CTA loads each K and V block once for the
    # whole group). The interpreter keeps them as separate axes (values do not depend on the
    # layout); the emitter, the verifier and the cost model read on_chip_dims.
    packed: tuple[str, ...] = ()
    # a tiled grid axis whose tiles launch in reverse order (plan.passes.heavy_first): under a
    # causal mask the last query tiles stream the most key blocks; launched first, they leave
    # the short tiles to fill the last wave (FlashAttention-2's order)
    heavy_first: Optional[str] = None
    # plan.passes.overlap (tile parameter `overlap`): FlashAttention-3's schedule for an online-
    # softmax stream: a producer warpgroup loads the K and V blocks by TMA into a ring of
    # `stages` + 1 buffers; two consumer warpgroups run the loop rotated (this block's Q K^T and the last
    # block's P V issued together, the softmax between them) and take turns at the tensor cores
    overlap: bool = False
    # plan.passes.pingpong (tile parameter `pingpong`): a GEMM whose epilogue is elementwise runs
    # persistent (one CTA per SM walking the output tiles) with a producer warpgroup loading A
    # and B by TMA into a ring of `stages` buffers and two consumer warpgroups, each on a whole
    # tile of its own, taking turns at the tensor cores: one's epilogue runs under the other's
    # mainloop (CUTLASS's ping-pong schedule; emit.pingpong)
    pingpong: bool = False
    # plan.passes.swap_operands (tile parameter `swap_operands`): the (row, column) axes of a GEMM
    # accumulator the kernel keeps transposed on chip, (column, row), and computes as
    # C^T = B^T A^T: a tile of few rows (a decode-time projection, m <= 16) takes the MMA's
    # narrow N side, the weight's columns its 64-row M side. Every on-chip buffer with exactly
    # these axes is laid out so (on_chip_dims); the interpreter keeps the logical order.
    swapped: tuple[str, ...] = ()
    # plan.passes.dependent_launch: programmatic dependent launch (sm_90+) between consecutive
    # kernels of a plan: `launch_next` lets the next kernel launch while this one runs
    # (griddepcontrol.launch_dependents); `wait_previous` makes this kernel's first act a wait
    # for the one before to finish and flush (griddepcontrol.wait). Launch and setup overlap
    # the previous kernel's tail; every statement still runs after it.
    launch_next: bool = False
    wait_previous: bool = False
    # plan.passes.flush_subnormals (tile parameter `flush_subnormals`): nvcc compiles the kernel with
    # -ftz=true, float32 subnormals flushed to zero. Its exp2 is then one MUFU.EX2 instead of
    # the instruction wrapped in a subnormal fix-up (a compare, two predicated multiplies): the
    # softmax of an attention tile is issue-bound on the CUDA cores. A value below 2^-126 (a
    # probability under 1e-38 of the row sum) becomes 0; no plan statement changes.
    flush_subnormals: bool = False
    # plan.passes.fast_math (tile parameter `fast_math`): nvcc compiles the kernel with
    # --use_fast_math: expf, logf and tanhf become MUFU instructions (2^-11 relative at worst),
    # subnormals flushed; divisions and square roots stay correctly rounded (--prec-div=true).
    # Only kernels that store 16-bit floats and reduce nothing get it; no plan statement changes.
    fast_math: bool = False
    # plan.passes.last_arrival (tile parameter `last_arrival`): this kernel is no launch of its own
    # but the tail of the kernel before it, named here (a split reduction's combine after its
    # slices): each CTA of that kernel counts itself in at its tile's arrival counter after its
    # stores, and the last of a tile's slices to arrive runs this kernel's statements for that
    # tile (emit.tail). The interpreter runs it after the whole kernel before, as a kernel of its
    # own: the same values, since it reads only its own tile's slices (plan.last_arrival.tail_fits).
    tail_of: Optional[str] = None

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"kernel {self.name}: no buffer {name!r}")

    def statements(self):
        return (*self.prologue, *self.body, *self.epilogue, *self.second_pass)


def running_maxes(k: Kernel) -> frozenset[str]:
    """The streamed running maxima of a kernel (state max from -inf: online softmax's m).
    While a row has seen only -inf (a masked prefix), m = -inf, and exp(x - m) and the rescale
    exp(m_old - m) would be exp(-inf + inf) = NaN. As FlashAttention does, the arithmetic of the
    stream body reads such an m as 0 ("no contribution yet"): exp(-inf - 0) = 0 for the
    scores and for the rescale of the (still zero) sums. Copies and max-reductions of m, and
    everything outside the stream body, see the true m. leantile.interp and leantile.emit both apply it."""
    return frozenset(st.buffer for st in k.states if st.combine == "max" and st.init == "-inf")


def boundary_read(t, name: str) -> bool:
    """Statement t reads buffer `name` only on boundary key blocks (Map.boundary_only): t is
    boundary-only and `name` is not a select's pass-through value (args[1], read inside too)."""
    if not getattr(t, "boundary_only", False):
        return False
    return not (isinstance(t, Map) and t.fn == "select" and name in t.args[1:])


def map_runs(stmts, axes_of) -> list[tuple[int, int]]:
    """[start, stop) of each maximal run of Map and Iota statements whose buffers have one shape
    (axes_of(name)) and one boundary_only: what the emitter evaluates in one loop over the tile
    (and whose temporaries the compiler keeps in scalars); any other statement is a run of its own."""
    runs, i = [], 0

    def key(s):
        return axes_of(s.dst), s.boundary_only
    while i < len(stmts):
        j = i + 1
        if isinstance(stmts[i], (Map, Iota)):
            while j < len(stmts) and isinstance(stmts[j], (Map, Iota)) and key(stmts[j]) == key(stmts[i]):
                j += 1
        runs.append((i, j))
        i = j
    return runs


def swapped_layout(k: Kernel, axes: tuple[str, ...]) -> bool:
    """Whether an on-chip buffer of k with these axes is kept (column, row): exactly k's
    swapped accumulator axes (plan.passes.swap_operands)."""
    return bool(k.swapped) and tuple(axes) == k.swapped


def on_chip_dims(k: Kernel, axes: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The dimensions of an on-chip buffer of kernel k with these axes: one per axis, except
    that k's packed axes, where the buffer has all of them consecutively and in order, are one
    dimension (row-major over them: the last packed axis varies fastest), and a buffer with
    exactly k's swapped axes has them in reverse order."""
    if swapped_layout(k, axes):
        return ((axes[1],), (axes[0],))
    p, n = k.packed, len(k.packed)
    if n > 1:
        for i in range(len(axes) - n + 1):
            if tuple(axes[i:i + n]) == p:
                return (*((a,) for a in axes[:i]), p, *((a,) for a in axes[i + n:]))
    return tuple((a,) for a in axes)


def pooled_reduce(plan: "Plan", k: Kernel, s) -> bool:
    """Whether Reduce s of kernel k reduces the inner axis of k's packed column dimension, every
    position of it on chip (fuse_pool_epilogue: (n, p), p whole): each result combines the P
    values of its n, read from a shared copy (emit.reductions.pool_reduce), or in place where
    each thread holds them (pooled_in_registers)."""
    dims = on_chip_dims(k, tuple(k.buffer(s.src).axes))
    return any(len(d) > 1 and d[-1] == s.axis for d in dims) and \
        any(t.axis == s.axis and t.block == plan.axes[s.axis] for t in k.grid)


def pooled_in_registers(plan: "Plan", k: Kernel, s) -> bool:
    """Whether pooled Reduce s (pooled_reduce) reads its pairs in place: a pool of 2 over the
    accumulator of a tensor-core GEMM (not swapped). A wgmma or mma accumulator holds columns 2c and
    2c + 1 of a row in one thread, so each thread combines its own pair from registers; TileLang
    verifies that (a pool of 4 spans two threads: "Cannot lower access to thread-distributed
    fragment") and emits no shared copy. Elsewhere the pool reads a shared copy of the tile: for a
    4096 x 4096 x 4096 x 2 maxout that copy is the 128 x 256 float32 accumulator, 128 KiB a tile
    written and read back (gemm_maxout ran 0.5669 ms against torch.compile's 0.4585 with it,
    benchmarks/pool_tiles/VERDICT.md)."""
    if not pooled_reduce(plan, k, s) or plan.axes[s.axis] != 2 or k.swapped:
        return False
    return any(isinstance(g, Gemm) and g.mma and g.acc == s.src for g in k.statements())


# CUDA's launch limits (every GPU since sm_30): gridDim.x <= 2^31 - 1, gridDim.y and .z <= 65535.
# A launch past them fails with CUDA_ERROR_INVALID_VALUE (issue 46: an axis of 65536 on y or z).
GRID_X_MAX = 2**31 - 1
GRID_YZ_MAX = 65535


def launches(plan: "Plan") -> list[Kernel]:
    """The kernels of the plan that launch: all but the tails (Kernel.tail_of)."""
    return [k for k in plan.kernels if k.tail_of is None]


def grid_counts(plan: "Plan", k: Kernel) -> list[int]:
    """The tiles along each of k's grid axes at the plan's tiles, in grid order."""
    return [-(-plan.axes[t.axis] // t.block) for t in k.grid]


def grid_folded(plan: "Plan", k: Kernel) -> bool:
    """Whether k launches its whole grid on blockIdx.x. The grid's last axis is blockIdx.x, the
    one before it blockIdx.y, the product of the rest blockIdx.z; where y or z would pass
    GRID_YZ_MAX, every grid axis folds into x instead, each tile's index recovered from it by
    div/mod, the last axis fastest: the same walk (grid_walk). A persistent kernel
    (Kernel.pingpong) launches one CTA per SM and walks its tiles itself: never folded."""
    if k.pingpong or len(k.grid) < 2:
        return False
    n = grid_counts(plan, k)[::-1]
    return n[1] > GRID_YZ_MAX or math.prod(n[2:]) > GRID_YZ_MAX


def launch_dims(plan: "Plan", k: Kernel) -> tuple[int, int, int]:
    """(gridDim.x, .y, .z) of k's launch at the plan's tiles (a persistent kernel: its tiles,
    the most CTAs it could launch)."""
    n = grid_counts(plan, k)[::-1]
    if k.pingpong or grid_folded(plan, k):
        return (math.prod(n), 1, 1)
    return (n[0] if n else 1, n[1] if len(n) > 1 else 1, math.prod(n[2:]))


def grid_walk(plan: "Plan", k: Kernel):
    """The index of each of k's tiles (one per grid axis, grid order) in launch order: the
    last axis fastest. A folded grid (grid_folded) recovers them from the one flat index by
    the emitter's own div/mod (emit.kernel), the last axis the remainder by its count first."""
    n = grid_counts(plan, k)
    if not grid_folded(plan, k):
        yield from itertools.product(*(range(c) for c in n))
        return
    rev = n[::-1]
    for flat in range(math.prod(n)):
        idx, rem = [], flat
        for c in rev[:-1]:
            idx.append(rem % c)
            rem //= c
        idx.append(rem)
        yield tuple(reversed(idx))


class Plan(_M):
    graph: str
    candidate: str
    axes: dict[str, int]
    globals: tuple[Buffer, ...]  # every tensor that lives in device memory
    outputs: dict[str, str]  # graph output name -> global buffer
    kernels: tuple[Kernel, ...]
    tiles: dict[str, int] = {}  # the tile parameters this plan was built with
    # flatten_reduction: merged axis -> its graph axes; a global over it views the user's tensor
    merged: dict[str, tuple[str, ...]] = {}
    # output buffer -> the input whose bytes it takes (plan.storage.in_place: a chunk of a sum
    # written over the sum so far; the caller's tensor is the output)
    in_place: dict[str, str] = {}

    def global_buffer(self, name: str) -> Buffer:
        for b in self.globals:
            if b.name == name:
                return b
        raise KeyError(f"plan: no global buffer {name!r}")


def user_shape(plan: Plan, b) -> tuple[int, ...]:
    """The shape the graph gives global b (its merged axes written out in their parts: a view of
    the same memory as the plan's shape)."""
    return tuple(plan.axes[p] for a in b.axes for p in plan.merged.get(a, (a,)))


def row_bytes(plan: Plan, b) -> int:
    """Bytes of one row (the contiguous last axis) of global buffer b: what the widths of its
    vector copies must divide (plan.shared's windows, emit.common.pass_configs)."""
    return (plan.axes.get(b.axes[-1], 0) if b.axes else 1) * DTYPE_BYTES.get(b.dtype, 4)


def statement_effects(s) -> tuple[list[str], list[str]]:
    """(on-chip buffers read, on-chip buffers written) by one statement."""
    if isinstance(s, Load):
        return [], [s.dst]
    if isinstance(s, Store):
        return [s.src], []
    if isinstance(s, (Fill, Iota)):
        return [], [s.dst]
    if isinstance(s, Mask):
        return [s.dst], [s.dst]
    if isinstance(s, Pivot):
        return [s.src], [s.dst]
    if isinstance(s, Map):
        return [a for a in s.args if not a.startswith("#")], [s.dst]
    if isinstance(s, Reduce):
        return [s.src, *([s.dst] if s.accumulate else [])], [s.dst]
    if isinstance(s, Gemm):
        return [s.a, s.b, *([] if s.clear else [s.acc])], [s.acc]
    raise TypeError(f"unknown statement {s!r}")
