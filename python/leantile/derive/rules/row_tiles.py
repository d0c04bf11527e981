"""Tiles of the region rules' row kernels (rules.regions): rows per CTA of an on-chip row kernel
and of a streamed one, a column reduction's coalesced block, the rows a two-pass kernel holds,
and a second tiled row axis where the reduced axes lie before the innermost kept one. Each figure
is the measurement its comment cites."""
from __future__ import annotations

import math

from ..context import Ctx
from .base import padded

ON_CHIP = 16384  # elements of one on-chip row tile: 32 float32 registers per thread at 512 threads
# the elements one CTA reduces where the grid has nothing else to spread (a reduction into a
# scalar): past it the axis streams and split_reduction spreads it over CTAs (issue 49)
ONE_CTA = 8192

# A column reduction (the reduced axis is not the source's last, contiguous one: a norm's gain
# gradient, sum over rows of [m, d]) holds this many of the contiguous kept axis a CTA: its loads
# are rows of 128 elements (256 bytes of f16). Held on chip as a whole column, a CTA took 2 of them
# (4 bytes a row of 8192, each CTA reading its own 2 columns of every row).
COLUMN_ROWS = 128
# a column reduction held whole on chip at fewer kept elements a CTA than this streams instead
COLUMN_ON_CHIP_MIN = 32


def column_layout(axes, axis: str) -> bool:
    """Whether reducing `axis` of a source over `axes` is a column reduction: the contiguous last
    axis is kept (a row axis), the reduced one is outer."""
    return len(axes) > 1 and axes[-1] != axis


STREAM_BLOCK = 1024  # elements of a streamed row's block (a row kernel's stream step)


