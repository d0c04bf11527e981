"""A graph node's elementwise statement (node_map), and a flash kernel's score function's
(score_map: forward and backward), where a division by a constant is a multiply by its reciprocal.

x / c is an IEEE division in CUDA: a reciprocal on the multi-function unit, Newton steps and a
check, about ten instructions. In a score function it runs once per score beside the softmax's
exp2, on the same unit. x * (1 / c) is one multiply, within an ulp of it (x / c = x * c^-1 over
the reals: Mathlib's `div_eq_mul_inv`). H200: the scaled attention backward ran 0.74 ms with the
division against 0.43 without it, same tiles
(benchmarks/flash_backward/results/variants-h200-2026-11-29-first.json).

An ulp matters where a comparison reads the quotient: `s / c >= t` may flip where the IEEE
quotient is exactly t, and a flipped mask is no rounding error but a key dropped or kept. So the
reciprocal is taken only where no comparison, and no select's condition, reads the quotient
through the score function's elementwise nodes; past them the value goes to the softmax and the
GEMMs, which are continuous in it.
"""
from __future__ import annotations

import math

from .. import ir
from ..ir.ops import COMPARISONS
from ..plan import Iota, Map
from .context import Ctx


def node_map(n: ir.Node, dst: str, args: tuple, **fields) -> Map | Iota:
    """Node n's elementwise statement: dst = n.op(args). A cast names its dtype, so that it
    rounds there in registers as the unfused plan's store of it does (every candidate rounds a
    cast: Ctx.rounds_to_own_dtype, reference.plan_rounded); a conversion to the fragment's
    float32 alone kept an f16 cast's 7e10 where the unfused plan held inf (gpu-fuzz s24)."""
    if isinstance(n, ir.Cast):
        return Map(dst=dst, fn="cast", args=tuple(args), dtype=n.dtype, **fields)
    if isinstance(n, ir.Iota):  # positions from the tile's coordinates (a GEMM epilogue's triu mask)
        return Iota(dst=dst, axis=n.axis, **fields)
    return Map(dst=dst, fn=n.op, args=tuple(args), **fields)


def reaches_comparison(cx: Ctx, i: int, within) -> bool:
    """Whether a comparison, or a select's condition, reads node i's value through nodes of
    `within` (the score function): the walk follows users inside it and stops at its edge."""
    seen, stack = {i}, [i]
    while stack:
        j = stack.pop()
        for u in cx.users[j]:
            n = cx.node(u)
            if isinstance(n, ir.Binary) and n.op in COMPARISONS:
                return True
            if isinstance(n, ir.Select) and n.cond == j:
                return True
            if u in within and u not in seen:
                seen.add(u)
                stack.append(u)
    return False


def score_map(cx: Ctx, i: int, dst: str, args: tuple, within, **fields) -> Map | Iota:
    """Node i's statement in a score function: node_map, but a division by a finite nonzero
    literal whose quotient no comparison reads (reaches_comparison) is a multiply by its
    reciprocal."""
    n = cx.node(i)
    if (isinstance(n, ir.Binary) and n.op == "div" and str(args[1]).startswith("#")
            and not reaches_comparison(cx, i, within)):
        c = float(args[1][1:])
        if c != 0.0 and math.isfinite(c) and math.isfinite(1.0 / c):
            return Map(dst=dst, fn="mul", args=(args[0], f"#{1.0 / c!r}"), **fields)
    return node_map(n, dst, args, **fields)
