"""GPU checks (marker gpu; skipped without CUDA) of the plans whose tiles come from the shape
(derive/shape_tiles.py) and of head dimensions that are no whole number of MMA pieces (their
GEMMs on the CUDA cores): the shipped default at such shapes matches the float32 reference on
fresh random inputs, outputs NaN-poisoned (leantile.compile's verify). Written 2026-11-25 on a
machine without a GPU budget left: run it on the device (`pytest -m gpu tests/gpu`)."""
import pytest

import leantile
from leantile import architectures
from leantile.derive import candidates, derive
from leantile.derive.shape_tiles import (FLASH_OVERLAP_TILES, FLASH_SMALL_GRID_TILES, FLASH_WIDE_KEYS,
                                         FLASH_WIDE_TILES)
from strategies import biased_attention

pytestmark = pytest.mark.gpu

SHAPED = [  # (architecture, sizes, the tiles the default must have)
    ("attention", {"h": 2, "t_q": 200, "t_kv": FLASH_WIDE_KEYS + 52, "d_h": 128}, FLASH_OVERLAP_TILES),
    ("gqa_attention", {"h_kv": 2, "g": 4, "t_q": 136, "t_kv": FLASH_WIDE_KEYS + 200, "d_h": 128}, FLASH_OVERLAP_TILES),
    ("biased_attention", {"h": 2, "t_q": 200, "t_kv": FLASH_WIDE_KEYS + 52}, FLASH_WIDE_TILES),
    ("attention", {"h": 3, "t_q": 300, "t_kv": 520, "d_h": 64}, FLASH_SMALL_GRID_TILES),
]


@pytest.mark.parametrize("arch,sizes,want", SHAPED, ids=[f"{a}-{s}" for a, s, _ in SHAPED])
def test_shape_tiled_attention_default_is_exact(arch, sizes, want):
    """Each unsplit flash candidate at its default tiles (a grid this small ranks the split
    plans first; at the shapes people run these tiles are the default)."""
    g = biased_attention(**sizes) if arch == "biased_attention" else architectures.build(arch, **sizes)
    for c in [c.name for c in candidates(g) if not c.name.endswith("split") and c.name != "unfused"]:
        k = leantile.compile(g, candidate=c)
        assert {p: k.plan.tiles[p] for p in want} == want, (c, k.plan.tiles)
        for seed in (3, 4):
            v = k.verify(seed=seed)
            assert v["ok"], (c, k.plan.tiles, v)


@pytest.mark.parametrize("arch,sizes", [(a, s) for a, s, _ in SHAPED], ids=[f"{a}-{s}" for a, s, _ in SHAPED])
def test_shape_tiled_attention_shipped_default_is_exact(arch, sizes):
    g = biased_attention(**sizes) if arch == "biased_attention" else architectures.build(arch, **sizes)
    k = leantile.compile(g, tuned=False)
    for seed in (3, 4):
        v = k.verify(seed=seed)
        assert v["ok"], (k.plan.candidate, k.plan.tiles, v)


@pytest.mark.parametrize("d_h", [17, 24, 40, 72, 80])
def test_head_dimensions_off_the_mma_grid_run_exact(d_h):
    k = leantile.compile(architectures.build("attention", h=2, t_q=70, t_kv=130, d_h=d_h), tuned=False)
    v = k.verify(seed=d_h)
    assert v["ok"], (k.plan.candidate, k.plan.tiles, v)


# one wave of 64-row tiles (shape_tiles.wave_tiles), every axis off the tiles: (arch, sizes, columns)
WAVE = [
    ("matmul", {"m": 129, "d": 520, "n": 4000}, 96),  # 3 row tiles, the last of one row; 126 CTAs
    ("rmsnorm", {"m": 200, "d": 1000, "n": 6000}, 192),
    ("layernorm_linear_gelu", {"m": 100, "d": 776, "n": 3000}, 64),
    ("matmul", {"m": 2000, "d": 760, "n": 760}, 192),  # a c_proj-like narrow output
    ("matmul", {"m": 130, "d": 300, "n": 4000}, 96),  # a short contraction: 64-deep k steps
]


@pytest.mark.parametrize("arch,sizes,columns", WAVE, ids=[f"{a}-{s}" for a, s, _ in WAVE])
def test_one_wave_tiles_are_exact(arch, sizes, columns):
    """Every fused candidate at the shape's one-wave tiles (64 rows, 128 threads; 128-deep k steps
    3 or 4 stages deep over a contraction of 512 or more, else 64-deep 6 stages deep), and the
    shipped default, against the float32 reference with partial row, column and k tiles."""
    from gpu_checks import verify_all
    g = architectures.build(arch, **sizes)
    cands = [c.name for c in candidates(g) if c.name != "unfused"]
    deep = (128, 3 if columns == 192 else 4) if sizes["d"] >= 512 else (64, 6)
    for c in cands:
        tiles = derive(g, c).tiles
        assert (tiles["block_m"], tiles["block_n"], tiles["block_k"], tiles["stages"]) == (64, columns, *deep), (c, tiles)
    assert verify_all([(g, c) for c in cands]) == []
    k = leantile.compile(g, tuned=False)
    assert (k.plan.tiles["block_m"], k.plan.tiles["block_n"]) == (64, columns), k.plan.tiles
    assert k.verify(seed=9)["ok"]
