"""The search space of one workload: derivation candidates x tile parameters.

A point is (candidate, tiles), where tiles holds only the parameters the candidate's
kernels use (an attention plan has no block_k). Points are valid for the shape:

  - a block is never beyond the next power of two of the largest axis it tiles (as the
    emitter's own get_configs rule: a larger block only computes padding);
  - every kernel passes the plan verifier's tile checks at the point's tiles (plan.verify:
    the warps can share every tensor-core tile, whole rows per warp where the accumulator
    feeds a row reduction or a second GEMM; shared memory, streamed tiles times `stages`,
    within 227 KiB), judged on the plan of the default tiles with the point's blocks: one
    model for the search and for derive, no second one here;
  - fragments (summed as if all were live at once, an over-count) stay under 4 KiB per
    thread: 128x128 attention at 128 threads counts 1.8 KiB and still ran (2.3x slower,
    spilling), so only grossly spilling points are cut.

Everything else is left to the measurement: a point that fails to lower or compile is
recorded as such and costs one unit of budget.
"""
from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass, field

from .. import ir
from ..files import load_json
from ..plan import Plan
from ..plan.verify import DTYPE_BYTES, extent, smem_problem, warps_problem
from ..tiles import SCHEDULE, current_names

DOMAINS: dict[str, tuple[int, ...]] = {
    "block_m": (64, 128, 256),
    "block_n": (64, 128, 256),
    "block_k": (32, 64, 128),
    "block_r": (16, 32, 64, 128),  # standalone reduction kernels (row statistics, column sums)
    "stages": (1, 2, 3, 4),
    # no 384: 12 warps never compiled on the H200 (docs/search.md: no wgmma warp partition of
    # any block here, no layout for the row-statistics reduction), so it only spent budget
    "threads": (128, 256, 512),
}
# a point's parameters in order: the searched ones, then the schedule (tiles.SCHEDULE: overlap,
# swap_operands, dependent_launch, flush_subnormals, fast_math), which no domain holds: only the default plan's point carries them (driver.default_point)
ORDER = ("block_m", "block_n", "block_k", "block_r", "stages", "threads", *SCHEDULE)
FRAG_BYTES_PER_THREAD = 4096  # see the module docstring: an over-count, so a loose bound


class NoSpace(ValueError):
    """A workload whose every point is invalid: one line, and the other workloads go on."""


@dataclass(frozen=True, order=True)
class Point:
    candidate: str
    tiles: tuple[tuple[str, int], ...]  # sorted by ORDER

    @staticmethod
    def make(candidate: str, tiles: dict) -> "Point":
        tiles = current_names(tiles)  # a database row of before the switches' rename (tiles.RENAMED)
        return Point(candidate, tuple((p, int(tiles[p])) for p in ORDER if p in tiles))

    @property
    def tile_dict(self) -> dict[str, int]:
        return dict(self.tiles)

    def key(self) -> str:
        return json.dumps({"candidate": self.candidate, "tiles": self.tile_dict}, sort_keys=True)

    @staticmethod
    def from_key(s: str) -> "Point":
        """The point of a key (a database row's `point`); ValueError, TypeError, KeyError or
        AttributeError where s is not one (files.load_json: nesting too deep is a ValueError)."""
        d = load_json(s)
        return Point.make(d["candidate"], d["tiles"])

    def __str__(self) -> str:
        return f"{self.candidate}[" + ",".join(f"{k[6:] if k.startswith('block_') else k}={v}"
                                             for k, v in self.tiles) + "]"


@dataclass
class CandidateInfo:
    name: str
    params: tuple[str, ...]  # tile parameters used, in ORDER
    defaults: dict[str, int]
    limits: dict[str, int] = field(default_factory=dict)  # largest axis each block param tiles
    plan: Plan | None = None  # at the default tiles; each point is judged on it with its own blocks

    def check(self, t: dict) -> str | None:
        """None when the tiles are valid for this candidate, else the reason."""
        for p in self.params:
            if p not in t:
                return f"missing {p}"
        for p, lim in self.limits.items():
            # the smallest block of the domain is always allowed: a 16-row GEMM (decode, m=16)
            # pads a 64-row tile rather than having no point at all
            if p in t and t[p] > max(16, 1 << max(0, (lim - 1).bit_length()), min(DOMAINS.get(p, (0,)))):
                return f"{p}={t[p]} beyond axis {lim}"
        plan = self.plan
        for k in plan.kernels:
            problem = warps_problem(plan, k, t) or smem_problem(plan, k, tiles=t)
            if problem:
                return problem
            if "threads" in t:
                frag = sum(math.prod(extent(plan, k, a, t) for a in b.axes) * DTYPE_BYTES.get(b.dtype, 4)
                           for b in k.buffers if b.scope == "fragment")
                if frag / t["threads"] > FRAG_BYTES_PER_THREAD:
                    return f"fragments {frag / t['threads']:.0f} B/thread > {FRAG_BYTES_PER_THREAD}"
        return None


