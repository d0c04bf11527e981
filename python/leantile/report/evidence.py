"""Numeric evidence, computed on the spot: for each candidate derivation, N random examples
(small random sizes, tile sizes and inputs; fixed seeds) of interp(plan) vs the reference,
in float64 and float32, and the largest relative error per dtype."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from .. import interp, ir, reference
from ..derive import candidates, replay

DTYPES = {"float64": (torch.float64, 1e-9), "float32": (torch.float32, 1e-4)}
TILE_CHOICES = {"block_m": (1, 2, 3, 4, 8), "block_n": (1, 2, 3, 5, 8), "block_k": (1, 2, 3, 4, 8)}


@dataclass(frozen=True)
class Result:
    candidate: str
    dtype: str
    examples: int
    max_rel_err: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_rel_err < self.tolerance


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Norm-wise relative error, floored as in tests/cpu/test_equivalence.py."""
    floor = 1e-3 * ref.numel() ** 0.5
    return ((out - ref).norm() / max(ref.norm().item(), floor)).item()


def _resize(g: ir.Graph, sizes: dict[str, int]) -> ir.Graph:
    """The same graph with other axis sizes (re-validated)."""
    data = g.model_dump(mode="json", by_alias=True)
    data["axes"] = {a: sizes[a] for a in g.axes}
    return ir.parse(data)


def property_check(g: ir.Graph, examples: int = 4, seed: int = 0, max_size: int = 9) -> list[Result]:
    rng = random.Random(seed)
    cands = candidates(g)
    worst = {(c.name, d): 0.0 for c in cands for d in DTYPES}
    for _ in range(examples):
        small = _resize(g, {a: rng.randint(1, max_size) for a in sorted(g.axes)})
        tiles = {k: rng.choice(v) for k, v in sorted(TILE_CHOICES.items())}
        inputs = reference.random_inputs(small, seed=rng.randrange(2**31))
        ref = reference.evaluate(small, inputs, compute_dtype=torch.float64)
        for c in cands:
            plan = replay(small, c.steps, tiles, c.name)
            for d, (dt, _) in DTYPES.items():
                out = interp.run(plan, {k: v.to(dt) for k, v in inputs.items()}, dtype=dt)
                err = max((rel_err(out[o].double(), ref[o]) if torch.isfinite(out[o]).all() else float("inf"))
                          for o in small.outputs)
                worst[c.name, d] = max(worst[c.name, d], err)
    return [Result(c, d, examples, e, DTYPES[d][1]) for (c, d), e in worst.items()]
