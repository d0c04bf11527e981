"""Numeric evidence, computed on the spot: for each candidate derivation, N random examples
(small random sizes, tile sizes and inputs; fixed seeds) of interp(plan) vs the reference,
in float64 and float32, and the largest relative error per dtype (leantile.tolerance: the one
error definition and tolerance table; in float32 the reference computed in float32 gives the
rounding that is forgiven).

An example's sizes are drawn in 1..max_size, never above the graph's own size (a size-1 axis
stays 1), and then shrunk until no tensor of the graph has more than MAX_ELEMENTS elements (a
graph over 40 axes would otherwise ask for 9**40 of them)."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from .. import interp, ir, reference
from ..derive import candidates, replay
from ..tolerance import TOLERANCE, rel_err

DTYPES = {"float64": torch.float64, "float32": torch.float32}
MAX_ELEMENTS = 1 << 11  # the largest tensor of one example (built-ins: at most 9**3 = 729)
TILE_CHOICES = {"block_m": (1, 2, 3, 4, 8), "block_n": (1, 2, 3, 5, 8), "block_k": (1, 2, 3, 4, 8)}


@dataclass(frozen=True)
class Result:
    candidate: str
    dtype: str
    examples: int
    max_rel_err: float  # beyond the unfused graph's own rounding in this dtype (what is judged)
    tolerance: float
    error: str = ""  # the interpreter or the reference failed on this graph: shown, counted as FAIL
    max_plain_rel_err: float = 0.0  # against the float64 reference, nothing forgiven

    @property
    def ok(self) -> bool:
        return not self.error and self.max_rel_err <= self.tolerance


def _resize(g: ir.Graph, sizes: dict[str, int]) -> ir.Graph:
    """The same graph with other axis sizes (all in 1..max_size: nothing to re-validate; a
    re-parse cost ~0.1 s per example on a 1000-node graph)."""
    return g.model_copy(update={"axes": {a: sizes[a] for a in g.axes}})


def _why(e: Exception) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[-1] if msg else ''}"[:300]


def small_sizes(g: ir.Graph, rng: random.Random, max_size: int = 9) -> dict[str, int]:
    """Random example sizes for g (see the module docstring)."""
    sizes = {a: min(rng.randint(1, max_size), g.axes[a]) for a in sorted(g.axes)}
    shapes = {tuple(n.axes) for n in g.nodes}

    def numel(axes):
        k = 1
        for a in axes:
            k *= sizes[a]
        return k

    while True:
        worst = max(shapes, key=numel, default=())
        if numel(worst) <= MAX_ELEMENTS:
            return sizes
        a = max(worst, key=lambda a: (sizes[a], a))  # halve its largest axis (names break ties)
        sizes[a] = max(1, sizes[a] // 2)


def property_check(g: ir.Graph, examples: int = 4, seed: int = 0, max_size: int = 9) -> list[Result]:
    """A candidate whose plan cannot be built or run on an example (or a graph the reference
    cannot evaluate) is a FAIL with its error, not a crash of the report."""
    rng = random.Random(seed)
    cands = candidates(g)
    worst = {(c.name, d): 0.0 for c in cands for d in DTYPES}
    plain = dict(worst)
    errors: dict[str, str] = {}
    for _ in range(examples):
        small = _resize(g, small_sizes(g, rng, max_size))
        tiles = {k: rng.choice(v) for k, v in sorted(TILE_CHOICES.items())}
        try:
            inputs = reference.random_inputs(small, seed=rng.randrange(2**31))
            ref = reference.evaluate(small, inputs, compute_dtype=torch.float64)
            same = {dt: reference.evaluate(small, inputs, compute_dtype=dt, check=False)
                    for dt in DTYPES.values() if dt != torch.float64}
        except Exception as e:
            for c in cands:
                errors.setdefault(c.name, "reference: " + _why(e))
            continue
        for c in cands:
            try:
                plan = replay(small, c.steps, tiles, c.name)
                for d, dt in DTYPES.items():
                    out = interp.run(plan, {k: v.to(dt) for k, v in inputs.items()}, dtype=dt)
                    err = max(rel_err(out[o], ref[o], same[dt][o] if dt in same else None) for o in small.outputs)
                    worst[c.name, d] = max(worst[c.name, d], err)
                    plain[c.name, d] = max([plain[c.name, d], *(rel_err(out[o], ref[o]) for o in small.outputs)])
            except Exception as e:
                errors.setdefault(c.name, _why(e))
    return [Result(c, d, examples, float("inf") if c in errors else e, TOLERANCE[DTYPES[d]], errors.get(c, ""),
                   float("inf") if c in errors else plain[c, d])
            for (c, d), e in worst.items()]
