"""GPU checks (marker gpu; skipped without CUDA) of GEMM kernels that keep their accumulator
transposed (plan.passes.swap_operands, tile parameter swap_ab): acc^T = W^T X^T on the tensor
cores, stored through a transposing shared tile. The interpreter ignores the layout (values do
not depend on it), so only the GPU can tell a wrong transpose: every fused candidate of every
GEMM architecture at few rows (1, 7, 16: the shape's default tiles are the swapped ones), at
aligned and at odd sizes, the default plan among them; and the swap asked at wider row tiles.
leantile.compile's verify: outputs NaN-poisoned, fresh random inputs.

    pytest -m gpu tests/gpu/test_swap_ab_gpu.py   (on the device)
"""
import pytest

import leantile
from leantile import architectures
from leantile.derive import candidates, derive

from gpu_checks import verify_all

pytestmark = pytest.mark.gpu

GEMMS = [n for n in architectures.NAMES if not any(w in n for w in ("attention",))]
SIZES = [{"m": 1, "d": 512, "n": 384}, {"m": 7, "d": 137, "n": 201}, {"m": 16, "d": 1024, "n": 520}]


@pytest.mark.parametrize("name", GEMMS)
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "x".join(map(str, s.values())))
def test_every_candidate_is_exact_with_swapped_accumulators(name, sizes):
    g = architectures.build(name, **{a: v for a, v in sizes.items() if a in architectures.module(name).DEFAULT_SIZES})
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    # each candidate at its shape's tiles: the swapped ones wherever its GEMM kernels can swap
    assert any(k.swapped for c in cands for k in derive(g, c).kernels), name
    assert verify_all([(g, c) for c in cands]) == []
    assert leantile.compile(g).verify(seed=7)["ok"]  # the default plan (the cost model's pick)


@pytest.mark.parametrize("block_m,threads", [(32, 128), (64, 128), (128, 256)])
def test_swap_asked_at_wider_row_tiles_is_exact(block_m, threads):
    """The swap is a layout: at 40 rows (two or one row tiles, the last partial) it must give
    the same values at any row tile."""
    g = architectures.build("swiglu", m=40, d=320, n=200)
    tiles = {"block_m": block_m, "block_n": 128, "stages": 3, "threads": threads, "swap_operands": 1}
    k = leantile.compile(g, candidate="fused", tiles=tiles)
    assert any(x.swapped for x in k.plan.kernels)
    assert k.verify(seed=8)["ok"]
