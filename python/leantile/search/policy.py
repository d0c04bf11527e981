"""Search policies: momentum-guided islands (after PACEvolve) and random search.

A policy proposes a batch of points (one per island, so a batch compiles in parallel and
fills the GPUs), then observes each result. It never proposes a point already measured.
Both policies are deterministic given their seed and the results they observe, so a search
is resumed by replaying its database (driver.py).

Momentum policy, per island:
  - it walks from its current state (a point and its time) to a neighbour (space.neighbours);
    an improvement over the current state becomes the new state (appended to its history);
    the island also keeps its best;
  - relative progress of a step r = (cur - new) / (cur - target), clipped to [0, 1]
    (target = the roofline floor): the share of the remaining gap this step closed;
  - momentum m <- beta * m + (1 - beta) * r;
  - when m < threshold the island intervenes, chosen by absolute progress
    a = target / best (1 = at the roofline): an island behind a better one crosses over
    with a better island (sampled by a) and continues from the child; the leading island
    backtracks to an earlier state of its history (a random one of the earlier states,
    or a fresh random point when it has none) and explores another direction.
    Momentum is reset to `init_momentum` after an intervention.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .space import Point, Space

INF = float("inf")


@dataclass(frozen=True)
class Proposal:
    island: int
    point: Point
    why: str  # "init", "mutate", "explore", "crossover", "backtrack", "restart", "random"


@dataclass(frozen=True)
class MomentumParams:
    # EWMA weight of the past. 0.5: three stagnant steps after a good one drop m from 1 to
    # 0.125; the budget is tens of measurements per island, so patience must be short.
    beta: float = 0.5
    # Intervene below this. A step that closes 10% of the gap to the floor is "progress";
    # with beta 0.5 a stuck island intervenes after 4 flat steps (0.5^4 = 0.06 < 0.1).
    threshold: float = 0.1
    # Momentum of a fresh island or after an intervention: a grace period of ~3 steps.
    init_momentum: float = 1.0
    # Probability of a two-step mutation instead of one neighbour: escapes plateaus where
    # a single parameter change is invalid or neutral (e.g. block_m with threads).
    explore: float = 0.2
    # How often the lagging island crosses over (else it backtracks like the leader).
    crossover_prob: float = 0.8


@dataclass
class Island:
    id: int
    current: Point | None = None
    current_t: float = INF
    best: Point | None = None
    best_t: float = INF
    history: list[tuple[Point, float]] = field(default_factory=list)
    momentum: float = 1.0
    steps: int = 0
    pending: tuple[Point, str] | None = None  # a move decided by an intervention


class Policy:
    name = "policy"

    def __init__(self, space: Space, target_ms: float, seed: int = 0):
        self.space, self.target, self.rng = space, float(target_ms), random.Random(seed)
        self.measured: dict[Point, float] = {}
        self.events: list[dict] = []

    def _unmeasured_random(self) -> Point | None:
        left = [p for p in self.space.all if p not in self.measured]
        return self.rng.choice(left) if left else None

    def exhausted(self) -> bool:
        return len(self.measured) >= len(self.space)

    def propose(self) -> list[Proposal]:
        raise NotImplementedError

    def observe(self, prop: Proposal, time_ms: float) -> None:
        raise NotImplementedError

    def best(self) -> tuple[Point | None, float]:
        ok = [(t, p) for p, t in self.measured.items() if math.isfinite(t)]
        if not ok:
            return None, INF
        t, p = min(ok)
        return p, t


class RandomPolicy(Policy):
    """Uniform random unmeasured points, `batch` per round; the default point first, so
    both policies start from the same prior."""
    name = "random"

    def __init__(self, space: Space, target_ms: float, seed: int = 0, batch: int = 4):
        super().__init__(space, target_ms, seed)
        self.batch = batch

    def propose(self) -> list[Proposal]:
        out, taken = [], set()
        if not self.measured:
            d = self.space.default()
            out.append(Proposal(0, d, "init"))
            taken.add(d)
        while len(out) < self.batch:
            left = [p for p in self.space.all if p not in self.measured and p not in taken]
            if not left:
                break
            p = self.rng.choice(left)
            taken.add(p)
            out.append(Proposal(len(out), p, "random"))
        return out

    def observe(self, prop: Proposal, time_ms: float) -> None:
        self.measured[prop.point] = time_ms


class MomentumPolicy(Policy):
    name = "momentum"

    def __init__(self, space: Space, target_ms: float, seed: int = 0, islands: int = 4,
                 params: MomentumParams | None = None):
        super().__init__(space, target_ms, seed)
        self.params = params or MomentumParams()
        self.islands = [Island(i, momentum=self.params.init_momentum) for i in range(max(1, islands))]
        self.round = 0

    # ----------------------------------------------------------------- progress
    def relative_progress(self, prev: float, new: float) -> float:
        if not math.isfinite(new):
            return 0.0
        if not math.isfinite(prev):
            return 1.0
        gap = prev - self.target
        if gap <= 0:
            return 1.0 if new < prev else 0.0
        return min(1.0, max(0.0, (prev - new) / gap))

    def absolute_progress(self, isl: Island) -> float:
        return self.target / isl.best_t if math.isfinite(isl.best_t) and isl.best_t > 0 else 0.0

    # ----------------------------------------------------------------- moves
    def _start(self, isl: Island) -> tuple[Point, str]:
        c = self.space.candidates
        if isl.id < len(c):  # island i starts at candidate i's default tiles
            return self.space.default(c[isl.id]), "init"
        return self.space.random(self.rng), "init"

    def _fresh(self, p: Point | None, taken: set) -> bool:
        return p is not None and p not in self.measured and p not in taken

    def _move(self, isl: Island, taken: set) -> tuple[Point, str] | None:
        if isl.pending is not None:
            p, why = isl.pending
            isl.pending = None
            if self._fresh(p, taken):
                return p, why
        if isl.current is None:
            p, why = self._start(isl)
            if self._fresh(p, taken):
                return p, why
        base = isl.current or self.space.default()
        steps = 2 if self.rng.random() < self.params.explore else 1
        nbs = [q for q in self.space.neighbours(base) if self._fresh(q, taken)]
        if steps == 2 or not nbs:
            for _ in range(8):  # two-step moves (or beyond an exhausted neighbourhood)
                q = self.space.mutate(base, self.rng, 2)
                if self._fresh(q, taken):
                    return q, "explore"
        if nbs:
            return self.rng.choice(nbs), "mutate"
        # the neighbourhood is exhausted: that is stagnation; intervene now
        self._intervene(isl, reason="exhausted")
        if isl.pending is not None and self._fresh(isl.pending[0], taken):
            p, why = isl.pending
            isl.pending = None
            return p, why
        p = self._unmeasured_random_excluding(taken)
        return (p, "restart") if p is not None else None

    def _unmeasured_random_excluding(self, taken: set) -> Point | None:
        left = [p for p in self.space.all if p not in self.measured and p not in taken]
        return self.rng.choice(left) if left else None

    def propose(self) -> list[Proposal]:
        self.round += 1
        out, taken = [], set()
        for isl in self.islands:
            m = self._move(isl, taken)
            if m is None:
                continue
            taken.add(m[0])
            out.append(Proposal(isl.id, m[0], m[1]))
        return out

    def observe(self, prop: Proposal, time_ms: float) -> None:
        self.measured[prop.point] = time_ms
        isl = self.islands[prop.island]
        isl.steps += 1
        r = self.relative_progress(isl.current_t, time_ms)
        p = self.params
        isl.momentum = p.beta * isl.momentum + (1 - p.beta) * r
        # a crossover child or restart point becomes the state to walk from, even if worse:
        # that is the point of the jump
        adopt = time_ms < isl.current_t or (prop.why in ("crossover", "restart") and math.isfinite(time_ms))
        if adopt:
            isl.current, isl.current_t = prop.point, time_ms
            isl.history.append((prop.point, time_ms))
        if time_ms < isl.best_t:
            isl.best, isl.best_t = prop.point, time_ms
        if isl.momentum < p.threshold:
            self._intervene(isl, reason=f"momentum {isl.momentum:.3f} < {p.threshold}")

    def _intervene(self, isl: Island, reason: str) -> None:
        a_self = self.absolute_progress(isl)
        better = [j for j in self.islands if j.id != isl.id and self.absolute_progress(j) > a_self
                  and j.best is not None]
        ev = {"island": isl.id, "round": self.round, "step": isl.steps, "global_step": len(self.measured),
              "reason": reason,
              "momentum": round(isl.momentum, 4), "abs_progress": round(a_self, 4)}
        if better and self.rng.random() < self.params.crossover_prob:
            w = [self.absolute_progress(j) for j in better]
            mate = self.rng.choices(better, weights=w)[0]
            base = isl.current or isl.best or mate.best
            child = self.space.crossover(base, mate.best, self.rng)
            tries = 0
            while child in self.measured and tries < 8:
                child = self.space.mutate(child, self.rng, 1)
                tries += 1
            isl.pending = (child, "crossover")
            ev.update(kind="crossover", mate=mate.id, parents=[str(base), str(mate.best)], child=str(child))
        else:
            earlier = isl.history[:-1]
            if earlier:
                pt, t = self.rng.choice(earlier)
                isl.current, isl.current_t = pt, t
                ev.update(kind="backtrack", to=str(pt), to_ms=t)
            else:
                fresh = self._unmeasured_random()
                if fresh is not None:
                    isl.pending = (fresh, "restart")
                ev.update(kind="restart", to=str(fresh))
        isl.momentum = self.params.init_momentum
        self.events.append(ev)


def make_policy(name: str, space: Space, target_ms: float, seed: int = 0, islands: int = 4,
                params: MomentumParams | None = None) -> Policy:
    if name == "momentum":
        return MomentumPolicy(space, target_ms, seed, islands, params)
    if name == "random":
        return RandomPolicy(space, target_ms, seed, batch=islands)
    raise ValueError(f"unknown policy {name!r} (momentum or random)")
