"""The plan verifier: well-formedness of a Plan against its graph, one line per problem.

    verify(plan, graph) -> [problem]     (empty: the plan is well formed)

It checks what the interpreter and the emitter take for granted:
  - kernel names are unique;
  - every on-chip buffer a statement reads was written before it in that kernel (by a load,
    a fill, a map, a reduce or a gemm), or is a loop-carried state; every buffer a statement
    names is declared, and loads read / stores write global buffers;
  - a global buffer a kernel loads is a graph input or was stored by an earlier kernel;
  - every graph output's global buffer is stored by exactly one kernel (a graph input
    returned as an output is stored by none), and no global is stored by two kernels;
  - every buffer axis is an axis of the plan;
  - a pivot is taken in the stream body over the streamed axis; a split stream is split over a
    batch axis of the grid; the code-generation fields
    (plan.passes) fit the kernel: FullRow and swizzle only on GEMM kernels (swizzle with two
    tiled grid axes), a staged store only from a 2-D fragment;
  - the shared memory of each kernel fits the target (Target.smem_per_cta, 227 KiB on sm_90): the sum
    over its shared buffers of the product of their extents at the plan's tiles (the grid
    block of a tiled axis, the stream block of the streamed axis and its aliases, else the
    whole axis) times the bytes of their dtype ('acc' accumulates in f32: 4 bytes), times the
    pipeline's stages for tiles the stream body loads.

  - the warps can share every tensor-core GEMM tile, and TileLang has a layout for every tile a
    T.reduce_* reads (warps_problem, reduce_layout_problem);
  - the launch fits CUDA's grid limits (grid_problem): gridDim.x <= 2^31 - 1, .y and .z <= 65535
    (plan.grid_folded puts a grid that would pass y or z on x).

Problems of shared memory, of warps and of the grid start with TILE_PROBLEMS' prefixes, so that
derive can tell a plan that does not fit the target at its tiles (a user's tile choice, or a
candidate not to offer) from a bug.
"""
from __future__ import annotations

import math

from .. import ir
from . import (DTYPE_BYTES, FIXED, GRID_X_MAX, GRID_YZ_MAX, Buffer, Gemm, Iota, Kernel, Load, Map,
                   Pivot, Plan, Reduce, Store, boundary_read, grid_folded, launch_dims, on_chip_dims, statement_effects,
                   swapped_layout, launches)
from .last_arrival import tail_fits
from .shared import reductions, temps, window_width, windows
from ..target import DEFAULT, Target
from ..tiles import block_allowed

SMEM_PREFIX = "shared memory"


def extent(plan: Plan, k: Kernel, axis: str, tiles: dict | None = None) -> int:
    """The extent of `axis` in an on-chip buffer of kernel k at the plan's tiles, or at `tiles`
    where given (a block comes from its tile parameter: the search judges every point of its
    space with the plan of the default tiles, without deriving it again)."""
    if k.stream and axis in (k.stream.axis, *k.stream.aliases):
        return _block(k.stream, tiles)
    for t in k.grid:
        if t.axis == axis:
            return _block(t, tiles)
    return plan.axes.get(axis, 0)


