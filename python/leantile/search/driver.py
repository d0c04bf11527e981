"""The search loop: propose a batch -> replay from the DB or measure -> observe.

Budget = number of points evaluated in a run (a point that fails to compile counts: it cost
compile time). Resuming: the policy is deterministic given its seed and what it observes, so
running it again against the same run's rows reproduces the stopped search exactly (each
proposal is answered from the DB) and then continues with new measurements. Only rows of the
run's own measurer (`gpu`: "fake" or the GPU model) are replayed.

A row that cannot be written (the DB failed mid-run) does not lose the batch: the run observes
all of it, stops writing, and `run_lockstep` raises the DBError after the round, so that the
caller still has every run's best so far (`SearchRun.result()`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from .. import architectures, ir
from ..sources import load_source, load_source_at
from ..tuned import check_entry, valid_time
from .db import DBError, SearchDB
from .policy import MomentumParams, make_policy
from .roofline import H200, Ceilings, workload_cost
from .space import Point, Space
from .workers import measure_batches


@dataclass(frozen=True)
class Workload:
    arch: str  # the graph's name (what tuned files and the DB key by)
    sizes: tuple[tuple[str, int], ...]  # the full shape, sorted
    dtype: str = "f16"
    source: str = ""  # where the graph comes from (leantile.sources); "" = the built-in `arch`

    @staticmethod
    def builtin(arch: str, sizes: dict | None = None) -> "Workload":
        return Workload.from_source(arch, sizes)

    @staticmethod
    def from_source(source: str, sizes: dict | None = None) -> "Workload":
        """A built-in name, an exports/*.json file or module.py:function (with axis overrides
        where the source takes them); errors name the source."""
        g = load_source(source, sizes or {})
        dt = g.inputs()[0].dtype if g.inputs() else "f16"
        return Workload(g.name, tuple(sorted(g.axes.items())), dt,
                        "" if source in architectures.NAMES else source)

    @property
    def spec(self) -> str:
        """What leantile.sources loads it from (the built-in name when `source` is empty)."""
        return self.source or self.arch

    def graph(self) -> ir.Graph:
        return load_source_at(self.spec, dict(self.sizes))

    @property
    def key(self) -> str:
        return f"{self.arch}:" + ",".join(f"{k}={v}" for k, v in self.sizes) + f":{self.dtype}"


@dataclass
class SearchResult:
    workload: Workload
    run: str
    best: Point | None
    best_ms: float
    target_ms: float
    evaluated: int  # points evaluated in the run (replayed + new)
    new: int  # measured in this call
    replayed: int
    history: list[dict] = field(default_factory=list)  # one per evaluation, in order
    events: list[dict] = field(default_factory=list)


def run_name(policy: str, islands: int, seed: int) -> str:
    return f"{policy}-k{islands}-s{seed}"


class SearchRun:
    """One search, stepwise: `propose()` the points to measure, `observe()` their results.

    Stepwise so that several runs can share one measurer in lockstep (`run_lockstep`): every
    round the union of their proposals compiles and measures as one batch, which fills the
    compile pool and the GPUs where one run's batch of K points would not."""

    def __init__(self, workload: Workload, policy: str = "momentum", budget: int = 64, islands: int = 4,
                 seed: int = 0, db: SearchDB | None = None, run: str | None = None, space: Space | None = None,
                 ceilings: Ceilings = H200, params: MomentumParams | None = None, gpu: str | None = None, log=None,
                 versions: dict | None = None):
        g = workload.graph()
        space = space or Space(g)
        target = workload_cost(g, ceilings).floor_ms
        self.pol = make_policy(policy, space, target, seed, islands, params)
        self.budget, self.db, self.gpu, self.log, self.versions = budget, db, gpu, log, versions
        self.run = run or run_name(policy, islands, seed)
        self.prev = db.results(workload.key, self.run, gpu) if db is not None else {}
        self.db_error: DBError | None = None  # the first failed write; no writes after it
        self.res = SearchResult(workload, self.run, None, math.inf, target, 0, 0, 0)
        self._props: list = []
        self._cached: list = []
        self._stalled = False  # the policy proposed nothing
        self._t0 = 0.0

    @property
    def done(self) -> bool:
        return self._stalled or self.res.evaluated >= self.budget or self.pol.exhausted()

    def propose(self) -> list[Point]:
        """The next batch's points that are not in the DB yet (possibly none: all replayed)."""
        self._props = self.pol.propose()[: self.budget - self.res.evaluated]
        self._stalled = not self._props
        self._cached = [self.prev.get(p.point) for p in self._props]
        self._t0 = time.time()
        return [p.point for p, c in zip(self._props, self._cached) if c is None]

    def observe(self, measured: list) -> None:
        """Results for the points the last `propose()` returned, in its order."""
        res, fresh = self.res, iter(measured)
        for prop, c in zip(self._props, self._cached):
            m = c if c is not None else next(fresh)
            step = res.evaluated
            res.evaluated += 1
            if c is None:
                res.new += 1
                self._write(lambda db: db.append(res.workload.key, self.run, prop.point, m, prop.island, step,
                                                 prop.why, self.gpu, versions=self.versions))
            else:
                res.replayed += 1
            self.pol.observe(prop, m.score)
            if m.score < res.best_ms:
                res.best, res.best_ms = prop.point, m.score
            res.history.append({"step": step, "island": prop.island, "why": prop.why, "point": str(prop.point),
                                "ok": m.ok, "time_ms": m.time_ms, "best_ms": res.best_ms, "replayed": c is not None})
        self._write(lambda db: db.add_events(res.workload.key, self.run, self.pol.events, self.gpu))
        if self.log and any(c is None for c in self._cached):
            self.log(f"{res.workload.arch} {self.run}: {res.evaluated}/{self.budget} evaluated, best "
                     f"{res.best_ms:.4f} ms ({res.best}), target {res.target_ms:.4f} ms, "
                     f"batch {time.time() - self._t0:.1f} s")
        self._props, self._cached = [], []

    def _write(self, fn) -> None:
        if self.db is not None and self.db_error is None:
            try:
                fn(self.db)
            except DBError as e:
                self.db_error = e

    def start_from(self, point: Point, m) -> None:
        """The shipped default plan's measurement (run_lockstep takes it first): the best to beat
        from the start, in the history as step -1 (outside the point budget, unknown to the policy,
        which proposes only points of its domains)."""
        res = self.res
        if m.ok and m.score < res.best_ms:
            res.best, res.best_ms = point, m.score
        res.history.append({"step": -1, "island": -1, "why": "shipped default", "point": str(point), "ok": m.ok,
                            "time_ms": m.time_ms, "best_ms": res.best_ms, "replayed": False})
        if self.log:
            self.log(f"{res.workload.arch}: the shipped default {point} " +
                     (f"runs {m.time_ms:.4f} ms: the point to beat" if m.ok else f"did not verify ({m.error})"))

    def result(self) -> SearchResult:
        self.res.events = list(self.pol.events)
        return self.res


def run_search(workload: Workload, measurer, policy: str = "momentum", budget: int = 64, islands: int = 4,
               seed: int = 0, db: SearchDB | None = None, run: str | None = None, space: Space | None = None,
               ceilings: Ceilings = H200, params: MomentumParams | None = None, log=None) -> SearchResult:
    r = SearchRun(workload, policy, budget, islands, seed, db, run, space, ceilings, params,
                  getattr(measurer, "gpu_name", None), log, getattr(measurer, "versions", None))
    return run_lockstep([r], measurer)[0]


def run_lockstep(runs: list[SearchRun], measurer, seconds: float | None = None, log=None,
                 from_default: bool = False) -> list[SearchResult]:
    """With `from_default`, first the shipped default plan of each workload (default_point),
    measured: the point to beat (`leantile search` does). Then every run advances one batch per
    round; the round's distinct points of every workload are measured in one call
    (measure_batches: one compile pool for all), as are the defaults. Each run sees exactly what
    it would see alone (the policies are deterministic given their observations), so lockstep
    changes wall time, not results. `seconds`: no round starts past this time budget (a round is a batch of compiles
    and timings: the budget is overrun by one round at most); `log` gets a line per round with
    the time left."""
    t0 = time.time()
    by_wl: dict[Workload, list[SearchRun]] = {}
    for r in runs:
        by_wl.setdefault(r.res.workload, []).append(r)
    if from_default:  # every workload's default in one batch: their compiles share the cores
        bases = {wl: default_point(wl) for wl in by_wl}
        measured = measure_batches(measurer, [(wl, [base]) for wl, base in bases.items()])
        for (wl, base), (m,) in zip(bases.items(), measured):
            for r in by_wl[wl]:
                r.start_from(base, m)
    rounds = 0
    while True:
        live = [r for r in runs if not r.done]
        spent = time.time() - t0
        if live and seconds is not None and spent >= seconds:
            if log:
                log(f"search: time budget of {seconds:.0f} s spent after {rounds} round(s); "
                    f"{len(live)} workload(s) stop early with their best so far")
            live = []
        if not live:
            return [r.result() for r in runs]
        if log and rounds:
            per = spent / rounds  # seconds a round, so far
            left = max(math.ceil((r.budget - r.res.evaluated) / max(1.0, r.res.evaluated / rounds)) for r in live)
            eta = per * left if seconds is None else min(per * left, seconds - spent)
            log(f"search: round {rounds + 1}, {spent:.0f} s spent{f' of {seconds:.0f}' if seconds else ''}, "
                f"{len(live)} workload(s) searching, about {eta:.0f} s left")
        rounds += 1
        asked = [(r, r.propose()) for r in live]
        by_wl: dict[Workload, dict[Point, None]] = {}  # ordered sets: the round's distinct points
        for r, pts in asked:
            by_wl.setdefault(r.res.workload, {}).update(dict.fromkeys(pts))
        batches = [(wl, list(pts)) for wl, pts in by_wl.items() if pts]
        got = {(wl, p): m for (wl, pts), ms in zip(batches, measure_batches(measurer, batches))
               for p, m in zip(pts, ms)}
        for r, pts in asked:
            r.observe([got[(r.res.workload, p)] for p in pts])
        failed = next((r.db_error for r in runs if r.db_error is not None), None)
        if failed is not None:  # every run has observed the round: their bests are complete
            raise failed


def point_entry(wl: Workload, point: Point, time_ms: float, gpu: str | None, **provenance) -> dict:
    """A tuned entry for one measured point (leantile.tuned); ValueError for an
    impossible time (<= 0, NaN, inf) or anything else leantile.tuned would not read back."""
    if not valid_time(time_ms):
        raise ValueError(f"refusing a tuned entry for {point} with time {time_ms!r} ms: not a finite positive time")
    t = round(time_ms, 6) or time_ms  # a time under 5e-7 ms is kept as it is, never rounded to 0
    return check_entry({"arch": wl.arch, "shape": dict(wl.sizes), "dtype": wl.dtype, "gpu": gpu or "unknown",
                        "candidate": point.candidate, "tiles": point.tile_dict, "time_ms": t, **provenance})


def default_point(wl: Workload) -> Point:
    """The plan leantile ships for the workload where no tuned entry exists (the cost model's
    candidate at the shape's tiles, leantile.cost.choose) as a point: its schedule (swap_operands,
    overlap) and blocks off the search's domains (a 16-row tile) included. A search's best is
    saved only where it beats this point, measured in the same run (cli.search)."""
    from ..tuned import shipped_plan
    from .space import ORDER

    plan = shipped_plan(wl.graph(), tuned=False)[0]
    return Point.make(plan.candidate, {p: v for p, v in plan.tiles.items() if p in ORDER})


def tuned_entry(res: SearchResult, gpu: str | None) -> dict | None:
    """The run's top-1 as a tuned entry; None when no point verified with a possible time."""
    if res.best is None or not valid_time(res.best_ms):
        return None
    return point_entry(res.workload, res.best, res.best_ms, gpu, roofline_ms=round(res.target_ms, 6),
                       search={"run": res.run, "evaluated": res.evaluated})