def analyse(g: ir.Graph, cand: str) -> CandidateInfo:
    """Which tile parameters a candidate's kernels use (the plan's own records: the tile
    parameter of every blocked axis), and the plan at the default tiles."""
    from ..derive import derive
    from ..derive.context import Ctx
    from ..derive.shape_tiles import default_tiles

    defaults = default_tiles(Ctx(g))  # DEFAULT_TILES, made to fit an f64 graph
    plan = derive(g, cand, dict(defaults))
    used: set[str] = {"threads"}
    info = CandidateInfo(cand, (), {}, plan=plan)
    for k in plan.kernels:
        axis_param: dict[str, str] = {t.axis: t.param for t in k.grid if t.param}
        if k.stream:
            used.add("stages")
            if k.stream.param:
                axis_param[k.stream.axis] = k.stream.param
                for a in k.stream.aliases:
                    axis_param.setdefault(a, k.stream.param)
        used |= set(axis_param.values())
        for a, p in axis_param.items():
            if a in plan.axes and p in ("block_m", "block_n", "block_k", "block_r"):
                info.limits[p] = max(info.limits.get(p, 0), plan.axes[a])
    info.params = tuple(p for p in ORDER if p in used)
    info.defaults = {p: int(defaults[p]) for p in info.params}
    return info


class Space:
    """All valid points of one graph. Small (hundreds of points), so enumerated eagerly."""

    def __init__(self, g: ir.Graph, domains: dict | None = None, include_unfused: bool = False,
                 candidates: list[str] | None = None, infos: dict[str, CandidateInfo] | None = None):
        from ..derive import candidates as all_candidates

        self.graph = g
        self.domains = {**DOMAINS, **(domains or {})}
        if infos is not None:
            self.infos = dict(infos)
        else:
            names = [c.name for c in all_candidates(g)]
            if not include_unfused and len(names) > 1:
                names = [n for n in names if n != "unfused"]
            if candidates:
                unknown = set(candidates) - set(names)
                if unknown:
                    raise ValueError(f"{g.name}: no candidate(s) {sorted(unknown)} (have {names})")
                names = [n for n in names if n in candidates]
            self.infos = {n: analyse(g, n) for n in names}
        self.candidates = list(self.infos)
        self._points: dict[str, list[Point]] = {}
        for c, info in self.infos.items():
            pts = []
            for vals in itertools.product(*(self.domains[p] for p in info.params)):
                t = dict(zip(info.params, vals))
                if info.check(t) is None:
                    pts.append(Point.make(c, t))
            self._points[c] = pts
        self.all = [p for c in self.candidates for p in self._points[c]]
        self._set = set(self.all)
        if not self.all:
            why = "; ".join(f"{c}: {info.check(info.defaults) or 'every point invalid'}" for c, info in self.infos.items())
            raise NoSpace(f"{g.name}: no valid point in the search space at shape {dict(g.axes)} ({why})")

    def __len__(self):
        return len(self.all)

    def __contains__(self, p: Point) -> bool:
        return p in self._set

    def why_invalid(self, p: Point) -> str | None:
        if p.candidate not in self.infos:
            return f"unknown candidate {p.candidate!r}"
        return self.infos[p.candidate].check(p.tile_dict)

    # ------------------------------------------------------------------ moves
    def domain_index(self, p: str, v: int) -> float:
        """v's index in p's domain, or the index of the nearest value (in log2) where v is off it."""
        dom = self.domains[p]
        return dom.index(v) if v in dom else min(range(len(dom)), key=lambda i: abs(math.log2(dom[i] / v)))

    def repair(self, candidate: str, tiles: dict) -> Point:
        """The valid point of `candidate` nearest to `tiles` (index distance per parameter)."""
        info = self.infos[candidate]
        want = {p: tiles.get(p, info.defaults[p]) for p in info.params}
        p0 = Point.make(candidate, want)
        if p0 in self._set:
            return p0
        return min(self._points[candidate],
                   key=lambda q: (sum(abs(self.domain_index(k, v) - self.domain_index(k, want[k]))
                                      for k, v in q.tiles), q))

    def default(self, candidate: str | None = None) -> Point:
        """The derivation's own default tiles (shape_tiles.default_tiles), made valid."""
        c = candidate or self.candidates[0]
        return self.repair(c, self.infos[c].defaults)

    def random(self, rng: random.Random) -> Point:
        return rng.choice(self.all)

    def neighbours(self, p: Point) -> list[Point]:
        """One parameter one step up or down its domain, or the same tiles under another
        candidate (repaired). Only valid points."""
        out: list[Point] = []
        t = p.tile_dict
        for k, v in p.tiles:
            if k not in self.domains:  # a schedule parameter: never searched
                continue
            dom = self.domains[k]
            i = dom.index(v) if v in dom else int(self.domain_index(k, v))
            for j in (i - 1, i + 1):
                if 0 <= j < len(dom):
                    q = Point.make(p.candidate, {**t, k: dom[j]})
                    if q in self._set:
                        out.append(q)
        for c in self.candidates:
            if c != p.candidate:
                q = self.repair(c, t)
                if q not in out:
                    out.append(q)
        return out

    def mutate(self, p: Point, rng: random.Random, steps: int = 1) -> Point:
        for _ in range(steps):
            nb = self.neighbours(p)
            if nb:
                p = rng.choice(nb)
        return p

    def crossover(self, a: Point, b: Point, rng: random.Random) -> Point:
        """Uniform crossover: the candidate of one parent, each parameter from either."""
        cand = rng.choice([a.candidate, b.candidate])
        ta, tb = a.tile_dict, b.tile_dict
        keys = self.infos[cand].params
        child = {}
        for k in keys:
            opts = [t[k] for t in (ta, tb) if k in t]
            child[k] = rng.choice(opts) if opts else self.infos[cand].defaults[k]
        return self.repair(cand, child)