def _block(t, tiles: dict | None) -> int:
    if tiles and t.param in tiles:
        return max(1, tiles[t.param] // getattr(t, "divisor", 1))
    return t.block


def dim_extents(plan: Plan, k: Kernel, axes, tiles: dict | None = None) -> list[int]:
    """The extent of each dimension of an on-chip buffer of k (plan.on_chip_dims: packed row
    axes are one dimension)."""
    return [math.prod(extent(plan, k, a, tiles) for a in d) for d in on_chip_dims(k, tuple(axes))]


def packing_problem(plan: Plan, k: Kernel, tiles: dict | None = None) -> str | None:
    """A packed tile needs its parameter to be a multiple of what it packs (the query heads of a
    packed row, the pool of a packed column: fuse_pool_epilogue), with two or more of its own
    positions (one would make its axis a batch axis, off chip)."""
    for t in k.grid:
        if t.divisor > 1 and tiles and t.param in tiles and (tiles[t.param] % t.divisor or tiles[t.param] < 2 * t.divisor):
            return (f"{WARPS_PREFIX}: kernel {k.name}: {t.param}={tiles[t.param]} cannot hold two positions of "
                    f"{t.axis} times {t.divisor} packed ones of equal share; choose a multiple of {2 * t.divisor}")
    return None


def shared_bytes(plan: Plan, k: Kernel, tiles: dict | None = None) -> int:
    """Bytes of shared memory kernel k allocates (see the module docstring): a shared tile the
    stream body loads is multi-buffered, `stages` copies (TileLang's pipelining; stages + 1 in
    FA3's ring), the others once; the plan's other shared tiles before the epilogue (a mirror, a
    serial reduction's partials: plan.shared.temps; a window: plan.shared.windows) come on top. The epilogue's (store staging, a window of an unaligned store) reuse the pipelined
    memory after the loop: the kernel needs the larger of the two phases (an epilogue window
    of 128 x 136 halves over 32 KiB of single-stage operands: 34816 bytes, both counts). Under
    FA3's schedule the ring is not reused: the epilogue's tiles come on top.
    Within 1 KiB of TileLang's own allocation (`dyn_shared_memory_buf`) for every kernel of
    every export at three tilings (measured 2026-11-23: matmul 128x256x64, 3 stages: 147456
    both; flash 128x256, d_h 128, 3 stages: 425984 both), and of every generated graph that
    tests/cpu/test_lower_generated lowers."""
    # (a second pass's loads, plan.passes.stage_loads, are a pipelined loop of their own: counted as the body's)
    piped = {s.dst for s in (*k.body, *k.second_pass) if isinstance(s, Load)} if k.stream else set()
    stages = (tiles or {}).get("stages", k.stream.stages) if k.stream else 1

    def size(axes, dtype) -> int:
        return math.prod(extent(plan, k, a, tiles) for a in axes) * DTYPE_BYTES.get(dtype, 4)
    if k.overlap:  # emit.overlap: the producer's ring holds stages + 1 blocks
        stages += 1
    # the threads it launches with (emit.reductions.lanes): the tile parameter unless its grid fixes them
    threads = k.threads if any(t.param == FIXED for t in k.grid) else (tiles or plan.tiles or {}).get("threads", k.threads)

    def temp_bytes(t) -> int:
        return math.prod(threads if a == "__lanes" else extent(plan, k, a, tiles) for a in t.axes) * DTYPE_BYTES.get(t.dtype, 4)

    def window_bytes(w) -> int:  # whole granules under a row of the tile (plan.shared.window_width)
        rows, cols = plan.global_buffer(w.buffer).axes[-2:]
        return extent(plan, k, rows, tiles) * window_width(extent(plan, k, cols, tiles), w.granule) * \
            DTYPE_BYTES.get(plan.global_buffer(w.buffer).dtype, 4)

    def phase(ts, wins) -> int:
        # windows live from their fill to their last read only, never two at once: TileLang gives
        # them one place (the largest); the other temps are summed
        return sum(map(temp_bytes, ts)) + max(map(window_bytes, wins), default=0)
    ts, wins = temps(plan, k), windows(plan, k)
    fixed = sum(size(b.axes, b.dtype) for b in k.buffers if b.scope == "shared" and b.name not in piped)
    rings = sum(size(b.axes, b.dtype) * stages for b in k.buffers if b.scope == "shared" and b.name in piped)
    stream = fixed + rings + phase([t for t in ts if not t.epilogue], [w for w in wins if not w.epilogue])
    epilogue = phase([t for t in ts if t.epilogue], [w for w in wins if w.epilogue])
    if k.overlap:
        return stream + epilogue
    if k.pingpong:  # emit.pingpong: each consumer warpgroup its own tiles; the ring stays live
        return 2 * fixed + rings + phase(ts, wins)
    return max(stream, fixed + epilogue)


def smem_problem(plan: Plan, k: Kernel, target: Target = DEFAULT, tiles: dict | None = None) -> str | None:
    used, limit = shared_bytes(plan, k, tiles), target.smem_per_cta
    if used <= limit:
        return None
    at = {**plan.tiles, **(tiles or {})}
    return (f"{SMEM_PREFIX}: kernel {k.name} needs {used} bytes ({used / 1024:.1f} KiB) of shared memory "
            f"at tiles {dict(sorted(at.items()))}, over the limit of {limit} bytes ({limit // 1024} KiB)")


# smallest tile T.gemm lowers on sm_90 (TileLang 0.1.15): k of an f16 MMA is 16 ("Unsupported
# k_dim 1/2" below), a warp's m slice is 16 rows, n is a multiple of 8; f64 MMA needs m = 8
MMA_MIN = {"m": 16, "n": 8, "k": 16}
WARPS_PREFIX = "warps"  # problems of a tile choice with the threads, like SMEM_PREFIX
GRID_PREFIX = "grid"  # a launch past CUDA's grid limits at the plan's tiles, like SMEM_PREFIX
INDEX_PREFIX = "32-bit indexing"
# problems of a candidate at a shape, not bugs: derive refuses the candidate with the line
# (other tiles, or another candidate, may fit; INDEX_PREFIX: another candidate that does not
# store the buffer, as flash attention does not store the scores)
TILE_PROBLEMS = (SMEM_PREFIX, WARPS_PREFIX, GRID_PREFIX, INDEX_PREFIX)


def grid_problem(plan: Plan, k: Kernel) -> str | None:
    """A launch CUDA refuses: gridDim.x over GRID_X_MAX or .y / .z over GRID_YZ_MAX. The emitter
    folds a grid whose y or z would pass into x (plan.grid_folded), so what is left is more tiles
    than x holds: larger tiles may fit."""
    dims = launch_dims(plan, k)
    if dims[0] <= GRID_X_MAX and max(dims[1:]) <= GRID_YZ_MAX:
        return None
    return (f"{GRID_PREFIX}: kernel {k.name} launches a grid of {dims} CTAs at tiles {dict(sorted(plan.tiles.items()))}, "
            f"over CUDA's limits ({GRID_X_MAX}, {GRID_YZ_MAX}, {GRID_YZ_MAX})")


def mma_shaped(plan: Plan, k: Kernel, s: Gemm) -> bool:
    """Whether T.gemm can spell contraction s of kernel k: 2-D tiles, acc = (a's free axis,
    b's free axis) (the reverse where k keeps it swapped: Kernel.swapped), b in shared memory,
    acc a fragment, no f64, extents at least MMA_MIN."""
    local = {b.name: b for b in k.buffers}
    a, b, c = local[s.a], local[s.b], local[s.acc]
    da, db, dc = (on_chip_dims(k, x.axes) for x in (a, b, c))
    if len(da) != 2 or len(db) != 2 or len(dc) != 2 or b.scope != "shared" or c.scope != "fragment":
        return False
    fa = [x for x in da if x != (s.axis_a,)]
    fb = [x for x in db if x != (s.axis_b,)]
    if len(fa) != 1 or len(fb) != 1 or "f64" in (a.dtype, b.dtype, c.dtype):
        return False
    if (fa[0], fb[0]) != tuple(dc):  # the MMA's M side is a's rows, N b's columns ...
        if (fb[0], fa[0]) != tuple(dc) or not swapped_layout(k, c.axes):  # ... or, swapped, the reverse
            return False
        fa, fb = fb, fa
    ext = {"m": math.prod(extent(plan, k, x) for x in fa[0]), "n": math.prod(extent(plan, k, x) for x in fb[0]),
           "k": extent(plan, k, s.axis_a)}
    # whole MMA pieces only (TileLang 0.1.15, sm_90, found by lowering every head dimension
    # 8..128): rows in 16s; columns in 16s (a B tile of 24 or 40 columns, N-major as V is in
    # P V, is "Not a canonical GMMA_MN layout"; 17 has no warp partition); k a multiple of the
    # MMA's k (16, tf32's 8). Other shapes run on the CUDA cores (SIMT), never fail to build.
    step = {"m": 16, "n": 16, "k": 8 if "f32" in (a.dtype, b.dtype) else 16}
    return all(ext[d] >= lo and ext[d] % step[d] == 0 for d, lo in MMA_MIN.items())


def warps_problem(plan: Plan, k: Kernel, tiles: dict | None = None) -> str | None:
    """Whether the warps can share every tensor-core GEMM tile M x N of kernel k (TileLang
    0.1.15, sm_90, both measured by lowering): some m_w x n_w = warps must cover it in
    16-row by 8-column pieces ("No valid warp partition for T.gemm" otherwise); and where a
    row of the accumulator is reduced or fed to a second GEMM (online softmax), each warp owns
    whole rows, n_w = 1 (flash at 64 rows over 8 warps: "Layout infer conflict")."""
    packing = packing_problem(plan, k, tiles) or reduce_layout_problem(plan, k, tiles)
    if packing:
        return packing
    local = {b.name: b for b in k.buffers}
    threads = (tiles or {}).get("threads", k.threads)
    warps = max(1, threads // 32)
    row_owned = {s.src for s in k.statements() if isinstance(s, Reduce)} | \
        {s.a for s in k.statements() if isinstance(s, Gemm) and s.a in local and local[s.a].scope == "fragment"}
    for s in k.statements():
        if not (isinstance(s, Gemm) and s.mma and s.acc in local):
            continue
        m, n = dim_extents(plan, k, local[s.acc].axes, tiles)
        rows = k.warp_policy == "full_row" and (s.acc in row_owned or any(
            isinstance(t, Map) and s.acc in t.args and t.dst in row_owned for t in k.statements()))
        shapes = [(mw, warps // mw) for mw in range(1, warps + 1) if warps % mw == 0]
        if rows:
            shapes = [(warps, 1)]
        if not any(m % (16 * mw) == 0 and n % (8 * nw) == 0 for mw, nw in shapes):
            need = "each warp whole rows: threads <= 2 x rows, rows a multiple of 16 x warps" if rows else \
                "pieces of 16 rows x 8 columns for every warp"
            return (f"{WARPS_PREFIX}: kernel {k.name}: {threads} threads ({warps} warps) cannot share its {m} x {n} "
                    f"GEMM tile into {s.acc} ({need}); choose other threads or blocks")
        # TileLang's own warp split of a plain GEMM (the overlap and ping-pong schedules split
        # theirs by hand, a warpgroup per block of rows or per tile)
        own_split = not (rows or k.warp_policy == "full_row" or k.overlap or k.pingpong)
        wg = _warpgroup_problem(m, n, warps, local[s.a], local[s.b], s.axis_b) if own_split else None
        if wg:
            return (f"{WARPS_PREFIX}: kernel {k.name}: {threads} threads ({warps} warps) cannot share its {m} x {n} "
                    f"GEMM tile into {s.acc} ({wg}); choose other threads or blocks")
    return None


REDUCE_LAYOUT = "has no register layout"  # in every reduce_layout_problem


def reduce_layout_problem(plan: Plan, k: Kernel, tiles: dict | None = None) -> str | None:
    """Whether TileLang 0.1.15 finds a register layout for every tile kernel k reduces with
    T.reduce_sum / T.reduce_max (plan.shared.reductions), measured by lowering (sm_90, 128 and 256
    threads, 16..256 rows and columns: benchmarks/reduce_layouts/): a deferred reduction's
    partials need their last dimension a power of two (96, 160, 192 columns: "no available layout
    found", whichever dimension is reduced; the GPU campaign's LayerNorm -> GEMM at one-wave
    64 x 96 tiles, its colsum partials 64 x 96); a GEMM accumulator reduced over its rows holds at
    most 64 of them (128 rows: "projected_reduce_var" fails at 128 and 256 threads; its row sums
    take any columns). A tile reduced where it is computed (a softmax row of 96 columns) lowers.
    An elementwise loop (a map, an iota) writing a 1-D tile of more elements than threads and no
    multiple of them finds no layout either (192 on 128 threads: the unfused kernels of a vector
    op, an iota, beside a GEMM at one-wave 64 x 192 tiles, on an H200:
    benchmarks/epilogue_masks/results/gpu-check-h200-2026-11-29.txt; by lowering:
    tests/cpu/test_fragment_layouts.py). A plan at blocks no kernel is built with
    (tiles.BLOCK_RULE: the interpreter's checks derive at blocks of 3) is never lowered: not judged."""
    blocks = [_block(t, tiles) for t in (*k.grid, *([k.stream] if k.stream else [])) if t.param not in (None, FIXED)]
    if not all(block_allowed(b) for b in blocks):
        return None
    threads = k.threads if not (tiles or {}).get("threads") or any(t.param == FIXED for t in k.grid) \
        else tiles["threads"]
    written = {s.dst for s in k.statements() if isinstance(s, (Map, Iota))}
    for b in k.buffers:
        if b.scope == "fragment" and b.name in written and len(b.axes) == 1:
            n = dim_extents(plan, k, b.axes, tiles)[0]
            if n > threads and n % threads:
                return (f"{WARPS_PREFIX}: kernel {k.name}: the {n}-element tile {b.name} {REDUCE_LAYOUT} on "
                        f"{threads} threads (past that many, TileLang needs a multiple of them); choose other blocks")
    for r in reductions(plan, k):
        dims = on_chip_dims(k, r.axes)
        ext = dim_extents(plan, k, r.axes, tiles)
        if r.layout == "partials" and ext[-1] & (ext[-1] - 1):
            return (f"{WARPS_PREFIX}: kernel {k.name}: the {' x '.join(map(str, ext))} partials of {r.dst} "
                    f"{REDUCE_LAYOUT} with {ext[-1]} columns (TileLang needs a power of two there); "
                    "choose other blocks")
        if r.layout == "gemm" and len(dims) == 2 and dims[0] == (r.axis,) and ext[0] > 64:
            return (f"{WARPS_PREFIX}: kernel {k.name}: the GEMM tile reduced over its {ext[0]} rows into {r.dst} "
                    f"{REDUCE_LAYOUT} for that reduction (at most 64 rows); choose other blocks")
    return None


def _warpgroup_problem(m: int, n: int, warps: int, a: Buffer, b: Buffer, axis_b: str) -> str | None:
    """TileLang 0.1.15's warpgroup MMA (sm_90, 16-bit operands, 64 rows or more) splits a tile
    over warpgroups of 4 warps along M, the rest along N (measured by lowering a f16 GEMM at
    blocks 64 / 96 / 128 x 16 / 32 / 48, 128 and 256 threads): the rows a multiple of 64 ("m_warp a
    multiple of 4"), and where B is N-major each warpgroup's columns a multiple of 16 ("Not a
    canonical GMMA_MN layout" at 16 or 48 columns over 2 warpgroups)."""
    if m < 64 or warps < 4 or {a.dtype, b.dtype} - ir.HALF_DTYPES:
        return None
    if m % 64:
        return "a warpgroup MMA takes rows in 64s"
    groups = warps // 4
    if b.axes[-1] != axis_b and n % (16 * groups):
        return f"an N-major B in {groups} warpgroups takes columns in {16 * groups}s"
    return None


def deferrable(plan: Plan, k: Kernel, s) -> bool:
    """Whether the Reduce `s` may be deferred (Reduce.deferred, plan.passes.defer_reductions): an
    accumulation in the body of a plain stream that may run several blocks (a row on chip, a FIXED
    block as long as its axis, runs one; FA3's loop is its own), over the
    streamed axis, of a two-axis tile into a one-axis total that no other body statement reads
    or writes (so only the statements after the stream see it, and they see the same total)."""
    st = k.stream
    if st is None or k.overlap or (st.param == FIXED and st.block >= plan.axes[st.axis]):
        return False
    if not (s in k.body and s.accumulate and s.axis in (st.axis, *st.aliases)):
        return False
    if (len(k.buffer(s.src).axes), len(k.buffer(s.dst).axes)) not in ((2, 1), (1, 0)):
        return False
    return not any(s.dst in r + w for x in k.body if x is not s for r, w in [statement_effects(x)])


def _boundary_problems(k: Kernel, where: str, out: list[str]):
    """Boundary-only statements (skip_masked_tiles' unmasked interior) run in a stream with key
    bounds; one that is no select leaves a value that only boundary-only statements read."""
    flagged = [s for s in k.statements() if getattr(s, "boundary_only", False)]
    if not flagged:
        return
    if not (k.stream and k.stream.skip) or any(s not in k.body for s in flagged):
        out.append(f"{where}: boundary-only statements outside the body of a stream with key bounds")
    for s in flagged:
        if isinstance(s, Map) and s.fn == "select":
            continue
        if isinstance(s, Load) and k.buffer(s.dst).scope != "fragment":
            out.append(f"{where}: a load into {s.dst} runs on boundary key blocks only, but {s.dst!r} is no register "
                       "tile (a shared tile's copy belongs to the pipeline's producer)")
        bad = [t for t in k.statements() if s.dst in statement_effects(t)[0] and not boundary_read(t, s.dst)]
        if bad:
            out.append(f"{where}: {s.dst} is computed on boundary key blocks only but {bad[0].op} "
                       f"{getattr(bad[0], 'dst', '')} reads it on every block")


def _kernel(plan: Plan, k: Kernel, globals_: dict, stored: set[str], inputs: set[str], out: list[str]):
    where = f"kernel {k.name}"
    local = {}
    for b in k.buffers:
        if b.scope == "global":
            continue
        if b.name in local:
            out.append(f"{where}: two buffers named {b.name!r}")
        local[b.name] = b
        for a in b.axes:
            if a not in plan.axes:
                out.append(f"{where}: buffer {b.name} has axis {a!r}, which is no axis of the plan")
    if k.stream and k.stream.split is not None and \
            not any(t.axis == k.stream.split and t.block == 1 for t in k.grid):
        out.append(f"{where}: the stream is split over {k.stream.split!r}, which is no batch axis of the grid")
    written = {st.buffer for st in k.states}
    for st in k.states:
        if st.buffer not in local:
            out.append(f"{where}: state {st.buffer!r} is no buffer of the kernel")
    has_gemm = any(isinstance(s, Gemm) for s in k.statements())
    for s in k.statements():
        if isinstance(s, Gemm) and s.mma and not mma_shaped(plan, k, s):
            out.append(f"{where}: gemm into {s.acc} is marked for tensor cores but is no 2-D MMA tile shape")
        # tensor cores multiply one dtype (TileLang refuses f32 x bf16, f16 x bf16): GPU campaign s95
        if isinstance(s, Gemm) and s.mma and s.a in local and s.b in local and \
                {local[s.a].dtype, local[s.b].dtype} - {"acc", "f32"} and local[s.a].dtype != local[s.b].dtype:
            out.append(f"{where}: gemm into {s.acc} multiplies {s.a} ({local[s.a].dtype}) by {s.b} "
                       f"({local[s.b].dtype}): tensor cores multiply operands of one dtype")
    warp = warps_problem(plan, k)
    if warp:
        out.append(warp)
    if k.warp_policy != "auto" and not has_gemm:
        out.append(f"{where}: warp policy {k.warp_policy!r} on a kernel without a GEMM")
    if k.swizzle and not (has_gemm and sum(t.block > 1 and t.param != FIXED for t in k.grid) == 2):
        out.append(f"{where}: swizzle needs a GEMM kernel with two tiled grid axes")
    if k.swizzle and grid_folded(plan, k):
        out.append(f"{where}: swizzle rasterises blockIdx.x and .y, and the grid is folded into x")
    if k.swapped and not (any(isinstance(s, Gemm) and s.mma and s.acc in local and swapped_layout(k, local[s.acc].axes)
                              for s in k.statements()) and not any(isinstance(s, Reduce) for s in k.statements())):
        out.append(f"{where}: axes {k.swapped} kept swapped, but no tensor-core GEMM accumulates over them "
                   "or a reduction reads the kernel's tiles (plan.passes.swap_operands)")
    for s in k.statements():
        if isinstance(s, Store) and s.staged and not (s.src in local and local[s.src].scope == "fragment"
                                                      and len(on_chip_dims(k, local[s.src].axes)) == 2):
            out.append(f"{where}: store {s.src}->{s.dst} is staged through shared memory, but {s.src!r} "
                       "is no 2-D fragment")
    for s in k.body:
        if isinstance(s, Reduce) and s.deferred and not deferrable(plan, k, s):
            out.append(f"{where}: reduce into {s.dst} is deferred past the stream, but is no accumulation over "
                       "the streamed axis of a 2-D tile whose total only statements after the stream read")
    _boundary_problems(k, where, out)
    for b in (k.stream.skip if k.stream else ()):
        batch = {t.axis for t in k.grid if t.block == 1}
        along = batch | ({b.row} if b.per_row else set())  # per row: the tile's rows too (coef 0)
        pair = [k.stream.skip[j] for j in b.pair if 0 <= j < len(k.stream.skip)] if b.flag else []
        if b.flag and not (b.leaf is not None and b.per_row and [c.side for c in pair] == ["lo", "hi"]
                           and all(c.per_row and not c.flag and c.offset == 0 for c in pair)):
            out.append(f"{where}: an interior flag of the key bounds is no leaf read per row with a pair of "
                       "per-row bounds (lo, hi) without margin")
        if b.leaf is not None and (b.leaf not in globals_ or not set(globals_[b.leaf].axes) <= along
                                   or (b.per_row and b.coef != 0)):
            out.append(f"{where}: a key bound reads {b.leaf!r} per CTA{' and row' if b.per_row else ''}, which is no "
                       "global along batch axes of the grid" + (" and its rows" if b.per_row else ""))
    if k.second_pass and (k.stream is None or k.stream.split or k.stream.skip or k.overlap or k.pingpong
                          or any(isinstance(s, (Gemm, Reduce, Pivot)) for s in k.second_pass)):
        out.append(f"{where}: a second pass needs a plain stream (no split, skipped blocks, overlap or ping-pong) "
                   "and holds elementwise statements, loads and stores only")
    for part, stmts in (("prologue", k.prologue), ("body", k.body), ("epilogue", k.epilogue),
                        ("second_pass", k.second_pass)):
        for j, s in enumerate(stmts):
            at = f"{where}: {part}[{j}] ({s.op})"
            reads, writes = statement_effects(s)
            for r in reads:
                if r not in local:
                    out.append(f"{at} reads {r!r}, which is no on-chip buffer of the kernel")
                elif r not in written:
                    out.append(f"{at} reads {r!r} before anything writes it")
            for w in writes:
                if w not in local:
                    out.append(f"{at} writes {w!r}, which is no on-chip buffer of the kernel")
                written.add(w)
            if isinstance(s, Load):
                if s.src not in globals_:
                    out.append(f"{at} loads {s.src!r}, which is no global buffer of the plan")
                elif s.src not in inputs and s.src not in stored:
                    out.append(f"{at} loads {s.src!r} before any kernel stores it (and it is no graph input)")
            if isinstance(s, Pivot) and s.src in local and s.dst in local:
                want = tuple(a for a in local[s.src].axes if a != s.axis)
                if part != "body" or k.stream is None or s.axis not in (k.stream.axis, *k.stream.aliases) \
                        or s.axis not in local[s.src].axes or local[s.dst].axes != want:
                    out.append(f"{at}: a pivot is taken in the stream body, over the streamed axis, from a tile "
                               f"of it into the same axes less that one ({s.src}{list(local[s.src].axes)} over "
                               f"{s.axis!r} into {s.dst}{list(local[s.dst].axes)})")
            if isinstance(s, Iota) and s.dst in local and s.axis not in local[s.dst].axes and \
                    not any(t.axis == s.axis and t.block == 1 for t in k.grid):
                out.append(f"{at}: iota over {s.axis!r} into {s.dst}{list(local[s.dst].axes)}, which lacks that axis (and it is no batch axis of the grid)")
            if isinstance(s, Store) and s.dst not in globals_:
                out.append(f"{at} stores into {s.dst!r}, which is no global buffer of the plan")


def _tail_problem(plan: Plan, k: Kernel, target: Target) -> str | None:
    """Kernel.tail_of: k runs inside the launch of the kernel right before it, which it fits
    (last_arrival.tail_fits), both kernels' shared memory at once."""
    if k.tail_of is None:
        return None
    j = plan.kernels.index(k)
    before = plan.kernels[j - 1] if j else None
    if before is None or before.name != k.tail_of:
        return f"kernel {k.name}: the tail of {k.tail_of!r}, which is not the kernel before it"
    why = tail_fits(plan, before, k)
    if why:
        return f"kernel {k.name}: no tail of {before.name}: {why}"
    used = shared_bytes(plan, before) + shared_bytes(plan, k)
    if used > target.smem_per_cta:
        return f"kernel {k.name}: as the tail of {before.name}, {used} bytes of shared memory, over {target.smem_per_cta}"
    return None


def verify(plan: Plan, graph: ir.Graph, target: Target = DEFAULT) -> list[str]:
    """Every problem of `plan` (built for `graph`), one line each; [] when well formed."""
    out: list[str] = []
    globals_ = {b.name: b for b in plan.globals}
    inputs = {n.name for n in graph.nodes if isinstance(n, ir.Input)}
    for b in plan.globals:
        for a in b.axes:
            if a not in plan.axes:
                out.append(f"global {b.name} has axis {a!r}, which is no axis of the plan")
        count = math.prod(plan.axes.get(a, 1) for a in b.axes)
        if count > ir.MAX_TENSOR_ELEMENTS:
            out.append(f"{INDEX_PREFIX}: global {b.name} holds {count} elements, more than the "
                       f"{ir.MAX_TENSOR_ELEMENTS} a kernel indexes with 32-bit integers")
    names: set[str] = set()
    stored: set[str] = set()
    writers: dict[str, list[str]] = {}
    accumulating: dict[str, set[str]] = {}  # a global -> the kernels that add into it
    for k in plan.kernels:
        if k.name in names:
            out.append(f"two kernels named {k.name!r}")
        names.add(k.name)
        _kernel(plan, k, globals_, stored, inputs, out)
        for s in k.statements():
            if isinstance(s, Store):
                if k.name not in writers.setdefault(s.dst, []):
                    writers[s.dst].append(k.name)
                if s.accumulate:
                    accumulating.setdefault(s.dst, set()).add(k.name)
                stored.add(s.dst)
        for problem in (smem_problem(plan, k, target), grid_problem(plan, k), _tail_problem(plan, k, target)):
            if problem:
                out.append(problem)
    runs = launches(plan)
    if runs and (runs[0].wait_previous or runs[-1].launch_next) or any(k.tail_of and (k.wait_previous or k.launch_next)
                                                                      for k in plan.kernels):
        out.append("dependent launch: the first kernel waits for none before it, the last launches none after it")
    for name, w in writers.items():
        if len(w) > 1 and accumulating.get(name) != set(w[1:]):
            out.append(f"global {name} is stored by {len(w)} kernels ({', '.join(w)})")
    for name, ks in accumulating.items():  # added into: stored whole by an earlier kernel first
        if writers[name][0] in ks or globals_[name].dtype not in ("acc", "f32", "f64"):
            out.append(f"global {name} is added into (an accumulating store) before any kernel stores it, "
                       "or in a dtype narrower than float32")
    for o in graph.outputs:
        buf = plan.outputs.get(o)
        if buf is None:
            out.append(f"output {o!r} has no buffer in the plan")
        elif buf not in globals_:
            out.append(f"output {o!r}: {buf!r} is no global buffer of the plan")
        elif buf not in inputs and buf not in writers:
            out.append(f"output {o!r}: no kernel stores its buffer {buf!r}")
    return out
