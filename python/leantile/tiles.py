"""Tile parameters: the one definition of their names, ranges and allowed values.

Two models. `Tiles`: the names the emitter tunes, integers in range; what `derive`/`replay`
build a plan with (a plan is never built with a tile the emitter does not know or a block of
0; the interpreter's soundness checks derive at blocks of 1, 2, 3, 5 rows, never emitted).
`UserTiles`: what a user may ask for, where the tiles go to the emitter: `--tile k=v`
(parse_tiles), a tuned entry (leantile.tuned, on read and before a write) and
`leantile.compile(tiles=)` (check_tiles): Tiles, and every block one the kernels can be built
with (BLOCK_RULE). The names are the emitter's tunables (leantile.emit.tilelang.TUNABLE; a
test holds the two together).
"""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from . import ir

_Block = Optional[Annotated[int, Field(strict=True, ge=1, le=1024)]]


_Switch = Optional[Annotated[int, Field(strict=True, ge=0, le=1)]]

# the switches' names before 2026-11-28, still read wherever tiles come from a user or a file
# (--tile, leantile.compile(tiles=), tuned entries): the new names say what they do
RENAMED = {"swap_ab": "swap_operands", "pdl": "dependent_launch", "ftz": "flush_subnormals"}


def current_names(tiles: dict) -> dict:
    """tiles with every old switch name (RENAMED) replaced by its current one."""
    return {RENAMED.get(k, k): v for k, v in tiles.items()}


class Schedule(BaseModel):
    """The schedule switches a plan's tiles may carry (0 or 1; absent: the plan pass decides).
    They choose how the kernels run, not a block size: no kernel takes them as an argument, so
    a module's get_configs() leaves them out, and a plan re-derived at other blocks (the search's
    default point, search.driver.default_point) keeps its own."""
    model_config = ConfigDict(extra="forbid", strict=True)
    overlap: _Switch = None  # FlashAttention-3's intra-warpgroup overlap (plan.passes.overlap)
    pingpong: _Switch = None  # two consumer warpgroups taking turns on a GEMM (plan.passes.pingpong)
    swap_operands: _Switch = None  # a few-row GEMM computed transposed (plan.passes.swap_operands)
    dependent_launch: _Switch = None  # programmatic dependent launch (plan.passes.dependent_launch)
    flush_subnormals: _Switch = None  # nvcc -ftz=true where an exp2 runs (plan.passes.flush_subnormals)
    fast_math: _Switch = None  # nvcc --use_fast_math on transcendental epilogues storing 16-bit floats (plan.passes.fast_math)
    last_arrival: _Switch = None  # a split reduction's combine run by its slices' last CTA (plan.passes.last_arrival; off by default)
    stage_loads: _Switch = None  # a streamed row kernel's loads through a pipelined shared tile (plan.passes.stage_loads; off by default)

    @model_validator(mode="before")
    @classmethod
    def _current_names(cls, v):
        return current_names(v) if isinstance(v, dict) else v


class Tiles(Schedule):
    """Tile parameters: the block sizes, stages, threads and swizzle the emitter tunes, and the
    schedule switches (Schedule); strict integers in range, old switch names read (RENAMED)."""
    block_m: _Block = None
    block_n: _Block = None
    block_k: _Block = None
    block_r: _Block = None
    stages: Optional[Annotated[int, Field(strict=True, ge=1, le=8)]] = None
    threads: Optional[Annotated[int, Field(strict=True, ge=32, le=1024, multiple_of=32)]] = None
    swizzle: Optional[Annotated[int, Field(strict=True, ge=0, le=64)]] = None


BLOCKS = ("block_m", "block_n", "block_k", "block_r")
BLOCK_MAX = 1024  # _Block's range
BLOCK_STEP = 32
BLOCK_RULE = f"a power of two (1, 2, 4, ..., {BLOCK_MAX}) or a multiple of {BLOCK_STEP} up to {BLOCK_MAX}"
# Why (TileLang 0.1.15 lowering for sm_90, on the CPU, matmul 512 x 512 x 1024 f16): a block of
# 3 or 5 rows or columns has no fragment layout over the threads ("no available layout found");
# 48, 80, 112 and 16 columns of the N-major weight tile are "Not a canonical GMMA_MN layout",
# while 32, 96, 160, 192, 224 lowered. Every block the shipped code uses is allowed: the search's
# domains (16..256), the tuned configs (64..256), the shapes' defaults (derive/shape_tiles: 2 x
# 1024 softmax rows, 16 swapped rows, 96 and 192 one-wave columns, f64's halved 64 x 32).
# (A 16-column weight tile passes this rule and still fails to lower: a limit of one kernel kind,
# not of the value.)