def streamed_rows(cx, rows, axis: str, tile: int = 8192, column: bool = False) -> tuple[int, int]:
    """(rows per CTA, block of `axis`) of a kernel streaming `axis` over rows (the last of
    `rows` tiled): blocks of up to 1024 of the axis, and few enough rows per CTA that the grid
    has about two CTAs per SM, within `tile` elements per block (the GEMM's block_r = 128 left a
    cross entropy over 8192 x 32000 on 64 CTAs, rmsnorm's row statistics over 1024 rows on 8).
    A column reduction (column_layout) holds COLUMN_ROWS of the contiguous kept axis and streams
    `axis` in blocks of tile // COLUMN_ROWS: coalesced rows; split_reduction fills the GPU."""
    if column and rows:
        r = max(2, min(COLUMN_ROWS, padded(cx.axes[rows[-1]])))
        return r, max(2, min(padded(cx.axes[axis]), tile // r))
    d = min(STREAM_BLOCK, padded(cx.axes[axis]))
    return (max(2, min(tile // d, padded(cx.axes[rows[-1]]), _fill(rows, cx))) if rows else 1), d


def _fill(rows, cx) -> int:
    """Rows per CTA that leave the grid about two CTAs per SM (a power of two, at least 2)."""
    total = math.prod(cx.axes[a] for a in rows)
    return 1 << max(1, (max(2, total // 264)).bit_length() - 1)


# A streamed block of 16-bit rows one warp wide: 32 lanes of one 16-byte vector, 256 elements. At
# STREAM_BLOCK's 1024 TileLang spreads a row's block over 128 threads, so each block's max and sum
# cross four warps (a shared-memory all-reduce and a barrier per row, per block, per reduction);
# at 256 a row is one warp's (a shuffle all-reduce, no barrier) and the kernel holds half the
# registers. H200, whole plans (benchmarks/row_tiles/results/row-tiles-probe-h200-2026-11-30-stream-block.*):
# cross-entropy over 8192 x 32000 f16, one pass, 8 rows a CTA at 1024 -> 16 at 256: 0.3239 -> 0.1550
# ms (torch.compile 0.3525). Where a CTA holds few rows it loses: log-softmax's two-pass kernel at 2
# rows 0.1098 -> 0.2102 (2 elements a thread a block), an MSE loss's split slices 0.0649 -> 0.0805.
# Float32 rows are laid out across all the threads at any block (no warp a row): they keep 1024.
WARP_BLOCK = 256
WARP_ROWS = 16  # the fewest rows a CTA for WARP_BLOCK: two a warp at 256 threads


def warp_rows(cx, rows, axis: str, tile: int, widths: set[int]) -> tuple[int, int] | None:
    """(rows per CTA, WARP_BLOCK) for a one-pass, unsplit streamed row kernel whose streamed loads
    are all 16-bit (`widths`: their bytes per element), where the grid still fills the GPU at
    WARP_ROWS rows or more a CTA; None where streamed_rows' block stands."""
    if not rows or widths != {2} or cx.axes[axis] <= WARP_BLOCK:
        return None
    r = min(tile // WARP_BLOCK, padded(cx.axes[rows[-1]]), _fill(rows, cx))
    return (r, WARP_BLOCK) if r >= WARP_ROWS else None


# rows of a two-pass streamed row kernel (plan.Kernel.second_pass) share a CTA while the tensors
# its second pass reads again hold at most this many bytes of them (that read should find them in
# L2). Log-softmax on an H200 (benchmarks/second_pass/results/second-pass-h200-2026-11-29.json), ms
# at 2 / 4 / 8 rows a CTA against the two kernels before: 2048 x 32000 f16 0.1391 / 0.1278 / 0.1486
# against 0.1318; 4096 x 50257 bf16 0.6406 / 0.7115 / 0.8269 against 0.8072. The best of each held
# about 256 KB of its one 16-bit input a CTA (4 x 32000, 2 x 50257). Log-softmax's backward reads
# two (the cotangent and the output): at 4 rows of 32000, 512 KB a CTA, it ran 0.252 ms against
# torch.compile's 0.185 (benchmarks/train_rows/results/step-kernels-h200-2026-11-30.json). Probed again on
# 2026-11-30 in one call on whole plans (benchmarks/row_tiles/results/row-tiles-probe-h200-2026-11-30-streamed.*),
# 2 rows a CTA (128 KB) against 4 (256 KB): 2048 x 32000 f16 0.1095 against 0.1193 ms, 4096 x 32000 bf16
# 0.2130 against 0.2424 (the order flipped since the first probe, other kernels' changes between)
TWO_PASS_BYTES = 131072


def two_pass_rows(cx, rows, axis: str, column: bool = False, row_bytes: int = 2) -> int:
    """Rows per CTA of a streamed row kernel with a second pass that reads `row_bytes` bytes per
    element of the row again (every tensor it streams): streamed_rows' block, fewer where the rows
    are long (at least 2: a block of 1 would make the rows a batch axis); a column reduction keeps
    its coalesced block."""
    block, _ = streamed_rows(cx, rows, axis, column=column)
    if column:
        return block
    fit = max(1, TWO_PASS_BYTES // (cx.axes[axis] * max(1, row_bytes)))
    return max(2, min(block, 1 << (fit.bit_length() - 1)))


# A two-pass row kernel over rows of a vocabulary's length streams blocks of LONG_ROW_BLOCK: at
# STREAM_BLOCK each CTA walks its 2 rows in 126 synchronous 4 KB loads a pass (a fragment's load is
# not prefetched), and the few CTAs (a 1024-token chunk: 512) leave DRAM's latency uncovered. H200,
# the LM head's training step, 1024 x 128256 bf16 a chunk (g40 / g41:
# benchmarks/train_rows/results/step-kernels-h200-2026-11-30-lm-head-step-*.json): the row kernel
# 6.14 -> 3.07 ms over 8 chunks, the step 47.6 -> 45.5 ms (torch.compile 39.8). Measured there only:
# shorter rows keep STREAM_BLOCK (log-softmax over 32000 at 2 rows: 1024 beat 512 and 256, larger
# not probed).
LONG_ROW = 65536
LONG_ROW_BLOCK = 4096


def two_pass_block(cx, axis: str, d: int, column: bool = False) -> int:
    """The stream block of a two-pass row kernel over `axis`: LONG_ROW_BLOCK for rows of LONG_ROW
    or more (not a column reduction), else streamed_rows' `d`."""
    return LONG_ROW_BLOCK if not column and cx.axes[axis] >= LONG_ROW else d


def streamed_ctas(cx, rows, axis: str, column: bool = False) -> int:
    """CTAs of a streamed row kernel over `axis` at streamed_rows' row block (the grid
    split_reduction judges and a second pass is allowed by)."""
    block, _ = streamed_rows(cx, rows, axis, column=column)
    ctas = 1
    for a in rows:
        ctas *= -(-cx.axes[a] // block) if a == rows[-1] else cx.axes[a]
    return ctas


def on_chip_extent(cx: Ctx, reduced) -> int:
    """Elements of one row on chip: the product of the padded sizes of the reduced axes."""
    d = 1
    for a in ([reduced] if isinstance(reduced, str) else reduced):
        d *= max(2, padded(cx.axes[a]))
    return d


# elements of one CTA's on-chip row tile where the reduced axes are the innermost (a row layout): a
# CTA holds 2 rows of 1024 or more (the fewest a row reduction keeps: row_block), 4 of 512, ...
# Small CTAs keep more rows in flight per SM than large ones of the same elements per thread. H200,
# whole plans (benchmarks/row_tiles/probe.py; results/row-tiles-probe-h200-2026-11-30-*), ms at the
# shipped 4 x 4096 on 256 threads -> 2 rows on 128 threads: RMSNorm-with-gain backward 8192 x 4096
# 0.1097 -> 0.0851, LayerNorm affine backward 0.1298 -> 0.0914, its forward 0.0392 -> 0.0349,
# LayerNorm 8192 x 5120 0.0584 -> 0.0439; at 16 x 1024 / 8 x 2048 on 256 threads -> 2 rows on 128:
# RMSNorm-gain backward 16384 x 1024 0.0568 -> 0.0436, 16384 x 2048 0.1315 -> 0.0848, LayerNorm affine
# backward 16384 x 2048 0.1667 -> 0.0909; at 2 x 8192 on 256 -> 128 threads 0.1934 -> 0.1683 (64 threads
# spilled: 0.4324). 4 or 8 rows on 128 threads were never faster than 2.
ROW_TILE = 2048


def _row_layout(axes, reduced, rows) -> bool:
    """Whether the reduced axes all lie after the innermost kept one (a row's elements contiguous)."""
    return bool(rows) and min(axes.index(a) for a in reduced) > axes.index(rows[-1])


def row_block(cx: Ctx, axes, reduced) -> int | None:
    """Rows per CTA of an on-chip row kernel reducing `reduced` (an axis or several), or None
    if two rows do not fit. At least two rows where there are rows (a block of 1 would make the
    row axis a batch axis and the reductions scalar, which TileLang reduces serially); at most
    64, and few enough that the grid has about two CTAs per SM of an H100/H200 (132 SMs). A row
    layout holds ROW_TILE elements (measured); reduced axes before a kept one (a column sum held
    on chip, a sum over heads) up to ON_CHIP, as before that measurement."""
    reduced = (reduced,) if isinstance(reduced, str) else tuple(reduced)
    d = on_chip_extent(cx, reduced)
    rows = [a for a in axes if a not in reduced]
    if not rows:  # one CTA for the whole reduction: past ONE_CTA it streams, split over CTAs
        return 1 if d <= ONE_CTA else None
    if 2 * d > ON_CHIP:
        return None
    total = 1
    for a in rows:
        total *= cx.axes[a]
    fill = 1 << max(1, (max(2, total // 264)).bit_length() - 1)
    tile = ROW_TILE if _row_layout(axes, reduced, rows) else ON_CHIP
    # a power of two (an exact row extent such as 5120 leaves ON_CHIP // d at 3)
    return max(2, min(1 << (max(1, tile // d).bit_length() - 1), padded(cx.axes[rows[-1]]), 64, fill))


# elements an on-chip row tile holds at least where it can (GQA's group sums of dK, dV took 4 x 64
# float32 tiles, 16384 CTAs: 0.089 ms on an H200 for 34 MB; tests/cpu/test_head_reductions.py)
MIN_TILE = 4096


def outer_row_block(cx: Ctx, axes, reduced, block: int) -> tuple[str, int] | None:
    """(axis, rows per CTA) of a second tiled row axis of an on-chip row kernel whose reduced axes
    lie before the innermost kept one (a sum over heads of [g, t, d]), so that a CTA holds about
    MIN_TILE elements while the grid still fills the GPU twice; None where it holds that many."""
    reduced = (reduced,) if isinstance(reduced, str) else tuple(reduced)
    rows = [a for a in axes if a not in reduced]
    if len(rows) < 2 or not reduced or max(axes.index(a) for a in reduced) > axes.index(rows[-1]):
        return None
    tile = block * on_chip_extent(cx, reduced)
    ctas = math.prod(cx.axes[a] for a in rows[:-1]) * math.ceil(cx.axes[rows[-1]] / block)
    want = min(MIN_TILE // tile, max(1, ctas // 264), padded(cx.axes[rows[-2]]), 64) if tile < MIN_TILE else 1
    want = 1 << (want.bit_length() - 1)
    return (rows[-2], want) if want >= 2 else None


def row_threads(cx: Ctx, axes, reduced) -> int:
    """Threads of an on-chip row kernel: 128 for a row layout (ROW_TILE's measurements: 2 x 8192
    on 128 threads 0.1683 ms against 0.1934 on 256); otherwise 256 (128 for small tiles), as
    measured on an H200 over an 8192 x 8192 f16 row tile of 2 x 8192 before (LayerNorm, softmax,
    log-softmax: 256 threads 0.069 / 0.073 / 0.071 ms, 512 threads 0.072 / 0.079 / 0.128 ms,
    1024 threads 0.147 / 0.153 / 0.157 ms; 2026-11-24); the fragments are reused in place."""
    reduced = (reduced,) if isinstance(reduced, str) else tuple(reduced)
    rows = [a for a in axes if a not in reduced]
    if _row_layout(axes, reduced, rows):
        return 128
    block = row_block(cx, axes, reduced) or 1
    block *= (outer_row_block(cx, axes, reduced, block) or (None, 1))[1]
    return 256 if block * on_chip_extent(cx, reduced) >= 256 * 16 else 128
