"""The search loop: propose a batch -> replay from the DB or measure -> observe.

Budget = number of points evaluated in a run (a point that fails to compile counts: it cost
compile time). Resuming: the policy is deterministic given its seed and what it observes, so
running it again against the same run's rows reproduces the stopped search exactly (each
proposal is answered from the DB) and then continues with new measurements.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from .. import architectures, ir
from .db import SearchDB
from .policy import MomentumParams, make_policy
from .roofline import H200, Ceilings, workload_cost
from .space import Point, Space


@dataclass(frozen=True)
class Workload:
    arch: str
    sizes: tuple[tuple[str, int], ...]  # the full shape, sorted
    dtype: str = "f16"

    @staticmethod
    def builtin(arch: str, sizes: dict | None = None) -> "Workload":
        g = architectures.build(arch, **(sizes or {}))
        dt = g.inputs()[0].dtype if g.inputs() else "f16"
        return Workload(arch, tuple(sorted(g.axes.items())), dt)

    def graph(self) -> ir.Graph:
        return architectures.build(self.arch, **dict(self.sizes))

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


def run_search(workload: Workload, measurer, policy: str = "momentum", budget: int = 64, islands: int = 4,
               seed: int = 0, db: SearchDB | None = None, run: str | None = None, space: Space | None = None,
               ceilings: Ceilings = H200, params: MomentumParams | None = None, log=None) -> SearchResult:
    g = workload.graph()
    space = space or Space(g)
    target = workload_cost(g, ceilings).floor_ms
    pol = make_policy(policy, space, target, seed, islands, params)
    run = run or run_name(policy, islands, seed)
    prev = db.results(workload.key, run) if db is not None else {}
    gpu = getattr(measurer, "gpu_name", None)
    res = SearchResult(workload, run, None, math.inf, target, 0, 0, 0)
    while res.evaluated < budget and not pol.exhausted():
        props = pol.propose()[: budget - res.evaluated]
        if not props:
            break
        cached = [prev.get(p.point) for p in props]
        todo = [p.point for p, c in zip(props, cached) if c is None]
        t0 = time.time()
        fresh = iter(measurer.measure(workload, todo) if todo else [])
        for prop, c in zip(props, cached):
            m = c if c is not None else next(fresh)
            step = res.evaluated
            res.evaluated += 1
            if c is None:
                res.new += 1
                if db is not None:
                    db.append(workload.key, run, prop.point, m, prop.island, step, prop.why, gpu)
            else:
                res.replayed += 1
            pol.observe(prop, m.score)
            if m.score < res.best_ms:
                res.best, res.best_ms = prop.point, m.score
            res.history.append({"step": step, "island": prop.island, "why": prop.why, "point": str(prop.point),
                                "ok": m.ok, "time_ms": m.time_ms, "best_ms": res.best_ms, "replayed": c is not None})
        if db is not None:
            db.add_events(workload.key, run, pol.events)
        if log and todo:
            log(f"{workload.arch} {run}: {res.evaluated}/{budget} evaluated, best "
                f"{res.best_ms:.4f} ms ({res.best}), target {target:.4f} ms, batch {time.time() - t0:.1f} s")
    res.events = list(pol.events)
    return res


def tuned_entry(res: SearchResult, gpu: str | None) -> dict | None:
    if res.best is None:
        return None
    return {"arch": res.workload.arch, "shape": dict(res.workload.sizes), "dtype": res.workload.dtype,
            "gpu": gpu or "unknown", "candidate": res.best.candidate, "tiles": res.best.tile_dict,
            "time_ms": round(res.best_ms, 6), "roofline_ms": round(res.target_ms, 6),
            "search": {"run": res.run, "evaluated": res.evaluated}}


def _dumps(x) -> str:
    return json.dumps(x, indent=1, sort_keys=True) + "\n"