def block_allowed(v: int) -> bool:
    """Whether v is a block the kernels can be built with (BLOCK_RULE)."""
    return 1 <= v <= BLOCK_MAX and (v & (v - 1) == 0 or v % BLOCK_STEP == 0)


def _nearest(v: int) -> str:
    lo = next((x for x in range(min(v, BLOCK_MAX), 0, -1) if block_allowed(x)), None)
    hi = next((x for x in range(v, BLOCK_MAX + 1) if block_allowed(x)), None)
    return " or ".join(str(x) for x in dict.fromkeys(x for x in (lo, hi) if x is not None))


class UserTiles(Tiles):
    """Tiles a user asks for (--tile, a tuned entry, leantile.compile): every block BLOCK_RULE."""

    @field_validator(*BLOCKS)
    @classmethod
    def _emittable(cls, v):
        if v is not None and not block_allowed(v):
            raise PydanticCustomError("tile_block", "{value} is not a block the kernels can use: allowed is "
                                      "{rule} (nearest: {near})", {"value": v, "rule": BLOCK_RULE, "near": _nearest(v)})
        return v


SCHEDULE = tuple(Schedule.model_fields)
NAMES = tuple(n for n in Tiles.model_fields if n not in SCHEDULE) + SCHEDULE  # sizes first, as printed


def schedule_of(tiles: dict) -> Schedule:
    """The schedule switches of a plan's tiles, typed."""
    return Schedule.model_validate({k: v for k, v in current_names(tiles).items() if k in SCHEDULE})


def tile_problems(tiles: dict, where: str = "tile", user: bool = True) -> list[str]:
    """One line per bad tile parameter (unknown name, not an integer, out of range, and where
    `user`, a block the kernels cannot use: UserTiles)."""
    twice = [f"{where} {ir.shown(k)}: given twice, as {ir.shown(k)} and its old name {ir.shown(o)}"
             for o, k in RENAMED.items() if o in tiles and k in tiles]
    if twice:
        return twice
    try:
        (UserTiles if user else Tiles).model_validate(dict(tiles))
    except ValidationError as e:
        out = []
        for err in e.errors(include_url=False):
            key = ir.shown(err["loc"][0]) if err["loc"] else "?"
            msg = (f"unknown tile parameter (known: {', '.join(NAMES)})" if err["type"] == "extra_forbidden"
                   else err["msg"])
            out.append(f"{where} {key}: {msg}")
        return out
    return []


def check_tiles(tiles: dict | None, where: str = "tile", user: bool = True) -> dict:
    """tiles (old switch names replaced: RENAMED), or a GraphError naming every bad parameter
    (user False: Tiles' ranges only, what a plan may be built with; derive's own check)."""
    problems = tile_problems(tiles or {}, where, user)
    if problems:
        raise ir.GraphError(problems)
    return current_names(dict(tiles or {}))


def parse_tiles(pairs: list[str] | None) -> dict[str, int]:
    """`--tile k=v ...` -> {k: v}, checked: one line naming the bad pair."""
    out: dict[str, int] = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise ir.GraphError([f"--tile {ir.shown(p)}: expected name=value"])
        v = v.strip()
        if not v.isascii() or not v.isdigit() or len(v) > 6:
            raise ir.GraphError([f"--tile {ir.shown(p)}: {ir.shown(v)} is not a positive integer"])
        if k in out:  # the last one silently winning hides a typo
            raise ir.GraphError([f"--tile {ir.shown(p)}: {ir.shown(k)} given twice ({ir.shown(k)}={out[k]} before)"])
        out[k] = int(v)
    return check_tiles(out, "--tile")
