"""The grid of a kernel: its output axes, each tiled by a tile parameter (a row block) or one
per CTA (a batch axis), and the flash kernel's grid, which derive.rules.split counts CTAs over
to choose a split (so it sits below both the rules and the kernel builders)."""
from __future__ import annotations

from ..plan import FIXED, Tile
from .context import Ctx
from .sites import FlashSite

# Heads x query positions as one row dimension (Kernel.packed) for t_q > 1. Off: correct (the
# interpreter, CPU lowering and the GPU tests check it with this on) but measured slower than a
# head per CTA on the H200 (32 query / 8 KV heads, t = 2048: 0.185 ms against 0.139; t = 4096:
# 0.613 against 0.521; t_q = 16: 0.046 against 0.035; benchmarks/gqa_packing/results/gqa-packing-2026-11-25.json):
# a head's rows of the swizzled Q and O tiles are no TMA box, so TileLang 0.1.15 copies them with
# plain loads before the producer warp starts. A prefill tile is full either way (no row to
# gain); one query (decode) packs the heads as the rows and is not affected.
PACK_QUERY_ROWS = False


def grid_tile(axis: str, block: int, param: str | None, divisor: int = 1) -> Tile:
    """One grid axis: tiled `block` at a time (by tile parameter `param`, or FIXED), or one per CTA."""
    return Tile(axis=axis, block=block, param=param, divisor=divisor)


def tiled_grid(axes, tiled: dict[str, str], tiles: dict) -> list[Tile]:
    """Tile the named axes with the named tile parameters; every other axis is a batch axis."""
    return [grid_tile(a, tiles[tiled[a]], tiled[a]) if a in tiled else grid_tile(a, 1, None) for a in axes]


def flash_grid(g: Ctx, s: FlashSite, tiles: dict, pack: bool) -> tuple[list[Tile], tuple[str, ...]]:
    """(grid, packed row axes) of a flash kernel, over the scores' axes less the key axis.
    Unpacked, the query axis is tiled by block_m and every other axis is a batch axis. Packed
    (pack_query_group, Q's head axis s.group): with one query (decode) the heads are tiled by
    block_m (the query axis a batch axis); with PACK_QUERY_ROWS (rules.group), where block_m is a multiple of
    the heads G, a tile holds all G heads times block_m / G query positions, one row dimension
    on chip (Kernel.packed). Otherwise it stays unpacked."""
    axes = [a for a in g.node(s.qk).axes if a != s.axis]
    if pack and s.group:
        heads, queries, bm = g.axes[s.group], g.axes[s.row], tiles["block_m"]
        if queries == 1:
            return tiled_grid(axes, {s.group: "block_m"}, tiles), ()
        if PACK_QUERY_ROWS and bm % heads == 0 and heads < bm:
            return [grid_tile(a, heads, FIXED) if a == s.group else grid_tile(a, bm // heads, "block_m", heads)
                    if a == s.row else grid_tile(a, 1, None) for a in axes], (s.group, s.row)
    return tiled_grid(axes, {s.row: "block_m"}, tiles), ()
