"""Tile parameters: the one definition of their names and ranges.

Read by `--tile k=v` on the command line, by `derive`/`replay` (a plan is never built with a
tile the emitter does not know or a block of 0), and by tuned entries (leantile.tuned) on read
(leantile.tuned). The names are the emitter's tunables (leantile.emit.tilelang.TUNABLE; a
test holds the two together).
"""
from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import ir

_Block = Optional[Annotated[int, Field(strict=True, ge=1, le=1024)]]


class Tiles(BaseModel):
    """Tile parameters: only the names the emitter tunes, strict integers in range."""
    model_config = ConfigDict(extra="forbid", strict=True)
    block_m: _Block = None
    block_n: _Block = None
    block_k: _Block = None
    block_r: _Block = None
    stages: Optional[Annotated[int, Field(strict=True, ge=1, le=8)]] = None
    threads: Optional[Annotated[int, Field(strict=True, ge=32, le=1024, multiple_of=32)]] = None
    swizzle: Optional[Annotated[int, Field(strict=True, ge=0, le=64)]] = None
    overlap: Optional[Annotated[int, Field(strict=True, ge=0, le=1)]] = None  # plan_passes.overlap
    pingpong: Optional[Annotated[int, Field(strict=True, ge=0, le=1)]] = None  # plan_passes.pingpong
    swap_ab: Optional[Annotated[int, Field(strict=True, ge=0, le=1)]] = None  # plan_passes.swap_operands
    pdl: Optional[Annotated[int, Field(strict=True, ge=0, le=1)]] = None  # plan_passes.dependent_launch
    ftz: Optional[Annotated[int, Field(strict=True, ge=0, le=1)]] = None  # plan_passes.flush_subnormals


NAMES = tuple(Tiles.model_fields)
# tile parameters that choose a schedule, not a block size (plan_passes.overlap, pingpong, swap_operands,
# dependent_launch, flush_subnormals):
# no kernel takes them as an argument, so a module's get_configs() leaves them out; a plan
# re-derived at other blocks (leantile tune) keeps its own
SCHEDULE = ("overlap", "pingpong", "swap_ab", "pdl", "ftz")


def schedule_of(tiles: dict) -> dict:
    """The schedule parameters of a plan's tiles (SCHEDULE)."""
    return {p: v for p, v in tiles.items() if p in SCHEDULE}


def tile_problems(tiles: dict, where: str = "tile") -> list[str]:
    """One line per bad tile parameter (unknown name, not an integer, out of range)."""
    try:
        Tiles.model_validate(dict(tiles))
    except ValidationError as e:
        out = []
        for err in e.errors(include_url=False):
            key = ir.shown(err["loc"][0]) if err["loc"] else "?"
            msg = (f"unknown tile parameter (known: {', '.join(NAMES)})" if err["type"] == "extra_forbidden"
                   else err["msg"])
            out.append(f"{where} {key}: {msg}")
        return out
    return []


def check_tiles(tiles: dict | None, where: str = "tile") -> dict:
    """tiles, or a GraphError naming every bad parameter."""
    problems = tile_problems(tiles or {}, where)
    if problems:
        raise ir.GraphError(problems)
    return dict(tiles or {})


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
